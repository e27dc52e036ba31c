"""Steady samples on one core: every thread of an ODE case's worker, or of a training
worker, pinned after its cold phases (ensembles and ladder rungs keep every core, below).

Measured (``benchmarks/process_split.py``, issue 43; the figures: ``benchmarks/README.md``,
paragraph "What splits a process's speed (2026-11-28, issue 43)"): the same compiled
Diffrax gradient in fresh processes on a 2-core machine is bimodal with the libraries'
defaults, a slow mode in a few processes, whatever the allocator, ASLR, huge pages, import
order or warm-up length; pinned to one core it is one mode, faster in every process, and
so it is with every thread pinned *after* the compiling calls. What splits a process's
speed is XLA's intra-op pool spreading tiny kernels over two cores, a cross-core handoff
that sometimes goes badly; one core removes it.

So a worker's cold phases (import, build, JIT, first solve and first gradient: time to
first gradient as a user sees it, every core) run as a user runs them, and then, before
the warm-ups and steady samples, every thread of the process is pinned to one core
(:func:`pin_steady`): ``os.sched_setaffinity`` on each thread id in ``/proc/self/task``;
threads made later inherit their creator's mask. The core is the one other processes used
least over :data:`PROBE_S` (``/proc/stat``'s per-cpu lines, read outside every clock). The
same for every library in the workers that pin: an ODE case's processes (their steady
solve and gradient samples; a GPU case's host threads too) and a training worker (its
iterations after the first): a stated, equal setting. Pinned, every BLAS and OpenMP pool
the process loaded is limited to one thread (threadpoolctl), as anyone pinning a process
to one core sets it: left at two threads on one core, OpenBLAS's workers contend for it,
and a dense LU of 300 states took many times its unpinned time (``benchmarks/README.md``,
paragraph "One core needs one thread per pool (2026-11-28, fourth session)").

Ensembles are not pinned (:data:`ENSEMBLE_UNPINNED`): spreading members over the cores
(XLA's batched kernels, Julia's ``EnsembleThreads``) is part of what they measure. Nor are
ladder rungs (:data:`RUNG_UNPINNED`): a rung is one process, judged against the
one-process floor whatever its core, and a large problem's linear algebra uses every core,
as a user's does. ``run --no-pin`` leaves every core to every thread. Each row records what
happened (``steady_affinity``).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Mapping, Sequence
from typing import Any

#: seconds over which the cores' busy time is read to choose the quietest
PROBE_S = 0.1
#: the job key that turns pinning off (``run --no-pin``)
JOB_KEY = "steady_pin"
#: what a row says when pinning was turned off
OFF = "off (--no-pin)"
#: an ensemble job's ``steady_pin``: the reason its rows give for running on every core
ENSEMBLE_UNPINNED = "an ensemble spreads its members over every core"

#: a ladder rung's ``steady_pin``: why it runs on every core
RUNG_UNPINNED = ("a ladder rung is one process, judged against the one-process floor, and "
                 "its linear algebra uses every core")
#: what a pinned row says after its core: every BLAS and OpenMP pool at one thread
ONE_THREAD = "BLAS and OpenMP pools at 1 thread"

#: /proc/stat's per-cpu columns that are not busy time: idle and iowait
_IDLE_COLUMNS = (3, 4)


def cpu_busy() -> dict[int, int]:
    """Each cpu's busy jiffies so far (``/proc/stat``'s ``cpuN`` lines: every column but
    idle and iowait; guest time is already in user and nice, so it is left out)."""
    out: dict[int, int] = {}
    with open("/proc/stat") as f:
        for line in f:
            name, *cols = line.split()
            if not name.startswith("cpu") or name == "cpu":
                continue
            vals = [int(c) for c in cols[:8]]  # user..steal; guest columns repeat user, nice
            out[int(name[3:])] = sum(v for i, v in enumerate(vals) if i not in _IDLE_COLUMNS)
    return out


def quietest(before: Mapping[int, int], after: Mapping[int, int], allowed: Sequence[int]) -> int:
    """The allowed cpu with the fewest busy jiffies between two readings (the lowest
    number among equals, so that the choice is reproducible on an idle machine)."""
    return min(allowed, key=lambda c: (after.get(c, 0) - before.get(c, 0), c))


def _pin_threads(cpu: int) -> int:
    """Pin every thread of this process to ``cpu``; how many were pinned (a thread that
    ended meanwhile is skipped)."""
    pinned = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), {cpu})
            pinned += 1
        except (ProcessLookupError, FileNotFoundError):
            continue  # it ended between the listing and the call
    return pinned


def pin_steady(job: Mapping[str, Any]) -> str:
    """Pin every thread of this worker to the core other processes use least, unless
    ``job[JOB_KEY]`` is False (``--no-pin``); returns what a row records: ``"cpu 1 (BLAS and OpenMP pools at 1 thread)"``,
    :data:`OFF`, ``"not supported on Darwin"`` or why it failed. Call it after the cold
    phases and before the warm-ups, outside every clock (it sleeps :data:`PROBE_S`)."""
    asked = job.get(JOB_KEY)
    if asked is False:
        return OFF
    if isinstance(asked, str):  # off for a reason the job states (an ensemble's)
        return f"off ({asked})"
    if not hasattr(os, "sched_setaffinity") or not os.path.isdir("/proc/self/task"):
        return f"not supported on {platform.system()}"
    try:
        allowed = sorted(os.sched_getaffinity(0))
        before = cpu_busy()
        time.sleep(PROBE_S)  # this process is idle: the busy time is others'
        cpu = quietest(before, cpu_busy(), allowed)
        n = _pin_threads(cpu)
    except (OSError, ValueError) as e:  # a container that forbids it: said on the row
        return f"not pinned: {type(e).__name__}: {e}"[:200]
    return f"cpu {cpu} ({one_thread_pools()})" if n else "not pinned: no thread found"


def one_thread_pools() -> str:
    """Limit every BLAS and OpenMP pool loaded in this process to one thread, for good
    (threadpoolctl's call form, which restores nothing); :data:`ONE_THREAD`, or why not."""
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1)
    except Exception as e:  # noqa: BLE001 - an unknown library's pool: said on the row
        return f"pools not limited: {type(e).__name__}: {e}"[:120]
    return ONE_THREAD


def row_value(values: Sequence[str | None]) -> str | None:
    """A row's ``steady_affinity`` from its processes' (None: a process that took no
    steady sample): the one value where they agree, else each process's, in order."""
    seen = [v for v in values if v]
    if not seen:
        return None
    if len(set(seen)) == 1:
        return seen[0]
    return "; ".join(f"process {k + 1}: {v}" for k, v in enumerate(values) if v)


def before_steady(job: Mapping[str, Any], events: Any) -> None:
    """The one call every worker that takes steady samples makes between its cold phases
    and its warm-ups: pin (:func:`pin_steady`) and report it (``steady_affinity``)."""
    events.emit(steady_affinity=pin_steady(job))
