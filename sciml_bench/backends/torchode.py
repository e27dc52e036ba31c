"""torchode (PyTorch), in float64 (or float32: ``--dtype``): a batch-parallel solver with
per-member step sizes.

torchode solves a batch ``(n, n_state)`` with one step size, one error norm and one
status per member (Lienen & Günnemann 2022), so an ensemble is ``independent``. A
single trajectory is a batch of one. Gradients are ``AutoDiffAdjoint``
(backpropagation through the solver). The ``-compile`` solvers wrap the solve in
``torch.compile``; the first call pays the compilation, recorded in TTFG.
torchode's README compiles the solver module (``torch.compile(solver).solve``), but
attribute access on a compiled module reaches the original method uncompiled, so the
bound ``solve`` method is what is compiled here.

Fixed steps: torchode offers ``FixedStepController`` ("accepts any result and keeps the
step size fixed"), which needs ``dt0``: ``euler`` (``torchode.Euler``) and ``tsit5-fixed``
(``torchode.Tsit5``) run under it with ``dt0`` = the case's ``dt`` for every member, and
the same ``max_steps``.

On ``cuda`` every tensor of the problem (``y0``, the time grids, the members' maps and
the loss arrays) is made on the GPU; torchode then works where ``y0`` is (its tableau
and controller state follow ``problem.device``). The timed calls end with
``torch.cuda.synchronize``; statuses, counters and solutions reach the host in the
checks, after the clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from sciml_bench.backends.base import Case, CaseOptions, Solution, SolverInfo
from sciml_bench.backends.checks import failed_members, finite_solution
from sciml_bench.backends.ensemble import EnsembleCase, EnsembleSolution
from sciml_bench.backends.torch_common import (
    TorchBackend,
    TorchMembers,
    TorchTraining,
    batched_rhs,
)
from sciml_bench.backends.torch_device import TorchPlaced
from sciml_bench.measure.status import SolverFailure, Status
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.problem.ensemble import Batch
from sciml_bench.problem.training import Adam

_SOLVERS = {
    "dopri5": SolverInfo("dopri5", False, "Dormand-Prince 5(4), per-member steps"),
    "tsit5": SolverInfo("tsit5", False, "Tsitouras 5(4), per-member steps"),
    **{f"{m}-compile": SolverInfo(f"{m}-compile", False, f"{m} under torch.compile")
       for m in ("dopri5", "tsit5")},
    "euler": SolverInfo("euler", False, "explicit Euler, FixedStepController (--dt)",
                        fixed_step=True),
    "tsit5-fixed": SolverInfo("tsit5-fixed", False, "tsit5 with FixedStepController (--dt)",
                              fixed_step=True),
}
_GRADIENTS = {"AutoDiffAdjoint": "backpropagation through the solver's operations"}
#: torchode's status codes (torchode.status_codes) -> ours
_STATUS = {2: Status.DT_UNDERFLOW, 3: Status.MAX_STEPS, 4: Status.NONFINITE}


class TorchodeEnsembleCase(TorchMembers, TorchPlaced, EnsembleCase):
    """``independent``: one torchode solve of the whole batch, per-member step sizes."""

    semantics = "independent"

    def __init__(self, problem: CompiledProblem, options: CaseOptions, batch: Batch):
        import torch
        import torchode

        from sciml_bench.backends.base import fixed_step_plan
        from sciml_bench.backends.torch_device import torch_dtype

        step = fixed_step_plan(problem, options, _SOLVERS[options.solver])
        self.torch = torch
        #: the case's floating-point type (--dtype): every tensor is made in it
        self.dtype = dt = torch_dtype(torch, options.dtype)
        # every tensor is made on the named device: that is torch's pinning
        self.device = dev = torch.device(options.device)
        y0 = torch.as_tensor(batch.y0, dtype=dt, device=dev)  # torch's own error first
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)  # the case's peak, from its build on
        n = batch.n
        self.n = n
        self.per_member = batch.varies_parameters
        f = batched_rhs(problem.source["torch"])
        term = torchode.ODETerm(f, with_args=True)
        base = options.solver.removesuffix("-compile").removesuffix("-fixed")
        method = {"dopri5": torchode.Dopri5, "tsit5": torchode.Tsit5,
                  "euler": torchode.Euler}[base](term=term)  # fmt: skip
        if step is None:
            controller: Any = torchode.IntegralController(atol=options.atol, rtol=options.rtol,
                                                          term=term)  # fmt: skip
            self.dt0 = None
        else:
            controller = torchode.FixedStepController()
            self.dt0 = torch.full((n,), step, dtype=dt, device=dev)
        self.adjoint = torchode.AutoDiffAdjoint(method, controller, max_steps=options.max_steps)
        self.solve_fn = self.adjoint.solve
        if options.solver.endswith("-compile"):
            self.solve_fn = torch.compile(self.adjoint.solve)
        t0, t1 = problem.t_span
        ts = torch.as_tensor(problem.t_save, dtype=dt, device=dev)
        self._times = {"t_start": torch.full((n,), t0, dtype=dt, device=dev),
                       "t_end": torch.full((n,), t1, dtype=dt, device=dev),
                       "t_eval": ts.expand(n, -1)}  # fmt: skip
        self._ivp_type = torchode.InitialValueProblem
        self.ivp = torchode.InitialValueProblem(y0=y0, **self._times)
        #: the start as a function of the parameters, where it depends on them (a single
        #: trajectory's case sets it: problem/initial.py); None: the batch's fixed y0
        self.y0_of: Any = None

        def on(a: np.ndarray) -> Any:
            return torch.as_tensor(a, dtype=dt, device=dev)

        self.S, self.A = on(batch.scale), on(batch.shift)
        self.W, self.C = on(problem.loss_W), on(problem.loss_C)
        self.O = on(batch.observations if batch.observations is not None else problem.loss_O)
        #: the device torch reports for the last solution (the read-back)
        self.last_device: Any = y0.device
        self.info = {"semantics": "independent", "members": n, "shared_theta": not self.per_member,
                     "compiled": options.solver.endswith("-compile"), "dtype": options.dtype}  # fmt: skip
        if step is not None:
            self.info["fixed_step"] = f"FixedStepController(), dt0={step!r} for every member"

    def _solve(self, th: Any) -> Any:
        ivp = self.ivp
        if self.y0_of is not None:  # the start from the parameters, inside autograd's graph
            ivp = self._ivp_type(y0=self.y0_of(th)[None, :], **self._times)
        return self.solve_fn(ivp, args=self._params(th), dt0=self.dt0)

    def _check(self, status: Any) -> None:
        code = status.cpu().numpy()
        ok = code == 0
        if ok.all():
            return
        st = _STATUS.get(int(code[~ok][0]), Status.SOLVER_FAILURE)
        raise SolverFailure(st, f"torchode: {st.value} in {failed_members(ok)}")

    def solve_raw(self, params: Any) -> Any:
        with self.torch.no_grad():
            sol = self._solve(params[0])
        self.sync()
        return sol

    def check_solve(self, raw: Any) -> EnsembleSolution:
        self.last_device = raw.ys.device
        self._check(raw.status)
        y = finite_solution("torchode", raw.ys.cpu().numpy())
        return EnsembleSolution(y, steps=raw.stats["n_accepted"].cpu().numpy(),
                                rhs_evals=raw.stats["n_f_evals"].cpu().numpy())  # fmt: skip

    def grad_raw(self, params: Any) -> Any:
        torch = self.torch
        theta, w = params
        th = theta.detach().requires_grad_()  # a leaf sharing the prepared tensor's storage
        sol = self._solve(th)
        loss = self.weighted_loss(w, sol.ys, self.W, self.O, self.C)
        (grad,) = torch.autograd.grad(loss, th)
        self.sync()
        return loss.detach(), grad, sol.status

    def check_grad(self, raw: Any) -> tuple[float, np.ndarray]:
        loss, grad, status = raw
        self.last_device = grad.device
        self._check(status)
        return float(loss), grad.cpu().numpy()


class TorchodeCase(Case):
    """A single trajectory: a batch of one member."""

    def __init__(self, problem: CompiledProblem, options: CaseOptions):
        one = Batch(problem.y0[None, :], np.ones((1, problem.n_params)),
                    np.zeros((1, problem.n_params)))  # fmt: skip
        self.ens = TorchodeEnsembleCase(problem, options, one)
        if problem.y0_depends:
            from sciml_bench.problem.generated import load_python

            self.ens.y0_of = load_python(problem.source["torch"])["y0"]
        if problem.size is not None:
            self.info = {"linear_solver": f"none ({options.solver} is explicit)"}

    def prepare(self, theta: np.ndarray) -> Any:
        return self.ens.prepare(theta)

    def timed_solve(self, params: Any) -> Any:
        return self.ens.solve_raw(params)

    def check_solve(self, raw: Any) -> Solution:
        sol = self.ens.check_solve(raw)
        stats = {}
        if sol.steps is not None:
            stats["steps"] = int(sol.steps[0])
        if sol.rhs_evals is not None:
            stats["rhs_evals"] = int(sol.rhs_evals[0])
        return Solution(sol.y[0], stats)

    def timed_grad(self, params: Any) -> Any:
        return self.ens.grad_raw(params)

    def check_grad(self, raw: Any) -> tuple[float, np.ndarray]:
        return self.ens.check_grad(raw)

    def placement(self) -> tuple[str, str | None]:
        return self.ens.placement()

    def alloc_peak_mb(self) -> float | None:
        return self.ens.alloc_peak_mb()


# -- training (sciml-bench run NAME --train) -------------------------------------------------


class TorchodeTrainingCase(TorchTraining):
    """torchode's training loop: θ is one ``torch.nn.Parameter``, passed as the batched
    RHS's ``args`` of the :class:`TorchodeCase` solve (a batch of one member); per
    iteration ``optimizer.zero_grad()``, the ``AutoDiffAdjoint`` solve, the loss,
    ``loss.backward()``, ``optimizer.step()`` with ``torch.optim.Adam`` and the declared
    constants. The solve's status is checked after the clock."""

    library = "torchode"

    def __init__(self, problem: CompiledProblem, options: CaseOptions, adam: Adam):
        self.ens = self.placed = e = TorchodeCase(problem, options).ens
        torch = self.torch = e.torch
        # a copy: the optimizer updates it in place, and as_tensor would share θ0's memory
        theta = torch.tensor(problem.theta0, dtype=e.dtype, device=e.device)
        self.theta = torch.nn.Parameter(theta)
        self._adam([self.theta], adam, e.info,
                   "optimizer.zero_grad(); solve; loss.backward(); optimizer.step()")

    def step(self) -> Any:
        e, torch = self.ens, self.torch
        self.optimizer.zero_grad()
        sol = e._solve(self.theta)
        d = sol.ys - e.O
        loss = torch.sum(e.W * d * d) + torch.sum(e.C * sol.ys)
        loss.backward()
        self.optimizer.step()
        e.sync()
        return loss.detach(), sol.status

    def check(self, raw: Any) -> float:
        loss, status = raw
        self.ens._check(status)
        return self.checked_loss(loss, [self.theta])

    def parameters(self) -> np.ndarray:
        return self.theta.detach().cpu().numpy().copy()


class TorchodeBackend(TorchBackend):
    name = "torchode"
    packages = ("torchode", "torch")
    modules = ("torch", "torchode")
    gradient_methods: Mapping[str, str] = _GRADIENTS
    solver_table = _SOLVERS
    ensemble_semantics = ("independent",)
    case_type = TorchodeCase
    ensemble_type = TorchodeEnsembleCase
    training_type = TorchodeTrainingCase
