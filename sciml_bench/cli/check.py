"""The ``check`` command: a problem file validated, its equations as parsed, the backends
that can run it, and one timed reference solve, before anyone starts a long run."""

from __future__ import annotations

import warnings
from typing import Any

import click

from sciml_bench.cli.options import UserError, load_problem, sbml_set_option, sized


@click.command(name="check")
@click.argument("problem", required=False)
@click.option("--problem-file", type=click.Path(), help="A problem file instead of a name.")
@click.option("--size", type=click.IntRange(1, None), default=None,
              help="Problems with [sizes]: the laddered size's value [the file's default].")
@click.option("--no-reference", is_flag=True, help="Skip the timed reference solve.")
@click.option("--full", is_flag=True,
              help="Build the full reference (the gradient too, cached for `run`) instead of "
                   "one solve.")
@click.option("--sbml", "sbml_file", type=click.Path(dir_okay=False), default=None,
              help="An SBML model, imported as `sciml-bench import` does; checked against the "
              "file itself (each parameter changed in the SBML, re-imported and solved) at "
              "any size, with its full reference.")
@click.option("--t-end", type=click.FloatRange(0, None, min_open=True), default=None,
              help="--sbml: the end of the time span [the last measurement time of a PEtab "
              "problem beside the file, else 10].")
@click.option("--parameters", default=None, metavar="A,B",
              help="--sbml: the parameters to differentiate (SBML ids) [import's default].")
@sbml_set_option("settings", "--sbml: ")
def check_cmd(
    problem: str | None, problem_file: str | None, size: int | None, no_reference: bool,
    full: bool, sbml_file: str | None, t_end: float | None, parameters: str | None,
    settings: tuple[str, ...],
) -> None:  # fmt: skip
    """Check a problem before a long run: validate it, print its equations as parsed, the
    backends that can run it, and run the reference solve once, with its time.

    A mistake in the file is one line naming the file, the key and the fix (the nearest
    known name for a typo, the key that was probably meant, the key to set). Exit status 0
    when the file is valid and its reference solves; 2 with the message when not.

    \b
    Examples:
      sciml-bench check --problem-file my-model.toml
      sciml-bench check stiff-robertson
      sciml-bench check --problem-file my-model.toml --full   # the gradient too, cached
      sciml-bench check --sbml model.xml --t-end 100    # an SBML import against its file
    """
    from sciml_bench.backends.support import support
    from sciml_bench.problem import check

    if sbml_file is not None:
        _check_sbml(sbml_file, (t_end, parameters, settings), check)
        return
    if t_end is not None or parameters is not None or settings:
        raise UserError("--t-end, --parameters and --set apply to --sbml models")
    p = sized(load_problem(problem, problem_file), size)
    click.echo(f"{p.name} ({p.source}): valid" + (f": {p.description}" if p.description else ""))
    for line in check.summary(p):
        click.echo(f"  {line}")
    _print_equations(p, check)
    _print_support(support(p, check.expressible(p)))
    if not no_reference:
        _print_reference(p, full)
    target = f"--problem-file {problem_file}" if problem_file else p.name
    click.echo(f"next: sciml-bench run {target} --quick   (then without --quick)")


def _check_sbml(path: str, options: tuple[Any, ...], check: Any) -> None:
    """``check --sbml``: the import (``options``: --t-end, --parameters, --set), its
    equations and backends, its full reference and the semantic check against the file
    (always, at any size); exit 2 where they disagree."""
    from sciml_bench.backends.support import support
    from sciml_bench.problem.sbml import read, semantic

    t_end, parameters, settings = options
    names = [x.strip() for x in parameters.split(",") if x.strip()] if parameters else None
    imported = read.read(path, parameters=names, t_end=t_end,
                         settings=read.parse_settings(settings))  # fmt: skip
    p = imported.problem()
    if imported.span_note:
        click.echo(f"time span: {imported.span_note}")
    if imported.condition_note:
        click.echo(f"note: {imported.condition_note}")
    click.echo(f"{p.name} ({path}): imported: {p.n_state} states, {p.n_params} differentiated "
               f"parameters, {sum(1 for e in p.initial if e.free_symbols)} states starting at an "
               f"expression of them, {len(p.derived)} derived parameters")  # fmt: skip
    for line in check.summary(p):
        click.echo(f"  {line}")
    _print_equations(p, check)
    _print_support(support(p, check.expressible(p)))
    semantic.run_check(imported, p, click.echo, force=True)
    from sciml_bench.problem import reference
    from sciml_bench.problem.sbml import second_interpreter

    ref = reference.get_or_missing(p)
    if not ref.missing:
        click.echo(f"reference solution: {ref.solution_check or 'no second method'}"
                   + (f", agrees to {ref.solution_check_agreement:.1e}"
                      if ref.solution_check_agreement is not None else "")
                   + (f"; UNJUDGED: {ref.solution_unjudged}" if ref.solution_unjudged else ""))
        click.echo(second_interpreter.cross_check(p, ref).summary())
    option = f" --t-end {t_end:g}" if t_end is not None else ""
    click.echo(f"next: sciml-bench run --sbml {path}{option} --quick")


