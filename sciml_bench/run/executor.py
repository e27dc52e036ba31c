"""How a job becomes a measured process: the executor interface.

The runner hands a job (a JSON-able dict) to an :class:`Executor` and gets
back the worker's events plus how the process ended. ``LocalExecutor`` runs
each job in a fresh subprocess, started as a user starts Python, in its own
session so that its whole process group (compilers spawned by
``torch.compile`` included) is killed at the budget. A distributed engine can
implement the same ``run`` without touching the worker.

A run of many cases goes through :meth:`Executor.imap`: it maps a task function over
the cases and yields each one as it finishes. ``LocalExecutor`` runs them one by
one, in order; :mod:`sciml_bench.run.dask` runs them on Dask workers,
each task still driving a ``LocalExecutor`` there.

While a worker runs, its executor watches what it shares the host with
(:class:`HostWatch`): how many sciml-bench workers run at once on the host, and how many
threads the worker has, XLA's among them. Those facts travel with the case
(:attr:`Finished.facts`) into its record.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sciml_bench.measure.clock import busy_cpu_s, clock
from sciml_bench.measure.device import device_env
from sciml_bench.measure.environment import (
    FRESH_CACHES_VAR,
    LOAD_START_VAR,
    SLOWDOWN_VAR,
    THREADS_SOURCE_VAR,
    THREADS_VAR,
)
from sciml_bench.measure.memory import oom_kills, process_rss_mb
from sciml_bench.results.store import signals_deferred
from sciml_bench.run.signals import raise_if_dropped, signal_of


@dataclass
class Outcome:
    events: list[dict[str, Any]]
    returncode: int | None
    timed_out: bool = False
    interrupted: bool = False
    stderr_tail: str = ""
    wall_s: float = 0.0
    signal_name: str | None = field(default=None)
    #: what :class:`HostWatch` saw while the worker ran (record keys, see ``facts``)
    facts: dict[str, Any] = field(default_factory=dict)


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
    #: record keys about how the case ran (:meth:`LocalExecutor.take_facts`)
    facts: dict[str, Any] = field(default_factory=dict)


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


#: thread-count variables set by ``--threads``: torch and BLAS (OpenMP), TensorFlow,
#: Julia, and XLA:CPU, whose intra-op and client thread pools jaxlib sizes from
#: ``PJRT_NPROC`` (``xla/pjrt/utils.cc``, ``DefaultThreadPoolSize``; otherwise the CPUs of
#: the process's affinity). ``XLA_FLAGS`` has no thread-count flag.
THREAD_VARS = (
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS", "JULIA_NUM_THREADS", "PJRT_NPROC",
)
#: where running workers leave markers (:class:`HostWatch`); tests move it
ACTIVE_DIR_VAR = "SCIML_BENCH_ACTIVE_DIR"
#: the run's id its workers' markers carry (:func:`default_run_id`): a Dask task sets it
RUN_ID_VAR = "SCIML_BENCH_RUN_ID"
#: the name XLA:CPU gives its intra-op pool's threads (``tf_XLAEigen`` in /proc)
XLA_POOL_THREAD = "XLAEigen"


def thread_env(n: int, xla_flags: str = "") -> dict[str, str]:
    """The variables that bound every framework of a worker to ``n`` threads.

    With one thread, XLA's Eigen kernels also stop splitting work
    (``--xla_cpu_multi_thread_eigen=false``, a real XLA flag).
    """
    env = dict.fromkeys(THREAD_VARS, str(n))
    if n == 1 and "xla_cpu_multi_thread_eigen" not in xla_flags:
        env["XLA_FLAGS"] = (xla_flags + " --xla_cpu_multi_thread_eigen=false").strip()
    return env


def default_run_id() -> str:
    """This run's id in the markers of its workers: ``$SCIML_BENCH_RUN_ID`` where set
    (inherited by a Dask LocalCluster's workers), else this process's host and pid (a
    local run's executors all live in the one ``sciml-bench run`` process)."""
    return os.environ.get(RUN_ID_VAR) or f"{socket.gethostname()}-{os.getpid()}"


def active_dir() -> Path:
    """The folder of running workers' markers, shared by every sciml-bench on this host."""
    return Path(os.environ.get(ACTIVE_DIR_VAR) or Path(tempfile.gettempdir()) / "sciml-bench-active")


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live sciml-bench worker (a reused pid is not, where /proc says)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"sciml_bench.run." in f.read()
    except OSError:
        return True  # no /proc here, or not readable: trust the signal check


def _thread_names(pid: int) -> list[str]:
    """The names of a process's threads (Linux ``/proc``; empty elsewhere or when gone)."""
    names = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            continue
    return names


class HostWatch:
    """What one worker process shares its host with, sampled while it runs.

    - ``concurrent``: the most sciml-bench workers seen running at once on this host,
      itself included (every executor leaves a marker ``HOST-PID`` per running worker in
      :func:`active_dir`; a dead worker's marker is ignored and removed);
    - ``concurrent_own``: the most of them that were this run's (the marker holds its
      run's id, :func:`default_run_id`): the rest belong to other runs, whose load the
      user did not cause and cannot stop with ``--workers``;
    - ``threads``: the most threads the worker process had at once;
    - ``xla_threads``: the most threads of XLA:CPU's intra-op pool in it: the threads
      JAX really used (0 in a worker without JAX);
    - ``rss_mb``: the largest resident set size seen from outside, which survives a
      worker the kernel kills for memory (its own peak is never reported then).
    """

    #: polls between two thread counts (a pool, once made, lives as long as the process)
    THREAD_EVERY = 5

    def __init__(self, pid: int, run_id: str | None = None):
        self.pid, self.concurrent, self.threads, self.xla_threads = pid, 1, 0, 0
        self.concurrent_own = 1
        self.run_id = run_id or default_run_id()
        self.rss_mb = 0.0
        self._polls = 0
        self._host = socket.gethostname()
        self._marker: Path | None = None
        folder = active_dir()
        for _ in range(3):  # another watch may remove the folder as it empties: retry
            try:
                if not folder.is_dir():
                    folder.mkdir(parents=True, exist_ok=True)
                    with contextlib.suppress(OSError):
                        folder.chmod(0o1777)  # shared by every user's runs, as /tmp is
                self._marker = folder / f"{self._host}-{pid}"
                self._marker.write_text(self.run_id)
                break
            except OSError:
                self._marker = None  # counted as alone: the marker folder is not writable
        self.sample()

    def _running(self) -> int:
        """How many sciml-bench workers run on this host now, itself included."""
        return self._counts()[0]

    def _counts(self) -> tuple[int, int]:
        """(workers running on this host now, those of them of this run), each at least 1."""
        n = own = 0
        try:
            entries = os.listdir(self._marker.parent) if self._marker else []
        except OSError:
            return 1, 1
        for name in entries:
            host, _, pid = name.rpartition("-")
            if host != self._host or not pid.isdigit():
                continue
            marker = self._marker.parent / name  # type: ignore[union-attr]
            if _alive(int(pid)):
                n += 1
                with contextlib.suppress(OSError):  # an older version's marker is empty
                    own += marker.read_text() == self.run_id
            else:
                with contextlib.suppress(OSError):
                    marker.unlink()
        return max(n, 1), max(own, 1)

    def sample(self) -> None:
        n, own = self._counts()
        self.concurrent = max(self.concurrent, n)
        self.concurrent_own = max(self.concurrent_own, own)
        self.rss_mb = max(self.rss_mb, process_rss_mb(self.pid) or 0.0)
        if self._polls % self.THREAD_EVERY == 0:
            names = _thread_names(self.pid)
            self.threads = max(self.threads, len(names))
            self.xla_threads = max(self.xla_threads, sum(XLA_POOL_THREAD in n for n in names))
        self._polls += 1

    def close(self) -> None:
        """Remove the marker, and the folder once no worker is left in it (nothing stays
        behind in a run's TMPDIR)."""
        if self._marker is not None:
            with contextlib.suppress(OSError):
                self._marker.unlink()
            with contextlib.suppress(OSError):
                self._marker.parent.rmdir()  # fails while another worker's marker is there

    def facts(self) -> dict[str, Any]:
        """The record keys: ``concurrent_cases``, ``concurrent_own``, ``worker_threads``
        and, in a worker that ran XLA, ``xla_threads``."""
        out: dict[str, Any] = {"concurrent_cases": self.concurrent,
                               "concurrent_own": min(self.concurrent_own, self.concurrent)}
        if self.threads:
            out["worker_threads"] = self.threads
        if self.xla_threads:
            out["xla_threads"] = self.xla_threads
        return out


def merge_facts(into: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any]:
    """``into`` updated with ``facts`` of another process of the same case: numbers keep
    their maximum (the worst of the case's processes), other keys the latest value."""
    for k, v in facts.items():
        old = into.get(k)
        num = (int, float)
        both = isinstance(old, num) and isinstance(v, num) and not isinstance(v, bool)
        into[k] = max(old, v) if both else v
    return into


class CpuMeter:
    """Who used the machine's CPUs while one worker ran, in cores' worth, from outside.

    ``worker_cpu = Δ CPU seconds of reaped children / Δ wall`` (``RUSAGE_CHILDREN``: the
    worker and what it waited for) and ``others_cpu = (Δ busy CPU seconds of the machine
    − Δ worker) / Δ wall`` (``psutil.cpu_times``). No lag, unlike the load average: what
    ran before the worker is not in it. Two executors in one process (a test running a
    local and a Dask run at once) count each other's workers as their own.
    """

    def __init__(self) -> None:
        self._start = _cpu_reading()

    def facts(self) -> dict[str, float]:
        end = _cpu_reading()
        if self._start is None or end is None or end[0] - self._start[0] < 0.05:
            return {}
        wall = end[0] - self._start[0]
        worker = end[2] - self._start[2]
        others = (end[1] - self._start[1]) - worker
        return {"worker_cpu": round(worker / wall, 3), "others_cpu": round(max(0.0, others / wall), 3)}


def _cpu_reading() -> tuple[float, float, float] | None:
    """(clock, the machine's busy CPU seconds, reaped children's CPU seconds), or None
    where the machine-wide counters cannot be read."""
    import resource

    try:
        busy = busy_cpu_s()
    except Exception:  # no psutil, or no machine-wide counters here
        return None
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return clock(), busy, ru.ru_utime + ru.ru_stime


#: the slowed worker's warning is printed once per process
_WARNED = False


def _worker_module() -> str:
    """The worker's module: the deliberately slowed one (``run.slowdown``) only when the
    test-only :data:`~sciml_bench.measure.environment.SLOWDOWN_VAR` is set."""
    global _WARNED
    if os.environ.get(SLOWDOWN_VAR):
        if not _WARNED:
            print(f"{SLOWDOWN_VAR}={os.environ[SLOWDOWN_VAR]}: every timed library call is "
                  "deliberately slowed (test-only); rows say test_slowdown", file=sys.stderr)
            _WARNED = True
        return "sciml_bench.run.slowdown"
    return "sciml_bench.run.worker"


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
        #: the run the markers of this executor's workers name (a Dask task sets the
        #: client's): workers of other runs on the host are told apart from this run's
        self.run_id: str | None = None
        #: what the watches of the current item's processes saw (:meth:`take_facts`)
        self.facts: dict[str, Any] = {}
        #: the free cores and the load average when this executor's first CNN worker
        #: started: one thread budget for every variant, decided before any of them ran
        self._cnn_start: tuple[tuple[int, str], float | None] | None = None

    def imap(self, fn: TaskFn, items: Sequence[Any], announce: Announce) -> Iterator[Finished]:
        """One item after the other, in order; the next starts once the caller has
        taken (and saved) the previous one."""
        from sciml_bench.measure.environment import fingerprint

        machine = fingerprint()
        for i, item in enumerate(items):
            self.facts = {}
            value = fn(item, self, announce(i, ""))
            yield Finished(i, value, machine=machine, facts=self.take_facts())

    def take_facts(self) -> dict[str, Any]:
        """The facts of the processes run since the last call, and start afresh."""
        out, self.facts = self.facts, {}
        return out

    def thread_budget(self, job: dict[str, Any] | None) -> tuple[int | None, str]:
        """The thread budget of ``job``'s frameworks and where it comes from: ``--threads``;
        else, for a CNN job, the free cores when the first CNN worker of this executor
        starts (one budget for every variant; each framework's own default would use
        every core, however busy the machine); else None (each library's default)."""
        if self.threads:
            return self.threads, "--threads"
        if (job or {}).get("kind") == "cnn":
            return self._cnn_at_start()[0]
        return None, "each library's default"

    def _cnn_at_start(self) -> tuple[tuple[int, str], float | None]:
        if self._cnn_start is None:
            from sciml_bench.measure.environment import free_cores, load_average

            self._cnn_start = free_cores(), load_average()
        return self._cnn_start

    def env(self, scratch: str, job: dict[str, Any] | None = None) -> dict[str, str]:
        """The worker's environment: thread budget, cold caches, and the job's device
        pinned before any framework starts (:func:`~sciml_bench.measure.device.device_env`)."""
        env = dict(os.environ)
        n, source = self.thread_budget(job)
        if n:
            # One thread budget for every framework: unequal defaults, or more threads
            # than free cores, would time the scheduler rather than the library.
            env.update(thread_env(n, env.get("XLA_FLAGS", "")))
            env[THREADS_VAR] = str(n)
        env[THREADS_SOURCE_VAR] = source
        if (job or {}).get("kind") == "cnn":
            load = self._cnn_at_start()[1]
            if load is not None:
                env[LOAD_START_VAR] = f"{load:.4f}"
        # Cold means cold: fresh, empty cache folders, even where the shell names its own
        # (a warm cache there would make the recorded "cold" untrue).
        for var, folder in (("JAX_COMPILATION_CACHE_DIR", "jax-cache"),
                            ("TORCHINDUCTOR_CACHE_DIR", "inductor-cache"),
                            ("TRITON_CACHE_DIR", "triton-cache")):  # fmt: skip
            env[var] = os.path.join(scratch, folder)
        env[FRESH_CACHES_VAR] = "1"
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
        with scratch_dir() as scratch:
            job_path = Path(scratch) / "job.json"
            stderr_path = Path(scratch) / "stderr.txt"
            reader = _EventReader(Path(scratch) / "events.jsonl", on_event)
            job = dict(job)
            # everything the spawn needs is ready before the clock of its first phase starts
            cmd = [self.python, "-m", _worker_module(), str(job_path), str(reader.path)]
            env = self.env(scratch, job)
            meter, ooms = CpuMeter(), oom_kills()
            with open(stderr_path, "wb") as err:
                job["t_spawn"] = clock()
                job_path.write_text(json.dumps(job))
                start = clock()
                timed_out = False
                interrupted: KeyboardInterrupt | None = None
                proc: subprocess.Popen[bytes] | None = None
                watch: HostWatch | None = None
                try:
                    proc = subprocess.Popen(
                        cmd,
                        stdin=subprocess.DEVNULL,
                        stdout=err,
                        stderr=err,
                        env=env,
                        start_new_session=True,
                    )
                    watch = HostWatch(proc.pid, self.run_id)
                    timed_out, interrupted = self._wait(proc, watch, reader, start, budget_s)
                except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM/SIGHUP (run.signals)
                    interrupted = e
                    if proc is None:
                        raise
                    kill_group(proc)
                finally:
                    if proc is not None:
                        # whether it ran out, crashed or finished: nothing it started survives
                        kill_group(proc)
                    if watch is not None:
                        watch.close()
                wall = clock() - start
            reader.read()
            tail = stderr_path.read_text(errors="replace")[-4000:]
        assert proc is not None
        rc = proc.returncode
        sig = _killed_by(rc) if not timed_out and not interrupted else None
        facts = {**self._facts(job, watch, meter), **_oom_facts(sig, ooms, watch)}
        outcome = Outcome(reader.events, rc, timed_out, interrupted is not None, tail, wall, sig,
                          facts)  # fmt: skip
        if interrupted is not None:
            raise Interrupted(outcome, signal_of(interrupted))
        return outcome

    def _wait(
        self, proc: subprocess.Popen[bytes], watch: HostWatch, reader: _EventReader,
        start: float, budget_s: float,
    ) -> tuple[bool, KeyboardInterrupt | None]:  # fmt: skip
        """Poll the worker until it ends, reading its events as they come; its process group
        is killed past the budget or on a remote stop. Returns (timed out, interrupt)."""
        while True:
            try:
                proc.wait(timeout=self.poll_s)
                return False, None
            except subprocess.TimeoutExpired:
                pass
            raise_if_dropped()
            watch.sample()
            reader.read()
            if clock() - start > budget_s:
                kill_group(proc)
                return True, None
            if self.stop is not None and self.stop():
                kill_group(proc)
                return False, KeyboardInterrupt()  # a remote cancel, as Ctrl-C

    def _facts(self, job: dict[str, Any], watch: HostWatch | None, meter: CpuMeter) -> dict[str, Any]:
        """What one worker shared its host with and the threads it had, also merged into
        :attr:`facts` (the run's)."""
        facts = {**(watch.facts() if watch is not None else {}), **meter.facts()}
        n, source = self.thread_budget(job)
        facts.update({"threads": n} if n else {}, threads_source=source)
        if os.environ.get(SLOWDOWN_VAR):  # a deliberately slowed worker: never unmarked
            facts["test_slowdown"] = os.environ[SLOWDOWN_VAR]
        merge_facts(self.facts, facts)
        return facts


class _EventReader:
    """A worker's event file, read on as it grows: each new event goes to ``on_event``
    and onto :attr:`events`."""

    def __init__(self, path: Path, on_event: Callable[[dict[str, Any]], None]) -> None:
        self.path = path
        self.on_event = on_event
        self.events: list[dict[str, Any]] = []
        self.offset = 0

    def read(self) -> None:
        new, self.offset = _read_events(self.path, self.offset)
        for e in new:
            self.on_event(e)
        self.events += new


def _oom_facts(sig: str | None, before: int | None, watch: HostWatch | None) -> dict[str, Any]:
    """``oom_killed`` and the largest RSS seen (``worker_rss_seen_mb``) for a worker that
    died of SIGKILL, not ours, while the kernel's out-of-memory kills rose (``before``: the
    count when it started); else nothing."""
    after = oom_kills() if sig == "SIGKILL" and before is not None else None
    if after is None or after <= (before or 0):
        return {}
    seen = round(watch.rss_mb) if watch is not None and watch.rss_mb else None
    return {"oom_killed": True, "worker_rss_seen_mb": seen}


def _killed_by(rc: int | None) -> str | None:
    """The signal's name when the worker died of one (a negative return code)."""
    if rc is None or rc >= 0:
        return None
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


@contextlib.contextmanager
def scratch_dir() -> Iterator[str]:
    """A worker's temporary folder, removed with Ctrl-C held back until it is gone: an
    interrupt inside ``shutil.rmtree`` can land between its ``os.close`` of a folder and
    its note of that, so that its ``finally`` closes the descriptor again and raises EBADF
    in place of the interrupt (seen once in the suite: ``Error: Bad file descriptor``
    where a Ctrl-C'd run should have exited 130)."""
    path = tempfile.mkdtemp(prefix="sciml-bench-")
    try:
        yield path
    finally:
        with signals_deferred():
            shutil.rmtree(path, ignore_errors=True)


class EngineLost(RuntimeError):
    """The engine behind an executor (a Dask scheduler) went away: no case can finish."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM/SIGHUP) while a worker ran; carries what that worker had
    reported, and the signal."""

    def __init__(self, outcome: Outcome, signum: int = signal.SIGINT):
        super().__init__()
        self.outcome = outcome
        self.signum = signum
