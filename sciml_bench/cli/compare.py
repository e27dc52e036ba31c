"""The ``compare`` command: two results (or two sets of runs) case by case, with a
verdict per timing and ``--fail-above`` for CI (exit 1 on a regression)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from sciml_bench.cli.options import BadInput, load_limit_option, read_runs

EXIT_REGRESSION = 1


def _side(arg: str, name: str) -> list[str]:
    """One side of ``compare``: a results file, or several runs as a comma list."""
    files = [f.strip() for f in arg.split(",") if f.strip()]
    if not files:
        raise BadInput(f"{name}: name a results file, or several as a comma list a.h5,b.h5")
    if len(set(files)) < len(files):
        raise BadInput(f"{name}: {arg!r} names a file twice; each run counts once")
    return files


@click.command()
@click.argument("files", nargs=-1, required=True, metavar="OLD NEW | F1 F2 F3 ...")
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
@load_limit_option
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--allow-mixed-hardware", is_flag=True,
              help="Pair cases measured on different hardware (CPU, cores, GPU, driver).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              metavar="PATH", help="With three or more files: draw each timing's series "
                                   "with its change points marked (PNG).")
def compare(
    files: tuple[str, ...], fail_above: float | None, alpha: float | None, as_json: bool,
    allow_mixed_hardware: bool = False, noise_floor: float | None = None,
    load_limit: float | None = None, plot_path: str | None = None,
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
      sciml-bench compare v1.h5 v2.h5 v3.h5 v4.h5 v5.h5 v6.h5 --plot steps.png

    With three or more files (a series, in the order given: one per commit or
    version; each may be a comma list of runs), it reports per timing the
    change points of the files' medians instead: a penalised L1 step fit whose
    penalty comes from the series' own noise, every step beyond the noise
    floor, e.g. "between file 3 and 4: 1.31x slower (median 12.0 ms -> 15.7
    ms)". --fail-above then fails on any slower step above RATIO; --alpha does
    not apply.
    """
    if len(files) == 1:
        raise BadInput("compare needs two results files (OLD NEW), or three or more for a "
                       "series (F1 F2 F3 ...)")
    if len(files) > 2:
        _compare_series(files, fail_above, as_json, allow_mixed_hardware, noise_floor,
                        load_limit, plot_path)  # fmt: skip
        return
    if plot_path:
        raise BadInput("--plot draws a series: give three or more results files")
    old, new = files
    olds = read_runs(_side(old, "OLD"))
    news = read_runs(_side(new, "NEW"))
    comp = _compared(olds, news, alpha, noise_floor, load_limit, allow_mixed_hardware)
    _print_comparison(comp, olds, news, fail_above, as_json)
    if fail_above is not None:
        _exit_on_regression(comp, fail_above)


def _compared(olds: list[Any], news: list[Any], alpha: float | None, noise_floor: float | None,
              load_limit: float | None, allow_mixed_hardware: bool) -> Any:
    """The comparison of the two sides; cases matched across hardware are refused unless
    ``--allow-mixed-hardware``."""
    from sciml_bench.results import compare as cmp

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
    return comp


def _print_comparison(comp: Any, olds: list[Any], news: list[Any], fail_above: float | None,
                      as_json: bool) -> None:
    """The comparison as a table or JSON, with a note when the runs' order looks odd."""
    from sciml_bench.results import compare as cmp

    order = cmp.order_note([str(r.meta.get("created", "")) for r in olds],
                           [str(r.meta.get("created", "")) for r in news])  # fmt: skip
    if as_json:
        doc = cmp.to_json(comp, fail_above)
        if order:
            doc["order_note"] = order
        click.echo(json.dumps(doc, indent=2, default=str))
    else:
        click.echo(cmp.render(comp, fail_above) + (f"\n{order}" if order else ""))


def _exit_on_regression(comp: Any, fail_above: float) -> None:
    """``--fail-above``: exit 1 after naming the slowdowns and status regressions."""
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


def _compare_series(files: tuple[str, ...], fail_above: float | None, as_json: bool,
                    allow_mixed_hardware: bool, noise_floor: float | None,
                    load_limit: float | None, plot_path: str | None) -> None:
    """``compare F1 F2 F3 ...``: change points per timing over the series, printed as text
    or JSON, drawn with ``--plot``, and exit 1 with ``--fail-above`` on a slower step."""
    from sciml_bench.results import compare as cmp
    from sciml_bench.results import series as ser

    runs = [read_runs(_side(f, f"file {i}")) for i, f in enumerate(files, start=1)]
    s = ser.series([[r.records for r in rs] for rs in runs],
                   cmp.NOISE_FLOOR if noise_floor is None else noise_floor,
                   cmp.LOAD_LIMIT if load_limit is None else load_limit)  # fmt: skip
    mixed = ser.mixed_hardware(s)
    if mixed and not allow_mixed_hardware:
        k = mixed[0][0]
        raise BadInput(f"{len(mixed)} case(s) ran on different hardware across the series, "
                       f"e.g. {k[0]} {cmp.key_label(k)}; compare files from the same "
                       "hardware, or pass --allow-mixed-hardware")  # fmt: skip
    if as_json:
        click.echo(json.dumps(ser.to_json(s, fail_above), indent=2, default=str))
    else:
        click.echo(ser.render(s, fail_above))
    if plot_path:
        click.echo(f"wrote {ser.plot(s, plot_path)}", err=True)
    if fail_above is not None:
        slow = s.slowdowns(fail_above)
        if slow:
            t, st = slow[0]
            click.echo(f"FAIL: {len(slow)} step(s) slower than {fail_above:g}x, e.g. "
                       f"{t.label} {st.sentence()}", err=True)  # fmt: skip
            sys.exit(EXIT_REGRESSION)
        click.echo(f"OK: no step slower than {fail_above:g}x", err=True)
