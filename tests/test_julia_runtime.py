"""The Julia backend against SciPy, where Julia is installed and set up.

Skips, saying exactly what is missing, where it is not. The Julia side runs in a fresh
interpreter that imports juliacall first (this process may already hold torch, and torch
before juliacall is a known crash), exactly as a worker does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from sciml_bench.backends import julia_env

_found = julia_env.probe()
# e.g. "julia executable not found on PATH and PYTHON_JULIACALL_EXE unset"; a skip of a
# test marked julia is a failure under SCIML_BENCH_REQUIRE_JULIA=1 (tests/conftest.py)
_missing = "" if _found.ok else (
    _found.reason if _found.exe is None else f"{_found.reason}; {_found.fix}"
)

pytestmark = [pytest.mark.slow, pytest.mark.julia,
              pytest.mark.skipif(not _found.ok, reason=_missing or "Julia is usable")]

# A -> B -> C: two rates, a loss on every state at every save time and on the final state.
PROBLEM_TOML = """
name = "chain"
description = "A -> B -> C, first-order kinetics"
stiff = false

[state]
names = ["a", "b", "c"]
initial = [1.0, 0.0, 0.0]

[parameters]
k1 = 0.7
k2 = 0.3

[equations]
a = "-k1*a"
b = "k1*a - k2*b"
c = "k2*b"

[time]
span = [0.0, 5.0]
save = { linspace = [0.25, 5.0, 20] }

