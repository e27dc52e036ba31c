"""How a line looks in the report's figures: colour by library, style by method, faint
where its row does not qualify, and panels once there are too many lines for one.

- **Colour by library**, one fixed colour per backend (:data:`LIBRARY_COLORS`) in every
  figure, so Diffrax is the same blue in the growth, gradient-scaling, work-precision and
  ensemble figures, and two libraries never share one (a 28-line ladder drawn in
  matplotlib's ten-colour cycle repeated colours across libraries).
- **Line style and marker by method** (:class:`MethodStyles`): the solver, gradient
  method, Jacobian kind and whatever else tells a library's lines apart, in order of
  appearance; eight distinct pairs before any repeats.
- **Faint where it does not qualify**: a point whose row does not qualify
  (:func:`sciml_bench.results.verdict.qualifies` for a gradient; ``ok`` and not timed under
  load for a solve) is drawn at :data:`FAINT` alpha, and the legend names its tier
  (``(fail)``, or ``(fail at n=1000)`` where only some rungs miss), so that the fastest
  line cannot be a failing gradient's without saying so.
- **Panels past** :data:`MAX_LINES` **lines**: one row of panels per library
  (:func:`panel_groups`), each with its own legend.
- **Legends outside the axes, never clipped**: :func:`sciml_bench.results.plots.fit_legends`
  (called by every figure's finish) grows the figure until every legend lies inside it;
  :func:`~sciml_bench.results.plots.grid_figure` sizes each row of panels for its legend.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from sciml_bench.measure.noise import loaded
from sciml_bench.results.verdict import DEFAULT_GRADIENT_RTOL, qualifies

#: one colour per backend, the same in every figure (matplotlib's tab10 and tab20's dark
#: half, so that neighbours in the legend differ in hue)
LIBRARY_COLORS = {
    "diffrax": "#1f77b4", "torchdiffeq": "#ff7f0e", "diffsol": "#2ca02c", "cvodes": "#d62728",
    "scipy": "#9467bd", "julia": "#8c564b", "torchode": "#e377c2", "amici": "#bcbd22",
    "jax": "#17becf", "torch-eager": "#ff7f0e", "torch-compile": "#7f7f7f",
    "tensorflow": "#393b79",
}  # fmt: skip
#: colours for a backend not named above, picked by a stable hash of its name
SPARE_COLORS = ("#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d")
#: line styles and markers, paired by index: a method's pair
LINE_STYLES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 1)),
               (0, (8, 2, 2, 2)))  # fmt: skip
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
#: alpha of a point (and the line into it) whose row does not qualify
FAINT = 0.25
#: lines one panel holds before a figure splits into a row of panels per library
MAX_LINES = 12


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _sci(x: float) -> str:
    """``1e-04``, ``2.5e-06``: as the figures' error ticks read."""
    mant, exp = f"{float(x):.2e}".split("e")
    return f"{mant.rstrip('0').rstrip('.')}e{exp}"


def library_color(backend: str) -> str:
    """The backend's colour in every figure."""
    if backend in LIBRARY_COLORS:
        return LIBRARY_COLORS[backend]
    return SPARE_COLORS[zlib.crc32(backend.encode()) % len(SPARE_COLORS)]


class MethodStyles:
    """A (line style, marker) per method, in order of first appearance."""

    def __init__(self) -> None:
        self._seen: dict[Hashable, int] = {}

    def __call__(self, method: Hashable) -> tuple[Any, str]:
        i = self._seen.setdefault(method, len(self._seen))
        return LINE_STYLES[i % len(LINE_STYLES)], MARKERS[i % len(MARKERS)]


def _loaded(r: Mapping[str, Any]) -> bool:
    return loaded(dict(r))  # the limit in force (--load-limit), as the verdict's


def counts(r: Mapping[str, Any], time_key: str, gradient_rtol: float | None = None) -> bool:
    """Whether a drawn point's row qualifies: a gradient time (``grad_s``) under the
    verdict's rule at ``gradient_rtol``; any other time (a solve) where the row is ``ok``
    and not timed under load (a solve has no accuracy bar of its own)."""
    if time_key == "grad_s":
        rtol = DEFAULT_GRADIENT_RTOL if gradient_rtol is None else float(gradient_rtol)
        return qualifies(dict(r), rtol)
    return r.get("status") == "ok" and not _loaded(r)


