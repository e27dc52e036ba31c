"""The diffsol backend: pydiffsol with JIT-compiled DiffSL, with the real library.

The generated DiffSL right-hand side against NumPy at random states; solves and
gradients against the tight reference; diffsol's failures as statuses with its
message; the shared step bound, which diffsol lacks, checked after the solve; a
problem DiffSL cannot express as an ``unavailable`` row from a real worker.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import sympy

from sciml_bench import backends
from sciml_bench.backends.base import CaseOptions, EnsembleNotOffered
from sciml_bench.backends.compiled import model_parameters
from sciml_bench.measure import metrics
from sciml_bench.measure.status import SolverFailure, Status
from sciml_bench.problem import codegen, reference, spec
from sciml_bench.problem.compiled import log_scaled
from sciml_bench.problem.generated import not_expressible
from sciml_bench.run import runner
from sciml_bench.run.executor import LocalExecutor

ds = pytest.importorskip(
    "pydiffsol", reason="pydiffsol is not installed: pip install -e '.[diffsol]'"
)
diffsol = pytest.importorskip("sciml_bench.backends.diffsol")

DATA = Path(__file__).parent / "data"
#: each JIT compile costs 0.2-5 s here: the problems that cover the generator's cases
#: (CSE and 20 states, a one-output network under exp(), every function, sigmoid and
#: identity networks with one input or one hidden unit, time)
CODEGEN = [
    "stiff-robertson",
    "stiff-pollution",
    "stiff-robertson-ude",
    "nonstiff-lotka-volterra",
    str(DATA / "tiny-nets.toml"),
]


def _points(p: spec.Problem, n: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Random states and parameters (a parameter in log space stays positive). The
    states are small (1e-4 to 1e-3) so that the ROBER UDE's network input 2.5e4 y2 stays
    in range: DiffSL's tanh is NaN beyond |z| ~ 355 (pinned below)."""
    rng = np.random.default_rng(seed)
    log = log_scaled(p)
    return [(rng.uniform(1e-4, 1e-3, p.n_state),
             np.asarray(p.theta0) * rng.uniform(0.5, 1.5, p.n_params)
             + np.where(log, 0.0, rng.uniform(-0.1, 0.1, p.n_params)))
            for _ in range(n)]  # fmt: skip


def _model(p: spec.Problem, theta: np.ndarray) -> np.ndarray:
    """What the model takes for ``theta``: ``log θ`` where the parameter is in log space."""
    return model_parameters(theta, log_scaled(p))


@pytest.mark.parametrize("name", CODEGEN)
def test_generated_diffsl_rhs_matches_numpy(name: str) -> None:
    p = spec.load(name)
    ode = ds.Ode(codegen.generate(p, "diffsl"), matrix_type=ds.nalgebra_dense)
    assert (ode.nstates, ode.nparams) == (p.n_state, p.n_params)
    np.testing.assert_array_equal(ode.y0(np.asarray(p.theta0)), p.y0)
    ref = codegen.load_python(codegen.generate(p, "numpy"))["rhs"]
    for y, theta in _points(p, 5):
        np.testing.assert_allclose(
            ode.rhs(_model(p, theta), 0.3, y), ref(0.3, y, theta), rtol=1e-12, atol=1e-300
        )


def test_a_parameter_in_log_space_comes_in_as_its_log() -> None:
    """ROBER's rates are differentiated in log space: the model reads ``lp{i} = log k_i``
    and computes ``p{i} = exp(lp{i})``; a parameter that is not (``log = false``) and the
    network weights come in as they are."""
    src = codegen.generate(spec.load("stiff-robertson"), "diffsl")
    assert "  lp0 = (-3.2188758248682006),  // log k1\n" in src  # log 0.04
    assert "\n}\np0 { exp(lp0) }\np1 { exp(lp1) }\np2 { exp(lp2) }\nu_i {" in src
    ude = spec.load("stiff-robertson-ude")
    mixed = dataclasses.replace(ude, log_params=(False, *ude.log_params[1:]))
    src = codegen.generate(mixed, "diffsl")
    assert "  p0 = 30000000.0,  // k2\n  lp1 = " in src and "(2:43): w = 0.0" in src
    assert "p0 {" not in src and "p1 { exp(lp1) }" in src
    ode = ds.Ode(src, matrix_type=ds.nalgebra_dense)
    ref = codegen.load_python(codegen.generate(mixed, "numpy"))["rhs"]
    y, theta = _points(mixed, 1)[0]
    assert list(log_scaled(mixed)) == [False, True] + [False] * 41
    np.testing.assert_allclose(ode.rhs(_model(mixed, theta), 0.3, y), ref(0.3, y, theta),
                               rtol=1e-12)  # fmt: skip


