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

from sciml_bench.backends.base import Availability, Backend, Case, CaseOptions, Solution, SolverInfo
from sciml_bench.measure.status import SolverFailure, Status, classify_message
from sciml_bench.problem.compiled import CompiledProblem

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
        # every tensor is made on the named device: that is torch's pinning
        self.device = dev = torch.device(options.device)
        self.y0 = torch.as_tensor(problem.y0, dtype=dt, device=dev)  # torch's own error first
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)  # the case's peak, from its build on
        t0 = problem.t_span[0]
        ts = problem.t_save
        # odeint returns the state at t[0]; prepend t0 unless it is a save point
        self.skip_first = bool(ts[0] != t0)
        grid = np.concatenate([[t0], ts]) if self.skip_first else ts
        self.t = torch.as_tensor(grid, dtype=dt, device=dev)
        self.W, self.O, self.C = (
            torch.as_tensor(a, dtype=dt, device=dev)
            for a in (problem.loss_W, problem.loss_O, problem.loss_C)
        )
        self.kw = dict(rtol=options.rtol, atol=options.atol, method=options.solver)
        self.max_evals = options.max_steps * EVALS_PER_STEP.get(options.solver, 6)
        self.current: _Tracked | None = None
        #: the device torch reports for the last solution (the read-back)
        self.last_device: Any = self.y0.device

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
        self.last_device = ys.device
        return (ys[1:] if self.skip_first else ys), f

    def progress_t(self) -> float | None:
        f = self.current
        return f.t_seen if f is not None else None

    def solve(self, theta: np.ndarray) -> Solution:
        with self.torch.no_grad():
            ys, f = self._run(
                self.torch.as_tensor(theta, dtype=self.torch.float64, device=self.device)
            )
        y = ys.cpu().numpy()  # the copy back to the host waits for the device
        self.sync()
        if not np.all(np.isfinite(y)):
            raise SolverFailure(Status.NONFINITE, "torchdiffeq: non-finite values in the solution")
        return Solution(y, {"rhs_evals": f.nfe})

    def loss_and_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        torch = self.torch
        th = torch.tensor(theta, dtype=torch.float64, device=self.device, requires_grad=True)
        ys, f = self._run(th)
        d = ys - self.O
        loss = torch.sum(self.W * d * d) + torch.sum(self.C * ys)
        f.nfe = 0  # the adjoint's backward solve gets the same bound
        try:
            (grad,) = torch.autograd.grad(loss, th)
        except AssertionError as e:  # the adjoint's backward solve can fail too
            raise SolverFailure(classify_message(str(e)), f"torchdiffeq backward: {e}") from None
        out = float(loss.detach()), grad.cpu().numpy()
        self.sync()
        return out

    def sync(self) -> None:
        """Wait for queued CUDA work: every timed call ends with it, before the clock is read."""
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def placement(self) -> tuple[str, str | None]:
        dev = self.last_device
        if dev.type == "cuda":
            return "cuda", self.torch.cuda.get_device_name(dev)
        return super().placement() if dev.type == "cpu" else (dev.type, None)

    def alloc_peak_mb(self) -> float | None:
        from sciml_bench.measure.memory import torch_alloc_peak_mb

        return torch_alloc_peak_mb(self.torch) if self.device.type == "cuda" else None


class TorchdiffeqBackend(Backend):
    name = "torchdiffeq"
    packages = ("torchdiffeq", "torch")
    extra = "torch"
    modules = ("torch", "torchdiffeq")
    gradient_methods: Mapping[str, str] = _GRADIENTS
    devices = ("cpu", "cuda")

    def cuda_missing(self) -> tuple[str, str] | None:
        import torch

        fix = "pip install torch --index-url https://download.pytorch.org/whl/cu126 " \
            "(a CUDA build), or use --device cpu"
        if torch.version.cuda is None:
            return f"torch {torch.__version__} is a CPU-only build (torch.version.cuda is None)", fix
        if not torch.cuda.is_available():
            return (f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU "
                    "(torch.cuda.is_available() is False: driver or CUDA_VISIBLE_DEVICES)", fix)
        return None

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
