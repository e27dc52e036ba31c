"""The ensemble reference: members' observations, and a tight reference on a sample.

**Observations** (``fit`` losses only). Member ``m`` is fitted against its own
data: the truth model (``[loss] truth_equations``, or the problem's equations at
the ``truth`` parameters) solved from member ``m``'s initial state, with member
``m``'s parameter draw applied to the truth parameters as to θ. They are made
once, here, in NumPy/SciPy, and every backend and the reference read the same
array. Members are solved in fixed chunks of :data:`OBS_CHUNK` as one stacked
system (DOP853 at the reference ``rtol``; a per-member loop with the reference's
stiff method when the problem is stiff or the RHS does not vectorize), so the
first ``n`` members' data do not depend on how many members are drawn. They
are cached as ``.npy`` beside the reference (keyed by content hash and count),
and a worker reads that file (it must see the runner's cache folder).

**Reference** for the first ``sample`` members: each solved alone by
``solve_ivp`` with the single-trajectory reference's method, tolerances and exact
Jacobian (:mod:`sciml_bench.problem.reference`), and the gradient of the mean
sample loss ``L̄(θ) = (1/s) Σ_{m<s} L_m(θ ⊙ S_m + A_m)`` w.r.t. the nominal θ:
central differences (log space for positive named parameters) up to
``FULL_FD_MAX_PARAMS`` parameters, else directional derivatives along seeded
unit directions; a complex-step cross-check where the problem is analytic and
small (the ``method`` string says whether it ran, ``complex_step_skipped`` why not).
Cached by content hash and sample size.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sciml_bench.problem import codegen
from sciml_bench.problem import ensemble as ens
from sciml_bench.problem import reference as single
from sciml_bench.problem.spec import Problem

#: members per stacked observation solve; fixed, so observations are prefix-stable
OBS_CHUNK = 1024
OBS_VERSION = 1


@dataclass
class EnsembleReference:
    problem: str
    content_hash: str
    sample: int
    method: str
    rtol: float
    atol: float
    t: list[float]
    #: the sample's states, shape (sample, n_save, n_state)
    y: list[list[list[float]]]
    #: mean loss over the sample
    loss: float
    #: ∂L̄/∂θ in natural units (empty in directional mode)
    gradient: list[float]
    gradient_method: str
    fd_step: float
    complex_step_agreement: float | None
    build_s: float
    cached: bool = False
    directions: list[list[float]] | None = None
    directional_derivatives: list[float] | None = None
    #: why the complex-step cross-check did not run ("" when it ran)
    complex_step_skipped: str = ""
    #: the cache file this reference was read from or written to ("" when neither)
    cache_path: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _tolerances(problem: Problem) -> tuple[str, float, float, float]:
    """The single-trajectory reference's method, rtol, atol and FD step."""
    method = str(problem.reference.get("method", "BDF"))
    rtol = float(problem.reference.get("rtol", single.DEFAULT_RTOL))
    scale = max(1.0, float(np.max(np.abs(problem.y0))))
    atol = float(problem.reference.get("atol", min(problem.atol, rtol) * 1e-4 * scale))
    h = float(problem.reference.get("fd_step", single.DEFAULT_FD_STEP))
    return method, rtol, atol, h


def _truth(problem: Problem) -> tuple[Problem, np.ndarray]:
    if problem.loss.truth_rhs:
        truth = dataclasses.replace(problem, rhs=problem.loss.truth_rhs, networks=())
        return truth, np.asarray(problem.loss.truth[: problem.n_mech_params])
    return problem, np.asarray(problem.loss.truth)


def _stacked(
    rhs: Any, y0: np.ndarray, P: np.ndarray | None, theta: np.ndarray, problem: Problem,
    rtol: float, atol: float,
) -> np.ndarray | None:
    """One chunk as one stacked system (states as rows ``(n_state, B)``); None when the
    generated RHS does not broadcast over members (e.g. network layers)."""
    from scipy.integrate import solve_ivp

    B, ns = y0.shape
    p = theta if P is None else P.T

    def f(t: float, y: np.ndarray) -> np.ndarray:
        return np.asarray(rhs(t, y.reshape(ns, B), p), dtype=float).reshape(-1)

    try:
        if f(problem.t_span[0], y0.T.reshape(-1)).shape != (ns * B,):
            return None
    except (ValueError, IndexError, TypeError):
        return None
    sol = solve_ivp(f, problem.t_span, y0.T.reshape(-1), method="DOP853",
                    t_eval=np.asarray(problem.t_save), rtol=rtol, atol=atol)  # fmt: skip
    if not sol.success:
        raise single.ReferenceError(f"ensemble observations for {problem.name!r}: {sol.message}")
    return sol.y.reshape(ns, B, -1).transpose(1, 2, 0)


