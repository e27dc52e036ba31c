"""Ladder rungs measured in several fresh processes where they are cheap, the extra
processes interleaved across the run's ladders.

**Why.** A rung measured in one process compares one draw of the process-to-process
spread with another: its verdict's floor is the one-process floor
(:data:`~sciml_bench.measure.noise.PROCESS_FLOOR`, 2.10x), so most published ladder rungs
tied even where one library led by 1.8-2x at every rung (issue 53). With ``P >= 2``
processes a side the floor comes from the spread those processes measured
(:func:`~sciml_bench.measure.noise.steady_floor`), as a single case's does.

**Which rungs.** A rung runs the run's ``--cold`` processes (3 by default, 1 with
``--quick``) where it is cheap (:func:`planned`): the first rung of a ladder, or one whose
process is expected (:func:`expected_s`, from the last completed rung's) to take at most
:data:`CHEAP_S`; a dearer rung runs one process, as before (its spread would cost minutes
a process). The row says which (``rung_processes_planned``, ``cold_processes``).

**When.** A rung's first (full) process runs where its ladder reaches it: the next rung
depends on how it ended (a failure stops the ladder, a forecast skips a rung). Its other
processes wait, and run after every ladder's first pass in rounds, round ``k`` holding
process ``k`` of every waiting rung in a seeded random order
(:func:`~sciml_bench.run.interleave.schedule`, the seed in the file's ``schedules``). So a
rung's processes are spread over the run, and a slow period of the machine falls on every
ladder's rungs alike instead of on one ladder, as ``--interleave`` spreads a run's cases (docs/measurements.md, "How it
measures", "Ladders of several processes a rung"). Each process takes the rung's whole
sample plan, not a share of it (a rung's cost is bounded by being cheap), so the first
process is what a one-process rung always was: a rung that proves dear after all (its first
process took over :data:`DEAR_S`; a dense LU's cost jumps with the size) stops there, with
every sample it would have had alone, and its row says why (``rung_note``).

**Records.** A one-process rung's row is written when it ends, as before. A waiting rung's
row is written once its last process ran (or one failed: failures are deterministic), with
``schedule_slots`` (its processes' places in the ladder run's order, first pass included);
on Ctrl-C every waiting rung is written as a partial record of the processes it has
(:func:`~sciml_bench.run.interrupts.partial_record`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sciml_bench.measure.status import Status
from sciml_bench.results.store import ResultsWriter
from sciml_bench.run.endings import ending, with_facts
from sciml_bench.run.executor import Executor, merge_facts
from sciml_bench.run.interleave import SCHEDULE_KEY, new_seed, schedule
from sciml_bench.run.interrupts import partial_record
from sciml_bench.run.jobs import Process, kind_of
from sciml_bench.run.progress import Progress, status_line
from sciml_bench.run.signals import signal_of

#: a rung runs several processes where one of them is expected to take at most this many
#: seconds (:func:`expected_s`): the default 2 more cost at most 90 s, against the 2.10x
#: floor they lift
CHEAP_S = 45.0
#: a rung whose first process took longer runs no more (:func:`expected_s` guessed wrong)
DEAR_S = 2 * CHEAP_S


def planned(cold: int, completed: Sequence[dict[str, Any]], n: float, key: str) -> int:
    """How many processes the next rung of a ladder runs: ``cold`` where it is cheap,
    else 1. ``completed`` are the ladder's completed rows so far, ``n`` the next rung's
    size on the axis ``key`` (``n_state``, ``n_params``, ``size``). The first rung is
    cheap; a later one where :func:`expected_s` is at most :data:`CHEAP_S`."""
    if cold <= 1:
        return 1
    if not completed:
        return cold
    expected = expected_s(completed[-1], n, key)
    return cold if expected is not None and expected <= CHEAP_S else 1


def expected_s(last: dict[str, Any], n: float, key: str) -> float | None:
    """A process's expected wall time at size ``n`` from the last completed rung's: all
    but its timed samples as it was (imports, build, the first calls' compilation, the
    gradient check), its timed samples grown in proportion to the size,
    ``(t_wall − t_samples) + t_samples · max(1, n / n_last)``. A cost that jumps with the
    size (a dense LU, AMICI's compile) is caught after the rung's first process instead
    (:data:`DEAR_S`); None without the last rung's wall time."""
    wall, n_last = last.get("worker_wall_s"), last.get(key)
    if wall is None or not n_last:
        return None
    timed = min(float(wall), sum(float(x) for k in ("solve_samples", "grad_samples")
                                 for x in (last.get(k) or [])))  # fmt: skip
    return float(wall) - timed + timed * max(1.0, n / float(n_last))


@dataclass
class Rung:
    """One rung's processes so far: its job (without a mode), how many it plans, and
    what its row adds to the job's record (``extra``: size, the problem's facts, the
    ladder's largest completed size, the case index)."""

    job: dict[str, Any]
    planned: int
    title: str
    extra: dict[str, Any] = field(default_factory=dict)
    processes: list[Process] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    slots: list[int] = field(default_factory=list)
    done: bool = False
    #: why it runs no more processes than it has, where it planned more (dear after all)
    note: str = ""

    @property
    def waiting(self) -> bool:
        """Its processes so far ended ``ok`` and it plans more."""
        return (not self.done and not self.note and 0 < len(self.processes) < self.planned
                and self.processes[-1].status == Status.OK.value)  # fmt: skip

    def stop_if_dear(self) -> None:
        """After its first process: a rung that took over :data:`DEAR_S` runs no more."""
        wall = self.processes[0].wall_s
        if self.planned > 1 and wall > DEAR_S:
            self.note = (f"one process of {self.planned}: its first took {wall:.0f} s, over "
                         f"the {DEAR_S:.0f} s after which a rung runs no more")  # fmt: skip

    def record(self, interrupted_by: str | None = None) -> dict[str, Any]:
        """Its row from the processes it has: whole, or partial after an interrupt."""
        if interrupted_by is None:
            rec = kind_of(self.job).record(self.job, self.processes)
        else:
            rec = partial_record(self.job, self.processes, self.planned, interrupted_by)
        out = {**with_facts(rec, self.facts), **self.extra, "rung_processes_planned": self.planned}
        if self.note:
            out["rung_note"] = self.note
        if self.planned > 1:
            out["schedule_slots"] = list(self.slots)
        return out

    def run_process(self, executor: Executor, budget_s: float, progress: Progress,
                    slot: int) -> None:  # fmt: skip
        """Its next process (the first ``full``, the others ``cold``) in a fresh worker."""
        k = len(self.processes)
        job = {**self.job, "mode": "full" if k == 0 else "cold"}

        def on_event(e: dict[str, Any]) -> None:
            if "phase" in e:
                progress(f"      {e['phase']:<11} {e['s']:8.3f} s")

        outcome = executor.run(job, budget_s, on_event)
        self.processes.append(ending(outcome, budget_s))
        merge_facts(self.facts, outcome.facts)
        self.slots.append(slot)


def rung(job: dict[str, Any], processes: int, title: str) -> Rung:
    """A rung that plans ``processes`` processes, each taking the rung's whole sample plan."""
    return Rung({**job, "steady_processes": 1}, processes, title)


def rows_in_order(done: Sequence[dict[str, Any]], final: Sequence[dict[str, Any]]
                  ) -> list[dict[str, Any]]:  # fmt: skip
    """The ladders' rows in their order: a rung that ran several processes by its whole
    row (``final``) in place of the row its first process gave."""
    whole = {r["case_index"]: r for r in final}
    return [whole.get(r.get("case_index"), r) for r in done]


class Rounds:
    """A ladder run's rungs that wait for their other processes, and the order they run
    in. ``slot`` counts the run's processes, first pass included."""

    def __init__(self, writer: ResultsWriter, problem: str, seed: int | None = None):
        self.writer, self.problem = writer, problem
        self.seed = new_seed() if seed is None else seed
        self.waiting: list[Rung] = []
        self.slot = 0

    def place(self, done: list[dict[str, Any]], rec: dict[str, Any], waits: Rung | None = None,
              keys: Sequence[str] = ("largest_ok_size", "case_index")) -> None:  # fmt: skip
        """``rec`` as the next row of the ladders' order (``case_index``), written now, or,
        where its rung ``waits`` for more processes, held: the rung's whole row takes
        ``rec``'s ladder ``keys`` (what the ladder added to its first process's row)."""
        rec["case_index"] = len(done)
        done.append(rec)
        if waits is None:
            self.writer.add(rec)
        else:
            waits.extra.update({k: rec[k] for k in keys if k in rec})

    def first(self, r: Rung, executor: Executor, budget_s: float, progress: Progress) -> dict[str, Any]:
        """Run ``r``'s first process and return its row so far (for the ladder's next
        decisions); ``r`` waits for its others when it plans more and this one was ``ok``."""
        r.run_process(executor, budget_s, progress, self.slot)
        self.slot += 1
        r.stop_if_dear()
        rec = r.record()
        progress(status_line(rec))
        if r.waiting:
            self.waiting.append(r)
        return rec

    def run(self, executor: Executor, budget_s: float, progress: Progress) -> list[dict[str, Any]]:
        """Every waiting rung's other processes, round by round in the seeded order; each
        rung's row written as its last process ends. Returns the rows written."""
        rungs = [r for r in self.waiting if r.waiting]
        order = [u for u in schedule([r.planned for r in rungs], self.seed) if u.process > 0]
        if not order:
            return []
        self._record_order(rungs, order)
        out = []
        for unit in order:
            r = rungs[unit.case]
            if not r.waiting:
                continue
            progress(f"[rung process {unit.process + 1}/{r.planned}] {r.title}")
            r.run_process(executor, budget_s, progress, self.slot)
            self.slot += 1
            if r.waiting:
                continue
            r.done = True  # before the write: an interrupt during it must not add it twice
            rec = r.record()
            progress(status_line(rec))
            self.writer.add(rec)
            out.append(rec)
        return out

    def _record_order(self, rungs: Sequence[Rung], order: Sequence[Any]) -> None:
        """The rounds' order in the file's ``schedules`` (as ``--interleave`` records its
        own): the problem, the seed, and ``[case index, process]`` pairs."""
        pairs = [[rungs[u.case].extra.get("case_index"), u.process] for u in order]
        entry = {"problem": self.problem, "seed": self.seed, "order": pairs, "kind": "ladder rungs"}
        env = self.writer.environment
        env[SCHEDULE_KEY] = [*env.get(SCHEDULE_KEY, []), entry]
        self.writer.flush()

    @contextmanager
    def written_on_interrupt(self) -> Iterator[None]:
        """On Ctrl-C, every rung still waiting is written as a partial row (its completed
        processes are measurements) before the interrupt goes on."""
        try:
            yield
        except KeyboardInterrupt as e:
            by = signal_of(e).name
            for r in self.waiting:
                if r.waiting:
                    r.done = True
                    rec = r.record(interrupted_by=by)
                    self.writer.add(rec)
            raise
