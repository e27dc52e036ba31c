"""The case matrix, budgets, progress and the assembly of one record per case.

A case is problem × backend × solver × gradient method × tolerance. Each runs
in fresh worker processes through an :class:`~sciml_bench.run.executor.Executor`:
one *full* process (cold phases, the solution and gradient scored, then its share
of the steady samples) and ``cold - 1`` further processes (cold phases and their
shares: :func:`~sciml_bench.run.steady.share`), for the spread of
time-to-first-gradient and of steady state across processes. A case whose
first process fails is not repeated: solver failures are deterministic.
Every case ends as a record, whatever happened, and is on disk before the
next case starts.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sciml_bench import backends
from sciml_bench.measure.status import Status
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.problem.reference import Reference
from sciml_bench.results.store import ResultsWriter, summarize
from sciml_bench.results.table import fmt_rtol
from sciml_bench.run import forecast
from sciml_bench.run.executor import (
    EngineLost,
    Executor,
    Finished,
    LocalExecutor,
    Outcome,
    Sink,
)
from sciml_bench.run.jobs import Process, kind_of
from sciml_bench.run.ode import running_phase
from sciml_bench.run.signals import signal_of

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
    #: where it runs (``cpu``/``cuda``), and the device asked for (a CPU-only backend
    #: asked for ``cuda`` runs on ``cpu`` and its row says so)
    device: str = "cpu"
    device_requested: str = "cpu"
    #: the floating-point type it computes in, and the one asked for (``--dtype``: a
    #: float64-only backend asked for float32 runs in float64 and its row says so)
    dtype: str = "float64"
    dtype_requested: str = "float64"
    #: a fixed-step solver's step (``--dt``); None for an adaptive one
    dt: float | None = None

    @property
    def label(self) -> str:
        control = f"dt={self.dt:g}" if self.dt is not None else f"rtol={fmt_rtol(self.rtol)}"
        dtype = f" {self.dtype}" if self.dtype != "float64" else ""
        return (f"{self.backend} {self.solver} {self.gradient_method} "
                f"{control}{dtype} on {self.device}")


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
    """The run was interrupted (``signum``: SIGINT, SIGTERM or SIGHUP); every
    completed case is already on disk."""

    def __init__(self, message: str, signum: int = signal.SIGINT):
        super().__init__(message)
        self.signum = signum


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
    devices: Sequence[str] = ("cpu",),
    dtype: str = "float64",
    dt: float | None = None,
) -> list[CaseSpec]:
    """The case matrix. A solver or gradient name applies to backends offering it.

    Each case runs once per device in ``devices`` (concrete: ``cpu``, ``cuda``), a
    backend's devices next to each other. A backend that runs only on the CPU runs there
    once: for a ``cuda``-only request its row is on ``cpu`` and says it was asked for
    ``cuda``; beside a ``cpu`` request it is that row alone. ``dtype`` follows the same
    rule: a backend that computes in float64 only runs in float64 and says what was asked.
    ``dt`` is the step of the fixed-step solvers (``SolverInfo.fixed_step``); the CLI
    checks that it is given exactly when a chosen solver is one.
    """
    cases = []
    for name in backend_names:
        b = backends.get(name)
        offered = b.solvers()
        chosen = [s for s in solvers if s in offered] or [b.default_solver(problem.stiff)]
        grads = [g for g in gradients if g in b.gradient_methods] or [b.default_gradient(problem)]
        runs = [(d, d) for d in devices if d in b.devices]
        if not runs:  # CPU-only under a GPU-only request: on the CPU, and the row says so
            runs = [("cpu", devices[0])]
        ran = dtype if dtype in b.dtypes else "float64"  # float64-only: float64, said so
        for device, requested in runs:
            for rtol, atol in tolerances(problem, rtols):
                for s in chosen:
                    step = dt if offered[s].fixed_step else None
                    for g in grads:
                        cases.append(CaseSpec(
                            name, s, g, rtol, atol, max_steps or problem.max_steps,
                            device=device, device_requested=requested,
                            dtype=ran, dtype_requested=dtype, dt=step,
                        ))  # fmt: skip
    return cases


#: a CNN worker's stage (``cnn_stage`` events) -> what runs after it
CNN_NEXT = {"import": "setup", "setup": "the first step", "first_step": "training or evaluation"}


def ending(o: Outcome, budget_s: float) -> Process:
    """How one worker process ended: its status, reason and t reached."""
    status, reason, t = _ending(o, budget_s)
    return Process(o.events, status, reason, t, o.wall_s)


def _ending(o: Outcome, budget_s: float) -> tuple[str, str, float | None]:
    status_events = [e for e in o.events if "status" in e]
    progress = [e["progress_t"] for e in o.events if "progress_t" in e]
    t_reached = progress[-1] if progress else None
    running = running_phase(o.events)  # past TTFG (a first solve without gradient): steady
    stages = [e["cnn_stage"] for e in o.events if "cnn_stage" in e]
    if stages:  # a CNN worker: the stage after the last one it announced
        running = CNN_NEXT.get(stages[-1], running)
    if o.timed_out:
        where = ""
        if t_reached is not None:
            where = f"; integration had reached t={t_reached:g}"
        elif running not in ("import", "build", *CNN_NEXT.values()):
            where = "; how far in t it got is unknown (the library reports no progress mid-solve)"
        return (
            Status.BUDGET_EXCEEDED.value,
            f"killed after the {budget_s:g} s budget during {running.replace('_', ' ')}{where}"
            " (--budget S gives each case more)",
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


def unavailable_record(
    problem: CompiledProblem, name: str, reason: str, fix: str, kind: str = "ode"
) -> dict[str, Any]:
    return summarize({
        "kind": kind,
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
            "dtype": spec.dtype,
            "dtype_requested": spec.dtype_requested,
            "dt": spec.dt,
        },
        "device": spec.device,
        "device_requested": spec.device_requested,
        "repeats": settings.repeats,
        "warmups": settings.warmups,
        "steady_budget_s": settings.steady_budget_s,
        # the steady samples are spread over the case's processes (run.steady.share)
        "steady_processes": max(1, settings.cold),
        # each process's steady samples end before it (run.steady.deadline_of)
        "budget_s": settings.budget_s,
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
        try:
            outcome = executor.run(job, task.budget_s, lambda e, k=k: sink(k, e))
        except KeyboardInterrupt as e:  # Interrupted, or a signal between two processes
            if processes:  # the finished ones are measurements: keep them, marked partial
                e.partial = _partial(  # type: ignore[attr-defined]
                    task.job, processes, len(task.modes), signal_of(e).name
                )
            raise
        processes.append(ending(outcome, task.budget_s))
        if processes[-1].status != Status.OK.value:
            break
    return processes


def _modes(settings: Settings) -> tuple[str, ...]:
    return tuple("full" if k == 0 else "cold" for k in range(max(1, settings.cold)))


def _phase_lines(progress: Progress, task: CaseTask | None = None) -> Sink:
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


def with_facts(rec: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any]:
    """``rec`` with the executor's facts about its processes (``concurrent_cases``,
    threads, CPU shares); a value the worker recorded itself wins (a CNN worker measures
    its own load), unless it is None."""
    return {**facts, **{k: v for k, v in rec.items() if v is not None or k not in facts}}


def placed(rec: dict[str, Any], fin: Finished) -> dict[str, Any]:
    """``rec`` with where it ran: host, hardware, Dask worker, retries (``--retries``),
    and what it shared the host with (``concurrent_cases``, threads: ``Finished.facts``)."""
    from sciml_bench.measure.environment import hardware_label

    out = {**with_facts(rec, fin.facts), "host": fin.machine.get("host", ""),
           "retries": len(fin.retried)}
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
    lines: Callable[[Progress, CaseTask], Sink] = _phase_lines,
    finish: Callable[[dict[str, Any]], dict[str, Any]] = lambda r: r,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Run ``tasks`` (case number, task) through ``executor.imap`` and write each record
    as its case finishes: the one writer, on this process, whatever the executor.
    ``lines`` turns a case's worker events into progress; ``finish`` completes a record."""

    def start(j: int, where: str) -> Sink:
        announce(tasks[j][0], where)
        return lines(progress, tasks[j][1])

    for fin in executor.imap(case_processes, [t for _, t in tasks], start):
        i, task = tasks[fin.index]
        if fin.lost:
            rec = _lost_record(task, fin)
        else:
            if fin.worker:  # a remote case's events come back with it
                sink = lines(progress, task)
                for k, proc in enumerate(fin.value):
                    for e in proc.events:
                        sink(k, e)
            rec = kind_of(task.job).record(task.job, fin.value)
        rec = placed(finish(rec), fin)
        rec["case_index"] = i  # tables list rows in case order, whatever the finishing order
        remember_machine(writer, fin)
        writer.add(rec)
        yield i, rec


