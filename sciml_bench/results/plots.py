"""Figures of a run, drawn with matplotlib (Agg backend, no display needed).

Each ``*_figure`` function takes the records of one problem (or the CNN
records) and returns a :class:`Plot`: a figure, or ``None`` with a note saying
why nothing could be drawn and what would make it possible. Notes also list
what a drawn figure leaves out (failed rungs, cases without a gradient), so a
missing point is never silent. :func:`save` writes PNG and SVG.

The figures:

- :func:`work_precision_figure`: error (x) against the steady-state median time (y),
  log-log, one marked line per backend/solver/gradient method through its tolerance
  rungs: the solve panel against the solution error, the gradient panel against the
  gradient error (what a gradient's time buys);
- :func:`ttfg_figure`: time to first gradient stacked by cold phase (median
  over cold processes), with the min-max spread of the total across processes; a
  failed row adds, hatched, the time it spent in the phase it failed in, and a row
  without a gradient (SciPy) is marked as ending at its first solve;
- :func:`steady_figure`: the raw steady-state samples of solve and gradient
  (box plus every sample);
- :func:`gradient_figure`: gradient error against the finite-difference
  reference on a log axis over the pass / warn / fail bands of
  :mod:`sciml_bench.measure.metrics`;
- :func:`cnn_figure`: CNN time to first step, training time, throughput and RAM/VRAM
  (initial vs max);
- :func:`cnn_curve_figure`: CNN held-out accuracy against training time (evaluations
  excluded), with the target accuracy and where each run reached it;
- :func:`cnn_speed_figure`: CNN training throughput and batch-1 inference latency
  (p50, p99 whisker) per variant x precision x pipeline, coloured by precision.

Ensemble problems have their own figure, time per call against ensemble size, in
:mod:`sciml_bench.results.scaling`.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sciml_bench.measure.metrics import PASS_TOL, WARN_TOL
from sciml_bench.results import styles

#: --metric choices and the record key each one reads
ERROR_METRICS = {
    "rel_l2": "solution_error",
    "rel_final": "solution_error_rel_final",
    "final": "solution_error_final",
    "l2": "solution_error_l2",
}
METRIC_LABELS = {
    "rel_l2": "relative l2 error over save points",
    "rel_final": "relative error at t_end",
    "final": "mean |error| at t_end (DiffEqDevTools final)",
    "l2": "RMS error over save points (DiffEqDevTools l2)",
}
PHASE_NAMES = ("import", "build", "first_solve", "first_grad")
PHASE_COLORS = ("#8da0cb", "#66c2a5", "#fc8d62", "#e78ac3")
DPI = 100
MARKERS = "osD^vP*Xh<>"
#: CNN precision colours; a row without a recorded precision is grey
PRECISION_COLORS = {"fp32": "C0", "bf16": "C1", "tf32": "C2"}
#: dash patterns telling apart the target accuracies of several runs
TARGET_STYLES = ("--", "-.", (0, (1, 1)), (0, (6, 2, 1, 2, 1, 2)))
#: the solve and gradient panels of the work-precision, growth and scaling figures:
#: median time key, its IQR key, what it times
TIME_PANELS = (("solve_s", "solve_iqr", "solve"), ("grad_s", "grad_iqr", "gradient"))
#: the gradient panel's error: max_i |g_i - g_ref,i| / max(|g_ref,i|, floor) (measure.metrics)
GRADIENT_ERROR = "gradient_error"
#: a legend entry's height in inches at the figures' 7-point legend font (a line of text,
#: plus spacing), used to size a row of panels before fit_legends checks it
ENTRY_INCHES = 0.16


@dataclass
class Plot:
    """One figure (``fig`` is ``None`` when nothing could be drawn) and its notes."""

    name: str
    title: str
    fig: Any = None
    notes: list[str] = field(default_factory=list)


def _plt() -> Any:
    from sciml_bench.results.extras import require

    matplotlib = require("matplotlib", "report", "drawing figures (sciml-bench report)")
    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    return plt


def finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def case_label(r: dict[str, Any], with_rtol: bool = False, sep: str = " ") -> str:
    """``backend solver gradient_method`` (and ``rtol=…``), without empty parts.

    ``sep`` goes between the solver and the gradient method: a newline keeps
    the labels of horizontal charts narrow.
    """
    head = " ".join(str(p) for p in (r.get("backend"), r.get("solver")) if p)
    tail = [str(r["gradient_method"])] if r.get("gradient_method") not in (None, "", "none") else []
    if with_rtol and finite(r.get("rtol")):
        tail.append(f"rtol={r['rtol']:.0e}")
    if r.get("kind", "ode") == "ode" and r.get("device") not in (None, "", "cpu"):
        tail.append(f"on {r['device']}")  # CPU and GPU rows of one case apart
    label = sep.join(x for x in (head, " ".join(tail)) if x) or "?"
    return f"{r['_run']} {label}" if r.get("_run") else label  # which file, in multi-file reports


def _horizontal() -> dict[str, Any]:
    """``boxplot`` keyword for horizontal boxes: ``vert`` is deprecated from matplotlib 3.10."""
    import matplotlib

    major, minor = (int(x) for x in matplotlib.__version__.split(".")[:2])
    return {"orientation": "horizontal"} if (major, minor) >= (3, 10) else {"vert": False}


def fmt_seconds(v: float) -> str:
    """A time tick in the unit that keeps it short: ``200 µs``, ``5 ms``, ``1.5 s``."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3)):
        if v >= scale * 0.999:
            return f"{v / scale:.3g} {unit}"
    return f"{v / 1e-6:.3g} µs"


