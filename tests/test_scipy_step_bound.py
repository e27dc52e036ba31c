"""SciPy's solve is solve_ivp's own loop, driven here so that the shared ``max_steps``
bounds its steps as it bounds every other backend's: the same states as ``solve_ivp``
to the last bit, and a bound that counts steps, not RHS evaluations."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from sciml_bench.backends.base import CaseOptions
from sciml_bench.backends.scipy import IMPLICIT, ScipyCase
from sciml_bench.measure.status import SolverFailure, Status
from sciml_bench.problem import reference, spec


def _case(name: str, solver: str, max_steps: int) -> tuple[ScipyCase, np.ndarray]:
    problem = spec.load(name)
    cp = reference.compile_problem(problem, None, np.zeros((len(problem.t_save),
                                                            problem.n_state)))  # fmt: skip
    case = ScipyCase(cp, CaseOptions(solver, "none", cp.rtol, cp.atol, max_steps))
    return case, np.asarray(cp.theta0)


@pytest.mark.parametrize(("name", "solver"), [("stiff-robertson", "LSODA"),
                                              ("stiff-robertson", "BDF"),
                                              ("nonstiff-lotka-volterra", "DOP853")])  # fmt: skip
def test_the_same_states_and_counters_as_solve_ivp(name: str, solver: str) -> None:
    case, theta = _case(name, solver, 10**6)
    got = case.solve(theta)
    jac = {"jac": lambda t, y: case.jac(t, y, theta)} if solver in IMPLICIT else {}
    want = solve_ivp(lambda t, y: case.rhs(t, y, theta), case.p.t_span, case.p.y0,
                     method=solver, t_eval=case.p.t_save, rtol=case.o.rtol, atol=case.o.atol,
                     **jac)  # fmt: skip
    np.testing.assert_array_equal(got.y, want.y.T)
    assert got.stats["rhs_evals"] == want.nfev and got.stats["jac_evals"] == want.njev
    assert (case.jac is not None) == (solver in IMPLICIT)  # chosen once, at build


def test_max_steps_counts_steps_not_rhs_evaluations() -> None:
    """LSODA takes 508 steps (762 RHS evaluations) over ROBER: a bound of 508 steps holds
    it, 507 stops it at the 507th step, with how far it got."""
    case, theta = _case("stiff-robertson", "LSODA", 508)
    assert case.solve(theta).stats["steps"] == 508
    short, _ = _case("stiff-robertson", "LSODA", 507)
    with pytest.raises(SolverFailure) as e:
        short.solve(theta)
    assert e.value.status == Status.MAX_STEPS and "507 steps" in e.value.reason
    assert 0 < e.value.t_reached < 1e5 and "max_steps = 507" in e.value.reason


def test_one_step_bound_check_for_every_counting_backend() -> None:
    """The shared check (``backends/step_bound.py``) that SciPy, torchdiffeq, CVODES and
    diffsol feed their counts into: within the bound nothing, past it one text."""
    from sciml_bench.backends.step_bound import check_steps, steps_over

    assert steps_over(10, 8, 2) is None and steps_over(10, 10) is None
    assert steps_over(10, 9, 2) == ("9 accepted + 2 rejected steps over the whole solve > "
                                    "the shared max_steps = 10")  # fmt: skip
    assert steps_over(10, 11) == "11 accepted steps over the whole solve > the shared max_steps = 10"
    with pytest.raises(SolverFailure) as e:
        check_steps("lib", 10, 11, t_reached=0.5, note="counted after the solve")
    assert e.value.status == Status.MAX_STEPS and e.value.t_reached == 0.5
    assert e.value.reason.startswith("lib: 11 accepted steps") and e.value.reason.endswith(
        "(counted after the solve)")  # fmt: skip
