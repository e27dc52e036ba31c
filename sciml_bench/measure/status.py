"""The failure taxonomy: every case ends with exactly one status.

A failure is a result (DESIGN.md §1.5), so statuses are data, stored as
strings in the results file and compared as strings when reading it.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """How a case ended. ``ok`` is the only status whose timings are comparable."""

    OK = "ok"
    MAX_STEPS = "max_steps"
    DT_UNDERFLOW = "dt_underflow"
    NONFINITE = "nonfinite"
    SOLVER_FAILURE = "solver_failure"
    BUDGET_EXCEEDED = "budget_exceeded"
    CRASHED = "crashed"
    UNAVAILABLE = "unavailable"
    ERROR = "error"
    #: the worker ran out of memory (an ensemble rung too large for this machine)
    OUT_OF_MEMORY = "out_of_memory"
    #: not run: a smaller rung of the same ensemble ladder already failed
    SKIPPED = "skipped"

    @property
    def is_solver_failure(self) -> bool:
        return self in (
            Status.MAX_STEPS,
            Status.DT_UNDERFLOW,
            Status.NONFINITE,
            Status.SOLVER_FAILURE,
        )


class SolverFailure(Exception):
    """Raised by a backend when its library reports an unsuccessful solve.

    ``t_reached`` is how far the integration got, when the library says so.
    """

    def __init__(self, status: Status, reason: str, t_reached: float | None = None):
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.t_reached = t_reached


def classify_message(message: str) -> Status:
    """Map a library's failure text onto a status (torchdiffeq has no codes)."""
    m = message.lower()
    # SUNDIALS CVODES' flags (through CasADi): CV_TOO_MUCH_WORK is its step bound
    # (mxstep); CV_REPTD_RHSFUNC_ERR / CV_RHSFUNC_FAIL follow an RHS that CasADi failed
    # for a NaN or Inf in it
    if "too_much_work" in m:
        return Status.MAX_STEPS
    if "rhsfunc" in m:
        return Status.NONFINITE
    # AMICI: "Reached maximum number of steps 10000 before reaching tout at t=..."
    if ("max_num_steps" in m or "max steps" in m or "maxiters" in m or "max_steps" in m
            or "maximum number of steps" in m):
        return Status.MAX_STEPS
    # scipy: "Required step size is less than spacing between numbers."
    if (
        "underflow" in m
        or "dtmin" in m
        or "step size" in m
        and ("small" in m or "less than spacing" in m)
    ):
        return Status.DT_UNDERFLOW
    if "non-finite" in m or "nan" in m or "inf" in m.split():
        return Status.NONFINITE
    return Status.SOLVER_FAILURE
