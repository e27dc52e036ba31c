"""Accuracy metrics: solution error and gradient agreement against the reference.

Solution error, for ``Y`` and reference ``R`` at the save points (shape
``(n_save, n_state)``), with per-state scale ``s_j = max_i |R_ij|`` so that
small species count:

- ``rel_l2``    = ‖(Y − R)/s‖_F / ‖R/s‖_F            (over all save points)
- ``rel_final`` = ‖(Y_N − R_N)/s‖_2 / ‖R_N/s‖_2      (at t_end)
- ``final``     = mean_j |Y_Nj − R_Nj|               (DiffEqDevTools ``final``)
- ``l2``        = sqrt(mean_ij (Y_ij − R_ij)²)       (DiffEqDevTools ``l2``)

Gradient agreement compares log-space components ``θ_i ∂L/∂θ_i`` for
parameters differentiated in log space (so a rate of 3e7 and one of 0.04 are
on one footing) and natural components otherwise:

- ``max_rel`` = max_i |g_i − r_i| / max(|r_i|, 1e-6 ‖r‖_∞)
- ``cosine``  = g·r / (‖g‖ ‖r‖)

and tiers: pass ≤ 1e-4, warn ≤ 1e-2, otherwise (or non-finite) fail. A tier is given
only where the reference resolves it: its own error estimate ``ε_ref`` (on the same
measure, :attr:`~sciml_bench.problem.reference.Reference.reference_error`) must be at most
a tenth of the bound of the tier the row's error falls in (:data:`JUDGE_MARGIN`): pass
needs ``ε_ref ≤ 1e-5``, warn ``ε_ref ≤ 1e-3``. Otherwise the tier is ``unjudged`` and
:func:`tier_note` says why. A fail (error above 1e-2) needs ``ε_ref ≤ 1e-3`` too: an
error the reference cannot resolve is no evidence against the row.

With many parameters the reference has directional derivatives ``d_k ≈ ∇L·v_k``
along seeded unit directions instead of a full gradient; then ``g·v_k`` is
compared with ``d_k`` by the same two measures (:func:`directional_error`).
"""

from __future__ import annotations

import numpy as np

PASS_TOL = 1e-4
WARN_TOL = 1e-2
#: a tier is given only where the reference's own error estimate is at most this
#: fraction of the tier's bound (fail is judged at the warn bound)
JUDGE_MARGIN = 0.1
UNJUDGED = "unjudged"


def solution_error(y: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    y = np.asarray(y, dtype=float)
    ref = np.asarray(ref, dtype=float)
    if y.shape != ref.shape or not np.all(np.isfinite(y)):
        nan = float("nan")
        return {"rel_l2": nan, "rel_final": nan, "final": nan, "l2": nan}
    s = np.max(np.abs(ref), axis=0)
    s[s == 0] = 1.0
    d = (y - ref) / s
    r = ref / s
    return {
        "rel_l2": float(np.linalg.norm(d) / np.linalg.norm(r)),
        "rel_final": float(np.linalg.norm(d[-1]) / np.linalg.norm(r[-1])),
        "final": float(np.mean(np.abs(y[-1] - ref[-1]))),
        "l2": float(np.sqrt(np.mean((y - ref) ** 2))),
    }


def gradient_error(
    g: np.ndarray, ref: np.ndarray, theta: np.ndarray, log_params: np.ndarray
) -> dict[str, float]:
    scale = np.where(np.asarray(log_params, bool), np.asarray(theta, float), 1.0)
    g = np.asarray(g, dtype=float)
    if g.shape != scale.shape:
        return {"max_rel": float("nan"), "cosine": float("nan")}
    return _compare(g * scale, np.asarray(ref, dtype=float) * scale)


def _compare(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    if a.shape != b.shape or not np.all(np.isfinite(a)):
        return {"max_rel": float("nan"), "cosine": float("nan")}
    floor = max(1e-6 * float(np.max(np.abs(b))), 1e-300)
    max_rel = float(np.max(np.abs(a - b) / np.maximum(np.abs(b), floor)))
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    cosine = float(a @ b / (na * nb)) if na > 0 and nb > 0 else float("nan")
    return {"max_rel": max_rel, "cosine": cosine}


def directional_error(
    g: np.ndarray, directions: np.ndarray, derivatives: np.ndarray
) -> dict[str, float]:
    """Compare ``g·v_k`` with the reference directional derivatives ``d_k``."""
    g = np.asarray(g, dtype=float)
    V = np.asarray(directions, dtype=float)
    if g.shape != (V.shape[1],):
        return {"max_rel": float("nan"), "cosine": float("nan")}
    return _compare(V @ g, np.asarray(derivatives, dtype=float))


def _tier(max_rel: float) -> str:
    if not np.isfinite(max_rel) or max_rel > WARN_TOL:
        return "fail"
    return "pass" if max_rel <= PASS_TOL else "warn"


def _needed(tier: str) -> float:
    """The largest reference error that can judge ``tier``: a tenth of its bound."""
    return JUDGE_MARGIN * (PASS_TOL if tier == "pass" else WARN_TOL)


def gradient_tier(max_rel: float | None, reference_error: float | None = None) -> str:
    """``pass``/``warn``/``fail`` by ``max_rel``; ``unjudged`` where the reference's own
    error estimate is above a tenth of that tier's bound (or is not finite). A non-finite
    ``max_rel`` (the row's gradient is NaN) fails whatever the reference."""
    if max_rel is None:
        return ""
    tier = _tier(max_rel)
    if reference_error is None or not np.isfinite(max_rel):
        return tier
    if not np.isfinite(reference_error) or reference_error > _needed(tier):
        return UNJUDGED
    return tier


def tier_note(max_rel: float | None, reference_error: float | None) -> str:
    """Why a row is ``unjudged`` ("" when it is judged): its error, the tier it would
    get, and the reference error that tier needs."""
    if max_rel is None or gradient_tier(max_rel, reference_error) != UNJUDGED:
        return ""
    tier = _tier(max_rel)
    return (f"gradient error {max_rel:.2e} would be {tier}, but the reference's own error "
            f"estimate {reference_error:.2e} is above {_needed(tier):.0e} (a tenth of the "
            f"{'pass' if tier == 'pass' else 'warn'} bound): the reference cannot resolve "
            "it; tighten [reference] rtol/atol or use fewer states")  # fmt: skip
