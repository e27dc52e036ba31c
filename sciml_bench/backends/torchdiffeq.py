"""torchdiffeq (PyTorch), in float64 (or float32: ``--dtype``).

torchdiffeq has no stiff solver, so dopri5 is its default for every problem;
on stiff problems that is its result. Failures surface as ``AssertionError``
text (no status codes), which is mapped onto statuses.

The right-hand side is the generated ``RHS`` module (``sciml-bench codegen --target
torch``): its parameter tensors are the problem's parameters, as a torch user holds
them, so nothing is sliced per evaluation. Steps are counted by torchdiffeq's own step
callbacks (``callback_accept_step`` / ``callback_reject_step``, once per step, not per
RHS evaluation), which also enforce the step bound: the problem's shared ``max_steps``
over the whole solve, accepted plus rejected (as Diffrax counts them), checked by
:func:`~sciml_bench.backends.step_bound.steps_over`. torchdiffeq's own
``max_num_steps`` restarts at every save time (it would allow ``n_save × max_steps``).
So a hopeless stiff solve ends as a quick ``max_steps`` row with how far in t it got,
never a hang.

Fixed-step solvers (``euler``, ``rk4``: torchdiffeq's fixed-grid methods) take the case's
``dt`` as ``options={"step_size": dt}``; they report each step through ``callback_step``
(the only callback a fixed grid calls), counted against the same bound, which
:func:`~sciml_bench.backends.base.fixed_step_plan` also checks before the solve. Between
grid points torchdiffeq interpolates linearly to the save times (its default ``interp``),
so a save time off the grid carries that O(dt²) error too: the row shows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from sciml_bench.backends.base import Case, CaseOptions, Solution, SolverInfo
from sciml_bench.backends.checks import finite_solution
from sciml_bench.backends.ensemble import EnsembleCase, EnsembleSolution
from sciml_bench.backends.step_bound import steps_over
from sciml_bench.backends.torch_common import (
    TorchBackend,
    TorchMembers,
    TorchTraining,
    batched_rhs,
)
from sciml_bench.backends.torch_device import TorchPlaced
from sciml_bench.measure.status import SolverFailure, classify_message
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.problem.ensemble import Batch
from sciml_bench.problem.event_segments import segments
from sciml_bench.problem.training import Adam

_SOLVERS = {
    "dopri5": SolverInfo("dopri5", False, "Dormand-Prince 5(4)"),
    "dopri8": SolverInfo("dopri8", False, "Dormand-Prince 8(7)"),
    "bosh3": SolverInfo("bosh3", False, "Bogacki-Shampine 3(2)"),
    "adaptive_heun": SolverInfo("adaptive_heun", False, "Heun 2(1)"),
    "euler": SolverInfo("euler", False, "explicit Euler, fixed step (--dt)", fixed_step=True),
    "rk4": SolverInfo("rk4", False, "Runge-Kutta 4 (3/8 rule), fixed step (--dt)",
                      fixed_step=True),
}
_GRADIENTS = {
    "backprop": "backpropagation through odeint's operations",
    "adjoint": "odeint_adjoint: continuous adjoint, re-integrated backwards",
}
#: how the generated code runs, recorded in each row
IDIOM = (
    "RHS as a torch.nn.Module holding the parameters as its tensors (loaded once with "
    "vector_to_parameters); odeint under torch.no_grad() for solves; "
    "torch.autograd.grad(loss, module.parameters()) for gradients; steps counted by "
    "torchdiffeq's step callbacks; timed call = odeint (+ loss and autograd.grad)"
)


class StepBound(AssertionError):
    """The whole-solve step bound was reached (an AssertionError, like torchdiffeq's)."""


class _Steps:
    """Accepted and rejected steps, from torchdiffeq's step callbacks, against the bound.

    While ``track`` is set (the first solve and gradient, which the worker's progress
    thread watches), ``t_seen`` is a Python float refreshed every 16 accepted steps, so
    that thread reads a float and never touches a tensor the solver is using. Steady-state
    samples run untracked: reading a tensor's value is a host sync on a GPU.
    """

    def __init__(self, max_steps: int):
        self.max_steps = max_steps
        self.accepted = 0
        self.rejected = 0
        self.t: Any = None
        self.t_seen: float | None = None
        self.track = False

    def reset(self) -> None:
        self.accepted = self.rejected = 0

    def _bound(self) -> None:
        over = steps_over(self.max_steps, self.accepted, self.rejected)
        if over is not None:
            raise StepBound(f"max_num_steps exceeded: {over}")

    def accept(self, t0: Any, y0: Any, dt: Any) -> None:
        self.accepted += 1
        self.t = t0
        if self.track and self.accepted & 15 == 1:
            self.t_seen = float(t0.detach())
        self._bound()

    def reject(self, t0: Any, y0: Any, dt: Any) -> None:
        self.rejected += 1
        self._bound()

    def reached(self) -> float | None:
        return float(self.t.detach()) if self.t is not None else None


def attach_steps(func: Any, steps: _Steps, fixed: bool = False) -> None:
    """torchdiffeq calls these on the function it is given (and ``*_adjoint`` in the
    adjoint's backward solve, which gets the same bound). A fixed grid (``fixed``) calls
    ``callback_step`` once per step, and warns about the adaptive callbacks."""
    pairs = [("step", steps.accept)] if fixed else [
        ("accept_step", steps.accept), ("reject_step", steps.reject)]  # fmt: skip
    for name, fn in pairs:
        setattr(func, f"callback_{name}", fn)
        setattr(func, f"callback_{name}_adjoint", fn)


def case_settings(problem: CompiledProblem, options: CaseOptions) -> dict[str, Any]:
    """The plain settings of one case (``sciml-bench codegen`` prints them): ``odeint``'s
    method and tolerances, or its fixed ``step_size`` (None when adaptive; checked against
    the step bound by :func:`~sciml_bench.backends.base.fixed_step_plan`),
    ``odeint_adjoint`` for gradient method ``adjoint``, the shared step bound and the
    dtype."""
    from sciml_bench.backends.base import fixed_step_plan

    step = fixed_step_plan(problem, options, _SOLVERS[options.solver])
    return {"method": options.solver, "rtol": options.rtol, "atol": options.atol,
            "step_size": step,
            "odeint": "odeint_adjoint" if options.gradient_method == "adjoint" else "odeint",
            "max_steps": options.max_steps, "dtype": options.dtype}  # fmt: skip


def case_parts(
    RHS: Any, y0: Any, theta0: Any, t_span: Any, t_save: Any, loss_arrays: Any,
    settings: dict[str, Any], device: str = "cpu",
) -> dict[str, Any]:
    """A case's tensors and functions, from plain arguments (what :class:`TorchdiffeqCase`
    holds and ``sciml-bench codegen --target torch`` prints, from this very source): the
    generated ``RHS`` module holding ``theta0`` as its parameter tensors, with the step
    bound's callbacks attached; ``y0``; the time grid ``t`` (``t0`` prepended unless it is a
    save point: odeint returns the state at ``t[0]``, dropped when ``skip_first``); the loss
    arrays ``W``, ``O``, ``C``; and ``odeint``'s keyword arguments ``kw``."""
    import torch
    import torchdiffeq

    dt = getattr(torch, settings["dtype"])
    # every tensor is made on the named device: that is torch's pinning
    dev = torch.device(device)
    y0 = torch.as_tensor(y0, dtype=dt, device=dev)  # torch's own error first
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)  # the case's peak, from its build on
    module = RHS(torch.as_tensor(theta0, dtype=dt)).to(dev)
    steps = _Steps(settings["max_steps"])
    attach_steps(module, steps, fixed=settings["step_size"] is not None)
    t0, ts = t_span[0], np.asarray(t_save, dtype=np.float64)
    skip_first = bool(ts[0] != t0)
    grid = np.concatenate([[t0], ts]) if skip_first else ts
    W, O, C = (torch.as_tensor(a, dtype=dt, device=dev) for a in loss_arrays)
    return {
        "odeint": getattr(torchdiffeq, settings["odeint"]), "device": dev, "y0": y0,
        "module": module, "params": tuple(module.parameters()), "steps": steps,
        "skip_first": skip_first, "t": torch.as_tensor(grid, dtype=dt, device=dev),
        "W": W, "O": O, "C": C,
        # the loss Σ W (y - O)² + Σ C y, without terms that are identically zero
        "has_fit": bool(np.any(loss_arrays[0])), "has_linear": bool(np.any(loss_arrays[2])),
        "kw": _odeint_keywords(settings),
    }  # fmt: skip


