"""The reference training curve: SciPy's gradient in the same Adam loop, cached.

The training analogue of the reference gradient. From the problem's initial parameters,
``K`` iterations of Adam (:func:`~sciml_bench.problem.training.adam_loop`, the section's
constants) around the forward-sensitivity gradient of
:mod:`sciml_bench.problem.sensitivity`, on the loss every backend trains (the same
observations, from the single-trajectory reference). ``K`` is the section's
``agreement_iterations`` (at most ``iterations``): the window over which a backend's curve
is held to this one (:func:`sciml_bench.measure.training.curve_agreement`). A correct
gradient keeps a backend's curve within about 1e-4 of it over 20 iterations (the solver
tolerances differ: 1e-6 against 1e-10); a gradient that is wrong away from θ0 departs.
Adam normalises each step, so the curve cannot see a gradient's magnitude: the reference
also keeps ``θ_k`` and its gradient ``r_k`` at the iterates of :func:`check_iterations`
(0, 1, 3, 7, 15, … below K), where each backend's own gradient is held to ``r_k``
(:func:`sciml_bench.measure.training.iterate_gradient_check`), component by component or,
beyond ``FULL_FD_MAX_PARAMS`` parameters, along the single-trajectory reference's seeded
directions, as the ODE rows' gradients are.

Cached by the problem's content hash (which covers ``[training]``) and ``K``, verified by
checksum when read, as the single-trajectory reference is.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sciml_bench.problem import reference as single
from sciml_bench.problem.sensitivity import Sensitivities, SensitivityError
from sciml_bench.problem.spec import Problem
from sciml_bench.problem.training import Training, adam_loop

#: bump when the reference curve's algorithm changes, so old cache entries are not reused
VERSION = 3


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
    #: the single-trajectory reference's seeded unit directions where it has them (more
    #: than ``FULL_FD_MAX_PARAMS`` parameters): gradients are compared along them there,
    #: as the ODE rows' are; empty: component by component
    check_directions: list[list[float]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def build(problem: Problem, ref: single.Reference, training: Training) -> TrainingReference:
    """Run the reference loop for ``training.compared`` iterations (no cache)."""
    start = time.perf_counter()
    sens = Sensitivities(problem, single.compile_problem(problem, ref))
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
        check_directions=[[float(x) for x in v] for v in ref.directions or []],
    )


def get(
    problem: Problem, ref: single.Reference, training: Training, refresh: bool = False,
    cache: Path | None = None,
) -> TrainingReference:  # fmt: skip
    """The cached reference curve of ``problem`` under ``training``, built on a miss."""
    folder = cache or single.cache_dir()
    path = folder / f"{single._key(problem)}-training-k{training.compared}-v{VERSION}.json"
    if not refresh:
        found = single._read(path, TrainingReference)
        if found is not None:
            return found  # type: ignore[no-any-return]
    out = build(problem, ref, training)
    if out.stopped:  # not cached: a failed solve may be this machine's, not the problem's
        return out
    try:
        single._write(path, out)
    except OSError as e:
        warnings.warn(f"could not cache the training reference at {path}: {e}", stacklevel=2)
    return out
