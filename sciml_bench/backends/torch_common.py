"""What the two torch backends share, torchdiffeq and torchode: their place among the
backends (float64 or float32 on the CPU or a GPU, explicit solvers only), an ensemble's
members as torch writes them, and the training loop's optimizer and its check.

An ensemble of ``n`` members solves the generated batched RHS (:func:`batched_rhs`) with
member ``m``'s parameters ``θ_m = θ ⊙ S_m + A_m`` (:class:`TorchMembers`; every member
shares ``θ`` when the batch varies none), and its loss is the members' losses weighted by
``w`` (``1/n`` each by default): ``L̄ = Σ_m w_m Σ_ij (W (Y_m − O_m)² + C Y_m)_ij``
(:meth:`TorchMembers.weighted_loss`). Where a tensor lives is
:mod:`~sciml_bench.backends.torch_device`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from sciml_bench.backends.base import Backend, CaseOptions
from sciml_bench.backends.ensemble import EnsembleCase, EnsembleNotOffered
from sciml_bench.backends.torch_device import torch_cuda_missing
from sciml_bench.backends.training import TrainingCase
from sciml_bench.measure.status import SolverFailure, Status
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.problem.ensemble import Batch
from sciml_bench.problem.training import Adam


class TorchBackend(Backend):
    """A torch library: CPU or CUDA, float64 or float32, explicit solvers only; one
    ensemble semantics, and a training loop of its own."""

    extra = "torch"
    devices = ("cpu", "cuda")
    dtypes = ("float64", "float32")
    #: array problems run on the generated torch code; its solvers are explicit (no Jacobian)
    array_problems = True
    # neither has a stiff solver (torchdiffeq's implicit_adams is fixed-step and NaNs on
    # ROBER): the same method in both, so their rows compare
    stiff_solver = nonstiff_solver = "dopri5"
    #: what :meth:`build_ensemble` and :meth:`build_training` make
    ensemble_type: type[EnsembleCase]
    training_type: type[TrainingCase]

    def cuda_missing(self) -> tuple[str, str] | None:
        return torch_cuda_missing()

    def build_ensemble(
        self, problem: CompiledProblem, options: CaseOptions, batch: Batch, semantics: str
    ) -> EnsembleCase:
        (offered,) = self.ensemble_semantics
        if semantics != offered:
            raise EnsembleNotOffered(f"{self.name}: no {semantics} ensemble ({offered} only)")
        return self.ensemble_type(problem, options, batch)  # type: ignore[call-arg]

    def build_training(
        self, problem: CompiledProblem, options: CaseOptions, adam: Adam
    ) -> TrainingCase:
        return self.training_type(problem, options, adam)  # type: ignore[call-arg]


def batched_rhs(source: str) -> Callable[..., Any]:
    """The generated batched torch RHS, ``f(t, Y, P)`` with ``Y`` of shape ``(n, n_state)``
    and ``P`` either ``(n, n_params)`` or one shared ``θ``; ``t`` a scalar or one time per
    member. Written on columns, as a torch user writes a batched vector field:
    ``torch.func.vmap`` over the one-member RHS made the torchdiffeq ensemble rows
    markedly slower than a bare script (``benchmarks/README.md``, the "Ensembles"
    paragraph, by ``benchmarks/ensemble_overhead.py``)."""
    from sciml_bench.problem.generated import load_python

    return load_python(source)["rhs_batch"]  # type: ignore[no-any-return]


class TorchMembers:
    """Mixin for a torch ensemble case with ``torch``, ``dtype``, ``device``, ``n``,
    ``per_member`` and the members' maps ``S``, ``A`` (tensors on the device)."""

    torch: Any
    dtype: Any
    device: Any
    n: int
    per_member: bool
    S: Any
    A: Any

    def _params(self, th: Any) -> Any:
        """The members' parameters ``θ ⊙ S + A``, or the shared ``θ`` itself."""
        return th * self.S + self.A if self.per_member else th

    def prepare(self, theta: np.ndarray, weights: np.ndarray | None = None) -> Any:
        """θ and the member weights (``1/n`` each by default) as tensors on the device."""
        w = np.full(self.n, 1.0 / self.n) if weights is None else weights
        on = {"dtype": self.dtype, "device": self.device}
        return self.torch.as_tensor(theta, **on), self.torch.as_tensor(w, **on)

    def weighted_loss(self, w: Any, ys: Any, W: Any, O: Any, C: Any) -> Any:
        """``Σ_m w_m L_m`` over the members' states ``ys``, shape ``(n, n_save, n_state)``:
        the members' mean with the default weights."""
        d = ys - O
        return self.torch.dot(w, self.torch.sum(W * d * d + C * ys, dim=(1, 2)))


# -- training (sciml-bench run NAME --train) -------------------------------------------------


class TorchTraining(TrainingCase):
    """A torch library's training loop: ``torch.optim.Adam`` with every declared constant
    (no default left to torch) on the trained tensors, around a case of the library's,
    whose device and memory peak are the loop's."""

    library: str
    torch: Any
    #: the case whose solve each iteration runs
    placed: Any

    def _adam(self, params: Any, adam: Adam, info: dict[str, Any], loop: str) -> None:
        """Make :attr:`optimizer` on ``params``; the record's ``info``: the case's, the
        optimizer as torch holds it (read back from its parameter group) and ``loop``."""
        self.optimizer = self.torch.optim.Adam(
            params, lr=adam.learning_rate, betas=(adam.beta1, adam.beta2), eps=adam.eps
        )
        group = self.optimizer.param_groups[0]
        held = (
            f"torch.optim.Adam(lr={group['lr']!r}, betas={tuple(group['betas'])!r}, "
            f"eps={group['eps']!r}, foreach={group['foreach']}, fused={group['fused']})"
        )
        self.info = {**info, "optimizer": held, "loop": loop}  # fmt: skip

    def checked_loss(self, loss: Any, params: Any) -> float:
        """An iteration's loss as a float, after the clock: a non-finite loss, or a
        non-finite gradient left in the parameters' ``.grad``, is a ``nonfinite`` failure
        (the optimizer would carry it into every later iteration)."""
        import math

        value = float(loss)
        bad = sum(int((~p.grad.isfinite()).sum()) for p in params if p.grad is not None)
        if not math.isfinite(value) or bad:
            raise SolverFailure(
                Status.NONFINITE,
                f"{self.library}: non-finite loss or gradient "
                f"(loss={value:.6g}, {bad} non-finite gradient component(s))",
            )
        return value

    def placement(self) -> tuple[str, str | None]:
        return self.placed.placement()  # type: ignore[no-any-return]

    def alloc_peak_mb(self) -> float | None:
        return self.placed.alloc_peak_mb()  # type: ignore[no-any-return]
