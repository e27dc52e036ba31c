"""Diffrax (JAX), in float64 (or float32: ``--dtype``).

Solve and loss+gradient are each one ``jax.jit``-compiled function, as
Diffrax's documentation recommends. Solves run with ``throw=False`` and
``sol.result`` is checked, so a failed solve is a status and its gradient is
never scored. Stiff default: Kvaerno4 with a PI controller (pcoeff = icoeff =
0.3): on ROBER, HIRES, OREGO, POLLU and the Robertson UDE at the problems' own
tolerances it solved and differentiated faster than Kvaerno5, every gradient within the
pass tier (measured: ``benchmarks/README.md``, "What was tried for the stiff
defaults", by ``benchmarks/best_config.py``).

Fixed steps (``Euler``, ``Tsit5-fixed``): ``stepsize_controller=ConstantStepSize()`` and
``dt0`` = the case's ``dt``, under the same ``max_steps``. In float32 every array the
solve sees (``y0``, ``t0``, ``t1``, ``dt0``, the save times, the parameters and the loss's
arrays) is made float32: Diffrax promotes ``y0`` to the times' dtype, so one float64
time would silently make the whole solve float64.

A problem with events (problems.md, "Events") solves in pieces between them, one
``diffeqsolve`` each, its ends the events' times computed from the parameters inside the
traced call (:func:`solve_across_events`), as a Diffrax user restarts a solve where the state
jumps; ``jax.grad`` then carries a moving time's jump term by the chain rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from sciml_bench.backends.base import Backend, Case, CaseOptions, Solution, SolverInfo
from sciml_bench.backends.checks import failed_members, finite_solution
from sciml_bench.backends.ensemble import EnsembleCase, EnsembleNotOffered, EnsembleSolution
from sciml_bench.backends.training import TrainingCase
from sciml_bench.measure.status import SolverFailure, Status, classify_message
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.problem.ensemble import Batch
from sciml_bench.problem.event_segments import Segment, segments
from sciml_bench.problem.training import Adam

_SOLVERS = {
    "Kvaerno5": SolverInfo("Kvaerno5", True, "ESDIRK, order 5"),
    "Kvaerno4": SolverInfo("Kvaerno4", True, "ESDIRK, order 4"),
    "Kvaerno3": SolverInfo("Kvaerno3", True, "ESDIRK, order 3"),
    "Tsit5": SolverInfo("Tsit5", False, "Tsitouras 5(4)"),
    "Dopri5": SolverInfo("Dopri5", False, "Dormand-Prince 5(4)"),
    "Dopri8": SolverInfo("Dopri8", False, "Dormand-Prince 8(7)"),
    "Euler": SolverInfo("Euler", False, "explicit Euler, ConstantStepSize (--dt)",
                        fixed_step=True),
    "Tsit5-fixed": SolverInfo("Tsit5-fixed", False, "Tsit5 with ConstantStepSize (--dt)",
                              fixed_step=True),
}
_ADJOINTS = {
    "RecursiveCheckpointAdjoint": "discretise-then-optimise backprop with checkpointing",
    "BacksolveAdjoint": "optimise-then-discretise continuous adjoint (unstable on stiff problems)",
    "DirectAdjoint": "plain backprop through the solver loop",
}
#: PI coefficients: fewer rejected steps than the default I-controller on stiff problems
STIFF_CONTROLLER = {"pcoeff": 0.3, "icoeff": 0.3}
#: how the generated code runs, recorded in each row (Diffrax's own benchmarks/ scripts
#: jit a function of the parameters around diffeqsolve, the RHS returning jnp.stack)
IDIOM = (
    "jax.jit(diffeqsolve) and jax.jit(jax.grad(loss, has_aux=True)) over the parameter "
    "array (args); RHS rhs(t, y, args) generated as jnp code; timed call = the compiled call "
    "+ jax.block_until_ready, samples back to back: the solve returns sol.ys alone, the "
    "gradient two buffers (gradient; loss and result code); throw=False, every sample "
    "checked after the clock (a solve's result code read by one call of the same solve "
    "with its code and step counts, the samples equal to it)"
)
#: every member of ``diffrax.RESULTS`` (0.7.2) -> the suite's status; a member a later
#: version adds is a ``solver_failure`` with Diffrax's own message
RESULT_STATUS = {
    "successful": Status.OK,
    "max_steps_reached": Status.MAX_STEPS,
    "max_steps_rejected": Status.MAX_STEPS,  # the controller's limit on rejected steps
    "dt_min_reached": Status.DT_UNDERFLOW,
    "nonfinite": Status.NONFINITE,  # NaN or inf in the state during the solve
    "nonfinite_input": Status.NONFINITE,  # a linear solve was handed NaN or inf
    "singular": Status.SOLVER_FAILURE,  # a linear solve (Newton's) returned NaN or inf
    "breakdown": Status.SOLVER_FAILURE,
    "stagnation": Status.SOLVER_FAILURE,
    "conlim": Status.SOLVER_FAILURE,
    "nonlinear_max_steps_reached": Status.SOLVER_FAILURE,
    "nonlinear_divergence": Status.SOLVER_FAILURE,
    # no event is ever set here: a solve that ends on one stopped before t1
    "event_occurred": Status.SOLVER_FAILURE,
    "internal_error": Status.ERROR,  # "a bug in Diffrax", in its own words
}


def result_table(diffrax: Any) -> dict[int, tuple[Status, str]]:
    """Diffrax's results by integer code: ``(status, Diffrax's message)``, so that a
    check is plain Python (comparing ``RESULTS`` items is a JAX operation and a sync)."""
    out = {}
    for name, item in diffrax.RESULTS._name_to_item.items():
        message = " ".join(str(diffrax.RESULTS[item]).split()) or name
        out[int(item._value)] = (RESULT_STATUS.get(name, Status.SOLVER_FAILURE), message)
    return out


def controller_options(stiff: bool, extra: Mapping[str, Any]) -> dict[str, float]:
    """PID coefficients: the stiff default (:data:`STIFF_CONTROLLER`) or none, then the
    case's ``extra`` options (``pcoeff``, ``icoeff``, ``dcoeff``), single case or ensemble."""
    ctrl = dict(STIFF_CONTROLLER) if stiff else {}
    ctrl.update({k: v for k, v in extra.items() if k in ("pcoeff", "icoeff", "dcoeff")})
    return ctrl


