"""SciPy: solve only; the suite's tight reference is built on it.

It has no gradient, so its rows carry timings and solution error only. A problem with
events is solved in pieces between them, the solver restarted after each
(:mod:`sciml_bench.problem.event_segments`). The exact sympy
Jacobian is supplied to the implicit methods, as a careful SciPy user would.

On an array problem the case's ``jacobian`` (``options.extra``) picks how: ``dense`` (the
exact Jacobian as an ndarray: LAPACK's LU in BDF and Radau, ODEPACK's dense LU in LSODA) or
``sparse`` (BDF and Radau take the exact Jacobian as a ``scipy.sparse`` CSC matrix and
factorise it with SuperLU; LSODA takes no sparse matrix, only a band: its packed banded
Jacobian with ``lband``/``uband`` from the pattern). SciPy's best choice for large sparse
systems is BDF, the default there.

The solve is ``solve_ivp``'s own loop over its solver object (``LSODA``, ``BDF``,
``Radau``, ``RK45``, ``DOP853``): ``step()`` until the end, the dense output evaluated at
the save points each step passes, exactly as ``solve_ivp(..., t_eval=t_save)`` does (the
same states, to the last bit). Driving it here is what gives SciPy the shared step bound:
``solve_ivp`` has none, and a bound on RHS evaluations means a different number of steps
per method. ``max_steps`` bounds the steps taken (``step()`` calls: one accepted step
each; the solver objects do not report the steps they rejected inside one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from sciml_bench.backends.base import Backend, Case, CaseOptions, Solution, SolverInfo
from sciml_bench.backends.checks import failed_members, finite_solution
from sciml_bench.backends.ensemble import EnsembleCase, EnsembleNotOffered, EnsembleSolution
from sciml_bench.backends.step_bound import steps_over, stopped_at_bound
from sciml_bench.measure.status import SolverFailure, classify_message
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.problem.ensemble import Batch
from sciml_bench.problem.event_segments import (
    Stop,
    TooManyEvents,
    points_with_end,
    root_events,
    solve_with_events,
)

#: the methods that take the exact Jacobian
IMPLICIT = ("LSODA", "BDF", "Radau")
_SOLVERS = {
    "LSODA": SolverInfo("LSODA", True, "ODEPACK Adams/BDF with automatic stiffness switching"),
    "BDF": SolverInfo("BDF", True, "variable-order BDF"),
    "Radau": SolverInfo("Radau", True, "implicit Runge-Kutta, order 5"),
    "RK45": SolverInfo("RK45", False, "Dormand-Prince 5(4)"),
    "DOP853": SolverInfo("DOP853", False, "Dormand-Prince 8(5,3)"),
}


def jacobian_choice(
    ns: dict[str, Any], solver: str, kind: str, implicit: bool
) -> tuple[Any, dict[str, int], str]:
    """The generated Jacobian ``solver`` gets for ``kind`` (``dense``/``sparse``), the
    solver's options that go with it, and the linear solver as SciPy names it (``implicit``:
    whether the solver takes a Jacobian; passed in, as the printed program has no table)."""
    if not implicit:
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


@dataclass
class ScipyRun:
    """A solve's raw outcome: the states at the save points it passed, as the blocks the
    dense output gave (``(n_state, k)`` each, stacked in the check), and its counters."""

    blocks: list[np.ndarray] = field(default_factory=list)
    #: ``finished``, ``failed`` (the solver's ``message`` says why) or ``max_steps``
    status: str = "finished"
    message: str = ""
    t: float = 0.0
    steps: int = 0
    nfev: int = 0
    njev: int = 0
    nlu: int = 0
    #: the root event that stopped the solve at ``t`` and the state there (else None)
    root: int | None = None
    y_root: np.ndarray | None = None


def case_settings(problem: CompiledProblem, options: CaseOptions) -> dict[str, Any]:
    """The plain settings of one case (``sciml-bench codegen`` prints them): the method,
    whether it gets the exact Jacobian (the implicit ones do), tolerances, step bound
    (the same for every problem: ``problem`` is taken as every backend's is)."""
    settings = {"solver": options.solver, "exact_jacobian": options.solver in IMPLICIT,
                "rtol": options.rtol, "atol": options.atol, "max_steps": options.max_steps,
                "dtype": options.dtype}  # fmt: skip
    if problem.size is not None:  # an array problem: the Jacobian's kind is an axis
        settings["jacobian"] = options.extra.get("jacobian", "dense")
    return settings


def integrate(
    method: Any, f: Callable[..., Any], jac: Callable[..., Any] | None,
    t_span: tuple[float, float], y0: np.ndarray, t_eval: np.ndarray, rtol: float,
    atol: float, max_steps: int, roots: Any = (), **jac_options: int,
) -> ScipyRun:
    """``solve_ivp``'s own loop over the solver object ``method`` (e.g.
    ``scipy.integrate.LSODA``) from ``y0`` over ``t_span``: ``step()`` until the end, the
    dense output evaluated at the save points ``t_eval`` each step passes, as
    ``solve_ivp(..., t_eval=t_eval)`` does, under the bound of ``max_steps`` steps. What
    :class:`ScipyCase` runs and ``sciml-bench codegen --target numpy`` prints.
    ``jac_options`` are LSODA's band of an array problem (``lband``, ``uband``). ``roots``
    (:func:`~sciml_bench.problem.event_segments.root_events`) stop the solve where the
    first of them crosses zero in its direction, found as ``solve_ivp`` finds an event
    (:func:`_root_in_step`)."""
    t0, t1 = t_span
    kw = {"rtol": rtol, "atol": atol, **jac_options}
    solver = method(f, t0, y0, t1, **kw) if jac is None else method(
        f, t0, y0, t1, jac=jac, **kw)  # fmt: skip
    run = ScipyRun()
    i = 0  # the next save point
    g = [h(t0, y0) for h in roots]
    while True:
        if steps_over(max_steps, run.steps + 1) is not None:  # the next step would be past it
            run.status = "max_steps"
            break
        message = solver.step()
        run.steps += 1
        if solver.status == "failed":
            run.status, run.message = "failed", str(message)
            break
        if roots:
            g, hit = _root_in_step(roots, solver, g)
            if hit is not None:
                k, t_root = hit
                j = int(np.searchsorted(t_eval, t_root, side="left"))
                if j > i:
                    run.blocks.append(solver.dense_output()(t_eval[i:j]))
                run.root, run.y_root = k, solver.dense_output()(t_root)
                run.t, run.nfev, run.njev, run.nlu = t_root, solver.nfev, solver.njev, solver.nlu
                return run
        # the save points this step passed, a point equal to t included
        j = int(np.searchsorted(t_eval, solver.t, side="right"))
        if j > i:
            run.blocks.append(solver.dense_output()(t_eval[i:j]))
            i = j
        if solver.status == "finished":
            break
    run.t, run.nfev, run.njev, run.nlu = solver.t, solver.nfev, solver.njev, solver.nlu
    return run


def _root_in_step(roots: Sequence[Any], solver: Any, g: list[float]) -> tuple[list[float], Any]:
    """The roots' values at the step's end, and ``(k, t)`` of the first that crossed zero in
    its direction during the step (None: none did): the crossing rule and root finder of
    ``solve_ivp`` (``find_active_events``: a sign change including a zero at either end;
    ``brentq`` on the dense output to ``4·eps``)."""
    from scipy.optimize import brentq

    g_new = [h(solver.t, solver.y) for h in roots]
    sol, hits = solver.dense_output(), []
    for h, a, b in zip(roots, g, g_new, strict=True):
        up, down = a <= 0 <= b, a >= 0 >= b
        if (up and h.direction > 0) or (down and h.direction < 0):
            t = brentq(lambda s, h=h: h(s, sol(s)), solver.t_old, solver.t,
                       xtol=4 * np.finfo(float).eps)  # fmt: skip
            hits.append((t, h.k))
    if not hits:
        return g_new, None
    t, k = min(hits)
    return g_new, (k, t)


class _Stopped(Exception):
    """A piece of an event solve failed or met the step bound (its run says which)."""


class ScipyCase(Case):
    def __init__(self, problem: CompiledProblem, options: CaseOptions):
        import scipy.integrate

        from sciml_bench.problem.generated import load_python

        ns = load_python(problem.source["numpy"])
        self.rhs = ns["rhs"]
        #: the initial state at θ, where it depends on θ (problem/initial.py)
        self.y0_of: Callable[..., Any] | None = ns.get("y0")
        self.settings = case_settings(problem, options)
        #: the Jacobian the implicit methods get (``jac(t, y, p)``), chosen once, here
        self.jac: Callable[..., Any] | None = ns["jac"] if self.settings["exact_jacobian"] else None
        self.method = getattr(scipy.integrate, options.solver)
        self.p = problem
        self.o = options
        #: extra solver options of the Jacobian's kind (LSODA's band)
        self.jac_options: dict[str, int] = {}
        if problem.size is not None:  # an array problem: the Jacobian's kind is an axis
            kind = self.settings["jacobian"]
            self.jac, self.jac_options, solver = jacobian_choice(
                ns, options.solver, kind, self.settings["exact_jacobian"])
            self.info = {"jacobian": kind, "linear_solver": solver}
        self.t_eval = np.asarray(problem.t_save, dtype=np.float64)
        #: the generated ``(event_times, EVENTS)`` of a problem with events, else None
        self.events: tuple[Callable[..., Any], Any] | None = (
            (ns["event_times"], ns["EVENTS"]) if "event_times" in ns else None)
        self.ns = ns

    def timed_solve(self, params: np.ndarray, y0: np.ndarray | None = None) -> ScipyRun:
        """Solve from ``y0`` (default: the problem's initial state, at ``params`` where it
        depends on them) at ``params``."""
        # the parameters bound once per solve, in C (functools.partial), not per call
        jac = None if self.jac is None else partial(self.jac, p=params)
        if y0 is None:
            y0 = self.p.y0 if self.y0_of is None else self.y0_of(params)
        if self.events is not None:
            return self.integrate_events(partial(self.rhs, p=params), jac, y0, params)
        return self.integrate(partial(self.rhs, p=params), jac, y0)

    def integrate(
        self, f: Callable[..., Any], jac: Callable[..., Any] | None, y0: np.ndarray,
        span: tuple[float, float] | None = None, t_eval: np.ndarray | None = None,
        max_steps: int | None = None, roots: Sequence[Any] = (),
    ) -> ScipyRun:  # fmt: skip
        """``solve_ivp``'s loop (forward in time, ``t_eval``), under the step bound."""
        s = self.settings
        return integrate(self.method, f, jac, span or self.p.t_span, y0,
                         self.t_eval if t_eval is None else t_eval, s["rtol"], s["atol"],
                         s["max_steps"] if max_steps is None else max_steps, roots,
                         **self.jac_options)  # fmt: skip

    def integrate_events(
        self, f: Callable[..., Any], jac: Callable[..., Any] | None, y0: np.ndarray,
        params: np.ndarray,
    ) -> ScipyRun:  # fmt: skip
        """The solve in pieces between the events, by the driver the reference uses
        (:func:`~sciml_bench.problem.event_segments.solve_with_events`): the solver object
        restarted from the state each event sets, as a SciPy user restarts ``solve_ivp``,
        a root event found in its stepping loop (:func:`integrate`'s ``roots``); one step
        bound over the whole span. The run's counters add up the pieces'."""
        assert self.events is not None
        times, jumps = self.events
        total = ScipyRun()
        roots = root_events(self.ns, params, self.p.n_state)

        def piece(a: float, b: float, save: np.ndarray, y: np.ndarray) -> Stop:
            run = self.integrate(f, jac, y, (a, b), points_with_end(self.t_eval[save], b),
                                 self.settings["max_steps"] - total.steps, roots)  # fmt: skip
            total.steps, total.nfev = total.steps + run.steps, total.nfev + run.nfev
            total.njev, total.nlu, total.t = total.njev + run.njev, total.nlu + run.nlu, run.t
            if run.status != "finished":
                total.status, total.message = run.status, run.message
                raise _Stopped
            states = np.hstack(run.blocks) if run.blocks else np.zeros((len(y), 0))
            if run.root is not None:
                return Stop(states.T, run.t, run.y_root, run.root)
            return Stop(states[:, : save.size].T, b, states[:, -1])

        try:
            y = solve_with_events(self.p.t_span, self.t_eval, times(params), y0, piece,
                                  lambda k, t, y: jumps[k](y, params))  # fmt: skip
        except _Stopped:
            return total
        except TooManyEvents as e:
            total.status, total.message = "failed", str(e)
            return total
        total.blocks = [y.T]
        return total

    def check_solve(self, raw: Any) -> Solution:
        run: ScipyRun = raw
        o = self.o
        if run.status == "max_steps":
            raise stopped_at_bound(f"scipy {o.solver}", o.max_steps, run.steps, run.t,
                                   self.p.t_span[1])  # fmt: skip
        if run.status == "failed":
            raise SolverFailure(classify_message(run.message), f"scipy: {run.message}",
                                float(run.t))  # fmt: skip
        y = finite_solution("scipy", np.hstack(run.blocks).T)
        return Solution(y, {"steps": run.steps, "rhs_evals": run.nfev, "jac_evals": run.njev,
                            "lu_decomps": run.nlu})  # fmt: skip

    def timed_grad(self, params: np.ndarray) -> Any:
        raise NotImplementedError("scipy is the solve-only reference backend")

    def check_grad(self, raw: Any) -> tuple[float, np.ndarray]:
        raise NotImplementedError("scipy is the solve-only reference backend")


class ScipyEnsembleCase(EnsembleCase):
    """``independent``: a Python loop of solves over members, the CPU baseline. It has no
    gradient; at large sizes it runs into the case budget and ends as a ``budget_exceeded``
    row, which is its honest result. CPU only, as every SciPy case: asked for ``cuda``, the
    worker builds it on the CPU and the row says so. The timed loop holds the members'
    solves alone; every member is checked after it (a failing member fails the batch)."""

    semantics = "independent"
    differentiable = False

    def __init__(self, problem: CompiledProblem, options: CaseOptions, batch: Batch):
        self.case = ScipyCase(problem, options)
        self.y0 = batch.y0
        self.batch = batch
        self.info = {"semantics": "independent", "members": batch.n}

    def solve_raw(self, params: np.ndarray) -> Any:
        P = self.batch.thetas(params)
        solve, y0 = self.case.timed_solve, self.y0
        return [solve(P[m], y0[m]) for m in range(self.batch.n)]

    def check_solve(self, raw: Any) -> EnsembleSolution:
        sols, failures = [], []
        for m, run in enumerate(raw):
            try:
                sols.append(self.case.check_solve(run))
            except SolverFailure as e:
                failures.append((m, e))
        if failures:
            ok = np.ones(len(raw), bool)
            ok[[m for m, _ in failures]] = False
            first = failures[0][1]
            raise SolverFailure(first.status, f"{first.reason}; {failed_members(ok)}",
                                first.t_reached)  # fmt: skip
        return EnsembleSolution(
            np.stack([s.y for s in sols]),
            steps=np.array([s.stats["steps"] for s in sols]),
            rhs_evals=np.array([s.stats["rhs_evals"] for s in sols]),
        )


class ScipyBackend(Backend):
    name = "scipy"
    packages = ("scipy", "numpy")
    extra = ""
    differentiable = False
    modules = ("scipy.integrate",)
    gradient_methods: Mapping[str, str] = {"none": "solve only (the reference backend)"}
    solver_table = _SOLVERS
    case_type = ScipyCase
    array_problems = True
    jacobians = ("dense", "sparse")
    events = ("time", "state")
    # LSODA was fastest on ROBER at rtol 1e-6 (benchmarks/README.md, "What was tried for
    # the stiff defaults", by benchmarks/best_config.py).
    stiff_solver, nonstiff_solver = "LSODA", "DOP853"

    def array_solver(self, stiff: bool) -> str:
        # BDF takes the exact sparse Jacobian (SuperLU); LSODA only a band
        return "BDF" if stiff else self.default_solver(stiff)

    ensemble_semantics = ("independent",)

    def build_ensemble(
        self, problem: CompiledProblem, options: CaseOptions, batch: Batch, semantics: str
    ) -> EnsembleCase:
        if semantics != "independent":
            raise EnsembleNotOffered(f"scipy: a loop over members (independent), not {semantics}")
        return ScipyEnsembleCase(problem, options, batch)