def _odeint_keywords(settings: dict[str, Any]) -> dict[str, Any]:
    """``odeint``'s method and tolerances, or, on a fixed grid, its ``step_size`` alone
    (no error control: rtol and atol would be ignored)."""
    if settings["step_size"] is not None:
        return {"method": settings["method"], "options": {"step_size": settings["step_size"]}}
    return {"rtol": settings["rtol"], "atol": settings["atol"], "method": settings["method"]}


def loss_and_grads(torch: Any, ys: Any, parts: dict[str, Any], steps_reset: Any) -> Any:
    """``L = Σ W (ys − O)² + Σ C ys`` (without terms that are identically zero) and
    ``torch.autograd.grad(L, params)``; ``steps_reset`` runs between the two, so that the
    adjoint's backward solve gets the same step bound. (The case's gradient call.)"""
    if parts["has_fit"]:
        d = ys - parts["O"]
        loss = torch.sum(parts["W"] * d * d)
        if parts["has_linear"]:
            loss = loss + torch.sum(parts["C"] * ys)
    else:
        loss = torch.sum(parts["C"] * ys)
    steps_reset()
    # a parameter the equations never read gets a zero, not an error
    return loss, torch.autograd.grad(loss, parts["params"], allow_unused=True,
                                     materialize_grads=True)  # fmt: skip


