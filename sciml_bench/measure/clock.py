"""Clocks and statistics.

Workers report raw samples only; statistics are computed when reading
(as pyperf does). ``time.monotonic`` is CLOCK_MONOTONIC on Linux, shared by
all processes, so a worker can measure from the instant its parent spawned it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

clock = time.monotonic
perf = time.perf_counter


def peak_rss_mb() -> float:
    """Peak resident set size of this process, its own (MiB): Linux's ``VmHWM``
    (:func:`~sciml_bench.measure.memory.high_water_mb`). Not ``ru_maxrss``: the kernel
    carries the spawning process's peak over the exec, so a worker spawned by a run that
    had built a 30,000-state reference reported that run's 2.9 GB as its own
    (``tests/test_memory_peak.py``)."""
    from sciml_bench.measure.memory import high_water_mb

    return high_water_mb()


def median(samples: Sequence[float]) -> float | None:
    a = np.asarray(samples, dtype=float)
    return float(np.median(a)) if a.size else None


def iqr(samples: Sequence[float]) -> tuple[float, float] | None:
    a = np.asarray(samples, dtype=float)
    if not a.size:
        return None
    q1, q3 = np.percentile(a, [25, 75])
    return float(q1), float(q3)


def busy_cpu_s() -> float:
    """The machine's busy CPU seconds so far, every core (user, system, nice, irq, softirq,
    steal: ``psutil.cpu_times``), for the CPU others took while a worker ran; raises
    where psutil or the machine-wide counters are missing."""
    import psutil

    t = psutil.cpu_times()
    return t.user + t.system + sum(getattr(t, k, 0.0) for k in ("nice", "irq", "softirq", "steal"))

