"""Timings under load (issue 23 B, C): thread budgets that really bound every framework,
what each worker shared its host with, cold caches, and rows in case order.

Real processes throughout: a JAX interpreter started with the executor's environment
(its threads counted from ``/proc``), real marker files of live workers, real results
files read back by ``show``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sciml_bench.measure import environment
from sciml_bench.results.store import ResultsWriter, read
from sciml_bench.results.table import json_record, table
from sciml_bench.run.executor import HostWatch, LocalExecutor, merge_facts

LINUX_PROC = pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="counting threads needs Linux /proc"
)

#: a JAX process that runs one jitted matmul, prints how many threads XLA's intra-op pool
#: has (its own count), then waits to be counted from outside
JAX_POOL = """
import os, time
import jax, jax.numpy as jnp
x = jnp.ones((300, 300))
jax.jit(lambda a: (a @ a).sum())(x).block_until_ready()
names = [open(f"/proc/self/task/{t}/comm").read() for t in os.listdir("/proc/self/task")]
print(sum("XLAEigen" in n for n in names), flush=True)
time.sleep(60)
"""


@LINUX_PROC
@pytest.mark.parametrize("n", [1, 3])
def test_threads_n_bounds_xla_and_the_watch_counts_it(
    n: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--threads N`` used to reach XLA only for N = 1, and then through a token XLA
    ignores: JAX kept one intra-op thread per core. Now its pool has N threads, for N
    below the core count (1) and above it (3: the setting decides, not the machine)."""
    pytest.importorskip("jax")
    monkeypatch.setenv("SCIML_BENCH_ACTIVE_DIR", str(tmp_path / "active"))
    env = LocalExecutor(threads=n).env(str(tmp_path), {"kind": "ode", "device": "cpu"})
    assert env["PJRT_NPROC"] == env["OMP_NUM_THREADS"] == env["SCIML_BENCH_THREADS"] == str(n)
    assert "intra_op_parallelism_threads" not in env.get("XLA_FLAGS", "")
    proc = subprocess.Popen([sys.executable, "-c", JAX_POOL], env=env, stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    watch = HostWatch(proc.pid)
    try:
        assert proc.stdout is not None
        own = int(proc.stdout.readline())
        watch.sample()  # the first sample of a poll cycle counts threads
        watch._polls = 0
        watch.sample()
        facts = watch.facts()
    finally:
        proc.kill()
        proc.wait()
        watch.close()
    assert own == n and facts["xla_threads"] == n
    assert facts["worker_threads"] > n and facts["concurrent_cases"] == 1


def test_the_watch_counts_workers_running_at_once_on_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two live worker processes (real workers whose job hangs) each see the other's
    marker; a dead one's marker is cleared, and a case keeps the most it saw. A live
    process that is not a worker (a reused pid) does not count."""
    monkeypatch.setenv("SCIML_BENCH_ACTIVE_DIR", str(tmp_path / "active"))
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"kind": "ode", "_fault": "hang"}))
    sleepers = [subprocess.Popen([sys.executable, "-m", "sciml_bench.run.worker", str(job),
                                  str(tmp_path / f"events{i}.jsonl")]) for i in range(2)]  # fmt: skip
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stranger = HostWatch(other.pid)
    a, b = (HostWatch(p.pid) for p in sleepers)
    try:
        a.sample()
        assert a.concurrent == 2 and b.concurrent >= 1
        sleepers[1].kill()
        sleepers[1].wait()
        a.sample()
        assert a.concurrent == 2 and a._running() == 1  # the dead one's marker is gone
        assert len(list((tmp_path / "active").iterdir())) == 1
        assert stranger._running() == 1  # only the live worker; the stranger's marker cleared
    finally:
        for p in (*sleepers, other):
            p.kill()
            p.wait()
        a.close()
        b.close()
        stranger.close()
    assert not (tmp_path / "active").exists()  # the last one out removes the folder
    assert merge_facts({"concurrent_cases": 2, "threads_source": "x"},
                       {"concurrent_cases": 1, "threads_source": "y"}) == {
        "concurrent_cases": 2, "threads_source": "y"}  # fmt: skip


def test_cnn_default_threads_are_the_free_cores_once_per_run(tmp_path: Path) -> None:
    """No --threads: a CNN job gets the free cores at the first CNN worker, every
    variant the same budget, and the load it was decided at; ODE jobs keep each
    library's default; --threads wins over both."""
    ex = LocalExecutor()
    cnn = ex.env(str(tmp_path), {"kind": "cnn"})
    n = int(cnn["SCIML_BENCH_THREADS"])
    cores = environment.usable_cores()
    load = float(cnn["SCIML_BENCH_LOAD_START"])
    assert n == max(1, min(cores, int(cores - load + 0.5)))
    assert cnn["OMP_NUM_THREADS"] == cnn["PJRT_NPROC"] == cnn["TF_NUM_INTRAOP_THREADS"] == str(n)
    assert cnn["SCIML_BENCH_THREADS_SOURCE"].startswith(f"free cores at start: {cores} usable")
    assert ex.env(str(tmp_path), {"kind": "cnn"})["SCIML_BENCH_LOAD_START"] == f"{load:.4f}"
    ode = ex.env(str(tmp_path), {"kind": "ode", "device": "cpu"})
    assert "SCIML_BENCH_THREADS" not in ode and "SCIML_BENCH_LOAD_START" not in ode
    assert ode.get("PJRT_NPROC") == os.environ.get("PJRT_NPROC")  # the shell's, untouched
    assert LocalExecutor(threads=2).env(str(tmp_path), {"kind": "cnn"})["PJRT_NPROC"] == "2"


def test_cold_caches_are_forced_even_over_the_shells(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user's warm JAX or Inductor cache used to be kept while the run recorded
    "(cold)": now each worker gets fresh folders, and the environment names the shell's
    folders it did not use."""
    warm = tmp_path / "warm"
    (warm / "entry").mkdir(parents=True)
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(warm))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(warm))
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)  # an in-process CNN test sets it
    scratch = tmp_path / "scratch"
    env = LocalExecutor().env(str(scratch), {"kind": "ode", "device": "cpu"})
    for var in environment.FRESH_CACHE_VARS:
        assert env[var].startswith(str(scratch)), var
    assert env["SCIML_BENCH_FRESH_CACHES"] == "1"
    note = environment.capture()["caches"]
    assert "(cold)" in note
    assert "JAX_COMPILATION_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR were not used" in note


def _row(backend: str, index: int, **kw: object) -> dict[str, object]:
    return {"kind": "ode", "problem": "p", "backend": backend, "solver": "s",
            "gradient_method": "none", "rtol": 1e-6, "status": "ok", "reason": "",
            "solve_samples": [1e-3, 1.1e-3, 1.2e-3], "case_index": index, **kw}  # fmt: skip


def test_rows_come_back_in_case_order_with_a_note_when_cases_shared_a_host(
    tmp_path: Path,
) -> None:
    """A file written in finishing order (a Dask run's) shows its rows in case order,
    and says which were timed beside other cases; --json rows carry host and hardware."""
    w = ResultsWriter(tmp_path / "r.h5", {}, "test")
    for r in (_row("c", 3, concurrent_cases=2, host="h", hardware="X x2"),
              _row("a", 1, concurrent_cases=1), _row("b", 2, concurrent_cases=2)):  # fmt: skip
        w.add(r)
    w.finish("complete")
    recs = read(w.path).records
    assert [r["backend"] for r in recs] == ["c", "a", "b"]  # stored as they finished
    text = table(recs)
    lines = [ln.split()[0] for ln in text.splitlines()[3:6]]
    assert lines == ["a", "b", "c"], text
    # rows without concurrent_own (files before it): whose workers they were is not said
    assert "c s, b s: ran beside" not in text and "b s, c s: ran beside other sciml-bench " \
        "workers on the same host (up to 2 at once, itself included; whether they were this " \
        "run's or another's, this file does not record)" in text.replace("\n    ", " ")  # fmt: skip
    one = json_record(recs[0])
    assert (one["host"], one["hardware"], one["concurrent_cases"]) == ("h", "X x2", 2)
    alone = table([_row("a", 1, concurrent_cases=1, others_cpu=0.1)])
    assert "ran beside" not in alone and "timed while other processes" not in alone
    busy = table([_row("a", 1, others_cpu=1.62), _row("b", 2, others_cpu=0.2)])
    assert "a s: timed while other processes took up to 1.62 cores" in busy


def test_executor_dask_without_dask_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """It printed a raw ModuleNotFoundError traceback (exit 1): the friendly check came
    after ``import dask``. Dask is made unimportable in a real interpreter."""
    code = (
        "import sys; sys.modules['dask'] = None; sys.modules['distributed'] = None\n"
        "from sciml_bench.cli.main import main\n"
        f"main(['run', 'nonstiff-lotka-volterra', '-b', 'scipy', '--quick', '--executor', "
        f"'dask', '--out', {str(tmp_path)!r}])"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        "Error: --executor dask needs dask and distributed: pip install 'sciml-bench[dask]'"
    ]
    assert not list(tmp_path.glob("*.h5"))  # nothing started, no file left


def test_a_json_row_names_where_it_ran(tmp_path: Path) -> None:
    rec = _row("a", 1, host="h", hardware="X x2", concurrent_cases=1, threads=2,
               threads_source="--threads", xla_threads=2)  # fmt: skip
    out = json.loads(json.dumps(json_record(rec)))
    assert {k: out[k] for k in ("host", "hardware", "threads", "xla_threads")} == {
        "host": "h", "hardware": "X x2", "threads": 2, "xla_threads": 2}  # fmt: skip