def test_the_per_element_rates_come_in_as_a_vector_of_logs() -> None:
    """stiff-robertson-rates (a rate per group): each rate is a labelled range of logs and
    one vector tensor of exp's, at every size the same lines."""
    p = spec.at_size(spec.load("stiff-robertson-rates"), 10)
    src = codegen.generate(p, "diffsl")
    for k, name in enumerate(("k1", "k2", "k3")):
        assert f"  ({10 * k}:{10 * (k + 1)}): lp{k} = 0.0,  // log {name}\n" in src
        assert f"\np{k}_i {{ exp(lp{k}_i) }}\n" in src
    ode = ds.Ode(src, matrix_type=ds.faer_sparse)
    order = diffsol.suite_order({"layout": codegen.state_layout(p)})
    ref = codegen.load_python(codegen.generate(p, "numpy"))["rhs"]
    y, theta = _points(p, 1)[0]
    u = np.empty_like(y)
    u[order] = y
    got = np.asarray(ode.rhs(_model(p, theta), 0.3, u))[order]
    np.testing.assert_allclose(got, ref(0.3, y, theta), rtol=1e-12, atol=1e-300)


def test_networks_are_tensor_contractions() -> None:
    src = codegen.generate(spec.load("nonstiff-spiral-node"), "diffsl")
    assert "n0z1_i { n0W1_ij * n0x_j }" in src  # W x as a contraction over j
    assert "(0, 0:2): w_j[0:2]," in src  # W's rows are slices of the weights
    assert "tanh(n0z1_i + w_i[100:150])" in src
    assert "(0:252): w = 0.0" in src


def test_tan_is_written_as_sin_over_cos() -> None:
    """DiffSL's tan is llvm.tan, which Enzyme cannot differentiate (the process aborts)."""
    src = codegen.generate(spec.load(DATA / "tiny-nets.toml"), "diffsl")
    assert "tan(" not in src.replace("tanh(", "") and "(sin(x1)/cos(x1))" in src


def test_diffsl_tanh_is_nan_beyond_its_exp_overflow() -> None:
    """A DiffSL limitation (diffsl 0.12.4) docs/backends.md states: tanh(z) overflows to NaN for
    |z| >~ 355, where exp(2z) does; sigmoid stays finite. If this starts failing, DiffSL
    fixed it: drop that note."""
    ode = ds.Ode("in_i { k = 1.0 }\nu_i { a = 1.0, b = 1.0 }\nF_i { tanh(k * a), sigmoid(k * b) }",
                 matrix_type=ds.nalgebra_dense)  # fmt: skip
    assert ode.rhs(np.array([300.0]), 0.0, np.ones(2))[0] == 1.0
    tanh, sigmoid = ode.rhs(np.array([1000.0]), 0.0, np.ones(2))
    assert np.isnan(tanh) and sigmoid == 1.0


@pytest.fixture(scope="module")
def robertson() -> tuple[object, reference.Reference]:
    p = spec.load("stiff-robertson")
    ref = reference.get(p)
    return reference.compile_problem(p, ref), ref


def test_robertson_solves_and_differentiates_like_the_reference(robertson) -> None:
    problem, ref = robertson
    b = backends.get("diffsol")
    assert b.default_solver(True) == "bdf" and b.default_gradient(problem) == "forward"
    case = b.build(problem, CaseOptions("bdf", "forward", problem.rtol, problem.atol,
                                        problem.max_steps))  # fmt: skip
    assert case.info["matrix_type"] == "nalgebra_dense"
    assert case.info["parameter_scale"] == "log θ for 3 of 3 parameters (the model computes exp)"
    sol = case.solve(problem.theta0)
    assert metrics.solution_error(sol.y, np.asarray(ref.y))["rel_l2"] < 1e-5
    assert 100 < sol.stats["steps"] < problem.max_steps
    loss, grad = case.loss_and_grad(problem.theta0)
    assert loss == pytest.approx(ref.loss, rel=1e-4)
    # natural units in and out, though the model takes log k: against the reference's ∂L/∂θ
    err = metrics.gradient_error(grad, np.asarray(ref.gradient), problem.theta0, problem.log_params)
    assert err["rel"] < 1e-5  # measured 1.2e-6 (7.05e-5 with the model in k)


