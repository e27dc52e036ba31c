"""SciPy ``solve_ivp``: solve only; the suite's tight reference is built on it.

It has no gradient, so its rows carry timings and solution error only. The
exact sympy Jacobian is supplied, as a careful SciPy user would.

On an array problem the case's ``jacobian`` (``options.extra``) picks how: ``dense`` (the
exact Jacobian as an ndarray: LAPACK's LU in BDF and Radau, ODEPACK's dense LU in LSODA) or
``sparse`` (BDF and Radau take the exact Jacobian as a ``scipy.sparse`` CSC matrix and
factorise it with SuperLU; LSODA takes no sparse matrix, only a band: its packed banded
Jacobian with ``lband``/``uband`` from the pattern). SciPy's best choice for large sparse
systems is BDF, the default there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from sciml_bench.backends.base import (
    Availability,
    Backend,
    Case,
    CaseOptions,
    EnsembleCase,
    EnsembleNotOffered,
    EnsembleSolution,
    Solution,
    SolverInfo,
)
from sciml_bench.measure.status import SolverFailure, Status, classify_message
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.problem.ensemble import Batch

#: RHS evaluations allowed per step: explicit stages, or Newton iterations plus the
#: finite-difference-free Jacobian's few extra calls for the implicit methods
EVALS_PER_STEP = {"LSODA": 10, "BDF": 10, "Radau": 10, "RK45": 6, "DOP853": 12}
_SOLVERS = {
    "LSODA": SolverInfo("LSODA", True, "ODEPACK Adams/BDF with automatic stiffness switching"),
    "BDF": SolverInfo("BDF", True, "variable-order BDF"),
    "Radau": SolverInfo("Radau", True, "implicit Runge-Kutta, order 5"),
    "RK45": SolverInfo("RK45", False, "Dormand-Prince 5(4)"),
    "DOP853": SolverInfo("DOP853", False, "Dormand-Prince 8(5,3)"),
}


IMPLICIT = ("LSODA", "BDF", "Radau")


def jacobian_choice(ns: dict[str, Any], solver: str, kind: str) -> tuple[Any, dict[str, int], str]:
    """The generated Jacobian ``solver`` gets for ``kind`` (``dense``/``sparse``), the
    ``solve_ivp`` options that go with it, and the linear solver as SciPy names it."""
    if solver not in IMPLICIT:
        return None, {}, f"none ({solver} is explicit)"
    if kind == "sparse" and solver == "LSODA":
        lower, upper = ns["JAC_BANDS"]
        return ns["jac_banded"], {"lband": lower, "uband": upper}, (
            f"ODEPACK banded LU (LSODA lband={lower}, uband={upper}: it takes no sparse matrix)"
        )
    if kind == "sparse":
        return ns["jac_sparse"], {}, "scipy.sparse.linalg.splu (SuperLU) on the exact CSC Jacobian"
    dense = "ODEPACK dense LU" if solver == "LSODA" else "scipy.linalg.lu_factor (LAPACK getrf)"
    return ns["jac"], {}, f"{dense} on the exact dense Jacobian"


class ScipyCase(Case):
    def __init__(self, problem: CompiledProblem, options: CaseOptions):
        from sciml_bench.problem.generated import load_python

        ns = load_python(problem.source["numpy"])
        self.rhs, self.jac = ns["rhs"], ns["jac"]
        self.p = problem
        self.o = options
        #: extra solve_ivp options of the Jacobian's kind (LSODA's band)
        self.jac_options: dict[str, int] = {}
        if problem.size is not None:  # an array problem: the Jacobian's kind is an axis
            kind = options.extra.get("jacobian", "dense")
            self.jac, self.jac_options, solver = jacobian_choice(ns, options.solver, kind)
            self.info = {"jacobian": kind, "linear_solver": solver}

    def timed_solve(self, params: np.ndarray, y0: np.ndarray | None = None) -> Any:
        """Solve from ``y0`` (default: the problem's initial state)."""
        from scipy.integrate import solve_ivp

        theta = params

        p, o = self.p, self.o
        implicit = o.solver in ("LSODA", "BDF", "Radau")
        # solve_ivp has no step bound: hold it to the shared one through its RHS calls
        budget = o.max_steps * EVALS_PER_STEP.get(o.solver, 10)
        calls = 0

        def f(t: float, y: np.ndarray) -> np.ndarray:
            nonlocal calls
            calls += 1
            if calls > budget:
                raise SolverFailure(
                    Status.MAX_STEPS,
                    f"scipy {o.solver}: over {budget} RHS evaluations, the shared max_steps "
                    f"x {EVALS_PER_STEP.get(o.solver, 10)} per step",
                    float(t),
                )
            return self.rhs(t, y, theta)

        sol = solve_ivp(
            f,
            p.t_span,
            p.y0 if y0 is None else y0,
            method=o.solver,
            t_eval=p.t_save,
            rtol=o.rtol,
            atol=o.atol,
            jac=(lambda t, y: self.jac(t, y, theta)) if implicit else None,
            **self.jac_options,
        )
        return sol

    def check_solve(self, raw: Any) -> Solution:
        sol = raw
        if not sol.success:
            t_reached = float(sol.t[-1]) if sol.t.size else None
            raise SolverFailure(classify_message(sol.message), f"scipy: {sol.message}", t_reached)
        y = sol.y.T
        if not np.all(np.isfinite(y)):
            raise SolverFailure(Status.NONFINITE, "scipy: non-finite values in the solution")
        return Solution(
            y, {"rhs_evals": int(sol.nfev), "jac_evals": int(sol.njev), "lu_decomps": int(sol.nlu)}
        )

    def timed_grad(self, params: np.ndarray) -> Any:
        raise NotImplementedError("scipy is the solve-only reference backend")

    def check_grad(self, raw: Any) -> tuple[float, np.ndarray]:
        raise NotImplementedError("scipy is the solve-only reference backend")


class ScipyEnsembleCase(EnsembleCase):
    """``independent``: a Python loop of ``solve_ivp`` over members, the CPU baseline.
    It has no gradient; at large sizes it runs into the case budget and ends as a
    ``budget_exceeded`` row, which is its honest result. CPU only, as every SciPy case:
    asked for ``cuda``, the worker builds it on the CPU and the row says so."""

    semantics = "independent"
    differentiable = False

    def __init__(self, problem: CompiledProblem, options: CaseOptions, batch: Batch):
        self.case = ScipyCase(problem, options)
        self.y0 = batch.y0
        self.batch = batch
        self.info = {"semantics": "independent", "members": batch.n}

    def solve_raw(self, params: np.ndarray) -> Any:
        P = self.batch.thetas(params)
        # a failing member raises SolverFailure here: the loop cannot go on past it
        case = self.case
        return [case.check_solve(case.timed_solve(P[m], self.y0[m])) for m in range(self.batch.n)]

    def check_solve(self, raw: Any) -> EnsembleSolution:
        return EnsembleSolution(
            np.stack([s.y for s in raw]),
            rhs_evals=np.array([s.stats["rhs_evals"] for s in raw]),
        )


class ScipyBackend(Backend):
    name = "scipy"
    packages = ("scipy", "numpy")
    extra = ""
    differentiable = False
    modules = ("scipy.integrate",)
    gradient_methods: Mapping[str, str] = {"none": "solve only (the reference backend)"}
    array_problems = True
    jacobians = ("dense", "sparse")

    def array_solver(self, stiff: bool) -> str:
        # BDF takes the exact sparse Jacobian (SuperLU); LSODA only a band
        return "BDF" if stiff else self.default_solver(stiff)

    def availability(self) -> Availability:
        return Availability.of_modules("scipy", extra="")

    def solvers(self) -> Mapping[str, SolverInfo]:
        return _SOLVERS

    def default_solver(self, stiff: bool) -> str:
        # LSODA was fastest on ROBER at rtol 1e-6 (benchmarks/best_config.py).
        return "LSODA" if stiff else "DOP853"

    def default_gradient(self, problem: CompiledProblem) -> str:
        return "none"

    def build(self, problem: CompiledProblem, options: CaseOptions) -> Case:
        return ScipyCase(problem, options)

    ensemble_semantics = ("independent",)

    def build_ensemble(
        self, problem: CompiledProblem, options: CaseOptions, batch: Batch, semantics: str
    ) -> EnsembleCase:
        if semantics != "independent":
            raise EnsembleNotOffered(f"scipy: a loop over members (independent), not {semantics}")
        return ScipyEnsembleCase(problem, options, batch)
