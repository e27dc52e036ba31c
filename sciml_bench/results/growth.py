"""Cost against problem size: array problems' ladders, their exponents and the figure.

An array problem (``[sizes]``) runs *ladders*: one line per backend x solver x gradient
method x Jacobian kind x device (and results file, in a multi-file report), one point per
size, placed at its number of states ``n``. How a line's cost grows is its fitted exponent
``p`` in ``time ∝ n^p``, the least-squares slope of ``log t`` against ``log n`` over the
three largest sizes it completed (:data:`TOP_SIZES`; the two it has, where it has two),

    p = Σ (x_k − x̄)(z_k − z̄) / Σ (x_k − x̄)²,   x = log n, z = log t,

so a sparse factorisation of ROBER's diagonal blocks shows p ≈ 1 and a dense one p → 3 once
the LU dominates. Smaller sizes are usually overhead-bound (p ≈ 0), which is why only the
largest are used; three rather than two, as the anchors' ladders are read, so that one
noisy rung moves the slope less. :func:`growth_figure` draws solve and gradient side by side, log-log.
A ladder of a network's width (sizes that keep one state count while P grows) has no
exponent in n; :mod:`~sciml_bench.results.gradient_scaling` reads it against P.

Which rows count: an exponent is a cost curve, fitted on every ``ok`` row (a gradient that
misses the verdict's accuracy still costs what it costs), and its line names the fitted
sizes whose gradient does not qualify (:func:`~sciml_bench.results.verdict.qualifies`
at ``--gradient-rtol``). A ratio (dense ÷ sparse) inside the one-process floor
(:data:`~sciml_bench.measure.noise.PROCESS_FLOOR`: steady samples of one process a side)
is called a tie, as the verdict calls one. Where the rows hold more than one tolerance or
dtype (``--tolerances`` with ``--sizes``), each is a line of its own (:data:`SPLIT_KEYS`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sciml_bench.measure.noise import ONE_PROCESS, clears_noise
from sciml_bench.results import plots, styles
from sciml_bench.results.verdict import DEFAULT_GRADIENT_RTOL, qualifies

#: run, backend, solver, gradient method, Jacobian, device, then rtol and dtype (those two
#: empty unless split on: :func:`splits`)
LineKey = tuple[str, str, str, str, str, str, str, str]
#: keys that split a ladder into lines where the rows hold more than one value of them: a
#: line at rtol 1e-6 and one at 1e-8 are two cost curves, not one (the verdict's groups)
SPLIT_KEYS = ("rtol", "dtype")


def is_sized(r: dict[str, Any]) -> bool:
    """A row of an array problem's ladder (every one names its Jacobian kind)."""
    return r.get("kind", "ode") == "ode" and r.get("jacobian") is not None


