"""Gradients at scale: each gradient method's cost against the number of parameters P.

A *line* is one library's gradient method on one ladder (results file, backend, solver,
gradient method, Jacobian kind, device; and rtol and dtype where the rows hold more than
one, :data:`~sciml_bench.results.growth.SPLIT_KEYS`), one point per rung at
``P = n_params``, the median steady gradient time ``t(P)`` of its ``ok`` row. Its exponent
is the least-squares slope of ``log t`` against ``log P`` over its three largest rungs
(:func:`~sciml_bench.results.growth.exponent`; with two rungs,
``q = log(t₂ / t₁) / log(P₂ / P₁)``), fitted on ``ok`` rows whatever their gradient's
error (a cost is a cost), naming the fitted rungs whose gradient does not qualify,

so forward sensitivities, which carry ``n_state x P`` sensitivity states, grow about
linearly in P once they dominate (q -> 1 on ROBER groups, where states grow with P too: q ->
2), and an adjoint, one backward solve whatever P, grows with the states alone.

A library's **crossover** is where its reverse mode (an adjoint, or backprop through the
solver) overtakes its forward mode, judged by the verdict's rules
(:mod:`~sciml_bench.results.verdict`). At each rung, each side is its fastest method whose
row qualifies (:func:`~sciml_bench.results.verdict.qualifies` at ``--gradient-rtol``:
``ok``, the gradient judged within it, not timed under load), and

    r = t_forward / t_reverse:  reverse ahead where r >= floor, forward where r <= 1/floor,

else a tie; ``floor`` is the pair's steady-gradient floor
(:func:`~sciml_bench.results.verdict.floor_of`: 2.1x with one process a side, else from the
run's between-process spread; the rung names it). A rung where
either side has no qualifying row gives no evidence, and says why. The rungs only bound
the crossover: with forward ahead at ``P_a`` and reverse ahead at ``P_b``, the next rung
where it is, it lies in ``(P_a, P_b]``; ties and rungs without evidence in between widen
the interval and are named. A library with no forward mode (Diffrax, torchdiffeq,
torchode) has no crossover, and the line says so.

Per rung, the fastest qualifying method is the verdict's own steady-gradient pick for
that comparison (:func:`~sciml_bench.results.verdict.verdicts`: results file, size,
rtol, dtype), with its ratio to the runner-up, a tie inside the floor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sciml_bench.measure.noise import PROCESS_FLOOR, clears_noise, load_limit, others_load
from sciml_bench.results import plots, styles, verdict
from sciml_bench.results.growth import (
    LineKey,
    exponent,
    line_key,
    line_label,
    not_qualifying,
    sci,
    split_value,
    splits,
)

#: gradient methods that are forward mode (forward sensitivities, forward-mode AD); every
#: other method is reverse mode (an adjoint, or backprop through the solver)
FORWARD_METHODS = ("forward", "forward_diff")
#: how much a rung's peak memory key is preferred: the warm call's, else the first call's
MEMORY_KEYS = ("grad_warm_rss_mb", "grad_rss_mb")
#: the criterion and key a crossover and a rung's winner are judged by
CRITERION = ("steady gradient", "grad_s")

Line = LineKey
#: a line less its gradient method: one library on one ladder
Library = tuple[str, ...]
Rows = Mapping[int, Mapping[str, Any]]
#: what a rung says about the crossover
FORWARD, REVERSE, TIE, NONE = "forward", "reverse", "tie", "none"


def is_forward(method: str) -> bool:
    return method in FORWARD_METHODS


def has_params(r: Mapping[str, Any]) -> bool:
    """A row of a ladder that records its parameter count and computes a gradient."""
    return (r.get("kind", "ode") == "ode" and isinstance(r.get("n_params"), int)
            and r.get("gradient_method") not in (None, "", "none"))  # fmt: skip


def _rtol(gradient_rtol: float | None) -> float:
    return verdict.DEFAULT_GRADIENT_RTOL if gradient_rtol is None else float(gradient_rtol)


def _timed(r: Mapping[str, Any], key: str = "grad_s") -> bool:
    return r.get("status") == "ok" and plots.finite(r.get(key)) and float(r[key]) > 0


def ladder_rows(
    records: Sequence[Mapping[str, Any]], key: str | None = "grad_s"
) -> dict[Line, dict[int, Mapping[str, Any]]]:
    """Line -> {P: row}: the ``ok`` rows that measured ``key`` (None: every row of the
    ladder, whatever its status), lines split on the rtol and dtype where they vary."""
    ladder = [r for r in records if has_params(r)]
    split = splits(ladder)
    out: dict[Line, dict[int, Mapping[str, Any]]] = {}
    for r in ladder:
        if key is None or _timed(r, key):
            out.setdefault(line_key(r, split), {})[int(r["n_params"])] = r
    return out


def param_points(
    records: Sequence[Mapping[str, Any]], key: str = "grad_s"
) -> dict[Line, dict[int, float]]:
    """Line -> {P: median seconds (or MB)} over its ``ok`` rows that measured ``key``."""
    return {line: {p: float(r[key]) for p, r in rows.items()}
            for line, rows in ladder_rows(records, key).items()}  # fmt: skip


def memory_points(records: Sequence[Mapping[str, Any]]) -> dict[Line, dict[int, float]]:
    """Line -> {P: MB one gradient call needs}, the warm call's where recorded."""
    for key in MEMORY_KEYS:
        pts = param_points(records, key)
        if pts:
            return pts
    return {}