def make_observations(problem: Problem, n: int) -> np.ndarray:
    """``(n, n_save, n_state)`` data of the first ``n`` members (no cache)."""
    assert problem.ensemble is not None
    truth, theta = _truth(problem)
    method, rtol, atol, _ = _tolerances(problem)
    rhs = codegen.load_python(codegen.generate(truth, "numpy"))["rhs"]
    solver = single._Solver(truth, method, rtol, atol)
    out = np.empty((n, len(problem.t_save), problem.n_state))
    for lo in range(0, n, OBS_CHUNK):
        hi = min(n, lo + OBS_CHUNK)
        # a stacked chunk is always whole (its error norm spans the chunk), so member
        # m's data never depend on n; a loop solves each member alone anyway
        b = ens.batch(problem.ensemble, np.asarray(problem.y0), len(theta), lo + OBS_CHUNK)
        y0, P = b.y0[lo:], b.thetas(theta)[lo:]
        chunk = None
        # network layers would broadcast wrongly over a stacked state: those loop
        if not problem.stiff and not truth.networks:
            chunk = _stacked(rhs, y0, P if b.varies_parameters else None, theta, truth,
                             rtol, atol)  # fmt: skip
        if chunk is None:
            chunk = np.stack([solver.solve(P[m], y0=y0[m]) for m in range(hi - lo)])
        out[lo:hi] = chunk[: hi - lo]
    return out


