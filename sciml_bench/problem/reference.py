"""Tight reference solutions and full reference gradients, cached.

The reference solves with SciPy's BDF (or Radau, ``[reference] method``) at
``rtol = 1e-12`` (looser for large array problems, :data:`SIZED_RTOL`) with the exact sympy
Jacobian (:mod:`.reference_solvers`); a failed solve
falls back to Radau, then LSODA, then all of them 100x looser
(:func:`_solve_with_fallbacks`), and a solve that ran away stops at once.

The reference gradient is the full gradient, every component, by
:func:`~.reference_gradient.full_gradient`: forward sensitivities where their system is
small, else the quadrature adjoint of :mod:`.adjoint`, each at the reference's rtol (or
its own, ``[reference] gradient_rtol``) and 10x that, the tighter kept; reported in natural units (``∂L/∂θ_i``). Its own error,
``reference_error``, is on the tiers' measure (:mod:`.gradient_measures`: norm-wise on
the judged components, ``θ_i ∂L/∂θ_i`` for log-space parameters) and is the larger of

- the two tolerances' disagreement (``tolerance_error``), and
- an independent cross-check's (``cross_check``, ``cross_check_agreement``): complex step
  through BDF where the problem is analytic with at most ``CS_MAX_PARAMS`` parameters
  (``∂L/∂log θ_i = Im L(θ e^{i h e_i}) / h``, ``h = 1e-30``, no subtractive cancellation);
  else central differences over every component (at most ``FULL_FD_MAX_PARAMS``; at h,
  or at h and h/2 Richardson-extrapolated for array problems); else the gradient's projections on :data:`N_DIRECTIONS` seeded
  directions against directional differences or directional forward sensitivities; else
  (above ``CS_MAX_STATES`` states, at most ``FORWARD_MAX_PARAMS`` parameters, a
  forward-sensitivity reference) the quadrature adjoint at the reference's own rtol
  (:data:`ADJOINT_CHECK`).

Either alone can under-state the error: the tolerance pair misses a bias both share, and
the cross-check is blind where it did not run. Where no sensitivity system can be solved,
central differences are the reference (``_fd_fallback``), and the row says so.

A reference that cannot be built is not the end of a run: the solver's failure at θ₀ (or
the truth model's, for a fit loss) raises :class:`ReferenceError`, and
:func:`get_or_missing` turns it into a reference with ``missing`` set, so the backends
still run and their rows say "unjudged: the reference failed: <reason>". A failure in the
gradient alone keeps the solution and sets ``gradient_missing``. Results are cached on
disk, keyed by a hash of the problem's content, and verified by checksum when read; a
missing reference is never cached.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import math
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Collection, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sciml_bench.problem import codegen, event_segments
from sciml_bench.problem.adjoint import AdjointError
from sciml_bench.problem.blas_threads import serial_blas_when_small
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.problem.events import kinds as event_kinds
from sciml_bench.problem.gradient_measures import judged_scale, norm_error
from sciml_bench.problem.loss import loss_arrays
from sciml_bench.problem.reference_gradient import (
    FORWARD_MAX_PARAMS,
    adjoint_check,
    check_text,
    directional_agreement,
    full_gradient,
)
from sciml_bench.problem.reference_solvers import ode_solver
from sciml_bench.problem.sensitivity import (
    SensitivityError,
    array_directional,
    array_gradient,
)
from sciml_bench.problem.solution_measures import floor_of, solution_error
from sciml_bench.problem.spec import Problem

#: bump when the reference algorithm changes, so old cache entries are not reused
#: (3: the method string says what ran; complex_step_skipped, gradient_missing;
#: 4: array problems' FD is Richardson-extrapolated; 5: directional FD extrapolated too,
#: reference_error and gradient_check stored; 6: directional steps in log space for positive
#: parameters, forward sensitivities above 1,000 states; 7: a full gradient at every size,
#: forward sensitivities or the adjoint at two tolerances, norm-wise estimates; a scalar
#: problem's FD cross-check at h alone, not h and h/2, left v7 entries valid: no bump; nor
#: did the quadrature-adjoint cross-check above CS_MAX_STATES states, which changes no
#: gradient: a cached v7 reference of a large array problem simply has no cross-check and
#: its estimate is the tolerance pair's until rebuilt with ``--refresh``; 8: BDF and Radau
#: start from a small first step, and the solution is cross-checked by a second method,
#: ``solution_check``; a test now fails when the fields change and this does not)
REFERENCE_VERSION = 8
DEFAULT_RTOL = 1e-12
DEFAULT_FD_STEP = 1e-4
CS_STEP = 1e-30
#: complex step costs one solve per parameter; beyond this it is skipped
CS_MAX_PARAMS = 16
#: above this many parameters, check directional derivatives instead of every component
FULL_FD_MAX_PARAMS = 64
N_DIRECTIONS = 8
#: an array problem's reference rtol by its number of states, (most states, rtol): a 1e-12
#: BDF solve of 30,000 ROBER states took 4.6 minutes here, the 2-D Brusselator's 128 states
#: 15 s, and a reference is 8 to 11 solves. A file's own ``[reference] rtol`` always wins;
#: the rtol used is recorded, with a note saying why it is not 1e-12.
SIZED_RTOL = ((100, DEFAULT_RTOL), (1_000, 1e-10), (10_000, 1e-9), (math.inf, 1e-8))
#: the complex-step cross-check (3 complex solves) is skipped above this many states
CS_MAX_STATES = 1_000
#: the solution's cross-check (a second method) disagreeing past this leaves the rows'
#: solution errors unjudged: a reference off by more cannot tell a row's 1e-6 from 0
SOLUTION_CHECK_BOUND = 1e-6
#: the second method's rtol: the reference's times this, at most 1e-10 (its error stays
#: a hundredth of the bound; at 1e-12 Radau costs 3-30x BDF)
SOLUTION_CHECK_LOOSEN = 100.0


class ReferenceError(RuntimeError):
    """The reference solver itself failed: the problem is not usable as stated.

    ``observations`` holds the fit loss's data when they were made before the failure
    (so that backends can still be run on the stated loss), else None."""

    observations: list[list[float]] | None = None
    #: the failed solve's state ran far past its start (a blow-up, :data:`RUNAWAY`)
    runaway: bool = False


@dataclass
class Reference:
    problem: str
    content_hash: str
    method: str
    rtol: float
    atol: float
    t: list[float]
    y: list[list[float]]
    observations: list[list[float]] | None
    loss: float
    #: ∂L/∂θ in natural units, declaration order (empty in directional mode)
    gradient: list[float]
    gradient_method: str
    fd_step: float
    #: max relative difference between FD and complex step (None: not checked)
    complex_step_agreement: float | None
    build_s: float
    cached: bool = False
    #: why the tolerance is looser than the tight default (an array problem at size), or ""
    tolerance_note: str = ""
    #: directional mode (many parameters): seeded unit directions v_k and FD of L along them
    directions: list[list[float]] | None = None
    directional_derivatives: list[float] | None = None
    #: why the complex-step cross-check did not run ("" when it ran)
    complex_step_skipped: str = ""
    #: why there is no reference gradient although there is a solution ("" when there is)
    gradient_missing: str = ""
    #: why there is no reference at all ("" when there is): ``y`` is empty, ``loss`` NaN
    missing: str = ""
    #: the cache file this reference was read from or written to ("" when neither)
    cache_path: str = ""
    #: the gradient's own error estimate on the tiers' measure (None: no gradient)
    reference_error: float | None = None
    #: what a row's gradient is checked against: "full" ("" if none)
    gradient_check: str = ""
    #: the gradient's two tolerances' disagreement (norm-wise relative), None: not made
    tolerance_error: float | None = None
    #: the cross-check that ran ("complex-step", "central-difference ...", "8-direction
    #: ..."; "" none) and its agreement with the gradient (norm-wise relative)
    cross_check: str = ""
    cross_check_agreement: float | None = None
    #: the solution's cross-check: a second method's solve ("Radau at rtol 1e-10"; "" none)
    #: and its disagreement with ``y`` on the rows' measure (:func:`solution_agreement`)
    solution_check: str = ""
    solution_check_agreement: float | None = None
    #: why the rows' solution errors are not judged against ``y`` ("" when they are): the
    #: second method disagrees past :data:`SOLUTION_CHECK_BOUND`, with what fixes it
    solution_unjudged: str = ""

    def gradient_by_name(self, names: list[str] | tuple[str, ...]) -> dict[str, float]:
        return dict(zip(names, self.gradient, strict=True)) if self.gradient else {}

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def cache_dir() -> Path:
    env = os.environ.get("SCIML_BENCH_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sciml-bench" / "reference"


def _key(problem: Problem) -> str:
    return f"{problem.name}-{problem.content_hash}-v{REFERENCE_VERSION}"


#: SciPy's explicit methods, which take no Jacobian
EXPLICIT = ("RK23", "RK45", "DOP853")


class _Solver:
    """The problem's NumPy RHS and Jacobian behind ``solve_ivp``."""

    def __init__(self, problem: Problem, method: str, rtol: float, atol: float):
        ns = codegen.load_python(codegen.generate(problem, "numpy"))
        self.rhs: Callable = ns["rhs"]
        # an array problem's exact Jacobian is sparse (scipy.sparse CSC): BDF and Radau
        # factorise it with SuperLU; scalar problems keep their dense one
        self.jac: Callable = ns["jac_sparse"] if "jac_sparse" in ns else ns["jac"]
        #: the initial state at θ where it depends on θ (problem/initial.py), else None
        self.y0_of: Callable | None = ns.get("y0")
        #: ``(event_times, EVENTS)`` of a problem with events (:mod:`.events`), else None
        self.events: tuple[Callable, Any] | None = (
            (ns["event_times"], ns["EVENTS"]) if "event_times" in ns else None)
        self.ns = ns
        self.problem = problem
        self.method = method
        self.rtol = rtol
        self.atol = atol

    def solve(
        self, theta: np.ndarray, method: str | None = None, y0: np.ndarray | None = None,
        deadline: float | None = None,
    ) -> np.ndarray:
        """States at the save points from ``y0`` (default: the problem's); a
        :class:`ReferenceError` past ``deadline`` (``time.perf_counter()``), or when the
        solver fails, with ``runaway`` set where the state it saw ran away. A problem with
        events is solved piece by piece between them (:mod:`.event_segments`)."""
        p = self.problem
        if y0 is None and self.y0_of is not None:
            y0 = self.y0_of(theta)
        y0 = np.asarray(p.y0 if y0 is None else y0, dtype=np.result_type(theta, float))
        name = method or self.method
        watch = _Watch(y0, deadline)
        t_save = np.asarray(p.t_save, dtype=float)
        if self.events is None:
            return self._piece(theta, name, watch, (p.t_span[0], p.t_span[1]), t_save, y0).saved
        times = self.events[0](theta)
        why = event_segments.outside_span(times[~np.isnan(np.real(times))], p.t_span)
        if why:
            raise ReferenceError(f"reference solver {name} failed for {p.name!r}: {why}")
        roots = event_segments.root_events(self.ns, theta, p.n_state)

        def piece(a: float, b: float, save: np.ndarray, y: np.ndarray) -> event_segments.Stop:
            return self._piece(theta, name, watch, (a, b), t_save[save], y, roots)

        try:
            return event_segments.solve_with_events(
                p.t_span, t_save, times, y0, piece, lambda k, t, y: self.events[1][k](y, theta))  # fmt: skip
        except event_segments.TooManyEvents as e:
            raise ReferenceError(f"reference solver {name} failed for {p.name!r}: {e}") from e

    def _piece(
        self, theta: np.ndarray, name: str, watch: _Watch, span: tuple[float, float],
        t_eval: np.ndarray, y0: np.ndarray, roots: list[Any] | None = None,
    ) -> event_segments.Stop:
        """The states at ``t_eval`` (rows) and where the solve stopped: the end of ``span``,
        or where a root event of ``roots`` fired first."""
        from scipy.integrate import solve_ivp

        p = self.problem
        points = event_segments.points_with_end(t_eval, span[1])
        try:
            sol = solve_ivp(
                lambda t, y: self.rhs(t, watch(y), theta), span, y0, method=ode_solver(name),
                t_eval=points, rtol=self.rtol, atol=self.atol, events=roots or None,
                # an explicit method takes no Jacobian (SciPy warns when given one)
                **({} if name in EXPLICIT else {"jac": lambda t, y: self.jac(t, y, theta)}),
            )  # fmt: skip
        # an overflow the RHS raises; a NaN Jacobian, which the LU refuses with ValueError
        # (sqrt of a state gone negative); too long
        except (ArithmeticError, ValueError, _Overtime) as e:
            err = ReferenceError(f"reference solver {name} failed for {p.name!r}: "
                                 f"{type(e).__name__}: {e}")  # fmt: skip
            err.runaway = watch.runaway
            raise err from e
        if not sol.success:
            err = ReferenceError(f"reference solver {name} failed for {p.name!r}: {sol.message}")
            err.runaway = watch.runaway
            raise err
        if not np.all(np.isfinite(sol.y)):  # LSODA "succeeds" past a log(0) with NaN states
            err = ReferenceError(f"reference solver {name} returned non-finite states for "
                                 f"{p.name!r}")  # fmt: skip
            err.runaway = True
            raise err
        return event_segments.ivp_stop(sol, t_eval.size, roots or [])