def _rates_gradients(log: bool) -> tuple[np.ndarray, np.ndarray]:
    """stiff-robertson-rates at n = 10 (30 rates, 0.03 to 3.6e7): diffsol's forward and
    adjoint ``θ ∂L/∂θ`` with the model in log k (``log``) or in k, against observations
    10% above the solution (every residual non-zero)."""
    p = spec.at_size(spec.load("stiff-robertson-rates"), 10)
    if not log:
        p = dataclasses.replace(p, log_params=(False,) * p.n_params)
    b = backends.get("diffsol")

    def opts(method: str) -> CaseOptions:
        return CaseOptions("bdf", method, p.rtol, p.atol, p.max_steps, extra={"jacobian": "sparse"})

    first = reference.compile_problem(p, None, np.zeros((len(p.t_save), p.n_state)))
    y = b.build(first, opts("forward")).solve(first.theta0).y
    problem = reference.compile_problem(p, None, 1.1 * y)
    theta = np.asarray(problem.theta0)
    fwd, adj = (theta * b.build(problem, opts(m)).loss_and_grad(theta)[1]
                for m in ("forward", "adjoint"))  # fmt: skip
    return fwd, adj


def test_forward_sensitivities_along_log_rates_agree_with_the_adjoint() -> None:
    """One sensitivity atol cannot serve ∂y/∂k for rates from 0.03 to 3.6e7; along log k it
    serves all: forward and adjoint agree to 1e-4 of the largest component (measured
    4.7e-6; with the model in k, 4.8e-3 apart, the check below)."""
    fwd, adj = _rates_gradients(log=True)
    assert np.max(np.abs(fwd - adj)) < 1e-4 * np.max(np.abs(adj))
    fwd_k, adj_k = _rates_gradients(log=False)
    assert np.max(np.abs(fwd_k - adj_k)) > 1e-3 * np.max(np.abs(adj_k))


def test_sixty_states_use_sparse_matrices() -> None:
    """20 uncoupled copies of ROBER (60 states, diffsol's sparse threshold): faer_sparse,
    and the same solution in every copy."""
    copies = 20
    p0 = spec.load("stiff-robertson")
    rename = {f"y{k}": f"y{k}c{{c}}" for k in (1, 2, 3)}
    names = [rename[s].format(c=c) for c in range(copies) for s in p0.state_names]
    eqs = {}
    for c in range(copies):
        for s, e in zip(p0.state_names, p0.rhs, strict=True):
            text = str(e).replace("**", "^")
            for old, new in rename.items():
                text = text.replace(old, new.format(c=c))
            eqs[rename[s].format(c=c)] = text
    big = spec.from_dict({
        "name": "rober-x20", "stiff": True,
        "state": {"names": names, "initial": list(p0.y0) * copies},
        "parameters": dict(zip(p0.param_names, p0.theta0, strict=True)),
        "equations": eqs,
        "time": {"span": [0.0, 1e5], "save": {"logspace": [-5.0, 5.0, 10]}},
        "loss": {"kind": "final", "weights": [1.0] + [0.0] * (3 * copies - 1)},
    }, "<rober-x20>")  # fmt: skip
    problem = reference.compile_problem(big, None)
    case = backends.get("diffsol").build(
        problem, CaseOptions("bdf", "forward", 1e-6, 1e-10, 10_000)
    )
    assert case.info["matrix_type"] == "faer_sparse"
    sol = case.solve(problem.theta0)
    np.testing.assert_allclose(sol.y[:, 57:60], sol.y[:, :3], rtol=1e-12)
    assert sol.y[-1, 0] == pytest.approx(0.0179, rel=0.01)  # y1(1e5) of ROBER


