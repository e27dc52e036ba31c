"""Training rows (``kind = "train"``, ``sciml-bench run NAME --train``): their table and figure.

The table has one row per backend x solver x gradient method x device: time to first
gradient, median seconds per iteration [IQR], the iteration and wall time at which the
loss first reached the target, from the build's start (build and compilation included,
:data:`sciml_bench.measure.training.CLOCK`; in brackets ``warm``: the iterations alone,
the first at most the median) or ``not reached``, the final loss, the curve's agreement
with the reference curve over its first K iterations (max relative deviation, tier, the
iteration where it departed), the worst gradient error at the reference's iterates (and
its tier) and the iterations done.

The verdict under the table (:func:`verdict_lines`) names the fastest row to the target
among those that qualify: ``ok``, the target reached, and gradients at the iterates within
``gradient_rtol`` (default the pass tier, 1e-4), not timed under load. A time to target is
one process a side, so the ratio to the runner-up must clear
:data:`~sciml_bench.measure.noise.PROCESS_FLOOR` to name a winner; inside it the two tie.

The figure (:func:`training_figure`) draws each row's loss against wall time and against
iteration, log loss, the target as a horizontal line and, on the iteration panel, the
reference curve over its K iterations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sciml_bench.measure.metrics import PASS_TOL
from sciml_bench.measure.noise import ONE_PROCESS, clears_noise, load_limit, others_load
from sciml_bench.results.plots import MARKERS, Plot, _finish, _log_axis, _plt, case_label, finite

COLUMNS = (
    "backend", "solver", "gradient", "device", "status", "TTFG s", "ms/iter [IQR]",
    "to target: iter, s (warm s)", "final loss", "curve vs reference",
    "gradient at iterates", "iterations",
)  # fmt: skip

#: keys of a training row in the machine-readable (--json) record, besides the ODE keys
JSON_KEYS = (
    "kind", "iterations", "iterations_done", "iteration_s", "first_iteration_s",
    "target_loss", "target_reached", "target_iteration", "time_to_target_s",
    "time_to_target_warm_s", "time_to_target_clock", "iterate_gradient_error",
    "iterate_gradient_tier", "iterate_gradient_worst_at", "initial_loss", "final_loss", "curve_deviation",
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


def iterate_gradient(r: dict[str, Any]) -> str:
    """``3.2e-07 pass``; ``1.0e-02 warn at 7`` (the worst iterate, when not θ0); ``-``."""
    e = r.get("iterate_gradient_error")
    if not isinstance(e, int | float):
        return "-"
    at = r.get("iterate_gradient_worst_at")
    where = f" at {at}" if at else ""
    return f"{e:.1e} {r.get('iterate_gradient_tier', '')}".rstrip() + where


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
        iterate_gradient(r),
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
    ax_t.set_xlabel("wall time from the build's start (build, compilation, timed iterations)")
    ax_i.set_xlabel("iteration")
    ax_i.legend(fontsize=7, loc="best")
    _finish(fig, recs, plot.title)
    plot.fig = fig
    return plot


def _label(r: dict[str, Any]) -> str:
    """``backend solver gradient_method``, and the device when it is not the CPU."""
    dev = r.get("device")
    return case_label(r) + (f" on {dev}" if dev not in (None, "", "cpu") else "")


# --- the verdict under the table ---------------------------------------------------------------

#: the criterion: seconds from the build's start to the target loss
CRITERION = "time to target"


def qualifies(r: dict[str, Any], gradient_rtol: float = PASS_TOL) -> bool:
    """``ok``, the target reached, the worst gradient error at the reference iterates
    judged within ``gradient_rtol`` by the one rule (:func:`~sciml_bench.measure.metrics.within`:
    the error at most the bound, the reference's own error at most a tenth of it; NaN never
    is), and not timed under load."""
    from sciml_bench.measure.metrics import within

    e, load = r.get("iterate_gradient_error"), others_load(r)
    return (r.get("status") == "ok" and bool(r.get("target_reached"))
            and finite(r.get("time_to_target_s")) and isinstance(e, int | float)
            and within(e, r.get("iterate_reference_error"), gradient_rtol)
            and not (load is not None and load > load_limit()))  # fmt: skip


def verdict_text(records: Sequence[dict[str, Any]], gradient_rtol: float | None = None) -> str:
    """One sentence: the fastest qualifying row to the target (:func:`qualifies`), the
    ratio ``t_runner_up / t_fastest`` and whether it clears the one-process floor
    (:data:`PROCESS_FLOOR`), or why no row qualifies; then the rows that reached the
    target sooner but were left out for their gradients, with their errors."""
    from sciml_bench.results.verdict import label

    rtol = PASS_TOL if gradient_rtol is None else float(gradient_rtol)
    rows = [r for r in records if is_training(r)]
    good = sorted((r for r in rows if qualifies(r, rtol)), key=lambda r: r["time_to_target_s"])
    if not good:
        return f"verdict ({CRITERION}): {_why_none(rows, rtol)}"
    win = good[0]
    head = f"{label(win)} ({win['time_to_target_s']:.3g} s from the build's start)"
    if len(good) == 1:
        body = (f"{head} is the only row that reached the target with gradients at the "
                f"iterates within {rtol:.0e}")  # fmt: skip
    else:
        ratio = good[1]["time_to_target_s"] / win["time_to_target_s"]
        other = f"{label(good[1])} ({good[1]['time_to_target_s']:.3g} s)"
        floor = ONE_PROCESS  # each row is one training run in one process
        body = (f"{head}, {ratio:.2f}x faster than {other}, {floor.text()}"
                if clears_noise(ratio, floor.value)
                else f"{head} and {other} tie at {ratio:.2f}x, {floor.text()}")  # fmt: skip
    sooner = [r for r in rows if r.get("status") == "ok" and not qualifies(r, rtol)
              and finite(r.get("time_to_target_s"))
              and r["time_to_target_s"] < win["time_to_target_s"]]  # fmt: skip
    if sooner:
        body += "; sooner but left out: " + "; ".join(
            f"{label(r)} ({r['time_to_target_s']:.3g} s): {_gradient_said(r)}" for r in sooner)
    return f"verdict ({CRITERION}): {body}"


def _gradient_said(r: dict[str, Any]) -> str:
    """Why a row that reached the target sooner does not qualify (load or gradient)."""
    load, e = others_load(r), r.get("iterate_gradient_error")
    if isinstance(e, int | float):
        if load is not None and load > load_limit() and e <= PASS_TOL:
            return f"timed under load (others_cpu {load:.2f})"
        return f"gradient error at the iterates {e:.2e} {r.get('iterate_gradient_tier', '')}".rstrip()
    return "gradients not checked at the iterates" + (
        f" ({r['iterate_gradient_note']})" if r.get("iterate_gradient_note") else "")


def _why_none(rows: Sequence[dict[str, Any]], rtol: float) -> str:
    """Why no training row qualifies, in one clause."""
    ok = [r for r in rows if r.get("status") == "ok"]
    if not ok:
        return "no row finished its training"
    reached = [r for r in ok if r.get("target_reached")]
    if not reached:
        return "no row reached the target loss"
    checked = [r for r in reached if isinstance(r.get("iterate_gradient_error"), int | float)]
    if not checked:
        return "no row that reached the target has its gradients checked at the iterates"
    accurate = [r for r in checked if r["iterate_gradient_error"] <= rtol]
    if accurate:
        return f"every row that reached the target with gradients within {rtol:.0e} was " \
               f"timed under load (others_cpu above {load_limit():g} cores)"
    best = min(checked, key=lambda r: r["iterate_gradient_error"])
    return (f"no row reached the target with gradients at the iterates within {rtol:.0e} "
            f"(the best: {case_label(best)}, {best['iterate_gradient_error']:.2e})")


def verdict_lines(
    records: Sequence[dict[str, Any]], gradient_rtol: float | None = None, width: int = 100
) -> list[str]:
    """The verdict under a problem's training table, wrapped at ``width`` (none without
    training rows)."""
    import textwrap

    if not any(is_training(r) for r in records):
        return []
    return [textwrap.fill(verdict_text(records, gradient_rtol), width=width,
                          subsequent_indent="    ")]  # fmt: skip