def solve_at(
    problem: Problem, theta: np.ndarray, method: str, rtol: float, atol: float
) -> np.ndarray:
    """The states at the save points at ``theta`` by the reference's own solver (its
    generated NumPy RHS and exact Jacobian) with the settings given: what a check that
    compares a reference with another route to the same numbers solves with
    (:mod:`sciml_bench.problem.sbml.semantic`). A failure is a :class:`ReferenceError`."""
    return _Solver(problem, method, rtol, atol).solve(np.asarray(theta, dtype=float))


class _Overtime(Exception):
    """A reference attempt ran past its deadline."""


class _Watch:
    """Passes the states a solver tries through, noting whether one ran away
    (:data:`RUNAWAY`) and raising :class:`_Overtime` past the deadline."""

    def __init__(self, y0: np.ndarray, deadline: float | None):
        self.limit = RUNAWAY * (1.0 + (float(np.max(np.abs(y0))) if y0.size else 0.0))
        self.deadline = deadline
        self.runaway = False

    def __call__(self, y: np.ndarray) -> np.ndarray:
        a = np.abs(y)
        if not self.runaway and (not np.all(np.isfinite(a)) or float(np.max(a)) > self.limit):
            self.runaway = True
        if self.deadline is not None and time.perf_counter() > self.deadline:
            raise _Overtime("over the time allowed to a fallback attempt")
        return y


