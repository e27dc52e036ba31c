"""The cvodes backend: SUNDIALS CVODES through CasADi, with the real library.

The generated CasADi right-hand side against NumPy at random states; solves and
gradients against the tight reference; CVODES' failures as statuses with its flag; the
shared step bound over the whole solve; a problem CasADi cannot express as a row.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import sympy

from sciml_bench import backends
from sciml_bench.backends.base import CaseOptions, EnsembleNotOffered, ProblemNotExpressible
from sciml_bench.backends.compiled import model_parameters, natural_gradient, parameter_scale
from sciml_bench.measure import metrics
from sciml_bench.measure.status import SolverFailure, Status, classify_message
from sciml_bench.problem import codegen, reference, spec
from sciml_bench.problem.compiled import log_scaled
from sciml_bench.problem.generated import not_expressible

ca = pytest.importorskip("casadi", reason="casadi is not installed: pip install -e '.[cvodes]'")
cvodes = pytest.importorskip("sciml_bench.backends.cvodes")

DATA = Path(__file__).parent / "data"
TINY_NETS = DATA / "tiny-nets.toml"


def _points(p: spec.Problem, n: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Random states and parameters (a parameter in log space stays positive)."""
    rng = np.random.default_rng(seed)
    log = log_scaled(p)
    return [(rng.uniform(0.1, 1.0, p.n_state),
             np.asarray(p.theta0) * rng.uniform(0.5, 1.5, p.n_params)
             + np.where(log, 0.0, rng.uniform(-0.1, 0.1, p.n_params)))
            for _ in range(n)]  # fmt: skip


@pytest.mark.parametrize("name", [*(n for n in spec.available_problems() if not spec.load(n).events),
                                  str(TINY_NETS)])  # fmt: skip
def test_generated_casadi_rhs_matches_numpy_on_sx_and_mx(name: str) -> None:
    p = spec.load(name)
    rhs = codegen.load_python(codegen.generate(p, "casadi"))["rhs"]
    ref = codegen.load_python(codegen.generate(p, "numpy"))["rhs"]
    for kind in (ca.SX, ca.MX):
        t, y, th = kind.sym("t"), kind.sym("y", p.n_state), kind.sym("p", p.n_params)
        f = ca.Function("f", [t, y, th], [rhs(t, y, th)])
        for yv, thv in _points(p, 5):
            want = ref(0.3, yv, thv)
            got = np.array(f(0.3, yv, model_parameters(thv, log_scaled(p)))).ravel()
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)


def test_a_parameter_in_log_space_comes_in_as_its_log() -> None:
    """ROBER's rates are differentiated in log space: ``p`` holds ``log k`` and the model
    takes ``exp``; the network's weights (and a parameter with ``log = false``) come in as
    they are; a per-element rate is one ``exp`` of its slice."""
    src = codegen.generate(spec.load("stiff-robertson"), "casadi")
    assert "    p_k1 = ca.exp(p[0])\n    p_k2 = ca.exp(p[1])\n    p_k3 = ca.exp(p[2])\n" in src
    assert "# p holds log(k1), log(k2), log(k3), the scale the gradient is taken in:" in src
    ude = spec.load("stiff-robertson-ude")
    src = codegen.generate(dataclasses.replace(ude, log_params=(False, True, *[False] * 41)),
                           "casadi")  # fmt: skip
    assert "p_k2 = p[0]\n" in src and "p_k3 = ca.exp(p[1])\n" in src
    assert "ca.reshape(p[2:26], 3, 8).T" in src  # the weights, unchanged
    rates = codegen.generate(spec.at_size(spec.load("stiff-robertson-rates"), 10), "casadi")
    assert "p_k1 = ca.exp(p[0:10])\n" in rates and "p_k3 = ca.exp(p[20:30])\n" in rates


def test_the_chain_rule_back_to_natural_units() -> None:
    """``u = log θ`` where in log space, and ``∂L/∂θ = (∂L/∂u) / θ`` there; elsewhere
    both are the identity."""
    theta, log = np.array([0.04, 3e7, -2.0, 5.0]), np.array([True, True, False, False])
    u = model_parameters(theta, log)
    np.testing.assert_allclose(u, [np.log(0.04), np.log(3e7), -2.0, 5.0], rtol=1e-15)
    g = natural_gradient(np.array([1.0, 2.0, 3.0, 4.0]), u, log)
    np.testing.assert_allclose(g, [1 / 0.04, 2 / 3e7, 3.0, 4.0], rtol=1e-14)
    assert parameter_scale(log) == ("log θ for 2 of 4 parameters (the model computes exp), "
                                    "θ for the other 2")  # fmt: skip
    assert parameter_scale(np.zeros(3, bool)) == "θ for all 3 parameters"


