"""Training a neural ODE to a target loss (``sciml-bench run NAME --train``).

Real components throughout: the generated df/dtheta against complex step, the
forward-sensitivity gradient against the finite-difference reference, each framework's
own optimizer replayed against Adam's formula, real workers killed at their budget, and
a quick CLI run read back from its HDF5 file. ``tests/data/train-tiny.toml`` (23
parameters, a network whose inputs read a named parameter) keeps them fast.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sciml_bench import backends
from sciml_bench.backends.base import CaseOptions, TrainingNotOffered
from sciml_bench.measure import metrics
from sciml_bench.measure.training import DEPART_TOL, curve_agreement, time_to_target
from sciml_bench.problem import codegen, reference, spec, training_reference
from sciml_bench.problem.sensitivity import Sensitivities
from sciml_bench.problem.spec import ProblemError
from sciml_bench.problem.training import Adam, AdamState, Training, adam_loop, adam_update
from sciml_bench.run import train
from sciml_bench.run.runner import CaseSpec, run_job_once

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "data" / "train-tiny.toml"
#: every constant off its usual default, and a large ε that shapes every update: a library
#: that dropped any of them (or kept its own default) moves θ differently
ODD_ADAM = Adam(learning_rate=0.03, beta1=0.8, beta2=0.95, eps=0.3)


@pytest.fixture(scope="module")
def tiny() -> Any:
    problem = spec.load(TINY)
    ref = reference.get(problem)
    return problem, ref, reference.compile_problem(problem, ref)


def options(backend: Any, cp: Any) -> CaseOptions:
    return CaseOptions(backend.default_solver(cp.stiff), backend.default_gradient(cp), cp.rtol,
                       cp.atol, cp.max_steps)  # fmt: skip


# --- the [training] section -----------------------------------------------------------------


def test_training_sections_of_the_shipped_problems() -> None:
    spiral = spec.load("nonstiff-spiral-node").training
    ude = spec.load("stiff-robertson-ude").training
    assert spiral == Training(Adam(0.05, 0.9, 0.999, 1e-8), 300, 1.0, 1, 20)
    assert ude is not None and ude.adam.learning_rate == 0.01 and ude.target_loss == 1e-8
    assert spec.load("stiff-robertson").training is None
    quick = spiral.quick(True)
    assert quick.iterations == 5 and quick.compared == 5 and quick.adam == spiral.adam
    assert spiral.quick(False) is spiral


@pytest.mark.parametrize(
    ("change", "key", "reason"),
    [
        ({"eps": None}, "training.eps", "missing; a [training] section declares"),
        ({"optimizer": "sgd"}, "training.optimizer", "unknown optimizer; use one of adam"),
        ({"beta2": 1.0}, "training.beta2", "expected a number in [0, 1)"),
        ({"learning_rate": -0.1}, "training.learning_rate", "expected a positive number"),
        ({"iterations": 0}, "training.iterations", "expected an integer in [1,"),
        ({"record_every": 41}, "training.record_every", "expected an integer in [1, 40]"),
        ({"momentum": 0.9}, "training.momentum", "unknown key (allowed: optimizer,"),
        ({"target_loss": "low"}, "training.target_loss", "expected a number, got str"),
    ],
)
def test_training_section_errors_name_file_key_and_reason(change: dict, key: str, reason: str):
    data = tomllib.loads(TINY.read_text())
    for k, v in change.items():
        if v is None:
            del data["training"][k]
        else:
            data["training"][k] = v
    with pytest.raises(ProblemError) as err:
        spec.from_dict(data, source="my.toml")
    assert err.value.key == key and reason in err.value.reason
    assert str(err.value).startswith(f"my.toml: [{key}]: ") and "\n" not in str(err.value)


def test_adam_update_is_the_bias_corrected_formula() -> None:
    adam, g1, g2 = Adam(0.1, 0.9, 0.99, 1e-8), np.array([2.0, -1.0]), np.array([1.0, 1.0])
    state = AdamState.zeros(2)
    th1 = adam_update(np.zeros(2), g1, state, adam)
    np.testing.assert_allclose(th1, -0.1 * g1 / (np.abs(g1) + 1e-8))  # step 1: lr·sign(g)
    th2 = adam_update(th1, g2, state, adam)
    m = (0.9 * 0.1 * g1 + 0.1 * g2) / (1 - 0.9**2)
    v = (0.99 * 0.01 * g1**2 + 0.01 * g2**2) / (1 - 0.99**2)
    np.testing.assert_allclose(th2, th1 - 0.1 * m / (np.sqrt(v) + 1e-8), rtol=1e-14)


# --- the reference gradient: forward sensitivities --------------------------------------------


@pytest.mark.parametrize("name", ["stiff-robertson-ude", "nonstiff-spiral-node", str(TINY)])
def test_generated_param_jacobian_is_df_dtheta(name: str) -> None:
    """``jac_p`` against complex step through the generated RHS, at a non-trivial state."""
    p = spec.load(name)
    rhs = codegen.load_python(codegen.generate(p, "numpy"))["rhs"]
    jac_p = codegen.load_python(codegen.param_jacobian_source(p))["jac_p"]
    rng = np.random.default_rng(0)
    theta = np.asarray(p.theta0) + 0.1 * rng.standard_normal(p.n_params)  # biases off zero
    y = np.asarray(p.y0) + 0.3 * rng.random(p.n_state)
    F = jac_p(0.3, y, theta)
    cs = np.empty_like(F)
    for j in range(p.n_params):
        z = theta.astype(complex)
        z[j] += 1e-30j
        cs[:, j] = np.imag(rhs(0.3, y, z)) / 1e-30
    np.testing.assert_allclose(F, cs, rtol=1e-12, atol=1e-12 * np.max(np.abs(cs)))
    assert np.count_nonzero(F) > p.n_params // 2  # not trivially zero


@pytest.mark.parametrize("name", ["stiff-robertson", "nonstiff-spiral-node", str(TINY)])
def test_sensitivity_gradient_matches_the_fd_reference_at_theta0(name: str) -> None:
    """Stiff (BDF with the augmented Jacobian), 252 network weights (directional reference)
    and a network whose inputs read a named parameter: within the FD reference's accuracy."""
    p = spec.load(name)
    ref = reference.get(p)
    cp = reference.compile_problem(p, ref)
    loss, g = Sensitivities(p, cp).loss_and_grad(cp.theta0)
    assert loss == pytest.approx(ref.loss, rel=1e-8)
    if ref.directions:
        err = metrics.directional_error(g, ref.directions, ref.directional_derivatives)
    else:
        err = metrics.gradient_error(g, np.asarray(ref.gradient), cp.theta0, cp.log_params)
    assert err["rel"] < 1e-5 and err["cosine"] > 1 - 1e-10