def exponent_texts(
    records: Sequence[Mapping[str, Any]], gradient_rtol: float | None = None
) -> list[str]:  # fmt: skip
    """One line per gradient line: ``q`` fitted over its three largest P (two where it
    has two; ``-`` below two) on its ``ok`` rows, as
    :func:`~sciml_bench.results.growth.exponent`; the fitted rungs whose gradient does not
    qualify at ``gradient_rtol`` are named (:func:`~sciml_bench.results.growth.not_qualifying`)."""
    out = []
    for key, rows in ladder_rows(records).items():
        e = exponent({p: float(r["grad_s"]) for p, r in rows.items()})
        short = not_qualifying(rows, e, gradient_rtol)
        note = f"; the gradient does not qualify at P = {_ints(short)}" if short else ""
        over = f", {e.k} rungs" if e and e.k > 2 else ""
        tail = (f"q = {e.p:.2f} (P = {e.n1}→{e.n2}{over}{note})" if e
                else f"- (one rung, P = {min(rows)})")  # fmt: skip
        out.append(f"{line_label(key)}: gradient {tail}")
    return out


def _ints(ns: Sequence[int]) -> str:
    return ", ".join(str(n) for n in ns)


def _x(r: float) -> str:
    """A ratio as the verdict prints one: ``1.85x``, ``44.6x``."""
    return f"{r:.2f}x" if r < 10 else f"{r:.3g}x"


def _library(key: Line) -> Library:
    return key[:3] + key[4:]


def _library_label(lib: Library) -> str:
    return line_label((*lib[:3], "", *lib[3:]))


def by_library(lines: Mapping[Line, Any]) -> dict[Library, dict[str, Any]]:
    """Library (and ladder) -> {gradient method: its points or rows}."""
    out: dict[Library, dict[str, Any]] = {}
    for key, pts in lines.items():
        out.setdefault(_library(key), {})[key[3]] = pts
    return out