class TorchdiffeqCase(TorchPlaced, Case):
    def __init__(self, problem: CompiledProblem, options: CaseOptions):
        import torch

        from sciml_bench.backends.base import fixed_step_plan
        from sciml_bench.backends.torch_device import torch_dtype
        from sciml_bench.problem.generated import load_python

        step = fixed_step_plan(problem, options, _SOLVERS[options.solver])
        self.torch = torch
        parts = case_parts(load_python(problem.source["torch"])["RHS"], problem.y0,
                           problem.theta0, problem.t_span, problem.t_save,
                           (problem.loss_W, problem.loss_O, problem.loss_C),
                           case_settings(problem, options), options.device)  # fmt: skip
        self.odeint, self.device, self.y0 = parts["odeint"], parts["device"], parts["y0"]
        self.module, self.params, self.steps = parts["module"], parts["params"], parts["steps"]
        self.skip_first, self.t, self.kw = parts["skip_first"], parts["t"], parts["kw"]
        self.W, self.O, self.C = parts["W"], parts["O"], parts["C"]
        self._has_fit, self._has_linear = parts["has_fit"], parts["has_linear"]
        self._parts = parts
        #: the case's floating-point type (--dtype): every tensor is made in it
        self.dtype = dt = torch_dtype(torch, options.dtype)
        self.info = {"idiom": IDIOM, "dtype": str(dt).removeprefix("torch.")}
        if step is not None:  # no error control: rtol and atol are not passed on
            self.info["fixed_step"] = (f"odeint(method={options.solver!r}, options="
                                       f"{{'step_size': {step!r}}}); save times off the "
                                       "grid interpolated linearly (torchdiffeq's default)")
        if problem.size is not None:
            self.info["linear_solver"] = f"none ({options.solver} is explicit)"
        #: the device torch reports for the last solution (the read-back)
        self.last_device: Any = self.y0.device
        #: the start depends on the parameters: each solve computes it from the module's
        #: parameter tensors (RHS.initial), so autograd runs through it (problem/initial.py)
        self.moving_start = problem.y0_depends
        #: a problem with events: the solve's pieces between them at θ0, else None
        self.pieces = None if not problem.events else segments(
            self.module.event_times(self.y0).detach().cpu().numpy(), problem.t_span,
            problem.t_save)  # fmt: skip
        self.t_save = np.asarray(problem.t_save, dtype=np.float64)

    def _odeint(self) -> Any:
        return self.integrate(self.module)

    def integrate(self, func: Any, **extra: Any) -> Any:
        """``odeint`` of ``func`` (its step callbacks attached) from ``y0`` over the save
        grid, under the shared step bound; a failure is a :class:`SolverFailure`."""
        self.steps.reset()
        y0 = func.initial() if self.moving_start else self.y0
        try:
            if self.pieces is not None:
                return self.across_events(func, y0, extra)
            ys = self.odeint(func, y0, self.t, **self.kw, **extra)
        except AssertionError as e:
            raise SolverFailure(
                classify_message(str(e)), f"torchdiffeq: {e}", self.steps.reached()
            ) from None
        self.last_device = ys.device
        return ys[1:] if self.skip_first else ys

    def across_events(self, func: Any, y0: Any, extra: dict[str, Any]) -> Any:
        """``odeint`` once per piece between events (problem/event_segments.py), each from
        the state the last event set (the module's ``event_k``), as a torchdiffeq user
        restarts ``odeint`` where the state jumps; each piece's grid runs from the event's
        time, a tensor computed from the module's parameters (``event_times``), so that
        autograd differentiates a time that moves. One step bound over the whole span."""
        torch = self.torch
        times, ts = func.event_times(y0), torch.as_tensor(self.t_save, dtype=y0.dtype,
                                                              device=y0.device)  # fmt: skip
        end = torch.as_tensor(self.t[-1:], dtype=y0.dtype, device=y0.device)
        y, out = y0, []
        for i, seg in enumerate(self.pieces or ()):
            a = self.t[:1] if i == 0 else times[self.pieces[i - 1].fire[0]].reshape(1)
            b = times[seg.fire[0]].reshape(1) if seg.fire else end
            saves = ts[seg.save]
            head = not (seg.save.size and self.t_save[seg.save[0]] == seg.start)
            tail = not (seg.save.size and self.t_save[seg.save[-1]] == seg.end)
            grid = torch.cat([a] * head + [saves] + [b] * tail)
            ys = self.odeint(func, y, grid, **self.kw, **extra)
            out.append(ys[int(head): int(head) + seg.save.size])
            y = ys[-1]
            for k in seg.fire:
                y = getattr(func, f"event_{k}")(y)
        self.last_device = y.device
        return torch.cat(out)

    def progress_t(self) -> float | None:
        return self.steps.t_seen

    def solve(self, theta: np.ndarray) -> Solution:
        """The checked solve, its progress tracked (the worker's first solve)."""
        self.steps.track = True
        try:
            return super().solve(theta)
        finally:
            self.steps.track = False

    def loss_and_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """The checked loss and gradient, progress tracked (the worker's first gradient)."""
        self.steps.track = True
        try:
            return super().loss_and_grad(theta)
        finally:
            self.steps.track = False

    def prepare(self, theta: np.ndarray) -> Any:
        torch = self.torch
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(
                torch.as_tensor(theta, dtype=self.dtype, device=self.device), self.params
            )
        return self.module

    def timed_solve(self, params: Any) -> Any:
        with self.torch.no_grad():
            ys = self._odeint()
        self.sync()
        return ys, self.steps.accepted, self.steps.rejected  # this solve's own counts

    def check_solve(self, raw: Any) -> Solution:
        ys, accepted, rejected = raw
        y = finite_solution("torchdiffeq", ys.cpu().numpy())
        return Solution(y, {"steps": accepted, "rejected_steps": rejected})

    def timed_grad(self, params: Any) -> Any:
        ys = self._odeint()
        try:
            # the steps reset between loss and gradient: the adjoint's backward solve
            # gets the same bound
            loss, grads = loss_and_grads(self.torch, ys, self._parts, self.steps.reset)
        except AssertionError as e:  # the adjoint's backward solve can fail too
            raise SolverFailure(classify_message(str(e)), f"torchdiffeq backward: {e}") from None
        self.sync()
        # the graph is freed here, inside the call, as a user's loop frees it each step;
        # returned attached, it was freed at the next sample's assignment, in its clock
        return loss.detach(), grads

    def check_grad(self, raw: Any) -> tuple[float, np.ndarray]:
        loss, grads = raw
        g = self.torch.nn.utils.parameters_to_vector(grads)
        return float(loss.detach()), g.cpu().numpy()  # the worker rejects a non-finite one


