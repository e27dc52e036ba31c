"""Training rows (``kind = "train"``, ``sciml-bench run NAME --train``): their table and figure.

The table has one row per backend x solver x gradient method x device: time to first
gradient, median seconds per iteration [IQR], the iteration and wall time at which the
loss first reached the target (with the first iteration's compilation, and without it:
``warm``) or ``not reached``, the final loss, the curve's agreement with the reference
curve over its first K iterations (max relative deviation, tier, the iteration where it
departed) and the iterations done.

The figure (:func:`training_figure`) draws each row's loss against wall time and against
iteration, log loss, the target as a horizontal line and, on the iteration panel, the
reference curve over its K iterations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sciml_bench.results.plots import MARKERS, Plot, _finish, _log_axis, _plt, case_label, finite

COLUMNS = (
    "backend", "solver", "gradient", "device", "status", "TTFG s", "ms/iter [IQR]",
    "to target: iter, s (warm s)", "final loss", "curve vs reference", "iterations",
)  # fmt: skip

#: keys of a training row in the machine-readable (--json) record, besides the ODE keys
JSON_KEYS = (
    "kind", "iterations", "iterations_done", "iteration_s", "first_iteration_s",
    "target_loss", "target_reached", "target_iteration", "time_to_target_s",
    "time_to_target_warm_s", "initial_loss", "final_loss", "curve_deviation",
    "curve_departed_at", "curve_tier", "curve_compared", "learning_rate", "beta1", "beta2",
    "eps",
)  # fmt: skip


def is_training(r: dict[str, Any]) -> bool:
    return r.get("kind") == "train"


def _num(x: Any, fmt: str) -> str:
    return format(x, fmt) if finite(x) else "-"


def per_iteration(r: dict[str, Any]) -> str:
    """Median milliseconds per iteration with the IQR: ``14.2 [13.9-14.8]``."""
    med, q = r.get("iteration_s"), r.get("iteration_iqr")
    if not finite(med):
        return "-"

    def ms(x: float) -> str:  # 3 significant digits, never an exponent
        return f"{x * 1e3:.3g}" if x < 1.0 else f"{x * 1e3:.0f}"

    return ms(med) + (f" [{ms(q[0])}-{ms(q[1])}]" if q and len(q) == 2 else "")


def to_target(r: dict[str, Any]) -> str:
    """``180: 3.1 s (2.9 s)`` (iteration, with and without compilation), ``not reached``
    when the run ended short of the target, ``-`` when it never trained."""
    if finite(r.get("time_to_target_s")):
        warm = r.get("time_to_target_warm_s")
        tail = f" ({warm:.3g} s)" if finite(warm) else ""
        return f"{r['target_iteration']}: {r['time_to_target_s']:.3g} s{tail}"
    return "not reached" if r.get("iterations_done") else "-"


def agreement(r: dict[str, Any]) -> str:
    """``2.1e-05 pass``; ``3.4e-01 fail, departed at 3``; ``-`` when nothing was compared."""
    if not finite(r.get("curve_deviation")):
        return "-"
    s = f"{r['curve_deviation']:.1e} {r.get('curve_tier', '')}".rstrip()
    if r.get("curve_departed_at") is not None:
        s += f", departed at {r['curve_departed_at']}"
    return s


def row(r: dict[str, Any], device: str) -> list[str]:
    """One training row of the terminal table (and, marked up, the report's); ``device`` is
    the row's device cell (:func:`sciml_bench.results.table.device_cell`)."""
    done, n = r.get("iterations_done"), r.get("iterations")
    return [
        str(r.get("backend", "")),
        str(r.get("solver", "")),
        str(r.get("gradient_method", "")),
        device,
        str(r.get("status", "")),
        _num(r.get("ttfg_s"), ".2f"),
        per_iteration(r),
        to_target(r),
        _num(r.get("final_loss"), ".3g"),
        agreement(r),
        f"{done}/{n}" if done is not None and n is not None and r.get("status") != "unavailable"
        else "-",
    ]


def training_figure(records: Sequence[dict[str, Any]]) -> Plot:
    """Loss against wall time and against iteration, one line per row with a curve."""
    plot = Plot("training", "Training: loss vs wall time and vs iteration")
    recs = [r for r in records if is_training(r) and r.get("curve_loss")]
    missing = [_label(r) for r in records if is_training(r) and r not in recs]
    if missing:
        plot.notes.append(f"no loss curve (failed before its first iteration, or "
                          f"unavailable): {', '.join(missing)}")  # fmt: skip
    if not recs:
        plot.notes.insert(0, "no training row with a loss curve")
        return plot
    plt = _plt()
    fig, (ax_t, ax_i) = plt.subplots(1, 2, figsize=(11, 4.3))
    for i, r in enumerate(recs):
        label = _label(r) + ("" if r.get("status") == "ok" else f" ({r.get('status')})")
        kw = {"marker": MARKERS[i % len(MARKERS)], "markevery": max(1, len(r["curve_loss"]) // 8),
              "ms": 4, "lw": 1.2, "label": label}  # fmt: skip
        ax_t.plot(r["curve_time_s"], r["curve_loss"], **kw)
        ax_i.plot(r["curve_iteration"], r["curve_loss"], **kw)
        if r.get("status") != "ok":
            plot.notes.append(f"{_label(r)}: {r.get('status')} after "
                              f"{r.get('iterations_done')} iterations: {r.get('reason', '')}")
    ref = next((r["reference_curve_loss"] for r in recs if r.get("reference_curve_loss")), None)
    if ref:
        ax_i.plot(range(len(ref)), ref, "k--", lw=1.0,
                  label=f"reference (SciPy gradient, first {len(ref)} iterations)")
    targets = sorted({float(r["target_loss"]) for r in recs if finite(r.get("target_loss"))})
    for ax in (ax_t, ax_i):
        for tgt in targets:
            ax.axhline(tgt, color="0.3", ls=":", lw=1.0)
            ax.annotate(f"target {tgt:g}", (0.995, tgt), xycoords=("axes fraction", "data"),
                        ha="right", va="bottom", fontsize=7, color="0.3")  # fmt: skip
        if all(v > 0 for r in recs for v in r["curve_loss"]) and all(t > 0 for t in targets):
            ax.set_yscale("log")
            _log_axis(ax.yaxis, sci=True)
        ax.set_ylabel("loss")
        ax.grid(True, alpha=0.3)
    if all(t > 0 for r in recs for t in r["curve_time_s"]):  # compilation can dwarf the rest
        ax_t.set_xscale("log")
        _log_axis(ax_t.xaxis, seconds=True)
    ax_t.set_xlabel("wall time (timed iterations; the first includes compilation)")
    ax_i.set_xlabel("iteration")
    ax_i.legend(fontsize=7, loc="best")
    _finish(fig, recs, plot.title)
    plot.fig = fig
    return plot


def _label(r: dict[str, Any]) -> str:
    """``backend solver gradient_method``, and the device when it is not the CPU."""
    dev = r.get("device")
    return case_label(r) + (f" on {dev}" if dev not in (None, "", "cpu") else "")
