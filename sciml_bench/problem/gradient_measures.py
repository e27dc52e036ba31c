"""The measures a gradient is judged on, against a full reference gradient.

NumPy only (a worker and the results layer import them; no sympy, no solver):

- :func:`norm_error`: ``‖g − r‖₂ / ‖r‖₂``, the tier's measure;
- :func:`worst_component`: the elementwise error with a floor, shown beside it;
- :func:`judged_scale`: the factor from ``∂L/∂θ_i`` to the judged component
  (``θ_i ∂L/∂θ_i`` where a parameter is differentiated in log space).
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: the floor of :func:`worst_component`, as a fraction of the largest reference component
WORST_FLOOR = 1e-3


def norm_error(a: np.ndarray, b: np.ndarray) -> float:
    """``‖a − b‖₂ / ‖b‖₂``: the tier's measure (SciMLSensitivity's tests' ``isapprox``).
    NaN where ``a`` is not finite or the shapes differ; ``‖a‖`` where ``b`` is zero."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.shape != b.shape or not np.all(np.isfinite(a)):
        return float("nan")
    nb = float(np.linalg.norm(b))
    return float(np.linalg.norm(a - b) / nb) if nb > 0 else float(np.linalg.norm(a))


def worst_component(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
    """``max_i |a_i − b_i| / max(|b_i|, 1e-3 max|b|)`` and its ``i``: the component a bug
    in one parameter's sensitivity shows in (torch's gradcheck is elementwise). ``(NaN,
    -1)`` where ``a`` is not finite or the shapes differ."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.shape != b.shape or a.size == 0 or not np.all(np.isfinite(a)):
        return float("nan"), -1
    floor = max(WORST_FLOOR * float(np.max(np.abs(b))), 1e-300)
    err = np.abs(a - b) / np.maximum(np.abs(b), floor)
    i = int(np.argmax(err))
    return float(err[i]), i


def judged_scale(theta: np.ndarray, log_params: Any) -> np.ndarray:
    """The factor from ``∂L/∂θ_i`` to the judged component: ``θ_i`` for a positive
    log-space parameter (``∂L/∂log θ_i``), else 1."""
    theta = np.asarray(theta, float)
    return np.where(np.asarray(log_params, bool) & (theta > 0), theta, 1.0)
