"""The device axis of ensembles: the pinned worker, the read-back, the records.

On this CPU-only machine a ``cuda`` ensemble request must end as rows that name what is
missing (a CPU-only torch build, a JAX without a CUDA backend), never as a CPU run, and
SciPy, which runs only on the CPU, must run there and say so. The GPU tests (marked
``gpu``) skip with the exact reason when no NVIDIA GPU is visible;
``benchmarks/gpu_checks.py`` runs them on the GPU machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sciml_bench import backends
from sciml_bench.backends.base import CaseOptions, probe_cuda
from sciml_bench.measure import device
from sciml_bench.measure.environment import cpu_model
from sciml_bench.measure.memory import gpu_count
from sciml_bench.problem import ensemble as ens
from sciml_bench.problem import ensemble_reference as er
from sciml_bench.problem import reference, spec
from sciml_bench.run import ode, runner
from sciml_bench.run.events import Events

GPUS = gpu_count()
NO_GPU = "no NVIDIA GPU visible (NVML sees none)"
FAST = runner.Settings(cold=1, repeats=2, warmups=1, budget_s=300.0, steady_budget_s=2.0)

# y' = -k y, members scale k and shift y0: every backend solves it in milliseconds
DECAY = """
name = "ens-decay"
stiff = false
[state]
names = ["y"]
initial = [1.0]
[parameters]
k = 0.5
[equations]
y = "-k*y"
[time]
span = [0.0, 1.0]
save = { linspace = [0.25, 1.0, 4] }
[tolerances]
rtol = 1.0e-7
atol = 1.0e-9
[loss]
kind = "final"
weights = [1.0]
[ensemble]
sizes = [2, 4]
sample = 2
[ensemble.vary]
k = { uniform = [0.5, 1.5], apply = "scale" }
y = { normal = [0.0, 0.1], apply = "shift" }
"""

#: every (backend, semantics) with an ensemble that can run on the GPU
ON_GPU = [("diffrax", "independent"), ("diffrax", "coupled"), ("torchdiffeq", "coupled"),
          ("torchode", "independent")]  # fmt: skip


@pytest.fixture(scope="module")
def decay(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    cache = tmp_path_factory.mktemp("ens-device")
    problem = spec.loads(DECAY, "ens-decay.toml")
    ref = er.get(problem, cache=cache)
    compiled = reference.compile_problem(problem, None)
    return problem, compiled, ref


def _need(backend: str) -> None:
    av = backends.get(backend).availability()
    if not av.ok:
        pytest.skip(f"{backend}: {av.reason}")


def _record(decay: tuple, backend: str, semantics: str, device: str, size: int = 4,
            solvers: tuple[str, ...] = (), job: dict | None = None) -> dict:  # fmt: skip
    """The job the runner makes for one rung of ``backend``'s ladder on ``device`` (with
    ``job``'s keys overridden), run in one real worker pinned as the runner pins it."""
    problem, compiled, ref = decay
    (ladder,) = runner.plan_ensemble(compiled, (semantics,), [size], [backend], solvers,
                                     devices=(device,))  # fmt: skip
    made = runner.ensemble_job(ladder, size, compiled, ens.to_json(problem.ensemble), None,
                               ref.to_json(), FAST)  # fmt: skip
    return runner.run_job_once({**made, **(job or {})}, 300.0)


# --- on this machine: no GPU, or no CUDA build ----------------------------------------


