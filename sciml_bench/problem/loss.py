"""The loss as arrays, built once and shared by every backend and the reference.

Every loss is ``L(Y) = Σ_ij W_ij (Y_ij − O_ij)² + Σ_ij C_ij Y_ij`` over the
solution ``Y`` at the save times (see :mod:`sciml_bench.problem.compiled`).

``fit``: ``O`` are observations made by the reference solver at the
problem's ``truth`` parameters (through its ``truth_equations`` when given).
With ``weighting = "scaled"``, ``W_ij = 1 / (N s_j²)`` with ``s_j`` the largest
observed magnitude of state ``j`` and ``N`` the number of entries, so that a
species of size 1e-5 counts as much as one of size 1; with ``"sum"``,
``W = 1`` (the plain sum of squared errors).

``final``: ``C`` holds the weights in its last row (``t_end``).
"""

from __future__ import annotations

import numpy as np

from sciml_bench.problem.spec import Problem


def loss_arrays(
    problem: Problem, observations: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(W, O, C)``, each of shape ``(n_save, n_state)``."""
    shape = (len(problem.t_save), problem.n_state)
    W = np.zeros(shape)
    O = np.zeros(shape)  # noqa: E741
    C = np.zeros(shape)
    if problem.loss.kind == "final":
        C[-1, :] = problem.loss.weights
    else:
        if observations is None or observations.shape != shape:
            raise ValueError("a fit loss needs observations at every save point")
        O[:] = observations
        if problem.loss.weighting == "sum":
            W[:] = 1.0
        else:
            scale = np.max(np.abs(observations), axis=0)
            scale[scale == 0] = 1.0
            W[:] = 1.0 / (W.size * scale**2)
    return W, O, C