#: a failed solve whose state has grown this many times past its start ran away (a finite-
#: time blow-up): no other method or tolerance will reach the end, so none is tried
RUNAWAY = 1e8


def _fd_gradient(
    loss: Callable[[np.ndarray], float], theta: np.ndarray, log: np.ndarray, h: float
) -> np.ndarray:
    """Central differences; returns ∂L/∂θ in natural units."""
    g = np.empty_like(theta)
    for i in range(theta.size):
        up, down = theta.copy(), theta.copy()
        if log[i]:
            up[i] = theta[i] * np.exp(h)
            down[i] = theta[i] * np.exp(-h)
            g[i] = (loss(up) - loss(down)) / (2 * h) / theta[i]
        else:
            step = h * max(1.0, abs(theta[i]))
            up[i] += step
            down[i] -= step
            g[i] = (loss(up) - loss(down)) / (2 * step)
    return g


def richardson(
    loss: Callable[[np.ndarray], float], theta: np.ndarray, log: np.ndarray, h: float
) -> tuple[np.ndarray, float]:
    """Central differences at ``h`` and ``h/2``, extrapolated: ``g = (4 g(h/2) − g(h)) / 3``
    cancels the ``h²`` term of their error. Returns ``(g, spread)``, ``spread`` the largest
    relative difference between ``g(h)`` and ``g(h/2)``: what extrapolation removed.

    An array problem's reference takes a large step (``rtol^(1/3)`` at a loosened rtol), and
    its ``h²`` term can be large: on the 2-D Brusselator at 512 states, ``h = 4.6e-4`` put
    the gradient 5.6e-4 (relative) off the converged one, three times the libraries' own
    error at rtol 1e-6; extrapolated, it agrees with a 1e-12 solve at ``h = 1e-4`` to 1e-5."""
    coarse = _fd_gradient(loss, theta, log, h)
    fine = _fd_gradient(loss, theta, log, h / 2)
    scale = max(float(np.max(np.abs(fine))), 1e-300)
    spread = float(np.max(np.abs(fine - coarse) / np.maximum(np.abs(fine), 1e-8 * scale)))
    return (4 * fine - coarse) / 3, spread


def _directions(n: int, content_hash: str) -> list[np.ndarray]:
    """Seeded random unit directions (the seed is the problem's hash: stable, shared)."""
    rng = np.random.default_rng(int(content_hash[:8], 16))
    out = []
    for _ in range(N_DIRECTIONS):
        v = rng.standard_normal(n)
        out.append(v / np.linalg.norm(v))
    return out


def rel_error(a: np.ndarray, b: np.ndarray) -> float:
    """``‖a − b‖₂ / ‖b‖₂``: the tiers' measure (:func:`~.reference_gradient.norm_error`),
    for the reference's estimates; 0 for empty vectors."""
    return norm_error(a, b) if np.asarray(b).size else 0.0


def directional_fd(
    loss: Callable[[np.ndarray], float],
    theta: np.ndarray,
    units: list[np.ndarray],
    h: float,
    log: np.ndarray | None = None,
) -> tuple[list[np.ndarray], list[float], float]:
    """Directional derivatives along seeded unit vectors ``u_k``, each Richardson-
    extrapolated from central differences at ``h`` and ``h/2``: ``d_k = (4 d_k(h/2) −
    d_k(h)) / 3``. The step moves a log-space parameter multiplicatively and the others
    additively at one scale, ``θ_i(ε) = θ_i e^{ε u_i}`` or ``θ_i + ε c u_i`` (``c =
    max(1, max |θ_j|)`` over the others), so no parameter is pushed across zero however
    different their magnitudes (ROBER's rates span 0.04 to 3e7), and

        dL/dε = Σ_i g_i D_i u_i = g·w_k,   D_i = θ_i (log) or c,   w_k = D ∘ u_k,

    the derivative along the natural-units direction ``w_k`` a row's gradient is scored on.
    Returns ``(w, d, error)``, ``error = rel_error(d(h/2), d)``: what extrapolation removed
    from the finer step, the estimate of ``d``'s own error. Costs 4 solves per direction."""
    directions, coarse = directional_central(loss, theta, units, h, log)
    _, fine = directional_central(loss, theta, units, h / 2, log)
    d = (4 * fine - coarse) / 3
    return directions, d.tolist(), rel_error(fine, d)


def directional_central(
    loss: Callable[[np.ndarray], float], theta: np.ndarray, units: list[np.ndarray], h: float,
    log: np.ndarray | None = None,
) -> tuple[list[np.ndarray], np.ndarray]:  # fmt: skip
    """One central difference per unit ``u_k`` at step ``h`` (:func:`directional_fd`'s
    step): the natural-units directions ``w_k = D ∘ u_k`` and ``d_k ≈ g·w_k``."""
    log = np.zeros(theta.size, bool) if log is None else np.asarray(log, bool) & (theta > 0)
    c = max(1.0, float(np.max(np.abs(theta[~log]), initial=0.0)))

    def at(u: np.ndarray, eps: float) -> np.ndarray:
        return np.where(log, theta * np.exp(eps * u), theta + eps * c * u)

    d = np.array([(loss(at(u, h)) - loss(at(u, -h))) / (2 * h) for u in units], dtype=float)
    return natural_directions(theta, units, log), d


def _cs_gradient(
    loss: Callable[[np.ndarray], complex], theta: np.ndarray, log: np.ndarray
) -> np.ndarray:
    g = np.empty(theta.size)
    for i in range(theta.size):
        z = theta.astype(complex)
        if log[i]:
            z[i] = theta[i] * np.exp(1j * CS_STEP)
            g[i] = np.imag(loss(z)) / CS_STEP / theta[i]
        else:
            z[i] = theta[i] + 1j * CS_STEP
            g[i] = np.imag(loss(z)) / CS_STEP
    return g