def tier(r: Mapping[str, Any], time_key: str, gradient_rtol: float | None = None) -> str:
    """Why a row does not qualify, in a word or two for the legend: its status, its
    gradient's tier (``fail``, ``warn``), ``under load``, or both (``warn, under load``);
    empty where it qualifies."""
    if counts(r, time_key, gradient_rtol):
        return ""
    if r.get("status") != "ok":
        return str(r.get("status"))
    why = []
    if time_key == "grad_s" and not counts({**r, "others_cpu": None}, time_key, gradient_rtol):
        scored = _finite(r.get("gradient_error"))
        why.append(str(r.get("gradient_tier") or "not judged") if scored else "not scored")
    if _loaded(r):
        why.append("under load")
    return ", ".join(why)


def tier_note(tiers: Sequence[tuple[Any, str]], size_name: str = "n") -> str:
    """The legend's suffix for a line's points (x, tier): ``""`` where all qualify,
    ``" (fail)"`` where none does for one reason, else each that does not
    (``" (fail at n=1000)"``, ``" (under load at n=8; warn at n=32)"``), consecutive
    points of one reason as a range (``" (fail at rtol=1e-06 to 1e-09; warn at rtol=1e-10
    to 1e-12)"``), so that a seven-rung ladder's legend stays one short line."""
    bad = [(x, t) for x, t in tiers if t]
    if not bad:
        return ""
    if len(bad) == len(tiers) and len({t for _, t in bad}) == 1:
        return f" ({bad[0][1]})"
    return " (" + "; ".join(f"{t} at {size_name}={xs}" for t, xs in _stretches(tiers)) + ")"


def _stretches(tiers: Sequence[tuple[Any, str]]) -> list[tuple[str, str]]:
    """Consecutive points of one non-empty reason, as (reason, ``x`` or ``"x1 to x2"``,
    or ``"x1, x2"`` for two)."""
    out: list[tuple[str, list[Any]]] = []
    prev = ""
    for x, t in tiers:
        if t and t == prev:
            out[-1][1].append(x)
        elif t:
            out.append((t, [x]))
        prev = t
    return [(t, f"{xs[0]} to {xs[-1]}" if len(xs) > 2 else ", ".join(str(x) for x in xs))
            for t, xs in out]  # fmt: skip


def draw_line(ax: Any, x: Sequence[float], y: Sequence[float], good: Sequence[bool],
              yerr: Any = None, **style: Any) -> Any:  # fmt: skip
    """A marked line through (x, y), full where consecutive points qualify (``good``) and
    at :data:`FAINT` alpha elsewhere; returns the handle for the legend (faint where no
    point qualifies)."""
    if all(good):
        return ax.errorbar(x, y, yerr=yerr, ms=5, capsize=2, lw=1.3, **style)
    faint = ax.errorbar(x, y, yerr=yerr, ms=5, capsize=2, lw=1.0, alpha=FAINT,
                        mfc="none", **style)  # fmt: skip
    handle = faint
    for run in _runs(good):  # each stretch of qualifying points, drawn over the faint line
        h = ax.errorbar([x[i] for i in run], [y[i] for i in run], ms=5, lw=1.3, **style)
        handle = h if handle is faint else handle
    return handle


def _runs(good: Sequence[bool]) -> list[list[int]]:
    """Indices of each stretch of consecutive ``True``."""
    out: list[list[int]] = []
    for i, g in enumerate(good):
        if g and out and out[-1][-1] == i - 1:
            out[-1].append(i)
        elif g:
            out.append([i])
    return out


def panel_groups(keys: Sequence[Hashable], library: Callable[[Any], str],
                 limit: int = MAX_LINES) -> list[list[Any]]:  # fmt: skip
    """The lines of each row of panels: all of them up to ``limit``, else one row per
    library (a library of more than ``limit`` lines in rows of ``limit``)."""
    if len(keys) <= limit:
        return [list(keys)]
    by: dict[str, list[Any]] = {}
    for k in keys:
        by.setdefault(library(k), []).append(k)
    return [ks[i : i + limit] for ks in by.values() for i in range(0, len(ks), limit)]


def caption(records: Sequence[Mapping[str, Any]], gradient_rtol: float | None = None) -> str:
    """What a ladder figure's points were asked and judged at, for its title:
    ``(rtol 1e-06; faint: gradient error above 1e-04, or under load)``."""
    rtols = sorted({float(r["rtol"]) for r in records if _finite(r.get("rtol"))})
    bound = DEFAULT_GRADIENT_RTOL if gradient_rtol is None else float(gradient_rtol)
    at = f"rtol {_sci(rtols[0])}; " if len(rtols) == 1 else ""
    return f"\n({at}faint: gradient not within {_sci(bound)}, or timed under load)"
