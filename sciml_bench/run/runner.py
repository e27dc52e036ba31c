"""The case matrix, budgets, progress and the assembly of one record per case.

A case is problem × backend × solver × gradient method × tolerance. Each runs
in fresh worker processes through an :class:`~sciml_bench.run.executor.Executor`:
one *full* process (cold phases, then steady state) and ``cold - 1`` further
cold-only processes for the spread of time-to-first-gradient. A case whose
first process fails is not repeated: solver failures are deterministic.
Every case ends as a record, whatever happened, and is on disk before the
next case starts.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sciml_bench import backends
from sciml_bench.measure.status import Status
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.problem.reference import Reference
from sciml_bench.results.store import ResultsWriter, summarize
from sciml_bench.run.executor import (
    EngineLost,
    Executor,
    Finished,
    Interrupted,
    LocalExecutor,
    Outcome,
    Sink,
)
from sciml_bench.run.jobs import Process, kind_of
from sciml_bench.run.ode import PHASES

#: the work-precision ladder of ``--sweep`` (DiffEqDevTools style)
SWEEP_RTOLS = (1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9)


@dataclass(frozen=True)
class CaseSpec:
    backend: str
    solver: str
    gradient_method: str
    rtol: float
    atol: float
    max_steps: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.backend} {self.solver} {self.gradient_method} rtol={self.rtol:g}"


@dataclass
class Settings:
    cold: int = 3
    repeats: int = 10
    warmups: int = 1
    budget_s: float = 300.0
    steady_budget_s: float = 20.0
    #: thread count for every worker's frameworks (None: each library's default)
    threads: int | None = None


class Interrupt(Exception):
    """The run was interrupted; every completed case is already on disk."""


def tolerances(problem: CompiledProblem, rtols: Sequence[float] | None) -> list[tuple[float, float]]:
    """(rtol, atol) pairs; atol keeps the problem's atol/rtol ratio."""
    if not rtols:
        return [(problem.rtol, problem.atol)]
    ratio = problem.atol / problem.rtol
    return [(r, r * ratio) for r in rtols]


def plan(
    problem: CompiledProblem,
    backend_names: Sequence[str],
    solvers: Sequence[str] = (),
    gradients: Sequence[str] = (),
    rtols: Sequence[float] | None = None,
    max_steps: int | None = None,
) -> list[CaseSpec]:
    """The case matrix. A solver or gradient name applies to backends offering it."""
    cases = []
    for name in backend_names:
        b = backends.get(name)
        offered = b.solvers()
        chosen = [s for s in solvers if s in offered] or [b.default_solver(problem.stiff)]
        grads = [g for g in gradients if g in b.gradient_methods] or [b.default_gradient(problem)]
        for rtol, atol in tolerances(problem, rtols):
            for s in chosen:
                for g in grads:
                    cases.append(
                        CaseSpec(name, s, g, rtol, atol, max_steps or problem.max_steps)
                    )
    return cases


def ending(o: Outcome, budget_s: float) -> Process:
    """How one worker process ended: its status, reason and t reached."""
    status, reason, t = _ending(o, budget_s)
    return Process(o.events, status, reason, t, o.wall_s)


def _ending(o: Outcome, budget_s: float) -> tuple[str, str, float | None]:
    status_events = [e for e in o.events if "status" in e]
    progress = [e["progress_t"] for e in o.events if "progress_t" in e]
    t_reached = progress[-1] if progress else None
    phases_done = [e["phase"] for e in o.events if "phase" in e]
    running = next((p for p in PHASES if p not in phases_done), "steady state")
    if o.timed_out:
        where = f"; integration had reached t={t_reached:g}" if t_reached is not None else ""
        return (
            Status.BUDGET_EXCEEDED.value,
            f"killed after the {budget_s:g} s budget during {running.replace('_', ' ')}{where}",
            t_reached,
        )
    if o.signal_name:
        return Status.CRASHED.value, f"worker killed by {o.signal_name} during {running}", t_reached
    if status_events:
        last = status_events[-1]
        t = last.get("t_reached", t_reached)
        return last["status"], last.get("reason", ""), t
    tail = o.stderr_tail.strip().splitlines()
    detail = tail[-1] if tail else "no output"
    return Status.CRASHED.value, f"worker exited with code {o.returncode}: {detail}", t_reached


def unavailable_record(problem: CompiledProblem, name: str, reason: str, fix: str) -> dict[str, Any]:
    return summarize({
        "kind": "ode",
        "problem": problem.name,
        "backend": name,
        "solver": "",
        "gradient_method": "",
        "status": Status.UNAVAILABLE.value,
        "reason": f"{reason}. Fix: {fix}" if fix else reason,
    })


Progress = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def case_job(
    spec: CaseSpec, problem: CompiledProblem, ref: Reference, settings: Settings
) -> dict[str, Any]:
    """The ODE job of one case; it carries the reference its record is scored against."""
    return {
        "kind": "ode",
        "backend": spec.backend,
        "problem": problem.to_json(),
        "options": {
            "solver": spec.solver,
            "gradient_method": spec.gradient_method,
            "rtol": spec.rtol,
            "atol": spec.atol,
            "max_steps": spec.max_steps,
            "extra": spec.extra,
        },
        "repeats": settings.repeats,
        "warmups": settings.warmups,
        "steady_budget_s": settings.steady_budget_s,
        "reference": ref.to_json(),
    }