def _partial(job: dict[str, Any], processes: list[Process], planned: int, by: str) -> dict[str, Any]:
    """The record of a case interrupted after some of its processes finished."""
    rec = kind_of(job).record(job, processes)
    note = f"partial: interrupted by {by} after {len(processes)} of {planned} cold processes"
    rec["reason"] = f"{rec['reason']}; {note}" if rec.get("reason") else note
    return {**rec, "partial": True, "cold_processes_planned": planned}


def run(
    problem: CompiledProblem,
    ref: Reference | None,
    cases: Sequence[CaseSpec],
    writer: ResultsWriter,
    settings: Settings,
    executor: Executor | None = None,
    progress: Progress = _stderr,
    task_of: Callable[[CaseSpec], CaseTask] | None = None,
    lines: Callable[[Progress, CaseTask], Sink] = _phase_lines,
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
    unavailable: dict[int, CaseSpec] = {}
    tasks: list[tuple[int, CaseTask]] = []
    for i, spec in enumerate(cases, 1):
        if not availability[spec.backend].ok:
            if spec.backend not in {s.backend for s in unavailable.values()}:
                unavailable[i] = spec  # one unavailable row per backend is enough
        elif task_of is not None:
            tasks.append((i, task_of(spec)))
        else:
            assert ref is not None, "an ODE case is scored against a reference"
            job = case_job(spec, problem, ref, settings)
            tasks.append((i, CaseTask(job, _modes(settings), settings.budget_s)))

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

    def announce(i: int, where: str) -> None:
        unavailable_before(i)
        on = f"  on {where}" if where else ""
        progress(f"[{row_of[i]}/{rows}] {problem.name}: {cases[i - 1].label}{on}")

    with _saved_on_interrupt(writer, done):
        try:
            for _, rec in stream(tasks, writer, executor, announce, progress, lines):
                progress(
                    f"      -> {rec['status']}" + (f": {rec['reason']}" if rec["reason"] else "")
                )
                done.append(rec)
        except KeyboardInterrupt as e:
            partial = getattr(e, "partial", None)
            if partial is not None:
                writer.add(partial)
                done.append(partial)
            raise
        unavailable_before(len(cases) + 1)
    return sorted(done, key=lambda r: r.get("case_index", 0))  # case order, not finishing order


@contextlib.contextmanager
def _saved_on_interrupt(writer: ResultsWriter, done: list[dict[str, Any]]) -> Iterator[None]:
    """Turn Ctrl-C (or SIGTERM/SIGHUP, :mod:`sciml_bench.run.signals`), or the loss of
    the executor's engine, into :class:`Interrupt` once the file is marked interrupted."""
    try:
        yield
    except EngineLost as e:
        writer.finish("interrupted")
        raise Interrupt(f"{e}: {len(done)} completed case(s) are saved in {writer.path}") from None
    except KeyboardInterrupt as e:  # Interrupted and Stopped included
        sig = signal_of(e)
        writer.finish("interrupted", interrupted_by=sig.name)
        raise Interrupt(
            f"interrupted by {sig.name}: {len(done)} completed case(s) are saved in {writer.path}",
            sig,
        ) from None


def cnn_progress(e: dict[str, Any], variant: str) -> str | None:
    """The progress line of one CNN worker event, or None: stages as they end, the
    first step as it starts (compilation: torch-compile's takes ~20 s on 2 CPU cores),
    and the result."""
    stage, s = e.get("cnn_stage"), e.get("s")
    if stage == "first_step":
        compiled = "" if variant == "torch-eager" else ", compiling"
        return f"      first step{compiled} ..."
    if stage:
        return f"      {stage:<10} {s:8.2f} s" if isinstance(s, int | float) else None
    if "result" not in e:
        return None
    r = e["result"]

    def num(key: str, fmt: str) -> str:
        v = r.get(key)
        return format(v, fmt) if isinstance(v, int | float) and not isinstance(v, bool) else "-"

    return (
        f"      {r.get('status')}: first step {num('time_to_first_step_s', '.2f')} s, train "
        f"{num('train_s', '.3g')} s ({num('throughput_ips', '.0f')} img/s), "
        f"accuracy {num('accuracy', '.3f')}"
    )


def run_job_once(
    job: dict[str, Any], budget_s: float = 900.0, threads: int | None = None
) -> dict[str, Any]:
    """One job in one fresh worker, and its record (for tests and scripts): a crashed
    or hung worker comes back as a record too."""
    outcome = LocalExecutor(threads=threads).run(job, budget_s, lambda e: None)
    return with_facts(kind_of(job).record(job, [ending(outcome, budget_s)]), outcome.facts)


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
        cfg = job.get("config") or {}
        what = " ".join(str(cfg[k]) for k in ("model", "precision", "pipeline") if cfg.get(k))
        return (f"[{i}/{len(jobs)}] cnn: {job['variant']} {what} ({job['preset']}, "
                f"device {job['device']})")  # fmt: skip

    def unavailable_before(i: int) -> None:
        for j, job in enumerate(jobs[: i - 1], 1):
            if not available[job["variant"]].available and j not in written:
                written.add(j)
                progress(title(j))
                rec = {**cnn.run_variant(job), "kind": "cnn", "case_index": j}  # unavailable
                progress(f"      -> {rec.get('status')}: {rec.get('reason', '')}")
                writer.add(rec)
                done.append(rec)

    def announce(i: int, where: str) -> None:
        unavailable_before(i)
        progress(title(i) + (f"  on {where}" if where else ""))

    def lines(progress: Progress, task: CaseTask | None = None) -> Sink:
        variant = task.job.get("variant", "") if task is not None else ""

        def sink(k: int, e: dict[str, Any]) -> None:
            line = cnn_progress(e, variant)
            if line:
                progress(line)

        return sink

    written: set[int] = set()
    tasks = [
        (i, CaseTask(job, (None,), settings.budget_s))
        for i, job in enumerate(jobs, 1)
        if available[job["variant"]].available
    ]
    with _saved_on_interrupt(writer, done):
        for _, rec in stream(
            tasks, writer, executor, announce, progress, lines,
            lambda r: cnn.compare_precision({**r, "kind": "cnn"}, done),
        ):  # fmt: skip
            if rec.get("status") != "ok" or rec.get("reason"):
                progress(f"      -> {rec.get('status')}: {rec.get('reason', '')}")
            done.append(rec)
        unavailable_before(len(jobs) + 1)
    return sorted(done, key=lambda r: r.get("case_index", 0))  # case order, not finishing order


@dataclass
class Ladder:
    """One ladder's progress, for ensembles and array problems alike: the largest size that
    completed so far, and the first size that failed (after it, larger sizes are skipped)."""

    largest: int | None = None
    failed: dict[str, Any] | None = None
    #: the rows of the sizes that completed, smallest first (:mod:`~sciml_bench.run.forecast`)
    completed: list[dict[str, Any]] = field(default_factory=list)

    def skipped(self) -> str | None:
        """Why the next size is not run (a smaller one failed), or None."""
        if self.failed is None:
            return None
        return f"not run: size {self.failed['size']} already ended {self.failed['status']}" + (
            f"; the largest size that completed is {self.largest}"
            if self.largest
            else "; no size completed"
        )

    def done(self, size: int, rec: dict[str, Any]) -> None:
        """Record how ``size`` ended; every row carries the largest completed size so far.
        A size refused up front (``skipped``) stops nothing: larger ones judge themselves."""
        if rec["status"] == Status.OK.value:
            self.largest = size
            self.completed.append(rec)
        elif rec["status"] != Status.SKIPPED.value and self.failed is None:
            self.failed = rec
        rec["largest_ok_size"] = self.largest


@dataclass(frozen=True)
class EnsembleSpec:
    """One ladder: a backend and semantics, run at each size in turn."""

    backend: str
    semantics: str
    solver: str
    gradient_method: str
    rtol: float
    atol: float
    max_steps: int
    sizes: tuple[int, ...]
    device: str = "cpu"
    #: what the user asked for: ``cuda`` on a CPU-only backend runs on ``cpu``
    device_requested: str = "cpu"

    @property
    def label(self) -> str:
        return f"{self.backend} {self.semantics} {self.solver} {self.gradient_method}"


def plan_ensemble(
    problem: CompiledProblem,
    semantics: Sequence[str],
    sizes: Sequence[int],
    backend_names: Sequence[str],
    solvers: Sequence[str] = (),
    gradients: Sequence[str] = (),
    max_steps: int | None = None,
    devices: Sequence[str] = ("cpu",),
) -> list[EnsembleSpec]:
    """One ladder per (backend, semantics, solver, gradient) offered and device, by
    :func:`plan`'s device rule (a CPU-only backend runs once, on the CPU, and says what
    was asked for); a backend that offers none of ``semantics`` gets a ladder with no
    semantics (it becomes one status row)."""
    out = []
    for name in backend_names:
        b = backends.get(name)
        offered = b.solvers()
        chosen = [s for s in solvers if s in offered] or [b.ensemble_solver(problem.stiff)]
        grads = [g for g in gradients if g in b.gradient_methods] or [b.default_gradient(problem)]
        runs = [(d, d) for d in devices if b.runs_ensembles_on(d)] or [("cpu", devices[0])]
        for device, requested in runs:
            sems = [s for s in b.ensemble_offer(device) if s in semantics] or [""]
            for sem in sems:
                for s in chosen:
                    for g in grads:
                        out.append(EnsembleSpec(
                            name, sem, s, g, problem.rtol, problem.atol,
                            max_steps or problem.max_steps, tuple(sizes), device, requested,
                        ))  # fmt: skip
    return out


def ensemble_job(
    spec: EnsembleSpec, size: int, problem: CompiledProblem, ensemble: dict[str, Any],
    observations: str | None, ref: dict[str, Any], settings: Settings,
) -> dict[str, Any]:
    """The job of one rung, pinned to ``spec.device``."""
    return {
        "kind": "ensemble",
        "backend": spec.backend,
        "semantics": spec.semantics,
        "size": size,
        "device": spec.device,
        "device_requested": spec.device_requested,
        "problem": problem.to_json(),
        "ensemble": ensemble,
        "observations": observations,
        "options": {
            "solver": spec.solver, "gradient_method": spec.gradient_method, "rtol": spec.rtol,
            "atol": spec.atol, "max_steps": spec.max_steps, "extra": {},
        },
        "repeats": settings.repeats,
        "warmups": settings.warmups,
        "steady_budget_s": settings.steady_budget_s,
        # the worker starts no steady call that would end past it (it keeps its samples)
        "budget_s": settings.budget_s,
        "reference": ref,
    }  # fmt: skip


def _ensemble_row(spec: EnsembleSpec, problem: CompiledProblem, size: int | None, status: str,
                  reason: str) -> dict[str, Any]:  # fmt: skip
    return summarize({
        "kind": "ensemble", "problem": problem.name, "backend": spec.backend,
        "solver": spec.solver, "gradient_method": spec.gradient_method,
        "semantics": spec.semantics, "size": size, "device": spec.device,
        "device_requested": spec.device_requested, "status": status, "reason": reason,
    })  # fmt: skip


def ensemble_without_reference(
    problem: CompiledProblem, ladders: Sequence[EnsembleSpec], reason: str,
    writer: ResultsWriter, progress: Progress = _stderr,
) -> list[dict[str, Any]]:  # fmt: skip
    """An ensemble problem whose reference sample could not be built (``reason``): one
    ``error`` row per ladder saying so, on disk, so that the run goes on. Its backends are
    not run: an ensemble row is scored on the reference sample's members."""
    done = []
    for i, spec in enumerate(ladders, 1):
        note = (f"no reference: {reason}; the ensemble was not run (its rows are scored "
                "against the reference sample)")  # fmt: skip
        rec = _ensemble_row(spec, problem, None, Status.ERROR.value, note)
        rec["reference_source"] = "none"
        progress(f"[ladder {i}/{len(ladders)}] {spec.backend}: not run (no reference)")
        writer.add(rec)
        done.append(rec)
    return done


def run_ensemble(
    problem: CompiledProblem,
    ensemble: dict[str, Any],
    observations: str | None,
    ref: dict[str, Any],
    ladders: Sequence[EnsembleSpec],
    writer: ResultsWriter,
    settings: Settings,
    executor: Executor | None = None,
    progress: Progress = _stderr,
) -> list[dict[str, Any]]:
    """Each ladder rung by rung, one fresh worker per rung, each row on disk as it ends.

    After a rung fails (budget, memory, a failing member, ...) the larger rungs of that
    ladder are not run: they get a ``skipped`` row saying why. Every row carries
    ``largest_ok_size``, the largest rung of its ladder that completed so far.
    """
    executor = executor or LocalExecutor(threads=settings.threads)
    done: list[dict[str, Any]] = []
    availability: dict[str, Any] = {}
    with _saved_on_interrupt(writer, done):
        for i, spec in enumerate(ladders, 1):
            if spec.backend not in availability:
                availability[spec.backend] = backends.get(spec.backend).availability()
            av = availability[spec.backend]
            if not av.ok or not spec.semantics:
                if not av.ok:
                    reason = f"{av.reason}. Fix: {av.fix}" if av.fix else av.reason
                else:
                    reason = (f"{spec.backend} offers no ensemble with the semantics "
                              f"{', '.join(ensemble['semantics'])}")  # fmt: skip
                if not any(r["backend"] == spec.backend for r in done):
                    rec = _ensemble_row(spec, problem, None, Status.UNAVAILABLE.value, reason)
                    progress(f"[ladder {i}/{len(ladders)}] {spec.backend}: unavailable ({reason})")
                    writer.add(rec)
                    done.append(rec)
                continue
            ladder = Ladder()
            for size in spec.sizes:
                skip = ladder.skipped()
                if skip is not None:
                    rec = _ensemble_row(spec, problem, size, Status.SKIPPED.value, skip)
                else:
                    progress(f"[ladder {i}/{len(ladders)}] {problem.name}: {spec.label} n={size}")
                    job = ensemble_job(spec, size, problem, ensemble, observations, ref, settings)

                    def on_event(e: dict[str, Any]) -> None:
                        if "phase" in e:
                            progress(f"      {e['phase']:<11} {e['s']:8.3f} s")

                    outcome = executor.run(job, settings.budget_s, on_event)
                    rec = with_facts(kind_of(job).record(job, [ending(outcome, settings.budget_s)]),
                                     outcome.facts)
                    progress(f"      -> {rec['status']}" + (f": {rec['reason']}" if rec["reason"] else ""))
                ladder.done(size, rec)
                writer.add(rec)
                done.append(rec)
    return done


# --- array problems: a ladder of sizes per case and Jacobian kind -------------------------

#: a dense Jacobian may take at most this share of the memory available when a ladder starts
DENSE_MEMORY_SHARE = 0.8


@dataclass(frozen=True)
class SizedSpec:
    """One ladder of an array problem: a case (``case.extra["jacobian"]`` its Jacobian
    kind: ``dense``, ``sparse`` or ``none`` for an explicit solver) at each size."""

    case: CaseSpec
    jacobian: str
    sizes: tuple[int, ...]

    @property
    def label(self) -> str:
        c = self.case
        return f"{c.backend} {c.solver} {c.gradient_method} jacobian={self.jacobian}"


def plan_sized(
    problem: CompiledProblem,
    backend_names: Sequence[str],
    sizes: Sequence[int],
    solvers: Sequence[str] = (),
    gradients: Sequence[str] = (),
    jacobians: Sequence[str] = (),
    max_steps: int | None = None,
    devices: Sequence[str] = ("cpu",),
) -> list[SizedSpec]:
    """One ladder per case of :func:`plan` (at the problem's tolerances) and Jacobian kind its
    solver offers: those of ``jacobians`` it offers, else every one. A backend given no
    solver it offers runs its array default (SciPy: BDF, which takes a sparse Jacobian)."""
    out = []
    for case in plan(problem, backend_names, solvers, gradients, None, max_steps, devices):
        b = backends.get(case.backend)
        if not any(s in b.solvers() for s in solvers):
            case = replace(case, solver=b.array_solver(problem.stiff))
        kinds = b.jacobian_kinds(case.solver)
        for kind in [k for k in jacobians if k in kinds] or list(kinds):
            out.append(SizedSpec(replace(case, extra={**case.extra, "jacobian": kind}), kind,
                                 tuple(sizes)))  # fmt: skip
    return out


def memory_refusal(jacobian: str, n_state: int, available: int | None) -> str | None:
    """Why a size is refused up front (its dense Jacobian would not fit in memory), or None."""
    from sciml_bench.problem.arrays import dense_jacobian_bytes

    if jacobian != "dense" or not available:
        return None
    need = dense_jacobian_bytes(n_state)
    if need <= DENSE_MEMORY_SHARE * available:
        return None
    return (
        f"not run: a dense Jacobian of {n_state} states needs about {_size_text(need)} "
        "(3 n x n float64: the Jacobian, the iteration matrix and its LU), over "
        f"{DENSE_MEMORY_SHARE:.0%} of the {_size_text(available)} available; a sparse "
        "Jacobian runs this size"
    )


def _size_text(n_bytes: float) -> str:
    """``21.6 GiB``, ``37.5 KiB``: three significant digits in the largest fitting unit."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.3g} {unit}"
    return f"{n_bytes:.0f} B"


class Rungs:
    """Each size's problem, reference and compiled bundle, made once for every ladder (the
    reference is also cached on disk, keyed by the content at that size)."""

    def __init__(self, problem: Any, refresh: bool = False, progress: Progress = _stderr):
        self.problem = problem
        self.refresh = refresh
        self.progress = progress
        self.made: dict[int, Any] = {}
        self.sized: dict[int, Any] = {}

    def at(self, size: int) -> Any:
        """The problem file at ``size`` (parsed once; raises its format error)."""
        from sciml_bench.problem import spec

        if size not in self.sized:
            self.sized[size] = spec.at_size(self.problem, size)
        return self.sized[size]

    def get(self, size: int) -> tuple[CompiledProblem, Reference, float]:
        """``(compiled, reference, codegen seconds)`` at ``size``; a reference or problem
        that cannot be made raises its error (for every ladder that asks)."""
        from sciml_bench.problem import reference, spec

        if size not in self.made:
            try:
                p = self.at(size)
                self.progress(f"reference for {p.name} at size {size} ({p.n_state} states) ...")
                # a reference that cannot be built leaves rows saying so, as for any problem
                ref = reference.get_or_missing(p, refresh=self.refresh)
                start = time.perf_counter()
                compiled = reference.compile_problem(p, ref)
                self.made[size] = (compiled, ref, time.perf_counter() - start)
                built = "cached" if ref.cached else f"built in {ref.build_s:.1f} s"
                if ref.missing:
                    built = f"failed ({ref.missing})"
                self.progress(f"reference: {built}, rtol {ref.rtol:g}")
            except (reference.ReferenceError, spec.ProblemError) as e:
                self.made[size] = e
        made = self.made[size]
        if isinstance(made, Exception):
            raise made
        return made  # type: ignore[no-any-return]


def _sized_row(problem: str, ladder: SizedSpec, size: int | None, status: str, reason: str,
               **extra: Any) -> dict[str, Any]:  # fmt: skip
    c = ladder.case
    return summarize({
        "kind": "ode", "problem": problem, "backend": c.backend, "solver": c.solver,
        "gradient_method": c.gradient_method, "jacobian": ladder.jacobian, "size": size,
        "device": c.device, "device_requested": c.device_requested, "rtol": c.rtol,
        "atol": c.atol, "status": status, "reason": reason, **extra,
    })  # fmt: skip


def _not_runnable(name: str, seen: dict[str, Any]) -> str | None:
    """Why a backend runs no array problem here: not available, or no array code yet."""
    if name not in seen:
        b = backends.get(name)
        av = b.availability()
        if not av.ok:
            seen[name] = f"{av.reason}. Fix: {av.fix}" if av.fix else av.reason
        elif not b.array_problems:
            seen[name] = b.array_missing or (
                f"{name} has no array code yet: array problems ([sizes], vector states) do "
                "not run on this backend")  # fmt: skip
        else:
            seen[name] = None
    return seen[name]  # type: ignore[no-any-return]


def run_sized(
    problem: Any,
    ladders: Sequence[SizedSpec],
    writer: ResultsWriter,
    settings: Settings,
    executor: Executor | None = None,
    progress: Progress = _stderr,
    refresh: bool = False,
    available: int | None = None,
) -> list[dict[str, Any]]:
    """An array problem's ladders, size by size, one fresh worker per size, each row on disk
    as it ends (:class:`Ladder`: after a size fails, larger ones are ``skipped``). A size whose
    dense Jacobian would not fit in ``available`` bytes (default: what the machine has now)
    is refused up front, a ``skipped`` row with the estimate. The first solve and gradient
    are the warm-up: the steady samples follow them in the same process."""
    import psutil

    executor = executor or LocalExecutor(threads=settings.threads)
    available = available if available is not None else psutil.virtual_memory().available
    rungs = Rungs(problem, refresh, progress)
    steady = replace(settings, warmups=0, cold=1)  # one process a rung: it takes every sample
    done: list[dict[str, Any]] = []
    seen: dict[str, Any] = {}
    with _saved_on_interrupt(writer, done):
        for i, ladder in enumerate(ladders, 1):
            why = _not_runnable(ladder.case.backend, seen)
            if why is not None:
                if not any(r["backend"] == ladder.case.backend for r in done):
                    progress(f"[ladder {i}/{len(ladders)}] {ladder.case.backend}: unavailable ({why})")
                    rec = _sized_row(problem.name, ladder, None, Status.UNAVAILABLE.value, why)
                    writer.add(rec)
                    done.append(rec)
                continue
            state = Ladder()
            for size in ladder.sizes:
                title = f"[ladder {i}/{len(ladders)}] {problem.name}: {ladder.label} size={size}"
                rec = _rung(title, ladder, size, state, rungs, steady, executor, progress,
                            available)  # fmt: skip
                state.done(size, rec)
                writer.add(rec)
                done.append(rec)
    return done


def _rung(
    title: str, ladder: SizedSpec, size: int, state: Ladder, rungs: Rungs, settings: Settings,
    executor: Executor, progress: Progress, available: int | None,
) -> dict[str, Any]:  # fmt: skip
    """One size of one ladder: skipped, refused, or run in a fresh worker and recorded with
    its size, states, the Jacobian's non-zeros and kind, and the reference's tolerance."""
    name = rungs.problem.name
    skip = state.skipped()
    if skip is not None:
        return _sized_row(name, ladder, size, Status.SKIPPED.value, skip)
    try:
        n_state = rungs.at(size).n_state
        # before the reference at this size is made: a skipped rung costs nothing
        least = forecast.least_seconds(state.completed, n_state)
        if least is not None and least.beyond(settings.budget_s):
            why = least.reason(settings.budget_s)
            progress(f"{title}: {why}")
            return _sized_row(name, ladder, size, Status.SKIPPED.value, why, n_state=n_state,
                              forecast_least_s=least.seconds)  # fmt: skip
        compiled, ref, codegen_s = rungs.get(size)
    except Exception as e:  # a reference or problem that cannot be made at this size
        return _sized_row(name, ladder, size, Status.ERROR.value, f"size {size}: {e}")
    facts = {"n_state": compiled.n_state, "jac_nnz": compiled.jac_nnz}
    refused = memory_refusal(ladder.jacobian, compiled.n_state, available)
    if refused:
        progress(f"{title}: {refused}")
        return _sized_row(name, ladder, size, Status.SKIPPED.value, refused, **facts)
    progress(f"{title} ({compiled.n_state} states, {compiled.jac_nnz} Jacobian non-zeros)")
    job = case_job(ladder.case, compiled, ref, settings)

    def on_event(e: dict[str, Any]) -> None:
        if "phase" in e:
            progress(f"      {e['phase']:<11} {e['s']:8.3f} s")

    outcome = executor.run(job, settings.budget_s, on_event)
    rec = with_facts(kind_of(job).record(job, [ending(outcome, settings.budget_s)]), outcome.facts)
    progress(f"      -> {rec['status']}" + (f": {rec['reason']}" if rec["reason"] else ""))
    rec.update(size=size, codegen_s=codegen_s, reference_rtol=ref.rtol, **facts)
    if ref.tolerance_note:
        rec["reference_note"] = ref.tolerance_note
    return rec


def run_training(
    problem: CompiledProblem,
    training: Any,
    reference_curve: dict[str, Any],
    cases: Sequence[CaseSpec],
    writer: ResultsWriter,
    settings: Settings,
    executor: Executor | None = None,
    progress: Progress = _stderr,
) -> list[dict[str, Any]]:
    """Train ``problem`` (its ``[training]`` section, ``training``) once per case, each in
    one fresh worker under the case budget, every row on disk as it ends; the reference
    curve travels in each job. As :func:`run` otherwise (unavailable rows, Ctrl-C)."""
    from sciml_bench.run import train

    def task_of(spec: CaseSpec) -> CaseTask:
        job = train.training_job(spec, problem, training, reference_curve)
        return CaseTask(job, (None,), settings.budget_s)

    return run(problem, None, cases, writer, settings, executor, progress,
               task_of=task_of, lines=train.progress_lines, kind="train")  # fmt: skip
