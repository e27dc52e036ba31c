"""The device axis: the request, the worker's pinning, the read-back, the records.

CPU-side tests run real workers on a tiny problem; the GPU tests (marked ``gpu``) skip
with the exact reason when no NVIDIA GPU is visible. ``benchmarks/gpu_checks.py`` runs
them on the GPU machine in one call.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import pytest

from sciml_bench import backends
from sciml_bench.backends.base import probe_cuda
from sciml_bench.measure import device
from sciml_bench.measure.environment import cpu_model
from sciml_bench.measure.memory import gpu_count
from sciml_bench.problem import reference, spec
from sciml_bench.results import compare as cmp
from sciml_bench.results import store, table
from sciml_bench.run import runner
from sciml_bench.run.executor import LocalExecutor

ROOT = Path(__file__).resolve().parent.parent
DECAY = ROOT / "tests" / "data" / "decay.toml"
FAST = runner.Settings(cold=1, repeats=2, warmups=0, budget_s=120.0, steady_budget_s=2.0)
GPUS = gpu_count()
NO_GPU = "no NVIDIA GPU visible (NVML sees none)"


@pytest.fixture(scope="module")
def decay() -> tuple[object, reference.Reference]:
    p = spec.load(DECAY)
    ref = reference.get(p)
    return reference.compile_problem(p, ref), ref


def _record(decay, backend: str, device: str = "cpu", requested: str | None = None) -> dict:
    """One real worker of ``backend`` on the decay problem, asked for ``device``."""
    problem, ref = decay
    (case,) = runner.plan(problem, [backend])
    job = {
        **runner.case_job(case, problem, ref, FAST),
        "device": device,
        "device_requested": requested or device,
    }
    return runner.run_job_once(job, budget_s=120.0)


def _need(backend: str) -> None:
    av = backends.get(backend).availability()
    if not av.ok:
        pytest.skip(f"{backend}: {av.reason}")


# --- the request -----------------------------------------------------------------


def test_requests_parse_and_auto_resolves_to_a_concrete_device() -> None:
    assert device.parse(None, "cpu") == ["cpu"] and device.parse(None, "auto") == ["auto"]
    assert device.parse("cpu, CUDA,cpu", "cpu") == ["cpu", "cuda"]
    with pytest.raises(device.DeviceError, match="choose cpu, cuda, auto"):
        device.parse("tpu", "cpu")
    assert device.resolve(["auto"], 0) == (
        ["cpu"],
        "--device auto: running on cpu (NVML sees no GPU)",
    )
    assert device.resolve(["auto", "cpu"], 2)[0] == ["cuda", "cpu"]
    with pytest.raises(device.DeviceError, match="no NVIDIA GPU is visible"):
        device.resolve(["cpu", "cuda"], 0)


def test_pinning_is_in_the_environment_every_executor_builds(tmp_path: Path) -> None:
    ex = LocalExecutor()
    assert ex.env(str(tmp_path), {"device": "cpu"})["JAX_PLATFORMS"] == "cpu"
    cuda = ex.env(str(tmp_path), {"device": "cuda"})
    assert cuda["JAX_PLATFORMS"].split(",")[0] == "cuda"
    assert cuda["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert "JAX_PLATFORMS" not in device.device_env("auto")  # a CNN job resolves its own


def test_a_cuda_only_request_keeps_cpu_only_backends_and_says_so(decay) -> None:
    problem, _ = decay
    names = ["scipy", "diffrax", "torchdiffeq"]
    side = [
        (c.backend, c.device, c.device_requested)
        for c in runner.plan(problem, names, devices=["cpu", "cuda"])
    ]
    assert side == [
        ("scipy", "cpu", "cpu"),
        ("diffrax", "cpu", "cpu"),
        ("diffrax", "cuda", "cuda"),
        ("torchdiffeq", "cpu", "cpu"),
        ("torchdiffeq", "cuda", "cuda"),
    ]
    only = [
        (c.backend, c.device, c.device_requested)
        for c in runner.plan(problem, names, devices=["cuda"])
    ]
    assert only[0] == ("scipy", "cpu", "cuda")


# --- pinned before import, read back ---------------------------------------------


@pytest.mark.slow
def test_pinning_puts_jax_on_the_cpu_through_the_worker_environment(
    decay, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent's environment sends JAX to CUDA (as JAX's default does on a GPU
    machine); the worker's pin wins, and the record reads the device back from the
    solution arrays."""
    _need("diffrax")
    monkeypatch.setenv("JAX_PLATFORMS", "cuda")
    rec = _record(decay, "diffrax", "cpu")
    assert rec["status"] == "ok", rec["reason"]
    assert (rec["device"], rec["device_requested"]) == ("cpu", "cpu")
    assert rec["device_name"] == cpu_model()
    assert rec["solve_samples"] and rec["gradient_tier"] == "pass"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["diffrax", "torchdiffeq", "torchode"])
