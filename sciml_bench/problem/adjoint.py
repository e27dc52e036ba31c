"""The reference gradient by a quadrature adjoint, solved by SciPy: for problems whose
forward sensitivities (``n × P`` unknowns) would not fit.

For ``y' = f(t, y, θ)``, ``y(t0) = y0(θ)``, and the loss
``L = Σ_i W_i·(y_i − O_i)² + C_i·y_i`` over the save points ``t_1 < … < t_N`` with
``d_i = ∂L/∂y_i = 2 W_i ⊙ (y_i − O_i) + C_i``, the adjoint ``λ(t)`` solves, backward,

    λ' = −J(t, y(t))ᵀ λ,    λ(t_N) = d_N,    λ(t_i⁻) = λ(t_i⁺) + d_i,    J = ∂f/∂y,

and the gradient is the integral

    ∂L/∂θ = ∫_{t0}^{t_N} F(t, y(t))ᵀ λ(t) dt + λ(t0)ᵀ ∂y0/∂θ,    F = ∂f/∂θ,

(the last term where the start depends on the parameters, :mod:`sciml_bench.problem.initial`;
``λ(t0)`` includes the jump of a save point at ``t0``),

SciMLSensitivity's ``QuadratureAdjoint``. ``y(t)`` is the forward solve's dense output, ``λ``
the backward solve's; the integral is Gauss–Legendre with :data:`GAUSS_NODES` nodes on
every step the backward solver took, so its error is the two interpolants' (of the order of
the solves' local error), never a difference quotient's. ``J`` and ``F`` are the exact
generated ones (dense for a scalar problem, sparse for an array problem), so the cost is
one forward and one backward solve of ``n`` states plus ``P`` quadratures, whatever P: at
P = 3,000 on 3,000 ROBER states, where forward sensitivities would be 9 million unknowns.

Written here, never taken from a contender: the reference judges the libraries' adjoints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sciml_bench.problem import codegen
from sciml_bench.problem.reference_solvers import ode_solver
from sciml_bench.problem.spec import Problem

#: Gauss–Legendre nodes per backward step: exact for polynomials of degree 9, above the
#: order (≤ 5) of BDF's and DOP853's interpolants' error terms
GAUSS_NODES = 5


class AdjointError(RuntimeError):
    """The forward or the backward solve of the adjoint reference failed."""


@dataclass
class _Model:
    """The problem's generated NumPy ``rhs``, ``J`` and ``F`` (dense or sparse)."""

    rhs: Callable[..., Any]
    jac: Callable[..., Any]
    jac_p: Callable[..., Any]
    #: ``y0(θ)`` and ``∂y0/∂θ`` where the start depends on θ, else None
    y0: Callable[..., Any] | None = None
    y0_jac: Callable[..., Any] | None = None

    @classmethod
    def of(cls, problem: Problem) -> _Model:
        ns = codegen.load_python(codegen.generate(problem, "numpy"))
        if problem.array is not None:
            return cls(ns["rhs"], ns["jac_sparse"], ns["jac_p_sparse"])
        jp = codegen.load_python(codegen.param_jacobian_source(problem))["jac_p"]
        return cls(ns["rhs"], ns["jac"], jp, ns.get("y0"), ns.get("y0_jac"))

    def start(self, problem: Problem, theta: np.ndarray) -> np.ndarray:
        """The initial state at ``theta``."""
        return np.asarray(problem.y0, float) if self.y0 is None else self.y0(theta)


def adjoint_gradient(
    problem: Problem, loss: tuple[np.ndarray, np.ndarray, np.ndarray], rtol: float,
    atol: float, method: str,
) -> tuple[float, np.ndarray]:
    """``L`` and ``∂L/∂θ`` (natural units) by the quadrature adjoint above, both solves at
    ``rtol``; ``atol`` for the states, and for ``λ`` the same fraction of ``max |d_i|``
    (``λ``'s scale is the loss's sensitivity to the state, not the state's)."""
    from scipy.integrate import solve_ivp

    if problem.events:  # λ would jump at each event by the transpose of S's jump
        raise AdjointError(f"adjoint reference: {problem.name} has events, which this "
                           "adjoint does not cross (forward sensitivities do)")  # fmt: skip
    model = _Model.of(problem)
    theta = np.asarray(problem.theta0, dtype=float)
    t_save = np.asarray(problem.t_save, dtype=float)
    kw: dict[str, Any] = {"method": ode_solver(method), "rtol": rtol}
    if method != "DOP853":
        kw["jac"] = lambda t, y: model.jac(t, y, theta)
    fwd = solve_ivp(lambda t, y: model.rhs(t, y, theta), problem.t_span,
                    model.start(problem, theta), t_eval=t_save, dense_output=True,
                    atol=atol, **kw)  # fmt: skip
    if not fwd.success:
        raise AdjointError(f"adjoint reference, forward solve ({method}): {fwd.message}")
    W, O, C = loss
    y = fwd.y.T
    d = 2.0 * W * (y - O) + C
    value = float(np.sum(W * (y - O) ** 2) + np.sum(C * y))
    lam_atol = max(float(np.max(np.abs(d))), 1e-300) * atol / max(
        1.0, float(np.max(np.abs(problem.y0))))
    grad, lam0 = _backward(model, theta, fwd.sol, d, t_save, problem.t_span[0], method, rtol,
                           lam_atol)  # fmt: skip
    if model.y0_jac is not None:
        grad = grad + model.y0_jac(theta).T @ lam0
    return value, grad