def case_settings(problem: CompiledProblem, options: CaseOptions) -> dict[str, Any]:
    """The plain settings :func:`compiled_calls` takes for one case: the solver and
    adjoint by their Diffrax names, the step-size control, the step bound and the dtype
    (``sciml-bench codegen`` prints them as the program's header).

    The control is a PID controller at the case's tolerances (``controller``, ``dt0``
    None), or, for a fixed-step solver, ``ConstantStepSize`` (``controller`` None) with
    ``dt0`` = the case's ``dt``, checked against the step bound by
    :func:`~sciml_bench.backends.base.fixed_step_plan`."""
    from sciml_bench.backends.base import fixed_step_plan

    info = _SOLVERS[options.solver]
    step = fixed_step_plan(problem, options, info)
    ctrl = controller_options(info.stiff, options.extra)
    return {
        "solver": options.solver.removesuffix("-fixed"),
        "controller": None if step is not None
        else {"rtol": options.rtol, "atol": options.atol, **ctrl},
        "dt0": step,
        "adjoint": options.gradient_method,
        "max_steps": options.max_steps,
        "dtype": options.dtype,
    }


def recorded_controller(settings: dict[str, Any]) -> dict[str, Any]:
    """The step-size control as a row records it."""
    if settings["controller"] is None:
        return {"stepsize_controller": "ConstantStepSize()", "dt0": settings["dt0"]}
    return dict(settings["controller"])


def diffeqsolve_arguments(
    rhs: Any, y0: Any, t_span: Any, t_save: Any, settings: dict[str, Any]
) -> dict[str, Any]:
    """``diffeqsolve``'s arguments for one case, all but the parameters (``args``): the
    generated ``rhs(t, y, args)`` as the term, the solver, the step-size control, the
    adjoint, the step bound, and the times and ``y0`` in the case's dtype (``y0`` left out
    where it is a function of the parameters: the solve computes it from ``args``)."""
    import diffrax
    import jax.numpy as jnp

    dtype = jnp.dtype(settings["dtype"])
    ctrl = settings["controller"]
    # every time in the case's dtype: Diffrax promotes y0 to the times' dtype, so one
    # float64 time would run a float32 case in float64
    t0, t1 = (jnp.asarray(t, dtype=dtype) for t in t_span)
    return {
        "terms": diffrax.ODETerm(lambda t, y, args: rhs(t, y, args)),
        "solver": getattr(diffrax, settings["solver"])(),
        "t0": t0,
        "t1": t1,
        "dt0": None if settings["dt0"] is None else jnp.asarray(settings["dt0"], dtype=dtype),
        **({} if callable(y0) else {"y0": jnp.asarray(y0, dtype=dtype)}),
        "saveat": diffrax.SaveAt(ts=jnp.asarray(t_save, dtype=dtype)),
        "stepsize_controller": diffrax.ConstantStepSize() if ctrl is None
        else diffrax.PIDController(**ctrl),
        "adjoint": getattr(diffrax, settings["adjoint"])(),
        "max_steps": settings["max_steps"],
    }  # fmt: skip