[loss]
kind = "final"
weights = [0.0, 1.0, 0.5]
"""

THETA = np.array([0.7, 0.3])
T_SAVE = np.linspace(0.25, 5.0, 20)
Y0 = np.array([1.0, 0.0, 0.0])
W = np.full((20, 3), 0.3)
OBS = np.full((20, 3), 0.4)
C = np.zeros((20, 3))
C[-1] = [0.0, 1.0, 0.5]

CASES = [
    # every solver with the default gradient, every gradient method with one solver
    *({"solver": s, "gradient": "forward_diff"} for s in ("Tsit5", "Vern7")),
    *({"solver": s, "gradient": "forward_diff"} for s in ("Rodas5P", "FBDF", "KenCarp4")),
    *(
        {"solver": "Rodas5P", "gradient": g}
        for g in (
            "gauss_adjoint",
            "gauss_adjoint_reversediff",
            "interpolating_adjoint",
            "interpolating_adjoint_checkpointed",
            "quadrature_adjoint",
        )
    ),
]

WORKER = textwrap.dedent(
    """
    import json, sys
    from sciml_bench.backends import julia_env
    julia_env.import_juliacall()  # first, as the worker does
    import numpy as np
    from sciml_bench.backends.base import CaseOptions
    from sciml_bench.backends.julia import JuliaBackend
    from sciml_bench.problem.compiled import CompiledProblem
    from sciml_bench.measure.status import SolverFailure

    problem = CompiledProblem.from_json(json.load(open(sys.argv[1])))
    backend = JuliaBackend()
    out = {"phases": backend.load(), "info": backend.load_info, "cases": []}
    for c in json.load(open(sys.argv[2])):
        options = CaseOptions(c["solver"], c["gradient"], 1e-9, 1e-11, c.get("max_steps", 10**5))
        rec = dict(c)
        case = backend.build(problem, options)
        try:
            sol = case.solve(problem.theta0)
            rec["y"], rec["stats"] = sol.y.tolist(), sol.stats
            loss, grad = case.loss_and_grad(problem.theta0)
            rec["loss"], rec["grad"] = loss, grad.tolist()
        except SolverFailure as e:
            rec["status"], rec["reason"], rec["t_reached"] = e.status.value, e.reason, e.t_reached
        out["cases"].append(rec)
    print("RESULT " + json.dumps(out, default=str))
    """
)


def scipy_solve(theta: np.ndarray, y0: np.ndarray = Y0) -> np.ndarray:
    k1, k2 = theta

    def f(t, y):
        return [-k1 * y[0], k1 * y[0] - k2 * y[1], k2 * y[1]]

    sol = solve_ivp(f, (0.0, 5.0), y0, method="DOP853", t_eval=T_SAVE, rtol=1e-13, atol=1e-15)
    assert sol.success
    return sol.y.T


def loss(y: np.ndarray, obs: np.ndarray = OBS) -> float:
    return float(np.sum(W * (y - obs) ** 2) + np.sum(C * y))


def scipy_grad(theta: np.ndarray) -> np.ndarray:
    g = np.zeros_like(theta)
    for i in range(len(theta)):
        h = 1e-5 * theta[i]
        e = np.zeros_like(theta)
        e[i] = h
        g[i] = (loss(scipy_solve(theta + e)) - loss(scipy_solve(theta - e))) / (2 * h)
    return g


def chain_problem():
    """The chain as a worker receives it: its model takes log k1, log k2 (codegen's
    default), so the single cases check the log-θ model and its chain rule back to ∂L/∂k,
    and the ensembles the θ form the backend derives for them."""
    from sciml_bench.problem import codegen, spec
    from sciml_bench.problem.compiled import CompiledProblem

    p = spec.loads(PROBLEM_TOML)
    assert list(p.log_params) == [True, True]
    return CompiledProblem(
        name="chain",
        stiff=False,
        state_names=["a", "b", "c"],
        param_names=["k1", "k2"],
        y0=Y0,
        theta0=THETA,
        log_params=np.array(p.log_params),
        t_span=(0.0, 5.0),
        t_save=T_SAVE,
        rtol=1e-9,
        atol=1e-11,
        max_steps=10**5,
        loss_W=W,
        loss_O=OBS,
        loss_C=C,
        source={"julia": codegen.julia_source(p)},
    )


def run_worker(tmp: Path, script: str, *args: str) -> dict:
    """Run ``script`` in a fresh interpreter (juliacall first); its ``RESULT`` line."""
    (tmp / "worker.py").write_text(script)
    out = subprocess.run(
        [sys.executable, str(tmp / "worker.py"), *args],
        capture_output=True,
        text=True,
        timeout=3000,
        cwd=Path(__file__).resolve().parent.parent,
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert out.returncode == 0 and lines, out.stdout[-4000:] + out.stderr[-4000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("julia")
    problem = chain_problem()
    cases = [*CASES, {"solver": "Tsit5", "gradient": "forward_diff", "max_steps": 3}]
    (tmp / "problem.json").write_text(json.dumps(problem.to_json()))
    (tmp / "cases.json").write_text(json.dumps(cases))
    return run_worker(tmp, WORKER, str(tmp / "problem.json"), str(tmp / "cases.json"))


def test_load_phases(results: dict):
    phases = results["phases"]
    assert phases["package_load"] > 0 and phases["juliacall_init"] > 0
    info = results["info"]
    assert info["pkgimage_valid"] is True  # setup precompiled it; loading did not
    assert "SciMLSensitivity" in info["versions"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['solver']}-{c['gradient']}")
def test_solve_and_gradient_match_scipy(results: dict, case: dict):
    (rec,) = [r for r in results["cases"] if r == r | case and "max_steps" not in r]
    assert "status" not in rec, rec.get("reason")
    y = np.array(rec["y"])
    np.testing.assert_allclose(y, scipy_solve(THETA), rtol=1e-6, atol=1e-9)
    assert rec["stats"]["steps"] > 0 and rec["stats"]["rhs_evals"] > 0
    assert rec["loss"] == pytest.approx(loss(scipy_solve(THETA)), rel=1e-6)
    np.testing.assert_allclose(rec["grad"], scipy_grad(THETA), rtol=1e-4)


def test_max_steps_is_a_status(results: dict):
    (rec,) = [r for r in results["cases"] if r.get("max_steps") == 3]
    assert rec["status"] == "max_steps"
    assert "ReturnCode.MaxIters" in rec["reason"]
    assert 0 < rec["t_reached"] < 5.0


# --- ensembles: 4 members, EnsembleThreads -------------------------------------------------

#: member m starts at a = 1 + m/10 and has rates (k1 s1_m, k2 s2_m); its data are OBS + m/100
N_MEMBERS = 4
ENS_SCALE = np.array([[1.0, 1.0], [0.8, 1.3], [1.2, 0.7], [0.9, 1.1]])
ENS_Y0 = np.array([[1.0 + m / 10, 0.0, 0.0] for m in range(N_MEMBERS)])
ENS_OBS = np.stack([OBS + m / 100 for m in range(N_MEMBERS)])
ENS_GRADIENTS = ("forward_diff", "gauss_adjoint")

ENSEMBLE_WORKER = textwrap.dedent(
    """
    import json, sys
    from sciml_bench.backends import julia_env
    julia_env.import_juliacall()  # first, as the worker does
    import numpy as np
    from sciml_bench.backends.base import CaseOptions, EnsembleNotOffered
    from sciml_bench.backends.julia import JuliaBackend
    from sciml_bench.problem.compiled import CompiledProblem
    from sciml_bench.problem.ensemble import Batch

    problem = CompiledProblem.from_json(json.load(open(sys.argv[1])))
    b = json.load(open(sys.argv[2]))
    batch = Batch(*(np.array(b[k]) for k in ("y0", "scale", "shift", "observations")))
    backend = JuliaBackend()
    backend.load()
    out = {"cases": []}
    for gradient in json.loads(sys.argv[3]):
        case = backend.build_ensemble(
            problem, CaseOptions("Tsit5", gradient, 1e-9, 1e-11, 10**5), batch, "independent"
        )
        sol = case.solve(problem.theta0)
        loss, grad = case.loss_and_grad(problem.theta0)
        out["cases"].append({"gradient": gradient, "y": sol.y.tolist(),
                             "steps": sol.steps.tolist(), "loss": loss, "grad": grad.tolist(),
                             "info": case.info})
    try:
        backend.build_ensemble(problem, CaseOptions("Tsit5", "forward_diff", 1e-9, 1e-11, 10),
                               batch, "coupled")
    except EnsembleNotOffered as e:
        out["coupled"] = str(e)
    print("RESULT " + json.dumps(out, default=str))
    """
)


def ensemble_loss(theta: np.ndarray) -> float:
    """The mean of the members' losses, by SciPy."""
    return float(np.mean([
        loss(scipy_solve(theta * ENS_SCALE[m], ENS_Y0[m]), ENS_OBS[m]) for m in range(N_MEMBERS)
    ]))  # fmt: skip