def test_ladders_follow_the_single_case_device_rule(decay: tuple) -> None:
    """``--device cpu,cuda``: a GPU-capable backend gets a ladder per device; SciPy runs
    once, on the CPU; under ``cuda`` alone SciPy runs on the CPU and says cuda was asked."""
    _, compiled, _ = decay
    both = runner.plan_ensemble(compiled, ("independent",), [4], ["diffrax", "scipy"],
                                devices=("cpu", "cuda"))  # fmt: skip
    got = [(s.backend, s.device, s.device_requested) for s in both]
    assert got == [("diffrax", "cpu", "cpu"), ("diffrax", "cuda", "cuda"), ("scipy", "cpu", "cpu")]
    (alone,) = runner.plan_ensemble(compiled, ("independent",), [4], ["scipy"], devices=("cuda",))
    assert (alone.device, alone.device_requested) == ("cpu", "cuda")
    job = runner.ensemble_job(alone, 4, compiled, {}, None, {}, FAST)
    assert (job["device"], job["device_requested"]) == ("cpu", "cuda")


def test_every_gpu_capable_ensemble_backend_can_be_asked_for_cuda() -> None:
    for name, _ in ON_GPU:  # every GPU-capable ensemble backend can be asked for cuda
        assert "cuda" in backends.get(name).devices, name


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "semantics"), ON_GPU)
def test_cuda_ensemble_without_a_gpu_names_what_is_missing(
    decay: tuple, backend: str, semantics: str
) -> None:
    """Never a CPU run under a ``cuda`` request: an ``error`` row whose reason is what
    the pinned worker found missing (the same words as the CLI's probe) and the fix."""
    _need(backend)
    missing = probe_cuda(backend)
    if missing is None:
        pytest.skip(f"{backend} has a working CUDA build here")
    rec = _record(decay, backend, semantics, "cuda")
    assert rec["status"] == "error", rec
    what, fix = missing
    assert rec["reason"] == f"{backend}: --device cuda: {what}. Fix: {fix}"
    if backend == "diffrax":  # a CPU-only jaxlib, or a CUDA plugin that finds no GPU
        assert what.startswith("jax ") and ("has no CUDA backend" in what or "found no GPU" in what)
    else:  # a CPU-only torch build (as here), or a CUDA build that sees no GPU
        assert what.startswith("torch ") and ("CPU-only build" in what or "sees no GPU" in what)
    assert "--device cpu" in fix
    assert rec["device_requested"] == "cuda" and "device" not in rec
    assert not rec.get("solve_samples") and not rec.get("grad_samples")
    assert rec["kind"] == "ensemble" and rec["semantics"] == semantics and rec["size"] == 4


@pytest.mark.slow
def test_scipy_ensemble_under_cuda_runs_on_the_cpu_and_says_so(decay: tuple) -> None:
    rec = _record(decay, "scipy", "independent", "cuda")
    assert rec["status"] == "ok", rec["reason"]
    assert (rec["device"], rec["device_requested"]) == ("cpu", "cuda")
    assert rec["device_name"] == cpu_model()
    assert rec["reason"] == device.cpu_only_note("scipy")
    assert rec["solution_error"] < 1e-5 and len(rec["solve_samples"]) == 2
    assert "vram_max_mb" not in rec and "alloc_peak_mb" not in rec


@pytest.mark.slow
def test_cpu_ensemble_rows_read_back_the_cpu(decay: tuple) -> None:
    _need("torchode")
    rec = _record(decay, "torchode", "independent", "cpu")
    assert rec["status"] == "ok", rec["reason"]
    assert (rec["device"], rec["device_requested"], rec["device_name"]) == (
        "cpu", "cpu", cpu_model())  # fmt: skip
    assert rec["reason"] == "" and "vram_max_mb" not in rec
    assert rec["gradient_tier"] == "pass" and rec["solution_error"] < 1e-5


