"""diffsol (Rust) through pydiffsol, in float64.

The problem is DiffSL text (``sciml-bench codegen --target diffsl``), JIT-compiled by
``pydiffsol.Ode(code, matrix_type=..., scalar_type=f64, ode_solver=...)`` in the build
phase (LLVM; DiffSL differentiates the model with Enzyme for Jacobians and
sensitivities). A solve is ``ode.solve_dense(u, t_save)``, the states at the save
times from diffsol's interpolant, in one call into Rust; ``u`` is the model's parameters,
``log θ`` for a parameter in log space and ``θ`` otherwise
(:func:`~sciml_bench.backends.compiled.model_parameters`).

Solvers: ``bdf`` (stiff default), ``esdirk34``, ``tr_bdf2`` and ``tsit45`` (non-stiff
default). Matrices: ``nalgebra_dense`` below :data:`SPARSE_FROM` states, ``faer_sparse``
from there (the switch diffsol's own benchmarks make); recorded per row. An array problem
(``[sizes]``) runs DiffSL's array form (:mod:`sciml_bench.problem.codegen.diffsl_arrays`:
indexed tensors, operators as sparse matrices), and the case's ``jacobian``
(``options.extra``, the ``--jacobian`` axis) picks the matrices: ``dense`` is
``nalgebra_dense`` (dense LU), ``sparse`` ``faer_sparse`` (faer's sparse LU); diffsol finds
the Jacobian's sparsity from the compiled model. The array form's state is stored state
by state (``u[s n + e]``); the solution, and the loss's ``∂L/∂Y`` going back in, are
reordered to the suite's layout ``y[e S + s]`` (:func:`suite_order`).

Gradients, the loss's chain rule written in NumPy as a pydiffsol user writes it:

- ``forward``: ``solve_fwd_sens`` gives ``Y`` and ``S_k = ∂Y/∂θ_k`` at the save times, and
  ``dL/dθ_k = Σ_ij (2 W_ij (Y_ij − O_ij) + C_ij) S_k,ij``;
- ``adjoint``: ``solve_adjoint_fwd`` (the solve, checkpointed) then
  ``solve_adjoint_bkwd`` with ``∂L/∂Y`` at the save times: diffsol's discrete adjoint.

The default, as for CVODES, is ``forward`` up to
:data:`~sciml_bench.backends.compiled.FORWARD_SENSITIVITY_LIMIT` parameters and ``adjoint``
above. The sensitivity equations and the adjoint's gradient are put under error control
at the problem's tolerances (pydiffsol leaves them out by default, which left ROBER's
``∂L/∂k2`` far outside the pass tier: docs/fairness.md, "diffsol (Rust) through
pydiffsol", the gradient's line). One absolute tolerance serves every parameter
(pydiffsol does not expose diffsol's per-parameter scales): dividing it by ``max|θ|``, as
CVODES' parameter scaling would, made ROBER's sensitivities fail their error test. So the
model takes ``log θ`` for a parameter in log space and the sensitivities are
``∂y/∂log θ = θ ∂y/∂θ``, on one scale for rates from 0.04 to 3e7, which made ROBER's
forward gradient more accurate and brought ``stiff-robertson-rates``' forward and adjoint
gradients together at P = 300 (measured: docs/backends.md, "Parameters in the gradient's
scale"). The case returns ``∂L/∂θ = (∂L/∂log θ) / θ``
(:func:`~sciml_bench.backends.compiled.natural_gradient`).

Step bound: diffsol has none (its solvers stop on a step size that underflows or on
repeated error-test or Newton failures). The shared ``max_steps`` is checked after the
solve against diffsol's accepted steps, counted once per parameter vector by
``ode.solve(theta, t_last)`` (``t_last`` the last save time, where ``solve_dense`` stops),
which takes the same steps as ``solve_dense`` and returns every step's time; a solve that
would never end is stopped by the case's budget.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from sciml_bench.backends.base import CaseOptions, Solution, SolverInfo
from sciml_bench.backends.checks import finite_solution
from sciml_bench.backends.compiled import (
    CompiledBackend,
    CompiledCase,
    expressible_source,
    library_failure,
    parameter_scale,
)
from sciml_bench.backends.step_bound import check_steps
from sciml_bench.measure.status import SolverFailure
from sciml_bench.problem.compiled import CompiledProblem, log_scaled

_SOLVERS = {
    "bdf": SolverInfo("bdf", True, "variable-order BDF (NDF variant)"),
    "esdirk34": SolverInfo("esdirk34", True, "ESDIRK 3(4), L-stable SDIRK"),
    "tr_bdf2": SolverInfo("tr_bdf2", True, "TR-BDF2, 2nd order, L-stable"),
    "tsit45": SolverInfo("tsit45", False, "Tsitouras 5(4), explicit"),
}
_GRADIENTS = {
    "forward": "forward sensitivities (solve_fwd_sens)",
    "adjoint": "discrete adjoint (solve_adjoint_fwd + solve_adjoint_bkwd)",
}
#: from this many states a case uses sparse matrices (diffsol's benchmarks switch at 20
#: ROBER groups, 60 states)
SPARSE_FROM = 60
IDIOM = (
    "pydiffsol.Ode(DiffSL code, scalar_type=f64, matrix_type, ode_solver), JIT-compiled "
    "at build; timed solve = ode.solve_dense(theta, t_save); timed gradient = "
    "solve_fwd_sens (forward) or solve_adjoint_fwd + solve_adjoint_bkwd (adjoint) and the "
    "loss's chain rule in NumPy; steps counted by ode.solve(theta, t_save[-1]) after the clock"
)
#: diffsol's messages end "... at time = 0.378"
_AT_TIME = re.compile(r"at time = ([-+0-9.eE]+)")


#: the matrices of each Jacobian kind an array problem's case asks for
MATRICES = {"dense": "nalgebra_dense", "sparse": "faer_sparse"}
#: what diffsol's default linear solver is on each matrix type
LINEAR_SOLVERS = {"nalgebra_dense": "nalgebra dense LU", "faer_dense": "faer dense LU",
                  "faer_sparse": "faer sparse LU"}  # fmt: skip


def matrix_type(n_state: int, jacobian: str | None = None) -> str:
    """pydiffsol's matrix type: the case's Jacobian kind where it names one, else by size."""
    if jacobian in MATRICES:
        return MATRICES[jacobian]
    return "faer_sparse" if n_state >= SPARSE_FROM else "nalgebra_dense"


def sens_tolerances(problem: CompiledProblem, rtol: float, atol: float) -> tuple[float, float]:
    """``(rtol, atol)`` of the sensitivity and adjoint-gradient equations: the problem's."""
    return rtol, atol