@pytest.fixture(scope="module")
def ensemble_results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("julia-ensemble")
    batch = {"y0": ENS_Y0.tolist(), "scale": ENS_SCALE.tolist(),
             "shift": np.zeros_like(ENS_SCALE).tolist(), "observations": ENS_OBS.tolist()}  # fmt: skip
    (tmp / "problem.json").write_text(json.dumps(chain_problem().to_json()))
    (tmp / "batch.json").write_text(json.dumps(batch))
    return run_worker(
        tmp, ENSEMBLE_WORKER, str(tmp / "problem.json"), str(tmp / "batch.json"),
        json.dumps(ENS_GRADIENTS),
    )  # fmt: skip


@pytest.mark.parametrize("gradient", ENS_GRADIENTS)
def test_ensemble_matches_scipy_member_by_member(ensemble_results: dict, gradient: str):
    (rec,) = [r for r in ensemble_results["cases"] if r["gradient"] == gradient]
    y = np.array(rec["y"])
    assert y.shape == (N_MEMBERS, len(T_SAVE), 3)
    for m in range(N_MEMBERS):
        want = scipy_solve(THETA * ENS_SCALE[m], ENS_Y0[m])
        np.testing.assert_allclose(y[m], want, rtol=1e-6, atol=1e-9, err_msg=f"member {m}")
    # independent members take their own steps (per-member counters, not one batch value)
    steps = np.array(rec["steps"])
    assert np.all(steps > 0) and len(set(steps.tolist())) > 1
    assert rec["loss"] == pytest.approx(ensemble_loss(THETA), rel=1e-6)
    h = 1e-5 * THETA
    fd = [(ensemble_loss(THETA + np.eye(2)[i] * h[i]) - ensemble_loss(THETA - np.eye(2)[i] * h[i]))
          / (2 * h[i]) for i in range(2)]  # fmt: skip
    np.testing.assert_allclose(rec["grad"], fd, rtol=1e-4)
    assert rec["info"]["ensemble"] == "SciMLBase.EnsembleThreads()"