def test_networks_are_matrix_products_not_scalar_expansions() -> None:
    src = codegen.generate(spec.load("nonstiff-spiral-node"), "casadi")
    assert src.count("ca.mtimes(") == 2  # one per layer
    assert "ca.reshape(p[0:100], 2, 50).T" in src  # row-major W from the parameter vector
    assert len(src) < 2_000  # 252 weights, yet a short program


def test_a_complex_constant_is_not_expressible_and_says_so() -> None:
    p = spec.load(DATA / "decay.toml")
    bad = dataclasses.replace(p, rhs=(sympy.I * p.state_symbols[0],))
    src = codegen.generate(bad, "casadi")
    assert "def rhs" not in src
    assert "complex constant" in (not_expressible(src) or "")
    problem = reference.compile_problem(bad, None, np.zeros((len(p.t_save), p.n_state)))
    options = CaseOptions("BDF", "forward", 1e-6, 1e-8, 100)
    with pytest.raises(ProblemNotExpressible) as e:
        backends.get("cvodes").build(problem, options)
    assert e.value.status == Status.UNAVAILABLE and "complex constant" in e.value.reason


@pytest.fixture(scope="module")
def robertson() -> tuple[object, reference.Reference]:
    p = spec.load("stiff-robertson")
    ref = reference.get(p)
    return reference.compile_problem(p, ref), ref


@pytest.mark.parametrize("gradient", ["forward", "adjoint"])
def test_robertson_solves_and_differentiates_like_the_reference(robertson, gradient: str) -> None:
    problem, ref = robertson
    b = backends.get("cvodes")
    assert b.default_solver(True) == "BDF" and b.default_gradient(problem) == "forward"
    case = b.build(problem, CaseOptions("BDF", gradient, problem.rtol, problem.atol,
                                        problem.max_steps))  # fmt: skip
    sol = case.solve(problem.theta0)
    assert metrics.solution_error(sol.y, np.asarray(ref.y))["rel_l2"] < 1e-5
    assert sol.stats["steps"] > 100 and sol.stats["rhs_evals"] > sol.stats["steps"]
    assert 0 < sol.stats["lu_decomps"] < sol.stats["steps"]
    loss, grad = case.loss_and_grad(problem.theta0)
    assert loss == pytest.approx(ref.loss, rel=1e-4)
    # the public call takes θ and returns ∂L/∂θ in natural units, though the model takes
    # log k (the chain rule is the case's): against the reference's natural gradient
    err = metrics.gradient_error(grad, np.asarray(ref.gradient), problem.theta0, problem.log_params)
    # pass or warn, measured 1.35e-4 forward (1.12e-4 with the model in k): the forward
    # solution's error at rtol 1e-6, not the parameters' scale
    assert err["rel"] < 1e-3 and err["cosine"] > 0.999999
    assert case.info["symbolics"] == "SX"
    assert case.info["parameter_scale"] == "log θ for 3 of 3 parameters (the model computes exp)"
    with pytest.raises(SolverFailure, match="parameter 0 is -0.04, but the model takes its log"):
        case.loss_and_grad(-np.asarray(problem.theta0))


def _case(path: Path, solver: str, max_steps: int | None = None) -> object:
    p = spec.load(path)
    problem = reference.compile_problem(p, None, np.zeros((len(p.t_save), p.n_state)))
    options = CaseOptions(solver, "forward", p.rtol, p.atol, max_steps or p.max_steps)
    return backends.get("cvodes").build(problem, options), problem


@pytest.mark.parametrize("solver", ["BDF", "Adams"])
def test_too_much_work_is_max_steps_with_cvodes_flag(solver: str) -> None:
    case, problem = _case(DATA / "max-steps.toml", solver)
    with pytest.raises(SolverFailure) as e:
        case.solve(problem.theta0)
    assert e.value.status == Status.MAX_STEPS
    assert e.value.reason == "cvodes: CVODES returned CV_TOO_MUCH_WORK"


