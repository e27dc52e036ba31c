"""Gradients at scale: each gradient method's cost against the number of parameters P.

A *line* is one library's gradient method on one ladder (results file, backend, solver,
gradient method, Jacobian kind, device), one point per rung at ``P = n_params``, the median
steady gradient time ``t(P)``. Its exponent is the least-squares slope of ``log t``
against ``log P`` over its three largest rungs (:func:`~sciml_bench.results.growth.exponent`;
with two rungs, ``q = log(t₂ / t₁) / log(P₂ / P₁)``),

so forward sensitivities, which carry ``n_state x P`` sensitivity states, grow about
linearly in P once they dominate (q -> 1 on ROBER groups, where states grow with P too: q ->
2), and an adjoint, one backward solve whatever P, grows with the states alone.

A library's **crossover** is the smallest P at which its fastest reverse-mode method (an
adjoint, or backprop through the solver) beats its forward mode on the same ladder:

    P* = min { P : min_a t_a(P) < t_forward(P) },

or "none up to P = max" when forward mode stays ahead. A library with no forward mode
(Diffrax, torchdiffeq, torchode) has no crossover, and the line says so.

Per rung, the fastest method whose gradient qualifies (the verdict's rule: the ``pass``
tier by default) is named with its ratio to the next; steady samples come from one
process per row, so a ratio under the one-process floor is a tie.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sciml_bench.measure.noise import PROCESS_FLOOR
from sciml_bench.results import plots
from sciml_bench.results.growth import exponent, line_key, line_label

#: gradient methods that are forward mode (forward sensitivities, forward-mode AD); every
#: other method is reverse mode (an adjoint, or backprop through the solver)
FORWARD_METHODS = ("forward", "forward_diff")
#: how much a rung's peak memory key is preferred: the warm call's, else the first call's
MEMORY_KEYS = ("grad_warm_rss_mb", "grad_rss_mb")

Line = tuple[str, str, str, str, str, str]
#: one marker per gradient method, in order of appearance
MARKERS = ("o", "s", "^", "D", "v", "P")


def is_forward(method: str) -> bool:
    return method in FORWARD_METHODS


def has_params(r: Mapping[str, Any]) -> bool:
    """A row of a ladder that records its parameter count and computes a gradient."""
    return (r.get("kind", "ode") == "ode" and isinstance(r.get("n_params"), int)
            and r.get("gradient_method") not in (None, "", "none"))  # fmt: skip


def param_points(records: Sequence[Mapping[str, Any]], key: str = "grad_s") -> dict[Line, dict[int, float]]:
    """Line -> {P: median seconds (or MB)} over its ``ok`` rows that measured ``key``."""
    out: dict[Line, dict[int, float]] = {}
    for r in records:
        if has_params(r) and r.get("status") == "ok" and plots.finite(r.get(key)):
            out.setdefault(line_key(dict(r)), {})[int(r["n_params"])] = float(r[key])
    return out


def memory_points(records: Sequence[Mapping[str, Any]]) -> dict[Line, dict[int, float]]:
    """Line -> {P: MB one gradient call needs}, the warm call's where recorded."""
    for key in MEMORY_KEYS:
        pts = param_points(records, key)
        if pts:
            return pts
    return {}