def compiled_calls(
    rhs: Any, y0: Any, t_span: Any, t_save: Any, loss_arrays: Any, settings: dict[str, Any],
    events: Any = None,
) -> dict[str, Any]:
    """A case's compiled calls, from plain arguments (what :class:`DiffraxCase` runs and
    ``sciml-bench codegen --target jax`` prints, from this very source):

    - ``solve_full(theta)``: ``diffeqsolve(...).ys`` flattened, then its result code and
      accepted and rejected steps (one output buffer);
    - ``solve_ys(theta)``: the same solve's ``ys`` alone (the steady-state solve);
    - ``loss(theta)``: ``(L, [L, result code, steps])`` with
      ``L = Σ W (ys − O)² + Σ C ys`` (traced, not compiled);
    - ``value_and_grad(theta)``: ``jax.grad`` of ``loss`` with its auxiliary output.

    ``rhs(t, y, args)`` is the generated vector field, the parameters Diffrax's ``args``
    (the other arguments: :func:`diffeqsolve_arguments`). ``y0`` is the initial state, or
    the generated ``y0(theta)`` where it depends on the parameters: then it is computed
    inside every call, so ``jax.grad`` runs through it. A problem with events (``events``,
    an :class:`Events`; the printed program has none) solves in pieces between them
    (:func:`solve_across_events`).
    """
    import diffrax
    import jax
    import jax.numpy as jnp

    dtype = jnp.dtype(settings["dtype"])
    solve_args = diffeqsolve_arguments(rhs, y0, t_span, t_save, settings)
    W, O, C = (jnp.asarray(a, dtype=dtype) for a in loss_arrays)

    def _solve(theta: Any) -> Any:
        start = {"y0": jnp.asarray(y0(theta), dtype=dtype)} if callable(y0) else {}
        if events is not None:
            return solve_across_events(solve_args, events, t_save, theta,
                                       start.get("y0", solve_args.get("y0")))  # fmt: skip
        sol = diffrax.diffeqsolve(**solve_args, **start, args=theta, throw=False)
        return sol.ys, solve_status(sol, dtype)

    def _solve_full(theta: Any) -> Any:
        ys, status = _solve(theta)
        return jnp.concatenate([ys.ravel(), status])  # one output buffer

    def _loss(theta: Any) -> Any:
        ys, status = _solve(theta)
        d = ys - O
        value = jnp.sum(W * d * d) + jnp.sum(C * ys)
        return value, jnp.concatenate([value[None], status])

    return {
        "solve_full": jax.jit(_solve_full),
        "solve_ys": jax.jit(lambda theta: _solve(theta)[0]),  # XLA drops the status
        "loss": _loss,
        # jax.grad with the loss as auxiliary output: two buffers, as value_and_grad gives
        "value_and_grad": jax.jit(jax.grad(_loss, has_aux=True)),
    }


@dataclass(frozen=True)
class Events:
    """A problem's events as the generated JAX source has them, and the pieces of the solve
    between them at the parameters' initial values (:mod:`sciml_bench.problem.event_segments`):
    the order of the events is fixed there, their times move with ``θ`` inside the solve."""

    times: Callable[[Any], Any]
    jumps: tuple[Callable[[Any, Any], Any], ...]
    pieces: tuple[Segment, ...]


def solve_status(sol: Any, dtype: Any) -> Any:
    """``[result code, accepted, rejected steps]`` in one small array: each extra output of
    a compiled call costs microseconds of dispatch."""
    import jax.numpy as jnp

    return jnp.stack([sol.result._value, sol.stats["num_accepted_steps"],
                      sol.stats["num_rejected_steps"]]).astype(dtype)  # fmt: skip


