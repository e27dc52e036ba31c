"""The ``report``, ``compare`` and ``export`` commands, added to the main group by
:func:`register` so that the reporting layer stays out of ``cli.py``.

Exit codes: 0 fine; 1 ``compare --fail-above`` found a regression; 2 bad input
(an unreadable or foreign results file, a bad option), as in the rest of the CLI.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

EXIT_REGRESSION = 1
EXIT_BAD_INPUT = 2


class BadInput(click.ClickException):
    """One line, exit code 2 (as ``cli.UserError``, not imported to avoid a cycle)."""

    exit_code = EXIT_BAD_INPUT


def _runs(files: tuple[str, ...]) -> list[Any]:
    from sciml_bench.results.store import ResultsError
    from sciml_bench.results.store import read as read_results

    try:
        return [read_results(f) for f in files]
    except ResultsError as e:
        raise BadInput(str(e)) from None


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
def report(files: tuple[str, ...], out: str, metric: str) -> None:
    """Write a Markdown and a self-contained HTML report of results FILES.

    Per problem: a table of every case (status, TTFG, steady-state solve and
    gradient as median [IQR], solution and gradient error; failures with their
    reasons), a work-precision diagram, time to first gradient by cold phase,
    steady-state distributions and gradient agreement; CNN runs get training
    time, throughput and memory. Ensemble problems get one row per backend x
    semantics x device x size and a scaling figure (time per call against size,
    crossovers marked). Figures are also written as PNG and SVG.

    \b
    Example:
      sciml-bench report results/stiff-robertson-*.h5 --out report
    """
    from sciml_bench.results import publish
    from sciml_bench.results.extras import require

    require("matplotlib", "report", "sciml-bench report")  # before anything is written
    runs = _runs(files)
    try:
        paths = publish.write(runs, Path(out), metric)
    except OSError as e:
        raise BadInput(
            f"cannot write the report to {out!r}: {e.strerror or e}; choose a writable --out"
        ) from None
    click.echo(f"wrote {paths['markdown']}, {paths['html']} and {paths['figures']}/", err=True)


def _side(arg: str, name: str) -> list[str]:
    """One side of ``compare``: a results file, or several runs as a comma list."""
    files = [f.strip() for f in arg.split(",") if f.strip()]
    if not files:
        raise BadInput(f"{name}: name a results file, or several as a comma list a.h5,b.h5")
    if len(set(files)) < len(files):
        raise BadInput(f"{name}: {arg!r} names a file twice; each run counts once")
    return files


@click.command()
@click.argument("old")
@click.argument("new")
@click.option("--fail-above", type=click.FloatRange(min=1.0, min_open=True), default=None,
              metavar="RATIO",
              help="Exit with code 1 if any timing is reported slower by more than RATIO "
                   "(e.g. 1.10), or a case regressed (ok -> failed, gradient tier worse).")
@click.option(
    "--alpha",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=None,
    help="Significance level of the test [0.01].",
)
@click.option("--noise-floor", type=click.FloatRange(min=1.0), default=None, metavar="RATIO",
              help="Ratios inside [1/RATIO, RATIO] are never reported as a change [the "
                   "floor measured between identical runs, see benchmarks/README.md].")
@click.option("--load-limit", type=click.FloatRange(min=0.0), default=None, metavar="CORES",
              help="Timings of rows measured while other processes took more than CORES "
                   "cores' worth of CPU (their others_cpu) are not judged [0.5].")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--allow-mixed-hardware", is_flag=True,
              help="Pair cases measured on different hardware (CPU, cores, GPU, driver).")
def compare(
    old: str, new: str, fail_above: float | None, alpha: float | None, as_json: bool,
    allow_mixed_hardware: bool = False, noise_floor: float | None = None,
    load_limit: float | None = None,
) -> None:
    """Compare results OLD and NEW, case by case: each a file, or several runs of the
    same code as a comma list (a.h5,b.h5,c.h5).

    Cases are matched on problem, backend, solver, gradient method, rtol and
    the device they ran on; ensemble rows also on semantics and size, CNN rows
    on model, precision, pipeline and dataset. Cases from different hardware
    (CPU model, GPU) are refused unless --allow-mixed-hardware.
    For steady-state solve and gradient, time to first gradient (and CNN
    epochs) it shows the ratio of medians NEW/OLD, a verdict and why. A timing
    is reported slower or faster only when a test finds a difference (p <
    alpha, 0.01) AND the ratio is outside the noise floor measured between
    identical runs (benchmarks/compare_false_alarms.py): two runs of the same
    code differ by more than their samples' spread, and the floor keeps that
    drift from being called a change. The test: with one run a side, a
    two-sided Mann-Whitney U test on the raw samples; with two or more runs a
    side, Welch's t-test on the runs' log medians (the run is the unit that
    repeats, as in pyperf). A row measured while other processes took more than
    --load-limit cores (its others_cpu) is not judged: under load, identical runs
    differ by far more than the floor. With few samples no change can be significant (3
    vs 3: the smallest possible p is 0.1): such rows say "n too small" -- run
    with --repeats 10 (and --cold 5 for TTFG). Ends with the geometric mean of
    the ratios; status and gradient-tier changes are always listed.

    \b
    Examples:
      sciml-bench compare results/main.h5 results/branch.h5 --fail-above 1.10
      sciml-bench compare main1.h5,main2.h5,main3.h5 br1.h5,br2.h5,br3.h5
    """
    from sciml_bench.results import compare as cmp

    olds = _runs(tuple(_side(old, "OLD")))
    news = _runs(tuple(_side(new, "NEW")))
    comp = cmp.compare_many(
        [r.records for r in olds], [r.records for r in news],
        cmp.ALPHA if alpha is None else alpha,
        cmp.NOISE_FLOOR if noise_floor is None else noise_floor,
        cmp.LOAD_LIMIT if load_limit is None else load_limit,
    )  # fmt: skip
    mixed = cmp.mixed_hardware(comp)
    if mixed and not allow_mixed_hardware:
        cc = mixed[0]
        one, other = cmp.hardware_pair(cc)
        raise BadInput(
            f"{len(mixed)} matched case(s) ran on different hardware, e.g. {cc.key[0]} "
            f"{cc.label}: {one} vs {other}; compare runs from "
            "the same hardware, or pass --allow-mixed-hardware"
        )
    order = cmp.order_note([str(r.meta.get("created", "")) for r in olds],
                           [str(r.meta.get("created", "")) for r in news])  # fmt: skip
    if as_json:
        doc = cmp.to_json(comp, fail_above)
        if order:
            doc["order_note"] = order
        click.echo(json.dumps(doc, indent=2, default=str))
    else:
        click.echo(cmp.render(comp, fail_above) + (f"\n{order}" if order else ""))
    if fail_above is None:
        return
    slow = comp.slowdowns(fail_above)
    broken = comp.status_regressions()
    if comp.loaded():
        click.echo(f"WARNING: {len(comp.loaded())} timing(s) not judged: measured under load "
                   "(see above)", err=True)  # fmt: skip
    if slow or broken:
        click.echo(
            f"FAIL: {len(slow)} slowdown(s) reported above {fail_above:g}x, "
            f"{len(broken)} status regression(s)",
            err=True,
        )
        sys.exit(EXIT_REGRESSION)
    click.echo(f"OK: no slowdown reported above {fail_above:g}x, no status regression",
               err=True)  # fmt: skip


@click.command(name="export")
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["json", "csv"]), default="csv",
              show_default=True,
              help="json: every field, raw samples included; csv: one flat row per case "
                   "(scalars, medians, IQR bounds, sample counts).")  # fmt: skip
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write to this file instead of standard output.",
)
def export_cmd(files: tuple[str, ...], fmt: str, output: str | None) -> None:
    """Export results FILES as JSON or CSV (one row per case; a run_id column
    tells the files apart).

    \b
    Examples:
      sciml-bench export results/run.h5 --format csv -o run.csv
      sciml-bench export results/run.h5 --format json | jq '.files[0].records[0]'
    """
    from sciml_bench.results import export

    runs = _runs(files)
    text = export.to_json(runs) if fmt == "json" else export.to_csv(runs)
    if output is None:
        click.echo(text, nl=not text.endswith("\n"))
        return
    try:
        Path(output).write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    except OSError as e:
        raise BadInput(
            f"cannot write {output!r}: {e.strerror or e}; choose another --output"
        ) from None
    click.echo(f"wrote {sum(len(r.records) for r in runs)} case(s) to {output}", err=True)


def register(main: click.Group) -> None:
    """Add ``report``, ``compare`` and ``export`` to the ``sciml-bench`` group."""
    for cmd in (report, compare, export_cmd):
        main.add_command(cmd)
