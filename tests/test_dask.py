"""Cases on Dask distributed (issue 14), with a real ``LocalCluster`` of two process
workers, real worker subprocesses and real results files.

Slurm cannot run here: its test builds a real ``SLURMCluster`` object and reads the
job script it would submit; no job is submitted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import pytest
from click.testing import CliRunner

from sciml_bench import backends
from sciml_bench.cli.main import main
from sciml_bench.problem import reference, spec
from sciml_bench.results import publish
from sciml_bench.results import store as results
from sciml_bench.results.store import ResultsWriter
from sciml_bench.results.table import json_record, table
from sciml_bench.run import runner

pytest.importorskip("distributed", reason="distributed is not installed: pip install '.[dask]'")

from sciml_bench.run import dask as rd  # noqa: E402

#: the sizes of `sciml-bench run --quick`
QUICK = runner.Settings(cold=1, repeats=3, budget_s=120.0, steady_budget_s=5.0)


@pytest.fixture(scope="module")
def executor() -> Iterator[rd.DaskExecutor]:
    with rd.connect(rd.DaskOptions(workers=2)) as ex:
        assert ex.check() == "dask: 2 worker(s), 2 case slot(s)"
        yield ex


def robertson() -> tuple[Any, reference.Reference]:
    p = spec.load("stiff-robertson")
    ref = reference.get(p)
    return reference.compile_problem(p, ref, sbml=True), ref  # AMICI's rows run it


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["backend"], r["solver"], r["gradient_method"], r.get("rtol"))


@pytest.mark.slow
def test_dask_rows_match_the_local_rows(
    executor: rd.DaskExecutor, tmp_path: Path, amici_robertson: None
) -> None:
    """`run stiff-robertson --quick` through both executors: same statuses, reasons,
    gradient tiers and accuracy; each Dask row says where it ran. AMICI's rows load the
    session's compiled model (conftest.py), not two compiles side by side."""
    problem, ref = robertson()
    # every backend but the two torch ones and Diffrax: the torch rows on ROBER are an
    # explicit solver ending at the step bound (test_robertson_e2e.py's), at the cost of a
    # torch import and 10^4 steps, twice each, and Diffrax's is two JAX compilations (about
    # 16 s of CPU); a worker runs any backend the same way
    skip = ("torchdiffeq", "torchode", "diffrax")
    cases = runner.plan(problem, [b for b in backends.names() if b not in skip])

    def one(name: str, ex: Any) -> results.Run:
        w = ResultsWriter(tmp_path / f"{name}.h5", {}, "test")
        runner.run(problem, ref, cases, w, QUICK, ex, progress=lambda m: None)
        w.finish("complete")
        return results.read(w.path)

    # both at once: the rows compared are statuses and accuracy, never timings
    with ThreadPoolExecutor(1) as pool:
        local_run = pool.submit(one, "local", None)
        rows = {"dask": one("dask", executor), "local": local_run.result()}
    local = {_key(r): r for r in rows["local"].records}
    remote = {_key(r): r for r in rows["dask"].records}
    assert local.keys() == remote.keys()
    assert any(r.get("gradient_tier") for r in local.values()), "no gradient was scored"
    for k, a in local.items():
        b = remote[k]
        assert (b["status"], b["reason"], b.get("gradient_tier")) == (
            a["status"], a["reason"], a.get("gradient_tier")
        ), k  # fmt: skip
        if "solution_error" in a:
            assert b["solution_error"] == pytest.approx(a["solution_error"], rel=1e-9), k
        if a["status"] != "unavailable":
            assert b["dask_worker"].startswith("tcp://") and b["host"] == a["host"]
            assert b["hardware"] == a["hardware"] and b["retries"] == 0
    machines = rows["dask"].environment["machines"]
    assert list(machines) == [a["host"] for a in local.values() if a.get("host")][:1]


def _scipy_tasks(fault_at: int) -> list[tuple[int, runner.CaseTask]]:
    problem, ref = robertson()
    tasks = []
    for i, spec_ in enumerate(runner.plan(problem, ["scipy"], rtols=[1e-4, 1e-6, 1e-8]), 1):
        job = runner.case_job(spec_, problem, ref, QUICK)
        if i == fault_at:
            job["_fault"] = "kill_parent"  # the case kills its Dask worker, then hangs
        tasks.append((i, runner.CaseTask(job, ("full",), 60.0)))
    return tasks


def _stream(tasks: Any, ex: Any, path: Path) -> list[dict[str, Any]]:
    w = ResultsWriter(path, {}, "test")
    out = list(runner.stream(tasks, w, ex, lambda i, where: None, lambda m: None))
    w.finish("complete")
    assert [r["status"] for r in results.read(path).records] == [r["status"] for _, r in out]
    return [r for _, r in sorted(out, key=lambda x: x[0])]