def solve_across_events(
    solve_args: dict[str, Any], events: Events, t_save: Any, theta: Any, y0: Any
) -> tuple[Any, Any]:
    """``diffeqsolve`` once per piece between events, each from the state the last event
    set, as a Diffrax user restarts the solve where the state jumps; each piece's ends are
    the events' times computed from ``theta`` inside the traced call, so that ``jax.grad``
    runs through a time that moves (the jump term of problem/events.py, by the chain
    rule through ``t0``/``t1``). Each piece has the case's step bound. The status: the
    worst piece's result code and the steps of all of them."""
    import diffrax
    import jax.numpy as jnp

    dtype = solve_args["t0"].dtype
    times = events.times(theta).astype(dtype)
    y, blocks, status = y0, [], []
    for i, seg in enumerate(events.pieces):
        t0 = solve_args["t0"] if i == 0 else times[events.pieces[i - 1].fire[0]]
        t1 = times[seg.fire[0]] if seg.fire else solve_args["t1"]
        ts = jnp.asarray(np.asarray(t_save)[seg.save], dtype=dtype)
        saveat = diffrax.SaveAt(ts=ts, t1=True) if seg.save.size else diffrax.SaveAt(t1=True)
        sol = diffrax.diffeqsolve(**{**solve_args, "t0": t0, "t1": t1, "saveat": saveat},
                                  y0=y, args=theta, throw=False)  # fmt: skip
        blocks.append(sol.ys[:-1])
        y = sol.ys[-1]
        for k in seg.fire:
            y = events.jumps[k](y, theta)
        status.append(solve_status(sol, dtype))
    s = jnp.stack(status)
    return jnp.concatenate(blocks), jnp.stack([jnp.max(s[:, 0]), jnp.sum(s[:, 1]),
                                               jnp.sum(s[:, 2])])  # fmt: skip


def compiled_failure(e: Exception) -> SolverFailure:
    """A runtime error inside a compiled call (e.g. Equinox's check that a linear solve
    stayed finite) as a solver failure with the library's message."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    # JAX appends notes about its own frames; keep the library's message
    useful = [ln for ln in lines
              if "JAX has removed its internal frames" not in ln and not ln.startswith("----")]  # fmt: skip
    message = " ".join(useful[:3]) or type(e).__name__
    return SolverFailure(classify_message(message), f"diffrax: {message}")


def blocked(block: Callable[[Any], Any], fn: Callable[..., Any], *args: Any) -> Any:
    """``block(fn(*args))``: a compiled call, waited for until its outputs are ready on the
    device; a runtime error inside it (an XLA ``RuntimeError`` type) is a solver failure."""
    try:
        return block(fn(*args))
    except Exception as e:
        if "RuntimeError" not in type(e).__name__:
            raise
        raise compiled_failure(e) from None


def _events(ns: dict[str, Any], problem: CompiledProblem) -> Events | None:
    """The generated events and the solve's pieces at ``θ0``, or None without events."""
    if "event_times" not in ns:
        return None
    import jax.numpy as jnp

    at = np.asarray(ns["event_times"](jnp.asarray(problem.theta0, dtype=jnp.float64)))
    pieces = segments(at, problem.t_span, problem.t_save)
    return Events(ns["event_times"], tuple(ns["EVENTS"]), tuple(pieces))


