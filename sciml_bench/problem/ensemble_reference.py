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

**Reference** for the first ``sample`` members, the rows' judge as every ODE row's is
(:mod:`sciml_bench.problem.reference_gradient`). The loss is the one the rows compute, the
mean over the sample (:class:`_SampleLoss`, weights ``1/s`` on each member)

    L̄(θ) = (1/s) Σ_{m<s} L_m(θ_m),   θ_m = θ ⊙ S_m + A_m,
    ∂L̄/∂θ = (1/s) Σ_{m<s} S_m ⊙ ∂L_m/∂θ_m

(``S_m``, ``A_m`` the member's scale and shift, :class:`~sciml_bench.problem.ensemble.Batch`;
a shift does not move the derivative). Each member is a problem of its own (its ``θ_m``
and initial state, its own data), its full gradient by the suite's forward sensitivities
or quadrature adjoint (:func:`~sciml_bench.problem.reference_gradient.full_gradient`, with
its fallbacks) at the reference's rtol, and once more by the same method at 10x the
tolerances it succeeded at; the two member sums are the reference and its tolerance
pair, never a difference quotient of the loss. Its own error ``reference_error`` is, as a
single trajectory's, the larger of the pair's disagreement on the judged components
(``θ_i ∂L̄/∂θ_i`` for log-space parameters) and an independent cross-check's (:func:`_check`):
complex step through BDF of the mean loss (analytic, at most 16 parameters), else the
suite's quadrature adjoint of every member at the tight settings (members by forward
sensitivities), else the gradient's projections on 8 seeded directions against central
differences along them. A member whose gradient cannot be made leaves the rows unjudged
(``gradient_missing`` says which and why). The solution (``y``) is each member solved alone
by ``solve_ivp`` with the single-trajectory reference's method, tolerances and exact
Jacobian. Cached by content hash, :data:`VERSION` and sample size.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sciml_bench.problem import codegen
from sciml_bench.problem import ensemble as ens
from sciml_bench.problem import reference as single
from sciml_bench.problem.adjoint import AdjointError, adjoint_gradient
from sciml_bench.problem.blas_threads import serial_blas_when_small
from sciml_bench.problem.gradient_measures import judged_scale, norm_error
from sciml_bench.problem.reference_gradient import (
    FullGradient,
    _one,
    check_text,
    directional_agreement,
    full_gradient,
)
from sciml_bench.problem.sensitivity import SensitivityError
from sciml_bench.problem.spec import Problem

#: members per stacked observation solve; fixed, so observations are prefix-stable
OBS_CHUNK = 1024
OBS_VERSION = 1
#: the ensemble reference's algorithm, in its cache key: bump when it or its fields change
#: (2: a full gradient per member by forward sensitivities or the adjoint at two
#: tolerances, with its own error estimate; 1, unnumbered: central differences of the mean
#: loss, 8 directions above 64 parameters, no estimate)
VERSION = 2