# --- the library's own optimizer, with the declared constants ---------------------------------


def replay(backend: Any, cp: Any, adam: Adam, steps: int = 3) -> list[tuple[Any, Any, Any]]:
    """``(θ_k, g_k, θ_{k+1})`` of ``steps`` iterations of the backend's own training loop,
    ``g_k`` the same library's gradient at θ_k (its ODE case)."""
    opts = options(backend, cp)
    loop, case = backend.build_training(cp, opts, adam), backend.build(cp, opts)
    theta, out = loop.parameters(), []
    np.testing.assert_array_equal(theta, cp.theta0)
    for _ in range(steps):
        loss = loop.check(loop.step())
        expected_loss, g = case.loss_and_grad(theta)
        assert loss == pytest.approx(expected_loss, rel=1e-12)
        out.append((theta, g, loop.parameters()))
        theta = out[-1][2]
    return out


def replay_error(steps: list[tuple[Any, Any, Any]], adam: Adam) -> float:
    """Largest |θ_{k+1} − Adam(θ_k, g_k)|, Adam the NumPy formula with ``adam``'s constants."""
    state, worst = AdamState.zeros(steps[0][0].size), 0.0
    for theta, g, after in steps:
        worst = max(worst, float(np.max(np.abs(after - adam_update(theta, g, state, adam)))))
    return worst