def fmt_sci(v: float) -> str:
    """An error tick in one style whatever its size: ``1e-04``, ``3e-07``, ``2.5e-06``."""
    mant, exp = f"{v:.2e}".split("e")
    return f"{mant.rstrip('0').rstrip('.')}e{exp}"


def _log_axis(axis: Any, seconds: bool = False, sci: bool = False) -> None:
    """Log ticks that never run together; call once the data is drawn.

    The view spans at least one decade (so there are always ticks at 1, 2 or 5 x 10^k
    rather than matplotlib's fallback of four-decimal linear ticks) with room around
    the data, and the ticks thin
    out with the span: 1-2-5 up to 2 decades, 1-3 up to 4, decades beyond.
    ``seconds`` prints ticks with a unit (``200 µs``) instead of ``0.0002``; ``sci`` in
    one scientific style (``1e-04`` beside ``3e-05``, not ``0.0001``).
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax = axis.axes
    get, put = (ax.get_xlim, ax.set_xlim) if axis is ax.xaxis else (ax.get_ylim, ax.set_ylim)
    lo, hi = sorted(get())
    if lo > 0 and hi / lo < 10**1.5:
        # at least a decade, and room around points that autoscale put at the edges
        half = max(1.0, math.log10(hi / lo) + 0.3) / 2
        mid = math.sqrt(lo * hi)
        lims = (mid / 10**half, mid * 10**half)
        put(*(lims if get()[0] < get()[1] else lims[::-1]))  # keep an inverted axis inverted
        lo, hi = lims
    decades = math.log10(hi / lo) if lo > 0 else 10.0
    subs = (1.0, 2.0, 5.0) if decades <= 2 else (1.0, 3.0) if decades <= 4 else (1.0,)
    axis.set_major_locator(LogLocator(subs=subs))
    fmt = fmt_seconds if seconds else fmt_sci if sci else (lambda v: f"{v:.3g}")
    axis.set_major_formatter(FuncFormatter(lambda v, _: fmt(v)))
    axis.set_minor_formatter(NullFormatter())


def _problem(records: Sequence[dict[str, Any]]) -> str:
    names = sorted({str(r.get("problem")) for r in records if r.get("problem")})
    return ", ".join(names) or "?"


def _finish(fig: Any, records: Sequence[dict[str, Any]], title: str) -> None:
    """Title the figure with its problem and say what ``#1``, ``#2``... stand for:
    a figure is often read on its own, away from the report that explains them."""
    runs = {str(r["_run"]): str(r.get("_run_file") or "") for r in records if r.get("_run")}
    fig.suptitle(f"{_problem(records)}: {title}", fontsize=11, fontweight="bold")
    width, height = fig.get_size_inches()
    bottom = 0.0
    if runs:
        key = "; ".join(f"{k} = {v}" if v else k for k, v in sorted(runs.items()))
        # about 15 characters an inch at 8 pt
        lines = textwrap.wrap(f"results files: {key}", width=int(width * 15))
        fig.text(0.01, 0.01, "\n".join(lines), fontsize=8, color="0.3", va="bottom")
        bottom = min(0.3, (0.08 + 0.15 * len(lines)) / height)
    # room for the title's lines above the panels (a two-line title overlapped the first
    # row's panel titles once a tall figure was laid out)
    lines_up = fig._suptitle.get_text().count("\n") + 1
    top = 1 - min(0.3, (0.1 + 0.22 * lines_up) / height)
    fig.tight_layout(rect=(0, bottom, 1, top))
    fit_legends(fig, (0, bottom, 1, top))


def fit_legends(fig: Any, rect: tuple[float, float, float, float] = (0, 0, 1, 1),
                rounds: int = 3) -> None:  # fmt: skip
    """Grow ``fig`` until every legend (many sit outside their axes) lies inside it, the
    layout kept tight within ``rect``: a legend taller or wider than the room left for it
    was cut off at the figure's edge (a 28-line ladder's)."""
    for _ in range(rounds):
        fig.canvas.draw()
        boxes = [lg.get_window_extent() for lg in _legends(fig)]
        box = fig.bbox
        over_x = max((b.x1 - box.x1 for b in boxes), default=0.0)
        over_y = max((max(box.y0 - b.y0, b.y1 - box.y1) for b in boxes), default=0.0)
        if over_x <= 0.5 and over_y <= 0.5:
            return
        w, h = fig.get_size_inches()
        fig.set_size_inches(w + max(over_x, 0.0) / fig.dpi + 0.2,
                            h + 2 * max(over_y, 0.0) / fig.dpi + 0.2)  # fmt: skip
        fig.tight_layout(rect=rect)


def _legends(fig: Any) -> list[Any]:
    """Every legend of ``fig``: its axes' and its own."""
    return [lg for lg in (*(ax.get_legend() for ax in fig.axes), *fig.legends) if lg is not None]


