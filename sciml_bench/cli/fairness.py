"""The ``fairness`` command: the page of each library's settings, their reasons, and what
the rows of results files ran with (``docs/fairness.md``)."""

from __future__ import annotations

from pathlib import Path

import click

from sciml_bench.cli.options import UserError, read_runs, write_output


@click.command(name="fairness")
@click.argument("files", nargs=-1, type=click.Path())
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None,
              help="Write the page to this file (e.g. docs/fairness.md) instead of "
                   "standard output.")  # fmt: skip
def fairness_cmd(files: tuple[str, ...], output: str | None) -> None:
    """Print the fairness page: per library, each setting the suite chooses (solver,
    controller, linear solver, Jacobian, gradient method, tolerances, step bound,
    threads, dtype), why, and what the library's own docs recommend; then, from results
    FILES, what each library's ok rows actually ran with per problem class.

    The settings live in sciml_bench/backends/choices.toml; a stated default that the
    code does not use is an error, so the page cannot drift from the code.

    \b
    Examples:
      sciml-bench fairness results/published/*.h5 -o docs/fairness.md
      sciml-bench fairness                 the settings alone, no results read
    """
    from sciml_bench.results import fairness

    choices = fairness.load_choices()
    wrong = fairness.disagreements(choices)
    if wrong:
        raise UserError("the fairness page would not match the code:\n  " + "\n  ".join(wrong))
    runs = read_runs(files)
    records = [r for run in runs for r in run.records]
    text = fairness.page(choices, records, [Path(f).name for f in files])
    if write_output(text, output, "--output"):
        click.echo(f"wrote {output} from {len(records)} row(s) of {len(runs)} file(s)", err=True)
