"""float32 and fixed steps (``run --dtype``, ``--dt``): the fixed-step solvers against
explicit Euler's exact values, the step bound, the case matrix, the CLI's errors, and one
worker run of the spiral neural ODE in float32 at a fixed RK4 step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from sciml_bench.backends.base import CaseOptions, fixed_step_count
from sciml_bench.measure.status import SolverFailure, Status
from sciml_bench.problem import reference, spec

DATA = Path(__file__).parent / "data"
K, DT, N = 0.5, 0.25, 4  # decay.toml: y' = -k y on [0, 1], saved at 0, .25, .5, .75, 1


@pytest.fixture(scope="module")
def decay():
    p = spec.load(DATA / "decay.toml")
    return reference.compile_problem(p, None, np.zeros((len(p.t_save), p.n_state)))


def euler_exact() -> tuple[np.ndarray, float]:
    """Explicit Euler on y' = -k y at step dt: y_n = (1 - k dt)^n, on the save grid; the
    loss is y(1) (decay.toml: ``final``, weight 1), so dL/dk = -n dt (1 - k dt)^(n-1)."""
    y = (1 - K * DT) ** np.arange(N + 1)
    return y[:, None], -N * DT * (1 - K * DT) ** (N - 1)


def options(solver: str, gradient: str, dtype: str, dt: float | None, max_steps: int = 100):
    return CaseOptions(solver, gradient, 1e-6, 1e-8, max_steps, dtype=dtype, dt=dt)


@pytest.mark.parametrize("backend, solver, gradient", [
    # Diffrax: the gradient alone (its loss is y(1), a save point), DirectAdjoint: each
    # compiled call costs seconds of XLA compilation on 2 cores
    ("diffrax", "Euler", "DirectAdjoint"),
    ("torchdiffeq", "euler", "backprop"),
    ("torchode", "euler", "AutoDiffAdjoint"),
])  # fmt: skip
def test_fixed_step_euler_is_euler_in_float32(decay, backend: str, solver: str, gradient: str):
    """Each library's fixed-step Euler, in process, in float32: Euler's exact values (to
    float32's precision, far from the true solution's exp(-k t)), and the gradient
    computed in float32, through Euler's steps."""
    from sciml_bench import backends

    b = backends.get(backend)
    b.load()
    case = b.build(decay, options(solver, gradient, "float32", DT, max_steps=10))
    y_exact, g_exact = euler_exact()
    assert abs(y_exact[-1, 0] - np.exp(-K)) > 1e-2  # Euler's error, not the true solution
    if backend != "diffrax":
        sol = case.solve(decay.theta0)
        assert np.allclose(sol.y, y_exact, rtol=3e-7, atol=0)
        assert sol.stats["steps"] == N
    params = case.prepare(decay.theta0)
    loss, g = case.check_grad(case.timed_grad(params))
    assert g.dtype == np.float32  # the gradient was computed in float32, not float64
    assert loss == pytest.approx(y_exact[-1, 0], rel=3e-7)
    assert g[0] == pytest.approx(g_exact, rel=3e-6)


def test_a_step_beyond_the_step_bound_is_max_steps_before_any_solve(decay):
    from sciml_bench import backends

    assert fixed_step_count((0.0, 1.5), 0.05) == 30  # 1.5 / 0.05 rounds above 30
    assert fixed_step_count((0.0, 1.0), 0.3) == 4  # the last step shortened
    for name, solver, gradient in (("torchdiffeq", "rk4", "backprop"),
                                   ("diffrax", "Tsit5-fixed", "RecursiveCheckpointAdjoint"),
                                   ("torchode", "tsit5-fixed", "AutoDiffAdjoint")):  # fmt: skip
        with pytest.raises(SolverFailure) as info:  # 1 / 1e-4 = 10_000 steps > 100
            backends.get(name).build(decay, options(solver, gradient, "float64", 1e-4))
        assert info.value.status is Status.MAX_STEPS
        assert "10000 steps" in info.value.reason and "max_steps = 100" in info.value.reason
    with pytest.raises(ValueError, match="needs a step dt"):
        backends.get("torchdiffeq").build(decay, options("rk4", "backprop", "float64", None))
    with pytest.raises(ValueError, match="adaptive"):
        backends.get("torchdiffeq").build(decay, options("dopri5", "backprop", "float64", 0.1))


def test_plan_runs_float64_only_backends_in_float64_and_says_so(decay):
    from sciml_bench.run import ode, runner

    cases = runner.plan(decay, ["scipy", "torchdiffeq", "diffrax"], ["rk4", "Euler"],
                        dtype="float32", dt=0.25)  # fmt: skip
    got = {(c.backend, c.solver): (c.dtype, c.dtype_requested, c.dt) for c in cases}
    assert got == {
        ("scipy", "DOP853"): ("float64", "float32", None),  # adaptive default, float64 only
        ("torchdiffeq", "rk4"): ("float32", "float32", 0.25),
        ("diffrax", "Euler"): ("float32", "float32", 0.25),
    }
    ref = reference.missing(spec.load(DATA / "decay.toml"), "not needed here")
    job = runner.case_job(cases[0], decay, ref, runner.Settings())
    assert job["options"]["dtype"] == "float64" and job["options"]["dtype_requested"] == "float32"
    rec = ode.with_dtype_note({"backend": "scipy", "reason": ""}, job["options"])
    assert rec["dtype"] == "float64" and rec["dtype_requested"] == "float32"
    assert rec["reason"] == "scipy computes in float64 only: it ran in float64 (float32 was asked for)"
    assert "dt" not in rec