def iqr_bars(
    rows: Sequence[dict[str, Any]], time_key: str, iqr_key: str
) -> tuple[list[float], list[list[float]]]:
    """The rows' median times ``t`` and their error bars ``[t - q25, q75 - t]`` from the
    interquartile range ``(q25, q75)`` under ``iqr_key`` (no bar where it is not recorded;
    a bar never negative)."""
    y = [r[time_key] for r in rows]
    q = [r.get(iqr_key) or (t, t) for r, t in zip(rows, y, strict=True)]
    lo = [max(t - a[0], 0.0) for t, a in zip(y, q, strict=True)]
    hi = [max(a[1] - t, 0.0) for t, a in zip(y, q, strict=True)]
    return y, [lo, hi]


def timed_panels(lines_of: Callable[[str], Any]) -> dict[tuple[str, str, str], Any]:
    """The :data:`TIME_PANELS` with something to draw, each with its lines, ``lines_of(time_key)``
    (empty: nothing to draw)."""
    drawn = {p: lines_of(p[0]) for p in TIME_PANELS}
    return {p: lines for p, lines in drawn.items() if lines}


def ladder_figure(n_panels: int, legend_width: float) -> tuple[Any, list[Any]]:
    """A figure of ``n_panels`` ladder panels side by side (5.2 x 4.6 inches each) and
    ``legend_width`` inches more for a legend; the figure and its axes."""
    fig, axes = _plt().subplots(1, n_panels, figsize=(5.2 * n_panels + legend_width, 4.6),
                                squeeze=False)  # fmt: skip
    return fig, list(axes[0])


def grid_figure(rows: Sequence[int], n_cols: int, legend_width: float,
                lines_per_entry: int = 1) -> tuple[Any, list[list[Any]]]:  # fmt: skip
    """A figure of ``len(rows)`` rows of ``n_cols`` ladder panels (5.2 inches wide each,
    ``legend_width`` more for the legends), each row tall enough for a legend of
    ``rows[i]`` entries of ``lines_per_entry`` text lines; the figure and its axes."""
    heights = [max(3.6, 1.0 + n * lines_per_entry * ENTRY_INCHES) for n in rows]
    fig, axes = _plt().subplots(
        len(rows), n_cols, figsize=(5.2 * n_cols + legend_width, sum(heights) + 0.6),
        squeeze=False, gridspec_kw={"height_ratios": heights},
    )  # fmt: skip
    return fig, [list(r) for r in axes]


def ladder_axes(ax: Any, sizes: list[int]) -> None:
    """Log-log axes of a size ladder: a tick at each size it ran (a lone size gets a factor
    of 2 either side), times in seconds; call once the data is drawn."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.minorticks_off()
    if len(sizes) == 1:
        ax.set_xlim(sizes[0] / 2, sizes[0] * 2)
    _log_axis(ax.yaxis, seconds=True)


def _is_ok(r: dict[str, Any]) -> bool:
    return r.get("status") == "ok"


def _several_rtols(records: Sequence[dict[str, Any]]) -> bool:
    return len({r.get("rtol") for r in records if finite(r.get("rtol"))}) > 1


def _samples(r: dict[str, Any], key: str) -> np.ndarray:
    a = np.asarray(r.get(key) or [], dtype=float).ravel()
    return a[np.isfinite(a)]


def work_precision_figure(records: Sequence[dict[str, Any]], metric: str = "rel_l2") -> Plot:
    """Error against steady-state median time: the solve panel's x is the solution error
    (``metric``), the gradient panel's the gradient error against the reference gradient."""
    key = ERROR_METRICS[metric]
    plot = Plot("work_precision", f"Work-precision ({METRIC_LABELS[metric]}; gradient error)")
    plot.notes += _missing_rungs(records, key)
    cases: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        cases.setdefault(case_label(r), []).append(r)
    error_of = {"solve_s": key, "grad_s": GRADIENT_ERROR}  # each panel's x: its own error
    lines = {p: _rungs(cases, error_of[p[0]], p[0]) for p in TIME_PANELS}
    plot.notes += _no_gradient_error(records)
    panels = [p for p in TIME_PANELS if any(lines[p].values())]
    if not panels:
        plot.notes.insert(0, "no ok case has both a solution error and a steady-state time")
        return plot
    one_rtol = not _several_rtols(records)
    if one_rtol:
        _title_one_tolerance(plot, records, metric)
    plt = _plt()
    fig, axes = plt.subplots(
        1, len(panels), figsize=(4.6 * len(panels) + 3.4, 4.4), squeeze=False
    )
    # a colour per library, a style per method, the same in both panels
    methods = styles.MethodStyles()
    handles: dict[str, tuple[Any, str]] = {}
    for ax, panel in zip(axes[0], panels, strict=True):
        err = error_of[panel[0]]
        for lab, rs in lines[panel].items():
            if rs:
                found = _work_precision_line(ax, rs, err, panel, lab,
                                             methods(lab.removeprefix(str(rs[0].get("backend")))))
                handles[lab] = found if found[1] or lab not in handles else handles[lab]
                if not one_rtol:
                    _label_rtols(ax, rs, err, panel[0])
        _work_precision_axes(ax, metric if err == key else "gradient", panel[2])
    axes[0][-1].legend(
        [h for h, _ in handles.values()], [lab + t for lab, (_, t) in handles.items()],
        fontsize=8, loc="upper left",
        bbox_to_anchor=(1.02, 1.0), title="rtol next to each point" if not one_rtol else None,
        title_fontsize=8,
    )  # fmt: skip
    _finish(fig, records, plot.title[0].lower() + plot.title[1:])
    plot.fig = fig
    return plot


