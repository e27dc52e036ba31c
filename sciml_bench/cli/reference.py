"""The ``reference`` command: the tight reference solution and gradient of a problem."""

from __future__ import annotations

import json
from typing import Any

import click

from sciml_bench.cli.options import load_problem, sbml_set_option, sized

#: gradient components `reference` prints before summarizing the rest
GRADIENT_LINES = 10


@click.command(name="reference")
@click.argument("problem", required=False)
@click.option("--problem-file", type=click.Path(), help="A problem file instead of a name.")
@click.option("--refresh", is_flag=True, help="Rebuild instead of reading the cache.")
@click.option("--json", "as_json", is_flag=True, help="Print t, y, loss and gradient as JSON.")
@click.option("--size", type=click.IntRange(1, None), default=None,
              help="Array problems ([sizes]): the laddered size's value [the file's default].")
@click.option("--sbml", "sbml_file", type=click.Path(dir_okay=False), default=None,
              help="An SBML model, imported as `sciml-bench import` does; with --variables.")
@click.option("--variables", default=None, metavar="ID,ID|all",
              help="--sbml: the SBML ids to print at the save points (species, compartments, "
              "parameters, assignment-rule variables, reaction rates), or all.")
@click.option("--amounts", default="", metavar="ID,ID",
              help="--sbml --variables: species printed as amounts (the others: the value "
              "their id has in math, a concentration unless hasOnlySubstanceUnits).")
@click.option("--t-end", type=click.FloatRange(0, None, min_open=True), default=None,
              help="--sbml: the end of the time span [the import's default].")
@sbml_set_option("settings", "--sbml: ")
def reference_cmd(
    problem: str | None, problem_file: str | None, refresh: bool, as_json: bool,
    size: int | None = None, sbml_file: str | None = None, variables: str | None = None,
    amounts: str = "", t_end: float | None = None, settings: tuple[str, ...] = (),
) -> None:  # fmt: skip
    """Compute (or read from cache) the tight reference solution and gradient.

    The gradient is full at every size (forward sensitivities, or an adjoint past a few
    thousand sensitivity unknowns), solved at two tolerances; their disagreement and an
    independent cross-check (complex step, central differences, or projections on 8
    seeded directions) give its own error estimate, which decides the smallest gradient
    error a row can be judged on. Past a dozen parameters the gradient is summarized;
    --json prints every component. Exit status 2 when there is no reference solution or
    no reference gradient (the message says which [reference] key to set).

    \b
    Examples:
      sciml-bench reference stiff-robertson
      sciml-bench reference stiff-robertson-ude --json | jq .gradient
      sciml-bench reference --problem-file my.toml --refresh
      sciml-bench reference --sbml model.xml --variables S1,obs,cell --amounts S1 --json
    """

    from sciml_bench.problem import reference

    if sbml_file is not None or variables is not None:
        _sbml_variables(sbml_file, variables, amounts, t_end, settings, refresh, as_json)
        return

    p = sized(load_problem(problem, problem_file), size)
    ref = reference.get_or_missing(p, refresh=refresh)
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
        "reference_error": ref.reference_error,
        "tolerance_error": ref.tolerance_error,
        "cross_check": ref.cross_check or None,
        "cross_check_agreement": ref.cross_check_agreement,
        "gradient_missing": ref.gradient_missing or None,
        "missing": ref.missing or None,
        "cached": ref.cached,
        "cache_path": ref.cache_path or None,
        "build_s": ref.build_s,
    }
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        _exit_if_missing(ref)
        return
    _exit_if_missing(ref, solution_only=True)
    _print_reference(p, ref, doc)
    _exit_if_missing(ref)


def _sbml_variables(path: str | None, variables: str | None, amounts: str,
                    t_end: float | None, settings: tuple[str, ...], refresh: bool,
                    as_json: bool) -> None:  # fmt: skip
    """``reference --sbml F --variables ...``: the SBML ids asked for at the save points,
    from the reference solution (or, for a model with no ODE state, as functions of t)."""
    from sciml_bench.cli.options import UserError
    from sciml_bench.problem.sbml import read
    from sciml_bench.problem.sbml import variables as sv

    if path is None or variables is None:
        raise UserError("--variables and --sbml go together: sciml-bench reference --sbml "
                        "model.xml --variables S1,S2 (or all)")  # fmt: skip
    ids = [v.strip() for v in variables.split(",") if v.strip()]
    doc = sv.of_model(path, ids, [a.strip() for a in amounts.split(",") if a.strip()], t_end,
                      read.parse_settings(settings) if settings else None, refresh)  # fmt: skip
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(f"{doc['problem']}: {doc['source']}")
    names = list(doc["variables"])
    click.echo("  ".join(["t", *(f"{n} ({doc['kinds'][n]})" for n in names)]))
    for i, t in enumerate(doc["t"]):
        click.echo("  ".join([f"{t:.6g}", *(f"{doc['variables'][n][i]:.9g}" for n in names)]))


def _exit_if_missing(ref: Any, solution_only: bool = False) -> None:
    """A one-line error (exit status 2) where the reference has no solution, or (unless
    ``solution_only``) no gradient: a script that builds references before a long run
    stops there, and the line says which ``[reference]`` key to set."""
    from sciml_bench.cli.options import UserError

    if ref.missing:
        raise UserError(f"no reference for {ref.problem!r}: {ref.missing}")
    if ref.gradient_missing and not solution_only:
        raise UserError(f"no reference gradient for {ref.problem!r}: {ref.gradient_missing}. "
                        "Fix: set [reference] rtol, atol or method in the problem file")


def _print_reference(p: Any, ref: Any, doc: dict[str, Any]) -> None:
    """The reference in words: method, tolerances, loss, the gradient (summarized past a
    dozen components), its error estimate and cross-check, notes, where it is cached."""
    import numpy as np

    click.echo(f"{p.name}: {ref.method}")
    click.echo(f"  rtol={ref.rtol:g} atol={ref.atol:g}  loss={ref.loss:.12g}")
    grad = list(doc["gradient"].items())
    shown = grad if len(grad) <= GRADIENT_LINES + 2 else grad[:GRADIENT_LINES]
    for k, v in shown:
        click.echo(f"  dL/d{k} = {v:.12g}")
    if len(shown) < len(grad):
        rest = np.abs([v for _, v in grad[len(shown):]])
        click.echo(f"  ... {len(rest)} more components (|dL/dθ| from {rest.min():.3g} to "
                   f"{rest.max():.3g}); --json prints every one")  # fmt: skip
    if ref.gradient_missing:
        click.echo(f"  no reference gradient: {ref.gradient_missing}")
    if ref.reference_error is not None:
        click.echo(f"  the gradient's own error estimate {ref.reference_error:.2e} (norm-wise): "
                   f"rows are judged down to {10 * ref.reference_error:.1e}")
    if ref.cross_check:
        tol = ref.tolerance_error
        pair = "" if tol is None else f"; its two tolerances agree to {tol:.2e}"
        click.echo(f"  {ref.cross_check} cross-check: agrees to {ref.cross_check_agreement:.2e}"
                   f" (norm-wise), counted in the error estimate{pair}")  # fmt: skip
    if ref.tolerance_note:
        click.echo(f"  note: {ref.tolerance_note}")
    click.echo(f"  {'read from' if ref.cached else 'cached at'} {ref.cache_path or '(not cached)'}")