def test_a_device_other_than_the_pinned_one_is_an_error_naming_both(
    decay: tuple, tmp_path: Path
) -> None:
    """The read-back shared with ODE cases, on a real torchode ensemble built on the CPU
    for a worker that was told it is on CUDA."""
    _need("torchode")
    problem, compiled, _ = decay
    batch = ens.batch(problem.ensemble, np.asarray(problem.y0), compiled.n_params, 2)
    opts = CaseOptions("dopri5", "AutoDiffAdjoint", 1e-7, 1e-9, 1000, device="cpu")
    case = backends.get("torchode").build_ensemble(compiled, opts, batch, "independent")
    case.solve(np.asarray(compiled.theta0))  # the read-back is of the last solution
    log = tmp_path / "events.jsonl"
    assert ode.placed(case, "cpu", "torchode", Events(str(log)), "first solve")
    assert not ode.placed(case, "cuda", "torchode", Events(str(log)), "first solve")
    events = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert events[-2] == {"device": "cpu", "device_name": cpu_model()}
    assert events[-1]["status"] == "error" and events[-1]["reason"] == (
        f"torchode: device mismatch after first solve: asked for cuda, the library reports "
        f"cpu ({cpu_model()})"
    )


def test_the_cli_refuses_cuda_ensembles_without_a_gpu() -> None:
    if GPUS:
        pytest.skip("a GPU is visible here")
    from click.testing import CliRunner

    from sciml_bench.cli.main import main

    r = CliRunner().invoke(main, ["run", "ensemble-lorenz", "--device", "cuda", "--sizes", "1"])
    assert r.exit_code == 2 and device.NO_GPU in r.output


# --- torchode's torch.compile variant ------------------------------------------------


@pytest.mark.slow
def test_torchode_compiled_solver_is_offered_and_recorded(decay: tuple) -> None:
    """``dopri5-compile``: torch.compile of torchode's solve (about a minute of
    TorchInductor compilation on 2 CPU cores, in TTFG). The size equals the sample, so
    the worker compiles one case, not a second one for the sample gradient."""
    _need("torchode")
    assert "dopri5-compile" in backends.get("torchode").solvers()
    rec = _record(decay, "torchode", "independent", "cpu", size=2, solvers=("dopri5-compile",))
    assert rec["status"] == "ok", rec["reason"]
    assert rec["solver"] == "dopri5-compile" and rec["case_info"]["compiled"] is True
    assert rec["solution_error"] < 1e-5 and rec["gradient_tier"] == "pass"
    assert rec["device"] == "cpu"


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
@pytest.mark.parametrize(("backend", "semantics"), ON_GPU)
def test_ensemble_on_the_gpu_reads_back_cuda_and_its_memory(
    decay: tuple, backend: str, semantics: str
) -> None:
    _need_cuda(backend)
    gpu = _record(decay, backend, semantics, "cuda")
    assert gpu["status"] == "ok", gpu["reason"]
    assert (gpu["device"], gpu["device_requested"]) == ("cuda", "cuda")
    assert gpu["device_name"] and gpu["device_name"] != cpu_model()
    assert gpu["alloc_peak_mb"] > 0 and gpu["vram_max_mb"] is not None
    assert gpu["solution_error"] < 1e-5 and gpu["gradient_tier"] == "pass"
    cpu = _record(decay, backend, semantics, "cpu")
    assert cpu["status"] == "ok" and cpu["device"] == "cpu", cpu["reason"]
    # the same members, the same maths: one float64 answer to the solver's tolerance
    assert gpu["loss"] == pytest.approx(cpu["loss"], rel=1e-6)
    assert gpu["steps_median"] == pytest.approx(cpu["steps_median"], abs=2)


def test_julia_ensembles_plan_per_device(decay: tuple) -> None:
    """Julia's single trajectories are CPU-only, its ensembles are not: under
    ``--device cpu,cuda`` it gets an independent ladder on each device and a coupled one
    (DiffEqGPU's EnsembleGPUArray) on cuda only; no CPU worker is spawned to refuse it."""
    _, compiled, _ = decay
    ladders = runner.plan_ensemble(compiled, ("independent", "coupled"), [4], ["julia"],
                                   devices=("cpu", "cuda"))  # fmt: skip
    got = [(s.semantics, s.device, s.device_requested) for s in ladders]
    assert got == [("independent", "cpu", "cpu"), ("independent", "cuda", "cuda"),
                   ("coupled", "cuda", "cuda")]  # fmt: skip
