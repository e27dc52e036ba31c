"""Runs one case in one fresh process and reports raw measurements.

Invoked by the runner as ``python -m sciml_bench.worker JOB.json EVENTS.jsonl``.
Events are appended to the JSON-lines file as they happen (and flushed), so
a worker killed at its budget, or crashing, still leaves its completed phases
and its progress in t behind.

Phases of time-to-first-gradient, measured from the parent's spawn instant
(``job["t_spawn"]``, CLOCK_MONOTONIC):

- ``import``:      interpreter start-up and importing the library;
- ``build``:       compiling the problem for the library;
- ``first_solve``: the first solve, including any JIT compilation;
- ``first_grad``:  the first loss+gradient, including any JIT compilation.

Only the standard library is imported at module level, so the import phase
is the library's own cost, and the Julia worker can import juliacall before
anything else (it must never follow torch: PythonCall #215).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

PHASES = ("import", "build", "first_solve", "first_grad")


class Events:
    """Append-only JSON-lines event log, flushed per event."""

    def __init__(self, path: str):
        self.f = open(path, "a", buffering=1)  # noqa: SIM115 - lives for the process
        self.lock = threading.Lock()

    def emit(self, **event: Any) -> None:
        line = json.dumps(event, default=_jsonable)
        with self.lock:
            self.f.write(line + "\n")
            self.f.flush()


def _jsonable(x: Any) -> Any:
    tolist = getattr(x, "tolist", None)
    if tolist is not None:
        return tolist()
    return str(x)


def _watch_progress(case: Any, events: Events, stop: threading.Event) -> None:
    last = None
    while not stop.wait(0.5):
        try:
            t = case.progress_t()
        except Exception:  # progress is best effort; never disturb the case
            return
        if t is not None and t != last:
            events.emit(progress_t=t)
            last = t


def _failure(events: Events, exc: BaseException, where: str) -> None:
    from sciml_bench.status import SolverFailure, Status

    if isinstance(exc, SolverFailure):
        reached = f"; integration reached t={exc.t_reached:.4g}" if exc.t_reached is not None else ""
        reason = f"{exc.reason} (during {where}{reached})"
        events.emit(status=exc.status.value, reason=reason, t_reached=exc.t_reached, during=where)
    else:
        # the first lines say what happened; libraries append notes after them
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        text = f"{type(exc).__name__}: {' '.join(lines[:2])}" if lines else type(exc).__name__
        events.emit(status=Status.ERROR.value, reason=f"{where}: {text[:500]}", during=where)


def run_ode(job: dict[str, Any], events: Events) -> None:
    t_spawn = float(job["t_spawn"])
    name = job["backend"]
    detail: dict[str, float] = {}
    if name == "julia":
        # juliacall before numpy, torch or anything else (torch first crashes it);
        # julia_env is stdlib-only and configures juliacall so it never downloads Julia.
        from sciml_bench import julia_env

        try:
            julia_env.import_juliacall()
        except julia_env.JuliaNotFound as e:
            events.emit(status="unavailable", reason=str(e), during="import")
            return
        detail["juliacall_init"] = julia_env.JULIACALL_IMPORT_S or 0.0

    from sciml_bench import backends
    from sciml_bench.measure import clock, peak_rss_mb

    backend = backends.get(name)
    detail.update(backend.load())
    now = clock()
    events.emit(phase="import", s=now - t_spawn, detail=detail)
    if getattr(backend, "load_info", None):
        events.emit(backend_info=backend.load_info)

    import numpy as np

    from sciml_bench.backends.base import CaseOptions
    from sciml_bench.compiled import CompiledProblem
    from sciml_bench.status import Status

    start = clock()
    problem = CompiledProblem.from_json(job["problem"])
    opts = job["options"]
    options = CaseOptions(
        solver=opts["solver"],
        gradient_method=opts["gradient_method"],
        rtol=float(opts["rtol"]),
        atol=float(opts["atol"]),
        max_steps=int(opts["max_steps"]),
        extra=opts.get("extra", {}),
    )
    try:
        case = backend.build(problem, options)
    except Exception as e:
        _failure(events, e, "build")
        return
    events.emit(phase="build", s=clock() - start)
    if getattr(case, "info", None):
        events.emit(case_info=case.info)
    theta = np.asarray(problem.theta0, dtype=np.float64)

    stop = threading.Event()
    watcher = threading.Thread(target=_watch_progress, args=(case, events, stop), daemon=True)
    watcher.start()
    start = clock()
    try:
        sol = case.solve(theta)
    except Exception as e:
        _failure(events, e, "first solve")
        return
    finally:
        stop.set()
        watcher.join(timeout=2.0)  # never leave it inside the library while we move on
    events.emit(phase="first_solve", s=clock() - start)
    full = job.get("mode", "full") == "full"
    if full:
        events.emit(y=sol.y, stats=sol.stats)

    if backend.differentiable:
        start = clock()
        try:
            loss, grad = case.loss_and_grad(theta)
        except Exception as e:
            _failure(events, e, "first gradient")
            return
        events.emit(phase="first_grad", s=clock() - start)
        if not (np.isfinite(loss) and np.all(np.isfinite(grad))):
            # A NaN gradient from a "successful" solve is a failure, never a score.
            events.emit(
                status=Status.NONFINITE.value,
                reason=f"{name}: non-finite loss or gradient (loss={loss:.6g}, "
                f"{int(np.sum(~np.isfinite(grad)))} non-finite gradient component(s))",
                during="first gradient",
            )
            return
        if full:
            events.emit(loss=loss, gradient=grad)
    events.emit(ttfg_s=clock() - t_spawn)

    if full:
        _steady(job, case, theta, backend.differentiable, events)
    events.emit(peak_rss_mb=peak_rss_mb(), status="ok", reason="")


def _steady(job: dict[str, Any], case: Any, theta: Any, grad: bool, events: Events) -> None:
    """Warm-ups, then timed repeats, each kind bounded by a time budget."""
    from sciml_bench.measure import perf

    repeats = int(job.get("repeats", 10))
    warmups = int(job.get("warmups", 1))
    budget = float(job.get("steady_budget_s", 20.0))
    kinds = [("solve", lambda: case.solve(theta))]
    if grad:
        kinds.append(("grad", lambda: case.loss_and_grad(theta)))
    for kind, fn in kinds:
        for _ in range(warmups):
            fn()
        samples: list[float] = []
        t_begin = perf()
        while len(samples) < repeats:
            start = perf()
            fn()
            samples.append(perf() - start)
            if perf() - t_begin > budget and len(samples) >= 3:
                break
        events.emit(samples=kind, values=samples)


def _inject_fault(fault: str, events: Events) -> None:
    """Test hook: only fault-injection tests put ``_fault`` in a job.

    ``sigkill`` and ``sigsegv`` kill this process by that signal; ``hang``
    sleeps forever; ``spawn_grandchild_and_hang`` first starts a child that
    sleeps forever (as a compiler spawned by torch.compile would linger), and
    reports its pid, so a test can check that the budget kill reaches it.
    """
    import signal
    import subprocess
    import time

    if fault in ("sigkill", "sigsegv"):
        os.kill(os.getpid(), signal.SIGKILL if fault == "sigkill" else signal.SIGSEGV)
    if fault == "spawn_grandchild_and_hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        events.emit(grandchild_pid=child.pid)
    if fault in ("hang", "spawn_grandchild_and_hang"):
        while True:
            time.sleep(60)
    raise ValueError(f"unknown test fault {fault!r}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m sciml_bench.worker JOB.json EVENTS.jsonl", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        job = json.load(f)
    events = Events(argv[1])
    events.emit(pid=os.getpid(), started=True)
    if "_fault" in job:
        _inject_fault(str(job["_fault"]), events)
    try:
        if job.get("kind", "ode") == "cnn":
            from sciml_bench.cnn import run_variant

            events.emit(result=run_variant(job))
        else:
            run_ode(job, events)
    except Exception as e:  # an unexpected harness error is still a row
        _failure(events, e, "worker")
        return 1
    return 0


def _exit(code: int) -> None:
    """Leave without interpreter teardown: every event is already on disk, and
    the C++ runtimes of torch and XLA can abort while their threads are torn
    down ("terminate called without an active exception"), which would turn a
    finished case into a crash."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(main())