class DiffraxCase(Case):
    """One problem as two compiled solves and one compiled loss+gradient.

    - ``_solve_ys``: ``diffeqsolve(...).ys`` alone, the steady-state solve, as a Diffrax
      user's timing loop calls it (one output buffer, nothing appended to it);
    - ``_solve_full``: the same solve with its result code and step counts appended (one
      buffer): the first solve, whose counters go into the row, and the status read for the
      steady samples (:meth:`check_solve`);
    - ``_value_and_grad``: ``jax.grad`` of the loss with the loss and the result code as
      auxiliary output (two buffers, as ``value_and_grad`` gives).
    """

    def __init__(self, problem: CompiledProblem, options: CaseOptions):
        import diffrax
        import jax
        import jax.numpy as jnp

        from sciml_bench.problem.generated import load_python

        jax.config.update("jax_enable_x64", True)
        ns = load_python(problem.source["jax"])
        rhs = ns["rhs"]
        #: the case's floating-point type (--dtype): every array of the solve is made in it
        self.dtype = jnp.dtype(options.dtype)
        settings = case_settings(problem, options)
        fns = compiled_calls(
            rhs, ns.get("y0", problem.y0), problem.t_span, problem.t_save,
            (problem.loss_W, problem.loss_O, problem.loss_C), settings, _events(ns, problem),
        )  # fmt: skip
        self._solve_full = fns["solve_full"]
        self._solve_ys = fns["solve_ys"]
        #: the traced loss, (L, [L, result code, steps]): DiffraxTrainingCase's step too
        self.loss_fn = fns["loss"]
        self._value_and_grad = fns["value_and_grad"]
        y0 = jnp.asarray(problem.y0)
        self._block = jax.block_until_ready
        self._shape = (len(problem.t_save), problem.n_state)
        self._results = result_table(diffrax)
        #: the steady samples' status, read once per prepared parameters (see check_solve)
        self._status_of: tuple[Any, np.ndarray] | None = None
        self.options = {"controller": recorded_controller(settings), "dtype": options.dtype}
        #: what runs, for the result record
        self.info = {**self.options, "idiom": IDIOM}
        if problem.size is not None and _SOLVERS[options.solver].stiff:
            self.info["linear_solver"] = (
                "lineax AutoLinearSolver (dense LU) on the dense jax.jacfwd Jacobian, in "
                f"{options.solver}'s VeryChord Newton iterations"
            )
        elif problem.size is not None:
            self.info["linear_solver"] = f"none ({options.solver} is explicit)"
        self.t_save = problem.t_save
        # JAX is pinned by the worker's JAX_PLATFORMS; what it did is read back from arrays
        self._last: Any = y0
        self._jnp = jnp

    def _check(self, code: float, ys: np.ndarray | None) -> None:
        status, message = self._results.get(int(code), (Status.SOLVER_FAILURE, str(code)))
        if status is Status.OK:
            return
        t_reached = None
        if ys is not None:
            finite = np.all(np.isfinite(ys), axis=1)
            t_reached = float(self.t_save[finite][-1]) if finite.any() else None
        raise SolverFailure(status, f"diffrax: {message}", t_reached)

    def _run(self, fn: Any, theta: Any) -> Any:
        # the call ends when every output is ready on the device, before the clock is read
        out = blocked(self._block, fn, theta)
        self._last = out  # what the device read-back inspects
        return out

    def placement(self) -> tuple[str, str | None]:
        return jax_placement(jax_device(self._last))

    def alloc_peak_mb(self) -> float | None:
        return jax_alloc_peak(jax_device(self._last))

    def prepare(self, theta: np.ndarray) -> Any:
        # a device array in the case's dtype, made once, as a JAX user holds it
        return self._jnp.asarray(theta, dtype=self.dtype)

    def _checked_full(self, flat: np.ndarray) -> Solution:
        n = self._shape[0] * self._shape[1]
        ys = flat[:n].reshape(self._shape)
        code, accepted, rejected = flat[n:]
        self._check(code, ys)
        stats = {"steps": int(accepted), "rejected_steps": int(rejected)}
        return Solution(finite_solution("diffrax", ys), stats)

    def solve(self, theta: np.ndarray) -> Solution:
        """The checked solve with its step counts (the first solve of a case)."""
        return self._checked_full(np.asarray(self._run(self._solve_full, self.prepare(theta))))

    def timed_solve(self, params: Any) -> Any:
        return (params, self._run(self._solve_ys, params))

    def check_solve(self, raw: Any) -> Solution:
        """A steady sample's ``ys``, checked: its result code is that of the same compiled
        solve at the same parameters, read by one call of ``_solve_full`` per prepared
        parameters, here, after the clock; the sample must equal that call's states (to
        1e-12) and be finite. (Diffrax fills save points a failed solve never reached with
        inf, so a failure also shows in the sample itself.)"""
        params, out = raw
        ys = np.asarray(out)
        if self._status_of is None or self._status_of[0] is not params:
            self._status_of = (params, self._checked_full(np.asarray(
                self._run(self._solve_full, params))).y)  # fmt: skip
        finite_solution("diffrax", ys)
        ref = self._status_of[1]
        scale = np.maximum(np.max(np.abs(ref), axis=0), np.finfo(float).tiny)
        # two compiled programs may round differently: 1e-12 in float64, 1e-5 in float32
        tol = 1e-12 if self.dtype == np.float64 else 1e-5
        if np.max(np.abs(ys - ref) / scale) > tol:
            raise SolverFailure(Status.SOLVER_FAILURE, "diffrax: a steady-state solve "
                                "differs from the checked solve at the same parameters")  # fmt: skip
        return Solution(ys)

    def timed_grad(self, params: Any) -> Any:
        return self._run(self._value_and_grad, params)

    def check_grad(self, raw: Any) -> tuple[float, np.ndarray]:
        grad, aux = raw
        value, code, _, _ = np.asarray(aux)
        self._check(code, None)
        return float(value), np.asarray(grad)  # the worker rejects a non-finite one


def jax_device(tree: Any) -> Any:
    """The device of the first array in ``tree`` (a result, or arrays made at build)."""
    import jax

    return next(iter(jax.tree_util.tree_leaves(tree)[0].devices()))


def jax_placement(dev: Any) -> tuple[str, str | None]:
    """``(cpu|cuda, name)`` of a JAX device: its platform and the GPU's ``device_kind``
    (e.g. ``NVIDIA H100 80GB HBM3``), or the CPU model."""
    from sciml_bench.measure.device import normalize
    from sciml_bench.measure.environment import cpu_model

    where = normalize(dev.platform)
    return (where, dev.device_kind) if where != "cpu" else ("cpu", cpu_model())


