"""Events: a dose, a reset, a bounce: the state set anew at a known time, at a
differentiated one, or where a root function of the states crosses zero.

A problem file declares each event as a table of ``[[events]]``::

    [[events]]
    at = "t_dose"                      # a number, or an expression of the parameters
    assign = { gut = "gut + dose" }    # states set from the states just before, and θ

    [[events]]
    when = "h"                         # a root function of the states, θ and t ...
    direction = "down"                 # ... fires each time it crosses zero going down
    assign = { v = "-e*v" }

An event at a time fires once, at ``τ(θ)`` strictly inside the span; a root event each time
``h(t, y, θ)`` crosses zero in its direction (``down``: from + to −; ``up``). Either sets

    y(τ⁺) = g(y(τ⁻), θ)              (the states it does not assign keep their values)

Events fire in time order, those at one time in file order; a save point at an event's
time reads the state after it (right-continuous, as SBML simulators report it).

**Sensitivities across an event** (what the reference integrates, and what every
backend's gradient must carry). Differentiating ``y(τ(θ)⁺; θ) = g(y(τ(θ)⁻; θ), θ)`` along
``θ``, with ``S = ∂y/∂θ``, ``f⁻`` and ``f⁺`` the right-hand side just before and after:

    S⁺ = G_y S⁻ + G_θ + (G_y f⁻ − f⁺) ∂τ/∂θ,      G_y = ∂g/∂y,  G_θ = ∂g/∂θ,

with ``∂τ/∂θ`` the time's own derivative (0 for a number), or, for a root, by the implicit
function theorem on ``h(τ, y(τ), θ) = 0``:

    ∂τ/∂θ = −(h_y S⁻ + h_θ) / (h_y f⁻ + h_t).

A solver restarted at a time it was handed as a constant misses the last term. An
adjoint's ``λ`` jumps by the transpose (not built here: the suite's adjoint refuses a
problem with events by name).

Refused by name, with the fix: a root function of the parameters alone (it never crosses
zero: that is ``at``), ``direction = "either"`` (two events, one each way), an event at or
before ``t0`` (write it into the initial values) or at or after ``t1``, a time that moves
with ``θ`` sitting on a save point (the saved state jumps there: the loss has no
derivative), and events on an array problem, an ensemble or a training run (their
machinery runs one smooth solve).

The generated functions are :mod:`sciml_bench.problem.codegen.events`'; the solve across
events, shared by the reference and SciPy's rows, is
:mod:`sciml_bench.problem.event_segments`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import sympy

from sciml_bench.problem import expr, hints, initial

#: the keys of one ``[[events]]`` table
KEYS = ("at", "when", "direction", "assign")
#: a root function's crossing directions: ``down`` fires as it goes from + to −
DIRECTIONS = {"down": -1, "up": 1}
#: the most events a problem may declare (each is a restart of every solver)
MAX_EVENTS = 1_000


class _Reader(Protocol):
    def fail(self, key: str, reason: str) -> Exception: ...


@dataclass(frozen=True)
class Event:
    """``y(τ⁺) = g(y(τ⁻), θ)`` at ``τ = at(θ)``, or at each ``τ`` where ``when`` crosses
    zero in ``direction``."""

    #: the time, a number or an expression of the differentiated parameters (None: a root)
    at: sympy.Expr | None
    #: ``(state index, its new value)``: expressions of the states and the parameters
    assign: tuple[tuple[int, sympy.Expr], ...]
    #: the time at the parameters' initial values (NaN for a root: found by the solve)
    time0: float
    #: a root function ``h(t, y, θ)`` whose crossings of zero fire the event, else None
    when: sympy.Expr | None = None
    #: the crossing that fires it: -1 down (+ to −), +1 up
    direction: int = 0

    @property
    def moves(self) -> bool:
        """Whether the time depends on the parameters (a jump term in the gradient): a
        root's always does, through the states."""
        return self.at is None or bool(self.at.free_symbols)

    @property
    def kind(self) -> str:
        """``time`` (at a time) or ``state`` (where a root function crosses zero)."""
        return "time" if self.at is not None else "state"