def _missing_rungs(records: Sequence[dict[str, Any]], key: str) -> list[str]:
    """A note for each row the work-precision figure cannot draw: failed, or no ``key``."""
    notes = []
    for r in records:
        if r.get("status") != "ok":
            notes.append(
                f"missing rung: {case_label(r, True)}: {r.get('status')}"
                + (f" ({_short(r.get('reason'))})" if r.get("reason") else "")
            )
        elif not finite(r.get(key)):
            notes.append(f"missing rung: {case_label(r, True)}: no {key} recorded")
    return notes


def _no_gradient_error(records: Sequence[dict[str, Any]]) -> list[str]:
    """A note for each ok row with a gradient time but no gradient error to plot it at."""
    return [f"not in the gradient panel: {case_label(r, True)}: no {GRADIENT_ERROR} recorded"
            + (f" ({_short(r['gradient_error_note'])})" if r.get("gradient_error_note") else "")
            for r in records if _is_ok(r) and finite(r.get("grad_s"))
            and not _positive(r.get(GRADIENT_ERROR))]  # fmt: skip


def _positive(x: Any) -> bool:
    """A finite value above zero: a point a log axis can place."""
    return finite(x) and x > 0


def _rungs(
    cases: dict[str, list[dict[str, Any]]], key: str, time_key: str
) -> dict[str, list[dict[str, Any]]]:
    """Each case's drawable rungs (ok, with an error ``key`` above zero, for the log axis,
    and a time ``time_key``), in order of tolerance; a case with none keeps an empty list."""
    return {
        lab: sorted(
            (r for r in rs if _is_ok(r) and _positive(r.get(key)) and finite(r.get(time_key))),
            key=lambda r: r.get("rtol") or 0.0,
        )
        for lab, rs in cases.items()
    }


def _title_one_tolerance(plot: Plot, records: Sequence[dict[str, Any]], metric: str) -> None:
    """With one tolerance a case is a point, not a line: say so in the title and the notes."""
    rtol = next((r["rtol"] for r in records if finite(r.get("rtol"))), None)
    at = f" at rtol={rtol:.0e}" if rtol is not None else ""
    plot.title = f"Error vs steady-state time{at} ({METRIC_LABELS[metric]})"
    plot.notes.insert(
        0, "one tolerance only: run with --tolerances 1e-4,1e-6,1e-8 or --sweep for lines"
    )


def _work_precision_line(
    ax: Any, rs: list[dict[str, Any]], key: str, panel: tuple[str, str, str], label: str,
    style: tuple[Any, str],
) -> tuple[Any, str]:  # fmt: skip
    """Case ``label``'s rungs as a marked line, error ``key`` against the median time, with
    the interquartile range as asymmetric error bars, in its library's colour and its
    method's ``style``; faint at rungs whose row does not qualify
    (:mod:`~sciml_bench.results.styles`). The handle and the tiers for the legend."""
    y, bars = iqr_bars(rs, panel[0], panel[1])
    tiers = [styles.tier(r, panel[0]) for r in rs]
    handle = styles.draw_line(
        ax, [r[key] for r in rs], y, [not t for t in tiers], yerr=bars, ls=style[0],
        marker=style[1], label=label, color=styles.library_color(str(rs[0].get("backend"))),
    )  # fmt: skip
    rtols = [fmt_sci(r["rtol"]) if finite(r.get("rtol")) else "?" for r in rs]
    return handle, styles.tier_note(list(zip(rtols, tiers, strict=True)), "rtol")


def _label_rtols(ax: Any, rs: list[dict[str, Any]], key: str, time_key: str) -> None:
    """Each rung's tolerance written next to its point."""
    for r in rs:
        if finite(r.get("rtol")):
            ax.annotate(f"{r['rtol']:.0e}", (r[key], r[time_key]), fontsize=7,
                        xytext=(4, 3), textcoords="offset points", color="0.3")  # fmt: skip