@pytest.mark.parametrize("solver", ["tsit45", "bdf"])
def test_adjoint_agrees_with_forward_sensitivities(solver: str) -> None:
    p = spec.load("nonstiff-lotka-volterra")
    problem = reference.compile_problem(p, None, np.ones((len(p.t_save), p.n_state)))
    b = backends.get("diffsol")
    got = {g: b.build(problem, CaseOptions(solver, g, 1e-10, 1e-12, 100_000)).loss_and_grad(
        problem.theta0) for g in ("forward", "adjoint")}  # fmt: skip
    assert got["adjoint"][0] == pytest.approx(got["forward"][0], rel=1e-7)
    # measured: 5e-6 (tsit45), 4e-5 (bdf) at 1e-10; the adjoint's error shrinks with rtol
    np.testing.assert_allclose(got["adjoint"][1], got["forward"][1], rtol=1e-4)


def _case(path: Path, solver: str) -> tuple[object, object]:
    p = spec.load(path)
    problem = reference.compile_problem(p, None)
    options = CaseOptions(solver, "forward", p.rtol, p.atol, p.max_steps)
    return backends.get("diffsol").build(problem, options), problem


def test_the_step_bound_it_lacks_is_checked_after_the_solve() -> None:
    """y' = -1e6 y with a bound of 10 steps: bdf needs a few hundred; the row says how far
    it got within the bound."""
    case, problem = _case(DATA / "max-steps.toml", "bdf")
    with pytest.raises(SolverFailure) as e:
        case.solve(problem.theta0)
    assert e.value.status == Status.MAX_STEPS
    assert "accepted steps over the whole solve > the shared max_steps = 10" in e.value.reason
    assert 0 < e.value.t_reached < 1.0


def test_a_blowup_is_dt_underflow_with_diffsol_message() -> None:
    case, problem = _case(DATA / "blowup.toml", "tsit45")
    with pytest.raises(SolverFailure) as e:
        case.solve(problem.theta0)
    assert e.value.status == Status.DT_UNDERFLOW
    assert "Step size is too small" in e.value.reason
    assert e.value.t_reached == pytest.approx(1.0, abs=1e-3)  # y = 1/(1 - t)


@pytest.mark.slow
def test_an_inexpressible_problem_is_an_unavailable_row_from_a_real_worker(tmp_path: Path) -> None:
    p = spec.load(DATA / "decay.toml")
    bad = dataclasses.replace(p, rhs=(sympy.I * p.state_symbols[0],))
    src = codegen.generate(bad, "diffsl")
    assert "complex constant" in (not_expressible(src) or "")
    problem = reference.compile_problem(bad, None)
    ref = reference.Reference(
        p.name,
        p.content_hash,
        "stub",
        1e-12,
        1e-14,
        list(p.t_save),
        [[1.0]] * len(p.t_save),
        None,
        1.0,
        [1.0],
        "stub",
        1e-4,
        None,
        0.0,
    )
    (case,) = runner.plan(problem, ["diffsol"])
    settings = runner.Settings(cold=1, repeats=1, warmups=0, budget_s=120.0)
    rec = runner.run_case(case, problem, ref, settings, LocalExecutor(), progress=lambda m: None)
    assert rec["status"] == "unavailable"
    assert rec["reason"].startswith("diffsol: decay is not expressible in DiffSL: a complex")


def test_no_ensemble_and_why() -> None:
    with pytest.raises(EnsembleNotOffered, match="one trajectory"):
        backends.get("diffsol").build_ensemble(None, None, None, "independent")  # type: ignore[arg-type]


# --- array problems: DiffSL's array form (codegen/diffsl_arrays.py) ----------------------

#: each array problem at its default size, with its measured errors at its own tolerances
#: (rtol 1e-6): solution, forward and adjoint gradient (max relative, log space). The
#: gradients are tolerance-limited, as CVODES' are on the same rows (ROBER groups: 1.2e-4
#: forward, 2.0e-4 adjoint; Brusselator: 7.5e-5 forward, 9.2e-3 adjoint, whose discrete
#: adjoint crosses the forcing's switch at t = 1.1)
ARRAYS = {
    "stiff-robertson-groups": (1e-5, 3e-4, 4e-4),  # measured 9.4e-7, 0.99e-4 to 1.3e-4, 2.1e-4
    "stiff-brusselator-2d": (1e-4, 1e-4, 1e-2),  # measured 2.0e-5, 2.8e-5, 5.3e-3 to 5.9e-3
}


