"""SUNDIALS CVODES through CasADi, in float64.

The problem's right-hand side is built as CasADi expressions (``sciml-bench codegen
--target casadi``) on ``SX`` symbols (CasADi's scalar graphs, the faster kind for small
expressions), or on ``MX`` for a network with more than :data:`MX_FROM` parameters, whose
matrix products then stay single matrix nodes instead of thousands of scalar ones
(measured: the spiral's 252 weights, adjoint gradient 29 ms on MX against 46 ms on SX;
the ROBER UDE's 43 parameters, forward gradient 534 ms on SX against 962 ms on MX), and
handed to
``casadi.integrator("F", "cvodes", {"x", "p", "t", "ode"}, t0, t_save, options)``: one
compiled call solves and returns the states at every save time. CasADi supplies CVODES
with the exact Jacobian of the expression graph (its default sparse ``qr`` linear solver
in the Newton iteration).

Solvers: ``BDF`` (stiff default; Newton iteration) and ``Adams`` (non-stiff default, with
functional iteration, as the CVODES guide recommends for non-stiff problems).

Gradients: the loss ``L = Σ W (Y − O)² + Σ C Y`` is written on CasADi's ``MX`` graph over
the integrator's output and differentiated by CasADi, which generates the sensitivity
problem itself:

- ``forward``: ``jtimes(L, p, I)``, forward mode in ``n_params`` directions; CasADi
  integrates the forward sensitivity equations as states augmenting the ODE (all of them
  under CVODES' error control);
- ``adjoint``: ``gradient(L, p)``, reverse mode; CasADi drives CVODES' adjoint module
  (a checkpointed forward pass, ``CVodeF``, then the adjoint ODE backwards, ``CVodeB``,
  with the parameter gradient as its quadrature).

The default follows CVODES' guide (forward sensitivities for few parameters, the adjoint
when parameters are many and the outputs few): ``forward`` up to
:data:`~sciml_bench.backends.compiled.FORWARD_SENSITIVITY_LIMIT` parameters, ``adjoint``
above. The adjoint's gradient quadrature is under error control (``quad_err_con``), as
the states are: without it the spiral's adjoint gradient was off by 1.5e-3, with it 5e-5.

Array problems (``[sizes]``): the generated CasADi code is column algebra on the grid with
its operators as sparse matrix products (see :mod:`sciml_bench.problem.codegen.casadi`),
always on ``SX``, so CasADi derives the exact sparse Jacobian from the graph. The case's
``jacobian`` (``options.extra``) picks CVODES' linear solver in the Newton iteration:
``sparse`` is CasADi's ``csparse`` (CSparse's sparse LU; CasADi 3.8 offers no KLU),
``dense`` is ``lapacklu`` (LAPACK's dense LU); ``Adams`` uses functional iteration and no
linear solver. Scalar problems keep CasADi's default (``qr``).

Step bound: CVODES' ``max_num_steps`` (``mxstep``) counts steps per call to ``CVode``, and
CasADi calls it once per save interval, so alone it would allow ``n_save × max_steps``.
It is set to the shared ``max_steps``, and after each solve the whole-solve count,
accepted plus rejected (error- and convergence-test failures) steps, is held to the same
bound, as the other backends count it.
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
)
from sciml_bench.backends.step_bound import check_steps
from sciml_bench.measure.status import SolverFailure
from sciml_bench.problem.compiled import CompiledProblem

_SOLVERS = {
    "BDF": SolverInfo("BDF", True, "CVODES variable-order BDF (orders 1-5), Newton iteration"),
    "Adams": SolverInfo("Adams", False, "CVODES Adams-Moulton (orders 1-12), functional iteration"),
}
_GRADIENTS = {
    "forward": "CVODES forward sensitivities (CasADi forward mode, one direction per parameter)",
    "adjoint": "CVODES adjoint sensitivities, checkpointed (CasADi reverse mode)",
}
#: a problem with a network and more parameters than this is built on MX symbols
MX_FROM = 100
#: CVODES' method and nonlinear iteration per solver name
_METHOD = {"BDF": ("bdf", "newton"), "Adams": ("adams", "functional")}
#: an array problem's linear solver per Jacobian kind (CasADi's plugin names)
ARRAY_LINEAR_SOLVERS = {"sparse": "csparse", "dense": "lapacklu"}
#: how the generated code runs, recorded in each row
IDIOM = (
    "casadi.integrator('F', 'cvodes', {x, p, t, ode}, t0, t_save, opts) over the generated "
    "CasADi expressions; timed solve = F(x0=..., p=...); timed gradient = one casadi.Function "
    "of p returning the loss (on the MX graph of F's output) and its jtimes (forward) or "
    "gradient (adjoint); CVODES' flags and stats() are read after the clock"
)
#: CasADi's error text names the CVODES call and flag: CVode returned "CV_TOO_MUCH_WORK"
_FLAG = re.compile(r'(CVode\w*) returned "(CV_[A-Z_]+)"')
#: what a flag from the adjoint's backward pass (``CVodeB``) means here
_BACKWARD = (" in the adjoint's backward pass (CasADi leaves its step bound at SUNDIALS' "
             "default, 500 steps per save interval)")


def integrator_options(options: CaseOptions, array: bool = False) -> dict[str, Any]:
    """CVODES options through CasADi: the shared tolerances and step bound, the method, and
    for an ``array`` problem's Newton iteration the linear solver of its Jacobian kind."""
    lmm, iteration = _METHOD[options.solver]
    extra: dict[str, Any] = {}
    if array and iteration == "newton":
        extra["linear_solver"] = ARRAY_LINEAR_SOLVERS[options.extra.get("jacobian", "sparse")]
    return {
        **extra,
        "abstol": options.atol,
        "reltol": options.rtol,
        "max_num_steps": options.max_steps,
        "linear_multistep_method": lmm,
        "nonlinear_solver_iteration": iteration,
        # the adjoint's parameter gradient (a quadrature) under error control, as the states
        "quad_err_con": True,
        # a failing solve is reported as a status, not as one warning per RHS evaluation
        "show_eval_warnings": False,
        "disable_internal_warnings": True,
    }