def test_the_step_bound_holds_over_the_whole_solve(robertson) -> None:
    """CVODES' own bound is per save interval: 120 steps in each of ROBER's 40 intervals
    is allowed there, but 434 steps in all is over a shared bound of 120."""
    problem, _ = robertson
    case = backends.get("cvodes").build(problem, CaseOptions("BDF", "forward", problem.rtol,
                                                              problem.atol, 120))  # fmt: skip
    with pytest.raises(SolverFailure) as e:
        case.solve(problem.theta0)
    assert e.value.status == Status.MAX_STEPS
    assert "over the whole solve > the shared max_steps = 120" in e.value.reason


def test_a_nan_in_the_rhs_is_nonfinite_with_cvodes_flag() -> None:
    case, problem = _case(DATA / "singular-jacobian.toml", "BDF")
    with pytest.raises(SolverFailure) as e:
        case.solve(problem.theta0)
    assert e.value.status == Status.NONFINITE
    assert "CV_REPTD_RHSFUNC_ERR" in e.value.reason
    assert e.value.t_reached is not None and 0.9 < e.value.t_reached <= 1.5  # y hits 0 at t = 1


def test_cvodes_flags_map_onto_statuses() -> None:
    assert classify_message("CVODES returned CV_TOO_MUCH_WORK") == Status.MAX_STEPS
    assert classify_message("CVODES returned CV_RHSFUNC_FAIL") == Status.NONFINITE
    assert classify_message("CVODES returned CV_CONV_FAILURE") == Status.SOLVER_FAILURE
    assert classify_message("CVODES returned CV_ERR_FAILURE") == Status.SOLVER_FAILURE


def test_gradient_default_follows_the_parameter_count() -> None:
    b = backends.get("cvodes")
    _, small = _case(DATA / "decay.toml", "Adams")
    assert b.default_gradient(small) == "forward" and b.default_solver(False) == "Adams"
    wide = dataclasses.replace(small, param_names=[f"q{i}" for i in range(65)],
                               theta0=np.ones(65))  # fmt: skip
    assert b.default_gradient(wide) == "adjoint"


def test_no_ensemble_and_why() -> None:
    with pytest.raises(EnsembleNotOffered, match="one trajectory"):
        backends.get("cvodes").build_ensemble(None, None, None, "independent")  # type: ignore[arg-type]


#: a small array problem: stencils, a mean and a shift
GRID = Path(__file__).parent / "data" / "grid-1d.toml"


def test_an_array_problem_solves_and_differentiates_like_the_reference() -> None:
    """An array problem (stencils, a mean, a shift) on CVODES with qr and with lapacklu:
    the solution and both gradients against SciPy's tight sparse-Jacobian reference."""
    p = spec.load(GRID)
    ref = reference.build(p)
    cp = reference.compile_problem(p, ref)
    for jacobian, method in (("sparse", "forward"), ("sparse", "adjoint"), ("dense", "forward")):
        opts = CaseOptions("BDF", method, p.rtol, p.atol, p.max_steps, extra={"jacobian": jacobian})
        case = backends.get("cvodes").build(cp, opts)
        solver = {"sparse": "qr", "dense": "lapacklu"}[jacobian]  # 10 states: no MUMPS
        assert case.info["linear_solver"].startswith(solver)
        assert case.info["options"]["linear_solver"] == solver
        th = case.prepare(np.asarray(p.theta0))
        y = case.check_solve(case.timed_solve(th)).y
        np.testing.assert_allclose(y, np.asarray(ref.y), rtol=1e-5, atol=1e-8)
        L, g = case.check_grad(case.timed_grad(th))
        assert abs(L - ref.loss) <= 1e-6 * abs(ref.loss)
        np.testing.assert_allclose(g, np.asarray(ref.gradient), rtol=1e-4)


def test_array_code_is_column_algebra_with_sparse_operator_matrices() -> None:
    small = spec.load("stiff-brusselator-2d")
    src = codegen.generate(small, "casadi")
    assert src.count("ca.mtimes(_OP") == 2 and "y[0::2]" in src and "y[1::2]" in src
    big = codegen.generate(spec.at_size(small, 64), "casadi")
    assert abs(len(big) - len(src)) < 20  # the same program at 8,192 states
    assert backends.get("cvodes").jacobian_kinds("BDF") == ("dense", "sparse")
    assert backends.get("cvodes").jacobian_kinds("Adams") == ("none",)