def test_cuda_without_a_gpu_is_an_error_row_never_a_cpu_run(decay, backend: str) -> None:
    _need(backend)
    if GPUS:
        pytest.skip("a GPU is visible here")
    rec = _record(decay, backend, "cuda")
    assert rec["status"] == "error", rec
    assert not rec.get("solve_samples") and not rec.get("grad_samples")
    if rec.get("device"):  # JAX skips a CUDA it cannot see: the read-back catches it
        assert "asked for cuda, the library reports cpu" in rec["reason"], rec["reason"]
    else:  # torch refuses to make a CUDA tensor
        assert rec["reason"].startswith("build:"), rec["reason"]


@pytest.mark.slow
def test_a_device_the_library_did_not_use_is_an_error_naming_both(decay) -> None:
    # SciPy can only compute on the host: a worker told it is on CUDA must refuse
    rec = _record(decay, "scipy", "cuda")
    assert rec["status"] == "error"
    assert "asked for cuda, the library reports cpu" in rec["reason"], rec["reason"]
    assert cpu_model() in rec["reason"] and rec["device"] == "cpu"


@pytest.mark.slow
def test_a_cpu_only_backend_under_a_cuda_request_runs_on_the_cpu_and_says_so(decay) -> None:
    rec = _record(decay, "scipy", "cpu", requested="cuda")
    assert rec["status"] == "ok" and rec["device"] == "cpu" and rec["device_requested"] == "cuda"
    assert rec["reason"] == device.cpu_only_note("scipy")
    assert table.device_cell(rec) == "cpu (asked cuda)"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["diffrax", "torchdiffeq", "torchode"])
def test_the_cuda_probe_names_what_is_missing(backend: str) -> None:
    _need(backend)
    missing = probe_cuda(backend)
    if GPUS and missing is None:
        pytest.skip(f"{backend} has a working CUDA build here")
    assert missing is not None
    what, fix = missing
    lib = {"diffrax": "jax", "torchdiffeq": "torch", "torchode": "torch"}[backend]
    assert what.startswith(lib) and "--device cpu" in fix and "pip install" in fix


# --- the table, the JSON, the files ------------------------------------------------


