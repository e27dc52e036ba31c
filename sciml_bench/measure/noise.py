"""The noise floor: the smallest timing ratio the suite reports as a real difference.

Two runs of identical code on one machine differ by more than their samples' spread:
another process, the CPU's frequency, the allocator's state differ between runs, and the
samples of one run share all of that. A significance test on the samples of one run a
side therefore reports that drift as a change (issue 23: two identical runs of
Lotka-Volterra were reported "slower": ``benchmarks/README.md``, paragraph "``compare``'s
false alarms and noise floor", 2026-11-24). A ratio inside the floor, in either
direction, is never called a change, whatever the test says. ``compare`` and the
per-problem verdict share this one definition.

Measured, not assumed: ``python benchmarks/compare_false_alarms.py`` runs one problem
several times with the same code and takes the largest ratio of medians between any two
runs over every timing (:func:`measured_floor`); ``benchmarks/README.md`` records the
figure with its machine, load and command. The floor trades false alarms against
sensitivity: a deliberate 1.3x slowdown must still clear it.

A verdict's steady timings are judged against a floor the run itself measured
(:func:`steady_floor`): the rows' per-process medians give the between-process spread,
and a t bound on the log ratio turns it into the ratio a winner must clear (issue 43; the
constant :data:`PROCESS_FLOOR` stays where a row has one process).
``benchmarks/noise_floor.py`` measures that rule's false-winner rate between identical
rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

#: ratio NEW/OLD (or runner-up/fastest) inside [1/NOISE_FLOOR, NOISE_FLOOR] is noise;
#: measured between identical runs by benchmarks/compare_false_alarms.py
NOISE_FLOOR = 1.10


#: the floor for steady timings compared one process a side: their samples share one
#: process, and two fresh processes of identical code differ by more than any run's own
#: spread, which let identical timings through the run-to-run floor above. Set just above
#: the largest such difference measured (benchmarks/README.md, paragraph "The process
#: floor (2026-11-26)", by ``benchmarks/compare_false_alarms.py``)
PROCESS_FLOOR = 2.1


#: cores' worth of CPU that other processes may take while a row's worker runs (its
#: ``others_cpu``) before its timings are not judged: under load, identical runs differ
#: by far more than any useful floor (benchmarks/README.md, paragraph "``compare``'s false
#: alarms and noise floor", 2026-11-24)
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


#: the smallest floor a verdict uses where this run's between-process spread sets it:
#: what that spread cannot see (a drift every process of the run shared, one core
#: against another)
MIN_FLOOR = 1.05
#: the false-winner rate a measured floor allows, both directions together: a winner is
#: named after the data say which row is faster, so the bound is one-sided at 1 - α/2
FLOOR_ALPHA = 0.05


@dataclass(frozen=True)
class Spread:
    """The between-process spread of log per-process medians, pooled over ``rows`` rows:
    ``ss = Σ_rows Σ_i (ln m_i − mean_row ln m)²`` with ``df = Σ_rows (n_row − 1)``, so that
    ``ss / df`` is the pooled variance ``s²`` of one process's log median."""

    ss: float = 0.0
    df: int = 0
    rows: int = 0

    @property
    def variance(self) -> float:
        return self.ss / self.df if self.df else math.nan

    def __add__(self, other: Spread) -> Spread:
        return Spread(self.ss + other.ss, self.df + other.df, self.rows + other.rows)


def _logs(medians: Sequence[float] | None) -> list[float]:
    return [math.log(float(m)) for m in medians or () if 0 < float(m) < math.inf]


def spread(medians: Sequence[float] | None) -> Spread:
    """One row's :class:`Spread` (no degrees of freedom below two processes)."""
    logs = _logs(medians)
    if len(logs) < 2:
        return Spread()
    mean = sum(logs) / len(logs)
    return Spread(sum((x - mean) ** 2 for x in logs), len(logs) - 1, 1)


def pooled(rows: Iterable[Sequence[float] | None]) -> Spread:
    """The :class:`Spread` of several rows' per-process medians, pooled."""
    return sum((spread(m) for m in rows), Spread())