@pytest.mark.slow
@pytest.mark.parametrize("name", ["torchdiffeq", "torchode", "diffrax"])
def test_adam_constants_reach_the_framework(name: str, tiny: Any) -> None:
    b = backends.get(name)
    if not b.availability().ok:
        pytest.skip(f"{name} is not installed: {b.availability().reason}")
    b.load()
    steps = replay(b, tiny[2], ODD_ADAM)
    assert replay_error(steps, ODD_ADAM) < 1e-12
    # an optimizer with another constant is caught: ε, β1, β2 or the learning rate
    for other in (replace(ODD_ADAM, eps=0.2), replace(ODD_ADAM, beta1=0.9),
                  replace(ODD_ADAM, beta2=0.999), replace(ODD_ADAM, learning_rate=0.02)):
        assert replay_error(steps, other) > 1e-6, other


def test_scipy_says_why_it_cannot_train(tiny: Any) -> None:
    _, _, cp = tiny
    b = backends.get("scipy")
    with pytest.raises(TrainingNotOffered, match="computes no gradient of its own"):
        b.build_training(cp, options(b, cp), ODD_ADAM)


# --- curve agreement and time to target -------------------------------------------------------


def test_curve_agreement_flags_a_gradient_wrong_away_from_theta0(tiny: Any) -> None:
    """A gradient exact at θ0 (it passes the gradient check there) and wrong elsewhere,
    ``g(θ) + 3 (θ − θ0)``, departs from the reference curve; torchdiffeq's does not."""
    problem, ref, cp = tiny
    k = problem.training.agreement_iterations
    curve = training_reference.get(problem, ref, problem.training).loss
    assert len(curve) == k
    sens = Sensitivities(problem, cp)
    theta0 = np.asarray(cp.theta0)

    def perturbed(theta: np.ndarray) -> tuple[float, np.ndarray]:
        loss, g = sens.loss_and_grad(theta)
        return loss, g + 3.0 * (theta - theta0)

    bad = adam_loop(perturbed, theta0, problem.training.adam, k)
    flagged = curve_agreement(range(k), bad.loss, curve, k)
    assert flagged.tier == "fail" and flagged.deviation > DEPART_TOL
    assert flagged.departed_at is not None and 1 <= flagged.departed_at < k
    assert bad.loss[0] == pytest.approx(curve[0], rel=1e-12)  # identical at θ0

    b = backends.get("torchdiffeq")
    b.load()
    good = adam_loop(b.build(cp, options(b, cp)).loss_and_grad, theta0, problem.training.adam, k)
    agreed = curve_agreement(range(k), good.loss, curve, k)
    assert agreed.tier == "pass" and agreed.departed_at is None and agreed.compared == k


def test_time_to_target_with_and_without_compilation() -> None:
    seconds = [5.0, 0.1, 0.3, 0.2, 0.1]
    hit = time_to_target(3, seconds)
    assert hit.iteration == 3 and hit.seconds == pytest.approx(5.6)
    assert hit.warm_seconds == pytest.approx(5.6 - 5.0 + 0.15)  # median of the others
    assert time_to_target(None, seconds).seconds is None
    assert curve_agreement([0, 1], [1.0, float("nan")], [1.0, 1.0], 2).departed_at == 1


# --- workers: a budget kill keeps the curve, an explicit solver on a stiff problem ------------


