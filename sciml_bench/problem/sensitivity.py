"""The reference gradient by forward sensitivities, solved by SciPy: a scalar problem's
(:func:`scalar_gradient`), an array problem's (:func:`array_gradient`, staggered, sparse),
and training's reference curve, whose hundreds of Adam iterations need a whole gradient
per solve.

Forward sensitivities give the whole gradient from one solve, with no truncation error of
a difference quotient (:mod:`sciml_bench.problem.reference_gradient` picks them while their
system is small, else the adjoint of :mod:`.adjoint`). For ``y' = f(t, y, θ)`` with
``y(t0) = y0(θ)``, the sensitivities ``S = ∂y/∂θ`` (``n × P``) obey

    S' = J S + F,   S(t0) = ∂y0/∂θ,   J = ∂f/∂y (exact, generated),  F = ∂f/∂θ (exact,
    generated: :func:`~sciml_bench.problem.codegen.param_jacobian_source`)

(``S(t0) = 0`` where the start is a number; the generated ``y0_jac`` where it is an
expression of the parameters, :mod:`sciml_bench.problem.initial`), and at an event
``S`` jumps to ``G_y S + G_θ + (G_y f⁻ − f⁺) ∂τ/∂θ`` (:mod:`sciml_bench.problem.events`;
the solve runs in pieces between events, :mod:`sciml_bench.problem.event_segments`)

and the loss ``L = Σ_i W_i·(y_i − O_i)² + C_i·y_i`` over the save points has

    ∂L/∂θ = Σ_i (2 W_i ⊙ (y_i − O_i) + C_i)ᵀ S_i.

Columns of positive named parameters are solved scaled, ``S̃_j = θ_j S_j`` (sensitivities
to ``log θ_j``), so that a rate of 3e7 and one of 0.04 share one error control. ``y`` and
``S̃`` are one system under one error norm at ``rtol`` (default :data:`RTOL`): DOP853 for a
non-stiff problem; for a stiff one the reference's implicit method (BDF, or Radau) with
the augmented system's Jacobian ``[[J, 0], [∂(J S̃ + F̃)/∂y, J ⊗ I]]``, whose lower-left
block is taken by complex step in ``y`` (it only steers Newton's iteration; the error
control decides the accuracy). Exact up to ``rtol``: no truncation error of a difference
quotient, one solve per gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sciml_bench.problem import codegen
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.problem.event_segments import (
    Stop,
    TooManyEvents,
    ivp_stop,
    outside_span,
    points_with_end,
    root_events,
    solve_with_events,
)
from sciml_bench.problem.reference_solvers import ode_solver
from sciml_bench.problem.spec import Problem

RTOL = 1e-10
#: the complex step of the augmented Jacobian's coupling block
CS_STEP = 1e-30


class SensitivityError(RuntimeError):
    """The sensitivity solve failed at these parameters."""


@dataclass
class Sensitivities:
    """The loss and its gradient by forward sensitivities for one problem.

    Built once (code generation), then :meth:`loss_and_grad` at any θ: one solve each.
    """

    problem: Problem
    compiled: CompiledProblem
    rtol: float = RTOL

    def __post_init__(self) -> None:
        p = self.problem
        ns = codegen.load_python(codegen.generate(p, "numpy"))
        self.rhs: Callable[..., Any] = ns["rhs"]
        self.jac: Callable[..., Any] = ns["jac"]
        self.jac_p: Callable[..., Any] = codegen.load_python(codegen.param_jacobian_source(p))["jac_p"]
        #: y0(θ) and ∂y0/∂θ where the start depends on θ (problem/initial.py), else None
        self.y0_of: Callable[..., Any] | None = ns.get("y0")
        self.y0_jac: Callable[..., Any] | None = ns.get("y0_jac")
        #: the generated events (:mod:`sciml_bench.problem.codegen.events`), else None
        self.events: dict[str, Any] | None = ns if "event_times" in ns else None
        self.method = "DOP853" if not p.stiff else str(p.reference.get("method", "BDF"))
        scale = max(1.0, float(np.max(np.abs(p.y0))))
        self.atol = float(p.reference.get("atol", min(p.atol, self.rtol) * 1e-4 * scale))

    @property
    def description(self) -> str:
        return (f"forward sensitivities (S' = J S + df/dtheta, exact generated Jacobians) by "
                f"scipy.solve_ivp {self.method}, rtol={self.rtol:g}, atol={self.atol:g}")  # fmt: skip

    def loss_and_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """``L(θ)`` and ``∂L/∂θ`` (natural units)."""
        cp = self.compiled
        theta = np.asarray(theta, dtype=np.float64)
        n, P = cp.n_state, cp.n_params
        scale = np.where(cp.log_params & (theta > 0), theta, 1.0)
        y, S = self._solve(theta, scale)
        d = 2.0 * cp.loss_W * (y - cp.loss_O) + cp.loss_C  # ∂L/∂y at each save point
        loss = float(np.sum(cp.loss_W * (y - cp.loss_O) ** 2) + np.sum(cp.loss_C * y))
        g = np.einsum("in,inp->p", d, S.reshape(len(cp.t_save), n, P))
        return loss, g / scale

    def _solve(self, theta: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``y`` (``n_save × n``) and ``S̃`` (``n_save × nP``) at the save points."""
        from scipy.integrate import solve_ivp

        cp = self.compiled
        n, P = cp.n_state, cp.n_params
        rhs, jac, jac_p = self.rhs, self.jac, self.jac_p

        def f(t: float, z: np.ndarray) -> np.ndarray:
            y, S = z[:n], z[n:].reshape(n, P)
            dS = jac(t, y, theta) @ S + jac_p(t, y, theta) * scale
            return np.concatenate([rhs(t, y, theta), dS.ravel()])

        z0 = np.concatenate([cp.y0, np.zeros(n * P)])
        if self.y0_of is not None and self.y0_jac is not None:
            z0 = np.concatenate([self.y0_of(theta), (self.y0_jac(theta) * scale).ravel()])
        kw: dict[str, Any] = {"method": ode_solver(self.method), "rtol": self.rtol,
                              "atol": self.atol}  # fmt: skip
        if self.method != "DOP853":
            kw["jac"] = lambda t, z: self._augmented_jacobian(t, z, theta, scale)
        t_save = np.asarray(cp.t_save, dtype=float)
        roots = [] if self.events is None else root_events(self.events, theta, n)

        def piece(a: float, b: float, save: np.ndarray, z: np.ndarray) -> Stop:
            sol = solve_ivp(f, (a, b), z, **kw, t_eval=points_with_end(t_save[save], b),
                            events=roots or None)  # fmt: skip
            if not sol.success:
                raise SensitivityError(f"sensitivity solve ({self.method}) failed for "
                                       f"{cp.name!r}: {sol.message}")  # fmt: skip
            return ivp_stop(sol, save.size, roots)

        times = np.zeros(0) if self.events is None else self.events["event_times"](theta)
        why = outside_span(times[~np.isnan(times)], cp.t_span)
        if why:
            raise SensitivityError(f"{cp.name!r}: {why}")
        try:
            z = solve_with_events(cp.t_span, t_save, times, z0, piece,
                                  lambda k, t, z: self._jump(k, t, z, theta, scale))  # fmt: skip
        except TooManyEvents as e:
            raise SensitivityError(f"{cp.name!r}: {e}") from e
        return z[:, :n], z[:, n:]

    def _jump(
        self, k: int, t: float, z: np.ndarray, theta: np.ndarray, scale: np.ndarray
    ) -> np.ndarray:
        """``(y, S̃)`` across event ``k`` at ``t``: ``y⁺ = g(y⁻)`` and
        ``S̃⁺ = G_y S̃⁻ + G_θ diag(scale) + (G_y f⁻ − f⁺) ∂τ/∂θ̃`` (:mod:`.events`), with
        ``∂τ/∂θ̃`` the time's own derivative, or a root's by the implicit function theorem,
        ``−(h_y S̃⁻ + h_θ diag(scale)) / (h_y f⁻ + h_t)``."""
        assert self.events is not None
        n, P = self.compiled.n_state, self.compiled.n_params
        y, S = z[:n], z[n:].reshape(n, P)
        y_after = self.events["EVENTS"][k](y, theta)
        Gy, Gp = self.events["EVENT_JACS"][k](y, theta)
        f_before = self.rhs(t, y, theta)
        root = self.events.get("EVENT_ROOT_JACS", {}).get(k)
        if root is None:
            dtau = self.events["event_times_jac"](theta)[k] * scale
        else:
            h_t, h_y, h_p = root(t, y, theta)
            dtau = -(h_y @ S + h_p * scale) / (h_y @ f_before + h_t)
        jump = Gp * scale + np.outer(Gy @ f_before - self.rhs(t, y_after, theta), dtau)
        return np.concatenate([y_after, (Gy @ S + jump).ravel()])

    def _augmented_jacobian(
        self, t: float, z: np.ndarray, theta: np.ndarray, scale: np.ndarray
    ) -> np.ndarray:
        """``[[J, 0], [∂(J S̃ + F̃)/∂y, J ⊗ I_P]]`` for ``z = (y, S̃ row-major)``."""
        n, P = self.compiled.n_state, self.compiled.n_params
        y, S = z[:n], z[n:].reshape(n, P)
        J = self.jac(t, y, theta)
        out = np.zeros((n + n * P, n + n * P))
        out[:n, :n] = J
        out[n:, n:] = np.kron(J, np.eye(P))
        for m in range(n):
            yc = y.astype(complex)
            yc[m] += 1j * CS_STEP
            dS = self.jac(t, yc, theta) @ S + self.jac_p(t, yc, theta) * scale
            out[n:, m] = np.imag(dS).ravel() / CS_STEP
        return out



