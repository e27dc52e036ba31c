"""The checks of a library's output that every backend's checked part makes, after the
clock: that a solution is finite, and which members of an ensemble failed. (The shared
step bound is :mod:`~sciml_bench.backends.step_bound`'s.)
"""

from __future__ import annotations

import numpy as np

from sciml_bench.measure.status import SolverFailure, Status


def finite_solution(library: str, y: np.ndarray) -> np.ndarray:
    """``y`` itself when every value is finite, else a ``nonfinite`` failure naming
    ``library`` (the check every backend makes on a solution, after the clock)."""
    if not np.all(np.isfinite(y)):
        raise SolverFailure(Status.NONFINITE, f"{library}: non-finite values in the solution")
    return y


def failed_members(ok: np.ndarray) -> str:
    """``"3 of 16 members (first: member 5)"`` for a per-member success mask."""
    bad = np.flatnonzero(~np.asarray(ok, bool))
    return f"{bad.size} of {np.size(ok)} members (first: member {int(bad[0])})"
