"""torchdiffeq (PyTorch), in float64.

torchdiffeq has no stiff solver, so dopri5 is its default for every problem;
on stiff problems that is its result. Failures surface as ``AssertionError``
text (no status codes), which is mapped onto statuses.

The step bound is the problem's shared ``max_steps``, so a hopeless stiff solve
ends as a quick ``max_steps`` row with how far in t it got, never a hang.
torchdiffeq's own ``max_num_steps`` restarts at every save time (it would allow
``n_save × max_steps``), so the bound is enforced here on the whole solve, as
RHS evaluations: ``max_steps × evaluations per step`` of the method.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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

_SOLVERS = {
    "dopri5": SolverInfo("dopri5", False, "Dormand-Prince 5(4)"),
    "dopri8": SolverInfo("dopri8", False, "Dormand-Prince 8(7)"),
    "bosh3": SolverInfo("bosh3", False, "Bogacki-Shampine 3(2)"),
    "adaptive_heun": SolverInfo("adaptive_heun", False, "Heun 2(1)"),
}
#: new RHS evaluations per step (FSAL methods reuse their last stage)
EVALS_PER_STEP = {"dopri5": 6, "dopri8": 13, "bosh3": 3, "adaptive_heun": 2}
_GRADIENTS = {
    "backprop": "backpropagation through odeint's operations",
    "adjoint": "odeint_adjoint: continuous adjoint, re-integrated backwards",
}


class StepBound(AssertionError):
    """The whole-solve step bound was reached (an AssertionError, like torchdiffeq's)."""


class _Tracked:
    """The RHS, counting evaluations against the step bound and noting the latest t.

    ``t_seen`` is a Python float refreshed every 64 calls, so the progress thread
    reads a float and never touches a tensor the solver is using.
    """

    def __init__(self, rhs: Callable[..., Any], theta: Any, max_evals: int):
        self.rhs = rhs
        self.theta = theta
        self.max_evals = max_evals
        self.nfe = 0
        self.t: Any = None
        self.t_seen: float | None = None

    def __call__(self, t: Any, y: Any) -> Any:
        self.nfe += 1
        self.t = t
        if self.nfe & 63 == 1:
            self.t_seen = float(t)
        if self.nfe > self.max_evals:
            raise StepBound(
                f"max_num_steps exceeded over the whole solve: {self.nfe} RHS evaluations "
                f"> the shared max_steps x evaluations per step = {self.max_evals}"
            )
        return self.rhs(t, y, self.theta)


class TorchdiffeqCase(Case):
    def __init__(self, problem: CompiledProblem, options: CaseOptions):
        import torch
        import torchdiffeq

        from sciml_bench.problem.codegen import load_python

        self.torch = torch
        self.odeint = (
            torchdiffeq.odeint_adjoint if options.gradient_method == "adjoint" else torchdiffeq.odeint
        )
        self.adjoint = options.gradient_method == "adjoint"
        self.rhs = load_python(problem.source["torch"])["rhs"]
        dt = torch.float64
        self.y0 = torch.as_tensor(problem.y0, dtype=dt)
        t0 = problem.t_span[0]
        ts = problem.t_save
        # odeint returns the state at t[0]; prepend t0 unless it is a save point
        self.skip_first = bool(ts[0] != t0)
        grid = np.concatenate([[t0], ts]) if self.skip_first else ts
        self.t = torch.as_tensor(grid, dtype=dt)
        self.W, self.O, self.C = (
            torch.as_tensor(a, dtype=dt) for a in (problem.loss_W, problem.loss_O, problem.loss_C)
        )
        self.kw = dict(rtol=options.rtol, atol=options.atol, method=options.solver)
        self.max_evals = options.max_steps * EVALS_PER_STEP.get(options.solver, 6)
        self.current: _Tracked | None = None

    def _run(self, theta: Any) -> tuple[Any, _Tracked]:
        f = _Tracked(self.rhs, theta, self.max_evals)
        self.current = f
        kw = dict(self.kw)
        if self.adjoint:
            kw["adjoint_params"] = (theta,)
        try:
            ys = self.odeint(f, self.y0, self.t, **kw)
        except AssertionError as e:
            t_reached = float(f.t) if f.t is not None else None
            raise SolverFailure(classify_message(str(e)), f"torchdiffeq: {e}", t_reached) from None
        return (ys[1:] if self.skip_first else ys), f

    def progress_t(self) -> float | None:
        f = self.current
        return f.t_seen if f is not None else None

    def solve(self, theta: np.ndarray) -> Solution:
        with self.torch.no_grad():
            ys, f = self._run(self.torch.as_tensor(theta, dtype=self.torch.float64))
        y = ys.numpy()
        if not np.all(np.isfinite(y)):
            raise SolverFailure(Status.NONFINITE, "torchdiffeq: non-finite values in the solution")
        return Solution(y, {"rhs_evals": f.nfe})

    def loss_and_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        torch = self.torch
        th = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
        ys, f = self._run(th)
        d = ys - self.O
        loss = torch.sum(self.W * d * d) + torch.sum(self.C * ys)
        f.nfe = 0  # the adjoint's backward solve gets the same bound
        try:
            (grad,) = torch.autograd.grad(loss, th)
        except AssertionError as e:  # the adjoint's backward solve can fail too
            raise SolverFailure(classify_message(str(e)), f"torchdiffeq backward: {e}") from None
        return float(loss.detach()), grad.numpy()


def batched_rhs(source: str, per_member: bool, batched_t: bool = False) -> Callable[..., Any]:
    """The generated 1-D torch RHS vmapped over members, ``f(t, Y, P)`` with ``Y`` of shape
    ``(n, n_state)`` and ``P`` either ``(n, n_params)`` or one shared ``θ`` (then network
    layers stay plain matrix products). Shared by torchdiffeq and torchode."""
    from torch.func import vmap

    from sciml_bench.problem.codegen import load_python

    rhs = load_python(source)["rhs"]
    return vmap(rhs, in_dims=(0 if batched_t else None, 0, 0 if per_member else None))


class TorchdiffeqEnsembleCase(EnsembleCase):
    """``coupled``: odeint on the stacked ``(n, n_state)`` state, the RHS vmapped over
    members: one error norm and one step size for the whole batch (torchdiffeq has no
    per-member steps). The whole-solve step bound counts batch RHS evaluations."""

    semantics = "coupled"

    def __init__(self, problem: CompiledProblem, options: CaseOptions, batch: Batch):
        import torch

        self.base = TorchdiffeqCase(problem, options)
        self.torch = torch
        dt = torch.float64
        self.per_member = batch.varies_parameters
        self.base.rhs = batched_rhs(problem.source["torch"], self.per_member)
        self.base.y0 = torch.as_tensor(batch.y0, dtype=dt)
        self.S, self.A = (torch.as_tensor(a, dtype=dt) for a in (batch.scale, batch.shift))
        if batch.observations is not None:
            self.base.O = torch.as_tensor(batch.observations, dtype=dt)
        self.n = batch.n
        self.info = {"semantics": "coupled", "members": self.n, "shared_theta": not self.per_member}

    def _params(self, th: Any) -> Any:
        return th * self.S + self.A if self.per_member else th

    def solve_raw(self, theta: np.ndarray) -> Any:
        torch = self.torch
        with torch.no_grad():
            ys, f = self.base._run(self._params(torch.as_tensor(theta, dtype=torch.float64)))
        return ys, f.nfe

    def check_solve(self, raw: Any) -> EnsembleSolution:
        ys, nfe = raw
        y = ys.permute(1, 0, 2).numpy()
        if not np.all(np.isfinite(y)):
            raise SolverFailure(Status.NONFINITE, "torchdiffeq: non-finite values in the solution")
        return EnsembleSolution(y, rhs_evals=np.full(self.n, nfe))

    def grad_raw(self, theta: np.ndarray) -> Any:
        torch, b = self.torch, self.base
        th = torch.tensor(theta, dtype=torch.float64, requires_grad=True)
        ys, f = b._run(self._params(th))
        ys = ys.permute(1, 0, 2)
        d = ys - b.O
        loss = (torch.sum(b.W * d * d) + torch.sum(b.C * ys)) / self.n
        f.nfe = 0
        try:
            (grad,) = torch.autograd.grad(loss, th)
        except AssertionError as e:
            raise SolverFailure(classify_message(str(e)), f"torchdiffeq backward: {e}") from None
        return loss.detach(), grad

    def check_grad(self, raw: Any) -> tuple[float, np.ndarray]:
        loss, grad = raw
        return float(loss), grad.numpy()


class TorchdiffeqBackend(Backend):
    name = "torchdiffeq"
    packages = ("torchdiffeq", "torch")
    extra = "torch"
    modules = ("torch", "torchdiffeq")
    gradient_methods: Mapping[str, str] = _GRADIENTS

    def availability(self) -> Availability:
        return Availability.of_modules("torch", "torchdiffeq", extra="torch")

    def solvers(self) -> Mapping[str, SolverInfo]:
        return _SOLVERS

    def default_solver(self, stiff: bool) -> str:
        return "dopri5"  # it has no stiff solver; implicit_adams is fixed-step and NaNs on ROBER

    def default_gradient(self, problem: CompiledProblem) -> str:
        return "backprop"

    def build(self, problem: CompiledProblem, options: CaseOptions) -> Case:
        return TorchdiffeqCase(problem, options)

    ensemble_semantics = ("coupled",)

    def build_ensemble(
        self, problem: CompiledProblem, options: CaseOptions, batch: Batch, semantics: str,
        device: str = "cpu",
    ) -> EnsembleCase:
        if semantics != "coupled" or device != "cpu":
            raise EnsembleNotOffered(f"torchdiffeq: no {semantics} ensemble on {device}")
        return TorchdiffeqEnsembleCase(problem, options, batch)
