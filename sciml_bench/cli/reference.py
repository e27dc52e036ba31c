"""The ``reference`` command: the tight reference solution and gradient of a problem."""

from __future__ import annotations

import json

import click

from sciml_bench.cli.options import load_problem, sized

#: gradient components `reference` prints before summarizing the rest
GRADIENT_LINES = 10


@click.command(name="reference")
@click.argument("problem", required=False)
@click.option("--problem-file", type=click.Path(), help="A problem file instead of a name.")
@click.option("--refresh", is_flag=True, help="Rebuild instead of reading the cache.")
@click.option("--json", "as_json", is_flag=True, help="Print t, y, loss and gradient as JSON.")
@click.option("--size", type=click.IntRange(1, None), default=None,
              help="Array problems ([sizes]): the laddered size's value [the file's default].")
def reference_cmd(
    problem: str | None, problem_file: str | None, refresh: bool, as_json: bool,
    size: int | None = None,
) -> None:  # fmt: skip
    """Compute (or read from cache) the tight reference solution and gradient.

    Past a dozen parameters the gradient is summarized; --json prints every component.

    \b
    Examples:
      sciml-bench reference stiff-robertson
      sciml-bench reference stiff-robertson-ude --json | jq .gradient
      sciml-bench reference --problem-file my.toml --refresh
    """
    import numpy as np

    from sciml_bench.problem import reference

    p = sized(load_problem(problem, problem_file), size)
    ref = reference.get(p, refresh=refresh)
    doc = {
        "problem": p.name,
        "t": ref.t,
        "y": ref.y,
        "loss": ref.loss,
        "gradient": ref.gradient_by_name(p.param_names),
        "method": ref.method,
        "rtol": ref.rtol,
        "atol": ref.atol,
        "complex_step_agreement": ref.complex_step_agreement,
        "complex_step_skipped": ref.complex_step_skipped or None,
        "gradient_missing": ref.gradient_missing or None,
        "cached": ref.cached,
        "cache_path": ref.cache_path or None,
        "build_s": ref.build_s,
    }
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(f"{p.name}: {ref.method}")
    click.echo(f"  rtol={ref.rtol:g} atol={ref.atol:g}  loss={ref.loss:.12g}")
    grad = list(doc["gradient"].items())
    shown = grad if len(grad) <= GRADIENT_LINES + 2 else grad[:GRADIENT_LINES]
    for k, v in shown:
        click.echo(f"  dL/d{k} = {v:.12g}")
    if len(shown) < len(grad):
        rest = np.abs([v for _, v in grad[len(shown):]])
        click.echo(
            f"  ... {len(rest)} more components (|dL/dθ| from {rest.min():.3g} to "
            f"{rest.max():.3g}); --json prints every one"
        )
    if ref.gradient_missing:
        click.echo(f"  no reference gradient: {ref.gradient_missing}")
    if ref.complex_step_agreement is not None:
        click.echo(f"  FD vs complex step: max relative difference {ref.complex_step_agreement:.2e}")
    else:
        click.echo(f"  complex-step cross-check {ref.complex_step_skipped or 'not run'}")
    if ref.tolerance_note:
        click.echo(f"  note: {ref.tolerance_note}")
    click.echo(f"  {'read from' if ref.cached else 'cached at'} {ref.cache_path or '(not cached)'}")
