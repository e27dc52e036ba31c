"""Interleaved repetitions (``--interleave``): a run's worker processes in a seeded random
order across its cases, instead of case after case.

**The unit is one worker process.** A case of ``P = --cold`` processes has ``P`` units:
its full process (cold phases, the scored solve and gradient, its share of the steady
samples) and ``P - 1`` cold ones (cold phases and their shares). The steady samples are
already spread over those processes (:func:`~sciml_bench.run.steady.share`: each takes
``⌈repeats / P⌉`` after its own warm-up), so interleaving processes interleaves the
steady samples too, in ``P`` blocks per case, each measured warm. The schedule is made in
*rounds* (as Google Benchmark's random interleaving runs each repetition of every
benchmark in a fresh random order): round ``k`` holds process ``k`` of every case, in an
order drawn from ``random.Random(seed)``. So a case's full process runs in round 0, before
its cold ones (a case whose first process fails is not repeated), and each case's
processes are spread over the whole run, where the machine drifts over minutes.

Why not blocks of samples between warm workers held open at once, one per case: the
noise this answers is *between processes* (per-process medians are bimodal:
``benchmarks/README.md``, paragraph "20 runs a side, the default now (2026-11-26,
evening)"), and blocks taken inside one long-lived process all share that process's draw;
it is the number and spread of processes that averages it out. Held-open workers would
also keep every case's compiled program and memory alive beside the one being timed (the memory
left to a large case, and the refusals made from it, would depend on its neighbours; on
a GPU each would hold its own context), and would need a command protocol to the worker. Re-spawning per block is what this does: a block
is a fresh process that warms up before it samples. Nothing a record measures changes:
every process is fresh, with fresh compilation caches, as before; only *when* it runs.

Not interleaved (the CLI says so in ``--help``): a run of one case (no other to spread
across), a run whose cases have one process each
(``--cold 1``, ``--quick``, sweeps): there is nothing to spread, and a random order would
only move each case to another point of the machine's drift from one run to the next,
noise between runs that a fixed order does not add; ladders (``--sizes``, ensembles), whose
next rung depends on the last (a failure stops a ladder, a forecast skips a rung): their
rungs' first processes run in order, the others in rounds after them
(:mod:`~sciml_bench.run.rung_processes`); training and CNN jobs (one process per case); and ``--executor dask``, where the
processes of one case must share a machine (interleaving would scatter them over workers,
so a case's spread would include the machines').

Records: a case's record is made, and appended to the results file, once its last unit
ran (or its first process failed), so the file holds whole cases as before; a case's
``schedule_slots`` are the positions in the run's order at which its processes ran. On
Ctrl-C every case that had run some of its processes is written as a partial record
(:func:`~sciml_bench.run.interrupts.partial_record`), the completed ones are on disk.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sciml_bench.measure.status import Status
from sciml_bench.results.store import ResultsWriter
from sciml_bench.run.cases import CaseTask
from sciml_bench.run.endings import ending
from sciml_bench.run.executor import Finished, LocalExecutor, Sink, merge_facts
from sciml_bench.run.interrupts import partial_record
from sciml_bench.run.jobs import Process, kind_of
from sciml_bench.run.progress import Progress
from sciml_bench.run.signals import signal_of
from sciml_bench.run.streaming import placed, remember_machine

#: the environment key that holds each interleaved schedule of a run (docs/results-schema.md)
SCHEDULE_KEY = "schedules"


@dataclass(frozen=True)
class Unit:
    """One worker process of the schedule: process ``process`` (0: the full one) of the
    case at position ``case`` of the run's task list."""

    case: int
    process: int


def schedule(processes: Sequence[int], seed: int) -> list[Unit]:
    """The order of every case's processes (``processes[c]`` of case ``c``): round ``k``
    holds process ``k`` of every case that has one, shuffled by ``random.Random(seed)``.
    A permutation of all units, the same for the same seed, and a case's processes in
    their own order (its full process first)."""
    rng = random.Random(seed)
    order: list[Unit] = []
    for k in range(max(processes, default=0)):
        round_k = [Unit(c, k) for c, n in enumerate(processes) if n > k]
        rng.shuffle(round_k)
        order += round_k
    return order