def symbolics(problem: CompiledProblem) -> str:
    """``MX`` for a network of more than :data:`MX_FROM` parameters, else ``SX``. An array
    problem's operators are sparse DM products: on ``SX``, CasADi's Jacobian of the graph
    is the exact sparse one (built in C++, not per element in Python)."""
    if problem.size is not None:
        return "SX"
    return "MX" if "ca.mtimes(" in problem.source["casadi"] and problem.n_params > MX_FROM else "SX"


def case_settings(problem: CompiledProblem, options: CaseOptions) -> dict[str, Any]:
    """The plain settings of one case (``sciml-bench codegen`` prints them): the symbol
    type, CVODES' options through CasADi, the gradient method and the step bound."""
    array = problem.size is not None
    return {"symbolics": symbolics(problem), "integrator": integrator_options(options, array),
            "gradient": options.gradient_method, "max_steps": options.max_steps,
            "dtype": options.dtype}  # fmt: skip


def build_integrator(problem: CompiledProblem, options: CaseOptions) -> tuple[Any, str]:
    """CasADi's CVODES integrator for ``problem`` and the symbol type used (``SX``/``MX``)."""
    from sciml_bench.problem.generated import load_python

    source = expressible_source("cvodes", problem, "casadi")
    s = case_settings(problem, options)
    F = integrator(load_python(source)["rhs"], s["symbolics"], problem.n_state,
                   problem.n_params, problem.t_span[0], problem.t_save, s["integrator"])  # fmt: skip
    return F, s["symbolics"]


def integrator(
    rhs: Any, kind: str, n_state: int, n_params: int, t0: float, t_save: Any,
    opts: dict[str, Any],
) -> Any:
    """``casadi.integrator("F", "cvodes", {x, p, t, ode}, t0, t_save, opts)`` on the
    generated ``rhs(t, x, p)`` over ``kind`` (``SX``/``MX``) symbols: one compiled call
    solves and returns the states at every save time (what :class:`CvodesCase` runs and
    ``sciml-bench codegen --target casadi`` prints)."""
    import casadi as ca

    sym = getattr(ca, kind)
    x, p, t = sym.sym("x", n_state), sym.sym("p", n_params), sym.sym("t")
    dae = {"x": x, "p": p, "t": t, "ode": rhs(t, x, p)}
    return ca.integrator("F", "cvodes", dae, float(t0), [float(s) for s in t_save], opts)