def array_gradient(
    problem: Problem, loss: tuple[np.ndarray, np.ndarray, np.ndarray], rtol: float,
    atol: float, method: str = "BDF",
) -> tuple[float, np.ndarray]:
    """An array problem's ``L`` and ``∂L/∂θ`` (natural units) by staggered forward
    sensitivities with the exact sparse Jacobian: ``y`` first (dense output), then the
    linear system ``S̃_j' = J(t, y(t)) S̃_j + F̃_j`` for every column at once, with
    ``F̃_j = θ_j ∂f/∂θ_j`` (log-space parameters) or ``∂f/∂θ_j`` by complex step in
    ``θ_j`` through the generated RHS (no truncation error). Newton gets the exact
    ``I_P ⊗ J`` (the system is linear in ``S̃``), both solves ``rtol``/``atol``. Solving
    ``(y, S̃)`` together without the coupling block ``∂(J S̃)/∂y`` stalled at rtol 1e-9.
    ``loss`` is ``(W, O, C)``. Its cost: docs/measurements.md, "What a row claims about its
    reference", "The reference gradient is full at every size"."""
    theta = np.asarray(problem.theta0, dtype=float)
    log = np.asarray(problem.log_params, bool) & (theta > 0)
    steps = [theta.astype(complex) for _ in range(theta.size)]
    for j, z in enumerate(steps):
        z[j] = theta[j] * np.exp(1j * CS_STEP) if log[j] else theta[j] + 1j * CS_STEP
    value, g = staggered(problem, loss, rtol, atol, method, steps)
    return value, g / np.where(log, theta, 1.0)


