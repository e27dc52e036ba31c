"""Tight reference solutions and finite-difference reference gradients, cached.

The reference solves with SciPy's BDF (or Radau, ``[reference] method``) at
``rtol = 1e-12`` with the exact sympy Jacobian. BDF is the default because it
agrees with Radau to ~2e-11 on ROBER and its UDE while being 4-6x faster,
which matters for the 2n solves of a finite-difference gradient. The reference gradient is a central difference of the
loss through that solver,

    ∂L/∂log θ_i ≈ (L(θ e^{h e_i}) − L(θ e^{−h e_i})) / 2h        (log space, θ_i > 0)
    ∂L/∂θ_i     ≈ (L(θ + h e_i) − L(θ − h e_i)) / 2h             (natural space)

reported in natural units (``∂L/∂θ_i = ∂L/∂log θ_i / θ_i``). Where the
problem is analytic it is cross-checked by complex step through BDF,
``∂L/∂log θ_i = Im L(θ e^{i h e_i}) / h`` with ``h = 1e-30``, which has no
subtractive cancellation. Results are cached on disk, keyed by a hash of the
problem's content, and verified by checksum when read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sciml_bench.problem import codegen
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.problem.loss import loss_arrays
from sciml_bench.problem.spec import Problem

#: bump when the reference algorithm changes, so old cache entries are not reused
REFERENCE_VERSION = 2
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


class ReferenceError(RuntimeError):
    """The reference solver itself failed: the problem is not usable as stated."""


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


class _Solver:
    """The problem's NumPy RHS and Jacobian behind ``solve_ivp``."""

    def __init__(self, problem: Problem, method: str, rtol: float, atol: float):
        ns = codegen.load_python(codegen.generate(problem, "numpy"))
        self.rhs: Callable = ns["rhs"]
        # an array problem's exact Jacobian is sparse (scipy.sparse CSC): BDF and Radau
        # factorise it with SuperLU; scalar problems keep their dense one
        self.jac: Callable = ns["jac_sparse"] if "jac_sparse" in ns else ns["jac"]
        self.problem = problem
        self.method = method
        self.rtol = rtol
        self.atol = atol

    def solve(
        self, theta: np.ndarray, method: str | None = None, y0: np.ndarray | None = None
    ) -> np.ndarray:
        """States at the save points from ``y0`` (default: the problem's)."""
        from scipy.integrate import solve_ivp

        p = self.problem
        y0 = np.asarray(p.y0 if y0 is None else y0, dtype=np.result_type(theta, float))
        sol = solve_ivp(
            lambda t, y: self.rhs(t, y, theta),
            p.t_span,
            y0,
            method=method or self.method,
            t_eval=np.asarray(p.t_save),
            rtol=self.rtol,
            atol=self.atol,
            jac=lambda t, y: self.jac(t, y, theta),
        )
        if not sol.success:
            raise ReferenceError(
                f"reference solver {method or self.method} failed for {p.name!r}: {sol.message}"
            )
        return sol.y.T


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


def _directions(n: int, content_hash: str) -> list[np.ndarray]:
    """Seeded random unit directions (the seed is the problem's hash: stable, shared)."""
    rng = np.random.default_rng(int(content_hash[:8], 16))
    out = []
    for _ in range(N_DIRECTIONS):
        v = rng.standard_normal(n)
        out.append(v / np.linalg.norm(v))
    return out


def _fd_directional(
    loss: Callable[[np.ndarray], float], theta: np.ndarray, v: np.ndarray, h: float
) -> float:
    """Central difference of L along a unit direction, in natural units:
    ``∇L·v ≈ (L(θ + εv) − L(θ − εv)) / 2ε`` with ``ε = h·max(1, ‖θ‖_∞)``."""
    eps = h * max(1.0, float(np.max(np.abs(theta))))
    return float((loss(theta + eps * v) - loss(theta - eps * v)) / (2 * eps))


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