def reference_rtol(problem: Problem) -> tuple[float, str]:
    """The reference's rtol, and a note when it is looser than the tight default: an array
    problem without its own ``[reference] rtol`` loosens with size (:data:`SIZED_RTOL`)."""
    if "rtol" in problem.reference or problem.array is None:
        return float(problem.reference.get("rtol", DEFAULT_RTOL)), ""
    rtol = next(r for most, r in SIZED_RTOL if problem.n_state <= most)
    if rtol == DEFAULT_RTOL:
        return rtol, ""
    return rtol, (
        f"reference rtol {rtol:g}, not {DEFAULT_RTOL:g}: at {problem.n_state} states a "
        "tight solve would cost too much (each of its ~11 solves)"
    )


def fd_step(problem: Problem, rtol: float) -> float:
    """The central-difference step: the file's, else 1e-4; a reference loosened at size
    takes ``rtol^(1/3)`` (the step that balances truncation, ~h², against the solver's
    noise, ~rtol/h)."""
    if "fd_step" in problem.reference:
        return float(problem.reference["fd_step"])
    return max(DEFAULT_FD_STEP, rtol ** (1 / 3)) if problem.array is not None else DEFAULT_FD_STEP


def _is_analytic(problem: Problem) -> bool:
    import sympy

    return not any(e.has(sympy.Abs) for e in problem.rhs)


def cross_check(
    problem: Problem,
    loss: Callable[[np.ndarray], Any],
    g: np.ndarray,
    theta0: np.ndarray,
    log: np.ndarray,
) -> tuple[float | None, str]:
    """The complex-step cross-check of the FD gradient ``g``: ``(agreement, "")`` when it
    ran, ``(None, why not)`` when it did not. ``loss(z)`` is the loss through BDF at a
    complex θ. Shared by the single-trajectory and the ensemble reference."""
    if problem.n_params > CS_MAX_PARAMS:
        return None, (f"not run: {problem.n_params} parameters > {CS_MAX_PARAMS} "
                      "(it costs one complex solve per parameter)")  # fmt: skip
    if g.size != problem.n_params:
        return None, "not run: there is no full FD gradient to check"
    if problem.n_state > CS_MAX_STATES:
        return None, (f"not run: {problem.n_state} states > {CS_MAX_STATES} "
                      "(three complex BDF solves at this size cost too much)")  # fmt: skip
    if not _is_analytic(problem):
        return None, "not run: the equations use abs(), which is not analytic"
    if any(e.moves for e in problem.events):
        return None, ("not run: an event's time moves with the parameters (no solver steps "
                      "to a complex time)")  # fmt: skip
    try:
        g_cs = _cs_gradient(loss, theta0, log)
    except (ReferenceError, ValueError, TypeError) as e:
        first = " ".join(str(e).split())[:200]
        return None, f"not run to the end: the complex solve through BDF failed: {first}"
    scaled = np.where(log, theta0, 1.0)
    ref = g_cs * scaled
    floor = 1e-8 * max(float(np.max(np.abs(ref))), 1e-300)
    return float(np.max(np.abs(g * scaled - ref) / np.maximum(np.abs(ref), floor))), ""


def checked(agreement: float | None, skipped: str) -> str:
    """The part of a ``method`` string that says whether the complex-step check ran."""
    if agreement is not None:
        return (f"; complex-step cross-check through BDF: FD and complex step differ "
                f"by at most {agreement:.2g} (relative)")  # fmt: skip
    return f"; no complex-step cross-check ({skipped.removeprefix('not run: ')})"


@dataclass
class _Settings:
    """The reference's solver, tolerances and FD step (``[reference]`` overrides)."""

    method: str
    rtol: float
    atol: float
    h: float
    #: why rtol is looser than the tight default (an array problem at size), or ""
    tolerance_note: str = ""
    #: the gradient pair's tolerances over the solution's (``[reference] gradient_rtol``
    #: / rtol; 1 unless set): a fallback that loosens the solution loosens it alike
    gradient_factor: float = 1.0

    @classmethod
    def of(cls, problem: Problem) -> _Settings:
        rtol, note = reference_rtol(problem)
        scale = max(1.0, float(np.max(np.abs(problem.y0))))
        return cls(
            method=str(problem.reference.get("method", "BDF")),
            rtol=rtol,
            atol=float(problem.reference.get("atol", min(problem.atol, rtol) * 1e-4 * scale)),
            h=fd_step(problem, rtol),
            tolerance_note=note,
            gradient_factor=float(problem.reference.get("gradient_rtol", rtol)) / rtol,
        )


def _observations(problem: Problem, cfg: _Settings) -> tuple[np.ndarray | None, _Settings]:
    """A fit loss's data: the truth model at the ``truth`` parameters (None for ``final``),
    and the settings that solved it (:func:`_solve_with_fallbacks`)."""
    if problem.loss.kind != "fit":
        return None, cfg
    truth = problem
    if problem.loss.truth_rhs:
        truth = dataclasses.replace(problem, rhs=problem.loss.truth_rhs, networks=())
    return _solve_with_fallbacks(truth, cfg, np.asarray(problem.loss.truth))


#: what an expert tries when the reference's solver fails, in order: the other implicit
#: method, then LSODA (which switches to Adams where the problem is not stiff), each at
#: the asked tolerance and then 100x looser (a 1e-12 request below what float64 steps
#: can resolve, "Required step size is less than spacing between numbers")
FALLBACK_METHODS = ("BDF", "Radau", "LSODA")
FALLBACK_LOOSEN = (1.0, 100.0)
#: the fallbacks together get this many times the first attempt's time (at least a minute)
FALLBACK_TIME_FACTOR = 20.0


def _attempts(cfg: _Settings) -> list[_Settings]:
    """The settings :func:`_solve_with_fallbacks` tries, the asked ones first."""
    out = [cfg]
    for factor in FALLBACK_LOOSEN:
        for method in FALLBACK_METHODS:
            if (method, factor) == (cfg.method, 1.0):
                continue
            why = (f"the reference's {cfg.method} at rtol {cfg.rtol:g} failed, so {method}"
                   + (f" at rtol {cfg.rtol * factor:g}" if factor != 1.0 else ""))  # fmt: skip
            out.append(dataclasses.replace(
                cfg, method=method, rtol=cfg.rtol * factor, atol=cfg.atol * factor,
                tolerance_note="; ".join(x for x in (cfg.tolerance_note, why) if x)))
    return out


def _solve_with_fallbacks(
    problem: Problem, cfg: _Settings, theta: np.ndarray
) -> tuple[np.ndarray, _Settings]:
    """The states at the save points by the first of :func:`_attempts` that succeeds, and
    its settings; :class:`ReferenceError` naming every failure and the keys to set."""
    failures = []
    start = time.perf_counter()
    deadline = None
    for attempt in _attempts(cfg):
        try:
            solver = _Solver(problem, attempt.method, attempt.rtol, attempt.atol)
            return solver.solve(theta, deadline=deadline), attempt
        except ReferenceError as e:
            if getattr(e, "runaway", False):  # a blow-up: no other attempt gets further
                raise ReferenceError(
                    f"{'; '.join([*failures, str(e)])}; the solution left the finite numbers or grew "
                    f"past {RUNAWAY:g} times its start (a blow-up, or a model outside its "
                    "domain), which no other method or tolerance gets past"
                ) from e
            failures.append(f"{attempt.method} at rtol {attempt.rtol:g}: {e}")
        # each fallback gets FALLBACK_TIME_FACTOR times the first attempt's time, and a minute
        deadline = deadline or time.perf_counter() + max(
            60.0, FALLBACK_TIME_FACTOR * (time.perf_counter() - start))
    raise ReferenceError(
        f"every reference solver failed for {problem.name!r} ({'; '.join(failures[:3])}"
        f"{'; ...' if len(failures) > 3 else ''}). Fix: set [reference] rtol (e.g. 1e-8), "
        "atol or method (BDF, Radau, LSODA) in the problem file")


