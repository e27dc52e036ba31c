"""What an ensemble case is: ``n`` members of one problem solved together, with one
semantics, and what it returns. Each backend's ensemble case lives in its module; a backend
offers them through :meth:`~sciml_bench.backends.base.Backend.build_ensemble`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class EnsembleSolution:
    """States of every member at the save times, shape ``(n, n_save, n_state)``, and the
    counters the library reports: per member (length ``n``) for independent semantics,
    one batch-wide value repeated for coupled ones, ``None`` where not reported."""

    y: np.ndarray
    steps: np.ndarray | None = None
    rhs_evals: np.ndarray | None = None


class EnsembleNotOffered(NotImplementedError):
    """The backend has no ensemble of these semantics."""


class EnsembleCase(ABC):
    """``n`` members solved together, with one semantics:

    - ``independent``: each member has its own adaptive steps;
    - ``coupled``: the batch is one system under one error norm (one step size).

    The worker times :meth:`solve_raw` and :meth:`grad_raw` alone, on parameters made
    once by :meth:`prepare` (on the case's device, as for
    :class:`~sciml_bench.backends.base.Case`). They return
    when the result is computed on the device (JAX: ``block_until_ready``; torch on
    CUDA: ``torch.cuda.synchronize``), and the worker checks statuses and finiteness and
    copies to the host outside the timed region with :meth:`check_solve` /
    :meth:`check_grad`, which raise :class:`~sciml_bench.measure.status.SolverFailure`.
    The loss is ``L̄ = Σ_m w_m L_m``, the members' losses
    (:class:`~sciml_bench.problem.ensemble.Batch`) weighted by ``w`` (:meth:`prepare`:
    ``1/n`` each by default, the mean), differentiated w.r.t. the nominal ``theta``; the
    gradient check weighs the first ``sample`` members alone, on the timed batch. The
    device is ``options.device`` (``cpu`` or ``cuda``); the worker reads back where the
    library put the arrays with :meth:`placement`.
    """

    semantics: str = ""
    #: whether :meth:`grad_raw` exists (SciPy: solve only)
    differentiable: bool = True

    def prepare(self, theta: np.ndarray, weights: np.ndarray | None = None) -> Any:
        """The nominal ``theta`` and the member weights ``weights`` (length ``n``; None:
        ``1/n`` each) in the library's own form on the case's device, made once before the
        timed calls (default: ``theta`` itself, for a backend with no gradient)."""
        return theta

    @abstractmethod
    def solve_raw(self, params: Any) -> Any:
        """Solve every member at prepared ``params``; returns the library's raw result."""

    @abstractmethod
    def check_solve(self, raw: Any) -> EnsembleSolution:
        """The raw solve as arrays; raises ``SolverFailure`` if any member failed."""

    def grad_raw(self, params: Any) -> Any:
        raise EnsembleNotOffered("this ensemble case has no gradient")

    def check_grad(self, raw: Any) -> tuple[float, np.ndarray]:
        """``(L̄, ∂L̄/∂θ)``; raises ``SolverFailure`` if a member's solve failed."""
        raise EnsembleNotOffered("this ensemble case has no gradient")

    def solve(self, theta: np.ndarray) -> EnsembleSolution:
        return self.check_solve(self.solve_raw(self.prepare(theta)))

    def loss_and_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        return self.check_grad(self.grad_raw(self.prepare(theta)))

    def placement(self) -> tuple[str, str | None]:
        """``(device, name)`` as the library reports it, read back from the last result's
        arrays (before any, from those made at build); as
        :meth:`~sciml_bench.backends.base.Case.placement`."""
        from sciml_bench.measure.environment import cpu_model

        return "cpu", cpu_model()

    def alloc_peak_mb(self) -> float | None:
        """The framework allocator's device-memory peak (MiB) since the build, on a GPU."""
        return None
