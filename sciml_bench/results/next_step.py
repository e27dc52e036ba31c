"""When no row of a comparison qualifies: what would likely make one qualify, from the data.

A solver's gradient error shrinks roughly in proportion to its tolerance while the
tolerance is what limits it (the rule that the tolerance ladders of ``--tolerances``
show on this project's problems, not a law: a wrong adjoint or an unstable method does not
improve). So the best row's error ``e`` at ``rtol`` suggests the tolerance at which it
would reach the bound ``E`` the verdict judges against: ``rtol * E / e``, taken one decade
tighter than that figure's decade so that the error lands under the bound, not on it, and
never tighter than :data:`TIGHTEST` (past it, float64 solvers stop improving: a tighter
tolerance alone will likely not do). A row whose error is already within ``E`` but which
the reference cannot judge (its own error estimate too large) needs a tighter reference
instead. The sentence says "likely": it is an extrapolation from one point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sciml_bench.measure.metrics import JUDGE_MARGIN, PASS_TOL

#: the tightest tolerance ever suggested: float64 solvers stop improving near it
TIGHTEST = 1e-12


def _number(x: Any) -> float | None:
    if isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x):
        return float(x)
    return None


def _sci(x: float) -> str:
    """``1e-06``, ``1.5e-04``: as the table prints a tolerance."""
    mant, exp = f"{float(x):.2e}".split("e")
    return f"{mant.rstrip('0').rstrip('.')}e{exp}"


def decade(k: int) -> str:
    """``1e-8``: a power of ten as a user types it on the command line."""
    return f"1e{k}"


def suggested_exponent(error: float, rtol: float, bound: float) -> int:
    """The decade ``k`` (rtol ``10**k``) at which ``error``, measured at ``rtol`` and
    shrinking in proportion to it, would be under ``bound``: one decade below the decade
    of ``rtol * bound / error`` (1.5e-4 at 1e-6 against 1e-4 needs 6.7e-7: ``k = -7``;
    exactly 1e-7 would land on the bound: ``k = -8``)."""
    need = rtol * bound / error
    return math.ceil(math.log10(need) - 1e-9) - 1


def _scored(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``ok`` rows that computed a gradient scored with a finite, positive error, at a
    known tolerance."""
    out = []
    for r in rows:
        e, tol = _number(r.get("gradient_error")), _number(r.get("rtol"))
        if r.get("status") == "ok" and r.get("gradient_method") != "none" and e and tol and e > 0:
            out.append(r)
    return out


def suggest(rows: Sequence[dict[str, Any]], bound: float = PASS_TOL) -> str | None:
    """What would likely make a row of ``rows`` (one comparison, none qualifying) reach a
    gradient error of ``bound``; None where the rows give nothing to go on (no row
    finished, none was scored)."""
    scored = _scored(rows)
    if not scored:
        return None
    best = min(scored, key=lambda r: float(r["gradient_error"]))
    e, tol = float(best["gradient_error"]), float(best["rtol"])
    if e <= bound:  # within the bound, yet not judged: the reference limits the judgement
        ref = _number(best.get("reference_error"))
        if ref is None or ref <= JUDGE_MARGIN * bound:
            return None
        return (f"the best row's gradient error {_sci(e)} is within {_sci(bound)}, but the "
                f"reference's own error estimate {_sci(ref)} is too large to judge it at that "
                "bound: set a tighter `rtol` under `[reference]` in the problem file")  # fmt: skip
    reach = f"the best row reaches a gradient error of {_sci(e)} at rtol {_sci(tol)}"
    k = suggested_exponent(e, tol, bound)
    if 10.0**k < TIGHTEST * (1 - 1e-9):
        return (f"{reach}; an error proportional to rtol would need rtol "
                f"{tol * bound / e:.0e}, tighter than {TIGHTEST:g}: a tighter tolerance "
                "alone will likely not do; try another solver or gradient method (`sciml-bench "
                "list` shows them)")  # fmt: skip
    target = "pass" if bound == PASS_TOL else f"reach {_sci(bound)}"
    return (f"{reach}; if the error shrinks in proportion to rtol, a row would likely "
            f"{target} at rtol {decade(k)}: rerun with `--tolerances {decade(k)}`")