def case_settings(problem: CompiledProblem, options: CaseOptions) -> dict[str, Any]:
    """The plain settings of one case (``sciml-bench codegen`` prints them): the solver,
    matrix type, tolerances (the sensitivities' too), gradient method, step bound and
    which parameters the model takes as logs
    (:func:`~sciml_bench.problem.compiled.log_scaled`)."""
    sr, sa = sens_tolerances(problem, options.rtol, options.atol)
    found = problem.layout
    return {"solver": options.solver, "rtol": options.rtol, "atol": options.atol,
            "matrix_type": matrix_type(problem.n_state, options.extra.get("jacobian")),
            "sens_rtol": sr, "sens_atol": sa, "t0": float(problem.t_span[0]),
            "min_timestep": MIN_TIMESTEP,
            "gradient": options.gradient_method, "max_steps": options.max_steps,
            "dtype": options.dtype, "layout": list(found) if found else None,
            "log_scaled": log_scaled(problem).tolist()}  # fmt: skip


def suite_order(settings: dict[str, Any]) -> np.ndarray | None:
    """``order`` with ``y = out[order]`` in the suite's layout, for an array model stored
    state by state (``settings["layout"] = [S, n]``): ``order[e S + s] = s n + e``;
    ``None`` for a scalar model (already in the suite's layout)."""
    if not settings.get("layout"):
        return None
    S, n = settings["layout"]
    return np.arange(S * n).reshape(S, n).T.ravel()


#: the smallest step diffsol may take. pydiffsol's default, 1e-13 in absolute time, stopped
#: Van der Pol's first solve at t ~ 1e-14 from rtol 1e-8 on ("Step size is too small"),
#: where its fast start needs smaller steps; CVODES (hmin 0) and SciPy set no floor. 1e-20
#: binds only near t = 0 (elsewhere a step below eps |t| cannot move t anyway), so a
#: solve that blows up still ends as `dt_underflow` at the time it reached (with no floor
#: at all it ran on into non-finite values, the time lost)
MIN_TIMESTEP = 1e-20


def make_ode(code: str, settings: dict[str, Any]) -> Any:
    """``pydiffsol.Ode`` of the DiffSL ``code``, JIT-compiled, with the case's solver,
    matrices and tolerances (what :class:`DiffsolCase` runs and ``sciml-bench codegen
    --target diffsl`` prints)."""
    import pydiffsol as ds

    ode = ds.Ode(code, scalar_type=ds.f64, matrix_type=getattr(ds, settings["matrix_type"]),
                 ode_solver=getattr(ds, settings["solver"]))  # fmt: skip
    ode.rtol, ode.atol = settings["rtol"], settings["atol"]
    ode.t0 = settings["t0"]
    sr, sa = settings["sens_rtol"], settings["sens_atol"]
    ode.sens_rtol, ode.sens_atol = sr, sa
    ode.param_rtol, ode.param_atol = sr, sa
    ode.options.min_timestep = settings["min_timestep"]
    return ode


def loss_and_dL_dY(ys: np.ndarray, loss_arrays: Any) -> tuple[float, np.ndarray]:
    """``L = Σ W (Y − O)² + Σ C Y`` and ``∂L/∂Y = 2 W (Y − O) + C`` in diffsol's layout
    (``ys`` and the result ``n_state × n_save``; ``W``, ``O``, ``C`` ``n_save × n_state``)."""
    W, O, C = loss_arrays
    Y = ys.T
    D = Y - O
    return float(np.sum(W * D * D) + np.sum(C * Y)), (2 * W * D + C).T