@pytest.mark.slow
def test_a_killed_dask_worker_is_a_crashed_row_and_loses_nothing(
    executor: rd.DaskExecutor, tmp_path: Path
) -> None:
    before = {p.pid for p in psutil.process_iter()}
    recs = _stream(_scipy_tasks(fault_at=2), executor, tmp_path / "killed.h5")
    assert [r["status"] for r in recs] == ["ok", "crashed", "ok"]
    lost = recs[1]
    assert lost["reason"].startswith(f"Dask worker lost (host {lost['host']}, worker tcp://")
    assert lost["rtol"] == 1e-6 and lost["retries"] == 0
    assert all(r["solution_error"] < 1e-2 for r in (recs[0], recs[2]))
    # the hanging case died with its Dask worker: no new process is left running it (other
    # sciml-bench runs on a shared machine have workers too: an orphan is a Dask case's
    # worker whose Dask worker, named in its environment, is gone)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = [p for p in psutil.process_iter(["pid", "cmdline"])
                if p.pid not in before and _orphaned_dask_case(p)]  # fmt: skip
        if not left:
            break
        time.sleep(0.2)
    assert not left, "the case outlived its Dask worker"


def _orphaned_dask_case(p: psutil.Process) -> bool:
    if "sciml_bench.run.worker" not in " ".join(p.info["cmdline"] or []):
        return False
    try:
        parent = p.environ().get("SCIML_BENCH_DIE_WITH_PARENT")
    except psutil.Error:
        return False
    return bool(parent) and not psutil.pid_exists(int(parent))


@pytest.mark.slow
def test_retries_rerun_a_lost_case_and_say_so(executor: rd.DaskExecutor, tmp_path: Path) -> None:
    executor.check()  # the killed worker is back
    ex = rd.DaskExecutor(executor.client, retries=1)
    tasks = _scipy_tasks(fault_at=1)[:1]
    (rec,) = _stream(tasks, ex, tmp_path / "retried.h5")
    # the fault is in the job, so the retry dies too: one retry, recorded, then the row
    assert rec["status"] == "crashed" and rec["retries"] == 1
    assert rec["retry_reasons"][0].startswith("tcp://")


def _scipy_run(
    ex: Any, path: Path, rtols: tuple[float, ...] = (1e-4, 1e-6, 1e-8),
    settings: runner.Settings = QUICK,
) -> list[Any]:  # fmt: skip
    """SciPy cases of ROBER, one per rtol, through ``runner.run``."""
    problem, ref = robertson()
    cases = runner.plan(problem, ["scipy"], rtols=list(rtols))
    w = ResultsWriter(path, {}, "test")
    recs = runner.run(problem, ref, cases, w, settings, ex, progress=lambda m: None)
    w.finish("complete")
    return recs


@pytest.mark.slow
def test_cases_timed_side_by_side_say_so_in_case_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers on one machine (asked for with --workers 2) time cases at once: each
    row records how many ran on its host, the table says so, and rows come back in case
    order whatever order they finished in."""
    # A cluster of its own: the module's has had workers killed, and the scheduler may
    # still count a dead one (CI once ran every case on the survivor, one at a time).
    monkeypatch.setenv("SCIML_BENCH_ACTIVE_DIR", str(tmp_path / "active"))
    # Four cases of three processes each: a case lasts seconds, so the two workers'
    # cases overlap even when one worker starts late on a loaded machine (CI once saw
    # three one-process cases run one after another on two workers).
    longer = runner.Settings(cold=2, repeats=3, budget_s=120.0, steady_budget_s=5.0)
    rtols = (1e-4, 1e-5, 1e-6, 1e-8)
    with rd.connect(rd.DaskOptions(workers=2)) as ex:
        assert ex.check() == "dask: 2 worker(s), 2 case slot(s)"
        recs = _scipy_run(ex, tmp_path / "two.h5", rtols, longer)
    where = [(r["case_index"], r["dask_worker"], r["concurrent_cases"]) for r in recs]
    assert len({r["dask_worker"] for r in recs}) == 2, f"the cases did not use both workers: {where}"
    assert [r["rtol"] for r in recs] == list(rtols)
    assert [r["case_index"] for r in recs] == [1, 2, 3, 4]
    assert max(r["concurrent_cases"] for r in recs) >= 2, where
    text = table(results.read(tmp_path / "two.h5").records)
    shown = [ln.split()[4] for ln in text.splitlines()[3:7]]
    assert shown == ["1e-04", "1e-05", "1e-06", "1e-08"], text
    # the two workers are this run's own: the note says so, not "other processes"
    assert "ran beside this run's own other cases (up to 2 of its cases at once)" in text


@pytest.mark.slow
def test_a_local_cluster_times_one_case_at_a_time_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23 B: two workers on two cores slowed every timing (LV SciPy 16.2 ms against
    7.45 ms locally). Without --workers a LocalCluster has one worker; its rows record
    that no other case ran beside them, and --json rows carry host and hardware."""
    monkeypatch.setenv("SCIML_BENCH_ACTIVE_DIR", str(tmp_path / "active"))  # this test's only
    with rd.connect(rd.DaskOptions()) as ex:
        assert ex.check() == "dask: 1 worker(s), 1 case slot(s)"
        recs = _scipy_run(ex, tmp_path / "one.h5", (1e-4, 1e-8))
    assert [r["status"] for r in recs] == ["ok"] * 2
    assert [r["concurrent_cases"] for r in recs] == [1, 1]
    out = [json_record(r) for r in recs]
    assert all(o["host"] and o["hardware"] and o["dask_worker"].startswith("tcp://") for o in out)
    assert "ran beside" not in table(recs)


