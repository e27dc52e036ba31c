"""A worker's peak memory is its own, not the run's that spawned it.

Linux carries the spawning process's peak RSS over the exec into the child's
``ru_maxrss``: a run that had built a 30,000-state reference (2.9 GB) gave every worker it
spawned afterwards a ``peak_rss_mb`` of 2.9 GB (the published ROBER groups ladder's first
republication, 2026-12-07). The workers' measure (``clock.peak_rss_mb``) reads ``VmHWM``.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from sciml_bench.measure.memory import high_water_mb

#: what the parent holds when it spawns the child (MiB)
HELD_MB = 400
PRINT = ("from sciml_bench.measure.clock import peak_rss_mb;"
         "from sciml_bench.measure.memory import ru_maxrss_mb;"
         "print(peak_rss_mb(), ru_maxrss_mb())")  # fmt: skip


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_a_worker_spawned_by_a_large_parent_reports_its_own_peak() -> None:
    held = np.ones(HELD_MB * 2**20 // 8)  # touched: resident
    assert high_water_mb() >= HELD_MB
    out = subprocess.run([sys.executable, "-c", PRINT], capture_output=True, text=True,
                         check=True).stdout.split()  # fmt: skip
    own, inherited = (float(x) for x in out)
    assert inherited >= HELD_MB  # what the kernel carried over: the parent's
    assert own < HELD_MB / 2, (own, inherited)  # the child's own: an interpreter and numpy
    del held
