"""The measure every solution is judged on: NumPy only, shared by the rows
(:mod:`sciml_bench.measure.metrics`) and the reference's own cross-check of its solution
(:mod:`sciml_bench.problem.reference`).

Per state ``j`` over the save points, with the state's scale

    s_j = max(max_i |ref_ij|, floor),    floor = atol / rtol (the problem's),

the relative l2 error is ``‖(y − ref) / s‖ / ‖ref / s‖`` (and the same at ``t_end``). The
floor is where a solver's own error control turns absolute (its weight is ``atol +
rtol |y|``): a state that never rises above it is held to ``atol`` by every solver, so its
round-off (a species at 1e-40 in the reference, 1e-12 in a library) cannot dominate the
measure as it did without one (on Isensee_JCB2018's ``AC_Fsk``: docs/measurements.md, "How
it measures (and why you can trust it)", "Correctness before speed"). ``worst_state``
names the state whose error is largest.
"""

from __future__ import annotations

import numpy as np


def solution_error(y: np.ndarray, ref: np.ndarray, floor: float = 0.0) -> dict[str, float]:
    """``rel_l2``, ``rel_final``, ``final`` (DiffEqDevTools' mean absolute error at
    ``t_end``), ``l2`` (its RMS over the save points) and ``worst_state`` (the index of the
    state with the largest scaled error; -1 where not finite) of ``y`` against ``ref``
    (``n_save × n_state``), each state scaled as the module says."""
    y = np.asarray(y, dtype=float)
    ref = np.asarray(ref, dtype=float)
    if y.shape != ref.shape or not np.all(np.isfinite(y)) or y.ndim != 2:
        nan = float("nan")
        return {"rel_l2": nan, "rel_final": nan, "final": nan, "l2": nan, "worst_state": -1}
    s = np.maximum(np.max(np.abs(ref), axis=0), floor)
    s[s == 0] = 1.0
    d = (y - ref) / s
    r = ref / s
    per_state = np.linalg.norm(d, axis=0)
    return {
        "rel_l2": _ratio(np.linalg.norm(d), np.linalg.norm(r)),
        "rel_final": _ratio(np.linalg.norm(d[-1]), np.linalg.norm(r[-1])),
        "final": float(np.mean(np.abs(y[-1] - ref[-1]))),
        "l2": float(np.sqrt(np.mean((y - ref) ** 2))),
        "worst_state": int(np.argmax(per_state)) if per_state.size else -1,
    }


def _ratio(a: float, b: float) -> float:
    """``a / b``; 0 for 0/0 (a zero solution matched exactly), inf for a/0."""
    if b == 0:
        return 0.0 if a == 0 else float("inf")
    return float(a / b)


def floor_of(atol: float, rtol: float) -> float:
    """The scale floor of a problem with tolerances ``atol`` and ``rtol``: ``atol / rtol``."""
    return float(atol) / float(rtol) if rtol > 0 else 0.0
