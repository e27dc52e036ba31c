"""The ``report`` command, and :func:`register`, which adds the reporting commands
(``report``, ``compare``, ``export``) to the main group.

Exit codes: 0 fine; 1 ``compare --fail-above`` found a regression; 2 bad input
(an unreadable or foreign results file, a bad option), as in the rest of the CLI.
"""

from __future__ import annotations

from pathlib import Path

import click

from sciml_bench.cli.compare import EXIT_REGRESSION, compare
from sciml_bench.cli.export import export_cmd
from sciml_bench.cli.options import (
    EXIT_BAD_INPUT,
    BadInput,
    gradient_rtol_option,
    load_limit_option,
    read_runs,
)

__all__ = ["EXIT_BAD_INPUT", "EXIT_REGRESSION", "register", "report"]


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default="report",
    show_default=True,
    help="Folder for report.md, report.html and figures/.",
)
@click.option("--metric", type=click.Choice(["rel_l2", "rel_final", "final", "l2"]),
              default="rel_l2", show_default=True,
              help="Solution error of the table and of the work-precision x axis: "
                   "rel_l2 (solution_error), rel_final, final (DiffEqDevTools), l2.")  # fmt: skip
@gradient_rtol_option
@load_limit_option
def report(files: tuple[str, ...], out: str, metric: str, gradient_rtol: float | None,
           load_limit: float | None = None) -> None:  # fmt: skip
    """Write a Markdown and a self-contained HTML report of results FILES.

    Per problem: a table of every case (status, TTFG, steady-state solve and
    gradient as median [IQR], solution and gradient error; failures with their
    reasons), a work-precision diagram, time to first gradient by cold phase,
    steady-state distributions and gradient agreement; CNN runs get training
    time, throughput and memory. Ensemble problems get one row per backend x
    semantics x device x size and a scaling figure (time per call against size,
    crossovers marked). Figures are also written as PNG and SVG. Rows timed
    while other processes took more than --load-limit cores count as under
    load: a verdict of only such rows is provisional.

    \b
    Example:
      sciml-bench report results/stiff-robertson-*.h5 --out report
      sciml-bench report results/run.h5 --load-limit 1.7
    """
    from sciml_bench.measure.noise import using_load_limit
    from sciml_bench.results import publish
    from sciml_bench.results.extras import require

    require("matplotlib", "report", "sciml-bench report")  # before anything is written
    runs = read_runs(files)
    try:
        with using_load_limit(load_limit):  # every judgement of the report, figures too
            paths = publish.write(runs, Path(out), metric, gradient_rtol)
    except OSError as e:
        raise BadInput(
            f"cannot write the report to {out!r}: {e.strerror or e}; choose a writable --out"
        ) from None
    click.echo(f"wrote {paths['markdown']}, {paths['html']} and {paths['figures']}/", err=True)


def register(main: click.Group) -> None:
    """Add ``report``, ``compare`` and ``export`` to the ``sciml-bench`` group."""
    for cmd in (report, compare, export_cmd):
        main.add_command(cmd)