def _backward(
    model: _Model, theta: np.ndarray, ysol: Callable[[float], np.ndarray], d: np.ndarray,
    t_save: np.ndarray, t0: float, method: str, rtol: float, atol: float,
) -> tuple[np.ndarray, np.ndarray]:
    """``∫ Fᵀλ dt`` from ``t_N`` back to ``t0``, one backward solve per interval between
    save points, ``λ`` jumping by ``d_i`` at each; and ``λ(t0)``.

    Each interval ``[lo, hi]`` is solved in its own reversed clock ``s = hi − t`` (``dλ/ds =
    Jᵀλ``, from ``s = 0``): a jump starts a fast transient in ``λ`` (ROBER's ``y2`` relaxes
    in 1e-4 s), which at ``t = 1e5`` needs steps finer than the spacing of floats there
    (SciPy's BDF stopped with "Required step size is less than spacing between numbers");
    near ``s = 0`` the floats are dense."""
    from scipy.integrate import solve_ivp

    stops = [*t_save[::-1], t0]
    lam = np.zeros(d.shape[1])
    grad = np.zeros(theta.size)
    for i, (hi, lo) in enumerate(zip(stops[:-1], stops[1:], strict=True)):
        lam = lam + d[len(t_save) - 1 - i]
        if hi <= lo:  # a save point at t0: S(t0) = 0, nothing to integrate
            continue
        fun, kw = _reversed(model, theta, ysol, hi, method)
        seg = solve_ivp(fun, (0.0, hi - lo), lam, rtol=rtol, atol=atol, dense_output=True,
                        **kw)  # fmt: skip
        if not seg.success:
            raise AdjointError(f"adjoint reference, backward solve ({method}) on "
                               f"[{lo:g}, {hi:g}]: {seg.message}")  # fmt: skip
        lsol = seg.sol
        grad += _quadrature(model, theta, ysol, lambda t, f=lsol, h=hi: f(h - t), hi - seg.t)
        lam = seg.y[:, -1]
    return grad, lam


def _reversed(
    model: _Model, theta: np.ndarray, ysol: Callable[[float], np.ndarray], hi: float,
    method: str,
) -> tuple[Callable[..., Any], dict[str, Any]]:
    """``dλ/ds = J(hi − s)ᵀ λ`` as ``solve_ivp``'s ``fun``, and its keywords: the method
    and, for an implicit one, the Jacobian ``J(hi − s)ᵀ`` (sparse where ``J`` is)."""

    def fun(s: float, lm: np.ndarray) -> np.ndarray:
        t = hi - s
        return model.jac(t, ysol(t), theta).T @ lm

    kw: dict[str, Any] = {"method": ode_solver(method)}
    if method != "DOP853":
        kw["jac"] = lambda s, lm: _transpose(model.jac(hi - s, ysol(hi - s), theta))
    return fun, kw


def _transpose(J: Any) -> Any:
    """``Jᵀ``, kept sparse (CSC, as SciPy's sparse LU wants) where ``J`` is."""
    if hasattr(J, "tocsc"):
        return J.T.tocsc()
    return np.ascontiguousarray(np.asarray(J).T)


#: the most state values (states x nodes) :func:`_quadrature` reads from a dense output at once
_READ_BLOCK = 4_000_000


def _quadrature(
    model: _Model, theta: np.ndarray, ysol: Callable[[Any], np.ndarray],
    lsol: Callable[[Any], np.ndarray], ts: np.ndarray,
) -> np.ndarray:
    """``Σ_steps Σ_k w_k F(t_k)ᵀ λ(t_k)`` over the backward solve's steps ``ts``
    (descending), Gauss–Legendre on each. Both dense outputs are read at many nodes per call,
    in blocks of at most :data:`_READ_BLOCK` values, not once per node (each call searches
    the solution's steps and builds its interpolant: docs/testing.md has the time saved)."""
    x, w = np.polynomial.legendre.leggauss(GAUSS_NODES)
    a, b = np.asarray(ts[1:]), np.asarray(ts[:-1])  # each step [a, b], a < b
    half = 0.5 * (b - a)
    t = (0.5 * (b + a)[:, None] + half[:, None] * x[None, :]).ravel()
    weight = (half[:, None] * w[None, :]).ravel()
    out = np.zeros(theta.size)
    if t.size == 0:
        return out
    n = np.asarray(ysol(t[:1])).shape[0]
    block = max(1, _READ_BLOCK // n)  # nodes read at once: at 30,000 states, 133
    for lo in range(0, t.size, block):
        ts_k = t[lo : lo + block]
        Y, L = np.asarray(ysol(ts_k)), np.asarray(lsol(ts_k))  # (n, nodes)
        for k, tk in enumerate(ts_k):
            Fk = model.jac_p(tk, Y[:, k], theta)
            out += weight[lo + k] * np.asarray(Fk.T @ L[:, k]).ravel()
    return out