def split_modes(methods: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A library's forward-mode methods and its reverse-mode methods, each by name."""
    return ({m: v for m, v in methods.items() if is_forward(m)},
            {m: v for m, v in methods.items() if not is_forward(m)})  # fmt: skip


@dataclass(frozen=True)
class Rung:
    """What one rung says about a library's crossover: which mode is faster beyond the
    pair's floor (:data:`FORWARD`, :data:`REVERSE`), a :data:`TIE` inside it, or
    :data:`NONE` (a side without a qualifying row: ``why``)."""

    p: int
    lead: str
    forward: str = ""
    reverse: str = ""
    #: ``t_forward / t_reverse`` of the two sides' fastest qualifying rows
    ratio: float = math.nan
    floor: float = PROCESS_FLOOR
    why: str = ""
    #: where the floor comes from (:func:`~sciml_bench.results.verdict.floor_of`)
    floor_source: str = ""

    @property
    def lead_ratio(self) -> float:
        """How many times faster the faster side is (>= 1)."""
        return max(self.ratio, 1.0 / self.ratio)

    def text(self) -> str:
        """A tie or a rung without evidence, as a clause: ``a tie at P = 30 (1.35x, inside
        the 2.1x floor)``."""
        if self.lead == NONE:
            return f"P = {self.p} gives no evidence ({self.why})"
        if self.lead == TIE:
            return (f"a tie at P = {self.p} ({self.reverse} against {self.forward}: "
                    f"{_x(self.lead_ratio)}, inside the {self.floor:.3g}x floor"
                    f"{': ' + self.floor_source if self.floor_source else ''})")  # fmt: skip
        faster = self.reverse if self.lead == REVERSE else self.forward
        return f"{faster} faster at P = {self.p} ({_x(self.lead_ratio)})"


def _why_not(r: Mapping[str, Any], rtol: float) -> str:
    """Why a row is no evidence: its status, its load, or its gradient's error."""
    m = r.get("gradient_method")
    if r.get("status") != "ok":
        return f"{m} {r.get('status')}"
    load = others_load(dict(r))
    if load is not None and load > load_limit():
        return f"{m} timed under load (others_cpu {load:.2f})"
    e = r.get("gradient_error")
    if not isinstance(e, int | float) or isinstance(e, bool):
        return f"{m}'s gradient not scored"
    if verdict.qualifies(dict(r), rtol):
        return f"{m} has no steady gradient time"
    if e <= rtol:  # within it, but the reference could not judge at that bound
        return f"{m}'s gradient error {e:.2e} not judged at {sci(rtol)}"
    tier = r.get("gradient_tier")
    return f"{m}'s gradient error {e:.2e}{', ' + str(tier) if tier else ''}"


def _side(
    rows: Mapping[str, Mapping[str, Any]], rtol: float
) -> tuple[str, Mapping[str, Any] | None]:
    """One side's fastest row that qualifies and was timed, else why the side has none."""
    good = [r for r in rows.values() if verdict.qualifies(dict(r), rtol) and _timed(r)]
    if good:
        return "", min(good, key=lambda r: float(r["grad_s"]))
    return "; ".join(_why_not(r, rtol) for r in rows.values()), None


def rung(p: int, forward: Mapping[str, Mapping[str, Any]],
         reverse: Mapping[str, Mapping[str, Any]], rtol: float) -> Rung:  # fmt: skip
    """What rung ``p`` says, from each side's rows there (method -> row)."""
    if not forward or not reverse:
        return Rung(p, NONE, why=f"no {'forward' if not forward else 'reverse'}-mode row")
    why_f, f = _side(forward, rtol)
    why_r, r = _side(reverse, rtol)
    if f is None or r is None:
        return Rung(p, NONE, why="; ".join(w for w in (why_f, why_r) if w))
    ratio = float(f["grad_s"]) / float(r["grad_s"])
    floor = verdict.floor_of(*CRITERION, dict(f), dict(r))
    lead = TIE if not clears_noise(ratio, floor.value) else REVERSE if ratio > 1 else FORWARD
    return Rung(p, lead, str(f["gradient_method"]), str(r["gradient_method"]), ratio,
                floor.value, floor_source=floor.source)  # fmt: skip


def evidence(forward: Mapping[str, Rows], reverse: Mapping[str, Rows], rtol: float) -> list[Rung]:
    """Every rung either side has a row at, smallest P first (:func:`rung`)."""
    ps = sorted({p for rows in (*forward.values(), *reverse.values()) for p in rows})

    def at(side: Mapping[str, Rows], p: int) -> dict[str, Mapping[str, Any]]:
        return {m: rows[p] for m, rows in side.items() if p in rows}

    return [rung(p, at(forward, p), at(reverse, p), rtol) for p in ps]


@dataclass(frozen=True)
class Crossover:
    """Where reverse mode overtakes forward mode, as the rungs bound it: in
    ``(lower.p, upper.p]`` (``lower`` None: at or below ``upper.p``; ``upper`` None: not on
    this ladder). ``between``: the ties and rungs without evidence between the two (after
    ``lower`` when there is no ``upper``); ``again``: a later rung where forward leads."""

    lower: Rung | None
    upper: Rung | None
    between: tuple[Rung, ...] = ()
    again: Rung | None = None

    @property
    def interval(self) -> tuple[int | None, int] | None:
        """``(P_lower, P_upper)`` (``P_lower`` None: open below), or None: no crossover."""
        return None if self.upper is None else (self.lower.p if self.lower else None, self.upper.p)

    def text(self) -> str:
        lo, up = self.lower, self.upper
        if lo and up:
            head = (f"{lo.forward} is faster up to P = {lo.p} ({_x(lo.lead_ratio)}), the "
                    f"{up.reverse} from P = {up.p} ({_x(up.lead_ratio)}): the crossover lies "
                    f"in ({lo.p}, {up.p}]")  # fmt: skip
        elif up:
            head = (
                f"the {up.reverse} is faster from P = {up.p} ({_x(up.lead_ratio)}), forward "
                f"mode at no rung before it: the crossover lies at or below P = {up.p}"
            )
        elif lo:
            last = max((r.p for r in (lo, *self.between) if r.lead != NONE), default=lo.p)
            head = (f"no crossover up to P = {last}: {lo.forward} is faster up to P = {lo.p} "
                    f"({_x(lo.lead_ratio)} there)")  # fmt: skip
        else:
            head = "no crossover can be placed: no rung where one mode is faster beyond the floor"
        notes = [r.text() for r in self.between]
        if self.again is not None:
            notes.append(f"{self.again.forward} faster again at P = {self.again.p} "
                         f"({_x(self.again.lead_ratio)})")  # fmt: skip
        return "; ".join([head, *notes])


def find_crossover(rungs: Sequence[Rung]) -> Crossover:
    """The first rung where reverse mode leads beyond the floor, bounded below by the last
    rung before it where forward mode did; see :class:`Crossover`."""
    up = next((i for i, r in enumerate(rungs) if r.lead == REVERSE), None)
    before = rungs if up is None else rungs[:up]
    lo = max((i for i, r in enumerate(before) if r.lead == FORWARD), default=None)
    between = tuple(before[(lo + 1) if lo is not None else 0 :])
    if up is None:
        return Crossover(rungs[lo] if lo is not None else None, None, between)
    again = next((r for r in rungs[up + 1 :] if r.lead == FORWARD), None)
    return Crossover(rungs[lo] if lo is not None else None, rungs[up], between, again)


def library_crossovers(
    records: Sequence[Mapping[str, Any]], gradient_rtol: float | None = None
) -> list[tuple[Library, Crossover | str]]:
    """Per library (and ladder): its :class:`Crossover`, or why it has none to look for."""
    rtol = _rtol(gradient_rtol)
    out: list[tuple[Library, Crossover | str]] = []
    for lib, methods in by_library(ladder_rows(records, None)).items():
        forward, reverse = split_modes(methods)
        if not forward or not reverse:
            out.append((lib, "no forward mode" if not forward else "no reverse-mode method"))
        else:
            out.append((lib, find_crossover(evidence(forward, reverse, rtol))))
    return out


def crossover_texts(
    records: Sequence[Mapping[str, Any]], gradient_rtol: float | None = None
) -> list[str]:  # fmt: skip
    """Per library (and ladder): where its reverse mode overtakes its forward mode."""
    return [f"{_library_label(lib)}: " + (c.text() if isinstance(c, Crossover)
                                          else f"no crossover ({c} on this ladder)")
            for lib, c in library_crossovers(records, gradient_rtol)]  # fmt: skip


def _in_group(r: Mapping[str, Any], group: Mapping[str, Any]) -> bool:
    """Whether a row belongs to a verdict's comparison (its varying keys' values)."""
    return all(r.get(k) == v for k, v in group.items() if k != "_size_name")


def rung_winners(
    records: Sequence[Mapping[str, Any]], gradient_rtol: float | None = None
) -> list[str]:  # fmt: skip
    """Per rung (and results file, rtol, dtype: the verdict's comparisons): the verdict's
    fastest steady gradient among the qualifying rows at ``gradient_rtol`` and its ratio
    to the runner-up, a tie inside the floor; the same row the verdict names."""
    rows = [dict(r) for r in records if r.get("kind", "ode") == "ode"]
    ladder = [r for r in rows if has_params(r)]
    found = []
    for v in verdict.verdicts(rows, gradient_rtol):
        members = [r for r in ladder if _in_group(r, v.group)]
        if members:
            pick = next((p for p in v.picks if p.key == CRITERION[1]), None)
            found.append((_rung_head(members, v.group), _winner_text(pick, members, v)))
    return [f"{head[1]}: {text}" for head, text in sorted(found, key=lambda x: x[0][0])]


def _rung_head(members: Sequence[Mapping[str, Any]], group: Mapping[str, Any]) -> tuple[Any, str]:
    """A rung's sort key and name: ``#2 P = 30, rtol 1e-08``."""
    ps = sorted({int(r["n_params"]) for r in members})
    run = str(group.get("_run") or "")
    extra = [split_value(group, k) for k in ("rtol", "dtype") if k in group]
    name = f"{run + ' ' if run else ''}P = {'/'.join(map(str, ps))}"
    return (run, ps, [repr(group.get(k)) for k in ("rtol", "dtype")]), ", ".join([name, *extra])


def _winner_text(pick: verdict.Pick | None, members: Sequence[Mapping[str, Any]],
                 v: verdict.Verdict) -> str:  # fmt: skip
    """The verdict's steady-gradient pick, or that no method's gradient qualifies."""
    if pick is None:
        bound = ("" if v.gradient_rtol in (None, verdict.DEFAULT_GRADIENT_RTOL)
                 else f" at gradient error ≤ {sci(float(v.gradient_rtol))}")  # fmt: skip
        ran = sum(1 for r in members if r.get("status") == "ok")
        return f"no method's gradient qualifies{bound} ({ran} ran)"
    win = pick.winner
    text = f"{line_label(line_key(win))}, {plots.fmt_seconds(float(win['grad_s']))}"
    if pick.runner_up is not None and pick.ratio is not None:
        tie = "" if pick.clears_noise else f", a tie: {pick.measured_floor.text()}"
        text += f" ({_x(pick.ratio)} the next, {line_label(line_key(pick.runner_up))}{tie})"
    return text + (", provisional: timed under load (--load-limit)" if v.provisional else "")


def laddered_params(records: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the rows' gradients span two parameter counts or more (a ladder whose P
    grows, as ``stiff-robertson-rates``'), the case for the sections below."""
    return len({r["n_params"] for r in records if has_params(r)}) >= 2


def titled_notes(
    records: Sequence[Mapping[str, Any]], gradient_rtol: float | None = None
) -> list[tuple[str, list[str]]]:  # fmt: skip
    """The gradient-at-scale notes under a ladder's table, each group with its title;
    nothing when P does not grow along the ladder."""
    if not laddered_params(records):
        return []
    return [
        ("gradients at scale, time ∝ P^q over the three largest rungs (ok rows)",
         exponent_texts(records, gradient_rtol)),
        ("forward/adjoint crossover per library (qualifying rows, ratios beyond each "
         "pair's floor)", crossover_texts(records, gradient_rtol)),
        ("fastest qualifying gradient per rung", rung_winners(records, gradient_rtol)),
    ]  # fmt: skip


def gradient_scaling_figure(
    records: Sequence[Mapping[str, Any]], gradient_rtol: float | None = None
) -> plots.Plot:  # fmt: skip
    """Gradient time (left) and one gradient call's memory (right) against P, log-log, one
    line per library x method, coloured by library and styled by method
    (:mod:`~sciml_bench.results.styles`), its exponent in the legend; a point whose
    gradient does not qualify is faint and its tier named (a fast line of ``fail`` rows was
    the fastest line, unmarked). Past twelve lines, one row of panels per library; each
    row's crossovers marked."""
    plot = plots.Plot("gradient-scaling", "Gradient cost against parameters")
    times = ladder_rows(records)
    if not times:
        plot.notes.append("no ok ladder row records n_params and a steady gradient time")
        return plot
    mem = next((k for k in MEMORY_KEYS if ladder_rows(records, k)), None)
    panels = [("grad_s", "gradient time, median", True)]
    panels += [(mem, "MB one gradient call needs", False)] if mem else []
    groups = styles.panel_groups(list(times), lambda k: k[1])
    fig, grid = plots.grid_figure([len(g) for g in groups], len(panels), 3.6)
    methods = styles.MethodStyles()
    for axes, group in zip(grid, groups, strict=True):
        handles: dict[Line, tuple[Any, str]] = {}
        for ax, (key, ylabel, seconds) in zip(axes, panels, strict=True):
            lines = {k: rows for k, rows in ladder_rows(records, key).items() if k in group}
            for k, rows in lines.items():
                handles.setdefault(k, _draw_line(ax, k, rows, key, methods(k[:1] + k[2:]),
                                                 gradient_rtol))  # fmt: skip
            _param_axes(ax, lines, ylabel, seconds, group[0][1] if len(groups) > 1 else "")
        _mark_crossovers(axes[0], records, gradient_rtol, {_library(k) for k in group})
        # the time panel's labels (their q is the time exponent), outside the axes
        axes[-1].legend([h for h, _ in handles.values()], [t for _, t in handles.values()],
                        fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                        borderaxespad=0.0)  # fmt: skip
    plots._finish(fig, list(records), "gradient cost against parameters P"
                  + styles.caption(list(records), gradient_rtol))  # fmt: skip
    plot.fig = fig
    plot.notes = exponent_texts(records, gradient_rtol) + crossover_texts(records, gradient_rtol)
    return plot


def _draw_line(ax: Any, line: Line, rows: Rows, key: str, style: tuple[Any, str],
               gradient_rtol: float | None) -> tuple[Any, str]:  # fmt: skip
    """One library x method's ``key`` (a time or memory) against P, faint where its row's
    gradient does not qualify; the handle and its legend entry (exponent of the gradient
    time, then the tiers of the points that do not qualify)."""
    ps = sorted(rows)
    tiers = [styles.tier(rows[p], "grad_s", gradient_rtol) for p in ps]
    handle = styles.draw_line(
        ax, ps, [float(rows[p][key]) for p in ps], [not t for t in tiers], ls=style[0],
        marker=style[1], color=styles.library_color(line[1]), label=line_label(line),
    )  # fmt: skip
    timed = {p: float(r["grad_s"]) for p, r in rows.items() if _timed(r)}
    e = exponent(timed)
    label = line_label(line) + (f" (q={e.p:.2f})" if e else "")
    return handle, label + styles.tier_note(list(zip(ps, tiers, strict=True)), "P")


def _param_axes(ax: Any, lines: Mapping[Line, Rows], ylabel: str, seconds: bool,
                library: str) -> None:  # fmt: skip
    """A panel's log-log axes against P, its label and title (the library's, in a row of
    one)."""
    every = sorted({p for rows in lines.values() for p in rows})
    plots.ladder_axes(ax, every or [1])
    if not seconds:
        plots._log_axis(ax.yaxis)
    ax.set_xlabel("parameters P")
    ax.set_ylabel(ylabel)
    if library:
        ax.set_title(library, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)


def _mark_crossovers(ax: Any, records: Sequence[Mapping[str, Any]],
                     gradient_rtol: float | None, libraries: set[Library] | None = None
                     ) -> None:  # fmt: skip
    """Each crossover's interval ``(P_a, P_b]`` shaded, a dotted line at ``P_b``, named
    once with every library there (four libraries crossing at one rung printed four labels
    over one another); ``libraries``: only theirs (a row of panels per library)."""
    at: dict[tuple[int | None, int], list[str]] = {}
    for lib, c in library_crossovers(records, gradient_rtol):
        span = c.interval if isinstance(c, Crossover) else None
        if libraries is not None and lib not in libraries:
            continue  # another row of panels' library
        if span is not None and lib[1] not in at.setdefault(span, []):
            at[span].append(lib[1])
    for (lo, hi), libs in sorted(at.items(), key=lambda kv: (kv[0][1], kv[0][0] or 0)):
        if lo is not None:
            ax.axvspan(lo, hi, color="0.5", alpha=0.08, lw=0)
        ax.axvline(hi, ls=":", lw=1.0, color="0.5")
        where = f"in ({lo}, {hi}]" if lo is not None else f"≤ {hi}"
        ax.annotate(f"crossover {where}: {', '.join(libs)}", (hi, 0.98),
                    xycoords=("data", "axes fraction"), fontsize=7, rotation=90, va="top",
                    ha="right", color="0.3")  # fmt: skip