def _record(hardware: str) -> dict[str, Any]:
    return {
        "kind": "ode", "problem": "stiff-robertson", "backend": "scipy", "solver": "LSODA",
        "gradient_method": "none", "rtol": 1e-6, "status": "ok", "reason": "",
        "solve_samples": [0.010, 0.011, 0.012], "hardware": hardware, "host": "h",
    }  # fmt: skip


def _file(path: Path, hardware: str) -> str:
    w = ResultsWriter(path, {}, "test")
    w.add(_record(hardware))
    w.finish("complete")
    return str(path)


def test_compare_refuses_cases_from_different_hardware(tmp_path: Path) -> None:
    a = _file(tmp_path / "a.h5", "Xeon x2")
    b = _file(tmp_path / "b.h5", "EPYC x16; NVIDIA H100 (driver 550)")
    r = CliRunner().invoke(main, ["compare", a, b])
    assert r.exit_code == 2
    assert "1 matched case(s) ran on different hardware" in r.output
    assert "Xeon x2 vs EPYC x16" in r.output and "--allow-mixed-hardware" in r.output
    ok = CliRunner().invoke(main, ["compare", a, b, "--allow-mixed-hardware"])
    assert ok.exit_code == 0, ok.output
    same = CliRunner().invoke(main, ["compare", a, _file(tmp_path / "c.h5", "Xeon x2")])
    assert same.exit_code == 0, same.output


def test_report_groups_rows_by_hardware(tmp_path: Path) -> None:
    w = ResultsWriter(tmp_path / "mixed.h5", {}, "test")
    for hw in ("Xeon x2", "EPYC x16", "Xeon x2"):
        w.add(_record(hw))
    w.finish("complete")
    blocks = publish.build([results.read(w.path)], tmp_path / "report")
    # the tables' section (the figures' has the same machine headings): one per machine
    blocks = blocks[next(i for i, b in enumerate(blocks) if isinstance(b, publish.Heading)
                         and b.text == "Results by problem"):]  # fmt: skip
    titles = [b.text for b in blocks if isinstance(b, publish.Heading) and b.level == 4]
    assert titles == ["stiff-robertson on Xeon x2", "stiff-robertson on EPYC x16"]
    tables = [b for b in blocks if isinstance(b, publish.Table) and b.header[0] == "backend"]
    assert [len(t.rows) for t in tables] == [2, 1]


def test_slurm_cluster_object_and_job_script() -> None:
    """The SLURMCluster `--cluster slurm` builds, and the job script it would submit
    (nothing is submitted: there is no Slurm here)."""
    pytest.importorskip("dask_jobqueue", reason="dask-jobqueue is not installed")
    opts = rd.SlurmOptions(jobs=3, cores=8, memory="16GB", walltime="02:00:00", gpus=2,
                           queue="gpu", account="proj")  # fmt: skip
    with rd.slurm_cluster(opts, per_worker=2) as cluster:
        script = cluster.job_script()
    for line in ("#SBATCH -p gpu", "#SBATCH -A proj", "#SBATCH --cpus-per-task=8",
                 "#SBATCH --mem=15G", "#SBATCH -t 02:00:00", "#SBATCH --gres=gpu:2",
                 "DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON='{}'"):  # fmt: skip
        assert line in script, (line, script)
    assert "--resources bench=2" in script and "--nthreads 2" in script
