"""Ensemble scaling: time per call against ensemble size, and where the fastest line changes.

An ensemble problem runs *ladders*: one line per backend x solver x gradient method x
semantics x device (and results file, in a multi-file report; and rtol and dtype where the
rows hold more than one), one point per size. At a size N every line solves the same N
members, so the line with the smallest median time per call is also the one with the
highest throughput (N / time).

:func:`crossovers` walks the sizes in increasing order and reports where the fastest line
changes, by the verdict's rules (:mod:`~sciml_bench.results.verdict`): a point counts where
its row does (:func:`counts`: the gradient panel's rows qualify,
:func:`~sciml_bench.results.verdict.qualifies` at ``--gradient-rtol``; the solve panel's
are ``ok`` and not timed under load), and the leaders at a size are the lines within the
floor of the fastest (:data:`~sciml_bench.measure.noise.PROCESS_FLOOR`, 2.1x: a rung's
steady samples come from one process), so a ratio inside it is a tie and ties keep the
lead. A crossover happens only where no current leader is among them, and the sizes
bound it: it lies between the last size where an overtaken line was ahead of the new
leader beyond the floor and the size where the new leader is, ``(a, b]``; ties and sizes
that give no evidence between the two are named. :func:`scaling_figure` draws the lines
(solve and gradient panels, log-log, IQR error bars, every ``ok`` row) and marks the
crossovers.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sciml_bench.measure.noise import ONE_PROCESS, clears_noise, load_limit, others_load
from sciml_bench.results import plots, styles
from sciml_bench.results.growth import SPLIT_KEYS, sci, split_value, splits
from sciml_bench.results.verdict import DEFAULT_GRADIENT_RTOL, qualifies

#: a rung's steady samples come from one process: the one-process floor (2.1x)
PROCESS_FLOOR = ONE_PROCESS.value

#: marker and line style per semantics: colour tells backends apart, style the semantics
SEMANTICS_STYLE = {"independent": ("o", "-"), "coupled": ("s", "--")}

#: run, backend, solver, gradient method, semantics, device, rtol, dtype
LineKey = tuple[str, str, str, str, str, str, str, str]


def is_ensemble(r: dict[str, Any]) -> bool:
    return r.get("kind") == "ensemble"


def device_of(r: dict[str, Any]) -> str:
    """Where the row ran, else where it was asked to run (a ``cuda`` row that could not)."""
    return str(r.get("device") or r.get("device_requested") or "?")


def line_key(r: dict[str, Any]) -> LineKey:
    """What a ladder is: results file, backend, solver, gradient method, semantics, device,
    rtol and dtype (a line's label shows those two only where they vary: :func:`line_labels`)."""
    rtol, dtype = (split_value(r, k) for k in SPLIT_KEYS)
    return (
        str(r.get("_run") or ""), str(r.get("backend") or "?"), str(r.get("solver") or ""),
        str(r.get("gradient_method") or ""), str(r.get("semantics") or ""), device_of(r),
        rtol, dtype,
    )  # fmt: skip


def line_labels(records: Sequence[dict[str, Any]]) -> dict[LineKey, str]:
    """``backend/device/semantics`` per ladder (``#1 `` first in multi-file reports; then
    the rtol and dtype where the rows hold more than one); the solver and gradient method
    are added only where two ladders would read the same."""
    keys = list(dict.fromkeys(line_key(r) for r in records))
    split = splits(records)

    def short(k: LineKey) -> str:
        run, backend, _, _, semantics, device, rtol, dtype = k
        shown = [v for name, v in zip(SPLIT_KEYS, (rtol, dtype), strict=True) if name in split]
        head = "/".join(p for p in (backend, device, semantics) if p)
        return " ".join(p for p in (run, head, *shown) if p)

    counts: dict[str, int] = {}
    for k in keys:
        counts[short(k)] = counts.get(short(k), 0) + 1
    out = {}
    for k in keys:
        extra = " ".join(p for p in (k[2], k[3]) if p and p != "none")
        out[k] = short(k) + (f" ({extra})" if counts[short(k)] > 1 and extra else "")
    return out


def row_label(r: dict[str, Any]) -> str:
    """One row of a ladder, for notes: ``diffrax Tsit5 coupled on cpu n=16``."""
    parts = [r.get("_run"), r.get("backend"), r.get("solver")]
    if r.get("gradient_method") not in (None, "", "none"):
        parts.append(r["gradient_method"])
    parts += [r.get("semantics"), f"on {device_of(r)}"]
    if r.get("size") is not None:
        parts.append(f"n={r['size']}")
    return " ".join(str(p) for p in parts if p)


def counts(r: dict[str, Any], time_key: str, gradient_rtol: float | None = None) -> bool:
    """Whether a row's ``time_key`` counts in a crossover: a gradient time where the row
    qualifies under the verdict's rule at ``gradient_rtol`` (None: the pass tier), a solve
    time where the row is ``ok`` and not timed under load (the verdict's load rule; the
    solve has no accuracy bar of its own here)."""
    if r.get("size") is None or not plots.finite(r.get(time_key)):
        return False
    if time_key == "grad_s":
        return qualifies(r, DEFAULT_GRADIENT_RTOL if gradient_rtol is None else gradient_rtol)
    load = others_load(r)
    return r.get("status") == "ok" and not (load is not None and load > load_limit())


def series(
    records: Sequence[dict[str, Any]], time_key: str, gradient_rtol: float | None = None,
    every_ok: bool = False,
) -> dict[str, dict[int, float]]:  # fmt: skip
    """Label -> {size: median seconds per call} over the rows that count in a crossover
    (:func:`counts`; ``every_ok``: every ``ok`` row that measured ``time_key``, as drawn);
    lines without any such row are left out."""
    labels = line_labels(records)
    out: dict[str, dict[int, float]] = {}
    for r in records:
        ok = r.get("status") == "ok" and r.get("size") is not None and plots.finite(r.get(time_key))
        if ok if every_ok else counts(r, time_key, gradient_rtol):
            out.setdefault(labels[line_key(r)], {})[int(r["size"])] = float(r[time_key])
    return out


@dataclass(frozen=True)
class Crossover:
    """``leaders`` took the lead from ``overtaken`` somewhere in ``(previous_size, size]``.

    ``measured``: an overtaken line was measured at ``size`` and was slower beyond the
    floor; ``previous_size`` is then the last size where an overtaken line was ahead of
    the leaders beyond it (None: the leaders were never measured behind, so the crossover
    lies at or below ``size``), ``tied`` the sizes in between where they were inside the
    floor, ``unmeasured`` those where the leaders have no point (no evidence). False:
    the overtaken lines end at ``previous_size`` (their ladders stopped)."""

    size: int
    previous_size: int | None
    leaders: tuple[str, ...]
    overtaken: tuple[str, ...]
    measured: bool
    tied: tuple[int, ...] = ()
    unmeasured: tuple[int, ...] = ()
    floor: float = PROCESS_FLOOR

    def text(self) -> str:
        lead = " and ".join(self.leaders)
        gone = " and ".join(self.overtaken)
        if not self.measured:
            return f"{lead} fastest from {self.size} ({gone} measured only up to {self.previous_size})"
        verb = "overtakes" if len(self.leaders) == 1 else "overtake"
        if self.previous_size is None:
            head = f"{lead} {verb} {gone} at or below {self.size} (not measured behind it before)"
        else:
            head = f"{lead} {verb} {gone} in ({self.previous_size}, {self.size}]"
        if self.tied:
            head += f", tied inside the {self.floor:g}x floor at {_ints(self.tied)}"
        if self.unmeasured:
            head += f", no evidence at {_ints(self.unmeasured)} (a side without a point)"
        return head


def _ints(ns: Sequence[int]) -> str:
    return ", ".join(str(n) for n in ns)


def _fastest(times: Mapping[str, float], floor: float) -> set[str]:
    """The lines whose time is within ``floor`` of the smallest (a ratio that does not
    clear the noise floor is a tie)."""
    best = min(times.values())
    return {k for k, t in times.items() if t <= best or not clears_noise(t / best, floor)}


def _bound(
    size: int, new: set[str], old: set[str], seen: Sequence[tuple[int, dict[str, float], set[str]]]
) -> Crossover:  # fmt: skip
    """A measured crossover at ``size``, bounded below by the last size (of ``seen``:
    size, times, fastest) where a line of ``old`` was among the fastest and a line of
    ``new`` was measured outside them; the sizes after it where the two tied, and those
    that give no evidence (either side without a point that counts)."""
    tied: list[int] = []
    unmeasured: list[int] = []
    bound = None
    for n, times, fastest in reversed(seen):
        ahead, behind = old & fastest, new & set(times)
        if ahead and behind and not behind & fastest:
            bound = n
            break
        (tied if ahead and behind & fastest else unmeasured).append(n)
    return Crossover(size, bound, tuple(sorted(new)), tuple(sorted(old)), True,
                     tuple(reversed(tied)), tuple(reversed(unmeasured)))  # fmt: skip


def crossovers(
    lines: Mapping[str, Mapping[int, float]], floor: float = PROCESS_FLOOR
) -> tuple[list[Crossover], tuple[str, ...]]:
    """The crossovers of ``lines`` (label -> {size: median seconds}), smallest size first,
    and the leaders at the largest size.

    At each size (increasing; sizes where no line has a finite positive time skipped)
    the fastest set F holds the lines within ``floor`` of the smallest time (a tie). The
    current leaders L start as F at the first size. At the next size:

    - a line of L measured there is in F: L keeps those, and the lines of L not measured
      there whose ladders go on (no evidence against them); a tie keeps the lead;
    - a line of L was measured there and none is in F: F overtook L (``measured``),
      bounded below by :func:`_bound`;
    - no line of L was measured there but one is at a larger size: a gap in L's ladder
      says nothing about the ranking, the size is passed over;
    - no line of L is measured there or beyond (its ladder stopped): the lead passes
      to F without a contest (``measured`` False).
    """
    clean = {
        k: {int(n): float(t) for n, t in pts.items() if plots.finite(t) and t > 0}
        for k, pts in lines.items()
    }  # fmt: skip
    sizes = sorted({n for pts in clean.values() for n in pts})
    last = {k: max(pts, default=0) for k, pts in clean.items()}
    leaders: set[str] = set()
    seen: list[tuple[int, dict[str, float], set[str]]] = []
    out: list[Crossover] = []
    for size in sizes:
        times = {k: pts[size] for k, pts in clean.items() if size in pts}
        fastest = _fastest(times, floor)
        measured = leaders & set(times)
        if not seen:
            leaders = fastest
        elif measured & fastest:
            leaders = (measured & fastest) | {k for k in leaders - measured if last[k] > size}
        elif measured:
            out.append(replace(_bound(size, fastest, measured, seen), floor=floor))
            leaders = fastest
        elif any(last[k] > size for k in leaders):
            pass  # a gap in the leaders' ladder: no evidence either way
        else:
            out.append(Crossover(size, max(last[k] for k in leaders), tuple(sorted(fastest)),
                                 tuple(sorted(leaders)), False, floor=floor))  # fmt: skip
            leaders = fastest
        seen.append((size, times, fastest))
    return out, tuple(sorted(leaders))


def crossover_text(lines: Mapping[str, Mapping[int, float]], floor: float = PROCESS_FLOOR) -> str:
    """One sentence: the crossovers, or which line was fastest throughout."""
    sizes = sorted(
        {n for pts in lines.values() for n, t in pts.items() if plots.finite(t) and t > 0}
    )
    if not sizes:
        return "no timing that counts"
    found, last = crossovers(lines, floor)
    if found:
        return "; ".join(c.text() for c in found)
    span = f"{sizes[0]}–{sizes[-1]}" if len(sizes) > 1 else f"{sizes[0]}"
    tied = f" (tied inside the {floor:g}x floor)" if len(last) > 1 else ""
    text = f"no crossover over sizes {span}: {' and '.join(last)}{tied} fastest throughout"
    return text + _tied_with(lines, last, floor)


def _tied_with(lines: Mapping[str, Mapping[int, float]], leaders: Sequence[str],
               floor: float) -> str:  # fmt: skip
    """``, tied inside the 2.1x floor with B at 1, 4``: the sizes where another line was
    within the floor of the leaders (a lead kept through ties is not a lead shown there)."""
    others: dict[str, list[int]] = {}
    for n in sorted({n for pts in lines.values() for n in pts}):
        times = {k: float(t) for k, pts in lines.items() if n in pts
                 and plots.finite(t := pts[n]) and t > 0}  # fmt: skip
        fastest = _fastest(times, floor) if times else set()
        if fastest & set(leaders):
            for k in sorted(fastest - set(leaders)):
                others.setdefault(k, []).append(n)
    return "".join(f", tied inside the {floor:g}x floor with {k} at {_ints(ns)}"
                   for k, ns in others.items())  # fmt: skip


def scaling_texts(
    records: Sequence[dict[str, Any]], gradient_rtol: float | None = None
) -> list[str]:  # fmt: skip
    """``Crossovers (solve): ...`` and ``(gradient)`` for the panels that have timings,
    each over the rows that count (:func:`counts`)."""
    ens = [r for r in records if is_ensemble(r)]
    rtol = DEFAULT_GRADIENT_RTOL if gradient_rtol is None else gradient_rtol
    which = {"solve_s": "ok rows not timed under load",
             "grad_s": "rows with a passing gradient" if rtol == DEFAULT_GRADIENT_RTOL
             else f"rows with a gradient error ≤ {sci(rtol)}"}  # fmt: skip
    out = []
    for key, _, name in plots.TIME_PANELS:
        if series(ens, key, every_ok=True):
            text = crossover_text(series(ens, key, gradient_rtol))
            out.append(f"Crossovers ({name} time per call, {which[key]}; "
                       f"{ONE_PROCESS.text()}): {text}.")
    return out


def _missing_notes(records: Sequence[dict[str, Any]]) -> list[str]:
    """One note per ladder with rows that are not points: status per size (a row without
    a size, e.g. an ``unavailable`` backend, has no line at all)."""
    labels = line_labels(records)
    missing: dict[LineKey, list[str]] = {}
    out = []
    for r in records:
        if r.get("status") == "ok":
            continue
        what = str(r.get("status"))
        if r.get("size") is None:
            out.append(f"{labels[line_key(r)]}: no line ({what})")
            continue
        if r.get("status") != "skipped" and r.get("reason"):
            what += f": {plots._short(r.get('reason'), 60)}"
        missing.setdefault(line_key(r), []).append(f"n={r['size']} ({what})")
    return out + [f"{labels[k]}: no point at {', '.join(v)}" for k, v in missing.items()]


def scaling_figure(
    records: Sequence[dict[str, Any]], gradient_rtol: float | None = None
) -> plots.Plot:  # fmt: skip
    """Median time per call against ensemble size, log-log, solve and gradient panels:
    every ``ok`` row drawn, the crossovers of the rows that count (:func:`counts`) marked."""
    plot = plots.Plot("scaling", "Time per call against ensemble size")
    ens = [r for r in records if is_ensemble(r)]
    plot.notes += _missing_notes(ens)
    labels = line_labels(ens)
    drawn = plots.timed_panels(lambda key: series(ens, key, every_ok=True))
    if not drawn:
        plot.notes.insert(0, "no ok ensemble row has a steady-state time")
        return plot
    fig, axes = plots.ladder_figure(len(drawn), 3.6)
    colors = _ladder_colors(labels)
    handles: dict[str, Any] = {}
    for ax, (panel, lines) in zip(axes, drawn.items(), strict=True):
        for lab, h in _draw_ladders(ax, ens, panel, labels, colors).items():
            handles.setdefault(lab, h)
        sizes = sorted({s for pts in lines.values() for s in pts})
        found = _mark_crossovers(ax, series(ens, panel[0], gradient_rtol), sizes)
        name = panel[2]
        plots.ladder_axes(ax, sizes)
        ax.set_xlabel("ensemble size (members per call)")
        ax.set_ylabel(f"{name} time per call, median [IQR]")
        ax.set_title(name + (" (dotted: crossover)" if found else ""), fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
    style_note = ", ".join(f"{s}: {m} {ls}" for s, (m, ls) in SEMANTICS_STYLE.items())
    axes[-1].legend(
        list(handles.values()), list(handles), fontsize=8, loc="upper left",
        bbox_to_anchor=(1.02, 1.0), title=f"backend/device/semantics\n({style_note})",
        title_fontsize=7,
    )  # fmt: skip
    plots._finish(fig, ens, "time per call against ensemble size")
    plot.fig = fig
    return plot


def _ladder_colors(labels: dict[LineKey, str]) -> dict[str, str]:
    """A colour per ladder label: its library's, the same in every figure
    (:func:`~sciml_bench.results.styles.library_color`); the line style tells semantics
    apart."""
    return {lab: styles.library_color(k[1]) for k, lab in labels.items()}


def _draw_ladders(
    ax: Any, ens: Sequence[dict[str, Any]], panel: tuple[str, str, str],
    labels: dict[LineKey, str], colors: dict[str, str],
) -> dict[str, Any]:  # fmt: skip
    """Each ladder's ok rows of the panel's time against size, with IQR error bars, in the
    order of ``labels``; returns the drawn lines by label (for the legend)."""
    tkey, qkey, _ = panel
    rows: dict[str, list[dict[str, Any]]] = {}
    for r in ens:
        if r.get("status") == "ok" and r.get("size") is not None and plots.finite(r.get(tkey)):
            rows.setdefault(labels[line_key(r)], []).append(r)
    handles: dict[str, Any] = {}
    for lab in labels.values():
        rs = sorted(rows.get(lab, []), key=lambda r: r["size"])
        if not rs:
            continue
        marker, style = SEMANTICS_STYLE.get(str(rs[0].get("semantics")), (plots.MARKERS[-1], ":"))
        y, bars = plots.iqr_bars(rs, tkey, qkey)
        handles[lab] = ax.errorbar([r["size"] for r in rs], y, yerr=bars, marker=marker,
                                   ls=style, ms=5, capsize=2, lw=1.3, color=colors[lab],
                                   label=lab)  # fmt: skip
    return handles


def _mark_crossovers(
    ax: Any, lines: Mapping[str, Mapping[int, float]], sizes: list[int]
) -> list[Crossover]:
    """Each crossover of ``lines`` as its interval shaded, a dotted vertical line at its
    upper end, a ring round the new leader's point and its sentence beside it; returns the
    crossovers."""
    found, _ = crossovers(lines)
    for c in found:
        if c.measured and c.previous_size is not None:
            ax.axvspan(c.previous_size, c.size, color="0.5", alpha=0.08, lw=0)
        ax.axvline(c.size, color="0.45", ls=":", lw=1)
        y_at = min(lines[lab][c.size] for lab in c.leaders)
        ax.plot(c.size, y_at, "o", ms=11, mfc="none", mec="k", mew=0.8)
        # wrapped, and away from the nearer edge: the text stays inside the panel
        right = math.log(c.size / sizes[0]) > 0.5 * math.log(sizes[-1] / sizes[0])
        ax.annotate(
            textwrap.fill(c.text(), 34), (c.size, y_at), xytext=(-8 if right else 8, -10),
            textcoords="offset points", fontsize=7, color="0.2",
            ha="right" if right else "left", va="top",
        )  # fmt: skip
    return found


def per_member_us(r: dict[str, Any]) -> float | None:
    """Median solve time per member in microseconds (``solve_s / size``)."""
    t, n = r.get("solve_s"), r.get("size")
    if not plots.finite(t) or not isinstance(n, int) or n <= 0:
        return None
    return float(t) / n * 1e6
