"""libRoadRunner (SUNDIALS CVODE and CVODES behind an LLVM-compiled SBML model), in float64:
the SBML simulator under Tellurium, run as its users run it.

The model. A ``run --sbml`` problem runs the modeller's own file (``problem.sbml_map``), any
other problem the suite's rate-rule export (``source["sbml"]``); ``roadrunner.RoadRunner``
compiles it to native code at build. Where each problem state and parameter is in it, the
tolerances in its units (species as amounts) and how a parameter change re-evaluates the
initial assignments: :mod:`sciml_bench.problem.sbml.roadrunner_model`.

The solve: the parameters' initial values set (``model.setValue("init(p)")``) and
``resetAll()``, then ``simulate(times=...)`` at the save points (``t0`` first where it is
not one). CVODE as roadrunner sets it up: ``stiff = true`` (BDF, Newton iteration, SUNDIALS'
dense LU on a difference-quotient Jacobian: roadrunner's default and only linear solver) or
``false`` (Adams, fixed-point iteration); the shared rtol, the shared atol per state in
roadrunner's units (a vector: its scalar one is scaled by each state's start), and
``maximum_num_steps = max_steps``, which CVODE applies to each interval between save points
(``mxstep`` per ``CVode`` call). roadrunner reports no step counts, so the shared
whole-solve bound cannot be counted after the solve: the row's ``steps`` is empty and its
``case_info.step_bound`` says so.

The gradient (``forward``): roadrunner's ``ForwardSensitivitySolver`` (CVODES' forward
sensitivity module, simultaneous corrector, Newton; ``∂f/∂θ`` by CVODES' centred
difference quotients; error control on the sensitivities with ``pbar = θ``, CVODES' scaling,
so ``θ_i ∂y/∂θ_i = ∂y/∂log θ_i`` is what its tolerance weighs), made afresh for every call
on the model at the new parameters: it copies the parameter values when it is made, and a
solver made earlier integrates the old ones. Stepped to each save point (``integrate``, its
``getSensitivityMatrix``: ``S = ∂n/∂θ``, parameters × state vector), then

    ∂Y_ij/∂θ_p = f_j S_i[p, c_j],    dL/dθ_p = Σ_ij (2 W_ij (Y_ij − O_ij) + C_ij) ∂Y_ij/∂θ_p,

``c_j`` the state-vector entry of state ``j`` and ``f_j`` its factor (``1/V`` for a
concentration). Its sensitivities start at ``S(t0) = 0`` and perturb a parameter in the
right-hand side only: where a parameter also moves a start value or another parameter
(an initial assignment: ``A = 10*kf``, ``kf2 = 2*kf``) the result is wrong, so such a
problem's gradient is refused with the parameters and what they move (found at build by
changing each in roadrunner's own model), never answered; so is a one-state model's, whose
sensitivity solver (2.10) integrates ``dy/dt = 0``. A refused gradient leaves a solve row
(``gradient_refused`` on the case: the worker times the solve alone, as SciPy's, and the
row's reason says why there is no gradient).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sciml_bench.backends.base import (
    Availability,
    Backend,
    Case,
    CaseOptions,
    ProblemNotExpressible,
    Solution,
    SolverInfo,
)
from sciml_bench.backends.checks import finite_solution
from sciml_bench.backends.compiled import expressible_source, library_failure
from sciml_bench.backends.ensemble import EnsembleCase, EnsembleNotOffered
from sciml_bench.measure.status import SolverFailure, Status
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.problem.ensemble import Batch
from sciml_bench.problem.sbml import roadrunner_model as rm

_SOLVERS = {
    "BDF": SolverInfo("BDF", True, "CVODE variable-order BDF (orders 1-5), Newton iteration, "
                      "dense LU on a difference-quotient Jacobian (roadrunner's stiff = true, "
                      "its default)"),
    "Adams": SolverInfo("Adams", False, "CVODE Adams-Moulton (orders 1-12), fixed-point "
                        "iteration (roadrunner's stiff = false)"),
}  # fmt: skip
_GRADIENTS = {
    "forward": ("CVODES forward sensitivities through roadrunner's ForwardSensitivitySolver "
                "(simultaneous corrector, ∂f/∂θ by centred difference quotients), stepped to "
                "the save points; dL/dθ = Σ (2W(Y-O) + C)·∂Y/∂θ in NumPy"),
}
IDIOM = (
    "roadrunner.RoadRunner(sbml) at build; timed solve = model.setValue('init(p)', θ_p) for "
    "each parameter, resetAll(), simulate(times=[t0,] t_save); timed gradient = the same "
    "reset, ForwardSensitivitySolver(model, parameters) with the case's settings, "
    "solveSensitivities(t0, t_1, 2, ...) then integrate(t_k, t_k+1 - t_k) and "
    "getSensitivityMatrix() at each save point, the loss and its gradient in NumPy"
)
#: roadrunner's forward sensitivity settings, left at its defaults (recorded on each row)
SENSITIVITY_DEFAULTS = {"sensitivity_method": "simultaneous", "nonlinear_solver": "newton",
                        "DQ_method": "centered"}  # fmt: skip


def model_plan(problem: CompiledProblem) -> rm.ModelPlan:
    """The SBML roadrunner runs: the modeller's own file where the problem has one, else the
    export (or :class:`ProblemNotExpressible` where the export says why it has none)."""
    own = problem.sbml_map
    if own is not None:
        return rm.own_plan(problem.source["sbml_model"], own["states"], own["parameters"],
                           own["locals"])  # fmt: skip
    text = expressible_source("roadrunner", problem, "sbml")
    return rm.export_plan(text, problem.state_names, problem.param_names)


def case_settings(problem: CompiledProblem, options: CaseOptions) -> dict[str, Any]:
    """The plain settings of one case: the integrator's (``stiff`` from the solver), the
    shared tolerances and step bound, the gradient method and the save points as
    ``simulate`` takes them (:func:`~.roadrunner_model.output_times`)."""
    if options.solver not in _SOLVERS:
        raise ValueError(f"roadrunner offers {', '.join(_SOLVERS)}, not {options.solver!r}")
    times, drop = rm.output_times(float(problem.t_span[0]), problem.t_save)
    return {"solver": options.solver, "stiff": _SOLVERS[options.solver].stiff,
            "rtol": options.rtol, "atol": options.atol, "max_steps": int(options.max_steps),
            "gradient": options.gradient_method, "times": times, "drop": drop,
            "dtype": options.dtype}  # fmt: skip


def configure(solver: Any, settings: Mapping[str, Any], atol: Sequence[float]) -> None:
    """The case's settings on roadrunner's CVODE integrator or a sensitivity solver (both
    take ``setValue``): ``stiff`` first (changing it rebuilds CVODE), then the tolerances
    (the absolute one as a vector, one per state-vector entry) and the step bound."""
    if bool(solver.getValue("stiff")) != settings["stiff"]:
        solver.setValue("stiff", settings["stiff"])
    solver.setValue("relative_tolerance", float(settings["rtol"]))
    solver.setValue("absolute_tolerance", [float(a) for a in atol])
    solver.setValue("maximum_num_steps", int(settings["max_steps"]))


def gradient_block(r: Any, plan: rm.ModelPlan, reads: Sequence[rm.StateRead],
                   theta: Sequence[float]) -> str:  # fmt: skip
    """Why roadrunner's forward sensitivities would be wrong for this problem ("" when they
    are right): a parameter that is no global parameter (a compartment's size), one that
    moves a start or another parameter (found by changing it in the model:
    :func:`~.roadrunner_model.moved_by`), a state no state-vector entry gives linearly, or
    a one-state model (roadrunner's sensitivity solver does not integrate it)."""
    if len(rm.state_vector(r)) == 1:
        return ("the model has one state, and roadrunner 2.10's ForwardSensitivitySolver "
                "integrates dy/dt = 0 for a one-state model (its right-hand side zeroes ydot[0] "
                "where its own stateVectorVariables flag, never set, is false)")
    globals_ = set(r.model.getGlobalParameterIds())
    odd = [p for p in plan.parameters if p not in globals_]
    if odd:
        return (f"{', '.join(odd)} {'is' if len(odd) == 1 else 'are'} not global parameters "
                "in roadrunner (a compartment's size?), and its sensitivity solver takes "
                "global parameters only")  # fmt: skip
    moves = {p: m for p, m in rm.moved_by(r, plan.parameters, theta).items() if m}
    if moves:
        said = "; ".join(f"{p} moves {', '.join(m[:6])}" for p, m in moves.items())
        return (f"changing a parameter moves a start value or another parameter through the "
                f"model's initial assignments ({said}), and roadrunner's forward sensitivities "
                "start at S(t0) = 0 and perturb a parameter in the right-hand side only")
    return "; ".join(s.why for s in reads if not s.column)


def _loss(Y: np.ndarray, loss: tuple[np.ndarray, ...]) -> tuple[float, np.ndarray]:
    """``L = Σ W (Y − O)² + Σ C Y`` and ``∂L/∂Y = 2 W (Y − O) + C`` (``n_save × n_state``)."""
    W, O, C = loss
    D = Y - O
    return float(np.sum(W * D * D) + np.sum(C * Y)), 2 * W * D + C


def sensitivity_sweep(
    r: Any, solver: Any, ids: list[str], times: Sequence[float], drop: int
) -> tuple[np.ndarray, np.ndarray]:
    """The states (``n_save × n_read``, roadrunner's time-course selections) and the
    sensitivities (``n_save × P × n_vector``) at the save points, from the model's current
    (reset) state: ``solveSensitivities`` to the first point after ``times[0]`` (it restarts
    CVODES there), ``integrate`` to each next one. A save point at ``t0`` gets ``S = 0``."""
    ys, ss = [], []
    if drop == 0:
        ys.append(np.array(r.getSelectedValues()))
        ss.append(np.zeros((len(ids), len(rm.state_vector(r)))))
    t = float(times[0])
    for k, tn in enumerate(times[1:]):
        if k == 0:
            solver.solveSensitivities(t, float(tn), 2, ids, [], 0)
        else:
            solver.integrate(t, float(tn) - t)
        t = float(tn)
        ys.append(np.array(r.getSelectedValues()))
        # P × n_vector (roadrunner squeezes a 1 × 1 matrix to one number's array)
        ss.append(np.array(solver.getSensitivityMatrix(0)).reshape(len(ids), -1))
    return np.array(ys), np.array(ss)


class RoadrunnerCase(Case):
    """One problem in one roadrunner model; parameters in natural units throughout."""

    def __init__(self, problem: CompiledProblem, options: CaseOptions):
        import roadrunner

        self.plan = model_plan(problem)
        st = self.settings = case_settings(problem, options)
        t0 = time.perf_counter()
        self.rr = self._load(self.plan, problem.theta0)
        self.build_detail = {"model_load": time.perf_counter() - t0}
        self.reads = self._reads()
        self.atol = rm.tolerance_vector(self.rr, options.atol, self.plan.formulas)
        configure(self.rr.integrator, st, self.atol)
        self.rr.timeCourseSelections = [s.selection for s in self.reads]
        self.cols = [rm.state_vector(self.rr).index(s.column) if s.column else -1
                     for s in self.reads]  # fmt: skip
        self.factors = np.array([s.factor for s in self.reads], dtype=np.float64)
        self.blocked = gradient_block(self.rr, self.plan, self.reads, problem.theta0)
        #: why this problem gets no gradient here ("" none): the worker then times the
        #: solve alone, as SciPy's row, and the row says why (run/ode.py)
        self.gradient_refused = self.blocked
        self.loss = (np.asarray(problem.loss_W, dtype=np.float64),
                     np.asarray(problem.loss_O, dtype=np.float64),
                     np.asarray(problem.loss_C, dtype=np.float64))  # fmt: skip
        self._roadrunner = roadrunner
        self.info = self._info(roadrunner.__version__)

    def _load(self, plan: rm.ModelPlan, theta: Any) -> Any:
        try:
            r = rm.load(plan)
            rm.check_parameters(r, plan.parameters, theta)
            return r
        except (RuntimeError, ValueError) as e:
            raise ProblemNotExpressible(f"roadrunner: {' '.join(str(e).split())[:400]}") from None

    def _reads(self) -> list[rm.StateRead]:
        try:
            return [rm.state_read(self.rr, f) for f in self.plan.formulas]
        except ValueError as e:
            raise ProblemNotExpressible(str(e)) from None

    def _info(self, version: str) -> dict[str, Any]:
        st = self.settings
        return {
            "idiom": IDIOM, "roadrunner_version": version, "sbml": self.plan.which,
            "local_parameters": ("promoted to global ones (getParamPromotedSBML)"
                                 if self.plan.promoted else "none differentiated"),
            "integrator": f"cvode, stiff = {str(st['stiff']).lower()}",
            "linear_solver": ("SUNDIALS dense LU on a difference-quotient Jacobian "
                              "(roadrunner's only one)" if st["stiff"] else
                              "none (fixed-point iteration)"),
            "tolerances": (f"relative {st['rtol']:g}; absolute {st['atol']:g} per state in "
                           "roadrunner's units (a vector: atol x compartment size on a "
                           "species held as an amount whose problem state is its "
                           "concentration)"),
            "step_bound": (f"maximum_num_steps = {st['max_steps']} per interval between save "
                           "points (CVODE's mxstep per CVode call); roadrunner reports no step "
                           "counts, so the whole-solve bound is not counted"),
            "sensitivities": ("forward: roadrunner ForwardSensitivitySolver, "
                              + ", ".join(f"{k} {v}" for k, v in SENSITIVITY_DEFAULTS.items())
                              + ", error control scaled by pbar = θ, made afresh per call"),
            "gradient_refused": self.blocked,
            "conserved_moiety_analysis": bool(self.rr.conservedMoietyAnalysis),
        }  # fmt: skip

    def _call(self, fn: Any, *args: Any) -> Any:
        """A roadrunner call; its ``RuntimeError`` (CVODE's flags in its text) as a status."""
        try:
            return fn(*args)
        except RuntimeError as e:
            raise roadrunner_failure(e) from None

    def prepare(self, theta: np.ndarray) -> Any:
        return [float(v) for v in np.asarray(theta, dtype=np.float64)]

    def _reset(self, params: list[float]) -> None:
        rm.set_parameters(self.rr, self.plan.parameters, params)

    def timed_solve(self, params: Any) -> Any:
        self._reset(params)
        return self._call(lambda: self.rr.simulate(times=self.settings["times"]))

    def check_solve(self, raw: Any) -> Solution:
        y = np.array(raw, dtype=np.float64)[self.settings["drop"]:]
        return Solution(finite_solution("roadrunner", y), {})

    def sensitivity_solver(self) -> Any:
        """A forward sensitivity solver on the model as it is now, with the case's settings."""
        make = self._roadrunner.ForwardSensitivitySolver
        solver = make(self.rr.model, list(self.plan.parameters))
        configure(solver, self.settings, self.atol)
        return solver

    def timed_grad(self, params: Any) -> Any:
        if self.blocked:
            raise ProblemNotExpressible(f"roadrunner: no gradient: {self.blocked}")
        self._reset(params)
        ys, S = self._call(lambda: sensitivity_sweep(
            self.rr, self.sensitivity_solver(), list(self.plan.parameters),
            self.settings["times"], self.settings["drop"]))  # fmt: skip
        value, dY = _loss(ys, self.loss)
        dYdθ = S[:, :, self.cols] * self.factors  # n_save × P × n_state
        return value, np.einsum("ij,ipj->p", dY, dYdθ)

    def check_grad(self, raw: Any) -> tuple[float, np.ndarray]:
        value, grad = raw
        return float(value), np.asarray(grad, dtype=np.float64)


def roadrunner_failure(e: Exception) -> SolverFailure:
    """roadrunner's error text (``CVODE Error: CV_TOO_MUCH_WORK: ...``) as a status; a step
    bound's says that roadrunner's bound is per interval between save points."""
    message = " ".join(str(e).split())
    failure = library_failure("roadrunner", message)
    if failure.status is Status.MAX_STEPS:
        failure.reason += (" (roadrunner's maximum_num_steps bounds each interval between save "
                           "points: CVODE's mxstep per CVode call)")  # fmt: skip
    return failure


class RoadrunnerBackend(Backend):
    name = "roadrunner"
    packages = ("libroadrunner",)
    extra = "roadrunner"
    modules = ("roadrunner",)
    #: the generated sources a case reads (the compile step makes only what is declared)
    sources = ("sbml",)
    gradient_methods: Mapping[str, str] = _GRADIENTS
    solver_table = _SOLVERS
    case_type = RoadrunnerCase
    stiff_solver, nonstiff_solver = "BDF", "BDF"
    #: array problems run as the export's one rate rule per element, dense LU only
    array_problems = True
    jacobians = ("dense",)
    sparse_missing = ("roadrunner's CVODE integrator factorises a dense difference-quotient "
                      "Jacobian (SUNDIALS' dense LU) and offers no sparse linear solver")

    def default_gradient(self, problem: CompiledProblem) -> str:
        return "forward"

    def availability(self) -> Availability:
        """libroadrunner installed (its module ``roadrunner``), found without importing it."""
        return Availability.of_modules("roadrunner", extra=self.extra)

    def build_ensemble(
        self, problem: CompiledProblem, options: CaseOptions, batch: Batch, semantics: str
    ) -> EnsembleCase:
        raise EnsembleNotOffered("roadrunner: no ensemble: one model simulates one trajectory "
                                 "per call (a Python loop over members is what SciPy's "
                                 "independent row already measures)")  # fmt: skip

