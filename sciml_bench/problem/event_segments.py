"""A solve across events as smooth pieces (:mod:`sciml_bench.problem.events` for the
meaning); imports no sympy (a worker loads it).

- :func:`solve_with_events`: the driver the reference and SciPy's rows share: solve to the
  next event's time (or until a root function crosses zero), apply the event, go on;
- :func:`segments`: the pieces of a solve whose events are all at times, fixed before it
  runs at the parameters' initial values (Diffrax and torchdiffeq unroll them in their
  differentiated calls).

Between two event times the solution is smooth; a solver that stepped across a jump
would smear it over a step and its error control would fight it. So the span splits at
the event times ``τ_1 ≤ τ_2 ≤ …`` (sorted, ties in file order): segment ``i`` runs over
``[a_i, b_i]`` and reports the save points in ``[a_i, b_i)`` (the last segment's include
``t1``): a save point at an event's time reads the state after it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Segment:
    """One smooth piece of the solve."""

    start: float
    end: float
    #: indices of the save points this piece reports
    save: np.ndarray
    #: the events that fire at ``end``, in order (none for the last piece)
    fire: tuple[int, ...]


def segments(times: Sequence[float], t_span: tuple[float, float],
             t_save: Sequence[float]) -> list[Segment]:  # fmt: skip
    """The pieces of a solve over ``t_span`` with events at ``times`` (file order)."""
    t_save = np.asarray(t_save, dtype=float)
    order = sorted(range(len(times)), key=lambda k: (float(times[k]), k))
    groups: list[tuple[float, list[int]]] = []
    for k in order:
        t = float(times[k])
        if groups and t == groups[-1][0]:
            groups[-1][1].append(k)
        else:
            groups.append((t, [k]))
    out, start = [], float(t_span[0])
    for t, fired in groups:
        save = np.flatnonzero((t_save >= start) & (t_save < t))
        out.append(Segment(start, t, save, tuple(fired)))
        start = t
    save = np.flatnonzero(t_save >= start)
    out.append(Segment(start, float(t_span[1]), save, ()))
    return out


def outside_span(times: Sequence[float], t_span: tuple[float, float]) -> str:
    """Why events at ``times`` (at some θ) cannot be solved over ``t_span``, or ``""``: a
    time that moved out of the open span (a parameter pushed it past an end)."""
    for k, t in enumerate(times):
        if not t_span[0] < float(np.real(t)) < t_span[1]:
            return (f"event {k}'s time {float(np.real(t)):g} is outside the time span "
                    f"({t_span[0]:g}, {t_span[1]:g}) at these parameters")  # fmt: skip
    return ""


def points_with_end(t_eval: np.ndarray, end: float) -> np.ndarray:
    """What to ask a piece's solver for: its save points and its end (once). The rows it
    returns are the saved states, ``rows[:len(t_eval)]``, and the end state, ``rows[-1]``."""
    return t_eval if t_eval.size and t_eval[-1] == end else np.append(t_eval, end)


#: the most root events one solve may fire (a ball that bounces ever faster never ends)
MAX_FIRINGS = 10_000


class TooManyEvents(RuntimeError):
    """A solve fired more than :data:`MAX_FIRINGS` root events (a Zeno point)."""


@dataclass
class Stop:
    """How a piece of the solve ended: its saved states (rows, in order, from the first save
    point it was given), the time and state it stopped at, and the root event that stopped
    it (None: it reached its end)."""

    saved: np.ndarray
    t: float
    y: np.ndarray
    root: int | None = None


def solve_with_events(
    t_span: tuple[float, float], t_save: Sequence[float], times: Sequence[float],
    y0: np.ndarray, piece: Callable[[float, float, np.ndarray, np.ndarray], Stop],
    jump: Callable[[int, float, np.ndarray], np.ndarray],
) -> np.ndarray:  # fmt: skip
    """States at every save point. ``times`` are the events' times (NaN for a root event);
    ``piece(start, end, save, y)`` solves from ``y`` at ``start`` towards ``end`` reporting
    the save points ``save`` (indices) and stopping early where a root event fires;
    ``jump(k, t, y)`` is event ``k``'s state after. A save point at an event's time reads
    the state after it (module docstring)."""
    t_save = np.asarray(t_save, dtype=float)
    timed = sorted((float(t), k) for k, t in enumerate(np.real(times)) if not np.isnan(t))
    t, y, i, j, fired = float(t_span[0]), np.asarray(y0), 0, 0, 0
    out: np.ndarray | None = None
    while True:
        last = j >= len(timed)
        end = float(t_span[1]) if last else timed[j][0]
        save = np.arange(i, int(np.searchsorted(t_save, end, side="right" if last else "left")))
        stop = piece(t, end, save, y)
        if out is None:
            out = np.zeros((t_save.size, np.size(y)), dtype=np.result_type(stop.y, float))
        out[save[: len(stop.saved)]] = stop.saved
        i, t, y = i + len(stop.saved), stop.t, stop.y
        if stop.root is not None:
            fired += 1
            if fired > MAX_FIRINGS:
                raise TooManyEvents(f"more than {MAX_FIRINGS} root events fired by t = {t:g}")
            y = jump(stop.root, t, y)
            continue
        if last:
            return out
        while j < len(timed) and timed[j][0] == end:  # every event at this time, in order
            y = jump(timed[j][1], end, y)
            j += 1
        t = end


def root_events(ns: dict[str, Any], theta: Any, n_state: int) -> list[Callable[..., float]]:
    """The generated root functions (``EVENT_ROOTS``) at ``theta`` as ``solve_ivp`` takes
    events: ``h(t, y)`` on the first ``n_state`` entries of ``y`` (a sensitivity system
    carries more), terminal, with their direction, and ``k``, the event's number."""
    out = []
    for k, fn in ns.get("EVENT_ROOTS", {}).items():

        def h(t: float, y: np.ndarray, fn: Callable[..., Any] = fn) -> float:
            return float(np.real(fn(t, y[:n_state], theta)))

        h.terminal, h.direction, h.k = True, ns["EVENT_DIRECTIONS"][k], k  # type: ignore[attr-defined]
        out.append(h)
    return out


def ivp_stop(sol: Any, n_saved: int, events: list[Any]) -> Stop:
    """A ``solve_ivp`` result (its ``t_eval`` the piece's save points and end,
    :func:`points_with_end`) as a :class:`Stop`: a terminal root event's time and state
    where one fired, else the end."""
    ys = sol.y.T
    if sol.status == 1 and events:  # a terminal event: the earliest that fired
        t, i = min((float(te[0]), i) for i, te in enumerate(sol.t_events) if len(te))
        return Stop(ys[: min(len(sol.t), n_saved)], t, sol.y_events[i][0], events[i].k)
    return Stop(ys[:n_saved], float(sol.t[-1]), ys[-1])
