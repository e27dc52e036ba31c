"""CVODES' settings per problem class and its one-pass forward gradient (issue 31).

The linear solver each problem class runs with (and the reason every row records), the
forward gradient's single integration (CasADi's forward-mode integrator called once for
value and gradient) against the double pass it replaced, and ``benchmarks/best_config.py
--backend cvodes`` printing its table of tried configurations.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sciml_bench import backends
from sciml_bench.backends.base import CaseOptions
from sciml_bench.backends.compiled import natural_gradient
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


#: one CVODES case built and solved in a process of its own, saying what its row records;
#: MUMPS announces itself on stdout ("Entering DMUMPS") as the process ends, so what the
#: Newton iteration ran with is read from the process's output, not from the choice's table
PROBE = """
import sys
import numpy as np
from sciml_bench import backends
from sciml_bench.backends.base import CaseOptions
from sciml_bench.problem import reference, spec
path, size, kind = sys.argv[1], sys.argv[2], sys.argv[3]
p = spec.load(path) if size == "-" else spec.at_size(spec.load(path), int(size))
cp = reference.compile_problem(p, None, np.full((len(p.t_save), p.n_state), 0.7))
opts = CaseOptions("BDF", "forward", 1e-8, 1e-10, 10_000, extra={"jacobian": kind})
case = backends.get("cvodes").build(cp, opts)
assert np.all(np.isfinite(case.solve(np.asarray(cp.theta0)).y))
print("states", cp.n_state, "bands", max(cp.jac_bands), "row says", case.info["linear_solver"])
"""


def test_each_problem_class_gets_its_measured_linear_solver(grid) -> None:
    """What CVODES' Newton iteration runs with, seen on real CasADi integrators: MUMPS runs
    on the 2-D Brusselator's wide sparse Jacobian at N = 16 (512 states, half-bandwidth
    480), and on neither its dense Jacobian nor the small grid's sparse one; each row's
    ``linear_solver`` says what ran; a name CasADi has no plugin for fails the build, so
    the choice is what reaches CasADi."""
    brus = str(ROOT / "problems" / "stiff-brusselator-2d.toml")
    cases = {(brus, "16", "sparse"): True, (brus, "16", "dense"): False,
             (str(GRID), "-", "sparse"): False}  # fmt: skip
    procs = {k: subprocess.Popen([sys.executable, "-c", PROBE, *k], cwd=ROOT, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for k in cases}  # fmt: skip
    for k, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        said = out.split("row says ", 1)[1]
        assert ("DMUMPS" in out) == cases[k] == said.startswith("mumps"), (k, out)
        if k[1] == "16":
            assert "states 512 bands 480" in out
    b = backends.get("cvodes")
    with pytest.raises(RuntimeError, match="linsol_nosuch"):
        b.build(grid, _opts(jacobian="sparse", linear_solver="nosuch")).solve(
            np.asarray(grid.theta0))


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
    L_ref, g_u = (np.asarray(v, dtype=float).ravel() for v in G2(th))
    g_ref = natural_gradient(g_u, np.array(th), case.log_scaled)  # the model takes log θ
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