def job_for(cp: Any, backend: str, training: Training, curve: list[float] | None = None,
            max_steps: int | None = None) -> dict[str, Any]:  # fmt: skip
    b = backends.get(backend)
    spec_ = CaseSpec(backend, b.default_solver(cp.stiff), b.default_gradient(cp), cp.rtol,
                     cp.atol, max_steps or cp.max_steps)  # fmt: skip
    ref = {"loss": curve or [], "iterations": len(curve or []), "method": "test"}
    return train.training_job(spec_, cp, training, ref)


@pytest.mark.slow
def test_a_budget_kill_keeps_the_partial_curve(tiny: Any) -> None:
    problem, _, cp = tiny
    endless = replace(problem.training, iterations=10**6, record_every=2)
    rec = run_job_once(job_for(cp, "torchdiffeq", endless), budget_s=12)
    assert rec["status"] == "budget_exceeded", rec["reason"]
    done, its = rec["iterations_done"], rec["curve_iteration"]
    assert done > 2 and its[0] == 0 and its[-1] <= done - 1 and its == sorted(set(its))
    assert len(rec["iteration_samples"]) == done and len(rec["curve_loss"]) == len(its)
    assert f"budget, with {done} of 1000000 iterations done" in rec["reason"]
    assert f"curve up to iteration {its[-1]} is kept" in rec["reason"]
    assert rec["curve_loss"][0] == pytest.approx(reference.get(problem).loss, rel=1e-4)
    assert rec["ttfg_s"] > 0 and rec["phases"][0][2] > 0  # the first iteration's phase


@pytest.mark.slow
def test_an_explicit_solver_on_a_stiff_problem_cannot_train() -> None:
    data = tomllib.loads((ROOT / "tests" / "data" / "slow-stiff.toml").read_text())
    data["stiff"] = True
    data["training"] = {"optimizer": "adam", "learning_rate": 0.01, "beta1": 0.9,
                        "beta2": 0.999, "eps": 1e-8, "iterations": 50, "target_loss": 0.5}
    problem = spec.from_dict(data, source="slow-stiff")
    cp = reference.compile_problem(problem, None)  # a final loss: no observations needed
    rec = run_job_once(job_for(cp, "torchdiffeq", problem.training, max_steps=200), budget_s=120)
    assert rec["status"] == "max_steps" and rec["iterations_done"] == 0
    assert rec["reason"].startswith("cannot train: dopri5 (an explicit solver on a stiff "
                                    "problem) failed the first iteration")  # fmt: skip
    assert "training iteration 0 of 50" in rec["reason"]
    assert "target_reached" not in rec and rec.get("curve_loss") in (None, [])


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["diffrax", "torchdiffeq", "torchode"])
def test_training_on_the_gpu_reads_back_cuda(request: pytest.FixtureRequest, backend: str) -> None:
    from sciml_bench.backends.base import probe_cuda
    from sciml_bench.measure.memory import gpu_count

    if not gpu_count():
        pytest.skip("no NVIDIA GPU visible (NVML sees none)")
    if not backends.get(backend).availability().ok:
        pytest.skip(f"{backend}: {backends.get(backend).availability().reason}")
    missing = probe_cuda(backend)
    if missing:
        pytest.skip(f"{missing[0]}; fix: {missing[1]}")
    problem, _, cp = request.getfixturevalue("tiny")  # built only where a GPU can run it
    job = {**job_for(cp, backend, problem.training.quick(True)), "device": "cuda",
           "device_requested": "cuda"}  # fmt: skip
    rec = run_job_once(job, budget_s=300)
    assert rec["status"] == "ok", rec["reason"]
    assert rec["device"] == "cuda" and rec["alloc_peak_mb"] > 0 and rec["iterations_done"] == 5
    assert rec["curve_loss"][-1] < rec["curve_loss"][0]


# --- the command line -------------------------------------------------------------------------


