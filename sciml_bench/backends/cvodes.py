"""SUNDIALS CVODES through CasADi, in float64.

The problem's right-hand side is built as CasADi expressions (``sciml-bench codegen
--target casadi``) on ``SX`` symbols (CasADi's scalar graphs, the faster kind for small
expressions), or on ``MX`` for a network with more than :data:`MX_FROM` parameters, whose
matrix products then stay single matrix nodes instead of thousands of scalar ones: the
spiral's gradient (252 weights) was faster on ``MX``, the ROBER UDE's (43 parameters) on
``SX`` (measured: docs/backends.md, "CVODES: linear solver and the gradient's passes",
``SX`` or ``MX``), and handed to
``casadi.integrator("F", "cvodes", {"x", "p", "t", "ode"}, t0, t_save, options)``: one
compiled call solves and returns the states at every save time. CasADi supplies CVODES
with the exact Jacobian of the expression graph.

Solvers: ``BDF`` (stiff default; Newton iteration) and ``Adams`` (non-stiff default, with
functional iteration, as the CVODES guide recommends for non-stiff problems).

Gradients: the loss ``L = Σ W (Y − O)² + Σ C Y`` and its derivative come from one
``casadi.Function`` of the parameters (:func:`loss_function`):

- ``forward``: forward sensitivities as CasADi makes them: CasADi's augmented ODE (the
  state plus one sensitivity per parameter, all under CVODES' error control) integrated
  by CVODES; this is not CVODES' own forward-sensitivity (FSA) module. The case calls the
  integrator CasADi derives for ``F``'s forward mode (``nfwd = n_params``) once: it
  returns the trajectory and its sensitivities, so the loss and the gradient come from one
  pass (``jtimes`` on the loss also called ``F`` for the value, a second integration of
  the state that this removes; its share, measured interleaved in one process:
  docs/backends.md, "CVODES: linear solver and the gradient's passes", the forward
  gradient's double pass);
- ``adjoint``: ``gradient(L, p)``, reverse mode; CasADi drives CVODES' adjoint module
  (a checkpointed forward pass, ``CVodeF``, then the adjoint ODE backwards, ``CVodeB``,
  with the parameter gradient as its quadrature). The loss's own call of ``F`` integrates
  the trajectory once more before that: the adjoint's seeds ``2W(Y − O) + C`` need ``Y``
  before CasADi's reverse-mode call starts, so the double pass stays, declared in the
  row's ``idiom``.

Both differentiate with respect to the model's parameters ``u``: a parameter in log space
comes in as ``log θ`` (:func:`~sciml_bench.backends.compiled.model_parameters`), so CVODES'
sensitivities (and the adjoint's gradient quadrature) are along ``log θ`` under one
absolute tolerance, and the case returns ``∂L/∂θ = (∂L/∂log θ) / θ``.

The default follows CVODES' guide (forward sensitivities for few parameters, the adjoint
when parameters are many and the outputs few): ``forward`` up to
:data:`~sciml_bench.backends.compiled.FORWARD_SENSITIVITY_LIMIT` parameters, ``adjoint``
above. The adjoint's gradient quadrature is under error control (``quad_err_con``), as
the states are: without it the quadrature's error alone can leave the gradient outside the
pass tier (the measurement: docs/backends.md, "CVODES: linear solver and the gradient's
passes", the adjoint's quadrature).

Linear solver (Newton iteration), measured per problem class with
``benchmarks/best_config.py --backend cvodes`` and recorded on every row with why
(``config_reason``): scalar problems keep CasADi's default ``qr`` (sparse QR); an array
problem's ``jacobian`` (``options.extra``) picks ``qr`` (sparse) or ``lapacklu`` (LAPACK's
dense LU), and a sparse Jacobian of :data:`MUMPS_FROM` states or more that is not narrowly
banded (the 2-D Brusselator's periodic Laplacian) is factorised by ``mumps`` (MUMPS, a
multifrontal LU with its own fill-reducing ordering; on a narrow band, as ROBER groups',
its setup costs more than it saves). CasADi 3.8 offers no KLU.
``Adams`` uses functional iteration and no linear solver. Array problems' generated CasADi
code is column algebra on the grid with its operators as sparse matrix products (see
:mod:`sciml_bench.problem.codegen.casadi`), always on ``SX``, so CasADi derives the exact
sparse Jacobian from the graph.

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
    parameter_scale,
)
from sciml_bench.backends.step_bound import check_steps
from sciml_bench.measure.status import SolverFailure
from sciml_bench.problem.compiled import CompiledProblem, log_scaled
from sciml_bench.problem.event_segments import MAX_FIRINGS

_SOLVERS = {
    "BDF": SolverInfo("BDF", True, "CVODES variable-order BDF (orders 1-5), Newton iteration"),
    "Adams": SolverInfo("Adams", False, "CVODES Adams-Moulton (orders 1-12), functional iteration"),
}
_GRADIENTS = {
    "forward": ("forward sensitivities: CasADi's augmented ODE (state plus one sensitivity "
                "per parameter) integrated by CVODES, not CVODES' own FSA module; value and "
                "gradient from that one pass"),
    "adjoint": ("CVODES' adjoint module, checkpointed (CasADi reverse mode); the loss's "
                "forward solve runs again inside it"),
}
#: a problem with a network and more parameters than this is built on MX symbols
MX_FROM = 100
#: CVODES' method and nonlinear iteration per solver name
_METHOD = {"BDF": ("bdf", "newton"), "Adams": ("adams", "functional")}
#: an array problem's linear solver per Jacobian kind (CasADi's plugin names); a sparse
#: Jacobian that is large and not narrowly banded is factorised by MUMPS instead
ARRAY_LINEAR_SOLVERS = {"sparse": "qr", "dense": "lapacklu"}
#: a sparse Jacobian of this many states or more, with a half-bandwidth over
#: :data:`BANDED_UP_TO`, is factorised by MUMPS (measured in :data:`CONFIG_REASONS`)
MUMPS_FROM = 256
#: a Jacobian whose non-zeros all lie within this many diagonals of the main one
#: factorises with no fill outside that band, so CasADi's ``qr`` stays cheap
BANDED_UP_TO = 16
#: why each problem class runs with its linear solver: ``benchmarks/best_config.py
#: --backend cvodes`` on the shared 2-core machine, one process, side by side (recorded
#: on every row as ``config_reason``)
CONFIG_REASONS = {
    "scalar": ("qr (CasADi's default): on stiff-robertson csparse took 1.18x and mumps 5.6x "
               "its solve time, the same steps (best_config.py --backend cvodes --clock cpu, "
               "2026-11-27)"),
    "dense": ("lapacklu (LAPACK dense LU): the case asks for a dense Jacobian; "
              "lapackqr was within the noise of it on stiff-robertson-groups at 30 and 300 states "
              "(0.73x to 2.4x by row), so the LU, about half QR's flops, stays (best_config.py "
              "--backend cvodes --jacobian dense --clock cpu, 2026-11-27)"),
    "sparse": ("qr (sparse QR): below 256 states, or a band within 16 diagonals; "
               "stiff-robertson-groups at 3,000 states: csparse 1.07x, mumps 6.8x its solve "
               "time; stiff-brusselator-2d N=8 (128 states): csparse 0.99x, mumps 1.21x "
               "(best_config.py --backend cvodes --clock cpu, 2026-11-27)"),
    "mumps": ("mumps (MUMPS sparse LU): 256 states or more with a wide band; "
              "stiff-brusselator-2d N=16 (512 states): qr 2.8x, csparse 3.1x its solve time "
              "(best_config.py --backend cvodes --clock cpu); N=32 (2,048 states): qr 9.4x, "
              "csparse 22x, the same 453 steps and loss (one wall-clock run of the same "
              "integrator; 2026-11-27)"),
    "functional": "Adams: functional iteration, no linear solver (the CVODES guide's advice)",
    "case": "set by the case (options.extra['linear_solver'])",
}
#: the most Newton iterations CasADi takes to locate one event (its default, 3, leaves the
#: event time, and with it the gradient, off: :data:`EVENT_REASON`)
EVENT_ITERATIONS = 20
#: why a problem with events runs with :func:`event_options` (recorded on its rows)
EVENT_REASON = (
    "events: CasADi's own (DAE output 'zero', option 'transition'; experimental in 3.8), "
    "which carry forward sensitivities across each event by the implicit function theorem; "
    "event_tol 1e-3 x rtol x span and max_event_iter 20, because CasADi's defaults (1e-6, 3) "
    "left the bouncing ball's gradient 7.0e-5 off at rtol 1e-10 against 5e-8 to 1.1e-7 with "
    "event_tol 1e-8 to 1e-12 and 20 iterations (scratch run against the closed form, "
    "2026-12-07)"
)
#: CasADi options measured and left at CasADi's default (recorded on every row)
LEFT_AT_DEFAULT = (
    "always_recalculate_jacobian: CasADi's direct linear-solver interface evaluates and "
    "factorises the Jacobian at every CVODES lsetup whatever its value (same Jacobian "
    "evaluations and factorisations with True and False, times within the noise)"
)
#: how the generated code runs, recorded in each row (per gradient method)
_IDIOM = (
    "casadi.integrator('F', 'cvodes', {x, p, t, ode}, t0, t_save, opts) over the generated "
    "CasADi expressions; timed solve = F(x0=..., p=...); CVODES' flags and stats() are read "
    "after the clock; timed gradient = one casadi.Function of p returning the loss and its "
    "gradient: "
)
IDIOM = {
    "forward": _IDIOM + (
        "one call of the integrator CasADi derives for F's forward mode (nfwd = n_params: "
        "CasADi's augmented ODE, state plus one sensitivity per parameter, all under CVODES' "
        "error control; not CVODES' own FSA module), the loss and its gradient from that one "
        "pass; F is not called again (that second integration was 11-24% of the earlier "
        "double pass's time: stiff-robertson 19%, stiff-brusselator-2d N=8 24%)"),
    "adjoint": _IDIOM + (
        "the loss on the MX graph of F's output and gradient(L, p): F's forward solve, then "
        "CasADi's reverse-mode integrator, which runs its own checkpointed forward pass "
        "(CVodeF) and the adjoint backwards (CVodeB); the forward trajectory is integrated "
        "twice, because the adjoint's seeds 2W(Y-O)+C need Y before that call starts "
        "(measured share of the gradient call, the value-only solve's time: 4% on "
        "stiff-robertson, 21% on stiff-brusselator-2d N=8)"),
}
#: CasADi's error text names the CVODES call and flag: CVode returned "CV_TOO_MUCH_WORK"
_FLAG = re.compile(r'(CVode\w*) returned "(CV_[A-Z_]+)"')
#: what a flag from the adjoint's backward pass (``CVodeB``) means here
_BACKWARD = (" in the adjoint's backward pass (CasADi leaves its step bound at SUNDIALS' "
             "default, 500 steps per save interval)")


def linear_solver_choice(
    options: CaseOptions, problem: CompiledProblem | None = None
) -> tuple[str | None, str]:
    """CVODES' linear solver in the Newton iteration as CasADi names it (``None``: CasADi's
    default, ``qr``) and the key of :data:`CONFIG_REASONS` that says why: a scalar problem
    (``problem`` None or without ``[sizes]``) keeps the default; an array problem takes
    its Jacobian kind's, MUMPS for a sparse one of :data:`MUMPS_FROM` states or more whose
    half-bandwidth exceeds :data:`BANDED_UP_TO`. The case's
    ``options.extra["linear_solver"]`` overrides (``benchmarks/best_config.py`` tries each)."""
    if _METHOD[options.solver][1] != "newton":
        return None, "functional"
    if "linear_solver" in options.extra:
        return str(options.extra["linear_solver"]), "case"
    if problem is None or problem.size is None:
        return None, "scalar"
    kind = options.extra.get("jacobian", "sparse")
    band = max(problem.jac_bands or (0,))
    if kind == "sparse" and problem.n_state >= MUMPS_FROM and band > BANDED_UP_TO:
        return "mumps", "mumps"
    return ARRAY_LINEAR_SOLVERS[kind], kind


def integrator_options(
    options: CaseOptions, problem: CompiledProblem | None = None
) -> dict[str, Any]:
    """CVODES options through CasADi: the shared tolerances and step bound, the method, and
    for the Newton iteration the linear solver of :func:`linear_solver_choice`."""
    lmm, iteration = _METHOD[options.solver]
    extra: dict[str, Any] = {}
    solver, _ = linear_solver_choice(options, problem)
    if solver is not None:
        extra["linear_solver"] = solver
    if "always_recalculate_jacobian" in options.extra:  # measured by best_config.py only
        extra["always_recalculate_jacobian"] = bool(options.extra["always_recalculate_jacobian"])
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
        **(event_options(options, problem) if problem is not None and problem.events else {}),
    }


def event_options(options: CaseOptions, problem: CompiledProblem) -> dict[str, Any]:
    """How CasADi locates an event (:data:`EVENT_REASON`): its Newton iteration on the
    indicator in time until a step is shorter than ``event_tol`` (1e-3 x rtol x the span),
    at most ``max_event_iter`` (20) times; at most ``max_events`` (the suite's bound on a
    solve's firings plus the timed events) in one solve."""
    span = problem.t_span[1] - problem.t_span[0]
    return {"event_tol": 1e-3 * options.rtol * span, "max_event_iter": EVENT_ITERATIONS,
            "max_events": MAX_FIRINGS + problem.events}  # fmt: skip


def symbolics(problem: CompiledProblem) -> str:
    """``MX`` for a network of more than :data:`MX_FROM` parameters, else ``SX``. An array
    problem's operators are sparse DM products: on ``SX``, CasADi's Jacobian of the graph
    is the exact sparse one (built in C++, not per element in Python)."""
    if problem.size is not None:
        return "SX"
    return "MX" if "ca.mtimes(" in problem.source["casadi"] and problem.n_params > MX_FROM else "SX"


def case_settings(problem: CompiledProblem, options: CaseOptions) -> dict[str, Any]:
    """The plain settings of one case (``sciml-bench codegen`` prints them): the symbol
    type, CVODES' options through CasADi, the gradient method, the step bound and which
    parameters the model takes as logs (:func:`~sciml_bench.problem.compiled.log_scaled`)."""
    opts = integrator_options(options, problem)
    return {"symbolics": symbolics(problem), "integrator": opts,
            "gradient": options.gradient_method, "max_steps": options.max_steps,
            "dtype": options.dtype, "log_scaled": log_scaled(problem).tolist()}  # fmt: skip


def build_integrator(problem: CompiledProblem, options: CaseOptions) -> tuple[Any, str]:
    """CasADi's CVODES integrator for ``problem`` and the symbol type used (``SX``/``MX``)."""
    from sciml_bench.problem.generated import load_python

    source = expressible_source("cvodes", problem, "casadi")
    s = case_settings(problem, options)
    ns = load_python(source)
    events = (ns["zero"], ns["transition"]) if "zero" in ns else None
    F = integrator(ns["rhs"], s["symbolics"], problem.n_state, problem.n_params,
                   problem.t_span[0], problem.t_save, s["integrator"], events)  # fmt: skip
    return F, s["symbolics"]


def integrator(
    rhs: Any, kind: str, n_state: int, n_params: int, t0: float, t_save: Any,
    opts: dict[str, Any], events: tuple[Any, Any] | None = None,
) -> Any:
    """``casadi.integrator("F", "cvodes", {x, p, t, ode}, t0, t_save, opts)`` on the
    generated ``rhs(t, x, p)`` over ``kind`` (``SX``/``MX``) symbols: one compiled call
    solves and returns the states at every save time (what :class:`CvodesCase` runs and
    ``sciml-bench codegen --target casadi`` prints). ``events``: the generated
    ``(zero, transition)`` of a problem with events, as the DAE's ``zero`` output and the
    ``transition`` option (CasADi's ``event_in()``/``event_out()`` signature)."""
    import casadi as ca

    sym = getattr(ca, kind)
    x, p, t = sym.sym("x", n_state), sym.sym("p", n_params), sym.sym("t")
    dae = {"x": x, "p": p, "t": t, "ode": rhs(t, x, p)}
    if events is not None:
        zero, transition = events
        dae["zero"] = zero(t, x, p)
        k, z, u = sym.sym("index"), sym.sym("z", 0), sym.sym("u", 0)
        opts = {**opts, "transition": ca.Function(
            "transition", [k, t, x, z, p, u], [transition(k, t, x, p), sym(0, 1)],
            ca.event_in(), ca.event_out())}  # fmt: skip
    return ca.integrator("F", "cvodes", dae, float(t0), [float(s) for s in t_save], opts)


def loss_function(F: Any, y0: Any, n_params: int, loss_arrays: Any, method: str) -> Any:
    """``G(p) -> (L, dL/dp)`` for the loss

        L(p) = Σ_ij W_ij (Y_ij(p) − O_ij)² + Σ_ij C_ij Y_ij(p),
        dL/dp_k = Σ_ij (2 W_ij (Y_ij − O_ij) + C_ij) S_ij^k,   S^k = ∂Y/∂p_k.

    ``forward``: one call of the integrator CasADi derives for ``F``'s forward mode in
    ``n_params`` directions (``fsens{n}_F``: ``F``'s options with ``nfwd = n``; inputs
    ``x0`` and ``p`` with one column for the point and one per direction, output ``xf``
    with, per save time, ``Y`` then each ``S^k``), so ``Y`` and every ``S^k`` come from one
    pass; ``F.forward(n)`` itself calls it but keeps only the ``S^k``, so ``jtimes`` would
    integrate ``Y`` again in ``F``. ``adjoint``: reverse mode, ``gradient(L, p)``, on the MX
    graph of ``F``'s output.

    ``y0`` is the initial state, or the generated ``y0(p)`` where it depends on the
    parameters (:mod:`sciml_bench.problem.initial`): then ``x0`` is that expression of the
    symbols, the forward directions start at its Jacobian ``∂y0/∂p`` (not 0), and the
    reverse mode runs through it."""
    import casadi as ca

    P = ca.MX.sym("p", n_params)
    W, O, C = (ca.DM(np.asarray(a).T) for a in loss_arrays)  # n_state x n_save, as F's xf
    X0 = y0(P) if callable(y0) else ca.DM(y0)
    if method != "forward":
        Y = F(x0=X0, p=P)["xf"]
        L = ca.sum1(ca.sum2(W * (Y - O) ** 2)) + ca.sum1(ca.sum2(C * Y))
        return ca.Function("G", [P], [L, ca.gradient(L, P)])
    n_save, k = W.size2(), 1 + n_params  # xf's columns: per save time, Y then each S^k
    # the directions' starts: dy0/dp, 0 for a fixed start
    x0 = ca.horzcat(X0, ca.jacobian(X0, P) if callable(y0) else ca.DM.zeros(X0.size1(), n_params))
    name = f"fsens{n_params}_{F.name()}"
    sens = next((f for f in F.forward(n_params).find_functions() if f.name() == name), None)
    if sens is None:
        raise RuntimeError(f"CasADi {ca.__version__} has no {name} in F's forward mode (this "
                           "suite uses CasADi 3.8's): use --gradient adjoint")  # fmt: skip
    out = sens(x0=x0, p=ca.horzcat(P, ca.DM.eye(n_params)))["xf"]
    Y = out[:, [j * k for j in range(n_save)]]
    R = 2 * W * (Y - O) + C
    dL = [ca.sum1(ca.sum2(R * out[:, [j * k + d for j in range(n_save)]]))
          for d in range(1, k)]  # fmt: skip
    L = ca.sum1(ca.sum2(W * (Y - O) ** 2)) + ca.sum1(ca.sum2(C * Y))
    return ca.Function("G", [P], [L, ca.vertcat(*dL)])


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


#: what each of CasADi's linear solvers is
_SOLVER_WORDS = {
    "qr": "qr (CasADi's default, sparse QR)", "csparse": "csparse (CSparse sparse LU)",
    "mumps": "mumps (MUMPS sparse multifrontal LU, serial)",
    "lapacklu": "lapacklu (LAPACK dense LU)", "lapackqr": "lapackqr (LAPACK dense QR)",
    "ldl": "ldl (CasADi's sparse LDL)",
}  # fmt: skip


def linear_solver(options: CaseOptions, problem: CompiledProblem | None = None) -> str:
    """What CVODES' Newton iteration factorises, as CasADi names it."""
    name, _ = linear_solver_choice(options, problem)
    if _METHOD[options.solver][1] != "newton":
        return f"none ({options.solver}: functional iteration)"
    return f"{_SOLVER_WORDS.get(name or 'qr', str(name))} on CasADi's exact Jacobian"


def config_reason(options: CaseOptions, problem: CompiledProblem | None = None) -> str:
    """Why the case runs with its linear solver (measured), and the options measured and
    left at CasADi's default."""
    _, key = linear_solver_choice(options, problem)
    events = f"; {EVENT_REASON}" if problem is not None and problem.events else ""
    return f"{CONFIG_REASONS[key]}; {LEFT_AT_DEFAULT}{events}"


class CvodesCase(CompiledCase):
    def __init__(self, problem: CompiledProblem, options: CaseOptions):
        import casadi as ca

        from sciml_bench.problem.generated import load_python

        self.F, kind = build_integrator(problem, options)
        start = load_python(problem.source["casadi"]).get("y0", problem.y0)
        self.G = loss_function(self.F, start, problem.n_params,
                               (problem.loss_W, problem.loss_O, problem.loss_C),
                               options.gradient_method)  # fmt: skip
        self.x0 = ca.DM(problem.y0)
        #: the start at the model's parameters, where it depends on them (else None)
        self.X0: Any = None
        if callable(start):
            P = ca.SX.sym("p", problem.n_params)
            self.X0 = ca.Function("X0", [P], [start(P)])
        self.max_steps = options.max_steps
        self.log_scaled = log_scaled(problem)
        self._ca = ca
        self.info = {
            "idiom": IDIOM[options.gradient_method],
            "symbolics": kind,
            "linear_solver": linear_solver(options, problem),
            "config_reason": config_reason(options, problem),
            "parameter_scale": parameter_scale(self.log_scaled),
            "options": {k: v for k, v in integrator_options(options, problem).items()
                        if "warn" not in k},  # fmt: skip
        }

    def library_parameters(self, u: np.ndarray) -> Any:
        return self._ca.DM(u)  # CasADi's own matrix, made once

    def failure(self, e: RuntimeError) -> SolverFailure:
        return cvodes_failure(e, self._stats())

    def _stats(self) -> dict[str, Any] | None:
        try:
            return dict(self.F.stats())
        except RuntimeError:  # no call has completed yet
            return None

    def timed_solve(self, params: Any) -> Any:
        x0 = self.x0 if self.X0 is None else self.X0(params)
        return self._call(self.F, x0=x0, p=params)

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
        value, grad_u = self._call(self.G, params)
        return value, grad_u, params  # check_grad's chain rule to dL/dθ reads u


class CvodesBackend(CompiledBackend):
    name = "cvodes"
    packages = ("casadi",)
    extra = "cvodes"
    modules = ("casadi",)
    gradient_methods: Mapping[str, str] = _GRADIENTS
    solver_table = _SOLVERS
    case_type = CvodesCase
    stiff_solver, nonstiff_solver = "BDF", "Adams"
    events = ("time", "state")
    no_ensemble = ("a CasADi integrator call solves one trajectory, and this suite does not "
                   "yet map it over members (casadi's Function.map)")  # fmt: skip
