"""The noise floor: the smallest timing ratio the suite reports as a real difference.

Two runs of identical code on one machine differ by more than their samples' spread:
another process, the CPU's frequency, the allocator's state differ between runs, and the
samples of one run share all of that. A significance test on the samples of one run a
side therefore reports that drift as a change (issue 23: two identical runs of
Lotka-Volterra gave "slower" at 1.055x, p = 0.0013). A ratio inside the floor, in either
direction, is never called a change, whatever the test says. ``compare`` and the
per-problem verdict share this one definition.

Measured, not assumed: ``python benchmarks/compare_false_alarms.py`` runs one problem
several times with the same code and takes the largest ratio of medians between any two
runs over every timing (:func:`measured_floor`); ``benchmarks/README.md`` records the
figure with its machine, load and command. The floor trades false alarms against
sensitivity: a deliberate 1.3x slowdown must still clear it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

#: ratio NEW/OLD (or runner-up/fastest) inside [1/NOISE_FLOOR, NOISE_FLOOR] is noise;
#: measured between identical runs by benchmarks/compare_false_alarms.py
NOISE_FLOOR = 1.10


#: the floor for steady timings compared one process a side: their samples share one
#: process, and two fresh processes of identical code differ by more than any run's own
#: spread. Measured up to 2.03x (Diffrax's Lotka-Volterra gradient, bimodal across fresh
#: processes: 3.02 ms in one, 5.66-6.13 ms in others; ``compare_false_alarms.py --runs
#: 4``, 2026-11-24), when the run-to-run floor above let 10 of 48 identical timings through
PROCESS_FLOOR = 2.1


#: cores' worth of CPU that other processes may take while a row's worker runs (its
#: ``others_cpu``) before its timings are not judged: under load, identical runs differ
#: by far more than any useful floor (up to 2.6x on this project's shared 2-core machine
#: at a load average of 10, benchmarks/README.md)
LOAD_LIMIT = 0.5

#: the limit in force (``--load-limit`` on ``run``, ``show`` and ``report``): a context
#: variable, so that every judgement one command prints (the verdict, a ladder's winners,
#: the scaling crossovers) counts the same rows as quiet without the option being threaded
#: through each of them
_LOAD_LIMIT: ContextVar[float] = ContextVar("load_limit", default=LOAD_LIMIT)


def load_limit() -> float:
    """The cores' worth of others' CPU up to which a row counts as quiet: ``--load-limit``
    where a command set one (:func:`using_load_limit`), else :data:`LOAD_LIMIT`."""
    return _LOAD_LIMIT.get()


@contextmanager
def using_load_limit(cores: float | None) -> Iterator[float]:
    """Within the block, rows timed while other processes took at most ``cores`` count
    as quiet (None: the default, :data:`LOAD_LIMIT`)."""
    token = _LOAD_LIMIT.set(LOAD_LIMIT if cores is None else float(cores))
    try:
        yield _LOAD_LIMIT.get()
    finally:
        _LOAD_LIMIT.reset(token)


def loaded(record: dict[str, Any], limit: float | None = None) -> bool:
    """Whether ``record`` was timed under load: its ``others_cpu`` above ``limit`` (None:
    the limit in force, :func:`load_limit`). Rows without the measurement are quiet."""
    load = others_load(record)
    return load is not None and load > (load_limit() if limit is None else limit)


def others_load(record: dict[str, Any]) -> float | None:
    """The cores' worth of CPU other processes took while ``record``'s worker(s) ran, or
    None where it was not measured (older files)."""
    v = record.get("others_cpu")
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def floor_for(metric_unit: str, floor: float = NOISE_FLOOR) -> float:
    """The floor a ratio must clear on ``metric_unit``: :data:`PROCESS_FLOOR` (at least)
    where the samples of each side came from one process or one run's few processes,
    ``floor`` otherwise (several runs a side, or fresh processes as for time to first
    gradient)."""
    one = "one process" in metric_unit or "one run" in metric_unit
    return max(floor, PROCESS_FLOOR) if one else floor


def clears_noise(ratio: float, floor: float = NOISE_FLOOR) -> bool:
    """Whether a ratio of two timings is outside the noise floor, in either direction."""
    return ratio >= floor or ratio <= 1.0 / floor


def folded(ratio: float) -> float:
    """A ratio folded to >= 1: ``0.8`` and ``1.25`` are equally far from no change
    (``exp|ln r|``)."""
    return math.exp(abs(math.log(ratio)))


def measured_floor(ratios: Iterable[float], quantile: float = 1.0) -> float:
    """The floor that ``ratios`` between identical runs call for: their folded
    ``quantile`` (1.0: the largest, so that none of them would have been reported).
    Ratios that are not finite and positive are left out; NaN when none is left."""
    vals = sorted(folded(r) for r in ratios if 0 < r < math.inf)
    if not vals:
        return math.nan
    # the nearest-rank quantile: a floor every ratio up to that rank stays inside
    return vals[max(0, math.ceil(quantile * len(vals)) - 1)]
