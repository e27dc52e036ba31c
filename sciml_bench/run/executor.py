"""How a job becomes a measured process: the executor interface.

The runner hands a job (a JSON-able dict) to an :class:`Executor` and gets
back the worker's events plus how the process ended. ``LocalExecutor`` runs
each job in a fresh subprocess, started as a user starts Python, in its own
session so that its whole process group (compilers spawned by
``torch.compile`` included) is killed at the budget. A distributed engine can
implement the same ``run`` without touching the worker.

A run of many cases goes through :meth:`Executor.imap`: it maps a task function over
the cases and yields each one as it finishes. ``LocalExecutor`` runs them one by
one, in order; :mod:`sciml_bench.run.dask` runs them on Dask workers at once,
each task still driving a ``LocalExecutor`` there.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sciml_bench.measure.clock import clock
from sciml_bench.measure.device import device_env
from sciml_bench.run.signals import signal_of


@dataclass
class Outcome:
    events: list[dict[str, Any]]
    returncode: int | None
    timed_out: bool = False
    interrupted: bool = False
    stderr_tail: str = ""
    wall_s: float = 0.0
    signal_name: str | None = field(default=None)


#: the per-item event sink a task reports to: ``sink(process_index, event)``
Sink = Callable[[int, dict[str, Any]], None]
#: a task of :meth:`Executor.imap`: ``fn(item, local_executor, sink) -> value``
TaskFn = Callable[[Any, "LocalExecutor", Sink], Any]
#: called once per item as its progress starts to be reported, with where it runs
#: ("" locally); returns the sink for its events
Announce = Callable[[int, str], Sink]


@dataclass
class Finished:
    """One item of :meth:`Executor.imap` that has finished, and where it ran."""

    index: int
    #: what the task returned; None when ``lost`` says why there is nothing
    value: Any
    #: the Dask worker's address ("" for a local run)
    worker: str = ""
    #: host name and hardware (see ``measure.environment.fingerprint``)
    machine: dict[str, Any] = field(default_factory=dict)
    lost: str = ""
    #: reasons of earlier attempts that were lost and run again (``--retries``)
    retried: list[str] = field(default_factory=list)


class Executor(Protocol):
    def run(
        self, job: dict[str, Any], budget_s: float, on_event: Callable[[dict[str, Any]], None]
    ) -> Outcome: ...

    def imap(self, fn: TaskFn, items: Sequence[Any], announce: Announce) -> Iterator[Finished]:
        """``fn`` over ``items``, each yielded as it finishes (its events streamed to
        ``announce``'s sink locally; a remote run's come back in its value)."""
        ...


def _read_events(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], offset
    events = []
    consumed = 0
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break  # a line still being written
        consumed += len(line)
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # torn by a kill mid-write: that event is lost, not the file
    return events, offset + consumed


def _descendants(pid: int) -> list[Any]:
    """The live descendants of ``pid`` (psutil processes), best effort."""
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the worker, its process group and every descendant, then reap the worker.

    The group catches children that outlived a dead worker (reparented, same
    group); the descendant walk catches those that left the group with setsid.
    """
    found = _descendants(proc.pid) if proc.poll() is None else []
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for child in found:
        with contextlib.suppress(Exception):
            child.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


#: thread-count variables set by ``--threads`` (torch, BLAS, TensorFlow, Julia)
THREAD_VARS = (
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS", "JULIA_NUM_THREADS",
)