class TorchdiffeqEnsembleCase(TorchMembers, EnsembleCase):
    """``coupled``: odeint on the stacked ``(n, n_state)`` state, the batched RHS
    (:func:`~sciml_bench.backends.torch_common.batched_rhs`): one error norm and one step size for the whole batch
    (torchdiffeq has no per-member steps). The shared step bound counts the batch's steps.

    Every tensor is made on ``options.device`` (the single case's rule); the timed calls
    end with ``torch.cuda.synchronize`` there, and the checks copy to the host."""

    semantics = "coupled"

    def __init__(self, problem: CompiledProblem, options: CaseOptions, batch: Batch):
        import torch

        self.base = b = TorchdiffeqCase(problem, options)
        self.torch = torch
        self.dtype = dt = b.dtype
        self.device = b.device
        self.per_member = batch.varies_parameters
        fn = batched_rhs(problem.source["torch"])

        class BatchRHS(torch.nn.Module):
            """The batched RHS at parameters ``p`` (set before each solve)."""

            def __init__(self) -> None:
                super().__init__()
                self.p: Any = None

            def forward(self, t: Any, y: Any) -> Any:
                return fn(t, y, self.p)

        self.func = BatchRHS()
        attach_steps(self.func, b.steps)
        b.y0 = torch.as_tensor(batch.y0, dtype=dt, device=b.device)
        self.S, self.A = (
            torch.as_tensor(a, dtype=dt, device=b.device) for a in (batch.scale, batch.shift)
        )
        if batch.observations is not None:
            b.O = torch.as_tensor(batch.observations, dtype=dt, device=b.device)
        self.adjoint = options.gradient_method == "adjoint"
        self.n = batch.n
        self.info = {"semantics": "coupled", "members": self.n, "shared_theta": not self.per_member}

    def solve_raw(self, params: Any) -> Any:
        torch, b = self.torch, self.base
        with torch.no_grad():
            self.func.p = self._params(params[0])
            ys = b.integrate(self.func)
        b.sync()
        return ys, b.steps.accepted, b.steps.rejected

    def check_solve(self, raw: Any) -> EnsembleSolution:
        ys, accepted, _ = raw
        y = finite_solution("torchdiffeq", ys.permute(1, 0, 2).cpu().numpy())
        return EnsembleSolution(y, steps=np.full(self.n, accepted))

    def grad_raw(self, params: Any) -> Any:
        torch, b = self.torch, self.base
        theta, w = params
        th = theta.detach().requires_grad_()  # a leaf sharing the prepared tensor's storage
        self.func.p = self._params(th)
        ys = b.integrate(self.func, **({"adjoint_params": (th,)} if self.adjoint else {}))
        loss = self.weighted_loss(w, ys.permute(1, 0, 2), b.W, b.O, b.C)
        b.steps.reset()  # the adjoint's backward solve gets the same bound
        try:
            (grad,) = torch.autograd.grad(loss, th)
        except AssertionError as e:
            raise SolverFailure(classify_message(str(e)), f"torchdiffeq backward: {e}") from None
        b.sync()
        return loss.detach(), grad

    def check_grad(self, raw: Any) -> tuple[float, np.ndarray]:
        loss, grad = raw
        return float(loss), grad.cpu().numpy()

    def placement(self) -> tuple[str, str | None]:
        return self.base.placement()  # the device of the last solution torchdiffeq returned

    def alloc_peak_mb(self) -> float | None:
        return self.base.alloc_peak_mb()


