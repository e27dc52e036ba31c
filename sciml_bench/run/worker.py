"""The worker: runs one job in one fresh process and reports raw measurements.

Invoked by the executor as ``python -m sciml_bench.run.worker JOB.json EVENTS.jsonl``.
The job's kind (:mod:`sciml_bench.run.jobs`) does the work; events go to the
JSON-lines file as they happen (:mod:`sciml_bench.run.events`).

Only the standard library is imported at module level, so a job's import
phase is its library's own cost, and the Julia worker can import juliacall
before anything else (it must never follow torch: PythonCall #215).
"""

from __future__ import annotations

import json
import os
import sys

from sciml_bench.run.events import Events, report_failure
from sciml_bench.run.jobs import kind_of


def _inject_fault(fault: str, events: Events) -> None:
    """Test hook: only fault-injection tests put ``_fault`` in a job.

    ``sigkill`` and ``sigsegv`` kill this process by that signal; ``kill_parent``
    SIGKILLs the process that started it (a Dask worker dying mid-case) and hangs; ``hang``
    sleeps forever; ``spawn_grandchild_and_hang`` first starts a child that
    sleeps forever (as a compiler spawned by torch.compile would linger), and
    reports its pid, so a test can check that the budget kill reaches it.
    """
    import signal
    import subprocess
    import time

    if fault in ("sigkill", "sigsegv"):
        os.kill(os.getpid(), signal.SIGKILL if fault == "sigkill" else signal.SIGSEGV)
    if fault == "kill_parent":
        events.emit(case_pid=os.getpid())
        os.kill(os.getppid(), signal.SIGKILL)
    if fault == "spawn_grandchild_and_hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        events.emit(grandchild_pid=child.pid)
    if fault in ("hang", "spawn_grandchild_and_hang", "kill_parent"):
        while True:
            time.sleep(60)
    raise ValueError(f"unknown test fault {fault!r}")


def _die_with_parent() -> None:
    """On a Dask worker the executor names its own pid in ``SCIML_BENCH_DIE_WITH_PARENT``:
    ask Linux to SIGKILL this process when that one dies (``PR_SET_PDEATHSIG``), so a
    lost Dask worker leaves no orphaned case timing itself against the next one."""
    parent = os.environ.get("SCIML_BENCH_DIE_WITH_PARENT")
    if not parent or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != int(parent):  # it died before prctl took effect
        os._exit(1)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m sciml_bench.run.worker JOB.json EVENTS.jsonl", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        job = json.load(f)
    _die_with_parent()
    events = Events(argv[1])
    events.emit(pid=os.getpid(), started=True)
    if "_fault" in job:
        _inject_fault(str(job["_fault"]), events)
    try:
        kind_of(job).work(job, events)
    except Exception as e:  # an unexpected harness error is still a row
        report_failure(events, e, "worker")
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