def test_table_shows_dtype_and_step():
    from sciml_bench.results.table import control_cell, solver_cell

    assert solver_cell({"solver": "rk4", "dtype": "float32", "dtype_requested": "float32"}) == "rk4 float32"
    assert solver_cell({"solver": "LSODA", "dtype": "float64", "dtype_requested": "float32"}) == (
        "LSODA float64 (asked float32)")
    assert solver_cell({"solver": "Tsit5", "dtype": "float64"}) == "Tsit5"
    assert control_cell({"rtol": 1e-6, "dt": 0.05}) == "dt=0.05"
    assert control_cell({"rtol": 1e-6}) == "1e-06"


def cli(*args: str):
    from sciml_bench.cli.main import main

    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("args, message", [
    (("--solver", "rk4"), "--solver rk4 is a fixed-step solver: give its step with --dt"),
    (("-b", "torchdiffeq", "--dt", "0.05"),
     "--dt applies to fixed-step solvers; torchdiffeq would run its adaptive default"),
    (("-b", "torchdiffeq", "--solver", "rk4,dopri5", "--dt", "0.05"),
     "torchdiffeq's dopri5 is adaptive: pick a fixed-step solver (--solver euler, rk4)"),
    (("-b", "scipy", "--dt", "0.05"), "leave scipy out (-b): it offers no fixed-step solver"),
    (("-b", "torchdiffeq", "--solver", "rk4", "--dt", "0.05", "--sweep"),
     "--dt runs fixed steps, which have no error control: drop --sweep"),
    (("-b", "torchdiffeq", "--dt", "0"), "0.0 is not in the range x>0"),
])  # fmt: skip
def test_cli_step_errors(args: tuple[str, ...], message: str):
    r = cli("run", "nonstiff-spiral-node", *args)
    assert r.exit_code == 2, r.output
    assert message in r.output
    assert "Traceback" not in r.output


def test_cli_dtype_applies_to_single_trajectories_and_is_documented():
    r = cli("run", "ensemble-lorenz", "--dtype", "float32")
    assert r.exit_code == 2
    assert "--dtype applies to single-trajectory problems" in r.output
    r = cli("run", "--help")
    assert "--dtype [float64|float32]" in r.output and "--dt FLOAT" in r.output
    assert "Step of a fixed-step solver" in r.output


def test_list_json_shows_fixed_step_solvers_and_dtypes():
    import json

    r = cli("list", "--json")
    assert r.exit_code == 0
    by_name = {b["name"]: b for b in json.loads(r.output)["backends"]}
    assert by_name["torchdiffeq"]["fixed_step_solvers"] == ["euler", "rk4"]
    assert by_name["diffrax"]["fixed_step_solvers"] == ["Euler", "Tsit5-fixed"]
    assert by_name["torchode"]["fixed_step_solvers"] == ["euler", "tsit5-fixed"]
    assert by_name["julia"]["fixed_step_solvers"] == ["Tsit5-fixed"]
    assert by_name["scipy"]["dtypes"] == ["float64"]
    assert by_name["torchdiffeq"]["dtypes"] == ["float64", "float32"]
    text = cli("list").output
    assert "rk4 (fixed step, --dt)" in text and "dtypes: float64, float32" in text


@pytest.mark.slow
def test_spiral_float32_rk4_worker_row_is_honest():
    """The issue's command, in one quick worker: the row computed in float32 at dt 0.05,
    scored against the float64 adaptive reference (its solution error is the fixed step's
    and float32's, far above the reference's own 1e-10-class error)."""
    from sciml_bench.run import runner

    p = spec.load("nonstiff-spiral-node")
    ref = reference.get(p)
    problem = reference.compile_problem(p, ref)
    (case,) = runner.plan(problem, ["torchdiffeq"], ["rk4"], dtype="float32", dt=0.05)
    job = runner.case_job(case, problem, ref, runner.Settings(repeats=2, steady_budget_s=2.0))
    rec = runner.run_job_once(job, budget_s=120.0)
    assert rec["status"] == "ok", rec.get("reason")
    assert rec["dtype"] == "float32" and rec["dtype_requested"] == "float32"
    assert rec["dt"] == 0.05 and rec["steps"] == 30 and rec["solver"] == "rk4"
    assert 1e-6 < rec["solution_error"] < 1e-3
    assert np.isfinite(rec["gradient_error"]) and rec["gradient_tier"] in ("pass", "warn", "fail")
    assert rec["reference_method"] == ref.method  # the float64 reference, unchanged
    assert np.asarray(rec["y"]).dtype == np.float64  # float32 values, widened exactly
    assert np.all(np.asarray(rec["y"], np.float32) == np.asarray(rec["y"]))


def test_compare_never_pairs_float32_or_fixed_step_rows_with_float64():
    from sciml_bench.results.compare import case_key, key_label

    row = {"problem": "p", "backend": "torchdiffeq", "solver": "rk4", "gradient_method": "backprop",
           "rtol": 1e-6, "device": "cpu", "dtype": "float64", "kind": "ode"}  # fmt: skip
    f32 = {**row, "dtype": "float32", "dt": 0.05}
    assert case_key(row) != case_key(f32) != case_key({**f32, "dt": 0.1})
    assert case_key(row)[-1] == "" and case_key(f32)[-1] == "float32/dt=0.05"
    assert "float32/dt=0.05" in key_label(case_key(f32))