def test_coupled_ensemble_is_not_offered_on_the_cpu(ensemble_results: dict):
    assert "EnsembleGPUArray" in ensemble_results["coupled"]


ARRAY_WORKER = textwrap.dedent(
    """
    import json, sys
    from sciml_bench.backends import julia_env
    juliacall = julia_env.import_juliacall()  # first, as the worker does
    import numpy as np
    from sciml_bench.backends.base import CaseOptions
    from sciml_bench.backends.compiled import model_parameters
    from sciml_bench.backends.julia import JuliaBackend
    from sciml_bench.problem import codegen, reference, spec
    from sciml_bench.problem.compiled import log_scaled
    from sciml_bench.problem.generated import load_python

    jl = juliacall.Main
    out = {"rhs": [], "cases": []}
    rng = np.random.default_rng(0)
    for text in json.load(open(sys.argv[1])):
        p = spec.loads(text) if text.startswith("name") else spec.load(text)
        mod = jl.seval("Module(:ArrayRHS)")
        jl.Base.include_string(mod, codegen.generate(p, "julia"))
        f_np = load_python(codegen.generate(p, "numpy"))["rhs"]
        for _ in range(3):
            y, th = rng.uniform(0.1, 1, p.n_state), np.asarray(p.theta0) * rng.uniform(0.5, 1.5, p.n_params)
            du = np.zeros(p.n_state)
            u = model_parameters(th, log_scaled(p))  # the model takes log θ where log-scaled
            jl.Base.invokelatest(mod.seval("rhs!"), du, y, u, 2.0)
            out["rhs"].append([du.tolist(), f_np(2.0, y, th).tolist()])
    p = spec.at_size(spec.load("stiff-robertson-groups"), 3)
    ref = reference.get(p)
    problem = reference.compile_problem(p, ref)
    backend = JuliaBackend()
    backend.load()
    for kind in ("dense", "sparse"):
        opts = CaseOptions("FBDF", "forward_diff", 1e-8, 1e-12, 10**5, extra={"jacobian": kind})
        case = backend.build(problem, opts)
        sol = case.solve(problem.theta0)
        _, grad = case.loss_and_grad(problem.theta0)  # ∂L/∂θ from the log-k model's ∂L/∂u
        out["cases"].append({"kind": kind, "y": sol.y.tolist(), "ref": ref.y,
                             "grad": grad.tolist(), "ref_grad": ref.gradient})
    print("RESULT " + json.dumps(out))
    """
)


def test_array_rhs_and_sparse_jacobian_cases(tmp_path: Path):
    """Julia's broadcasting rhs!, fed the model's parameters (log θ where log-scaled),
    equals NumPy's f(y, θ) for every operator (a per-element parameter, indices and step
    included) and the 2-D Brusselator; FBDF with a dense and with a sparse jac_prototype
    solves ROBER's groups to the reference, and its gradient, converted from ∂L/∂log k,
    agrees with the reference's."""
    operators = (Path(__file__).parent / "test_julia_static.py").read_text()
    operators = operators.split('ARRAY_OPERATORS = """', 1)[1].split('"""', 1)[0].strip()
    (tmp_path / "problems.json").write_text(json.dumps([operators, "stiff-brusselator-2d"]))
    res = run_worker(tmp_path, ARRAY_WORKER, str(tmp_path / "problems.json"))
    for got, want in res["rhs"]:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    for case in res["cases"]:
        y, ref = np.asarray(case["y"]), np.asarray(case["ref"])
        assert np.max(np.abs(y - ref) / np.maximum(np.abs(ref), 1e-8)) < 1e-4, case["kind"]
        np.testing.assert_allclose(case["grad"], case["ref_grad"], rtol=1e-3)