@pytest.fixture(scope="module", params=list(ARRAYS))
def array_problem(request) -> tuple[str, object, reference.Reference]:
    p = spec.load(request.param)
    ref = reference.get(p)
    return request.param, reference.compile_problem(p, ref), ref


def _from_model(p: spec.Problem, u: np.ndarray) -> np.ndarray:
    """A model-ordered vector (state by state) in the suite's layout."""
    return u[diffsol.suite_order({"layout": codegen.state_layout(p)})]


@pytest.mark.parametrize(("name", "size"), [("stiff-robertson-groups", 1),
                                            ("stiff-robertson-groups", 10),
                                            ("stiff-brusselator-2d", 8)])  # fmt: skip
def test_generated_array_diffsl_compiles_and_matches_numpy(name: str, size: int) -> None:
    p = spec.at_size(spec.load(name), size)
    code = codegen.generate(p, "diffsl")
    ode = ds.Ode(code, matrix_type=ds.faer_sparse)
    assert (ode.nstates, ode.nparams) == (p.n_state, p.n_params)
    np.testing.assert_array_equal(_from_model(p, ode.y0(np.asarray(p.theta0))), p.y0)
    order = diffsol.suite_order({"layout": codegen.state_layout(p)})
    ref = codegen.load_python(codegen.generate(p, "numpy"))["rhs"]
    rng = np.random.default_rng(1)
    for t in (0.5, 2.0):  # the Brusselator's forcing is off, then on
        y, theta = rng.uniform(0.1, 1, p.n_state), np.asarray(p.theta0) * rng.uniform(0.5, 1.5)
        u = np.empty_like(y)
        u[order] = y
        np.testing.assert_allclose(_from_model(p, ode.rhs(_model(p, theta), t, u)),
                                   ref(t, y, theta), rtol=1e-12, atol=1e-12)  # fmt: skip


def test_heaviside_is_the_suites_step() -> None:
    """``step(x)`` is written ``heaviside(x)``: 1 at ``x >= 0`` (0 included), else 0."""
    ode = ds.Ode("in_i { k = 1.0 }\nu_i { a = 1.0 }\nF_i { heaviside(k * a) }",
                 matrix_type=ds.nalgebra_dense)  # fmt: skip
    got = [float(ode.rhs(np.array([1.0]), 0.0, np.array([a]))[0]) for a in (-1e-300, 0.0, 2.0)]
    assert got == [0.0, 1.0, 1.0]


@pytest.mark.slow
@pytest.mark.parametrize("jacobian", ["dense", "sparse"])
def test_array_problems_solve_and_differentiate_like_the_reference(array_problem, jacobian) -> None:
    name, problem, ref = array_problem
    sol_tol, fwd_tol, adj_tol = ARRAYS[name]
    b = backends.get("diffsol")
    assert b.array_problems and b.jacobian_kinds("bdf") == ("dense", "sparse")
    for method, tol in (("forward", fwd_tol), ("adjoint", adj_tol)):
        options = CaseOptions("bdf", method, problem.rtol, problem.atol, problem.max_steps,
                              extra={"jacobian": jacobian})  # fmt: skip
        case = b.build(problem, options)
        assert case.info["matrix_type"] == diffsol.MATRICES[jacobian]
        sol = case.solve(problem.theta0)
        assert metrics.solution_error(sol.y, np.asarray(ref.y))["rel_l2"] < sol_tol
        loss, grad = case.loss_and_grad(problem.theta0)
        assert loss == pytest.approx(ref.loss, rel=1e-4)
        err = metrics.gradient_error(grad, np.asarray(ref.gradient), problem.theta0,
                                     problem.log_params)  # fmt: skip
        assert err["rel"] < tol and err["cosine"] > 1 - 1e-6, (method, err)


