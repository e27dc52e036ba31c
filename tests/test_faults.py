"""Fault injection with real processes, real signals and real files (issue 7).

Crashes and hangs are injected through the worker's test hook (``job["_fault"]``,
set only here, by :class:`FaultyExecutor`); interrupts are a real SIGINT to a
real ``sciml-bench run``; concurrency is real simultaneous processes. After
every fault the results file must be valid HDF5 that ``sciml-bench show`` reads,
holding every completed case.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from sciml_bench.problem import reference, spec
from sciml_bench.results import store as results
from sciml_bench.results.store import ResultsWriter
from sciml_bench.run import runner
from sciml_bench.run.executor import LocalExecutor, Outcome

DATA = Path(__file__).parent / "data"
SCIML = [sys.executable, "-m", "sciml_bench.cli.main"]
FAST = runner.Settings(cold=1, repeats=1, warmups=0, budget_s=60.0, steady_budget_s=1.0)


class FaultyExecutor(LocalExecutor):
    """A real LocalExecutor whose n-th job (1-based) carries a fault for the worker."""

    def __init__(self, faults: dict[int, str]):
        super().__init__()
        self.faults = faults
        self.jobs = 0
        self.seen: list[dict[str, Any]] = []

    def run(
        self, job: dict[str, Any], budget_s: float, on_event: Callable[[dict[str, Any]], None]
    ) -> Outcome:
        self.jobs += 1
        if self.jobs in self.faults:
            job = {**job, "_fault": self.faults[self.jobs]}

        def record(e: dict[str, Any]) -> None:
            self.seen.append(e)
            on_event(e)

        return super().run(job, budget_s, record)


def compiled(name: str) -> tuple[Any, reference.Reference]:
    p = spec.load(DATA / f"{name}.toml")
    ref = reference.get(p)
    return reference.compile_problem(p, ref), ref


def show(path: Path) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([*SCIML, "show", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r


def gone(pid: int) -> bool:
    """Dead: no such process, or a zombie waiting for a reaper that is not us."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# --- 1. crashes ------------------------------------------------------------


@pytest.mark.slow
def test_crashed_workers_are_rows_and_the_run_goes_on(tmp_path: Path) -> None:
    problem, ref = compiled("decay")
    cases = runner.plan(problem, ["scipy"], rtols=[1e-3, 1e-4, 1e-5, 1e-6])
    writer = ResultsWriter(tmp_path / "crash.h5", {}, "test")
    executor = FaultyExecutor({2: "sigsegv", 3: "sigkill"})
    runner.run(problem, ref, cases, writer, FAST, executor, progress=lambda m: None)
    writer.finish("complete")

    run = results.read(writer.path)
    assert [r["status"] for r in run.records] == ["ok", "crashed", "crashed", "ok"]
    assert "SIGSEGV" in run.records[1]["reason"]
    assert "SIGKILL" in run.records[2]["reason"]
    assert run.meta["status"] == "complete"
    assert "crashed" in show(writer.path).stdout


# --- 2. hangs --------------------------------------------------------------


