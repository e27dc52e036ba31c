"""What a training case is: a problem's parameters fitted by Adam in one library's own
loop, one timed iteration at a time. A backend offers its loop through
:meth:`~sciml_bench.backends.base.Backend.build_training` (by default the shared NumPy
loop, :class:`~sciml_bench.backends.base.NumpyAdamTraining`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np


class TrainingNotOffered(NotImplementedError):
    """The backend has no training loop; the message says why."""


class TrainingCase(ABC):
    """A problem trained in one library, with that library's optimizer and its idiomatic
    loop, from the problem's initial parameters θ_0 with the declared Adam constants.

    The worker times :meth:`step` alone: iteration ``k``, the loss and gradient at θ_k and
    the optimizer's update to θ_{k+1}, returning once the device's work is complete (JAX
    blocks, torch synchronises). :meth:`check` runs after the clock on every iteration:
    the solve's status and finiteness, and ``L(θ_k)`` as a float; it raises
    :class:`~sciml_bench.measure.status.SolverFailure`, so training never goes on from a
    failed solve. :meth:`parameters` reads θ back (untimed: tests and checks).
    """

    #: what runs (optimizer, loop), for the result record
    info: dict[str, Any] = {}

    @abstractmethod
    def step(self) -> Any:
        """One iteration: loss and gradient at θ_k, then the update; raw outputs."""

    @abstractmethod
    def check(self, raw: Any) -> float:
        """``L(θ_k)`` from :meth:`step`'s output, after checking the solve succeeded."""

    @abstractmethod
    def parameters(self) -> np.ndarray:
        """θ now (natural units, declaration order), as a NumPy copy."""

    def progress_t(self) -> float | None:
        """The latest time the current solve reached, if the library tells (as
        :meth:`~sciml_bench.backends.base.Case.progress_t`)."""
        return None

    def placement(self) -> tuple[str, str | None]:
        """Where the training's arrays are (as
        :meth:`~sciml_bench.backends.base.Case.placement`)."""
        from sciml_bench.measure.environment import cpu_model

        return "cpu", cpu_model()

    def alloc_peak_mb(self) -> float | None:
        return None