def jax_alloc_peak(dev: Any) -> float | None:
    """XLA's allocator peak (MiB) on a JAX device; None on the CPU."""
    from sciml_bench.measure.memory import jax_alloc_peak_mb

    return jax_alloc_peak_mb(dev) if dev.platform != "cpu" else None


def ensemble_solve(
    rhs: Any, problem: CompiledProblem, options: CaseOptions, ctrl: dict[str, float],
    semantics: str, per_member: bool, n: int,
) -> Callable[..., Any]:  # fmt: skip
    """The batch's solve ``(θ, Y0, S, A) -> (ys, result codes, accepted steps)``, one of each
    per member, at parameters ``θ ⊙ S + A`` (``θ`` itself when every member shares it):
    ``independent``, ``jax.vmap`` over one member's ``diffeqsolve``; ``coupled``, one
    ``diffeqsolve`` of the stacked state, its code and counts broadcast to every member."""
    import diffrax
    import jax
    import jax.numpy as jnp

    p_axis = 0 if per_member else None
    solve = partial(
        diffrax.diffeqsolve, solver=getattr(diffrax, options.solver)(), t0=problem.t_span[0],
        t1=problem.t_span[1], dt0=None, saveat=diffrax.SaveAt(ts=jnp.asarray(problem.t_save)),
        stepsize_controller=diffrax.PIDController(rtol=options.rtol, atol=options.atol, **ctrl),
        max_steps=options.max_steps, adjoint=getattr(diffrax, options.gradient_method)(),
        throw=False,
    )  # fmt: skip

    def params(theta: Any, S: Any, A: Any) -> Any:
        return theta * S + A if per_member else theta

    def one(y0: Any, th: Any) -> Any:
        sol = solve(diffrax.ODETerm(lambda t, y, args: rhs(t, y, args)), y0=y0, args=th)
        return sol.ys, sol.result._value, sol.stats["num_accepted_steps"]

    if semantics == "independent":

        def _solve(theta: Any, Y0: Any, S: Any, A: Any) -> Any:
            return jax.vmap(one, in_axes=(0, p_axis))(Y0, params(theta, S, A))

        return _solve
    batched = jax.vmap(rhs, in_axes=(None, 0, p_axis))

    def _coupled(theta: Any, Y0: Any, S: Any, A: Any) -> Any:
        sol = solve(diffrax.ODETerm(lambda t, y, args: batched(t, y, args)), y0=Y0,
                    args=params(theta, S, A))  # fmt: skip
        code = jnp.broadcast_to(sol.result._value, (n,))
        steps = jnp.broadcast_to(sol.stats["num_accepted_steps"], (n,))
        return jnp.swapaxes(sol.ys, 0, 1), code, steps

    return _coupled


