"""Running a problem's cases: :func:`run` (the case matrix, unavailable backends as one
row each), :func:`run_case`, :func:`run_job_once` and :func:`run_training`; and the names
of the modules it drives, re-exported for the CLI, tests and benchmarks.

A case is problem × backend × solver × gradient method × tolerance. Each runs
in fresh worker processes through an :class:`~sciml_bench.run.executor.Executor`:
one *full* process (cold phases, the solution and gradient scored, then its share
of the steady samples) and ``cold - 1`` further processes (cold phases and their
shares: :func:`~sciml_bench.run.steady.share`), for the spread of
time-to-first-gradient and of steady state across processes. A case whose
first process fails is not repeated: solver failures are deterministic.
Every case ends as a record, whatever happened, and is on disk before the
next case starts; with ``Settings.interleave`` the processes of a run's cases run in a
seeded random order across cases (:mod:`~sciml_bench.run.interleave`), and each case is
on disk once its last process ran.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sciml_bench import backends
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.problem.reference import Reference
from sciml_bench.results.store import ResultsWriter
from sciml_bench.run.cases import SWEEP_RTOLS, CaseSpec, CaseTask, Settings, case_job, plan
from sciml_bench.run.cnn_run import cnn_progress, run_cnn
from sciml_bench.run.endings import ending, one_process_record, unavailable_record
from sciml_bench.run.ensemble_ladders import (
    ensemble_job,
    ensemble_without_reference,
    plan_ensemble,
    run_ensemble,
)
from sciml_bench.run.executor import Executor, LocalExecutor, Sink
from sciml_bench.run.interleave import new_seed, record_schedule, run_schedule, schedule
from sciml_bench.run.interrupts import Interrupt, saved_on_interrupt
from sciml_bench.run.jobs import kind_of
from sciml_bench.run.progress import Progress, phase_lines, status_line, to_stderr
from sciml_bench.run.sized_ladders import (
    Rungs,
    _not_runnable,
    memory_refusal,
    plan_sized,
    run_sized,
)
from sciml_bench.run.streaming import case_processes, modes, stream

#: what the CLI, the tests and the benchmarks reach through ``runner`` (the modules that
#: own them are named in the imports above)
__all__ = [
    "SWEEP_RTOLS", "CaseSpec", "CaseTask", "Interrupt", "Rungs", "Settings", "_not_runnable",
    "case_job", "case_processes", "cnn_progress", "ending", "ensemble_job",
    "ensemble_without_reference", "memory_refusal", "plan", "plan_ensemble", "plan_sized",
    "run", "run_case", "run_cnn", "run_ensemble", "run_job_once", "run_sized", "run_training",
    "stream",
]


def run_case(
    spec: CaseSpec,
    problem: CompiledProblem,
    ref: Reference,
    settings: Settings,
    executor: Executor,
    progress: Progress = to_stderr,
) -> dict[str, Any]:
    """One case's processes in turn, here, and its record (not written)."""
    task = CaseTask(case_job(spec, problem, ref, settings), modes(settings), settings.budget_s)
    processes = case_processes(task, executor, phase_lines(progress))
    return kind_of(task.job).record(task.job, processes)


def run(
    problem: CompiledProblem,
    ref: Reference | None,
    cases: Sequence[CaseSpec],
    writer: ResultsWriter,
    settings: Settings,
    executor: Executor | None = None,
    progress: Progress = to_stderr,
    task_of: Callable[[CaseSpec], CaseTask] | None = None,
    lines: Callable[[Progress, CaseTask], Sink] = phase_lines,
    kind: str = "ode",
) -> list[dict[str, Any]]:
    """Run every case, writing each record as soon as it exists (locally in order; on
    Dask as cases finish). The reference is built here, once, and travels in each job.
    ``task_of`` makes a case's task (default: the ODE job, ``--cold`` processes), ``lines``
    its progress lines, ``kind`` the kind of an ``unavailable`` row (training: ``train``).

    Raises :class:`Interrupt` on Ctrl-C after marking the file interrupted.
    """
    executor = executor or LocalExecutor(threads=settings.threads)
    done: list[dict[str, Any]] = []
    names = dict.fromkeys(c.backend for c in cases)
    availability = {n: backends.get(n).availability() for n in names}
    unavailable, tasks = _tasks(cases, availability, task_of or _ode_task(problem, ref, settings))
    # the counter counts rows: an unavailable backend's cases make one row between them
    row_of = {i: n for n, i in enumerate(sorted([*unavailable, *(i for i, _ in tasks)]), 1)}
    rows = len(row_of)

    def unavailable_before(i: int) -> None:
        for j in sorted(k for k in unavailable if k < i):
            spec = unavailable.pop(j)
            av = availability[spec.backend]
            rec = {**unavailable_record(problem, spec.backend, av.reason, av.fix, kind), "case_index": j}
            progress(f"[{row_of[j]}/{rows}] {spec.backend}: unavailable ({av.reason})")
            writer.add(rec)
            done.append(rec)

    def announce(i: int, where: str, process: str = "") -> None:
        unavailable_before(i)
        on = f"  on {where}" if where else ""
        progress(f"[{row_of[i]}/{rows}] {problem.name}: {cases[i - 1].label}{on}{process}")

    with saved_on_interrupt(writer, done):
        # interleaved only where it changes nothing measured (ODE cases on this machine)
        # and averages something (two cases or more, of two processes or more: a lone
        # case has no other to spread across; run.interleave)
        spread = len(tasks) > 1 and any(len(t.modes) > 1 for _, t in tasks)
        if settings.interleave and spread and task_of is None and isinstance(executor, LocalExecutor):
            _interleaved(problem.name, tasks, writer, executor, announce, progress, done,
                         settings.seed)  # fmt: skip
        else:
            _streamed(tasks, writer, executor, announce, progress, lines, done)
        unavailable_before(len(cases) + 1)
    return sorted(done, key=lambda r: r.get("case_index", 0))  # case order, not finishing order