def test_one_group_is_the_scalar_model_to_rounding() -> None:
    """ROBER groups at n = 1 (the array form) and the same file without ``[sizes]`` (the
    scalar form): the same solution, loss and forward gradient to 1e-12 (measured 1e-15)."""
    import tomllib

    data = tomllib.loads((Path(spec.problems_dir()) / "stiff-robertson-groups.toml").read_text())
    del data["sizes"], data["state"]["shape"]
    forms = [spec.at_size(spec.load("stiff-robertson-groups"), 1), spec.from_dict(data, "x")]
    obs = np.linspace(0.1, 0.9, 30).reshape(10, 3)
    got = []
    for p in forms:
        problem = reference.compile_problem(p, None, obs)
        case = backends.get("diffsol").build(
            problem, CaseOptions("bdf", "forward", 1e-6, 1e-10, 10_000, extra={"jacobian": "dense"})
        )
        got.append((case.solve(problem.theta0).y, *case.loss_and_grad(problem.theta0)))
    assert [reference.compile_problem(p, None, obs).layout for p in forms] == [[3, 1], None]
    for a, b in zip(*got, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)


def test_robertson_groups_at_a_hundred_run_sparse_and_every_group_alike() -> None:
    """n = 100 (300 states) on faer_sparse: each group is ROBER, as group 0 of the n = 10
    reference (the groups are uncoupled, so the same trajectory), and the adjoint gradient
    is the n = 10 one (ten times the groups, each weighted a tenth: the fit loss's weights
    are 1 / (n_save n_state scale^2))."""
    rober = spec.load("stiff-robertson-groups")
    small = spec.at_size(rober, 10)
    ref = reference.get(small)
    options = CaseOptions("bdf", "adjoint", 1e-6, 1e-10, 10_000, extra={"jacobian": "sparse"})
    problem = reference.compile_problem(spec.at_size(rober, 100), None,
                                        np.tile(np.asarray(ref.observations), (1, 10)))  # fmt: skip
    case = backends.get("diffsol").build(problem, options)
    assert case.info["matrix_type"] == "faer_sparse" and problem.n_state == 300
    y = case.solve(problem.theta0).y.reshape(len(problem.t_save), 100, 3)
    want = np.asarray(ref.y)[:, :3]
    for g in (0, 57, 99):
        np.testing.assert_allclose(y[:, g], want, rtol=1e-4, atol=1e-9)
    small_case = backends.get("diffsol").build(reference.compile_problem(small, ref), options)
    _, g10 = small_case.loss_and_grad(problem.theta0)
    _, g100 = case.loss_and_grad(problem.theta0)
    # to the adjoint's own accuracy (2e-4 against the reference): the 300-state solve
    # takes its own steps (measured 1.5e-4 apart)
    np.testing.assert_allclose(g100, g10, rtol=1e-3)


@pytest.mark.slow  # several seconds: two real solves (docs/testing.md)
def test_van_der_pols_fast_start_is_not_stopped_by_a_step_floor() -> None:
    """Van der Pol (mu = 1e6) at rtol 1e-9 starts with steps below 1e-13, pydiffsol's
    default floor, which ended its first solve at t ~ 1e-14 (`dt_underflow`); with the
    suite's floor (MIN_TIMESTEP) it reaches t = 6.3 and the trajectory matches SciPy's."""
    from scipy.integrate import solve_ivp

    from sciml_bench.backends.diffsol import MIN_TIMESTEP

    p = spec.load("stiff-vanderpol")
    # the solve alone: any observations make its fit loss (no reference needed)
    problem = reference.compile_problem(p, None, np.zeros((len(p.t_save), 2)))
    rtol = 1e-9
    atol = rtol * p.atol / p.rtol
    case = backends.get("diffsol").build(problem, CaseOptions("bdf", "forward", rtol, atol,
                                                              p.max_steps))  # fmt: skip
    assert case.ode.options.min_timestep == MIN_TIMESTEP < 1e-13
    sol = case.solve(problem.theta0)
    mu = float(problem.theta0[0])

    def f(_t: float, u: np.ndarray) -> list[float]:
        y, x = u
        return [mu * ((1 - x * x) * y - x), y]

    ref = solve_ivp(f, p.t_span, p.y0, method="Radau", t_eval=p.t_save, rtol=1e-10, atol=1e-13)
    x, x_ref = np.asarray(sol.y)[:, 1], ref.y[1]
    assert np.max(np.abs(x - x_ref)) < 1e-5  # x in [-2, 2]; jumps 0.05 from every save time
    case.ode.options.min_timestep = 1e-13  # pydiffsol's default: the old failure
    with pytest.raises(SolverFailure) as e:
        case.solve(problem.theta0)
    assert e.value.status == Status.DT_UNDERFLOW and e.value.t_reached < 1e-12
