"""The reference training curve: SciPy's gradient in the same Adam loop, cached.

The training analogue of the reference gradient. From the problem's initial parameters,
``K`` iterations of Adam (:func:`~sciml_bench.problem.training.adam_loop`, the section's
constants) around the forward-sensitivity gradient of
:mod:`sciml_bench.problem.sensitivity`, on the loss every backend trains (the same
observations, from the single-trajectory reference). ``K`` is the section's
``agreement_iterations`` (at most ``iterations``): the window over which a backend's curve
is held to this one (:func:`sciml_bench.measure.training.curve_agreement`). A correct
gradient keeps a backend's curve close to it, within the solver tolerances' difference
(1e-6 against 1e-10; measured: docs/training.md, "Training-level correctness"); a gradient
that is wrong away from θ0 departs.
Adam normalises each step, so the curve cannot see a gradient's magnitude: the reference
also keeps ``θ_k`` and its gradient ``r_k`` at the iterates of :func:`check_iterations`
(0, 1, 3, 7, 15, … below K), where each backend's own gradient is held to ``r_k`` on the
ODE rows' measure and rule (:func:`sciml_bench.measure.training.iterate_gradient_check`:
every component, never projections). Each ``r_k`` says its own error, as the ODE rows'
reference does (:func:`iterate_error`): the larger of its two tolerances' disagreement
(the same forward sensitivities at 10x ``rtol`` and ``atol``) and an independent
cross-check's, the suite's quadrature adjoint (:mod:`~sciml_bench.problem.adjoint`) at the
reference's own tolerances, both on the judged components (``θ_i ∂L/∂θ_i`` for log-space
parameters). Where neither can be made the iterate's estimate is None and its rows are
``unjudged`` (``check_notes`` says why).

Cached by the problem's content hash (which covers ``[training]``) and ``K``, verified by
checksum when read, as the single-trajectory reference is.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sciml_bench.problem import reference as single
from sciml_bench.problem.adjoint import AdjointError, adjoint_gradient
from sciml_bench.problem.blas_threads import serial_blas_when_small
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.problem.gradient_measures import judged_scale, norm_error
from sciml_bench.problem.sensitivity import Sensitivities, SensitivityError
from sciml_bench.problem.spec import Problem
from sciml_bench.problem.training import Training, adam_loop

#: bump when the reference curve's algorithm changes, so old cache entries are not reused
#: (4: each check iterate's gradient says its own error, tolerance pair and adjoint
#: cross-check; no directional projections)
VERSION = 4


def check_iterations(k: int) -> list[int]:
    """The iterates whose gradients are compared: ``0`` and ``2^j − 1`` below ``k``
    (log-spaced, so a gradient wrong only away from θ0 is met early and late)."""
    return sorted({0, *(2**j - 1 for j in range(1, 32) if 2**j - 1 < k)} & set(range(k)))


@dataclass
class TrainingReference:
    problem: str
    content_hash: str
    #: K, the iterations run
    iterations: int
    #: ``loss[k] = L(θ_k)``, θ_0 the problem's initial parameters
    loss: list[float]
    method: str
    build_s: float
    #: why the curve is shorter than K (a sensitivity solve failed), else ""
    stopped: str = ""
    cached: bool = False
    #: the iterations of :func:`check_iterations` the curve reached, ``θ_k`` there and
    #: the reference gradient ``r_k = ∇L(θ_k)`` (natural units, declaration order)
    check_iterations: list[int] = field(default_factory=list)
    check_theta: list[list[float]] = field(default_factory=list)
    check_grad: list[list[float]] = field(default_factory=list)
    #: each check iterate's gradient's own error estimate on the tiers' measure, the larger
    #: of the two parts below (None: neither could be made, the iterate is unjudged)
    check_error: list[float | None] = field(default_factory=list)
    #: its two tolerances' disagreement (None: the looser solve failed) and the quadrature
    #: adjoint's (None: the adjoint failed), norm-wise on the judged components
    check_tolerance_error: list[float | None] = field(default_factory=list)
    check_cross_check: list[float | None] = field(default_factory=list)
    #: what made each estimate, and why a part is missing ("" when both were made)
    check_method: str = ""
    check_notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@serial_blas_when_small
def build(problem: Problem, ref: single.Reference, training: Training) -> TrainingReference:
    """Run the reference loop for ``training.compared`` iterations (no cache), then each
    check iterate's gradient's own error (:func:`iterate_error`)."""
    start = time.perf_counter()
    cp = single.compile_problem(problem, ref)
    sens = Sensitivities(problem, cp)
    k = training.compared
    losses: list[float] = []
    stopped = ""
    wanted = set(check_iterations(k))
    at: list[int] = []
    thetas: list[list[float]] = []
    grads: list[list[float]] = []

    def recorded(theta: Any) -> tuple[float, Any]:
        loss, g = sens.loss_and_grad(theta)
        if len(losses) in wanted:
            at.append(len(losses))
            thetas.append([float(x) for x in theta])
            grads.append([float(x) for x in g])
        losses.append(loss)
        return loss, g

    try:
        adam_loop(recorded, problem.theta0, training.adam, k)
    except SensitivityError as e:
        stopped = f"stopped at iteration {len(losses)}: {e}"
    estimates = [iterate_error(problem, cp, sens, t, g) for t, g in zip(thetas, grads, strict=True)]
    return TrainingReference(
        problem=problem.name,
        content_hash=problem.content_hash,
        iterations=k,
        loss=losses,
        method=f"Adam (NumPy) around {sens.description}",
        build_s=time.perf_counter() - start,
        stopped=stopped,
        check_iterations=at,
        check_theta=thetas,
        check_grad=grads,
        check_error=[e.error for e in estimates],
        check_tolerance_error=[e.tolerance for e in estimates],
        check_cross_check=[e.cross for e in estimates],
        check_method=ESTIMATE_METHOD.format(rtol=10 * sens.rtol),
        check_notes=[e.note for e in estimates],
    )


#: how each check iterate's estimate is made (``check_method``)
ESTIMATE_METHOD = ("the larger of the forward sensitivities' disagreement with themselves at "
                   "rtol {rtol:g} (10x rtol and atol) and the quadrature adjoint's at the "
                   "reference's own rtol and atol (an independent cross-check), norm-wise on "
                   "the judged components")  # fmt: skip


@dataclass(frozen=True)
class Estimate:
    """One iterate's gradient's own error: the larger of its parts (None: neither made)."""

    tolerance: float | None
    cross: float | None
    note: str = ""

    @property
    def error(self) -> float | None:
        parts = [x for x in (self.tolerance, self.cross) if x is not None]
        return max(parts) if parts else None


def iterate_error(
    problem: Problem, cp: CompiledProblem, sens: Sensitivities, theta: Any, g: Any
) -> Estimate:
    """The error of ``g``, the reference gradient at ``theta`` by ``sens`` (module doc):
    the same forward sensitivities at 10x its ``rtol`` and ``atol``, and the quadrature
    adjoint at its own (independent of their error control: a bias both tolerances share
    shows there), each ``‖s ⊙ (g_x − g)‖ / ‖s ⊙ g‖`` with ``s`` the judged scale at θ."""
    theta, g = np.asarray(theta, float), np.asarray(g, float)
    scale = judged_scale(theta, cp.log_params)
    notes = []
    loose = Sensitivities(problem, cp, 10 * sens.rtol)
    loose.atol, loose.method = 10 * sens.atol, sens.method
    try:
        tolerance: float | None = norm_error(loose.loss_and_grad(theta)[1] * scale, g * scale)
    except (SensitivityError, ArithmeticError, ValueError) as e:
        tolerance = None
        notes.append(f"the looser forward sensitivities failed: {' '.join(str(e).split())[:160]}")
    at = dataclasses.replace(problem, theta0=tuple(float(x) for x in theta))
    try:
        _, g_adj = adjoint_gradient(at, (cp.loss_W, cp.loss_O, cp.loss_C), sens.rtol, sens.atol,
                                    sens.method)  # fmt: skip
        cross: float | None = norm_error(np.asarray(g_adj) * scale, g * scale)
    except (AdjointError, ArithmeticError, ValueError, MemoryError) as e:
        cross = None
        notes.append(f"the adjoint cross-check failed: {' '.join(str(e).split())[:160]}")
    return Estimate(tolerance, cross, "; ".join(notes))


def get(
    problem: Problem, ref: single.Reference, training: Training, refresh: bool = False,
    cache: Path | None = None,
) -> TrainingReference:  # fmt: skip
    """The cached reference curve of ``problem`` under ``training``, built on a miss."""
    folder = cache or single.cache_dir()
    path = folder / f"{single._key(problem)}-training-k{training.compared}-v{VERSION}.json"
    # a stopped curve is not cached: a failed solve may be this machine's, not the problem's
    return single.cached(path, TrainingReference, refresh,  # type: ignore[no-any-return]
                         lambda: build(problem, ref, training), "training reference",
                         keep=lambda out: not out.stopped)  # fmt: skip
