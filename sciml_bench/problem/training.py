"""Training as data: the ``[training]`` section, and Adam in NumPy.

A problem's ``[training]`` section declares how it is trained (``sciml-bench run NAME
--train``): the optimizer with every constant explicit, the iteration count, the loss
to reach and how often the loss curve is recorded::

    [training]
    optimizer = "adam"
    learning_rate = 0.05
    beta1 = 0.9
    beta2 = 0.999
    eps = 1.0e-8
    iterations = 300
    target_loss = 1.0
    record_every = 1          # optional (1): a curve point every N iterations
    agreement_iterations = 20 # optional (20): K, the window of the curve agreement

The loss is the problem's full-batch, deterministic loss; the initial parameters are the
problem's, identical in every backend. Adam, as torch, Optax and Optimisers.jl write it
(Kingma & Ba 2015, the bias-corrected form with ε added to ``sqrt(v̂)``), at step
``t = k + 1`` with gradient ``g_k = ∇L(θ_k)``::

    m_t = β1 m_{t-1} + (1 − β1) g_k          v_t = β2 v_{t-1} + (1 − β2) g_k²
    θ_{k+1} = θ_k − η (m_t / (1 − β1^t)) / (sqrt(v_t / (1 − β2^t)) + ε)

:func:`adam_loop` runs that update in NumPy around any ``loss_and_grad``: the training
loop of a library without an optimizer of its own (written once, here), and the
reference curve's loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

#: the optimizers a ``[training]`` section may name
OPTIMIZERS = ("adam",)
#: the keys of ``[training]``; the first block is required
REQUIRED_KEYS = ("optimizer", "learning_rate", "beta1", "beta2", "eps", "iterations",
                 "target_loss")  # fmt: skip
OPTIONAL_KEYS = ("record_every", "agreement_iterations")
DEFAULT_AGREEMENT_ITERATIONS = 20
#: ``--quick`` trains this many iterations (tests, CI)
QUICK_ITERATIONS = 5
MAX_ITERATIONS = 10**7


@dataclass(frozen=True)
class Adam:
    """Adam's constants, every one explicit (no library default may leak in)."""

    learning_rate: float
    beta1: float
    beta2: float
    eps: float


@dataclass(frozen=True)
class Training:
    """The ``[training]`` section of a problem file."""

    adam: Adam
    iterations: int
    target_loss: float
    record_every: int = 1
    #: K: the curve agreement compares the first K iterations with the reference's
    agreement_iterations: int = DEFAULT_AGREEMENT_ITERATIONS

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Training:
        d = dict(d)
        d["adam"] = Adam(**d["adam"])
        return cls(**d)

    def quick(self, quick: bool) -> Training:
        """This section, cut to :data:`QUICK_ITERATIONS` iterations under ``--quick``."""
        if not quick or self.iterations <= QUICK_ITERATIONS:
            return self
        n = QUICK_ITERATIONS
        return Training(self.adam, n, self.target_loss, min(self.record_every, n),
                        min(self.agreement_iterations, n))  # fmt: skip

    @property
    def compared(self) -> int:
        """Iterations the curve agreement looks at: ``min(K, iterations)``."""
        return min(self.agreement_iterations, self.iterations)


@dataclass
class AdamState:
    """Adam's moments and its step count ``t`` (0 before the first update)."""

    m: np.ndarray
    v: np.ndarray
    t: int = 0

    @classmethod
    def zeros(cls, n: int) -> AdamState:
        return cls(np.zeros(n), np.zeros(n))


def adam_update(theta: np.ndarray, g: np.ndarray, state: AdamState, adam: Adam) -> np.ndarray:
    """One Adam step (the module's formula): θ_{k+1} from θ_k and g_k; updates ``state``."""
    b1, b2 = adam.beta1, adam.beta2
    state.t += 1
    state.m = b1 * state.m + (1.0 - b1) * g
    state.v = b2 * state.v + (1.0 - b2) * g * g
    m_hat = state.m / (1.0 - b1**state.t)
    v_hat = state.v / (1.0 - b2**state.t)
    return theta - adam.learning_rate * m_hat / (np.sqrt(v_hat) + adam.eps)


@dataclass
class Curve:
    """A training loop's losses: ``loss[k] = L(θ_k)``, θ_0 the initial parameters."""

    loss: list[float] = field(default_factory=list)
    theta: np.ndarray | None = None


def adam_loop(
    loss_and_grad: Callable[[np.ndarray], tuple[float, np.ndarray]],
    theta0: np.ndarray,
    adam: Adam,
    iterations: int,
) -> Curve:
    """``iterations`` steps of Adam around ``loss_and_grad``: the losses ``L(θ_k)``,
    ``k < iterations``, and the last θ (after the last update)."""
    theta = np.array(theta0, dtype=np.float64)
    state = AdamState.zeros(theta.size)
    curve = Curve()
    for _ in range(iterations):
        loss, g = loss_and_grad(theta)
        curve.loss.append(float(loss))
        theta = adam_update(theta, np.asarray(g, dtype=np.float64), state, adam)
    curve.theta = theta
    return curve