def kinds(events: Sequence[Event]) -> tuple[str, ...]:
    """The kinds of ``events`` (``time``, ``state``), sorted, each once."""
    return tuple(sorted({e.kind for e in events}))


def read(
    r: _Reader, raw: Any, states: Sequence[str], params: Sequence[str],
    derived: Mapping[sympy.Symbol, sympy.Expr], theta0: Sequence[float],
    t_span: tuple[float, float],
) -> tuple[Event, ...]:  # fmt: skip
    """The ``[[events]]`` array of tables, validated (module docstring), in file order."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(e, Mapping) for e in raw):
        raise r.fail("events", "expected [[events]] tables, each with 'at' and 'assign'")
    if len(raw) > MAX_EVENTS:
        raise r.fail("events", f"more than {MAX_EVENTS} events")
    at_values = {sympy.Symbol(p, real=True): sympy.Float(v)
                 for p, v in zip(params, theta0, strict=False)}  # fmt: skip
    out = []
    for k, table in enumerate(raw):
        key = f"events[{k}]"
        for name in table:
            if name not in KEYS:
                raise r.fail(f"{key}.{name}", _unknown_key(str(name)))
        assign = _assignments(r, f"{key}.assign", table.get("assign"), states, params, derived)
        if "when" in table or "direction" in table:
            when, direction = _root(r, key, table, states, params, derived)
            out.append(Event(None, assign, math.nan, when, direction))
            continue
        at = _time(r, f"{key}.at", table.get("at"), params, states, derived)
        time0 = initial.value_at(r, f"{key}.at", "the event's time", at, at_values)
        if not t_span[0] < time0 < t_span[1]:
            raise r.fail(f"{key}.at", f"the event's time {time0:g} is not inside the time span "
                         f"({t_span[0]:g}, {t_span[1]:g}): an event at t0 belongs in the "
                         "initial values; move it inside the span")  # fmt: skip
        out.append(Event(at, assign, time0))
    return tuple(out)


def _root(
    r: _Reader, key: str, table: Mapping[str, Any], states: Sequence[str],
    params: Sequence[str], derived: Mapping[sympy.Symbol, sympy.Expr],
) -> tuple[sympy.Expr, int]:  # fmt: skip
    """``when`` (a root function of the states, the parameters and t) and ``direction``."""
    if "at" in table:
        raise r.fail(f"{key}.when", "give the event either a time ('at') or a root function "
                     "('when'), not both")  # fmt: skip
    if "when" not in table:
        raise r.fail(f"{key}.when", "missing: 'direction' goes with a root function, e.g. "
                     "when = \"h\" (the event fires where h crosses zero)")  # fmt: skip
    direction = table.get("direction")
    if direction not in DIRECTIONS:
        either = ("; 'either' is not supported yet: declare two events, one each way"
                  if direction == "either" else "")  # fmt: skip
        raise r.fail(f"{key}.direction", f"expected \"down\" (h goes from + to −) or \"up\", "
                     f"got {direction!r}{either}")  # fmt: skip
    names = expr.symbols([*states, *params, *(s.name for s in derived), "t"])
    try:
        when = expr.parse(table["when"], names).xreplace(derived)
    except expr.ExprError as e:
        raise r.fail(f"{key}.when", str(e)) from None
    moving = {names[n] for n in (*states, "t")}
    if not when.free_symbols & moving:
        raise r.fail(f"{key}.when", f"{table['when']!r} reads no state and not t, so it never "
                     "crosses zero; a time that depends on the parameters is 'at'")  # fmt: skip
    return when, DIRECTIONS[direction]


def _unknown_key(name: str) -> str:
    if name in ("trigger", "condition", "root"):
        return ("a root function is 'when' (the event fires where it crosses zero), with "
                "'direction' (\"down\" or \"up\")")  # fmt: skip
    return f"unknown key (allowed: {', '.join(KEYS)})" + hints.did_you_mean(name, KEYS)


def _time(
    r: _Reader, key: str, v: Any, params: Sequence[str], states: Sequence[str],
    derived: Mapping[sympy.Symbol, sympy.Expr],
) -> sympy.Expr:  # fmt: skip
    """``at``: a finite number, or an expression of the parameters."""
    if v is None:
        raise r.fail(key, "missing: the event's time, a number or an expression of the "
                     "parameters, e.g. at = 12.0 or at = \"t_dose\" (or a root function of "
                     "the states: when = \"h\", direction = \"down\")")  # fmt: skip
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise r.fail(key, f"expected a number or an expression string, got {type(v).__name__}")
    if not isinstance(v, str):
        if not math.isfinite(float(v)):
            raise r.fail(key, f"the event's time is {v}, not a finite number")
        return sympy.Float(float(v))
    names = expr.symbols([*params, *(s.name for s in derived)])
    try:
        return expr.parse(v, names).xreplace(derived)
    except expr.ExprError as e:
        why = ("; an event's time is an expression of the parameters: for one triggered by "
               "the states write when = \"...\" (a root function) with direction = "
               "\"down\" or \"up\"") if e.unknown in (*states, "t") else ""  # fmt: skip
        raise r.fail(key, f"{e}{why}") from None


def _assignments(
    r: _Reader, key: str, table: Any, states: Sequence[str], params: Sequence[str],
    derived: Mapping[sympy.Symbol, sympy.Expr],
) -> tuple[tuple[int, sympy.Expr], ...]:  # fmt: skip
    """``assign``: one expression per assigned state, of the states and the parameters."""
    if not isinstance(table, Mapping) or not table:
        raise r.fail(key, "expected a table of the states the event sets, e.g. "
                     "assign = { gut = \"gut + dose\" }")  # fmt: skip
    names = expr.symbols([*states, *params, *(s.name for s in derived)])
    out = []
    for state, text in table.items():
        if state not in states:
            raise r.fail(f"{key}.{state}", f"{state!r} is not a state (states: "
                         f"{', '.join(states)})" + hints.did_you_mean(str(state), states))  # fmt: skip
        try:
            value = expr.parse(text, names).xreplace(derived)
        except expr.ExprError as e:
            why = "; an assignment reads the states and the parameters" if e.unknown == "t" else ""
            raise r.fail(f"{key}.{state}", f"{e}{why}") from None
        out.append((list(states).index(state), value))
    return tuple(out)


def refuse_moving_time_at_a_save_point(
    r: _Reader, events: Sequence[Event], t_save: Sequence[float]
) -> None:
    """A time that moves with ``θ`` on a save point: the saved state jumps there as the
    time passes it, so the loss has no derivative; refused with the fix."""
    for k, e in enumerate(events):
        if not e.moves or e.at is None:  # a root's time is found by the solve
            continue
        hit = [t for t in t_save if math.isclose(t, e.time0, rel_tol=1e-12, abs_tol=1e-300)]
        if hit:
            raise r.fail(f"events[{k}].at", f"the event's time {e.time0:g} moves with the "
                         f"parameters and sits on the save point t = {hit[0]:g}: the saved "
                         "state jumps there, so the loss has no derivative; move the save "
                         "point or the event")  # fmt: skip


def refuse_with(r: _Reader, data: Mapping[str, Any]) -> None:
    """Events on a problem whose machinery runs one smooth solve: refused by name."""
    if "events" not in data:
        return
    for section, what in (("ensemble", "an ensemble"), ("training", "a training run"),
                          ("sizes", "an array problem")):  # fmt: skip
        if section in data:
            raise r.fail("events", f"[[events]] on {what} ([{section}]) are not supported "
                         "yet (issue 51): its members, iterates or grid run one smooth solve")  # fmt: skip