@dataclass(frozen=True)
class CaseTask:
    """What one case's processes need, wherever they run: the job, the mode of each
    process (``None``: a job without modes, e.g. a CNN variant) and the budget."""

    job: dict[str, Any]
    modes: tuple[str | None, ...]
    budget_s: float


def case_processes(task: CaseTask, executor: Executor, sink: Sink) -> list[Process]:
    """Run a case's processes in turn, stopping at the first that does not end ``ok``
    (solver failures are deterministic). Runs where the executor is: on a Dask worker
    too, so that a case's cold processes share one machine."""
    processes: list[Process] = []
    for k, mode in enumerate(task.modes):
        job = task.job if mode is None else {**task.job, "mode": mode}
        outcome = executor.run(job, task.budget_s, lambda e, k=k: sink(k, e))
        processes.append(ending(outcome, task.budget_s))
        if processes[-1].status != Status.OK.value:
            break
    return processes


def _modes(settings: Settings) -> tuple[str, ...]:
    return tuple("full" if k == 0 else "cold" for k in range(max(1, settings.cold)))


def _phase_lines(progress: Progress) -> Sink:
    """The progress lines of a case's worker events."""

    def sink(k: int, e: dict[str, Any]) -> None:
        if "phase" in e:
            progress(f"      process {k + 1}: {e['phase']:<11} {e['s']:8.3f} s")
        elif "status" in e and e["status"] != "ok":
            progress(f"      process {k + 1}: {e['status']}: {e.get('reason', '')[:100]}")

    return sink


def run_case(
    spec: CaseSpec,
    problem: CompiledProblem,
    ref: Reference,
    settings: Settings,
    executor: Executor,
    progress: Progress = _stderr,
) -> dict[str, Any]:
    task = CaseTask(case_job(spec, problem, ref, settings), _modes(settings), settings.budget_s)
    processes = case_processes(task, executor, _phase_lines(progress))
    return kind_of(task.job).record(task.job, processes)


def _lost_record(task: CaseTask, fin: Finished) -> dict[str, Any]:
    """The row of a case whose Dask worker died under it: ``crashed``, and where."""
    host = fin.machine.get("host") or fin.worker or "unknown host"
    lost = Process([], Status.CRASHED.value, f"{fin.lost} (host {host}, worker {fin.worker})")
    return kind_of(task.job).record(task.job, [lost])


def placed(rec: dict[str, Any], fin: Finished) -> dict[str, Any]:
    """``rec`` with where it ran: host, hardware, Dask worker, retries (``--retries``)."""
    from sciml_bench.measure.environment import hardware_label

    out = {**rec, "host": fin.machine.get("host", ""), "retries": len(fin.retried)}
    if fin.machine:
        out["hardware"] = hardware_label(fin.machine)
    if fin.worker:
        out["dask_worker"] = fin.worker
    if fin.retried:
        out["retry_reasons"] = list(fin.retried)
    return out


def remember_machine(writer: ResultsWriter, fin: Finished) -> None:
    """The environment block holds each distinct machine a case ran on."""
    if fin.machine:
        machines = writer.environment.setdefault("machines", {})
        machines.setdefault(fin.machine.get("host", "?"), fin.machine)