@dataclass
class TrialSolve:
    """One reference solve at θ₀, timed (:func:`trial_solve`): what ``sciml-bench check``
    runs before a long run, in the settings the full reference would use."""

    #: wall-clock seconds: code generation, the truth's solve for a fit loss, the solve
    seconds: float
    method: str
    rtol: float
    atol: float
    #: why the settings differ from the asked ones (a fallback, a size), or ""
    note: str
    loss: float
    y_end: list[float]


def trial_solve(problem: Problem) -> TrialSolve:
    """The reference's solution at θ₀ (and, for a fit loss, its observations first), by the
    same solvers, tolerances and fallbacks as :func:`build`, without the gradient; a
    :class:`ReferenceError` naming the ``[reference]`` key to set when every solver fails."""
    start = time.perf_counter()
    cfg = _Settings.of(problem)
    observations, cfg = _observations(problem, cfg)
    W, O, C = loss_arrays(problem, observations)
    y, cfg = _solve_with_fallbacks(problem, cfg, np.asarray(problem.theta0))
    d = y - O
    return TrialSolve(
        seconds=time.perf_counter() - start, method=cfg.method, rtol=cfg.rtol, atol=cfg.atol,
        note=cfg.tolerance_note, loss=float(np.sum(W * d * d) + np.sum(C * y)),
        y_end=y[-1].tolist(),
    )


@dataclass
class _FD:
    """The reference gradient (sensitivities, the adjoint or the FD fallback) and how it
    was made."""

    g: np.ndarray
    #: why there is none ("" when there is)
    missing: str = ""
    #: Richardson extrapolation's spread (array problems), else None
    spread: float | None = None
    #: the estimate of the gradient's own error (tiers' measure), None until known
    error: float | None = None
    #: what made the gradient, as the ``method`` string says it
    sensitivity: str = ""
    #: "forward sensitivities", "adjoint" ("" for the FD fallback), and the tight solve's
    #: ``(method, rtol, atol)`` (:class:`~.reference_gradient.FullGradient`)
    kind: str = ""
    settings: tuple[str, float, float] | None = None


def _extrapolated(
    loss: Callable[[np.ndarray], Any], theta0: np.ndarray, log: np.ndarray, h: float,
    coarse: np.ndarray | None = None,
) -> _FD:
    """Full FD at ``h`` (``coarse`` when already made) and ``h/2``, Richardson-extrapolated
    (:func:`richardson`); its error estimate is ``|g_R − g(h/2)|`` on the tiers' measure."""
    if coarse is None:
        coarse = _fd_gradient(loss, theta0, log, h)
    fine = _fd_gradient(loss, theta0, log, h / 2)
    g = (4 * fine - coarse) / 3
    scale = np.where(log, theta0, 1.0)
    top = max(float(np.max(np.abs(fine))), 1e-300)
    spread = float(np.max(np.abs(fine - coarse) / np.maximum(np.abs(fine), 1e-8 * top)))
    return _FD(g, spread=spread, error=rel_error(fine * scale, g * scale))


def natural_directions(theta: np.ndarray, units: list[np.ndarray],
                       log: np.ndarray) -> list[np.ndarray]:  # fmt: skip
    """The natural-units directions ``w_k = D ∘ u_k`` of :func:`directional_central`'s steps
    (``D_i = θ_i`` for a positive log-space parameter, else ``max(1, max |θ_j|)``)."""
    log = np.asarray(log, bool) & (theta > 0)
    c = max(1.0, float(np.max(np.abs(theta[~log]), initial=0.0)))
    return [np.where(log, theta, c) * u for u in units]




def sensitivity_gradient(
    problem: Problem, arrays: tuple[np.ndarray, np.ndarray, np.ndarray], cfg: _Settings,
    factor: float, directions: list[np.ndarray] | None,
) -> np.ndarray:
    """The gradient (or, given ``directions``, the derivatives along them) by forward
    sensitivities at ``factor`` times the reference's rtol and atol."""
    rtol, atol = cfg.rtol * factor, cfg.atol * factor
    if directions is None:
        return array_gradient(problem, arrays, rtol, atol, cfg.method)[1]
    return array_directional(problem, arrays, rtol, atol, cfg.method, directions)[1]




def _fd_fallback(
    problem: Problem, loss: Callable[[np.ndarray], Any], theta0: np.ndarray, h: float,
    why: str,
) -> _FD:
    """When neither forward sensitivities nor the adjoint could be solved (``why``): central
    FD over every component, extrapolated from ``h`` and ``h/2``, up to
    ``FULL_FD_MAX_PARAMS`` parameters; above that no reference gradient, and the rows say
    so rather than take a tier from projections."""
    log = np.asarray(problem.log_params)
    if problem.n_params > FULL_FD_MAX_PARAMS:
        return _FD(np.zeros(0), missing=(
            f"no full reference at this size: {why}; central differences over "
            f"{problem.n_params} parameters (> {FULL_FD_MAX_PARAMS}) are not tried"))
    try:
        fd = _extrapolated(loss, theta0, log, h)
    except ReferenceError as e:
        return _FD(np.zeros(0), missing=f"{why}; central FD at a perturbed θ: {e}")
    fd.sensitivity = (f"central finite differences at h={h:g} and h/2, Richardson-"
                      f"extrapolated (the sensitivity systems failed: {why})")  # fmt: skip
    return fd


@dataclass
class _Check:
    """The reference gradient's cross-check: what ran, its agreement, and (along
    directions) the derivatives it measured."""

    kind: str = ""
    agreement: float | None = None
    skipped: str = ""
    directions: list[np.ndarray] | None = None
    derivatives: list[float] | None = None