@pytest.mark.slow
def test_table_and_json_carry_the_device(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "sciml_bench.cli.main"]
    r = subprocess.run(
        [
            *cli,
            "run",
            "--problem-file",
            str(DECAY),
            "-b",
            "scipy",
            "--quick",
            "--json",
            "--device",
            "auto",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"--device auto: running on {'cuda' if GPUS else 'cpu'}" in r.stderr
    rec, verdict = json.loads(r.stdout)  # the case, then its verdict (no gradient: none)
    assert verdict["kind"] == "verdict" and verdict["qualified"] == 0
    assert rec["device"] == "cpu" and rec["device_name"] == cpu_model()
    (path,) = tmp_path.glob("*.h5")
    run = store.read(path)
    assert run.meta["schema_version"] == 2 and run.records[0]["device"] == "cpu"
    shown = subprocess.run([*cli, "show", str(path)], capture_output=True, text=True, timeout=60)
    header, _, row = shown.stdout.splitlines()[2:5]
    assert header.split()[:4] == ["backend", "solver", "gradient", "device"]
    assert row.split()[3] == "cpu"  # SciPy: on the CPU whatever auto chose


def test_version_1_files_still_read(tmp_path: Path) -> None:
    # a version-1 file, as this project published it before schema version 2
    published = ROOT / "tests" / "data" / "results-v1-stiff-robertson.h5"
    v1 = tmp_path / "v1.h5"
    shutil.copy(published, v1)
    run = store.read(v1)
    assert run.meta["schema_version"] == 1 and run.environment["gpus"] == []
    assert len(run.records) > 1
    for r in run.records:  # a machine without a GPU ran every case on its CPU
        assert r["device"] == "cpu" and r["device_name"] == run.environment["cpu_model"]
        assert r["device_requested"] is None
    assert " cpu " in table.table(run.records).splitlines()[3]
    # the file's machine labels its records, so compare can refuse another machine's file
    assert {r["hardware"] for r in run.records} == {f"{run.environment['cpu_model']} x2"}
    other = [{**r, "hardware": "AMD EPYC x2"} for r in run.records]
    comp = cmp.compare(run.records, other)
    assert comp.cases and len(cmp.mixed_hardware(comp)) == len(comp.cases)
    # from a machine with a GPU, version 1 cannot say where JAX ran: unknown, not guessed
    with h5py.File(v1, "r+") as f:
        f["environment"].attrs["gpus"] = json.dumps([{"index": 0, "name": "NVIDIA H100"}])
    run = store.read(v1)
    assert all(r["device"] is None for r in run.records)
    assert table.device_cell(run.records[0]) == "-"
    assert run.records[0]["hardware"].endswith("; NVIDIA H100 (driver ?)")


def test_compare_refuses_to_pair_cases_across_devices() -> None:
    base = {
        "kind": "ode",
        "problem": "p",
        "backend": "diffrax",
        "solver": "Tsit5",
        "gradient_method": "RecursiveCheckpointAdjoint",
        "rtol": 1e-6,
        "status": "ok",
        "solve_samples": [1e-3] * 5,
    }
    cpu, gpu = {**base, "device": "cpu"}, {**base, "device": "cuda", "solve_samples": [9e-3] * 5}
    comp = cmp.compare([cpu], [gpu])
    assert not comp.cases and comp.only_old == [cpu] and comp.only_new == [gpu]
    text = cmp.render(comp)
    assert "p diffrax Tsit5 RecursiveCheckpointAdjoint rtol=1e-06 on cuda" in text
    # and it says why they were not paired, and what to do
    assert "1 of these ran on another device in the other file (e.g. p diffrax Tsit5 " \
        "RecursiveCheckpointAdjoint rtol=1e-06 on cpu -> cuda)" in text
    assert "run both on the same --device" in text
    comp = cmp.compare([cpu, gpu], [gpu, cpu])
    assert [cc.key[5] for cc in comp.cases] == ["cuda", "cpu"]
    assert all(c.ratio == 1.0 for cc in comp.cases for c in cc.changes)


# --- on a GPU (skipped with the reason elsewhere) -------------------------------------


def _need_cuda(backend: str) -> None:
    if not GPUS:
        pytest.skip(NO_GPU)
    _need(backend)
    missing = probe_cuda(backend)
    if missing:
        pytest.skip(f"{missing[0]}; fix: {missing[1]}")


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["diffrax", "torchdiffeq", "torchode"])
def test_ode_case_on_the_gpu_reads_back_cuda_and_its_memory(decay, backend: str) -> None:
    _need_cuda(backend)
    rec = _record(decay, backend, "cuda")
    assert rec["status"] == "ok", rec["reason"]
    assert rec["device"] == "cuda" and rec["device_name"] and "cpu" not in rec["device_name"]
    assert rec["alloc_peak_mb"] > 0 and rec["vram_max_mb"] is not None
    assert rec["gradient_tier"] == "pass"


@pytest.mark.gpu
@pytest.mark.slow
def test_the_default_keeps_jax_on_the_cpu_of_a_gpu_machine(decay) -> None:
    _need_cuda("diffrax")
    rec = _record(decay, "diffrax", "cpu")
    assert rec["status"] == "ok" and rec["device"] == "cpu", rec["reason"]
    assert "vram_max_mb" not in rec


def _cli_rows(*args: str, tmp: Path) -> list[dict]:
    r = subprocess.run([sys.executable, "-m", "sciml_bench.cli.main", "run", *args, "--quick",
                        "--json", "--out", str(tmp)], capture_output=True, text=True,
                       timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return [rec for rec in json.loads(r.stdout) if rec.get("kind") != "verdict"]


@pytest.mark.gpu
@pytest.mark.slow
def test_float32_rows_on_the_gpu_compute_in_float32_there(tmp_path: Path) -> None:
    """``--dtype float32 --device cuda``: the solve, loss and gradient in float32 on the
    GPU (read back from the library's arrays), scored against the float64 reference."""
    _need_cuda("diffrax")
    _need_cuda("torchdiffeq")
    rows = _cli_rows("nonstiff-lotka-volterra", "-b", "diffrax,torchdiffeq", "--device", "cuda",
                     "--dtype", "float32", tmp=tmp_path)  # fmt: skip
    assert sorted(r["backend"] for r in rows) == ["diffrax", "torchdiffeq"]
    for r in rows:
        assert r["status"] == "ok", r["reason"]
        assert (r["device"], r["dtype"], r["dtype_requested"]) == ("cuda", "float32", "float32")
        # float32 cannot reach the float64 tier; the error is real and bounded
        assert 1e-9 < r["solution_error"] < 1e-3, r["solution_error"]


@pytest.mark.gpu
@pytest.mark.slow
def test_an_array_problem_runs_on_the_gpu(tmp_path: Path) -> None:
    """A size-ladder problem on the GPU: Diffrax's array code (one vectorised template
    per species) at two sizes, on cuda, with a passing gradient."""
    _need_cuda("diffrax")
    rows = _cli_rows("stiff-robertson-groups", "--sizes", "1,4", "-b", "diffrax", "--device",
                     "cuda", tmp=tmp_path)  # fmt: skip
    assert sorted(r["size"] for r in rows) == [1, 4]
    for r in rows:
        assert r["status"] == "ok" and r["device"] == "cuda", r["reason"]
        assert r["gradient_tier"] == "pass", r["gradient_error"]