def _work_precision_axes(ax: Any, metric: str, what: str) -> None:
    """Log-log axes, the error axis inverted so that more precise is to the right;
    ``metric`` names the x axis's error (``gradient``: the gradient error)."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.margins(0.1)  # room for the rtol labels at the ends of a line
    ax.invert_xaxis()  # more precise to the right, as in DiffEqDevTools
    _log_axis(ax.xaxis, sci=True)
    _log_axis(ax.yaxis, seconds=True)
    ax.set_xlabel("gradient error, norm-wise relative (more precise →)"
                  if metric == "gradient" else f"{metric} error (more precise →)")
    ax.set_ylabel(f"{what} time, median [IQR]")
    ax.set_title(what, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)


def _median_phases(r: dict[str, Any], phases: np.ndarray) -> np.ndarray:
    """The median of each of :data:`PHASE_NAMES` over a row's cold processes (0 where none
    finished)."""
    names = list(r.get("phase_names") or PHASE_NAMES)
    med = np.zeros(len(PHASE_NAMES))
    for j, name in enumerate(PHASE_NAMES):
        if name in names:
            col = phases[:, names.index(name)]
            med[j] = np.median(col[np.isfinite(col)]) if np.isfinite(col).any() else 0.0
    return med


def failed_time(r: dict[str, Any]) -> float:
    """Seconds a failed row spent in the cold phase it failed in (0 when it failed
    elsewhere, e.g. in the steady state, or the time is unknown)."""
    s = r.get("failed_phase_s")
    return float(s) if r.get("failed_phase") in PHASE_NAMES and finite(s) and s > 0 else 0.0


def _failure_note(r: dict[str, Any], with_rtol: bool, failing: float) -> str:
    """Where a failed row failed, and the time it spent failing, under the TTFG figure."""
    where = str(r.get("failed_phase") or "an unknown phase").replace("_", " ")
    spent = ""
    if failing:
        how = " (estimated from the wall time)" if r.get("failed_phase_s_estimated") else ""
        spent = f", {failing:.3g} s in it{how}"
    return f"{case_label(r, with_rtol)}: {r.get('status')} in {where}{spent}; phases up to the failure"


def _ttfg_label(r: dict[str, Any], with_rtol: bool) -> str:
    label = case_label(r, with_rtol, "\n")
    if r.get("ttfg_kind") == "solve":
        label += " (to first solve)"
    return label if _is_ok(r) else f"{label} [{r.get('status')}]"


def ttfg_figure(records: Sequence[dict[str, Any]]) -> Plot:
    """Cold phases stacked (median over cold processes) with the total's spread; a failed
    row also shows, hatched, the time it spent in the phase it failed in."""
    plot = Plot("ttfg", "Time to first gradient, by cold phase")
    with_rtol = _several_rtols(records)
    rows: list[tuple[str, np.ndarray, np.ndarray, float]] = []
    for r in records:
        raw = r.get("phases")  # a list read from a file, or a record's array
        phases = np.asarray(raw if raw is not None else [], dtype=float)
        failing = failed_time(r)
        if (phases.ndim != 2 or not phases.size or not np.isfinite(phases).any()) and not failing:
            plot.notes.append(f"{case_label(r, with_rtol)}: no cold phases ({r.get('status')})")
            continue
        if phases.ndim != 2 or not phases.size:
            phases = np.full((1, len(PHASE_NAMES)), np.nan)
        if not _is_ok(r):
            plot.notes.append(_failure_note(r, with_rtol, failing))
        rows.append((_ttfg_label(r, with_rtol), _median_phases(r, phases),
                     np.nansum(phases, axis=1), failing))  # fmt: skip
    if not rows:
        plot.notes.insert(0, "no case recorded cold phases")
        return plot
    if any(r.get("ttfg_kind") == "solve" for r in records):
        plot.notes.append("a row marked (to first solve) computes no gradient: its bar ends "
                          "at its first solve")  # fmt: skip
    plot.fig = _ttfg_bars(rows, records)
    if max(len(t) for _, _, t, _ in rows) <= 1:
        plot.notes.append("one cold process per case: no spread (run with --cold 3 or more)")
    return plot


def _ttfg_bars(rows: list[tuple[str, np.ndarray, np.ndarray, float]],
               records: Sequence[dict[str, Any]]) -> Any:  # fmt: skip
    """The stacked bars of :func:`ttfg_figure`; the time spent failing hatched after them."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.0, 0.5 * len(rows) + 2.0))
    ypos = np.arange(len(rows))[::-1]
    left = np.zeros(len(rows))
    for j, name in enumerate(PHASE_NAMES):
        widths = np.array([m[j] for _, m, _, _ in rows])
        ax.barh(ypos, widths, left=left, color=PHASE_COLORS[j], label=name.replace("_", " "),
                height=0.6)  # fmt: skip
        left += widths
    failing = np.array([f for _, _, _, f in rows])
    if failing.any():
        ax.barh(ypos, failing, left=left, color="white", edgecolor="#d62728", hatch="///",
                height=0.6, label="failed phase (time until the failure)")  # fmt: skip
    for y, (_, _, totals, _) in zip(ypos, rows, strict=True):
        if totals.size > 1:
            mid = float(np.median(totals))
            ax.errorbar(mid, y, xerr=[[mid - totals.min()], [totals.max() - mid]], fmt="k|",
                        capsize=3, lw=1)  # fmt: skip
    n_cold = max(len(t) for _, _, t, _ in rows)
    ax.set_yticks(ypos, [lab for lab, _, _, _ in rows], fontsize=8)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel(
        "seconds from spawn; median phase over cold processes"
        + ("; whisker: min-max total" if n_cold > 1 else "")
    )
    ax.legend(fontsize=8, ncol=3 if failing.any() else 4, loc="lower left",
              bbox_to_anchor=(0.0, 1.0), frameon=False)  # fmt: skip
    ax.grid(True, axis="x", alpha=0.3)
    _finish(fig, records, "time to first gradient by cold phase")
    return fig