def _cross_check(
    problem: Problem, loss: Callable[..., Any], fd: _FD, theta0: np.ndarray,
    cfg: _Settings, arrays: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> _Check:
    """An independent check of the full gradient ``fd.g``: complex step where it runs
    (:func:`cross_check`), else Richardson FD over every component up to
    ``FULL_FD_MAX_PARAMS`` parameters, else its projections on 8 seeded directions
    against derivatives measured along them (FD up to ``CS_MAX_STATES`` states,
    directional forward sensitivities above), else (above ``CS_MAX_STATES`` states with a
    forward-sensitivity reference) the quadrature adjoint at its tolerance
    (:func:`_adjoint_check`)."""
    log = np.asarray(problem.log_params)
    g = fd.g
    if g.size != problem.n_params:
        return _Check(skipped="not run: there is no full reference gradient")
    agreement, skipped = cross_check(problem, lambda z: loss(z, "BDF"), g, theta0, log)
    if agreement is not None:
        return _Check("complex-step", agreement)
    try:
        check = _fd_check(problem, loss, g, theta0, cfg, arrays) or _adjoint_check(
            problem, fd, arrays)
    except (ReferenceError, SensitivityError, ArithmeticError, ValueError) as e:
        first = " ".join(str(e).split())[:200]
        return _Check(skipped=f"{skipped}; central differences not run to the end: {first}")
    # why complex step did not run, kept beside what did (and why the adjoint did not)
    check.skipped = "; ".join(x for x in (skipped, check.skipped) if x)
    return check


#: the cross-check of a forward-sensitivity reference above ``CS_MAX_STATES`` states
ADJOINT_CHECK = "quadrature-adjoint (at the reference's rtol)"


def _adjoint_check(
    problem: Problem, fd: _FD, arrays: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> _Check:
    """Where :func:`_fd_check` affords no difference quotient (above ``CS_MAX_STATES``
    states, at most ``FORWARD_MAX_PARAMS`` parameters: an array problem's reference is
    forward sensitivities at any size there), the suite's quadrature adjoint at the
    reference's own tight solver and tolerances
    (:func:`~.reference_gradient.adjoint_check`: about two solves of ``n`` states,
    whatever P), its norm-wise disagreement counted in the error estimate as any
    cross-check's (:func:`_combined_error`). Nothing where the reference is not forward
    sensitivities (the adjoint would check itself)."""
    if fd.kind != "forward sensitivities" or fd.settings is None:
        made = fd.kind or "the finite-difference fallback"
        return _Check(skipped=f"no cross-check above {CS_MAX_STATES} states of a reference "
                      f"made by {made}")  # fmt: skip
    try:
        agreement = adjoint_check(problem, arrays, fd.g, fd.settings)
    except (AdjointError, ArithmeticError, ValueError, MemoryError) as e:
        first = " ".join(str(e).split())[:200]
        return _Check(skipped=f"the quadrature-adjoint cross-check failed: {first}")
    if not math.isfinite(agreement):
        return _Check(skipped="the quadrature-adjoint cross-check gave a non-finite gradient")
    return _Check(ADJOINT_CHECK, agreement)


#: the cross-check of an array problem's full gradient over every component
_RICHARDSON = "central-difference (h and h/2, extrapolated)"


def _fd_check(
    problem: Problem, loss: Callable[..., Any], g: np.ndarray, theta0: np.ndarray,
    cfg: _Settings, arrays: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> _Check | None:
    """:func:`_cross_check`'s difference quotients (None where none is affordable).

    A scalar problem's check is one central difference at ``h`` (two solves a parameter):
    its ``O(h²)`` truncation (~1e-8 at the default 1e-4) only adds to the agreement, which
    then over-states the reference's error, never under-states it, far below any bound a
    row is judged at; Richardson's two steps doubled Van der Pol's and POLLU's checks (four
    Radau solves of 30,000 steps; 100 of POLLU's 104 solves) for digits no judgement uses.
    An array problem's reference takes a large step (``rtol^(1/3)`` at a loosened rtol),
    whose ``h²`` term can reach a row's error (:func:`richardson`): it keeps both steps."""
    log = np.asarray(problem.log_params)
    scale = judged_scale(theta0, log)
    if problem.n_params <= FULL_FD_MAX_PARAMS and problem.n_state <= CS_MAX_STATES:
        if problem.array is None:
            fd, kind = _fd_gradient(loss, theta0, log, cfg.h), "central-difference (h)"
        else:
            fd, kind = richardson(loss, theta0, log, cfg.h)[0], _RICHARDSON
        return _Check(kind, norm_error(g * scale, fd * scale))
    units = _directions(problem.n_params, problem.content_hash)
    if problem.n_state <= CS_MAX_STATES:
        w, d, _ = directional_fd(loss, theta0, units, cfg.h, log)
        kind = f"{N_DIRECTIONS}-direction central-difference"
    elif problem.n_params > FORWARD_MAX_PARAMS:
        w = natural_directions(theta0, units, log)
        d = sensitivity_gradient(problem, arrays, cfg, 0.1, w).tolist()
        kind = f"{N_DIRECTIONS}-direction forward-sensitivity"
    else:
        return None
    return _Check(kind, directional_agreement(g, w, d), directions=w, derivatives=d)


@serial_blas_when_small
def build(problem: Problem) -> Reference:
    """Compute the reference from scratch (no cache). A solver failure at θ₀, or in the
    truth model, raises :class:`ReferenceError` (with the observations made so far)."""
    start = time.perf_counter()
    cfg = _Settings.of(problem)
    observations, cfg = _observations(problem, cfg)
    W, O, C = loss_arrays(problem, observations)

    def loss_of(y: np.ndarray) -> Any:
        d = y - O
        return np.sum(W * d * d) + np.sum(C * y)

    theta0 = np.asarray(problem.theta0)
    try:
        y, cfg = _solve_with_fallbacks(problem, cfg, theta0)
    except ReferenceError as e:
        e.observations = None if observations is None else observations.tolist()
        raise
    solver = _Solver(problem, cfg.method, cfg.rtol, cfg.atol)

    def loss(theta: np.ndarray, method: str | None = None) -> Any:
        return loss_of(solver.solve(theta, method))

    fd = _full(problem, cfg, (W, O, C), loss, theta0)
    check = _cross_check(problem, loss, fd, theta0, cfg, (W, O, C))
    error = _combined_error(fd, check)
    solution = solution_check(problem, cfg.method, cfg.rtol, cfg.atol, y)
    return Reference(
        problem=problem.name,
        content_hash=problem.content_hash,
        method=_method_text(problem, cfg, fd, check, error),
        rtol=cfg.rtol,
        atol=cfg.atol,
        t=list(problem.t_save),
        y=y.tolist(),
        observations=None if observations is None else observations.tolist(),
        loss=float(loss_of(y)),
        gradient=fd.g.tolist(),
        gradient_method="none" if fd.missing else fd.sensitivity.split(" (")[0],
        fd_step=cfg.h,
        complex_step_agreement=check.agreement if check.kind == "complex-step" else None,
        build_s=time.perf_counter() - start,
        tolerance_note=cfg.tolerance_note,
        directions=None if check.directions is None else [v.tolist() for v in check.directions],
        directional_derivatives=check.derivatives,
        complex_step_skipped="" if check.kind == "complex-step" else check.skipped + (
            f"; checked by {check.kind} instead" if check.kind else ""),
        gradient_missing=fd.missing,
        reference_error=None if fd.missing else error,
        gradient_check="" if fd.missing else "full",
        tolerance_error=fd.error,
        cross_check=check.kind,
        cross_check_agreement=check.agreement,
        solution_check=solution.kind,
        solution_check_agreement=solution.agreement,
        solution_unjudged=solution.unjudged,
    )


@dataclass
class SolutionCheck:
    """The reference solution's cross-check: what ran (``kind``; "" none), its
    disagreement on the rows' measure, and why the rows' solution errors are unjudged
    ("" when they are judged)."""

    kind: str = ""
    agreement: float | None = None
    unjudged: str = ""


def _second(method: str) -> str:
    """The other implicit method: Radau for BDF, BDF for Radau or a fallback's LSODA."""
    return "Radau" if method == "BDF" else "BDF"


def solution_check(
    problem: Problem, method: str, rtol: float, atol: float, y: np.ndarray
) -> SolutionCheck:
    """``y`` (the reference's solution by ``method`` at ``rtol``) against a second method's
    at ``max(rtol, min(100 rtol, 1e-10))``, on the rows' measure
    (:func:`~.solution_measures.solution_error`, the problem's ``atol / rtol`` floor).
    Past :data:`SOLUTION_CHECK_BOUND` the rows' solution errors are unjudged, and the
    reason names what agrees instead (:func:`_measured_fix`). Not run above
    :data:`CS_MAX_STATES` states (a second implicit solve costs too much there)."""
    if problem.n_state > CS_MAX_STATES:
        return SolutionCheck(f"not run ({problem.n_state} states > {CS_MAX_STATES})")
    other = _second(method)
    rtol2 = max(rtol, min(SOLUTION_CHECK_LOOSEN * rtol, 1e-10))
    kind = f"{other} at rtol {rtol2:g}"
    floor = floor_of(problem.atol, problem.rtol)
    theta0 = np.asarray(problem.theta0)
    try:
        y2 = solve_at(problem, theta0, other, rtol2, atol * rtol2 / rtol)
    except ReferenceError as e:
        return SolutionCheck(f"{kind}: failed ({' '.join(str(e).split())[:160]})")
    agreement = solution_error(y2, y, floor)["rel_l2"]
    if agreement <= SOLUTION_CHECK_BOUND:
        return SolutionCheck(kind, agreement)
    worst = problem.state_names[solution_error(y2, y, floor)["worst_state"]]
    why = (f"the reference's {method} at rtol {rtol:g} and {kind} disagree by {agreement:.2g} "
           f"(worst state {worst}) > {SOLUTION_CHECK_BOUND:g}: the reference cannot tell the "
           f"rows' solutions apart; {_measured_fix(problem, method, rtol, atol, y2, floor)}")
    return SolutionCheck(kind, agreement, why)


def _measured_fix(
    problem: Problem, method: str, rtol: float, atol: float, y2: np.ndarray, floor: float
) -> str:
    """What makes a reference right, measured: the second method at the reference's own rtol
    and the reference's method 10,000x looser (a tight rtol can make an implicit method's
    first steps step over a fast start); where these two, a different method and a
    different tolerance, agree with each other, either is the advice (never "tighter":
    that is what failed). ``y2`` is the check's own solve."""
    other = _second(method)
    theta0 = np.asarray(problem.theta0)
    tries = ((other, rtol, f'[reference] method = "{other}"'),
             (method, rtol * 1e4, f"[reference] rtol = {rtol * 1e4:g}"))  # fmt: skip
    ys = []
    for m, r, _ in tries:
        try:
            ys.append(solve_at(problem, theta0, m, r, atol * r / rtol))
        except ReferenceError:
            return _NO_FIX
    agree = solution_error(ys[0], ys[1], floor)["rel_l2"]
    if agree > SOLUTION_CHECK_BOUND:
        return _NO_FIX
    (m1, r1, k1), (m2, r2, k2) = tries
    return (f"{m1} at rtol {r1:g} and {m2} at rtol {r2:g} agree with each other to "
            f"{agree:.1g}: set {k1} (or {k2}) in the problem file")


#: the advice where no measured setting agrees (:func:`_measured_fix`)
_NO_FIX = ("neither the second method at the reference's rtol nor the reference's method "
           "10,000x looser gives a solution the other agrees with: the model may be chaotic "
           "over this span (no tolerance gives one trajectory: shorten [time] span) or have a "
           "switch or pulse the solvers step over (set [reference] method, rtol and atol)")


def _full(
    problem: Problem, cfg: _Settings, arrays: tuple[np.ndarray, np.ndarray, np.ndarray],
    loss: Callable[..., Any], theta0: np.ndarray,
) -> _FD:
    """The full reference gradient (:func:`~.reference_gradient.full_gradient`) at the
    gradient's own tolerances (``[reference] gradient_rtol``, atol in proportion), or,
    when its sensitivity systems fail, :func:`_fd_fallback`."""
    f = cfg.gradient_factor
    full = full_gradient(problem, arrays, cfg.rtol * f, cfg.atol * f, cfg.method)
    if full.missing:
        return _fd_fallback(problem, loss, theta0, cfg.h, full.missing)
    return _FD(full.g, error=full.error, sensitivity=full.text, kind=full.kind,
               settings=full.settings)  # fmt: skip


def _combined_error(fd: _FD, check: _Check) -> float | None:
    """The reference's error estimate: the larger of its two tolerances' disagreement and
    its cross-check's. Either alone can be shown to under-state the error: the tolerance
    pair misses a bias both share, and the cross-check is blind where it did not run."""
    if fd.missing or fd.error is None:
        return None
    if fd.spread is not None and check.kind == "complex-step" and check.agreement is not None:
        # the FD fallback checked by complex step: that compares the very gradient reported
        # with one free of truncation error, where Richardson's spread over-states it
        # (Hodgkin-Huxley: 1.3e-4 against complex step's 3.3e-8)
        return check.agreement
    return max(fd.error, check.agreement or 0.0)


def _method_text(
    problem: Problem, cfg: _Settings, fd: _FD, check: _Check, error: float | None
) -> str:
    """The ``method`` string: the solution, the gradient, its cross-check, its estimate."""
    jac = "exact sparse Jacobian" if problem.array is not None else "exact Jacobian"
    text = f"scipy.solve_ivp {cfg.method} with {jac}; gradient: "
    if fd.missing:
        return text + f"none ({fd.missing})"
    text += fd.sensitivity + check_text(check.kind, check.agreement, check.skipped)
    return text + f"; the gradient's own error estimate {error:.2g} (norm-wise relative)"


def missing(
    problem: Problem, reason: str, observations: Any = None, build_s: float = 0.0
) -> Reference:
    """The reference of a problem whose reference solver failed (``reason``): no solution,
    no loss, no gradient. The backends still run: their loss needs the fit's data, which
    are ``observations`` when they were made; when not, O = 0 stands in (the loss is then
    a weighted sum of squares of the solution) and ``missing`` says so."""
    cfg = _Settings.of(problem)
    if problem.loss.kind == "fit" and observations is None:
        observations = np.zeros((len(problem.t_save), problem.n_state)).tolist()
        reason += ("; the fit's observations could not be made either, so the backends' "
                   "loss uses O = 0 (a weighted sum of squares of the solution)")  # fmt: skip
    return Reference(
        problem=problem.name,
        content_hash=problem.content_hash,
        method=f"none: {reason}",
        rtol=cfg.rtol,
        atol=cfg.atol,
        t=list(problem.t_save),
        y=[],
        observations=observations,
        loss=float("nan"),
        gradient=[],
        gradient_method="none",
        fd_step=cfg.h,
        complex_step_agreement=None,
        build_s=build_s,
        complex_step_skipped="not run: there is no reference",
        gradient_missing=reason,
        missing=reason,
    )


def _checksum(payload: dict[str, Any]) -> str:
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _read(path: Path, cls: Any = Reference) -> Any:
    """A checksummed cache entry as ``cls`` (a reference dataclass), or None on a miss."""
    try:
        doc = json.loads(path.read_text())
        payload = doc["reference"]
        if doc.get("sha256") != _checksum(payload):
            raise ValueError("checksum mismatch")
        ref = cls(**payload)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        warnings.warn(
            f"reference cache entry {path} is corrupt ({e}); rebuilding it", stacklevel=3
        )
        return None
    ref.cached = True
    return ref


def _write(path: Path, ref: Any) -> None:
    payload = ref.to_json()
    payload["cached"] = False
    if "cache_path" in payload:  # where it lies is the reader's to say, not the entry's
        payload["cache_path"] = ""
    doc = {"sha256": _checksum(payload), "reference": payload}
    path.parent.mkdir(parents=True, exist_ok=True)
    # Atomic: concurrent builders each rename a complete file into place.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def build_lock(path: Path) -> Iterator[None]:
    """Held while this process builds the cache entry ``path``: a second process (two
    runs started side by side, the test suite's two processes) asking for the same entry
    waits, then reads the first's instead of building it again. Released if the holder
    dies (``flock``); where the lock file cannot be made, nothing is held."""
    try:
        f = open(path.with_name(path.name + ".lock"), "w")  # noqa: SIM115
    except OSError:
        yield
        return
    with f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def cached(
    path: Path, cls: Any, refresh: bool, make: Callable[[], Any], what: str,
    keep: Callable[[Any], bool] = lambda _: True,
) -> Any:  # fmt: skip
    """The cache entry ``path`` read as ``cls``; on a miss (or when ``refresh``) made by
    ``make`` under :func:`build_lock`, reading instead what another process built while this
    one waited, and written where ``keep`` says so (a failed write warns, naming ``what``).
    ``cache_path``, where ``cls`` has one, names the file the entry lies in."""
    found = None if refresh else _read(path, cls)
    if found is None:
        with build_lock(path):
            found = None if refresh else _read(path, cls)  # built while this one waited
            if found is None:
                made = make()
                if not keep(made):
                    return made
                try:
                    _write(path, made)
                except OSError as e:
                    warnings.warn(f"could not cache the {what} at {path}: {e}", stacklevel=3)
                    return made
                found = made
    if hasattr(found, "cache_path"):
        found.cache_path = str(path)
    return found


def get(problem: Problem, refresh: bool = False, cache: Path | None = None) -> Reference:
    """The cached reference for ``problem``, built on a miss or when ``refresh`` (one
    build at a time per entry: :func:`cached`); ``cached`` and ``cache_path`` say which,
    and where."""
    path = (cache or cache_dir()) / f"{_key(problem)}.json"
    return cached(path, Reference, refresh, lambda: build(problem), "reference")  # type: ignore[no-any-return]


def get_or_missing(
    problem: Problem, refresh: bool = False, cache: Path | None = None
) -> Reference:
    """:func:`get`, or, when the reference solver fails, a :func:`missing` reference that
    says why: a run goes on and measures how the backends fail."""
    start = time.perf_counter()
    try:
        return get(problem, refresh, cache)
    except ReferenceError as e:
        return missing(problem, str(e), e.observations, time.perf_counter() - start)


def compile_problem(
    problem: Problem, ref: Reference | None, observations: np.ndarray | None = None,
    sbml: bool = False, sources: Collection[str] | None = None,
) -> CompiledProblem:
    """The worker's view of ``problem``: arrays, loss and generated source. An ensemble
    passes no single-trajectory reference but member 0's ``observations``. The generated
    source is :func:`source_targets`': a run passes ``sources``, what its planned backends
    read; the SBML model (and the modeller's own SBML text) is made only when it is among
    them, or with ``sbml``."""
    if ref is not None:
        observations = None if ref.observations is None else np.asarray(ref.observations)
    obs = observations
    W, O, C = loss_arrays(problem, obs)
    targets = source_targets(problem, sbml, sources)
    source = {t: codegen.generate(problem, t) for t in targets}
    model = problem.sbml_model if "sbml" in targets else None
    if model is not None:  # the modeller's own file, for the backends that run SBML
        source["sbml_model"] = model.text
    return CompiledProblem(
        name=problem.name,
        stiff=problem.stiff,
        state_names=list(problem.state_names),
        param_names=list(problem.param_names),
        y0=np.asarray(problem.y0),
        theta0=np.asarray(problem.theta0),
        log_params=np.asarray(problem.log_params),
        t_span=problem.t_span,
        t_save=np.asarray(problem.t_save),
        rtol=problem.rtol,
        atol=problem.atol,
        max_steps=problem.max_steps,
        loss_W=W,
        loss_O=O,
        loss_C=C,
        source=source,
        content_hash=problem.content_hash,
        y0_depends=bool(problem.initial),
        events=len(problem.events),
        event_kinds=list(event_kinds(problem.events)),
        sbml_map=None if model is None else model.to_json(),
        **_array_facts(problem, source["numpy"]),
    )


def source_targets(
    problem: Problem, sbml: bool = False, sources: Collection[str] | None = None
) -> tuple[str, ...]:
    """The targets :func:`compile_problem` generates. With ``sources`` (a run's: what its
    planned backends declare they read, ``Backend.sources``), those of the problem's targets
    and NumPy's, which the compiled bundle's own array facts (and the Julia backend's sparse
    pattern) read, plus the SBML model with ``sbml``: a target no planned backend reads is
    not generated at every run's start (the SBML model costs seconds at 20,000 states).
    Without ``sources`` (``codegen``, tests, benchmarks): every one of the problem's targets,
    less the SBML model unless ``sbml``."""
    if sources is None:
        return tuple(t for t in codegen.targets(problem) if sbml or t != "sbml")
    wanted = {"numpy", *sources, *(("sbml",) if sbml else ())}
    return tuple(t for t in codegen.targets(problem) if t in wanted)


def _array_facts(problem: Problem, numpy_source: str) -> dict[str, Any]:
    """An array problem's size and its exact Jacobian's non-zeros and bands (lower,
    upper), read from the generated pattern; nothing for a scalar problem."""
    if problem.array is None:
        return {}
    ns = codegen.load_python(numpy_source)
    return {
        "size": problem.array.size,
        "jac_nnz": int(ns["JAC_NNZ"]),
        "jac_bands": [int(b) for b in ns["JAC_BANDS"]],
        "layout": list(problem.array.state_layout),
    }
