"""``import`` (an SBML model as a problem file) and ``export-sbml`` (a problem as SBML):
the command-line side of :mod:`sciml_bench.problem.sbml`."""

from __future__ import annotations

import shlex
import sys

import click

from sciml_bench.cli.options import load_problem, sbml_set_option, write_output


def _write(text: str, output: str | None, what: str) -> None:
    """``text`` to ``output`` (standard output when None), saying what it wrote."""
    if write_output(text, output):
        click.echo(f"wrote {what} to {output}", err=True)


@click.command(name="import")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the problem file here [default: standard output].")
@click.option("--parameters", default=None, metavar="A,B",
              help="The parameters to differentiate (SBML ids; a reaction's local parameter "
                   "as REACTION_PARAM) [default: every non-zero constant parameter the "
                   "equations use].")
@click.option("--t-end", type=click.FloatRange(0, None, min_open=True), default=None,
              help="The end of the time span, from t = 0 [the last measurement time of a "
              "PEtab problem beside the file, else 10].")
@click.option("--saves", type=click.IntRange(2, 100_000), default=51, show_default=True,
              help="Evenly spaced save points over (0, T).")  # fmt: skip
@sbml_set_option("settings", "")
@click.option("--check/--no-check", "semantic", default=True, show_default=True,
              help="Check the import against the file: each differentiated parameter changed "
              "in the SBML, re-imported and solved, its difference of the loss compared with "
              "the reference gradient (run where states x parameters <= 1,000; `sciml-bench "
              "check --sbml` runs it at any size).")
def import_cmd(model: str, output: str | None, parameters: str | None, t_end: float | None,
               saves: int, settings: tuple[str, ...], semantic: bool) -> None:  # fmt: skip
    """Write the problem file of an SBML MODEL (Levels 2 and 3 core): species,
    compartments, parameters, reactions, rate and assignment rules, initial assignments,
    function definitions. What a problem file cannot state (events, algebraic rules,
    delays, fast reactions, variable stoichiometry, packages) is refused in one line.
    Initial assignments that read differentiated parameters stay expressions of them
    (the start moves with them), and so do parameters assigned from others (derived).

    Then, where it is cheap, the import is checked against the file itself: each
    differentiated parameter is changed in the SBML, the model re-imported and solved,
    and the difference of the loss compared with the reference gradient; a disagreement
    refuses the model, naming the parameter.

    \b
    Examples:
      sciml-bench import model.xml -o model.toml
      sciml-bench run --problem-file model.toml -b scipy,cvodes
      sciml-bench run --sbml model.xml          the same, without the file
    """
    from sciml_bench.problem import spec
    from sciml_bench.problem.sbml import problem_file, read
    from sciml_bench.problem.sbml import semantic as sem

    names = [p.strip() for p in parameters.split(",") if p.strip()] if parameters else None
    imported = read.read(model, parameters=names, t_end=t_end, saves=saves,
                         settings=read.parse_settings(settings))  # fmt: skip
    problem = spec.from_dict(imported.data, source=model)  # what it writes, validated first
    if imported.span_note:
        click.echo(f"time span: {imported.span_note}", err=True)
    if imported.condition_note:
        click.echo(f"note: {imported.condition_note}", err=True)
    if semantic:  # a disagreement with the file is a one-line refusal (exit 2): no file
        sem.run_check(imported, problem, lambda line: click.echo(line, err=True))
    command = shlex.join(["sciml-bench", "import", *sys.argv[2:]]) if sys.argv[1:2] == [
        "import"] else f"sciml-bench import {model}"  # fmt: skip
    _write(problem_file.text(imported, command), output, "the problem file")


@click.command(name="export-sbml")
@click.argument("problem", required=False)
@click.option("--problem-file", type=click.Path(), default=None, help="Your own problem file.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the SBML here [default: standard output].")
def export_sbml_cmd(problem: str | None, problem_file: str | None, output: str | None) -> None:
    """Write PROBLEM as SBML Level 3 Version 2: each state a rate rule, each
    parameter a constant parameter (AMICI, COPASI or any SBML tool can run it). An array
    problem, at its default sizes, is one rate rule per element (u[1,2] as u_1_2), up to
    20,000 states.

    \b
    Example:
      sciml-bench export-sbml stiff-robertson -o rober.xml
    """
    from sciml_bench.problem.sbml import write

    p = load_problem(problem, problem_file)
    _write(write.text(p), output, "SBML")