class DiffraxEnsembleCase(EnsembleCase):
    """An ensemble in Diffrax, float64.

    ``independent``: ``jax.vmap`` over ``diffeqsolve`` (each member its own step sizes
    and result; the batched while-loop runs until the slowest member ends).
    ``coupled``: one ``diffeqsolve`` on the stacked ``(n, n_state)`` state, the RHS
    vmapped over members, so one RMS error norm and one step size govern the batch.

    The batch's arrays (initial states, the members' parameter maps, observations) are
    arguments of the compiled functions, made on the device once at build: captured in
    the closure, JAX would embed them in the program as constants (a 4 MB array gave 8.4
    MB of HLO), inflating compilation inside time to first gradient. The loss is
    ``Σ_m w_m L_m`` with member weights ``w`` (:meth:`prepare`; ``1/n`` each by default, the
    mean), so the gradient check can score the timed batch's own solve.

    On ``cuda`` nothing here names the device: the worker is pinned
    (``JAX_PLATFORMS=cuda,cpu``, :func:`~sciml_bench.measure.device.device_env`), so the
    arrays made at build and every compiled call are on the GPU, and the read-back
    (:meth:`placement`) says where they really were.
    """

    def __init__(
        self, problem: CompiledProblem, options: CaseOptions, batch: Batch, semantics: str
    ):
        import diffrax
        import jax
        import jax.numpy as jnp

        from sciml_bench.problem.generated import load_python

        jax.config.update("jax_enable_x64", True)
        self.semantics = semantics
        rhs = load_python(problem.source["jax"])["rhs"]
        ctrl = controller_options(_SOLVERS[options.solver].stiff, options.extra)
        per_member = batch.varies_parameters  # else every member shares θ (no batched weights)
        W, C = jnp.asarray(problem.loss_W), jnp.asarray(problem.loss_C)
        n = batch.n
        # the batch, on the device once: arguments of every call, never constants
        self._batch = (jnp.asarray(batch.y0), jnp.asarray(batch.scale), jnp.asarray(batch.shift))
        self._O = jnp.asarray(
            batch.observations if batch.observations is not None else problem.loss_O
        )
        _solve = ensemble_solve(rhs, problem, options, ctrl, semantics, per_member, n)

        def _loss(theta: Any, w: Any, Y0: Any, S: Any, A: Any, O: Any) -> Any:
            ys, code, steps = _solve(theta, Y0, S, A)
            d = ys - O
            per = jnp.sum(W * d * d, axis=(-2, -1)) + jnp.sum(C * ys, axis=(-2, -1))
            return jnp.dot(w, per), code

        self._solve = jax.jit(_solve)
        self._value_and_grad = jax.jit(jax.value_and_grad(_loss, has_aux=True))
        self._block = jax.block_until_ready
        self._results = result_table(diffrax)
        self.info = {"semantics": semantics, "members": n, "shared_theta": not per_member,
                     "controller": {"rtol": options.rtol, "atol": options.atol, **ctrl},
                     "batch": "arguments of the compiled calls (not constants)"}  # fmt: skip
        self._jnp = jnp
        self._n = n
        #: the device of the last checked result (at first, of the batch's y0): read in
        #: the checks, outside the clock, and without holding a result alive
        self._device: Any = jax_device(self._batch[0])

    def _check(self, code: Any) -> None:
        code = np.asarray(code)
        ok = code == 0
        if ok.all():
            return
        status, _ = self._results.get(int(code[~ok][0]), (Status.SOLVER_FAILURE, ""))
        if status is Status.OK:  # a code the table maps to success cannot fail a member
            status = Status.SOLVER_FAILURE
        raise SolverFailure(status, f"diffrax {self.semantics}: {status.value} in "
                                    f"{failed_members(ok)}")  # fmt: skip

    def prepare(self, theta: np.ndarray, weights: np.ndarray | None = None) -> Any:
        """θ and the member weights ``w`` as device arrays, made once (``w = 1/n`` each by
        default: the loss is the members' mean)."""
        jnp = self._jnp
        w = np.full(self._n, 1.0 / self._n) if weights is None else weights
        return jnp.asarray(theta), jnp.asarray(w, dtype=jnp.float64)

    def _run(self, fn: Any, *args: Any) -> Any:
        return blocked(self._block, fn, *args)  # ends when the device's work is done

    def solve_raw(self, params: Any) -> Any:
        return self._run(self._solve, params[0], *self._batch)

    def check_solve(self, raw: Any) -> EnsembleSolution:
        ys, code, steps = raw
        self._device = jax_device(ys)
        self._check(code)
        return EnsembleSolution(finite_solution("diffrax", np.asarray(ys)), steps=np.asarray(steps))

    def grad_raw(self, params: Any) -> Any:
        return self._run(self._value_and_grad, *params, *self._batch, self._O)

    def check_grad(self, raw: Any) -> tuple[float, np.ndarray]:
        (value, code), grad = raw
        self._device = jax_device(grad)
        self._check(code)
        return float(value), np.asarray(grad)

    def placement(self) -> tuple[str, str | None]:
        return jax_placement(self._device)

    def alloc_peak_mb(self) -> float | None:
        return jax_alloc_peak(self._device)