def build(problem: Problem) -> Reference:
    """Compute the reference from scratch (no cache)."""
    start = time.perf_counter()
    method = str(problem.reference.get("method", "BDF"))
    rtol, tolerance_note = reference_rtol(problem)
    scale = max(1.0, float(np.max(np.abs(problem.y0))))
    atol = float(problem.reference.get("atol", min(problem.atol, rtol) * 1e-4 * scale))
    h = fd_step(problem, rtol)
    solver = _Solver(problem, method, rtol, atol)
    theta0 = np.asarray(problem.theta0)
    log = np.asarray(problem.log_params)

    observations = None
    if problem.loss.kind == "fit":
        truth = problem
        if problem.loss.truth_rhs:
            truth = dataclasses.replace(problem, rhs=problem.loss.truth_rhs, networks=())
        observations = _Solver(truth, method, rtol, atol).solve(np.asarray(problem.loss.truth))
    W, O, C = loss_arrays(problem, observations)

    def loss_of(y: np.ndarray) -> Any:
        d = y - O
        return np.sum(W * d * d) + np.sum(C * y)

    def loss(theta: np.ndarray, method: str | None = None) -> Any:
        return loss_of(solver.solve(theta, method))

    y = solver.solve(theta0)
    L = float(loss_of(y))
    directions = directional = None
    if problem.n_params > FULL_FD_MAX_PARAMS:
        directions = _directions(problem.n_params, problem.content_hash)
        directional = [_fd_directional(loss, theta0, v, h) for v in directions]
        g = np.zeros(0)
    else:
        g = _fd_gradient(loss, theta0, log, h)
    agreement = None
    if problem.n_params <= CS_MAX_PARAMS and problem.n_state <= CS_MAX_STATES and _is_analytic(problem):
        try:
            g_cs = _cs_gradient(lambda z: loss(z, "BDF"), theta0, log)
            scaled = np.where(log, theta0, 1.0)
            ref = g_cs * scaled
            floor = 1e-8 * max(float(np.max(np.abs(ref))), 1e-300)
            agreement = float(
                np.max(np.abs(g * scaled - ref) / np.maximum(np.abs(ref), floor))
            )
        except (ReferenceError, ValueError, TypeError) as e:
            warnings.warn(f"complex-step cross-check skipped: {e}", stacklevel=2)
    return Reference(
        problem=problem.name,
        content_hash=problem.content_hash,
        method=f"scipy.solve_ivp {method} with exact {'sparse ' if problem.array else ''}Jacobian; central FD (h={h:g}, "
        "log space for positive parameters); complex-step cross-check through BDF",
        rtol=rtol,
        atol=atol,
        t=list(problem.t_save),
        y=y.tolist(),
        observations=None if observations is None else observations.tolist(),
        loss=L,
        gradient=g.tolist(),
        gradient_method=(
            "central finite differences"
            if directions is None
            else f"central finite differences along {N_DIRECTIONS} seeded unit directions"
        ),
        fd_step=h,
        complex_step_agreement=agreement,
        build_s=time.perf_counter() - start,
        tolerance_note=tolerance_note,
        directions=None if directions is None else [v.tolist() for v in directions],
        directional_derivatives=directional,
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


def get(problem: Problem, refresh: bool = False, cache: Path | None = None) -> Reference:
    """The cached reference for ``problem``, built on a miss or when ``refresh``."""
    path = (cache or cache_dir()) / f"{_key(problem)}.json"
    if not refresh:
        ref = _read(path)
        if ref is not None:
            return ref
    ref = build(problem)
    try:
        _write(path, ref)
    except OSError as e:
        warnings.warn(f"could not cache the reference at {path}: {e}", stacklevel=2)
    return ref


def compile_problem(
    problem: Problem, ref: Reference | None, observations: np.ndarray | None = None
) -> CompiledProblem:
    """The worker's view of ``problem``: arrays, loss and generated source. An ensemble
    passes no single-trajectory reference but member 0's ``observations``."""
    if ref is not None:
        observations = None if ref.observations is None else np.asarray(ref.observations)
    obs = observations
    W, O, C = loss_arrays(problem, obs)
    source = {t: codegen.generate(problem, t) for t in codegen.TARGETS}
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
        **_array_facts(problem, source["numpy"]),
    )


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
    }