@dataclass(frozen=True)
class Floor:
    """The ratio two rows must differ by to be told apart, and where it comes from."""

    value: float
    source: str

    def text(self) -> str:
        """``floor 1.12x: this run's between-process spread, 3 processes a side``."""
        return f"floor {self.value:.2f}x: {self.source}"


#: the floor of steady timings of one process a side (a ladder's rungs, ``--quick``, a
#: training run): one process's median is one draw of the process-to-process spread
ONE_PROCESS = Floor(PROCESS_FLOOR, "one process a side")


def _bound(s: Spread, na: int, nb: int, alpha: float) -> float:
    """``exp(t_{1−α/2, df} · s · √(1/na + 1/nb))``: the ratio that the log ratio of two
    rows' centres exceeds with probability α/2 when both rows ran identical code."""
    from scipy.special import stdtrit

    if not s.df or not math.isfinite(s.variance):
        return math.nan
    t = float(stdtrit(s.df, 1.0 - alpha / 2.0))
    return math.exp(t * math.sqrt(s.variance * (1.0 / na + 1.0 / nb)))


def steady_floor(
    a: Sequence[float] | None, b: Sequence[float] | None, pool: Spread | None = None,
    alpha: float = FLOOR_ALPHA,
) -> Floor:  # fmt: skip
    """The floor of two rows' steady timings, from the per-process medians ``a`` and ``b``.

    With ``n_a, n_b >= 2`` processes a side, under identical code the log ratio of the two
    rows' centres has standard error ``s·√(1/n_a + 1/n_b)``, ``s²`` the variance of one
    process's log median; a lead is named only where the one-sided ``1 − α/2`` bound on
    the log ratio excludes 0 (Student's t), i.e. beyond ``exp(t_{1−α/2,df}·s·√(1/n_a+1/n_b))``.
    Two estimates of ``s²`` and the larger floor they call for: the pair's own (its two
    rows pooled, ``df = n_a + n_b − 2``: unbiased where libraries differ in spread, but
    few degrees of freedom), and ``pool`` (the run's rows of that kind: many degrees of
    freedom, but an average, which a bimodal row would exceed). Never below
    :data:`MIN_FLOOR`, and never above :data:`PROCESS_FLOOR`: a row's median over several
    processes is at least as steady as one process's, so more processes never judge more
    strictly than one (a process that ran 36x slower under load would otherwise tie a
    20x lead whose every process is ahead). A side with fewer than two processes keeps
    :data:`PROCESS_FLOOR`: one process's median is one draw of the process-to-process
    spread."""
    na, nb = len(_logs(a)), len(_logs(b))
    if min(na, nb) < 2:
        return ONE_PROCESS if max(na, nb) < 2 else Floor(PROCESS_FLOOR, "one process on one side")
    sides = f"{na} processes a side" if na == nb else f"{na} and {nb} processes"
    own = spread(a) + spread(b)
    value, source = _bound(own, na, nb, alpha), f"this run's between-process spread, {sides}"
    if pool is not None and pool.df > own.df:
        wide = _bound(pool, na, nb, alpha)
        if wide > value:
            value = wide
            source = (f"the between-process spread of this run's {pool.rows} rows, {sides}")
    if not value >= MIN_FLOOR:  # NaN too: identical medians give no spread to go by
        return Floor(MIN_FLOOR, f"the minimum ({source}: {value:.2f}x)")
    if value > PROCESS_FLOOR:
        return Floor(PROCESS_FLOOR, f"the one-process floor ({source}: {value:.2f}x)")
    return Floor(value, source)


def first_floor(one_sample: bool) -> Floor:
    """The floor of a first-process timing (time to first gradient, first step): each
    sample is a fresh process already, so the run-to-run :data:`NOISE_FLOOR`, unless a
    side holds one sample (one draw of the process spread: :data:`PROCESS_FLOOR`)."""
    if one_sample:
        return ONE_PROCESS
    return Floor(NOISE_FLOOR, "between runs, fresh processes a side")