@pytest.mark.slow
def test_quick_cli_training_run_prints_and_stores_its_rows(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "run", "--problem-file", str(TINY),
         "--train", "--quick", "-b", "torchdiffeq,scipy", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[0] == "train-tiny (training)" and lines[1].split()[:3] == ["backend", "solver",
                                                                             "gradient"]
    (row,) = [ln for ln in lines if ln.startswith("torchdiffeq")]
    assert " ok " in row and "5/5" in row and "pass" in row and "not reached" in row
    # an unavailable library is one line under the table, not a row (issue 42)
    assert not [ln for ln in lines if ln.startswith("scipy")]
    assert any(ln.startswith("  scipy: unavailable, no rows: ") for ln in lines), r.stdout

    from sciml_bench.results import store

    (path,) = tmp_path.glob("train-tiny-train-*.h5")
    run = store.read(path)
    assert run.meta["status"] == "complete"
    rec = next(x for x in run.records if x["backend"] == "torchdiffeq")
    assert rec["kind"] == "train" and rec["status"] == "ok" and rec["iterations_done"] == 5
    assert rec["curve_iteration"] == [0, 1, 2, 3, 4] and len(rec["iteration_samples"]) == 5
    assert np.all(np.diff(rec["curve_time_s"]) > 0) and rec["curve_loss"][-1] < rec["curve_loss"][0]
    assert rec["curve_tier"] == "pass" and rec["curve_compared"] == 5
    # one clock from the build's start; the gradients checked at the reference's iterates
    assert rec["time_to_target_clock"].startswith("build start")
    assert rec["curve_time_s"][0] > rec["phases"][0][1] > 0
    assert rec["iterate_gradient_iterations"] == [0, 1, 3]
    assert 0 < rec["iterate_gradient_error"] < 1e-3 and len(rec["iterate_gradient_errors"]) == 3
    # tiered as an ODE row's: against the reference's own error at the iterates
    assert 0 < rec["iterate_reference_error"] < 1e-9 and len(rec["iterate_reference_errors"]) == 3
    assert rec["iterate_gradient_tier"] in ("pass", "warn") and rec["iterate_gradient_check"] == "full"
    assert "verdict (time to target): no row reached the target loss" in r.stdout
    assert len(rec["reference_curve_loss"]) == 5 and rec["iteration_s"] > 0
    assert rec["final_loss"] == rec["curve_loss"][-1] and rec["target_reached"] is False
    assert (rec["learning_rate"], rec["eps"]) == (0.05, 1e-8)
    assert "torch.optim.Adam(lr=0.05, betas=(0.9, 0.999), eps=1e-08" in rec["case_info"]["optimizer"]
    scipy_rec = next(x for x in run.records if x["backend"] == "scipy")
    assert scipy_rec["kind"] == "train" and scipy_rec["status"] == "unavailable"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["stiff-robertson", "--train"], "stiff-robertson has no [training] section; train one"),
        (["ensemble-lorenz", "--train"], "ensemble-lorenz is an ensemble problem"),
        (["nonstiff-spiral-node", "--train", "--tolerances", "1e-4"],
         "--tolerances does not apply to --train"),
        (["nonstiff-spiral-node", "--train", "--cold", "2"], "--cold does not apply to --train"),
        (["cnn", "--train"], "the CNN baselines (`cnn`) train with --target-accuracy"),
    ],
)
def test_train_option_errors_are_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sciml_bench.cli.main import main

    result = CliRunner().invoke(main, ["run", *args, "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1
    assert not list(tmp_path.glob("*.h5"))


def test_json_record_of_a_training_row() -> None:
    from sciml_bench.results.table import json_record

    rec = {"kind": "train", "backend": "diffrax", "status": "ok", "iteration_s": 0.01,
           "time_to_target_s": 2.0, "curve_tier": "pass", "curve_loss": [1.0, 0.5]}
    out = json_record(rec)
    assert out["iteration_s"] == 0.01 and out["curve_tier"] == "pass" and out["kind"] == "train"
    assert "curve_loss" not in out and json.dumps(out)