def gradient(
    ode: Any, params: np.ndarray, t_save: np.ndarray, adjoint: bool, loss_arrays: Any,
    order: np.ndarray | None = None,
) -> tuple[float, Any]:  # fmt: skip
    """``(L, dL/dθ)``: diffsol's discrete adjoint (``solve_adjoint_fwd`` then
    ``solve_adjoint_bkwd`` with ``∂L/∂Y``), or forward sensitivities (``solve_fwd_sens``)
    and the chain rule ``dL/dθ_k = Σ_ij ∂L/∂Y_ij S_k,ij`` in NumPy. With ``order``
    (:func:`suite_order`) the loss reads ``Y = out[order]`` and ``∂L/∂out`` is ``∂L/∂Y``
    put back in the model's order (``∂L/∂out[order] = ∂L/∂Y``)."""
    if adjoint:
        sol, checkpoint = ode.solve_adjoint_fwd(params, t_save)
    else:
        sol = ode.solve_fwd_sens(params, t_save)
    ys = np.asarray(sol.ys)
    value, g = loss_and_dL_dY(ys if order is None else ys[order], loss_arrays)
    if order is not None:
        g_model = np.empty_like(g)
        g_model[order] = g
        g = g_model
    if adjoint:
        return value, ode.solve_adjoint_bkwd(sol, checkpoint, g)
    return value, np.einsum("ij,kij->k", g, np.asarray(sol.sens))


def diffsol_failure(e: Exception) -> SolverFailure:
    """pydiffsol's error (a RuntimeError with diffsol's message) as a status."""
    message = " ".join(str(e).split())
    m = _AT_TIME.search(message)
    return library_failure("diffsol", message, float(m.group(1)) if m else None)


class DiffsolCase(CompiledCase):
    def __init__(self, problem: CompiledProblem, options: CaseOptions):
        code = expressible_source("diffsol", problem, "diffsl")
        st = case_settings(problem, options)
        mtype, sr, sa = st["matrix_type"], st["sens_rtol"], st["sens_atol"]
        self.ode = make_ode(code, st)
        self.order = suite_order(st)
        self.t_save = np.asarray(problem.t_save, dtype=np.float64)
        self.t_end = float(self.t_save[-1])  # where solve_dense stops
        self.max_steps = options.max_steps
        self.W, self.O, self.C = problem.loss_W, problem.loss_O, problem.loss_C
        self.adjoint = options.gradient_method == "adjoint"
        self.log_scaled = np.asarray(st["log_scaled"], dtype=bool)
        self._steps: dict[bytes, np.ndarray] = {}
        self.info = {
            "idiom": IDIOM, "matrix_type": mtype,
            "linear_solver": f"{self.ode.linear_solver}: {LINEAR_SOLVERS[mtype]}",
            "jit_backend": str(self.ode.jit_backend), "sens_rtol": sr, "sens_atol": sa,
            "parameter_scale": parameter_scale(self.log_scaled),
        }  # fmt: skip

    def library_parameters(self, u: np.ndarray) -> Any:
        return np.ascontiguousarray(u, dtype=np.float64)

    def failure(self, e: RuntimeError) -> SolverFailure:
        return diffsol_failure(e)

    def timed_solve(self, params: np.ndarray) -> Any:
        return self._call(self.ode.solve_dense, params, self.t_save), params

    def _step_times(self, params: np.ndarray) -> np.ndarray:
        """The time of every accepted step (the same steps ``solve_dense`` takes)."""
        key = params.tobytes()
        if key not in self._steps:
            self._steps[key] = np.asarray(self._call(self.ode.solve, params, self.t_end).ts)
        return self._steps[key]

    def check_solve(self, raw: Any) -> Solution:
        sol, params = raw
        ts = self._step_times(params)
        steps = len(ts) - 1
        # past the bound, the time of the step that went past it is how far it got
        reached = float(ts[min(steps, self.max_steps)])
        check_steps("diffsol", self.max_steps, steps, t_reached=reached,
                    note="diffsol has no step bound; counted after the solve")  # fmt: skip
        ys = np.asarray(sol.ys)
        y = finite_solution("diffsol", (ys if self.order is None else ys[self.order]).T)
        return Solution(y, {"steps": steps})

    def timed_grad(self, params: np.ndarray) -> Any:
        value, grad_u = self._call(gradient, self.ode, params, self.t_save, self.adjoint,
                                   (self.W, self.O, self.C), self.order)  # fmt: skip
        return value, grad_u, params  # check_grad's chain rule to dL/dθ reads u


class DiffsolBackend(CompiledBackend):
    name = "diffsol"
    packages = ("pydiffsol",)
    extra = "diffsol"
    modules = ("pydiffsol",)
    gradient_methods: Mapping[str, str] = _GRADIENTS
    solver_table = _SOLVERS
    case_type = DiffsolCase
    stiff_solver, nonstiff_solver = "bdf", "tsit45"
    no_ensemble = ("pydiffsol solves one trajectory per call (a Python loop over members is "
                   "what SciPy's independent row already measures)")  # fmt: skip