def new_seed() -> int:
    """A fresh seed for a run that names none (recorded, so its order can be replayed)."""
    return secrets.randbelow(2**31)


@dataclass
class _Case:
    """What one case has run so far."""

    processes: list[Process] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    slots: list[int] = field(default_factory=list)
    done: bool = False


#: ``announce(case number, process k, processes, slot)`` before a unit starts
Announce = Callable[[int, int, int, int], None]


def run_schedule(
    tasks: Sequence[tuple[int, CaseTask]], order: Sequence[Unit], writer: ResultsWriter,
    executor: LocalExecutor, announce: Announce, progress: Progress,
    lines: Callable[[Progress, CaseTask], Sink],
) -> Iterator[tuple[int, dict[str, Any]]]:  # fmt: skip
    """Run ``order``'s units; write and yield each case's record ``(case number, record)``
    as its last process ends. The processes of a case whose process fails are not run on
    (solver failures are deterministic). On Ctrl-C the interrupt carries ``partials``: the
    records of the cases cut between their processes, for the caller to write."""
    from sciml_bench.measure.environment import fingerprint

    machine = fingerprint()
    state = [_Case() for _ in tasks]
    sinks: dict[int, Sink] = {}
    try:
        for slot, unit in enumerate(order):
            st = state[unit.case]
            if st.done:
                continue
            i, task = tasks[unit.case]
            announce(i, unit.process, len(task.modes), slot)
            sink = sinks.setdefault(unit.case, lines(progress, task))
            _run_unit(task, unit.process, executor, sink, st)
            st.slots.append(slot)
            ok = st.processes[-1].status == Status.OK.value
            if ok and len(st.processes) < len(task.modes):
                continue
            st.done = True  # before the write: an interrupt during it must not add it twice
            rec = _finished(task, st, machine, i)
            remember_machine(writer, Finished(unit.case, st.processes, machine=machine))
            writer.add(rec)
            yield i, rec
    except KeyboardInterrupt as e:
        by = signal_of(e).name
        e.partials = [  # type: ignore[attr-defined]
            _finished(task, st, machine, i,
                      partial_record(task.job, st.processes, len(task.modes), by))
            for (i, task), st in zip(tasks, state, strict=True) if st.processes and not st.done
        ]  # fmt: skip
        raise


def _run_unit(task: CaseTask, k: int, executor: LocalExecutor, sink: Sink, st: _Case) -> None:
    """Process ``k`` of ``task`` in a fresh worker; its ending and host facts go to ``st``."""
    mode = task.modes[k]
    job = task.job if mode is None else {**task.job, "mode": mode}
    executor.take_facts()  # what ran before this process is not its case's
    outcome = executor.run(job, task.budget_s, lambda e: sink(k, e))
    st.processes.append(ending(outcome, task.budget_s))
    merge_facts(st.facts, executor.take_facts())


def _finished(
    task: CaseTask, st: _Case, machine: dict[str, Any], i: int,
    rec: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """A case's record (``rec``, or made from its processes) with where it ran, its case
    number and its slots in the run's order."""
    if rec is None:
        rec = kind_of(task.job).record(task.job, st.processes)
    fin = Finished(0, st.processes, machine=machine, facts=st.facts)
    return {**placed(rec, fin), "case_index": i, "schedule_slots": list(st.slots)}


def record_schedule(
    writer: ResultsWriter, problem: str, seed: int, order: Sequence[Unit],
    tasks: Sequence[tuple[int, CaseTask]],
) -> None:  # fmt: skip
    """Append this schedule to the run's environment (``schedules``): the problem, the
    seed, and the planned order as ``[case number, process]`` pairs; written now, before
    the first unit runs, so an interrupted file has it too."""
    planned = [[tasks[u.case][0], u.process] for u in order]
    entry = {"problem": problem, "seed": seed, "order": planned}
    writer.environment[SCHEDULE_KEY] = [*writer.environment.get(SCHEDULE_KEY, []), entry]
    writer.flush()