def steady_figure(records: Sequence[dict[str, Any]]) -> Plot:
    """Box plot plus every raw sample, solve and gradient panels, log time axis."""
    plot = Plot("steady", "Steady-state distributions")
    with_rtol = _several_rtols(records)
    keys = [
        k for k in ("solve_samples", "grad_samples") if any(_samples(r, k).size for r in records)
    ]
    rows = [r for r in records if any(_samples(r, k).size for k in keys)]
    skipped = [case_label(r, with_rtol) for r in records if r not in rows]
    if skipped:
        plot.notes.append("no steady-state samples: " + ", ".join(skipped))
    if not rows:
        plot.notes.insert(0, "no case has steady-state samples")
        return plot
    plt = _plt()
    fig, axes = plt.subplots(
        1,
        len(keys),
        figsize=(4.6 * len(keys) + 2.4, 0.5 * len(rows) + 2.0),
        squeeze=False,
        sharey=True,
    )
    rng = np.random.default_rng(0)  # deterministic jitter
    ypos = np.arange(len(rows))[::-1]
    for ax, key in zip(axes[0], keys, strict=True):
        what = "solve" if key == "solve_samples" else "gradient"
        for i, (y, r) in enumerate(zip(ypos, rows, strict=True)):
            s = _samples(r, key)
            if not s.size:
                continue
            ax.boxplot([s], positions=[y], widths=0.5, showfliers=False,
                       medianprops={"color": "k"}, **_horizontal())  # fmt: skip
            ax.scatter(s, y + rng.uniform(-0.15, 0.15, s.size), s=8, alpha=0.7, zorder=3,
                       color=f"C{i % 10}")  # fmt: skip
        ax.set_xscale("log")
        _log_axis(ax.xaxis, seconds=True)
        ax.set_xlabel(f"{what} time per call (box: quartiles; dots: every sample)")
        ax.set_title(what, fontsize=10)
        ax.grid(True, axis="x", which="major", alpha=0.3)
    axes[0][0].set_yticks(ypos, [case_label(r, with_rtol, "\n") for r in rows], fontsize=8)
    axes[0][0].set_ylim(-0.7, len(rows) - 0.3)
    _finish(fig, records, "steady-state time per call")
    plot.fig = fig
    return plot


def gradient_figure(records: Sequence[dict[str, Any]]) -> Plot:
    """Gradient error per case over the pass / warn / fail bands."""
    plot = Plot("gradient", "Gradient agreement with the full reference gradient")
    with_rtol = _several_rtols(records)
    pts: list[tuple[str, float, str]] = []
    for r in records:
        e = r.get("gradient_error")
        if isinstance(e, int | float) and not isinstance(e, bool):
            pts.append((case_label(r, with_rtol, "\n"), float(e), r.get("gradient_tier") or ""))
        elif r.get("gradient_method") not in (None, "", "none"):
            plot.notes.append(f"{case_label(r, with_rtol)}: no gradient ({r.get('status')})")
    if not pts:
        plot.notes.insert(0, "no case computed a gradient")
        return plot
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.0, 0.5 * len(pts) + 2.0))
    finite_e = [e for _, e, _ in pts if math.isfinite(e) and e > 0]
    lo = min([*finite_e, PASS_TOL]) / 10
    hi = max([*finite_e, WARN_TOL]) * 10
    ax.axvspan(lo, PASS_TOL, color="#b8e0b8", alpha=0.6, label=f"pass ≤ {PASS_TOL:g}")
    ax.axvspan(PASS_TOL, WARN_TOL, color="#f5e3a3", alpha=0.6, label=f"warn ≤ {WARN_TOL:g}")
    ax.axvspan(WARN_TOL, hi, color="#f2b8b5", alpha=0.6, label="fail")
    ypos = np.arange(len(pts))[::-1]
    for y, (lab, e, _) in zip(ypos, pts, strict=True):
        if math.isfinite(e):
            ax.plot(max(e, lo), y, "ko", ms=5)
        else:
            ax.plot(hi, y, "rx", ms=7)
            plot.notes.append(f"{lab}: non-finite gradient error (drawn at the right edge)")
    ax.set_yticks(ypos, [f"{lab} [{tier}]" if tier else lab for lab, _, tier in pts], fontsize=8)
    ax.set_ylim(-0.6, len(pts) - 0.4)
    ax.set_xscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("gradient error, norm-wise relative, vs the full reference gradient")
    ax.legend(fontsize=8, ncol=3, loc="lower left", bbox_to_anchor=(0.0, 1.0), frameon=False)
    _finish(fig, records, "gradient agreement")
    plot.fig = fig
    return plot


def _num(r: dict[str, Any], key: str) -> float | None:
    v = r.get(key)
    return float(v) if finite(v) else None


def cnn_label(r: dict[str, Any]) -> str:
    """``variant [model] [precision] [host] (device)``: the parts a CNN row differs by."""
    parts = [str(r.get("backend", "?"))]
    if r.get("model") not in (None, "small"):
        parts.append(str(r["model"]))
    if r.get("precision"):
        parts.append(str(r["precision"]))
    if r.get("pipeline") == "host":
        parts.append("host")
    label = f"{' '.join(parts)} ({r.get('device') or '?'})"
    return f"{r['_run']} {label}" if r.get("_run") else label


#: the CNN panels of one record key each: panel, key, what a note calls the panel
CNN_ONE_KEY_PANELS = (
    ("first", "time_to_first_step_s", "first-step"),
    ("time", "train_s", "training-time"),
    ("throughput", "throughput_ips", "throughput"),
)
CNN_MEMORY_KEYS = ("ram_initial_mb", "ram_max_mb", "vram_initial_mb", "vram_max_mb")


