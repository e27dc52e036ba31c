"""Ensemble scaling: time per call against ensemble size, and where the fastest line changes.

An ensemble problem runs *ladders*: one line per backend x solver x gradient method x
semantics x device (and results file, in a multi-file report), one point per size.
At a size N every line solves the same N members, so the line with the smallest median
time per call is also the one with the highest throughput (N / time).

:func:`crossovers` walks the sizes in increasing order and reports each size at which
the fastest line changes. Ties keep the lead: the leaders at a size are the lines whose
median is within ``tie_rtol`` of the smallest, and a crossover happens only when none
of the current leaders is among them. :func:`scaling_figure` draws the lines (solve and
gradient panels, log-log, IQR error bars) and marks the crossovers.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sciml_bench.results import plots

#: marker and line style per semantics: colour tells backends apart, style the semantics
SEMANTICS_STYLE = {"independent": ("o", "-"), "coupled": ("s", "--")}

LineKey = tuple[str, str, str, str, str, str]


def is_ensemble(r: dict[str, Any]) -> bool:
    return r.get("kind") == "ensemble"


def device_of(r: dict[str, Any]) -> str:
    """Where the row ran, else where it was asked to run (a ``cuda`` row that could not)."""
    return str(r.get("device") or r.get("device_requested") or "?")


def line_key(r: dict[str, Any]) -> LineKey:
    """What a ladder is: results file, backend, solver, gradient method, semantics, device."""
    return (
        str(r.get("_run") or ""), str(r.get("backend") or "?"), str(r.get("solver") or ""),
        str(r.get("gradient_method") or ""), str(r.get("semantics") or ""), device_of(r),
    )  # fmt: skip


def line_labels(records: Sequence[dict[str, Any]]) -> dict[LineKey, str]:
    """``backend/device/semantics`` per ladder (``#1 `` first in multi-file reports); the
    solver and gradient method are added only where two ladders would read the same."""
    keys = list(dict.fromkeys(line_key(r) for r in records))

    def short(k: LineKey) -> str:
        run, backend, _, _, semantics, device = k
        return f"{run} {'/'.join(p for p in (backend, device, semantics) if p)}".strip()

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


def series(
    records: Sequence[dict[str, Any]], time_key: str
) -> dict[str, dict[int, float]]:  # fmt: skip
    """Label -> {size: median seconds per call} over the ``ok`` rows that measured
    ``time_key``; lines without any such row are left out."""
    labels = line_labels(records)
    out: dict[str, dict[int, float]] = {}
    for r in records:
        if r.get("status") == "ok" and r.get("size") is not None and plots.finite(r.get(time_key)):
            out.setdefault(labels[line_key(r)], {})[int(r["size"])] = float(r[time_key])
    return out


@dataclass(frozen=True)
class Crossover:
    """At ``size`` the fastest line(s) ``leaders`` took over from ``overtaken``, the
    fastest at ``previous_size`` (the size compared before, see :func:`crossovers`)."""

    size: int
    previous_size: int
    leaders: tuple[str, ...]
    overtaken: tuple[str, ...]
    #: an overtaken line was measured at ``size`` and was slower; False: the overtaken
    #: lines end at ``previous_size`` (their ladders stopped or went no further)
    measured: bool

    def text(self) -> str:
        lead = " and ".join(self.leaders)
        gone = " and ".join(self.overtaken)
        if self.measured:
            verb = "overtakes" if len(self.leaders) == 1 else "overtake"
            return f"{lead} {verb} {gone} at {self.size}"
        return f"{lead} fastest from {self.size} ({gone} measured only up to {self.previous_size})"


def _fastest(times: Mapping[str, float], tie_rtol: float) -> set[str]:
    best = min(times.values())
    return {k for k, t in times.items() if t <= best * (1.0 + tie_rtol)}


def crossovers(
    lines: Mapping[str, Mapping[int, float]], tie_rtol: float = 0.0
) -> tuple[list[Crossover], tuple[str, ...]]:
    """The crossovers of ``lines`` (label -> {size: median seconds}), smallest size first,
    and the leaders at the largest size.

    At each size (increasing; sizes where no line has a finite positive time skipped)
    the fastest set F holds the lines within ``tie_rtol`` of the smallest time. The
    current leaders L start as F at the first size. At the next size:

    - L and F share a line: L narrows to the shared lines (a tie keeps the lead);
    - a line of L was measured there and is not in F: F overtook L (``measured``);
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
    prev: int | None = None
    out: list[Crossover] = []
    for size in sizes:
        times = {k: pts[size] for k, pts in clean.items() if size in pts}
        fastest = _fastest(times, tie_rtol)
        if prev is None:
            leaders = fastest
        elif leaders & fastest:
            leaders &= fastest
        else:
            measured = any(k in times for k in leaders)
            if not measured and any(last[k] > size for k in leaders):
                continue  # a gap in the leaders' ladder
            out.append(Crossover(size, prev, tuple(sorted(fastest)), tuple(sorted(leaders)),
                                 measured))  # fmt: skip
            leaders = fastest
        prev = size
    return out, tuple(sorted(leaders))


def crossover_text(lines: Mapping[str, Mapping[int, float]], tie_rtol: float = 0.0) -> str:
    """One sentence: the crossovers, or which line was fastest throughout."""
    sizes = sorted(
        {n for pts in lines.values() for n, t in pts.items() if plots.finite(t) and t > 0}
    )
    if not sizes:
        return "no ok timing"
    found, last = crossovers(lines, tie_rtol)
    if found:
        return "; ".join(c.text() for c in found)
    span = f"{sizes[0]}–{sizes[-1]}" if len(sizes) > 1 else f"{sizes[0]}"
    tied = " (tied)" if len(last) > 1 else ""
    return f"no crossover over sizes {span}: {' and '.join(last)}{tied} fastest throughout"


def scaling_texts(records: Sequence[dict[str, Any]]) -> list[str]:
    """``Crossovers (solve): ...`` and ``(gradient)`` for the panels that have timings."""
    ens = [r for r in records if is_ensemble(r)]
    out = []
    for key, _, name in plots.TIME_PANELS:
        lines = series(ens, key)
        if lines:
            out.append(f"Crossovers ({name} time per call): {crossover_text(lines)}.")
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


def scaling_figure(records: Sequence[dict[str, Any]]) -> plots.Plot:
    """Median time per call against ensemble size, log-log, solve and gradient panels."""
    plot = plots.Plot("scaling", "Time per call against ensemble size")
    ens = [r for r in records if is_ensemble(r)]
    plot.notes += _missing_notes(ens)
    labels = line_labels(ens)
    drawn = plots.timed_panels(lambda key: series(ens, key))
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
        found = _mark_crossovers(ax, lines, sizes)
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
    """A colour per ladder label, shared by the ladders that differ only in semantics (the
    line style tells those apart)."""
    colors: dict[str, str] = {}
    by_color: dict[tuple[str, ...], str] = {}
    for k, lab in labels.items():
        base = (k[0], k[1], k[2], k[3], k[5])
        colors[lab] = by_color.setdefault(base, f"C{len(by_color) % 10}")
    return colors


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
    """Each crossover of ``lines`` as a dotted vertical line, a ring round the new leader's
    point and its sentence beside it; returns the crossovers."""
    found, _ = crossovers(lines)
    for c in found:
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
