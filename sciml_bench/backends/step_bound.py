"""The shared step bound: one check that every backend counting steps itself feeds its
own counts into.

A case's ``max_steps`` bounds the steps of the whole solve, from ``t0`` to the last save
time, accepted plus rejected where the library reports its rejected steps:

    n_accepted + n_rejected ≤ max_steps.

Libraries whose own bound is per call or per save interval (CVODES' ``mxstep``,
torchdiffeq's ``max_num_steps``), or which have none (diffsol, ``solve_ivp``), count
here: during the solve where the library lets a callback or loop stop it (torchdiffeq,
SciPy), after it otherwise (CVODES, diffsol). Diffrax, torchode and DifferentialEquations.jl
take ``max_steps`` as their own bound over the same whole-solve count, and report hitting
it with a result code.

:func:`steps_over` imports nothing from the suite: ``sciml-bench codegen`` prints its
source inside the self-contained programs of the backends whose loop calls it.
"""

from __future__ import annotations

from sciml_bench.measure.status import SolverFailure, Status


def steps_over(max_steps: int, accepted: int, rejected: int | None = None) -> str | None:
    """``None`` while ``accepted + rejected ≤ max_steps``; past the bound, what was counted
    against it: ``"7 accepted + 2 rejected steps over the whole solve > the shared
    max_steps = 8"`` (``rejected`` None: a library that reports no rejected steps)."""
    if accepted + (rejected or 0) <= max_steps:
        return None
    counted = f"{accepted} accepted" + ("" if rejected is None else f" + {rejected} rejected")
    return f"{counted} steps over the whole solve > the shared max_steps = {max_steps}"


def check_steps(
    library: str, max_steps: int, accepted: int, rejected: int | None = None, *,
    t_reached: float | None = None, note: str = "",
) -> None:  # fmt: skip
    """Raise a ``max_steps`` :class:`SolverFailure` when the counts are past the bound
    (:func:`steps_over`), its reason ``"library: <counts> (note)"``; ``t_reached`` is how
    far in t the solve got, where the library tells."""
    over = steps_over(max_steps, accepted, rejected)
    if over is not None:
        raise SolverFailure(Status.MAX_STEPS, f"{library}: {over}" + (f" ({note})" if note else ""),
                            t_reached)  # fmt: skip


def stopped_at_bound(
    library: str, max_steps: int, steps: int, t_reached: float, t_end: float
) -> SolverFailure:
    """A solve that a loop stopped after ``max_steps`` steps, before ``t_end`` (SciPy's
    loop, where the next step would go past the bound): how far in t it got."""
    return SolverFailure(
        Status.MAX_STEPS,
        f"{library}: {steps} steps reached t={t_reached:.6g} of {t_end:.6g}, the shared "
        f"max_steps = {max_steps}",
        float(t_reached),
    )
