"""Steady-state samples: timed back to back, every one checked after the clock.

A timed sample is one call of the library's compiled function (``timed(params)``) and
nothing else: between two samples the loop only reads the clock and keeps the raw output.
Host work between two sub-millisecond calls slows the second one, though it runs outside
the clock, even a sleep (measured: docs/measurements.md, "How it measures (and why you can
trust it)", "A timed sample holds the library's call and nothing else"), and a user's
timing loop (``timeit``, Diffrax's own benchmarks) calls back to back. So the raw outputs
are kept, and checked (status, step counts, finiteness, the copy to NumPy) after the loop,
in batches bounded in bytes
(:data:`CHECK_BATCH_BYTES`) and in time (:data:`CHECK_BATCH_S`), so that large outputs
never pile up and a slow case reports its samples as it goes. A sample whose check fails
is never counted: the check raises, and the caller reports the failure.

Budgets, checked before a call starts, never during one:

- the steady budget: after ``min_samples``, another sample is taken only while
  ``elapsed + last`` fits ``budget_s``;
- the case's deadline (:func:`deadline_of`): a call that would end after it (keeping
  ``reserve_s`` for what follows, e.g. the gradient) is not started, so a slow case ends
  with the samples it has instead of being killed with none. An ensemble rung takes its
  first sample regardless (``at_least_one``); a single trajectory's worker, which has
  its first calls' times already, takes none that cannot fit and says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sciml_bench.measure.clock import clock, perf

#: steady samples of each kind a worker takes at least, whatever the steady budget
MIN_SAMPLES = 3
#: raw outputs a batch may hold before it is checked (bytes, estimated per sample)
CHECK_BATCH_BYTES = 64 * 2**20
#: a batch is checked, and its samples reported, at the latest after this many seconds
CHECK_BATCH_S = 2.0


@dataclass(frozen=True)
class Plan:
    """How many samples to take, and within which budgets."""

    repeats: int
    warmups: int = 1
    budget_s: float = 20.0
    min_samples: int = MIN_SAMPLES
    #: about how many bytes one raw output holds (the size of its checked result)
    sample_bytes: int = 0
    #: ``clock()`` instant by which the worker must be done, or None
    deadline: float | None = None
    #: seconds kept before the deadline for what follows the samples: ``reserve_s``, plus
    #: ``reserve_per_call`` times the last call's duration (a cost that scales with it)
    reserve_s: float = 0.0
    reserve_per_call: float = 0.0
    #: the first call's duration (compilation included): the estimate before any warm-up
    first_s: float | None = None
    #: take the first sample even when it may end past the deadline
    at_least_one: bool = True

    def fits(self, next_s: float | None) -> bool:
        """Whether a call of about ``next_s`` seconds started now ends before the
        deadline, keeping the reserve (True without a deadline or an estimate)."""
        if next_s is None or self.deadline is None:
            return True
        kept = self.reserve_s + self.reserve_per_call * next_s
        return clock() + next_s + kept <= self.deadline


def deadline_of(job: dict[str, Any]) -> float | None:
    """The ``clock()`` instant by which a worker's samples must end: its case budget
    (``job["budget_s"]``) from its spawn, less 2 % of it (at least 1 s) to report them;
    None for a job without a budget."""
    if job.get("budget_s") is None:
        return None
    budget = float(job["budget_s"])
    return float(job["t_spawn"]) + budget - max(1.0, 0.02 * budget)


def share(job: dict[str, Any]) -> tuple[int, float, int]:
    """One process's share of a case's steady samples: ``(repeats, budget_s, min_samples)``.

    A case's ``P = steady_processes`` fresh processes each take ``⌈repeats / P⌉`` samples
    (at least ``⌈MIN_SAMPLES / P⌉``) within ``steady_budget_s / P``, as pyperf spreads its
    values over worker processes: fresh processes of identical code differ by more than
    one process's samples do (a Diffrax gradient is bimodal across them:
    ``benchmarks/README.md``, paragraph "The process floor (2026-11-26)"), so
    a run's samples from several processes average that out instead of inheriting one
    process's luck. ``--quick``, sweeps and ladder rungs run one process: it takes all."""
    n = max(1, int(job.get("steady_processes", 1)))
    repeats = math.ceil(int(job.get("repeats", 10)) / n)
    budget = float(job.get("steady_budget_s", 20.0)) / n
    return repeats, budget, max(1, math.ceil(MIN_SAMPLES / n))


def warmups_of(job: dict[str, Any], kind: str) -> int:
    """The untimed warm-up calls a worker makes of ``kind`` (``solve``, ``grad``) before its
    samples: ``job["warmups"]``, one count for every kind or a ``{kind: count}`` mapping
    (a ladder rung's: :data:`~sciml_bench.run.sized_ladders.RUNG_WARMUPS`); default 1."""
    asked = job.get("warmups", 1)
    if isinstance(asked, dict):
        return int(asked.get(kind, 1))
    return int(asked)


def take(
    timed: Callable[[Any], Any],
    check: Callable[[Any], Any],
    params: Any,
    plan: Plan,
    on_batch: Callable[[list[float]], None] | None = None,
) -> list[float]:
    """Warm-ups, then up to ``plan.repeats`` timed calls of ``timed(params)`` back to back;
    every output, warm-ups' included, is passed to ``check`` after the clock, in batches.
    Returns the checked samples (seconds); ``on_batch`` gets the list so far after each
    batch. Raises what ``check`` raises: the failing sample and those after it are lost."""
    batch_max = max(1, CHECK_BATCH_BYTES // max(1, plan.sample_bytes))
    pending: list[tuple[float | None, Any]] = []  # (seconds, or None for a warm-up; raw)
    samples: list[float] = []

    def flush() -> None:
        before = len(samples)
        for elapsed, raw in pending:
            check(raw)
            if elapsed is not None:
                samples.append(elapsed)
        pending.clear()
        if on_batch is not None and len(samples) > before:
            on_batch(list(samples))

    last = plan.first_s
    for _ in range(plan.warmups):
        if not plan.fits(last):
            break  # the first call, already taken, compiled it: no time for another
        start = perf()
        pending.append((None, timed(params)))
        last = perf() - start
        if len(pending) >= batch_max:
            flush()
    t_begin = batch_start = perf()
    taken = 0
    while taken < plan.repeats:
        if (taken or not plan.at_least_one) and not plan.fits(last):
            break  # the samples taken are kept; another call would be killed with them
        if taken >= plan.min_samples and perf() - t_begin + (last or 0.0) > plan.budget_s:
            break
        start = perf()
        raw = timed(params)
        end = perf()
        pending.append((end - start, raw))
        last, taken = end - start, taken + 1
        if len(pending) >= batch_max or end - batch_start >= CHECK_BATCH_S:
            raw = None
            flush()
            batch_start = perf()
    raw = None
    flush()
    return samples