@pytest.mark.slow
def test_budget_kills_the_whole_process_group_grandchildren_included(tmp_path: Path) -> None:
    problem, ref = compiled("decay")
    (case,) = runner.plan(problem, ["scipy"])
    executor = FaultyExecutor({1: "spawn_grandchild_and_hang"})
    settings = runner.Settings(cold=1, repeats=1, budget_s=3.0)
    start = time.monotonic()
    rec = runner.run_case(case, problem, ref, settings, executor, progress=lambda m: None)
    assert time.monotonic() - start < 20
    assert rec["status"] == "budget_exceeded"
    assert "3 s budget" in rec["reason"]
    (grandchild,) = [e["grandchild_pid"] for e in executor.seen if "grandchild_pid" in e]
    (worker,) = [e["pid"] for e in executor.seen if "pid" in e]
    deadline = time.monotonic() + 5
    while not (gone(grandchild) and gone(worker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(worker), "the worker survived its budget"
    assert gone(grandchild), "a grandchild of the worker survived the budget kill"


# --- 3. interrupt ----------------------------------------------------------


def _wait_for_cases(folder: Path, n: int, proc: subprocess.Popen[bytes], timeout: float) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the run ended before it could be interrupted"
        for f in folder.glob("*.h5"):
            if len(results.read(f).records) >= n:  # atomic rename: always a whole file
                return f
        time.sleep(0.1)
    raise AssertionError(f"no results file with {n} case(s) after {timeout} s")


def _ours(tmp: Path) -> list[int]:
    """Live worker processes whose job file lies in ``tmp`` (this test's TMPDIR):
    the machine is shared, so other runs' workers are not counted."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "sciml_bench.run.worker" in cmd and any(str(tmp) in c for c in cmd):
            found.append(p.pid)
    return found


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name
)
def test_a_signal_stops_workers_saves_completed_cases_and_exits_128_plus_signum(
    tmp_path: Path, sig: signal.Signals
) -> None:
    # LSODA finishes in a second; DOP853 then grinds through ~10^5 stability-bound steps.
    # SIGTERM is how Slurm, CI runners and `timeout` end a job; SIGHUP a closed terminal.
    tmp = tmp_path / "tmp"  # the workers' /tmp/sciml-bench-* folders land here
    tmp.mkdir()
    proc = subprocess.Popen(
        [*SCIML, "run", "--problem-file", str(DATA / "slow-stiff.toml"), "-b", "scipy",
         "--solver", "LSODA,DOP853", "--quick", "--out", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "TMPDIR": str(tmp)},
        # the run keeps a signal ignored at its start (`nohup sciml-bench run` survives a
        # closed terminal), and a suite started under nohup passes SIGHUP down ignored
        preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL),
    )  # fmt: skip
    try:
        path = _wait_for_cases(tmp_path, 1, proc, timeout=120)
        time.sleep(0.5)  # the second case's worker is running now
        workers = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        assert workers, "no worker running at the moment of the signal"
        assert list(tmp.glob("sciml-bench-*")), "the running worker has no temporary folder"
        proc.send_signal(sig)  # SIGINT: as a terminal's Ctrl-C reaches the foreground process
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, (proc.returncode, err.decode()[-2000:])
    assert b"Traceback" not in err
    assert f"interrupted by {sig.name}: 1 completed case(s) are saved".encode() in err
    # the table of what completed, as a finished run prints it
    assert b"LSODA" in out and b"DOP853" not in out and b"backend" in out
    run = results.read(path)
    assert run.meta["status"] == "interrupted" and run.meta["interrupted_by"] == sig.name
    assert [(r["solver"], r["status"]) for r in run.records] == [("LSODA", "ok")]
    assert f"[interrupted by {sig.name}]" in show(path).stdout
    time.sleep(0.2)
    assert all(gone(pid) for pid in workers), "a worker outlived the signal"
    assert not _ours(tmp), "a worker outlived the signal"
    assert not list(tmp.iterdir()), "a worker's temporary folder was left behind"
    assert not list(tmp_path.glob(".*.tmp")), "a temporary results file was left behind"


@pytest.mark.slow
def test_ctrl_c_keeps_the_finished_cold_processes_of_the_case_marked_partial(
    tmp_path: Path,
) -> None:
    proc = subprocess.Popen(
        [*SCIML, "run", "--problem-file", str(DATA / "decay.toml"), "-b", "scipy",
         "--quick", "--cold", "6", "--out", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # a pytest-xdist worker may ignore SIGINT, and an ignored signal stays ignored
        # across exec (the run then finished all six processes: CI, twice)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the first process has ended once the second reports
            if "process 2: import" in line:
                proc.send_signal(signal.SIGINT)
                break
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    (path,) = tmp_path.glob("*.h5")
    (rec,) = results.read(path).records
    assert rec["partial"] is True and rec["status"] == "ok"
    # SIGINT reached the run during process 2; a few more may have ended meanwhile
    assert 1 <= rec["cold_processes"] < 6 and rec["cold_processes_planned"] == 6
    assert len(rec["ttfg_samples"]) == rec["cold_processes"]
    assert rec["solve_samples"], "the full process's steady-state samples were dropped"
    assert f"interrupted by SIGINT after {rec['cold_processes']} of 6 cold processes" in rec["reason"]
    assert "scipy" in out and "partial: interrupted by SIGINT" in out  # the table, with the note


# --- 4. concurrency --------------------------------------------------------


@pytest.mark.slow
def test_two_runs_at_once_into_one_folder_write_two_complete_files(tmp_path: Path) -> None:
    env = {**os.environ, "SCIML_BENCH_CACHE": str(tmp_path / "fresh-cache")}  # both build it
    out = tmp_path / "results"
    cmd = [*SCIML, "run", "--problem-file", str(DATA / "decay.toml"), "-b", "scipy", "--quick",
           "--repeats", "1", "--out", str(out)]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()[-2000:]
    files = sorted(out.glob("*.h5"))
    assert len(files) == 2
    for f in files:
        run = results.read(f)
        assert run.meta["status"] == "complete"
        assert [r["status"] for r in run.records] == ["ok"]
    (entry,) = (tmp_path / "fresh-cache").glob("*.json")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a corrupt entry would warn
        assert reference._read(entry) is not None


# --- 5. caches -------------------------------------------------------------

_WRITER = textwrap.dedent("""
    import sys
    from sciml_bench.problem import reference
    from sciml_bench.problem import spec
    from pathlib import Path
    ref = reference.build(spec.load(sys.argv[1]))
    path, tag = Path(sys.argv[2]), float(sys.argv[3])
    for i in range(int(sys.argv[4])):
        ref.loss = tag + i  # each write is a distinct, complete entry
        reference._write(path, ref)
""")


@pytest.mark.slow
def test_concurrent_cache_writers_never_expose_a_torn_entry(tmp_path: Path) -> None:
    """Writers rename complete files over one entry while we read it as fast as we can."""
    path = tmp_path / "entry.json"
    writes = 300
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(DATA / "decay.toml"), str(path),
                          str(1000 * (k + 1)), str(writes)])
        for k in range(3)
    ]
    reads = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "corrupt ... rebuilding" would be an error here
        while any(p.poll() is None for p in procs):
            ref = reference._read(path)
            if ref is not None:
                reads += 1
                assert ref.loss % 1000 < writes
    assert all(p.returncode == 0 for p in procs)
    assert reads > 50, f"only {reads} reads overlapped the writers"
    assert reference._read(path) is not None
    assert not list(tmp_path.glob("*.tmp")), "a temporary cache file was left behind"


@pytest.mark.slow
def test_concurrent_builders_of_one_reference_agree(tmp_path: Path) -> None:
    code = ("import sys, json; from sciml_bench.problem import reference, spec; "
            "r = reference.get(spec.load(sys.argv[1])); print(json.dumps(r.gradient))")
    env = {**os.environ, "SCIML_BENCH_CACHE": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(DATA / "decay.toml")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(4)]
    grads = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and b"corrupt" not in err, err.decode()
        grads.append(json.loads(out))
    assert all(np.allclose(g, grads[0], rtol=1e-12) for g in grads)
    (entry,) = tmp_path.glob("*.json")
    assert reference.get(spec.load(DATA / "decay.toml"), cache=tmp_path).cached


def test_truncated_results_file_is_a_one_line_error(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path / "r.h5", {}, "test")
    w.add({"problem": "p", "backend": "scipy", "status": "ok", "reason": ""})
    data = w.path.read_bytes()
    w.path.write_bytes(data[: len(data) // 3])
    r = subprocess.run([*SCIML, "show", str(w.path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "truncated HDF5 file" in r.stderr


def test_a_budget_kill_names_the_phase_it_stopped() -> None:
    """The phase in a budget kill's reason is the one running: past the first solve of a
    backend without gradients (SciPy), that is the steady state, never "first grad"; in a
    CNN worker, the stage after the last it announced, never "import"."""
    built = [{"phase": "import", "s": 1.0}, {"phase": "build", "s": 0.1}]
    solved = [*built, {"phase": "first_solve", "s": 0.5}]
    cases = {
        "first solve": built,
        "first grad": solved,  # a differentiable backend: its first gradient was running
        "steady state": [*solved, {"ttfg_s": 2.0}],  # no gradient: TTFG after the solve
    }
    cnn = [{"cnn_stage": "import", "s": 3.0}, {"cnn_stage": "setup", "s": 0.5}]
    cases["the first step"] = cnn  # a CNN worker announces stages, not phases
    cases["training or evaluation"] = [*cnn, {"cnn_stage": "first_step", "s": None}]
    for phase, events in cases.items():
        p = runner.ending(Outcome(events, None, timed_out=True), 2.0)
        assert p.reason.endswith("(--budget S gives each case more)")
        assert p.status == "budget_exceeded"
        assert p.reason.startswith(f"killed after the 2 s budget during {phase}"), p.reason


def test_a_worker_the_kernel_killed_for_memory_says_so() -> None:
    """SIGKILL while the kernel's OOM-kill count rose (``/proc/vmstat``) is a row
    ``out_of_memory`` naming the RSS seen and the machine's memory (diffsol's build at
    32,768 Brusselator states reached 22,674 MB of 24,105 MB); SIGKILL without it stays a
    crash, and so does one while the count held still."""
    from sciml_bench.measure.memory import oom_kills
    from sciml_bench.run import executor

    now = oom_kills()
    if now is None:
        pytest.skip("no oom_kill counter: /proc/vmstat is Linux 4.13 on")
    built = [{"phase": "import", "s": 1.0}]
    assert executor._oom_facts("SIGKILL", now, None) == {}  # the count held still
    assert executor._oom_facts(None, now - 1, None) == {}  # no SIGKILL: not the kernel's
    facts = executor._oom_facts("SIGKILL", now - 1, None)
    assert facts == {"oom_killed": True, "worker_rss_seen_mb": None}
    facts["worker_rss_seen_mb"] = 22674
    p = runner.ending(Outcome(built, -9, signal_name="SIGKILL", facts=facts), 900.0)
    assert p.status == "out_of_memory"
    assert p.reason.startswith("out of memory during build: the kernel's OOM killer ended the "
                               "worker (SIGKILL); its RSS was last seen at 22,674 MB, of the "
                               "machine's ")  # fmt: skip
    plain = runner.ending(Outcome(built, -9, signal_name="SIGKILL"), 900.0)
    assert (plain.status, plain.reason) == ("crashed", "worker killed by SIGKILL during build")


def test_the_host_watch_sees_a_workers_memory_from_outside() -> None:
    """A real process holding 200 MB: the watch's RSS, read from outside, which a worker
    the kernel kills never reports itself."""
    from sciml_bench.run.executor import HostWatch

    code = "import time; b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096]); " \
           "print('ready', flush=True); time.sleep(30)"  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        watch = HostWatch(proc.pid)
        watch.sample()
        assert 190 < watch.rss_mb < 400, watch.rss_mb
        watch.close()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_ctrl_c_python_dropped_is_raised_at_the_next_poll(tmp_path: Path) -> None:
    """A KeyboardInterrupt raised inside ``__del__`` is dropped by Python ("Exception
    ignored in ..."): a Ctrl-C that lands while the collector runs one was lost, and a run
    went on through all its processes. Inside ``stop_signals`` the executor's poll of a
    running worker raises it again."""
    from sciml_bench.measure.clock import clock
    from sciml_bench.run import signals
    from sciml_bench.run.executor import HostWatch, _EventReader

    class Drops:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler runs here, between bytecodes, and is dropped
                pass

    proc = subprocess.Popen(["sleep", "20"])
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # xdist may ignore it
    try:
        with signals.stop_signals():
            Drops()  # collected at once: its interrupt is raised in __del__ and dropped
            watch = HostWatch(proc.pid)
            reader = _EventReader(tmp_path / "events.jsonl", lambda e: None)
            start = clock()
            with pytest.raises(KeyboardInterrupt):
                LocalExecutor()._wait(proc, watch, reader, start, 60.0)
            assert clock() - start < 5.0
            watch.close()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)
        proc.kill()
        proc.wait()