def observations_path(problem: Problem, n: int, cache: Path | None = None) -> Path | None:
    """The cached ``.npy`` holding at least the first ``n`` members' observations (built
    on a miss); None when the loss needs none (``final``)."""
    if problem.loss.kind != "fit" or problem.ensemble is None:
        return None
    folder = cache or single.cache_dir()
    stem = f"{single._key(problem)}-ensemble-obs{OBS_VERSION}"
    chunks = -(-n // OBS_CHUNK)
    for path in sorted(folder.glob(f"{stem}-*.npy")):
        try:
            have = int(path.stem.rsplit("-", 1)[1])
        except ValueError:
            continue
        if have >= n:
            return path
    data = make_observations(problem, chunks * OBS_CHUNK)
    path = folder / f"{stem}-{chunks * OBS_CHUNK}.npy"
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


#: the first ``n`` members' observations from :func:`observations_path`'s file (it lives in
#: :mod:`~sciml_bench.problem.ensemble`, which workers import without sympy)
load_observations = ens.load_observations


def loss_arrays(
    problem: Problem, observations: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(W, O, C)`` shared by every member: a ``scaled`` fit weighs states by member 0's
    data (prefix-stable, so every rung and the reference weigh alike); ``O`` is member
    0's data, replaced per member by the batch's observations."""
    return single.loss_arrays(problem, None if observations is None else observations[0])


class _SampleLoss:
    """The mean loss over the sample's ``s`` members, and the solves behind it:
    ``L̄(θ) = (1/s) Σ_{m<s} [Σ W (Y_m − O_m)² + Σ C Y_m]``, ``Y_m`` member ``m`` solved
    alone from its own initial state at ``θ ⊙ S_m + A_m``, ``O_m`` its observations."""

    def __init__(
        self, problem: Problem, cache: Path | None, s: int, method: str, rtol: float, atol: float
    ):
        assert problem.ensemble is not None
        obs = load_observations(observations_path(problem, s, cache), s)
        self.W, O, self.C = loss_arrays(problem, obs)
        self.batch = ens.batch(problem.ensemble, np.asarray(problem.y0), problem.n_params, s, obs)
        self.observations = self.batch.observations if self.batch.observations is not None else O
        self.solver = single._Solver(problem, method, rtol, atol)
        self.s = s

    def solve_all(self, theta: np.ndarray, how: str | None = None) -> np.ndarray:
        """Every member's states, shape ``(s, n_save, n_state)``."""
        P = np.asarray(theta) * self.batch.scale + self.batch.shift
        return np.stack([self.solver.solve(P[m], how, y0=self.batch.y0[m]) for m in range(self.s)])

    def of(self, Y: np.ndarray) -> Any:
        """``L̄`` of the members' states ``Y``."""
        d = Y - self.observations
        return (np.sum(self.W * d * d) + np.sum(self.C * Y)) / self.s

    def __call__(self, theta: np.ndarray, how: str | None = None) -> Any:
        return self.of(self.solve_all(theta, how))


def _sample_gradient(
    problem: Problem, loss: _SampleLoss, theta0: np.ndarray, h: float
) -> tuple[np.ndarray, list[np.ndarray] | None, list[float] | None]:
    """``∂L̄/∂θ`` at ``θ₀`` by central FD (log space for positive parameters) up to
    ``FULL_FD_MAX_PARAMS`` parameters; beyond, an empty gradient and the FD derivatives
    along seeded directions (:func:`~sciml_bench.problem.reference.directional_central`).
    Returns the gradient, the directions and those derivatives."""
    if problem.n_params > single.FULL_FD_MAX_PARAMS:
        units = single._directions(problem.n_params, problem.content_hash)
        directions, directional = single.directional_central(
            loss, theta0, units, h, np.asarray(problem.log_params))
        return np.zeros(0), directions, directional.tolist()
    return single._fd_gradient(loss, theta0, np.asarray(problem.log_params), h), None, None


def build(problem: Problem, cache: Path | None = None) -> EnsembleReference:
    """Compute the sample reference from scratch (observations may come from the cache)."""
    if problem.ensemble is None:
        raise single.ReferenceError(f"{problem.name!r} has no [ensemble] section")
    start = time.perf_counter()
    method, rtol, atol, h = _tolerances(problem)
    s = problem.ensemble.sample
    loss = _SampleLoss(problem, cache, s, method, rtol, atol)
    theta0 = np.asarray(problem.theta0)
    Y = loss.solve_all(theta0)
    g, directions, directional = _sample_gradient(problem, loss, theta0, h)
    log = np.asarray(problem.log_params)
    agreement, skipped = single.cross_check(problem, lambda z: loss(z, "BDF"), g, theta0, log)
    return EnsembleReference(
        problem=problem.name,
        content_hash=problem.content_hash,
        sample=s,
        method=f"scipy.solve_ivp {method} with exact Jacobian, each of the first {s} members "
        f"alone; central FD (h={h:g}, log space for positive parameters) of the mean loss"
        + single.checked(agreement, skipped),
        rtol=rtol,
        atol=atol,
        t=list(problem.t_save),
        y=Y.tolist(),
        loss=float(loss.of(Y)),
        gradient=g.tolist(),
        gradient_method=(
            "central finite differences of the mean sample loss"
            if directions is None
            else f"central finite differences along {single.N_DIRECTIONS} seeded unit directions"
        ),
        fd_step=h,
        complex_step_agreement=agreement,
        build_s=time.perf_counter() - start,
        directions=None if directions is None else [v.tolist() for v in directions],
        directional_derivatives=directional,
        complex_step_skipped=skipped,
    )


def get(problem: Problem, refresh: bool = False, cache: Path | None = None) -> EnsembleReference:
    """The cached sample reference for ``problem``'s ensemble, built on a miss."""
    assert problem.ensemble is not None, "get() needs a problem with [ensemble]"
    folder = cache or single.cache_dir()
    path = folder / f"{single._key(problem)}-ensemble-s{problem.ensemble.sample}.json"
    if not refresh:
        ref = single._read(path, EnsembleReference)
        if ref is not None:
            ref.cache_path = str(path)
            return ref  # type: ignore[no-any-return]
    ref = build(problem, cache)
    try:
        single._write(path, ref)
        ref.cache_path = str(path)
    except OSError as e:
        warnings.warn(f"could not cache the ensemble reference at {path}: {e}", stacklevel=2)
    return ref