def cnn_figure(records: Sequence[dict[str, Any]]) -> Plot:
    """Time to first step, training time (with every epoch), throughput and memory."""
    plot = Plot("cnn", "CNN training")
    recs = [r for r in records if _is_ok(r)]
    for r in records:
        if not _is_ok(r):
            plot.notes.append(f"{case_label(r)}: {r.get('status')} ({_short(r.get('reason'))})")
    panels = _cnn_panels(recs, plot.notes)
    if not panels:
        plot.notes.insert(0, "no ok CNN record with timings or memory")
        return plot
    plt = _plt()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    labels = [cnn_label(r) for r in recs]
    x = np.arange(len(recs))
    for ax, (panel, keys) in zip(axes[0], panels.items(), strict=True):
        _draw_cnn_panel(ax, panel, recs, x, keys)
        _mark_not_recorded(ax, recs, labels, keys, plot.notes)
        ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    plot.fig = fig
    return plot


def _cnn_panels(recs: Sequence[dict[str, Any]], notes: list[str]) -> dict[str, list[str]]:
    """The panels of :func:`cnn_figure` some row has data for, each with the keys it
    draws; a note for each panel left out, and for a memory panel without VRAM."""
    panels: dict[str, list[str]] = {}
    for panel, key, what in CNN_ONE_KEY_PANELS:
        if any(_num(r, key) is not None for r in recs):
            panels[panel] = [key]
        else:
            notes.append(f"no {key} recorded: {what} panel skipped")
    mem_keys = [k for k in CNN_MEMORY_KEYS if any(_num(r, k) is not None for r in recs)]
    if mem_keys:
        panels["memory"] = mem_keys
        if not any(k.startswith("vram") for k in mem_keys):
            notes.append("no VRAM recorded (CPU runs): memory panel shows RAM only")
    else:
        notes.append("no RAM/VRAM recorded: memory panel skipped")
    return panels


def _draw_cnn_panel(
    ax: Any, panel: str, recs: Sequence[dict[str, Any]], x: np.ndarray, keys: list[str]
) -> None:
    """One panel of :func:`cnn_figure`: a bar per row (grouped bars for memory)."""
    if panel == "first":
        _cnn_bars(ax, recs, x, keys[0], "C3")
        ax.set_ylabel("seconds")
        ax.set_title("time to first step (compile included)", fontsize=10)
    elif panel == "time":
        vals = [_num(r, keys[0]) or 0.0 for r in recs]
        ax.bar(x, vals, color="C0", alpha=0.7, label="train_s (measured epochs)")
        for i, r in enumerate(recs):
            ep = _samples(r, "epoch_s")
            if ep.size:
                ax.scatter(np.full(ep.size, i), ep, color="k", s=10, zorder=3,
                           label="one epoch" if i == 0 else None)  # fmt: skip
        ax.set_ylabel("seconds")
        ax.set_title("training time", fontsize=10)
        ax.legend(fontsize=7)
    elif panel == "throughput":
        _cnn_bars(ax, recs, x, keys[0], "C2")
        ax.set_ylabel("images / s")
        ax.set_title("throughput", fontsize=10)
    else:
        w = 0.8 / len(keys)
        for j, k in enumerate(keys):
            vals = [_num(r, k) or 0.0 for r in recs]
            ax.bar(x + (j - (len(keys) - 1) / 2) * w, vals, width=w,
                   label=k.removesuffix("_mb").replace("_", " "))  # fmt: skip
        ax.set_ylabel("MiB")
        ax.set_title("memory: initial vs max", fontsize=10)
        ax.legend(fontsize=7)


def _cnn_bars(ax: Any, recs: Sequence[dict[str, Any]], x: np.ndarray, key: str, color: str) -> None:
    """A bar of ``key`` per row (0 where it is not recorded)."""
    ax.bar(x, [_num(r, key) or 0.0 for r in recs], color=color, alpha=0.8)


def _mark_not_recorded(
    ax: Any, recs: Sequence[dict[str, Any]], labels: list[str], keys: list[str], notes: list[str]
) -> None:
    """``n/a`` over a row with none of a panel's ``keys``; a note for each row missing any."""
    for i, r in enumerate(recs):
        missing = [k for k in keys if _num(r, k) is None]
        if len(missing) == len(keys):
            ax.text(i, 0, "n/a", ha="center", va="bottom", fontsize=8, color="0.4")
        if missing:
            notes.append(f"{labels[i]}: no {', '.join(missing)}")


