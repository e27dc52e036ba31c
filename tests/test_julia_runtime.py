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
if not _found.ok:
    # e.g. "julia executable not found on PATH and PYTHON_JULIACALL_EXE unset"
    reason = _found.reason if _found.exe is None else f"{_found.reason}; {_found.fix}"
    pytest.skip(reason, allow_module_level=True)

pytestmark = pytest.mark.slow

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


def scipy_solve(theta: np.ndarray) -> np.ndarray:
    k1, k2 = theta

    def f(t, y):
        return [-k1 * y[0], k1 * y[0] - k2 * y[1], k2 * y[1]]

    sol = solve_ivp(f, (0.0, 5.0), Y0, method="DOP853", t_eval=T_SAVE, rtol=1e-13, atol=1e-15)
    assert sol.success
    return sol.y.T


def loss(y: np.ndarray) -> float:
    return float(np.sum(W * (y - OBS) ** 2) + np.sum(C * y))


def scipy_grad(theta: np.ndarray) -> np.ndarray:
    g = np.zeros_like(theta)
    for i in range(len(theta)):
        h = 1e-5 * theta[i]
        e = np.zeros_like(theta)
        e[i] = h
        g[i] = (loss(scipy_solve(theta + e)) - loss(scipy_solve(theta - e))) / (2 * h)
    return g


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from sciml_bench.problem import codegen, spec
    from sciml_bench.problem.compiled import CompiledProblem

    tmp = tmp_path_factory.mktemp("julia")
    problem = CompiledProblem(
        name="chain",
        stiff=False,
        state_names=["a", "b", "c"],
        param_names=["k1", "k2"],
        y0=Y0,
        theta0=THETA,
        log_params=np.array([False, False]),
        t_span=(0.0, 5.0),
        t_save=T_SAVE,
        rtol=1e-9,
        atol=1e-11,
        max_steps=10**5,
        loss_W=W,
        loss_O=OBS,
        loss_C=C,
        source={"julia": codegen.julia_source(spec.loads(PROBLEM_TOML))},
    )
    cases = [*CASES, {"solver": "Tsit5", "gradient": "forward_diff", "max_steps": 3}]
    (tmp / "problem.json").write_text(json.dumps(problem.to_json()))
    (tmp / "cases.json").write_text(json.dumps(cases))
    (tmp / "worker.py").write_text(WORKER)
    out = subprocess.run(
        [
            sys.executable,
            str(tmp / "worker.py"),
            str(tmp / "problem.json"),
            str(tmp / "cases.json"),
        ],
        capture_output=True,
        text=True,
        timeout=3000,
        cwd=Path(__file__).resolve().parent.parent,
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert out.returncode == 0 and lines, out.stdout[-4000:] + out.stderr[-4000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


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
