"""The reference gradient: every component, at two tolerances, with its own error.

One judge at every size. A row's gradient is judged on every component against a full
reference gradient, never on a few projections of it:

- **forward sensitivities** (:mod:`~sciml_bench.problem.sensitivity`) while the ``n × P``
  sensitivity system is small (:data:`FORWARD_MAX_UNKNOWNS`), or the parameters few
  (:data:`FORWARD_MAX_PARAMS`, the ``P`` columns of an array problem's staggered system);
- a **quadrature adjoint** (:mod:`~sciml_bench.problem.adjoint`) above that: one forward
  and one backward solve whatever P, so its cost does not grow with P as forward
  sensitivities' does (measured, and how closely the two agree: docs/measurements.md,
  "What a row claims about its reference", "The reference gradient is full at every
  size").

Each runs twice, at the reference's ``rtol`` and at ``10 rtol`` (atol alike); the tighter
is the reference, and ``‖g_tight − g_loose‖₂ / ‖g_tight‖₂`` on the judged
components (``θ_i ∂L/∂θ_i`` for log-space parameters) is its error estimate: the looser
solve's error, which bounds the tighter one's where the error falls with the tolerance.
Should one method fail, the other is tried before the reference gives up.

The measures (:mod:`~sciml_bench.problem.gradient_measures`) are the ones every row is
judged on (:mod:`sciml_bench.measure.metrics`).

:func:`adjoint_check` is the independent cross-check of a forward-sensitivity reference
where no difference quotient is affordable (above ``CS_MAX_STATES`` states, the FD and
complex-step checks' bound in :mod:`~sciml_bench.problem.reference`): the quadrature
adjoint at the reference's own tight settings, compared on the tier's norm-wise measure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sciml_bench.problem.adjoint import AdjointError, adjoint_gradient
from sciml_bench.problem.gradient_measures import judged_scale, norm_error
from sciml_bench.problem.sensitivity import SensitivityError, array_gradient, scalar_gradient
from sciml_bench.problem.spec import Problem

#: forward sensitivities up to this many unknowns ``n·P`` (a scalar stiff problem's
#: augmented Jacobian is dense: 5,000² entries), else the adjoint
FORWARD_MAX_UNKNOWNS = 5_000
#: ...or up to this many parameters on an array problem (``P`` columns of ``n`` states each,
#: the 2-D Brusselator's 3 at 32,768 states)
FORWARD_MAX_PARAMS = 16
#: the tightest rtol the reference's gradient is asked for (SciPy's BDF and Radau stop
#: with "Required step size is less than spacing between numbers" much below it)
RTOL_FLOOR = 1e-12
@dataclass
class FullGradient:
    """The reference's full gradient (natural units), its error estimate on the tier's
    measure, and what ran; ``missing`` says why there is none."""

    g: np.ndarray
    error: float | None = None
    text: str = ""
    missing: str = ""
    #: "forward sensitivities" or "adjoint"
    kind: str = ""
    #: the tight solve's ``(method, rtol, atol)``: what a cross-check at the same
    #: tolerance runs (:func:`adjoint_check`); None without a gradient
    settings: tuple[str, float, float] | None = None


def uses_forward(problem: Problem) -> bool:
    """Forward sensitivities where their system is small, else the adjoint (module doc)."""
    if problem.n_state * problem.n_params <= FORWARD_MAX_UNKNOWNS:
        return True
    return problem.array is not None and problem.n_params <= FORWARD_MAX_PARAMS


def _one(
    problem: Problem, loss: tuple[np.ndarray, ...], rtol: float, atol: float, method: str,
    forward: bool,
) -> np.ndarray:
    """The natural-units gradient by one method at one tolerance."""
    if not forward:
        return adjoint_gradient(problem, loss, rtol, atol, method)[1]  # type: ignore[arg-type]
    if problem.array is not None:
        return array_gradient(problem, loss, rtol, atol, method)[1]  # type: ignore[arg-type]
    return scalar_gradient(problem, loss, rtol, atol, method)[1]  # type: ignore[arg-type]


#: the tolerance factors :func:`full_gradient` tries for each method, in order: the
#: reference's rtol, then 100x looser (a sensitivity system can need coarser control than
#: the solution alone: Hodgkin-Huxley's spikes at rtol 1e-12)
LOOSEN = (1.0, 100.0)


def full_gradient(
    problem: Problem, loss: tuple[np.ndarray, np.ndarray, np.ndarray], rtol: float,
    atol: float, method: str,
) -> FullGradient:
    """The reference gradient at two tolerances (module doc), by the method
    :func:`uses_forward` picks, then the other one, each at ``rtol`` and then 100x looser
    (:data:`LOOSEN`), until one succeeds; ``missing`` lists every failure."""
    # a problem not marked stiff may be (slow-stiff.toml: DOP853 would take 3e6 steps):
    # LSODA switches to BDF where it is, and is Adams (no Jacobian) where it is not
    solve = method if problem.stiff else "LSODA"
    tried: list[str] = []
    for factor in LOOSEN:
        for forward in (uses_forward(problem), not uses_forward(problem)):
            tight = max(rtol * factor, RTOL_FLOOR)
            kind = "forward sensitivities" if forward else "adjoint"
            try:
                g_tight, g_loose = (_one(problem, loss, r, atol * r / rtol, solve, forward)
                                    for r in (tight, 10 * tight))  # fmt: skip
            except (SensitivityError, AdjointError, ArithmeticError, ValueError,
                    MemoryError) as e:  # fmt: skip
                tried.append(f"{kind} at rtol {tight:g}: {' '.join(str(e).split())[:160]}")
                continue
            if not (np.all(np.isfinite(g_tight)) and np.all(np.isfinite(g_loose))):
                tried.append(f"{kind} at rtol {tight:g}: a non-finite gradient")
                continue
            return _made(problem, kind, solve, tight, atol * tight / rtol, g_tight, g_loose)
    return FullGradient(np.zeros(0), missing="; ".join(tried))


def _made(
    problem: Problem, kind: str, method: str, rtol: float, atol: float, g_tight: np.ndarray,
    g_loose: np.ndarray,
) -> FullGradient:
    """The :class:`FullGradient` of a successful pair of solves."""
    scale = judged_scale(problem.theta0, problem.log_params)
    error = norm_error(g_loose * scale, g_tight * scale)
    text = _text(kind, method, rtol, atol, problem.array is not None)
    return FullGradient(g_tight, error, text, kind=kind, settings=(method, rtol, atol))


def _text(kind: str, method: str, rtol: float, atol: float, sparse: bool) -> str:
    jac = "" if method == "DOP853" else (" with exact sparse Jacobian" if sparse
                                         else " with exact Jacobian")  # fmt: skip
    how = ("(S' = J S + df/dtheta)" if kind == "forward sensitivities"
           else "(quadrature adjoint: lambda' = -J^T lambda backward, integral of "
           "df/dtheta^T lambda by Gauss-Legendre on its steps)")  # fmt: skip
    return (f"{kind} {how} by scipy.solve_ivp {method}{jac} at rtol {rtol:g}, atol {atol:g}, "
            f"checked against 10x both")


def adjoint_check(
    problem: Problem, loss: tuple[np.ndarray, np.ndarray, np.ndarray], g: np.ndarray,
    settings: tuple[str, float, float],
) -> float:
    """How far the quadrature adjoint (:mod:`~sciml_bench.problem.adjoint`), solved at the
    reference's tight ``settings`` ``(method, rtol, atol)``, is from the reference gradient
    ``g``: ``‖s ⊙ (g_adj − g)‖₂ / ‖s ⊙ g‖₂`` with ``s`` :func:`judged_scale` (the tier's
    measure on ``θ_i ∂L/∂θ_i`` for log-space parameters).

    Independent of the forward sensitivities' error control: the adjoint integrates
    ``λ' = −Jᵀλ`` backward and ``∫ Fᵀλ dt`` by quadrature, so a bias the sensitivity system
    carries at both of its tolerances (which the tolerance pair cannot see) shows here. Not
    independent of the generated ``J = ∂f/∂y`` and ``F = ∂f/∂θ``, which both read; the
    solution reference is checked against those by the row solvers' agreement. Its cost is
    one forward and one backward solve of ``n`` states, whatever ``P``."""
    method, rtol, atol = settings
    _, g_adj = adjoint_gradient(problem, loss, rtol, atol, method)
    scale = judged_scale(problem.theta0, problem.log_params)
    return norm_error(np.asarray(g_adj) * scale, np.asarray(g) * scale)


def directional_agreement(
    g: np.ndarray, directions: list[np.ndarray], derivatives: np.ndarray | list[float]
) -> float:
    """How far the full gradient's projections ``g·w_k`` are from derivatives measured
    along the ``w_k`` independently (FD or directional sensitivities): norm-wise over the
    projections. A cross-check of the reference, never a row's judge."""
    V = np.asarray(directions, float)
    return norm_error(V @ np.asarray(g, float), np.asarray(derivatives, float))


def check_text(kind: str, agreement: float | None, why_not: str) -> str:
    """The cross-check's part of a reference's ``method`` string."""
    if agreement is None:
        return f"; no cross-check ({why_not})"
    return f"; {kind} cross-check: agrees to {agreement:.2g} (norm-wise relative)"