def array_directional(
    problem: Problem, loss: tuple[np.ndarray, np.ndarray, np.ndarray], rtol: float,
    atol: float, method: str, directions: list[np.ndarray],
) -> tuple[float, np.ndarray]:
    """``L`` and its derivatives ``d_k = ∇L·w_k`` along natural-units directions ``w_k``:
    :func:`array_gradient`'s system with one column per direction, ``s_k' = J s_k + F w_k``
    (``F w_k`` by complex step along ``w_k``). Costs ``k`` columns however many parameters:
    at P = 3,000 on 3,000 states, 8 columns where the full gradient needs 3,000."""
    theta = np.asarray(problem.theta0, dtype=float)
    steps = [theta + 1j * CS_STEP * np.asarray(w, float) for w in directions]
    return staggered(problem, loss, rtol, atol, method, steps)


def staggered(
    problem: Problem, loss: tuple[np.ndarray, np.ndarray, np.ndarray], rtol: float,
    atol: float, method: str, steps: list[np.ndarray],
) -> tuple[float, np.ndarray]:
    """``L`` and ``dL/dε_k`` for the complex parameter points ``θ + i·CS_STEP·w_k`` in
    ``steps``: ``y`` solved first (dense output), then every ``s_k`` at once (block-diagonal
    Newton matrix ``I_k ⊗ J``), ``dL/dε_k = Σ_i (2 W_i ⊙ (y_i − O_i) + C_i)·s_k(t_i)``."""
    import scipy.sparse as sp
    from scipy.integrate import solve_ivp

    ns = codegen.load_python(codegen.generate(problem, "numpy"))
    rhs, jac = ns["rhs"], ns["jac_sparse"]
    theta = np.asarray(problem.theta0, dtype=float)
    n, P, t_save = problem.n_state, len(steps), np.asarray(problem.t_save)
    kw: dict[str, Any] = {"method": ode_solver(method), "t_eval": t_save, "rtol": rtol,
                          "atol": atol}  # fmt: skip
    ys = solve_ivp(lambda t, y: rhs(t, y, theta), problem.t_span,
                   np.asarray(problem.y0, float), dense_output=True,
                   jac=lambda t, y: jac(t, y, theta), **kw)  # fmt: skip

    def f(t: float, s: np.ndarray) -> np.ndarray:
        y = ys.sol(t)
        F = np.stack([np.imag(rhs(t, y, z)) / CS_STEP for z in steps])
        return (s.reshape(P, n) @ jac(t, y, theta).T + F).ravel()

    def jz(t: float, s: np.ndarray) -> Any:
        return sp.block_diag([sp.csc_matrix(jac(t, ys.sol(t), theta))] * P, format="csc")

    sol = solve_ivp(f, problem.t_span, np.zeros(n * P), jac=jz, **kw) if ys.success else ys
    if not sol.success:
        raise SensitivityError(f"sensitivity solve ({method}) failed for {problem.name!r}: "
                               f"{sol.message}")  # fmt: skip
    W, O, C = loss
    y, S = ys.y.T, sol.y.T.reshape(len(t_save), P, n)
    g = np.einsum("in,ipn->p", 2.0 * W * (y - O) + C, S)
    return float(np.sum(W * (y - O) ** 2) + np.sum(C * y)), g


def scalar_gradient(
    problem: Problem, loss: tuple[np.ndarray, np.ndarray, np.ndarray], rtol: float,
    atol: float, method: str,
) -> tuple[float, np.ndarray]:
    """A scalar problem's ``L`` and ``∂L/∂θ`` (natural units) at ``θ0`` by
    :class:`Sensitivities` (``y`` and ``S̃`` under one error control) at ``rtol``, ``atol``,
    with ``method`` (the one the reference's solution succeeded with, DOP853 if non-stiff)."""
    W, O, C = loss
    cp = CompiledProblem(
        name=problem.name, stiff=problem.stiff, state_names=list(problem.state_names),
        param_names=list(problem.param_names), y0=np.asarray(problem.y0, float),
        theta0=np.asarray(problem.theta0, float),
        log_params=np.asarray(problem.log_params, bool), t_span=problem.t_span,
        t_save=np.asarray(problem.t_save, float), rtol=problem.rtol, atol=problem.atol,
        max_steps=problem.max_steps, loss_W=W, loss_O=O, loss_C=C,
    )  # fmt: skip
    sens = Sensitivities(problem, cp, rtol)
    sens.atol, sens.method = atol, method
    return sens.loss_and_grad(cp.theta0)