def grows_states(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of ladders whose size sets the states: not a network's width, whose sizes
    keep one state count while its parameters grow (a ladder of one size stays)."""
    sized = [r for r in records if is_sized(r)]
    split = splits(sized)
    sizes: dict[LineKey, set[Any]] = {}
    states: dict[LineKey, set[Any]] = {}
    for r in sized:
        sizes.setdefault(line_key(r, split), set()).add(r.get("size"))
        states.setdefault(line_key(r, split), set()).add(r.get("n_state"))
    fixed = {k for k in sizes if len(sizes[k] - {None}) > 1 and len(states[k] - {None}) == 1}
    return [r for r in sized if line_key(r, split) not in fixed]


def splits(records: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The :data:`SPLIT_KEYS` whose values differ between ``records`` (rows without one, an
    ``unavailable`` row's missing rtol, do not count): those a line is keyed by."""
    return tuple(k for k in SPLIT_KEYS
                 if len({repr(r[k]) for r in records if r.get(k) is not None}) > 1)  # fmt: skip


def sci(x: float) -> str:
    """``1e-06``, ``2.5e-05``: a tolerance as the table prints one (``table.fmt_rtol``,
    which imports this module)."""
    mant, exp = f"{float(x):.2e}".split("e")
    return f"{mant.rstrip('0').rstrip('.')}e{exp}"


def split_value(r: Mapping[str, Any], key: str) -> str:
    """How a split key reads in a line's label: ``rtol 1e-06``, ``float32``."""
    v = r.get(key)
    if v is None:
        return ""
    if key == "rtol" and isinstance(v, int | float) and not isinstance(v, bool):
        return f"rtol {sci(v)}"
    return str(v)


def line_key(r: Mapping[str, Any], split: Sequence[str] = ()) -> LineKey:
    """What a ladder is: results file, backend, solver, gradient method, Jacobian, device,
    and the ``split`` keys' values (rtol, dtype: :func:`splits` of the rows read together)."""
    rtol, dtype = (split_value(r, k) if k in split else "" for k in SPLIT_KEYS)
    return (
        str(r.get("_run") or ""), str(r.get("backend") or "?"), str(r.get("solver") or ""),
        str(r.get("gradient_method") or ""), str(r.get("jacobian") or ""),
        str(r.get("device") or r.get("device_requested") or "?"), rtol, dtype,
    )  # fmt: skip


def line_label(key: LineKey) -> str:
    """``scipy BDF sparse`` (``#1 `` first in multi-file reports; the gradient method where
    the backend computes one; the device where it is not the CPU; the rtol and dtype where
    the ladder is split on them)."""
    run, backend, solver, grad, jac, device, *split = key
    parts = [run, backend, solver, "" if jac == "none" else jac]  # no Jacobian: not named
    if grad and grad != "none":
        parts.insert(3, grad)
    if device not in ("cpu", "?"):
        parts.append(f"on {device}")
    return " ".join(p for p in (*parts, *split) if p)


def ok_rows(
    records: Sequence[Mapping[str, Any]], time_key: str, split: Sequence[str] | None = None
) -> dict[LineKey, dict[int, Mapping[str, Any]]]:
    """Line -> {states: row} over the ``ok`` rows that measured ``time_key`` (``split``:
    None splits on what varies in ``records``)."""
    split = splits(records) if split is None else split
    out: dict[LineKey, dict[int, Mapping[str, Any]]] = {}
    for r in records:
        if r.get("status") == "ok" and plots.finite(r.get(time_key)) and r.get("n_state"):
            out.setdefault(line_key(r, split), {})[int(r["n_state"])] = r
    return out


def points(
    records: Sequence[Mapping[str, Any]], time_key: str, split: Sequence[str] | None = None
) -> dict[LineKey, dict[int, float]]:
    """Line -> {states: median seconds} over the ``ok`` rows that measured ``time_key``."""
    return {k: {n: float(r[time_key]) for n, r in rows.items()}
            for k, rows in ok_rows(records, time_key, split).items()}  # fmt: skip


#: how many of a line's largest completed sizes its exponent is fitted over
TOP_SIZES = 3


@dataclass(frozen=True)
class Exponent:
    """The slope ``p`` of one line over its largest completed sizes, ``n1`` to ``n2``
    (``k`` of them: :data:`TOP_SIZES`, or two)."""

    p: float
    n1: int
    n2: int
    k: int = 2
    #: the sizes fitted over, smallest first
    ns: tuple[int, ...] = ()

    def text(self, unit: str = "states", note: str = "") -> str:
        over = f", {self.k} sizes" if self.k > 2 else ""
        return f"p = {self.p:.2f} ({self.n1}→{self.n2} {unit}{over}{note})"


def exponent(pts: Mapping[int, float]) -> Exponent | None:
    """The least-squares slope of ``log t`` against ``log n`` over the :data:`TOP_SIZES`
    largest sizes of ``pts`` (two where it has two); None below two."""
    clean = sorted((n, t) for n, t in pts.items() if t > 0 and n > 0)[-TOP_SIZES:]
    if len(clean) < 2:
        return None
    x = [math.log(n) for n, _ in clean]
    z = [math.log(t) for _, t in clean]
    xm, zm = sum(x) / len(x), sum(z) / len(z)
    slope = sum((a - xm) * (b - zm) for a, b in zip(x, z, strict=True)) / sum(
        (a - xm) ** 2 for a in x)  # fmt: skip
    return Exponent(slope, clean[0][0], clean[-1][0], len(clean), tuple(n for n, _ in clean))


def not_qualifying(
    rows: Mapping[int, Mapping[str, Any]], e: Exponent | None, gradient_rtol: float | None
) -> list[int]:
    """The sizes an exponent was fitted over whose row's gradient does not qualify under
    the verdict's rule (:func:`~sciml_bench.results.verdict.qualifies`, ``gradient_rtol``;
    None: the pass tier): the fit keeps them (a cost is a cost), the reader is told."""
    rtol = DEFAULT_GRADIENT_RTOL if gradient_rtol is None else float(gradient_rtol)
    return [n for n in (e.ns if e else ()) if n in rows and not qualifies(dict(rows[n]), rtol)]


def growth_texts(
    records: Sequence[dict[str, Any]], gradient_rtol: float | None = None
) -> list[str]:  # fmt: skip
    """One line per ladder: its solve and gradient exponents (``-`` below two sizes),
    fitted on its ``ok`` rows; the gradient's names the fitted sizes whose gradient does
    not qualify at ``gradient_rtol`` (:func:`not_qualifying`)."""
    sized = grows_states(records)
    split = splits(sized)
    panels = {(key, name): ok_rows(sized, key, split) for key, _, name in plots.TIME_PANELS}
    out = []
    for line in dict.fromkeys(line_key(r, split) for r in sized if r.get("n_state")):
        parts = []
        for (key, name), rows in panels.items():
            if line not in rows:
                continue
            e = exponent({n: float(r[key]) for n, r in rows[line].items()})
            short = not_qualifying(rows[line], e, gradient_rtol) if key == "grad_s" else []
            note = f"; the gradient does not qualify at {_ints(short)}" if short else ""
            parts.append(f"{name} {e.text(note=note) if e else '- (one size)'}")
        if parts:
            out.append(f"{line_label(line)}: {'; '.join(parts)}")
    return out


def _ints(ns: Sequence[int]) -> str:
    return ", ".join(str(n) for n in ns)


def ratio(records: Sequence[dict[str, Any]], time_key: str = "solve_s") -> list[str]:
    """Dense ÷ sparse time per backend and solver offering both, at the largest size both
    completed; a ratio inside the one-process floor (steady samples of one process a side,
    :data:`~sciml_bench.measure.noise.PROCESS_FLOOR`) is a tie, as the verdict says."""
    pts = points([r for r in records if is_sized(r)], time_key)
    out = []
    for key, dense in pts.items():
        if key[4] != "dense":
            continue
        sparse = pts.get((*key[:4], "sparse", *key[5:]))
        common = sorted(set(dense) & set(sparse or {}))
        if sparse and common:
            n = common[-1]
            label = line_label((*key[:4], "", *key[5:]))  # the kind is what the ratio says
            x = dense[n] / sparse[n]
            # a rung's steady samples come from one process (run.sized_ladders)
            floor = ONE_PROCESS
            tie = "" if clears_noise(x, floor.value) else (
                f", a tie: inside the {floor.value:g}x floor ({floor.source})")  # fmt: skip
            out.append(f"{label}: dense / sparse = {x:.3g} at {n} states{tie}")
    return out


def linear_solvers(records: Sequence[dict[str, Any]]) -> list[str]:
    """What each ladder factorises, as its library names it; where a library picks its
    solver by size (CVODES: qr, then MUMPS), each solver with the sizes it ran at."""
    seen: dict[LineKey, dict[str, list[str]]] = {}
    split = splits([r for r in records if is_sized(r)])
    for r in records:
        if is_sized(r) and r.get("linear_solver"):
            sizes = seen.setdefault(line_key(r, split), {}).setdefault(str(r["linear_solver"]), [])
            sizes.append(str(r.get("size")))
    out = []
    for k, solvers in seen.items():
        if len(solvers) == 1:
            out.append(f"{line_label(k)}: {next(iter(solvers))}")
        else:
            out.append(f"{line_label(k)}: " + "; ".join(
                f"{v} (size {', '.join(n)})" for v, n in solvers.items()))  # fmt: skip
    return out


def stops(records: Sequence[dict[str, Any]]) -> list[str]:
    """Per ladder, the sizes that are not points, with their status (and short reason)."""
    missing: dict[LineKey, list[str]] = {}
    split = splits([r for r in records if is_sized(r)])
    for r in records:
        if not is_sized(r) or r.get("status") == "ok":
            continue
        what = str(r.get("status"))
        refused = "dense Jacobian of" in str(r.get("reason")) or r.get("forecast_least_s")
        if r.get("status") != "skipped" or refused:
            what += f": {plots._short(r.get('reason'), 80)}"
        where = f"size {r['size']}" if r.get("size") is not None else "every size"
        missing.setdefault(line_key(r, split), []).append(f"{where} ({what})")
    return [f"{line_label(k)}: no point at {', '.join(v)}" for k, v in missing.items()]


def growth_figure(
    records: Sequence[dict[str, Any]], gradient_rtol: float | None = None
) -> plots.Plot:  # fmt: skip
    """Median solve and gradient time against states, log-log, one line per ladder (and
    rtol, dtype where the rows hold several), coloured by library and styled by method
    (:mod:`~sciml_bench.results.styles`); a point whose row does not qualify is faint and
    its tier named in the legend. Past twelve lines, one row of panels per library. Each
    row's legend sits outside the axes (inside, it covered points: Diffrax's gradient at
    128 Brusselator states), each ladder's exponents in its entry."""
    plot = plots.Plot("growth", "Cost against problem size")
    sized = grows_states(records)
    split = splits(sized)
    plot.notes += stops(sized)
    drawn = plots.timed_panels(lambda key: points(sized, key, split))
    if not drawn:
        plot.notes.insert(0, "no ok row of the ladders has a steady-state time" if sized else
                          "no ladder changes its state count (a network's width grows P: "
                          "see the gradients-at-scale figure)")  # fmt: skip
        return plot
    keys = [k for k in dict.fromkeys(line_key(r, split) for r in sized)
            if any(k in lines for lines in drawn.values())]  # fmt: skip
    groups = styles.panel_groups(keys, lambda k: k[1])
    fig, grid = plots.grid_figure([len(g) for g in groups], len(drawn), 3.8, 2)
    methods = styles.MethodStyles()
    for axes, group in zip(grid, groups, strict=True):
        labels: dict[LineKey, tuple[Any, str]] = {}  # the gradient panel's handle wins
        for ax, (panel, lines) in zip(axes, drawn.items(), strict=True):
            for k in group:
                found = _draw_ladder(ax, sized, k, panel, methods(k[:1] + k[2:]), split,
                                     gradient_rtol)  # fmt: skip
                if found is not None:
                    labels[k] = found if found[1] or k not in labels else labels[k]
            _growth_axes(ax, panel[2], lines, group[0][1] if len(groups) > 1 else "")
        axes[-1].legend([h for h, _ in labels.values()],
                        [legend_label(k, drawn, tier) for k, (_, tier) in labels.items()],
                        fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                        title="p: slope over the three largest sizes", title_fontsize=7)  # fmt: skip
    plots._finish(fig, sized, "cost against problem size" + styles.caption(sized, gradient_rtol))
    plot.fig = fig
    plot.notes = growth_texts(sized, gradient_rtol) + plot.notes
    return plot


def _growth_axes(ax: Any, name: str, lines: Mapping[LineKey, Mapping[int, float]],
                 library: str) -> None:  # fmt: skip
    """A growth panel's log-log axes, labels and title (the library's, in a row of one);
    a panel with no line (SciPy's rows have no gradient) says so instead of empty ticks."""
    if not ax.containers:
        ax.text(0.5, 0.5, f"no {name} time", transform=ax.transAxes, ha="center",
                va="center", color="0.4")  # fmt: skip
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"{library}: {name}" if library else name, fontsize=10)
        return
    plots.ladder_axes(ax, sorted({n for pts in lines.values() for n in pts}))
    ax.set_xlabel("states (n)")
    ax.set_ylabel(f"{name} time, median [IQR]")
    ax.set_title(f"{library}: {name}" if library else name, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)