@dataclass
class EnsembleReference:
    """The sample's reference: its solution, the full gradient of its mean loss, that
    gradient's own error estimate and how each was made (the fields a row's
    :func:`~sciml_bench.run.ode.reference_columns` reads, as a single trajectory's)."""

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
    #: ∂L̄/∂θ in natural units, every component (empty where ``gradient_missing``)
    gradient: list[float]
    #: what made it: "forward sensitivities", "adjoint" (per member), or "none"
    gradient_method: str
    #: the central-difference step of a directional cross-check
    fd_step: float
    complex_step_agreement: float | None
    build_s: float
    cached: bool = False
    #: a directional cross-check's natural-units directions and the derivatives it
    #: measured along them (None where another check ran)
    directions: list[list[float]] | None = None
    directional_derivatives: list[float] | None = None
    #: why the complex-step cross-check did not run ("" when it ran)
    complex_step_skipped: str = ""
    #: the cache file this reference was read from or written to ("" when neither)
    cache_path: str = ""
    #: the gradient's own error estimate on the tiers' measure (None: no gradient)
    reference_error: float | None = None
    #: the two tolerances' disagreement (norm-wise relative, judged components)
    tolerance_error: float | None = None
    #: the cross-check that ran ("" none) and its agreement with the gradient
    cross_check: str = ""
    cross_check_agreement: float | None = None
    #: what a row's gradient is checked against: "full" ("" where there is no gradient)
    gradient_check: str = ""
    #: why there is no reference gradient ("" when there is): the rows are unjudged
    gradient_missing: str = ""
    #: always "": a sample whose solution fails raises :class:`~.reference.ReferenceError`
    missing: str = ""
    version: int = VERSION

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
    alone from its own initial state at ``θ ⊙ S_m + A_m``, ``O_m`` its observations (the
    problem's ``O`` for every member of a ``final`` loss)."""

    def __init__(
        self, problem: Problem, cache: Path | None, s: int, method: str, rtol: float, atol: float
    ):
        assert problem.ensemble is not None
        obs = load_observations(observations_path(problem, s, cache), s)
        self.W, self.O, self.C = loss_arrays(problem, obs)
        self.batch = ens.batch(problem.ensemble, np.asarray(problem.y0), problem.n_params, s, obs)
        self.per_member = self.batch.observations is not None
        self.observations = self.batch.observations if self.per_member else self.O
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

    def member(
        self, problem: Problem, m: int
    ) -> tuple[Problem, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Member ``m`` as a problem of its own, at ``θ_m = θ₀ ⊙ S_m + A_m`` from its own
        initial state, and its loss arrays ``(W, O_m, C)``: what the suite's gradient
        routines take (they differentiate at a problem's ``theta0``)."""
        theta = np.asarray(problem.theta0, float) * self.batch.scale[m] + self.batch.shift[m]
        pm = dataclasses.replace(problem, theta0=tuple(float(x) for x in theta),
                                 y0=tuple(float(x) for x in self.batch.y0[m]))  # fmt: skip
        O_m = self.observations[m] if self.per_member else self.O
        return pm, (self.W, O_m, self.C)


@dataclass
class _Pair:
    """The mean sample loss's gradient (natural units) at the reference's tolerances and
    at 10x them, what made it (each distinct member text and how many members it made),
    or why there is none."""

    tight: np.ndarray
    loose: np.ndarray
    kinds: dict[str, int] = field(default_factory=dict)
    texts: dict[str, int] = field(default_factory=dict)
    #: each member's tight ``(method, rtol, atol)`` (what the adjoint check runs at)
    settings: list[tuple[str, float, float]] = field(default_factory=list)
    missing: str = ""


#: what a member's sensitivity or adjoint solve raises when it fails
_SOLVE_ERRORS = (SensitivityError, AdjointError, ArithmeticError, ValueError, MemoryError)


def _member_pair(
    pm: Problem, arrays: tuple[np.ndarray, np.ndarray, np.ndarray], rtol: float, atol: float,
    method: str,
) -> tuple[FullGradient, np.ndarray] | str:
    """One member's full gradient (:func:`full_gradient`: forward sensitivities or the
    adjoint, its fallbacks) and the same method's at 10x the tolerances it succeeded at
    (``full_gradient`` keeps only the tighter of its own pair; the member sum needs both
    vectors); or why there is none."""
    full = full_gradient(pm, arrays, rtol, atol, method)
    if full.missing or full.settings is None:
        return full.missing or "no gradient"
    how, r, a = full.settings
    forward = full.kind == "forward sensitivities"
    try:
        loose = _one(pm, arrays, 10 * r, 10 * a, how, forward)
    except _SOLVE_ERRORS as e:
        return f"{full.kind} at rtol {10 * r:g}: {' '.join(str(e).split())[:160]}"
    if not np.all(np.isfinite(loose)):
        return f"{full.kind} at rtol {10 * r:g}: a non-finite gradient"
    return full, np.asarray(loose, float)


def _sample_pair(
    problem: Problem, loss: _SampleLoss, rtol: float, atol: float, method: str
) -> _Pair:
    """``∂L̄/∂θ = (1/s) Σ_m S_m ⊙ ∂L_m/∂θ_m`` at both tolerances (module doc), member by
    member; the first member without a gradient ends it (``missing`` names it)."""
    pair = _Pair(np.zeros(problem.n_params), np.zeros(problem.n_params))
    for m in range(loss.s):
        pm, arrays = loss.member(problem, m)
        got = _member_pair(pm, arrays, rtol, atol, method)
        if isinstance(got, str):
            return _Pair(np.zeros(0), np.zeros(0), missing=f"member {m}: {got}")
        full, loose = got
        chain = loss.batch.scale[m] / loss.s  # ∂θ_m/∂θ, and the mean's weight
        pair.tight += chain * full.g
        pair.loose += chain * loose
        pair.kinds[full.kind] = pair.kinds.get(full.kind, 0) + 1
        pair.texts[full.text] = pair.texts.get(full.text, 0) + 1
        pair.settings.append(full.settings)  # type: ignore[arg-type]
    return pair


def _adjoint_sum(problem: Problem, loss: _SampleLoss, pair: _Pair) -> np.ndarray:
    """``(1/s) Σ_m S_m ⊙ ∂L_m/∂θ_m`` by the quadrature adjoint of every member at the
    tight settings its forward sensitivities ran at."""
    out = np.zeros(problem.n_params)
    for m, (how, r, a) in enumerate(pair.settings):
        pm, arrays = loss.member(problem, m)
        out += loss.batch.scale[m] / loss.s * np.asarray(adjoint_gradient(pm, arrays, r, a,
                                                                          how)[1])  # fmt: skip
    return out


def _check(problem: Problem, loss: _SampleLoss, pair: _Pair, h: float) -> Any:
    """The independent cross-check of ``pair.tight`` (a :class:`~.reference._Check`): complex
    step of the mean loss through BDF where it runs (:func:`~.reference.cross_check`), else
    the quadrature adjoint of every member (all by forward sensitivities), else 8 seeded
    directions against central differences of the mean loss along them."""
    theta0, log = np.asarray(problem.theta0, float), np.asarray(problem.log_params)
    agreement, skipped = single.cross_check(problem, lambda z: loss(z, "BDF"), pair.tight,
                                            theta0, log)  # fmt: skip
    if agreement is not None:
        return single._Check("complex-step", agreement)
    scale = judged_scale(theta0, log)
    try:
        if set(pair.kinds) == {"forward sensitivities"}:
            adj = _adjoint_sum(problem, loss, pair)
            return single._Check(single.ADJOINT_CHECK, norm_error(adj * scale, pair.tight * scale),
                                 skipped)  # fmt: skip
        units = single._directions(problem.n_params, problem.content_hash)
        w, d, _ = single.directional_fd(lambda z: loss(z, "BDF"), theta0, units, h, log)
    except (*_SOLVE_ERRORS, single.ReferenceError) as e:
        first = " ".join(str(e).split())[:200]
        return single._Check(skipped=f"{skipped}; the cross-check failed: {first}")
    kind = f"{single.N_DIRECTIONS}-direction central-difference"
    return single._Check(kind, directional_agreement(pair.tight, w, d), skipped, w, d)


def _method_text(method: str, s: int, pair: _Pair, check: Any, error: float | None) -> str:
    """The ``method`` string: the solves, each member's gradient, the check, the estimate."""
    text = (f"scipy.solve_ivp {method} with exact Jacobian, each of the first {s} members "
            "alone; gradient of the mean loss, (1/s) sum of S_m * dL_m/dtheta_m: ")  # fmt: skip
    if pair.missing:
        return text + f"none ({pair.missing})"
    made = "; ".join(f"{t} ({n} of {s} members)" for t, n in pair.texts.items())
    text += made + check_text(check.kind, check.agreement, check.skipped)
    return text + f"; the gradient's own error estimate {error:.2g} (norm-wise relative)"


def _gradient_tolerances(problem: Problem, rtol: float, atol: float) -> tuple[float, float]:
    """The gradient pair's tight tolerances: ``[reference] gradient_rtol`` where set (atol
    in proportion), else the solution's, as a single trajectory's reference."""
    g = float(problem.reference.get("gradient_rtol", rtol))
    return g, atol * g / rtol


@serial_blas_when_small
def build(problem: Problem, cache: Path | None = None) -> EnsembleReference:
    """Compute the sample reference from scratch (observations may come from the cache)."""
    if problem.ensemble is None:
        raise single.ReferenceError(f"{problem.name!r} has no [ensemble] section")
    start = time.perf_counter()
    method, rtol, atol, h = _tolerances(problem)
    s = problem.ensemble.sample
    loss = _SampleLoss(problem, cache, s, method, rtol, atol)
    Y = loss.solve_all(np.asarray(problem.theta0))
    pair = _sample_pair(problem, loss, *_gradient_tolerances(problem, rtol, atol), method)
    if pair.missing:
        check, tol_error, error = single._Check(skipped="not run: there is no reference "
                                                "gradient"), None, None  # fmt: skip
    else:
        scale = judged_scale(problem.theta0, problem.log_params)
        tol_error = norm_error(pair.loose * scale, pair.tight * scale)
        check = _check(problem, loss, pair, h)
        error = max(tol_error, check.agreement or 0.0)
    return EnsembleReference(
        problem=problem.name, content_hash=problem.content_hash, sample=s,
        method=_method_text(method, s, pair, check, error), rtol=rtol, atol=atol,
        t=list(problem.t_save), y=Y.tolist(), loss=float(loss.of(Y)),
        gradient=pair.tight.tolist(),
        gradient_method=" and ".join(pair.kinds) or "none", fd_step=h,
        complex_step_agreement=check.agreement if check.kind == "complex-step" else None,
        build_s=time.perf_counter() - start,
        directions=_floats(check.directions),
        directional_derivatives=None if check.derivatives is None else list(check.derivatives),
        complex_step_skipped="" if check.kind == "complex-step" else check.skipped,
        reference_error=error, tolerance_error=tol_error, cross_check=check.kind,
        cross_check_agreement=check.agreement, gradient_check="" if pair.missing else "full",
        gradient_missing=pair.missing,
    )  # fmt: skip


def _floats(vectors: Any) -> list[list[float]] | None:
    """Vectors as JSON lists (None stays None)."""
    return None if vectors is None else [[float(x) for x in v] for v in vectors]


def cache_name(problem: Problem) -> str:
    """The cache file's name: the problem's key (name, content hash, single-trajectory
    reference version), this reference's :data:`VERSION` and the sample size."""
    assert problem.ensemble is not None
    return f"{single._key(problem)}-ensemble-v{VERSION}-s{problem.ensemble.sample}.json"


def get(problem: Problem, refresh: bool = False, cache: Path | None = None) -> EnsembleReference:
    """The cached sample reference for ``problem``'s ensemble, built on a miss."""
    assert problem.ensemble is not None, "get() needs a problem with [ensemble]"
    path = (cache or single.cache_dir()) / cache_name(problem)
    return single.cached(path, EnsembleReference, refresh, lambda: build(problem, cache),
                         "ensemble reference")  # type: ignore[no-any-return]  # fmt: skip