def stream(
    tasks: Sequence[tuple[int, CaseTask]],
    writer: ResultsWriter,
    executor: Executor,
    announce: Callable[[int, str], None],
    progress: Progress,
    lines: Callable[[Progress], Sink] = _phase_lines,
    finish: Callable[[dict[str, Any]], dict[str, Any]] = lambda r: r,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Run ``tasks`` (case number, task) through ``executor.imap`` and write each record
    as its case finishes: the one writer, on this process, whatever the executor.
    ``lines`` turns a case's worker events into progress; ``finish`` completes a record."""

    def start(j: int, where: str) -> Sink:
        announce(tasks[j][0], where)
        return lines(progress)

    for fin in executor.imap(case_processes, [t for _, t in tasks], start):
        i, task = tasks[fin.index]
        if fin.lost:
            rec = _lost_record(task, fin)
        else:
            if fin.worker:  # a remote case's events come back with it
                for k, proc in enumerate(fin.value):
                    for e in proc.events:
                        lines(progress)(k, e)
            rec = kind_of(task.job).record(task.job, fin.value)
        rec = placed(finish(rec), fin)
        remember_machine(writer, fin)
        writer.add(rec)
        yield i, rec


def run(
    problem: CompiledProblem,
    ref: Reference,
    cases: Sequence[CaseSpec],
    writer: ResultsWriter,
    settings: Settings,
    executor: Executor | None = None,
    progress: Progress = _stderr,
) -> list[dict[str, Any]]:
    """Run every case, writing each record as soon as it exists (locally in order; on
    Dask as cases finish). The reference is built here, once, and travels in each job.

    Raises :class:`Interrupt` on Ctrl-C after marking the file interrupted.
    """
    executor = executor or LocalExecutor(threads=settings.threads)
    done: list[dict[str, Any]] = []
    names = dict.fromkeys(c.backend for c in cases)
    availability = {n: backends.get(n).availability() for n in names}
    unavailable: dict[int, CaseSpec] = {}
    tasks: list[tuple[int, CaseTask]] = []
    for i, spec in enumerate(cases, 1):
        if not availability[spec.backend].ok:
            if spec.backend not in {s.backend for s in unavailable.values()}:
                unavailable[i] = spec  # one unavailable row per backend is enough
        else:
            job = case_job(spec, problem, ref, settings)
            tasks.append((i, CaseTask(job, _modes(settings), settings.budget_s)))

    def unavailable_before(i: int) -> None:
        for j in sorted(k for k in unavailable if k < i):
            spec = unavailable.pop(j)
            av = availability[spec.backend]
            rec = unavailable_record(problem, spec.backend, av.reason, av.fix)
            progress(f"[{j}/{len(cases)}] {spec.backend}: unavailable ({av.reason})")
            writer.add(rec)
            done.append(rec)

    def announce(i: int, where: str) -> None:
        unavailable_before(i)
        on = f"  on {where}" if where else ""
        progress(f"[{i}/{len(cases)}] {problem.name}: {cases[i - 1].label}{on}")

    with _saved_on_interrupt(writer, done):
        for _, rec in stream(tasks, writer, executor, announce, progress):
            progress(f"      -> {rec['status']}" + (f": {rec['reason']}" if rec["reason"] else ""))
            done.append(rec)
        unavailable_before(len(cases) + 1)
    return done


@contextlib.contextmanager
def _saved_on_interrupt(writer: ResultsWriter, done: list[dict[str, Any]]) -> Iterator[None]:
    """Turn Ctrl-C, or the loss of the executor's engine, into :class:`Interrupt` once
    the file is marked interrupted."""
    try:
        yield
    except EngineLost as e:
        writer.finish("interrupted")
        raise Interrupt(f"{e}: {len(done)} completed case(s) are saved in {writer.path}") from None
    except (KeyboardInterrupt, Interrupted):
        writer.finish("interrupted")
        raise Interrupt(
            f"interrupted: {len(done)} completed case(s) are saved in {writer.path}"
        ) from None


def run_job_once(
    job: dict[str, Any], budget_s: float = 900.0, threads: int | None = None
) -> dict[str, Any]:
    """One job in one fresh worker, and its record (for tests and scripts): a crashed
    or hung worker comes back as a record too."""
    outcome = LocalExecutor(threads=threads).run(job, budget_s, lambda e: None)
    return kind_of(job).record(job, [ending(outcome, budget_s)])


def run_cnn(
    jobs: Sequence[dict[str, Any]],
    writer: ResultsWriter,
    settings: Settings,
    executor: Executor | None = None,
    progress: Progress = _stderr,
) -> list[dict[str, Any]]:
    """CNN baselines: one fresh worker per variant, whose worker returns the record.

    A variant that cannot run here becomes its ``unavailable`` row without a process;
    a worker that crashes or exceeds the budget still leaves a row saying so.
    """
    from sciml_bench import cnn

    executor = executor or LocalExecutor(threads=settings.threads)
    done: list[dict[str, Any]] = []
    available = cnn.variants()

    def title(i: int) -> str:
        job = jobs[i - 1]
        return f"[{i}/{len(jobs)}] cnn: {job['variant']} ({job['preset']}, device {job['device']})"

    def unavailable_before(i: int) -> None:
        for j, job in enumerate(jobs[: i - 1], 1):
            if not available[job["variant"]].available and j not in written:
                written.add(j)
                progress(title(j))
                rec = {**cnn.run_variant(job), "kind": "cnn"}  # the unavailable row
                progress(f"      -> {rec.get('status')}: {rec.get('reason', '')}")
                writer.add(rec)
                done.append(rec)

    def announce(i: int, where: str) -> None:
        unavailable_before(i)
        progress(title(i) + (f"  on {where}" if where else ""))

    def lines(progress: Progress) -> Sink:
        def sink(k: int, e: dict[str, Any]) -> None:
            if "result" in e:
                r = e["result"]
                progress(f"      {r.get('status')}: train {r.get('train_s')} s, "
                         f"accuracy {r.get('accuracy')}")

        return sink

    written: set[int] = set()
    tasks = [
        (i, CaseTask(job, (None,), settings.budget_s))
        for i, job in enumerate(jobs, 1)
        if available[job["variant"]].available
    ]
    with _saved_on_interrupt(writer, done):
        for _, rec in stream(
            tasks, writer, executor, announce, progress, lines, lambda r: {**r, "kind": "cnn"}
        ):
            if rec.get("status") != "ok" or rec.get("reason"):
                progress(f"      -> {rec.get('status')}: {rec.get('reason', '')}")
            done.append(rec)
        unavailable_before(len(jobs) + 1)
    return done