def _print_equations(p: Any, check: Any) -> None:
    click.echo("equations, as parsed (the states' time derivatives; ^ is a power):")
    eqs = check.equations(p)
    width = max(len(lhs) for lhs, _ in eqs)
    for lhs, rhs in eqs:
        click.echo(f"  {lhs:<{width}} = {rhs}")
    for line in check.network_lines(p):
        click.echo(f"  network {line}")
    if p.array is not None:
        click.echo(f"  (each holds at every element of the {' x '.join(map(str, p.array.shape))}"
                   f" grid: {p.n_state} states)")  # fmt: skip


def _print_support(rows: list[Any]) -> None:
    """One line per backend: its code target, whether it can express the problem, whether
    it is installed, the solver it runs, and what its row will say."""
    click.echo("targets (backend, the code it runs, whether it can run this problem here):")
    for s in rows:
        if s.not_expressible:
            state = f"cannot express it: {s.not_expressible}"
        elif s.refused:
            state = next(n for n in s.notes if n.startswith("not offered"))
        elif s.unavailable:
            state = f"expressible; not installed here: {s.unavailable} (fix: {s.fix})"
        else:
            state = f"runs ({s.solver})"
        notes = [n for n in s.notes if not n.startswith("not offered")]
        extra = f"; {'; '.join(notes)}" if notes and not s.not_expressible else ""
        click.echo(f"  {s.backend:<12} {s.target:<7} {state}{extra}")
    runnable = [s.backend for s in rows if s.runs]
    click.echo(f"  {len(runnable)} of {len(rows)} run here: {', '.join(runnable) or 'none'}")


def _print_reference(p: Any, full: bool) -> None:
    """One timed reference solve (or, with ``full``, the whole cached reference); a
    failure is the command's error, exit status 2, naming the key to set."""
    from sciml_bench.problem import reference

    if full:
        ref = reference.get_or_missing(p)
        if ref.missing or ref.gradient_missing:
            raise UserError(f"no reference for {p.name!r}: {ref.missing or ref.gradient_missing}")
        how = "read from the cache" if ref.cached else f"built in {ref.build_s:.2f} s, cached"
        click.echo(f"reference: {how} ({ref.cache_path}); loss at θ0 {ref.loss:.6g}")
        click.echo(f"  {ref.method}")
        return
    try:
        with warnings.catch_warnings():  # NumPy's NaN warnings: the error below says it all
            warnings.simplefilter("ignore", RuntimeWarning)
            trial = reference.trial_solve(p)
    except reference.ReferenceError as e:
        raise UserError(f"the reference solve failed: {e}") from None
    truth = " (the fit's observations first)" if p.loss.kind == "fit" else ""
    click.echo(f"reference: one solve at θ0{truth} by SciPy {trial.method}, rtol {trial.rtol:g}, "
               f"atol {trial.atol:g}: {trial.seconds:.3g} s, code generation included")
    if trial.note:
        click.echo(f"  note: {trial.note}")
    y_end = ", ".join(f"{n}={v:.6g}" for n, v in zip(p.state_names, trial.y_end, strict=True))
    if len(trial.y_end) <= 8:
        click.echo(f"  y(t_end): {y_end}")
    click.echo(f"  loss at θ0 {trial.loss:.6g}; the full reference (its gradient at two "
               "tolerances) runs once at the start of `run` and is cached (or now: --full)")