# -- training (sciml-bench run NAME --train) -------------------------------------------------


class TorchdiffeqTrainingCase(TorchTraining):
    """torchdiffeq's training loop as its ``examples/ode_demo.py`` writes it, one iteration
    per step: ``optimizer.zero_grad()``, ``odeint`` of the RHS module, the loss,
    ``loss.backward()``, ``optimizer.step()``; with ``torch.optim.Adam`` and the declared
    constants instead of the demo's RMSprop, on the full batch and the suite's loss
    ``Σ W (y − O)² + Σ C y``. The RHS module, save grid and step bound are
    :class:`TorchdiffeqCase`'s (``odeint_adjoint`` for gradient method ``adjoint``)."""

    library = "torchdiffeq"

    def __init__(self, problem: CompiledProblem, options: CaseOptions, adam: Adam):
        self.case = self.placed = c = TorchdiffeqCase(problem, options)
        self.torch = c.torch
        self._adam(c.module.parameters(), adam, c.info,
                   "optimizer.zero_grad(); odeint; loss.backward(); optimizer.step()")

    def step(self) -> Any:
        c = self.case
        self.optimizer.zero_grad()
        ys = c.integrate(c.module)
        loss = torch_fit_loss(c, ys)
        c.steps.reset()  # the adjoint's backward solve gets the same bound
        try:
            loss.backward()
        except AssertionError as e:  # the adjoint's backward solve can fail too
            raise SolverFailure(classify_message(str(e)), f"torchdiffeq backward: {e}") from None
        self.optimizer.step()
        c.sync()
        return loss.detach()

    def check(self, raw: Any) -> float:
        return self.checked_loss(raw, self.case.params)

    def parameters(self) -> np.ndarray:
        vec = self.torch.nn.utils.parameters_to_vector(self.case.params)
        return vec.detach().cpu().numpy()

    def progress_t(self) -> float | None:
        return self.case.progress_t()


def torch_fit_loss(c: TorchdiffeqCase, ys: Any) -> Any:
    """The suite's loss on ``ys`` (the save points), without terms that are identically 0."""
    torch = c.torch
    if not c._has_fit:
        return torch.sum(c.C * ys)
    d = ys - c.O
    loss = torch.sum(c.W * d * d)
    return loss + torch.sum(c.C * ys) if c._has_linear else loss


class TorchdiffeqBackend(TorchBackend):
    name = "torchdiffeq"
    packages = ("torchdiffeq", "torch")
    modules = ("torch", "torchdiffeq")
    gradient_methods: Mapping[str, str] = _GRADIENTS  # backprop first: the default
    solver_table = _SOLVERS
    ensemble_semantics = ("coupled",)
    case_type = TorchdiffeqCase
    events = ("time",)
    ensemble_type = TorchdiffeqEnsembleCase
    training_type = TorchdiffeqTrainingCase
