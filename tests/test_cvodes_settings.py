"""CVODES' settings per problem class and its one-pass forward gradient (issue 31).

The linear solver each problem class runs with (and the reason every row records), the
forward gradient's single integration (CasADi's forward-mode integrator called once for
value and gradient) against the double pass it replaced, and ``benchmarks/best_config.py
--backend cvodes`` printing its table of tried configurations.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sciml_bench import backends
from sciml_bench.backends.base import CaseOptions
from sciml_bench.problem import reference, spec

ca = pytest.importorskip("casadi", reason="casadi is not installed: pip install -e '.[cvodes]'")
cvodes = pytest.importorskip("sciml_bench.backends.cvodes")

ROOT = Path(__file__).resolve().parents[1]
#: the CVODES tests' small array problem (stencils, a mean, a shift)
GRID = ROOT / "tests" / "data" / "grid-1d.toml"


@pytest.fixture(scope="module")
def grid() -> object:
    p = spec.load(GRID)
    obs = np.full((len(p.t_save), p.n_state), 0.7)
    return reference.compile_problem(p, None, obs)


def _opts(solver: str = "BDF", method: str = "forward", **extra: object) -> CaseOptions:
    return CaseOptions(solver, method, 1e-8, 1e-10, 10_000, extra=dict(extra))


def test_each_problem_class_gets_its_measured_linear_solver(grid) -> None:
    """Scalar: CasADi's default; a small or narrowly banded sparse Jacobian: qr; a large,
    wide one (the periodic 2-D Brusselator's): MUMPS; dense: LAPACK LU; Adams: none."""
    choice = cvodes.linear_solver_choice
    def sized(n: int, bands: list[int]) -> object:
        return dataclasses.replace(grid, state_names=[f"y{i}" for i in range(n)], jac_bands=bands)

    wide, banded = sized(512, [480, 480]), sized(3000, [1, 2])
    assert wide.n_state == 512
    assert choice(_opts(), None) == (None, "scalar")
    assert choice(_opts(jacobian="sparse"), grid) == ("qr", "sparse")
    assert choice(_opts(jacobian="sparse"), banded) == ("qr", "sparse")
    assert choice(_opts(jacobian="sparse"), wide) == ("mumps", "mumps")
    assert choice(_opts(jacobian="dense"), wide) == ("lapacklu", "dense")
    assert choice(_opts("Adams", jacobian="sparse"), wide) == (None, "functional")
    assert choice(_opts(jacobian="sparse", linear_solver="csparse"), wide) == ("csparse", "case")
    opts = cvodes.integrator_options(_opts(jacobian="sparse"), wide)
    assert opts["linear_solver"] == "mumps" and "always_recalculate_jacobian" not in opts
    assert "linear_solver" not in cvodes.integrator_options(_opts(), None)


def test_every_row_says_why_and_what_the_gradient_integrates(grid) -> None:
    b = backends.get("cvodes")
    fwd = b.build(grid, _opts(jacobian="sparse"))
    adj = b.build(grid, _opts(method="adjoint", jacobian="sparse"))
    assert fwd.info["linear_solver"].startswith("qr")
    assert fwd.info["config_reason"].startswith("qr") and "best_config" in fwd.info["config_reason"]
    assert "always_recalculate_jacobian" in fwd.info["config_reason"]
    assert "not CVODES' own FSA module" in fwd.info["idiom"]
    assert "integrated twice" in adj.info["idiom"] and "share" in adj.info["idiom"]
    assert "not CVODES' own FSA module" in b.gradient_methods["forward"]


def test_forward_gradient_is_one_integration_and_agrees_with_the_double_pass(grid) -> None:
    """The forward G calls only CasADi's forward-mode integrator (fsens2_F), never F; its
    loss and gradient match F's value and jtimes' gradient (the double pass) to the
    tolerances; the adjoint's G still calls F and then its reverse-mode integrator."""
    b = backends.get("cvodes")
    case = b.build(grid, _opts(jacobian="sparse"))
    called = {f.name() for f in case.G.find_functions()}
    assert "fsens2_F" in called and "F" not in called
    adj = b.build(grid, _opts(method="adjoint", jacobian="sparse"))
    assert "F" in {f.name() for f in adj.G.find_functions()}
    th = case.prepare(np.asarray(grid.theta0))
    L, g = case.check_grad(case.timed_grad(th))
    P = ca.MX.sym("p", 2)
    Y = case.F(x0=case.x0, p=P)["xf"]
    W, O, C = (ca.DM(np.asarray(a).T) for a in (grid.loss_W, grid.loss_O, grid.loss_C))
    L2 = ca.sum1(ca.sum2(W * (Y - O) ** 2)) + ca.sum1(ca.sum2(C * Y))
    G2 = ca.Function("G2", [P], [L2, ca.jtimes(L2, P, ca.DM.eye(2), False).T])
    L_ref, g_ref = (np.asarray(v, dtype=float).ravel() for v in G2(th))
    assert abs(L - float(L_ref[0])) <= 1e-6 * abs(L)
    np.testing.assert_allclose(g, g_ref, rtol=1e-5)
    _, ga = adj.check_grad(adj.timed_grad(th))
    np.testing.assert_allclose(ga, g, rtol=1e-4)


def test_best_config_prints_cvodes_configurations() -> None:
    path = GRID
    out = subprocess.run(
        [sys.executable, "benchmarks/best_config.py", "--backend", "cvodes", "--problem",
         str(path), "--sizes", "3", "--repeats", "1", "--clock", "cpu"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split("  ") for line in out.stdout.splitlines() if line.startswith("cvodes")]
    labels = [r[1] for r in rows]
    assert labels[0] == "default" and "mumps recalc_jac=False" in labels
    assert labels[-1].startswith("default, double pass")
    assert len(rows) == 8 and all(r[2] != "fail" for r in rows)
    assert rows[0][4:6] == ["1.00", "1.00"]  # the first row is the yardstick
    for r in rows[1:]:  # every solver reaches the same solution and gradient
        assert float(r[-2]) < 1e-5 and float(r[-1]) < 1e-4, r