class DiffraxBackend(Backend):
    name = "diffrax"
    packages = ("diffrax", "jax", "jaxlib", "equinox")
    extra = "jax"
    modules = ("jax", "diffrax")
    gradient_methods: Mapping[str, str] = _ADJOINTS  # RecursiveCheckpointAdjoint first
    solver_table = _SOLVERS
    case_type = DiffraxCase
    stiff_solver, nonstiff_solver = "Kvaerno4", "Tsit5"
    devices = ("cpu", "cuda")
    dtypes = ("float64", "float32")
    #: array problems run on the generated jnp code; Kvaerno's Newton iterations solve with
    #: lineax's AutoLinearSolver on the dense jax.jacfwd Jacobian: dense is its only kind
    array_problems = True
    events = ("time",)
    sparse_missing = (
        "diffrax has no sparse Jacobian path: its implicit solvers' Newton iterations solve "
        "with lineax (AutoLinearSolver, dense LU on the dense jax.jacfwd Jacobian), which "
        "has no sparse factorisation"
    )

    def cuda_missing(self) -> tuple[str, str] | None:
        import jax

        fix = "pip install -U 'jax[cuda12]' (a CUDA build of jaxlib), or use --device cpu"
        try:
            dev = jax.devices()[0]
        except Exception as e:  # no CUDA plugin: JAX raises (an AssertionError in 0.10)
            why = " ".join(str(e).split())[:160] or type(e).__name__
            return f"jax {jax.__version__} has no CUDA backend ({why})", fix
        if dev.platform != "gpu":
            return _no_gpu(jax.__version__, dev), fix
        return None

    def load(self) -> dict[str, float]:
        import jax

        jax.config.update("jax_enable_x64", True)
        import diffrax  # noqa: F401

        return {}

    ensemble_semantics = ("independent", "coupled")

    def build_ensemble(
        self, problem: CompiledProblem, options: CaseOptions, batch: Batch, semantics: str
    ) -> EnsembleCase:
        if semantics not in self.ensemble_semantics:
            raise EnsembleNotOffered(f"diffrax: no {semantics} ensemble")
        return DiffraxEnsembleCase(problem, options, batch, semantics)

    def build_training(
        self, problem: CompiledProblem, options: CaseOptions, adam: Adam
    ) -> TrainingCase:
        return DiffraxTrainingCase(problem, options, adam)


def _no_gpu(version: str, first: Any) -> str:
    """What is missing when a JAX pinned to ``cuda,cpu`` starts on the CPU: JAX skips a
    platform it has no plugin for, so name whether a CUDA plugin is installed at all."""
    from importlib import metadata

    plugins = sorted({d.metadata["Name"] for d in metadata.distributions()
                      if (d.metadata["Name"] or "").lower().startswith("jax-cuda")})  # fmt: skip
    if not plugins:
        return (f"jax {version} has no CUDA backend (no jax-cuda plugin is installed: a "
                f"CPU-only jaxlib; its first device is {first})")  # fmt: skip
    return f"jax {version} found no GPU ({', '.join(plugins)} installed; first device {first})"


# -- training (sciml-bench run NAME --train) -------------------------------------------------


class DiffraxTrainingCase(TrainingCase):
    """Diffrax's training loop as its neural-ODE example writes it: one ``jax.jit``-compiled
    step that takes the gradient of the loss and applies ``optax.adam``'s update
    (``optim.update``, ``optax.apply_updates``), called once per iteration on the parameters
    and optimizer state the previous call returned. The loss is :class:`DiffraxCase`'s
    (``diffeqsolve`` with ``throw=False``); its result code comes out of the step beside the
    loss and is checked after the clock."""

    def __init__(self, problem: CompiledProblem, options: CaseOptions, adam: Adam):
        import jax
        import jax.numpy as jnp
        import optax

        self.case = c = DiffraxCase(problem, options)
        # eps_root = 0: ε added to sqrt(v̂), as torch and Optimisers.jl do (Optax's default)
        optim = optax.adam(adam.learning_rate, b1=adam.beta1, b2=adam.beta2, eps=adam.eps,
                           eps_root=0.0)  # fmt: skip

        def make_step(theta: Any, opt_state: Any) -> Any:
            grads, aux = jax.grad(c.loss_fn, has_aux=True)(theta)
            updates, opt_state = optim.update(grads, opt_state, theta)
            return optax.apply_updates(theta, updates), opt_state, aux

        self._step = jax.jit(make_step)
        self.state = (jnp.asarray(problem.theta0), optim.init(jnp.asarray(problem.theta0)))
        self.info = {**c.info, "loop": "jax.jit(grad + optax.adam update + apply_updates)",
                     "optimizer": f"optax.adam({adam.learning_rate!r}, b1={adam.beta1!r}, "
                                  f"b2={adam.beta2!r}, eps={adam.eps!r}, eps_root=0.0)"}  # fmt: skip

    def step(self) -> Any:
        theta, opt_state, aux = self.case._run(lambda s: self._step(*s), self.state)
        self.state = (theta, opt_state)
        return aux

    def check(self, raw: Any) -> float:
        value, code, _, _ = np.asarray(raw)
        self.case._check(code, None)
        if not np.isfinite(value):
            raise SolverFailure(Status.NONFINITE, f"diffrax: non-finite loss ({value})")
        return float(value)

    def parameters(self) -> np.ndarray:
        return np.asarray(self.state[0]).copy()

    def placement(self) -> tuple[str, str | None]:
        return jax_placement(jax_device(self.state[0]))

    def alloc_peak_mb(self) -> float | None:
        return jax_alloc_peak(jax_device(self.state[0]))
