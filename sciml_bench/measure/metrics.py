"""Accuracy metrics: solution error and gradient agreement against the reference.

Solution error, for ``Y`` and reference ``R`` at the save points (shape
``(n_save, n_state)``), with per-state scale ``s_j = max(max_i |R_ij|, atol / rtol)`` so
that small species count and round-off does not (the problem's tolerances; the measure
lives in :mod:`sciml_bench.problem.solution_measures`, which the reference's own
cross-check uses too), the worst state named:

- ``rel_l2``    = ‖(Y − R)/s‖_F / ‖R/s‖_F            (over all save points)
- ``rel_final`` = ‖(Y_N − R_N)/s‖_2 / ‖R_N/s‖_2      (at t_end)
- ``final``     = mean_j |Y_Nj − R_Nj|               (DiffEqDevTools ``final``)
- ``l2``        = sqrt(mean_ij (Y_ij − R_ij)²)       (DiffEqDevTools ``l2``)

Gradient agreement compares log-space components ``θ_i ∂L/∂θ_i`` for parameters
differentiated in log space (so a rate of 3e7 and one of 0.04 are on one footing) and
natural components otherwise, against the full reference gradient at every size
(:mod:`sciml_bench.problem.reference_gradient`), on one measure:

- ``rel``     = ‖g − r‖₂ / ‖r‖₂, the **tier's** measure (SciMLSensitivity's tests'
  ``isapprox``; what random projections estimate);
- ``worst``   = max_i |g_i − r_i| / max(|r_i|, 1e-3 max|r|), with the component's name:
  shown on every row, never the tier (torch's gradcheck is elementwise; a gradient whose
  components span 1e-3 to 0.3 fails it on its smallest ones while its norm is right). A
  row whose norm passes with a component off by more than :data:`SUSPECT` says so
  (:func:`suspect_note`): that is how a bug in one parameter's sensitivity shows;
- ``cosine``  = g·r / (‖g‖ ‖r‖).

Tiers: pass ≤ 1e-4, warn ≤ 1e-2, otherwise (or non-finite) fail. A tier is given only where
the reference resolves it: its own error estimate ``ε_ref`` (same measure,
:attr:`~sciml_bench.problem.reference.Reference.reference_error`) must be at most a tenth
of the bound of the tier the row's error falls in (:data:`JUDGE_MARGIN`): pass needs
``ε_ref ≤ 1e-5``, warn and fail ``ε_ref ≤ 1e-3``. Otherwise the tier is ``unjudged`` and
:func:`tier_note` says why, with two exceptions that need no resolution:

- a **certain failure**: ``rel − ε_ref > 1e-2`` (or a non-finite ``rel``) is above the warn
  bound whatever the reference's own error, so it is ``fail``, never ``unjudged``;
- **no estimate at all** (``ε_ref`` None): a reference that does not say its own error
  cannot give a tier, so the row is ``unjudged`` (a NaN gradient still fails).

Any bound ``E`` (``--gradient-rtol``) follows the same rule (:func:`within`): ``rel ≤ E``
and ``ε_ref ≤ E/10``, so ``gradient_tier(e, ε) == "pass"`` exactly where
``within(e, ε, 1e-4)``; a ``pass`` or ``warn`` is always ``within(e, ε, 1e-2)`` and a
``fail`` never is (an error under 1e-4 that the reference resolves only to 1e-2 is
``unjudged``, though within 1e-2: the tier is the one the error falls in). Every row kind
(ODE, ensemble, training's iterates) is tiered here, by these functions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sciml_bench.problem import solution_measures
from sciml_bench.problem.gradient_measures import (
    judged_scale,
    norm_error,
    worst_component,
)

PASS_TOL = 1e-4
WARN_TOL = 1e-2
#: a tier is given only where the reference's own error estimate is at most this
#: fraction of the tier's bound (fail is judged at the warn bound)
JUDGE_MARGIN = 0.1
UNJUDGED = "unjudged"
#: a component this far off while the norm passes is named (:func:`suspect_note`)
SUSPECT = 0.1


def solution_error(y: np.ndarray, ref: np.ndarray, floor: float = 0.0) -> dict[str, float]:
    """The module's solution measures of ``y`` against ``ref``, each state's scale at least
    ``floor`` (a problem's ``atol / rtol``: :func:`~.solution_measures.floor_of`)."""
    return solution_measures.solution_error(y, ref, floor)


def gradient_error(
    g: np.ndarray, ref: np.ndarray, theta: np.ndarray, log_params: np.ndarray
) -> dict[str, float]:
    """``rel``, ``worst``, ``worst_index`` and ``cosine`` (module doc) of ``g`` against
    ``ref``, both in natural units, on the judged components."""
    scale = judged_scale(theta, log_params)
    g = np.asarray(g, dtype=float)
    if g.shape != scale.shape:
        return _compare(np.full(1, np.nan), np.ones(1))
    return _compare(g * scale, np.asarray(ref, dtype=float) * scale)


def _compare(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    worst, at = worst_component(a, b)
    rel = norm_error(a, b)
    if not np.isfinite(rel):
        return {"rel": float("nan"), "worst": float("nan"), "worst_index": -1,
                "cosine": float("nan")}  # fmt: skip
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    cosine = float(a @ b / (na * nb)) if na > 0 and nb > 0 else float("nan")
    return {"rel": rel, "worst": worst, "worst_index": at, "cosine": cosine}


def directional_error(
    g: np.ndarray, directions: np.ndarray, derivatives: np.ndarray
) -> dict[str, float]:
    """``g·v_k`` against derivatives ``d_k`` measured along ``v_k``, on the same measures:
    how a reference's projections are cross-checked, never a row's judge (every row kind
    is judged on the full gradient, :func:`gradient_error`)."""
    g = np.asarray(g, dtype=float)
    V = np.asarray(directions, dtype=float)
    if g.shape != (V.shape[1],):
        return _compare(np.full(1, np.nan), np.ones(1))
    return _compare(V @ g, np.asarray(derivatives, dtype=float))


def suspect_note(worst: float | None, name: str, rel: float | None) -> str:
    """``suspect component k3[17]: 24 % off`` where the norm passes and one component is
    more than :data:`SUSPECT` off ("" otherwise)."""
    if worst is None or rel is None or not np.isfinite(worst) or rel > PASS_TOL:
        return ""
    if worst <= SUSPECT:
        return ""
    return f"suspect component {name}: {100 * worst:.0f} % off while the norm passes"


def within(error: float | None, reference_error: float | None, bound: float) -> bool:
    """Whether a row's gradient is judged within ``bound``: ``error ≤ bound`` and the
    reference resolves it, ``ε_ref ≤ bound/10`` (:data:`JUDGE_MARGIN`)."""
    if error is None or reference_error is None:
        return False
    if not (np.isfinite(error) and np.isfinite(reference_error)):
        return False
    return error <= bound and reference_error <= JUDGE_MARGIN * bound


def _tier(error: float) -> str:
    if not np.isfinite(error) or error > WARN_TOL:
        return "fail"
    return "pass" if error <= PASS_TOL else "warn"


def _needed(tier: str) -> float:
    """The largest reference error that can judge ``tier``: a tenth of its bound."""
    return JUDGE_MARGIN * (PASS_TOL if tier == "pass" else WARN_TOL)


def certain_failure(error: float, reference_error: float | None) -> bool:
    """Whether ``error`` is above the warn bound whatever the reference's own error: a
    non-finite error, or ``error − ε_ref > WARN_TOL`` (no estimate: only the former)."""
    if not np.isfinite(error):
        return True
    if reference_error is None or not np.isfinite(reference_error):
        return False
    return error - reference_error > WARN_TOL


def gradient_tier(error: float | None, reference_error: float | None) -> str:
    """``pass``/``warn``/``fail`` by the norm-wise error ``rel``, given only where the
    reference resolves that tier (its own error ``ε_ref`` at most a tenth of the tier's
    bound), else ``unjudged``; a certain failure (:func:`certain_failure`) is ``fail``
    whatever ``ε_ref``; no estimate (None) is ``unjudged`` (module doc). "" for no error."""
    if error is None:
        return ""
    if certain_failure(error, reference_error):
        return "fail"
    if reference_error is None or not np.isfinite(reference_error):
        return UNJUDGED
    tier = _tier(error)
    return tier if reference_error <= _needed(tier) else UNJUDGED


#: why a row without a reference error is unjudged (:func:`tier_note`)
NO_ESTIMATE = ("the reference gives no estimate of its own error, so no tier can be "
               "trusted. Fix: rebuild the reference (run again, or `sciml-bench rejudge "
               "FILE --refresh` for a stored file) so that it records `reference_error`")


def tier_note(error: float | None, reference_error: float | None) -> str:
    """Why a row is ``unjudged`` ("" when it is judged): its error, the tier it would
    get, and the reference error that tier needs (or that there is none)."""
    if error is None or gradient_tier(error, reference_error) != UNJUDGED:
        return ""
    tier = _tier(error)
    if reference_error is None or not np.isfinite(reference_error):
        return f"gradient error {error:.2e} would be {tier}, but {NO_ESTIMATE}"
    return (f"gradient error {error:.2e} would be {tier}, but the reference's own error "
            f"estimate {reference_error:.2e} is above {_needed(tier):.0e} (a tenth of the "
            f"{'pass' if tier == 'pass' else 'warn'} bound): the reference cannot resolve "
            "it. Fix: tighten [reference] rtol and atol in the problem file (or use fewer "
            "states)")  # fmt: skip