def legend_label(key: LineKey, drawn: dict[tuple[str, str, str], Any], tier: str = "") -> str:
    """A ladder's legend entry: its label and ``tier`` (the rungs that do not qualify: `` (fail
    at n=32)``), then its exponent in each panel it has one in (``p = 1.59 solve, 1.29
    gradient``) on a second line."""
    ps = [f"{e.p:.2f} {panel[2]}" for panel, lines in drawn.items()
          if (e := exponent(lines.get(key, {}))) is not None]  # fmt: skip
    return line_label(key) + tier + (f"\n  p = {', '.join(ps)}" if ps else "")


def _draw_ladder(
    ax: Any, sized: Sequence[dict[str, Any]], key: LineKey, panel: tuple[str, str, str],
    style: tuple[Any, str], split: Sequence[str] = (), gradient_rtol: float | None = None,
) -> tuple[Any, str] | None:  # fmt: skip
    """Ladder ``key``'s ok rows of the panel's time against states, with IQR error bars,
    faint where a row does not qualify; the drawn line and its legend's tier note (None
    where it has no such row)."""
    tkey, qkey, _ = panel
    rows = sorted((r for r in sized if line_key(r, split) == key and r.get("status") == "ok"
                   and plots.finite(r.get(tkey)) and r.get("n_state")),
                  key=lambda r: r["n_state"])  # fmt: skip
    if not rows:
        return None
    y, bars = plots.iqr_bars(rows, tkey, qkey)
    tiers = [styles.tier(r, tkey, gradient_rtol) for r in rows]
    handle = styles.draw_line(
        ax, [r["n_state"] for r in rows], y, [not t for t in tiers], yerr=bars, ls=style[0],
        marker=style[1], color=styles.library_color(key[1]), label=line_label(key),
    )  # fmt: skip
    name = rows[0].get("size_name") or "n"
    return handle, styles.tier_note([(r.get("size"), t) for r, t in zip(rows, tiers, strict=True)],
                                    name)  # fmt: skip