def _ode_task(problem: CompiledProblem, ref: Reference | None,
              settings: Settings) -> Callable[[CaseSpec], CaseTask]:  # fmt: skip
    """How :func:`run` makes an ODE case's task: its job, ``--cold`` processes."""

    def task_of(spec: CaseSpec) -> CaseTask:
        assert ref is not None, "an ODE case is scored against a reference"
        job = case_job(spec, problem, ref, settings)
        return CaseTask(job, modes(settings), settings.budget_s)

    return task_of


def _tasks(
    cases: Sequence[CaseSpec], availability: dict[str, Any], task_of: Callable[[CaseSpec], CaseTask]
) -> tuple[dict[int, CaseSpec], list[tuple[int, CaseTask]]]:
    """The tasks of the cases whose backend is available, by case number (from 1), and the
    first case of each unavailable backend (its one row)."""
    unavailable: dict[int, CaseSpec] = {}
    tasks: list[tuple[int, CaseTask]] = []
    for i, spec in enumerate(cases, 1):
        if not availability[spec.backend].ok:
            if spec.backend not in {s.backend for s in unavailable.values()}:
                unavailable[i] = spec  # one unavailable row per backend is enough
        else:
            tasks.append((i, task_of(spec)))
    return unavailable, tasks


def _streamed(
    tasks: Sequence[tuple[int, CaseTask]], writer: ResultsWriter, executor: Executor,
    announce: Callable[[int, str], None], progress: Progress,
    lines: Callable[[Progress, CaseTask], Sink], done: list[dict[str, Any]],
) -> None:  # fmt: skip
    """Add the tasks' records to ``done`` as :func:`stream` writes them (``done`` counts
    the saved cases if the run is interrupted); on Ctrl-C the partial record of a case cut
    between its processes is written too before the interrupt goes on."""
    try:
        for _, rec in stream(tasks, writer, executor, announce, progress, lines):
            progress(status_line(rec))
            done.append(rec)
    except KeyboardInterrupt as e:
        partial = getattr(e, "partial", None)
        if partial is not None:
            writer.add(partial)
            done.append(partial)
        raise


def _interleaved(
    name: str, tasks: Sequence[tuple[int, CaseTask]], writer: ResultsWriter,
    executor: LocalExecutor, announce: Callable[..., None], progress: Progress,
    done: list[dict[str, Any]], seed: int | None,
) -> None:  # fmt: skip
    """The tasks' processes in the seeded order of :func:`schedule`, its plan recorded in
    the file first; each record added to ``done`` as its case completes. On Ctrl-C the
    partial records of the cases cut between their processes are written too."""
    if not tasks:  # every backend unavailable: nothing to order
        return
    seed = new_seed() if seed is None else seed
    order = schedule([len(t.modes) for _, t in tasks], seed)
    record_schedule(writer, name, seed, order, tasks)
    progress(f"interleaved: {len(order)} processes of {len(tasks)} case(s) in a random "
             f"order (--seed {seed} replays it)")  # fmt: skip

    def unit(i: int, k: int, n: int, slot: int) -> None:
        announce(i, "", f"  (process {k + 1} of {n}; {slot + 1}/{len(order)})")

    gen = run_schedule(tasks, order, writer, executor, unit, progress, phase_lines)
    try:
        for _, rec in gen:
            progress(status_line(rec))
            done.append(rec)
    except KeyboardInterrupt as e:
        partials = getattr(e, "partials", None)
        if partials is None:  # it came between two records: the schedule says what was cut
            try:
                gen.throw(e)
            except KeyboardInterrupt as cut:
                partials = getattr(cut, "partials", [])
        for rec in partials:
            writer.add(rec)
            done.append(rec)
        raise


def run_job_once(
    job: dict[str, Any], budget_s: float = 900.0, threads: int | None = None
) -> dict[str, Any]:
    """One job in one fresh worker, and its record (for tests and scripts): a crashed
    or hung worker comes back as a record too."""
    outcome = LocalExecutor(threads=threads).run(job, budget_s, lambda e: None)
    return one_process_record(job, outcome, budget_s)


def run_training(
    problem: CompiledProblem,
    training: Any,
    reference_curve: dict[str, Any],
    cases: Sequence[CaseSpec],
    writer: ResultsWriter,
    settings: Settings,
    executor: Executor | None = None,
    progress: Progress = to_stderr,
) -> list[dict[str, Any]]:
    """Train ``problem`` (its ``[training]`` section, ``training``) once per case, each in
    one fresh worker under the case budget, every row on disk as it ends; the reference
    curve travels in each job. As :func:`run` otherwise (unavailable rows, Ctrl-C)."""
    from sciml_bench.run import train

    def task_of(spec: CaseSpec) -> CaseTask:
        job = {**train.training_job(spec, problem, training, reference_curve),
               "steady_pin": settings.pin}  # after the first iteration (measure.affinity)
        return CaseTask(job, (None,), settings.budget_s)

    return run(problem, None, cases, writer, settings, executor, progress,
               task_of=task_of, lines=train.progress_lines, kind="train")  # fmt: skip