def exponent_texts(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per gradient line: ``q`` fitted over its three largest P (two where it
    has two; ``-`` below two), as :func:`~sciml_bench.results.growth.exponent`."""
    out = []
    for key, pts in param_points(records).items():
        e = exponent(pts)
        over = f", {e.k} rungs" if e and e.k > 2 else ""
        tail = (f"q = {e.p:.2f} (P = {e.n1}→{e.n2}{over})" if e
                else f"- (one rung, P = {min(pts)})")  # fmt: skip
        out.append(f"{line_label(key)}: gradient {tail}")
    return out


def _library(key: Line) -> tuple[str, ...]:
    run, backend, solver, _, jac, device = key
    return (run, backend, solver, jac, device)


def by_library(times: Mapping[Line, Mapping[int, float]]) -> dict[tuple[str, ...], dict[str, Mapping[int, float]]]:
    """Library (and ladder) -> {gradient method: its points}."""
    out: dict[tuple[str, ...], dict[str, Mapping[int, float]]] = {}
    for key, pts in times.items():
        out.setdefault(_library(key), {})[key[3]] = pts
    return out


def split_modes(
    methods: Mapping[str, Mapping[int, float]],
) -> tuple[Mapping[int, float] | None, dict[str, Mapping[int, float]]]:
    """A library's forward-mode points (None without one) and its reverse-mode methods'."""
    forward = next((pts for m, pts in methods.items() if is_forward(m)), None)
    return forward, {m: pts for m, pts in methods.items() if not is_forward(m)}


def first_crossover(
    forward: Mapping[int, float], reverse: Mapping[str, Mapping[int, float]]
) -> tuple[int, str, float] | None:
    """``(P*, the reverse method, t_forward / t_method at P*)``: the smallest P both ran at
    where a reverse method is faster than forward mode; None if there is none."""
    for p in sorted(forward):
        at = [(pts[p], m) for m, pts in reverse.items() if p in pts]
        if at and min(at)[0] < forward[p]:
            t, method = min(at)
            return p, method, forward[p] / t
    return None


def crossover_texts(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per library (and ladder): where its reverse mode overtakes its forward mode."""
    out = []
    for lib, methods in by_library(param_points(records)).items():
        name = line_label((lib[0], lib[1], lib[2], "", lib[3], lib[4]))
        forward, reverse = split_modes(methods)
        if forward is None or not reverse:
            what = "no forward mode" if forward is None else "no reverse-mode method"
            out.append(f"{name}: no crossover ({what} on this ladder)")
            continue
        common = sorted(p for p in forward if any(p in pts for pts in reverse.values()))
        if not common:
            out.append(f"{name}: no crossover (forward and reverse mode share no rung)")
            continue
        hit = first_crossover(forward, reverse)
        if hit:
            p, method, ratio = hit
            out.append(f"{name}: crossover at P = {p}, {method} {ratio:.2g}x faster than "
                       f"forward there (rungs {', '.join(map(str, common))})")  # fmt: skip
        else:
            p = common[-1]
            best = min(pts[p] for pts in reverse.values() if p in pts)
            out.append(f"{name}: no crossover up to P = {p} (forward {best / forward[p]:.2g}x "
                       "faster there)")  # fmt: skip
    return out


def rung_winners(
    records: Sequence[Mapping[str, Any]],
    qualifies: Callable[[Mapping[str, Any]], bool] = lambda r: r.get("gradient_tier") == "pass",
) -> list[str]:
    """Per P (and results file): the fastest qualifying gradient and its ratio to the next."""
    rungs: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for r in records:
        if has_params(r) and r.get("status") == "ok" and plots.finite(r.get("grad_s")):
            rungs.setdefault((str(r.get("_run") or ""), int(r["n_params"])), []).append(r)
    out = []
    for (run, p), rows in sorted(rungs.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        ok = sorted((r for r in rows if qualifies(r)), key=lambda r: float(r["grad_s"]))
        head = f"{run + ' ' if run else ''}P = {p}"
        if not ok:
            out.append(f"{head}: no method's gradient qualifies ({len(rows)} ran)")
            continue
        win = ok[0]
        text = f"{head}: {line_label(line_key(dict(win)))}, {plots.fmt_seconds(float(win['grad_s']))}"
        if len(ok) > 1:
            ratio = float(ok[1]["grad_s"]) / float(win["grad_s"])
            tie = "" if ratio >= PROCESS_FLOOR else f", a tie under the {PROCESS_FLOOR}x floor"
            text += f" ({ratio:.2g}x the next, {line_label(line_key(dict(ok[1])))}{tie})"
        out.append(text)
    return out


def laddered_params(records: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the rows' gradients span two parameter counts or more (a ladder whose P
    grows, as ``stiff-robertson-rates``'), the case for the sections below."""
    return len({r["n_params"] for r in records if has_params(r)}) >= 2


def titled_notes(records: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[str]]]:
    """The gradient-at-scale notes under a ladder's table, each group with its title;
    nothing when P does not grow along the ladder."""
    if not laddered_params(records):
        return []
    return [
        ("gradients at scale, time ∝ P^q over the three largest rungs", exponent_texts(records)),
        ("forward/adjoint crossover per library", crossover_texts(records)),
        ("fastest qualifying gradient per rung", rung_winners(records)),
    ]


def gradient_scaling_figure(records: Sequence[Mapping[str, Any]]) -> plots.Plot:
    """Gradient time (left) and one gradient call's memory (right) against P, log-log, one
    line per library x method, its exponent in the legend, crossovers marked."""
    plot = plots.Plot("gradient-scaling", "Gradient cost against parameters")
    times = param_points(records)
    if not times:
        plot.notes.append("no ok ladder row records n_params and a steady gradient time")
        return plot
    memory = memory_points(records)
    panels = [(times, "gradient time, median", True)]
    if memory:
        panels.append((memory, "MB one gradient call needs", False))
    fig, axes = plots.ladder_figure(len(panels), 3.6)
    colors = {k: f"C{i % 10}" for i, k in enumerate(dict.fromkeys(_library(k) for k in times))}
    for ax, (lines, ylabel, seconds) in zip(axes, panels, strict=True):
        _draw_lines(ax, lines, colors, seconds)
        ax.set_ylabel(ylabel)
    _mark_crossovers(axes[0], times)
    # the time panel's labels (their q is the time exponent), outside the axes
    handles, labels = axes[0].get_legend_handles_labels()
    axes[-1].legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                    borderaxespad=0.0)  # fmt: skip
    plots._finish(fig, list(records), "gradient cost against parameters P")
    plot.fig = fig
    plot.notes = exponent_texts(records) + crossover_texts(records)
    return plot


def _draw_lines(ax: Any, lines: Mapping[Line, Mapping[int, float]],
                colors: Mapping[tuple[str, ...], str], seconds: bool) -> None:  # fmt: skip
    # a library's colour, a method's marker: Diffrax's three adjoints are told apart
    methods = {m: MARKERS[i % len(MARKERS)] for i, m in enumerate(dict.fromkeys(k[3] for k in lines))}
    for key, pts in lines.items():
        ps = sorted(pts)
        e = exponent(dict(pts))
        label = line_label(key) + (f" (q={e.p:.2f})" if e else "")
        style = "--" if is_forward(key[3]) else "-"
        ax.plot(ps, [pts[p] for p in ps], marker=methods[key[3]], ls=style, ms=4, lw=1.3,
                color=colors.get(_library(key), "0.4"), label=label)  # fmt: skip
    every = sorted({p for pts in lines.values() for p in pts})
    plots.ladder_axes(ax, every)
    if not seconds:
        plots._log_axis(ax.yaxis)
    ax.set_xlabel("parameters P")
    ax.grid(True, which="major", alpha=0.3)


def _mark_crossovers(ax: Any, times: Mapping[Line, Mapping[int, float]]) -> None:
    """A dotted vertical line at each crossover P, named once with every library there
    (four libraries crossing at one rung printed four labels over one another)."""
    at: dict[int, list[str]] = {}
    for lib, methods in by_library(times).items():
        forward, reverse = split_modes(methods)
        hit = first_crossover(forward, reverse) if forward is not None else None
        if hit and lib[1] not in at.setdefault(hit[0], []):
            at[hit[0]].append(lib[1])
    for p, libs in sorted(at.items()):
        ax.axvline(p, ls=":", lw=1.0, color="0.5")
        ax.annotate(f"crossover: {', '.join(libs)}", (p, 0.98), xycoords=("data", "axes fraction"),
                    fontsize=7, rotation=90, va="top", ha="right", color="0.3")  # fmt: skip