def loss_function(F: Any, y0: Any, n_params: int, loss_arrays: Any, method: str) -> Any:
    """``G(p) -> (L, dL/dp)``: the loss on the MX graph of the integrator's output,

        L(p) = Σ_ij W_ij (Y_ij(p) − O_ij)² + Σ_ij C_ij Y_ij(p),

    and its derivative by forward mode (``jtimes`` against the identity: one direction
    per parameter) or reverse mode (``gradient``)."""
    import casadi as ca

    P = ca.MX.sym("p", n_params)
    Y = F(x0=ca.DM(y0), p=P)["xf"]  # n_state x n_save: the transposed layout
    W, O, C = (ca.DM(np.asarray(a).T) for a in loss_arrays)
    D = Y - O
    L = ca.sum1(ca.sum2(W * D * D)) + ca.sum1(ca.sum2(C * Y))
    forward = method == "forward"
    dL = ca.jtimes(L, P, ca.DM.eye(n_params), False).T if forward else ca.gradient(L, P)
    return ca.Function("G", [P], [L, dL])


def cvodes_failure(e: RuntimeError, stats: Mapping[str, Any] | None) -> SolverFailure:
    """CasADi's error for a failed CVODES call as a status with CVODES' flag. ``t_reached``
    is CVODES' internal time at the last save point it completed, when it completed one."""
    text = str(e)
    m = _FLAG.search(text)
    if m:
        message = f"CVODES returned {m.group(2)}" + (_BACKWARD if m.group(1) == "CVodeB" else "")
    else:
        message = " ".join(text.split()[-12:])
    t = None
    if stats and stats.get("nsteps", 0) > 0 and np.isfinite(stats.get("tcur", np.nan)):
        t = float(stats["tcur"])
    return library_failure("cvodes", message, t)


def linear_solver(options: CaseOptions, array: bool) -> str:
    """What CVODES' Newton iteration factorises, as CasADi names it."""
    if _METHOD[options.solver][1] != "newton":
        return f"none ({options.solver}: functional iteration)"
    if not array:
        return "qr (CasADi's default, sparse)"
    if options.extra.get("jacobian", "sparse") == "dense":
        return "lapacklu (LAPACK dense LU) on CasADi's exact Jacobian"
    return "csparse (CSparse sparse LU) on CasADi's exact sparse Jacobian"


class CvodesCase(CompiledCase):
    def __init__(self, problem: CompiledProblem, options: CaseOptions):
        import casadi as ca

        self.F, kind = build_integrator(problem, options)
        self.G = loss_function(self.F, problem.y0, problem.n_params,
                               (problem.loss_W, problem.loss_O, problem.loss_C),
                               options.gradient_method)  # fmt: skip
        self.x0 = ca.DM(problem.y0)
        self.max_steps = options.max_steps
        self._ca = ca
        array = problem.size is not None
        self.info = {
            "idiom": IDIOM,
            "symbolics": kind,
            "linear_solver": linear_solver(options, array),
            "options": {k: v for k, v in integrator_options(options, array).items()
                        if "warn" not in k},  # fmt: skip
        }

    def prepare(self, theta: np.ndarray) -> Any:
        return self._ca.DM(theta)  # CasADi's own matrix, made once

    def failure(self, e: RuntimeError) -> SolverFailure:
        return cvodes_failure(e, self._stats())

    def _stats(self) -> dict[str, Any] | None:
        try:
            return dict(self.F.stats())
        except RuntimeError:  # no call has completed yet
            return None

    def timed_solve(self, params: Any) -> Any:
        return self._call(self.F, x0=self.x0, p=params)

    def check_solve(self, raw: Any) -> Solution:
        st = self._stats() or {}
        steps = int(st.get("nsteps", 0))
        rejected = int(st.get("netfails", 0)) + int(st.get("nncfails", 0))
        check_steps("cvodes", self.max_steps, steps, rejected,
                    note="CVODES' own max_num_steps counts per save interval")  # fmt: skip
        y = finite_solution("cvodes", np.array(raw["xf"]).T)
        return Solution(y, {
            "steps": steps, "rejected_steps": rejected, "rhs_evals": int(st.get("nfevals", 0)),
            "jac_evals": int(st.get("n_call_jacF", 0)), "lu_decomps": int(st.get("nlinsetups", 0)),
        })  # fmt: skip

    def timed_grad(self, params: Any) -> Any:
        return self._call(self.G, params)


class CvodesBackend(CompiledBackend):
    name = "cvodes"
    packages = ("casadi",)
    extra = "cvodes"
    modules = ("casadi",)
    gradient_methods: Mapping[str, str] = _GRADIENTS
    solver_table = _SOLVERS
    case_type = CvodesCase
    stiff_solver, nonstiff_solver = "BDF", "Adams"
    no_ensemble = ("a CasADi integrator call solves one trajectory, and this suite does not "
                   "yet map it over members (casadi's Function.map)")  # fmt: skip