class LocalExecutor:
    """One fresh local subprocess per job."""

    def __init__(
        self, python: str | None = None, poll_s: float = 0.1, threads: int | None = None
    ):
        self.python = python or sys.executable
        self.poll_s = poll_s
        self.threads = threads
        #: polled with the budget: True stops the worker as Ctrl-C would (remote cancel)
        self.stop: Callable[[], bool] | None = None
        #: the worker dies with this process (set on Dask workers, whose death would
        #: otherwise leave an orphaned case running on the machine)
        self.die_with_parent = False

    def imap(self, fn: TaskFn, items: Sequence[Any], announce: Announce) -> Iterator[Finished]:
        """One item after the other, in order; the next starts once the caller has
        taken (and saved) the previous one."""
        from sciml_bench.measure.environment import fingerprint

        machine = fingerprint()
        for i, item in enumerate(items):
            yield Finished(i, fn(item, self, announce(i, "")), machine=machine)

    def env(self, scratch: str, job: dict[str, Any] | None = None) -> dict[str, str]:
        """The worker's environment: thread budget, cold caches, and the job's device
        pinned before any framework starts (:func:`~sciml_bench.measure.device.device_env`)."""
        env = dict(os.environ)
        if self.threads:
            # One thread budget for every framework: unequal defaults, or more threads
            # than free cores, would time the scheduler rather than the library.
            n = str(self.threads)
            for var in THREAD_VARS:
                env[var] = n
            if self.threads == 1:
                env["XLA_FLAGS"] = (
                    env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
                    " intra_op_parallelism_threads=1"
                ).strip()
        # Cold means cold: compilation caches point at a fresh, empty folder.
        env.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(scratch, "jax-cache"))
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(scratch, "inductor-cache"))
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        env["PYTHONUNBUFFERED"] = "1"
        # the job's device wins over a JAX_PLATFORMS the user's shell may have set
        env.update(device_env((job or {}).get("device")))
        if self.die_with_parent:
            env["SCIML_BENCH_DIE_WITH_PARENT"] = str(os.getpid())
        return env

    def run(
        self, job: dict[str, Any], budget_s: float, on_event: Callable[[dict[str, Any]], None]
    ) -> Outcome:
        with tempfile.TemporaryDirectory(prefix="sciml-bench-") as scratch:
            job_path = Path(scratch) / "job.json"
            events_path = Path(scratch) / "events.jsonl"
            stderr_path = Path(scratch) / "stderr.txt"
            events: list[dict[str, Any]] = []
            offset = 0
            job = dict(job)
            with open(stderr_path, "wb") as err:
                job["t_spawn"] = clock()
                job_path.write_text(json.dumps(job))
                start = clock()
                timed_out = False
                interrupted: KeyboardInterrupt | None = None
                proc: subprocess.Popen[bytes] | None = None
                try:
                    proc = subprocess.Popen(
                        [self.python, "-m", "sciml_bench.run.worker", str(job_path), str(events_path)],
                        stdin=subprocess.DEVNULL,
                        stdout=err,
                        stderr=err,
                        env=self.env(scratch, job),
                        start_new_session=True,
                    )
                    while True:
                        try:
                            proc.wait(timeout=self.poll_s)
                            break
                        except subprocess.TimeoutExpired:
                            pass
                        new, offset = _read_events(events_path, offset)
                        for e in new:
                            on_event(e)
                        events += new
                        if clock() - start > budget_s:
                            timed_out = True
                            kill_group(proc)
                            break
                        if self.stop is not None and self.stop():
                            interrupted = KeyboardInterrupt()  # a remote cancel, as Ctrl-C
                            kill_group(proc)
                            break
                except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM/SIGHUP (run.signals)
                    interrupted = e
                    if proc is None:
                        raise
                    kill_group(proc)
                finally:
                    if proc is not None:
                        # whether it ran out, crashed or finished: nothing it started survives
                        kill_group(proc)
                wall = clock() - start
            new, offset = _read_events(events_path, offset)
            for e in new:
                on_event(e)
            events += new
            tail = stderr_path.read_text(errors="replace")[-4000:]
        assert proc is not None
        rc = proc.returncode
        sig = None
        if rc is not None and rc < 0 and not timed_out and not interrupted:
            try:
                sig = signal.Signals(-rc).name
            except ValueError:
                sig = f"signal {-rc}"
        outcome = Outcome(events, rc, timed_out, interrupted is not None, tail, wall, sig)
        if interrupted is not None:
            raise Interrupted(outcome, signal_of(interrupted))
        return outcome


class EngineLost(RuntimeError):
    """The engine behind an executor (a Dask scheduler) went away: no case can finish."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM/SIGHUP) while a worker ran; carries what that worker had
    reported, and the signal."""

    def __init__(self, outcome: Outcome, signum: int = signal.SIGINT):
        super().__init__()
        self.outcome = outcome
        self.signum = signum