def cnn_curve_figure(records: Sequence[dict[str, Any]]) -> Plot:
    """Held-out accuracy against training seconds (evaluations excluded), one line per row."""
    plot = Plot("cnn-curve", "CNN accuracy vs training time")
    recs = [r for r in records if _is_ok(r) and _samples(r, "curve_accuracy").size]
    missing = [cnn_label(r) for r in records if _is_ok(r) and r not in recs]
    if missing:
        plot.notes.append(f"no accuracy curve (older file or no evaluation): {', '.join(missing)}")
    if not recs:
        plot.notes.insert(0, "no ok CNN record with an accuracy curve")
        return plot
    plt = _plt()
    # the legend goes outside the axes, where it hides no curve
    fig, ax = plt.subplots(figsize=(10, 4.2), layout="constrained")
    targets = sorted({float(r["target_accuracy"]) for r in recs if finite(r.get("target_accuracy"))})
    for i, r in enumerate(recs):
        t, a = _samples(r, "curve_train_s"), _samples(r, "curve_accuracy")
        n = min(t.size, a.size)
        ax.plot(t[:n], a[:n], marker=MARKERS[i % len(MARKERS)], ms=4, lw=1.2, label=cnn_label(r))
        if finite(r.get("time_to_accuracy_s")):
            ax.axvline(r["time_to_accuracy_s"], color=ax.lines[-1].get_color(), ls=":", lw=0.8)
        elif r.get("target_reached") is False:
            plot.notes.append(f"{cnn_label(r)}: target {r.get('target_accuracy')} not reached")
    for j, tgt in enumerate(targets):  # one dash pattern and in-axes label per target
        ax.axhline(tgt, color="0.25", ls=TARGET_STYLES[j % len(TARGET_STYLES)], lw=1.0,
                   label=f"target {tgt:g}")  # fmt: skip
        ax.annotate(f"target {tgt:g}", (0.005, tgt), xycoords=("axes fraction", "data"),
                    va="bottom", fontsize=7, color="0.25")  # fmt: skip
    if targets:  # a target above every curve stays inside the axes, with its label
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, max(hi, targets[-1] + 0.04))
    if all(_samples(r, "curve_train_s").min() > 0 for r in recs):
        ax.set_xscale("log")
        _log_axis(ax.xaxis)
    ax.set_xlabel("training seconds (first step and compilation included, evaluations excluded)")
    ax.set_ylabel("held-out accuracy")
    ax.grid(True, alpha=0.3)
    fig.legend(fontsize=7, loc="outside right upper")
    plot.fig = fig
    return plot


def cnn_speed_figure(records: Sequence[dict[str, Any]]) -> Plot:
    """Training throughput and batch-1 inference latency per variant x precision x pipeline."""
    plot = Plot("cnn-speed", "CNN training throughput and inference latency")
    recs = [r for r in records if _is_ok(r)]
    lat = [r for r in recs if _num(r, "latency_p50_ms") is not None]
    if not recs:
        plot.notes.append("no ok CNN record")
        return plot
    if not lat:
        plot.notes.append("no inference recorded (older file or inference_calls 0): latency panel empty")
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.5 * len(recs) + 1.8), squeeze=False)
    labels = [cnn_label(r) for r in recs]
    y = np.arange(len(recs))
    # colour = precision; a row from an older file has none recorded (it ran as tf32)
    precisions = [str(r.get("precision") or "not recorded (older file)") for r in recs]
    colors = [PRECISION_COLORS.get(p, "0.6") for p in precisions]
    ax = axes[0][0]
    ax.barh(y, [_num(r, "throughput_ips") or 0.0 for r in recs], color=colors, alpha=0.8)
    ax.set_yticks(y, labels, fontsize=7)
    ax.set_xlabel("training images / s (measured epochs)")
    ax.invert_yaxis()
    ax.grid(True, axis="x", alpha=0.3)
    ax = axes[0][1]
    p50 = np.array([_num(r, "latency_p50_ms") or 0.0 for r in recs])
    p99 = np.array([_num(r, "latency_p99_ms") or 0.0 for r in recs])
    ax.barh(y, p50, color=colors, alpha=0.8)
    ax.errorbar(p50, y, xerr=[np.zeros_like(p50), np.maximum(p99 - p50, 0)], fmt="none",
                ecolor="k", capsize=3, lw=0.8)  # fmt: skip
    ax.set_yticks(y, [""] * len(recs))
    ax.set_xlabel("batch-1 inference latency ms (bar p50, whisker to p99)")
    ax.invert_yaxis()
    ax.grid(True, axis="x", alpha=0.3)
    for i, r in enumerate(recs):
        if r not in lat:
            ax.text(0, i, " n/a", va="center", fontsize=7, color="0.4")
            plot.notes.append(f"{cnn_label(r)}: no inference latency")
    from matplotlib.patches import Patch

    shown = list(dict.fromkeys(precisions))
    axes[0][0].legend([Patch(color=PRECISION_COLORS.get(p, "0.6"), alpha=0.8) for p in shown],
                      [f"precision {p}" for p in shown], fontsize=7, loc="best")  # fmt: skip
    fig.tight_layout()
    plot.fig = fig
    return plot


def _short(text: Any, n: int = 90) -> str:
    s = " ".join(str(text or "").split())
    return s if len(s) <= n else s[: n - 1] + "…"


def save(plot: Plot, folder: Path, stem: str) -> dict[str, Path]:
    """Write ``stem.png`` and ``stem.svg`` into ``folder``; close the figure."""
    if plot.fig is None:
        return {}
    plt = _plt()
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for ext in ("png", "svg"):
        path = folder / f"{stem}.{ext}"
        # no embedded timestamps: the same results give the same files
        meta = {"Date": None} if ext == "svg" else {"Software": None}
        plot.fig.savefig(path, dpi=DPI, format=ext, metadata=meta)
        out[ext] = path
    plt.close(plot.fig)
    return out
