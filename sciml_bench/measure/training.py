"""Training metrics: time to the target loss, and how far a loss curve is from the reference's.

A training loop reports, for iteration ``k`` (θ_0 the initial parameters), the loss
``L_k = L(θ_k)`` computed by that iteration's gradient and the timed seconds ``s_k`` of the
iteration (gradient and optimizer update; iteration 0 includes any compilation).

**Time to target**, one clock for every backend, from the start of the build (the
``build`` phase: the case, its optimizer, and whatever the library compiles there, as
diffsol's JIT and CasADi's function construction do). ``k*`` is the first iteration with
``L_k ≤ target``; with ``b`` the build's seconds,

    T = b + Σ_{i ≤ k*} s_i

so a library that compiles in its build (diffsol, CVODES) and one that compiles in its
first iteration (JAX) are timed alike (:data:`CLOCK`). The *warm* figure is what the same
iterations take with every one-off cost removed: no build, and the first iteration
counted at the typical iteration's cost but never above its own,

    T_warm = min(s_0, median(s_1, …)) + Σ_{1 ≤ i ≤ k*} s_i  ≤  T

(a first iteration that happened to be faster than the median must not make the warm
figure the larger one).

**Curve agreement** over the first ``K`` iterations against the reference curve ``R``
(SciPy's gradient in the same Adam loop, :mod:`sciml_bench.problem.training_reference`):

    dev_k = |L_k − R_k| / max(|R_k|, tiny)

``deviation`` is ``max_k dev_k``; the curve *departed* at the first ``k`` with
``dev_k > DEPART_TOL``; tiers: ``pass`` ≤ :data:`PASS_TOL`, ``warn`` ≤ :data:`DEPART_TOL`,
else ``fail``. Backends at rtol 1e-6 stay within about 1e-4 of the reference over 20
iterations of the spiral (their gradients differ from it by the solver tolerance). The
curve cannot see a gradient's magnitude under Adam, which normalises every step, so the
gradients themselves are compared too.

**Gradients at iterates.** At a few iterates ``θ_k`` of the reference curve
(:func:`sciml_bench.problem.training_reference.check_iterations`: 0, 1, 3, 7, 15, …
below K) the backend's gradient ``g_k`` (its ODE case, after the training, untimed) is
held to the reference's ``r_k`` by the ODE rows' measure: the norm-wise ``rel`` of
:func:`sciml_bench.measure.metrics.gradient_error` (log-space components where the
parameter is differentiated in log space) or, beyond 64 parameters, of
:func:`~sciml_bench.measure.metrics.directional_error` along the reference's 8 seeded
directions (component by component, solver error at rtol 1e-6 makes the spiral's small
weights' components 1e-3 to 4e-2 off: its 252 components are not all resolved); the row keeps the worst iterate and
its tier (:func:`sciml_bench.measure.metrics.gradient_tier`, :func:`iterate_gradient_check`):
a 1 % error over the whole gradient is ``rel = 1e-2``, outside the pass tier (1e-4).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PASS_TOL = 1e-3
DEPART_TOL = 1e-2
#: the clock of ``time_to_target_s``, as the record names it
CLOCK = "build start: build + timed iterations to the target (compilation included)"


@dataclass(frozen=True)
class Agreement:
    """A curve against the reference over the iterations both have, within the first K."""

    #: max relative deviation (NaN when nothing could be compared)
    deviation: float
    #: the first iteration whose deviation exceeds :data:`DEPART_TOL`, or None
    departed_at: int | None
    #: iterations compared
    compared: int
    tier: str


def curve_agreement(
    iterations: Sequence[int], losses: Sequence[float], reference: Sequence[float], k: int
) -> Agreement:
    """Hold the points ``(iterations[j], losses[j])`` with iteration ``< k`` to
    ``reference[iteration]``; a non-finite loss departs where it appears."""
    pairs = [(int(i), float(v)) for i, v in zip(iterations, losses, strict=True)
             if int(i) < min(k, len(reference))]  # fmt: skip
    if not pairs:
        return Agreement(float("nan"), None, 0, "")
    it = np.array([i for i, _ in pairs])
    ref = np.asarray(reference, dtype=float)[it]
    got = np.array([v for _, v in pairs])
    dev = np.abs(got - ref) / np.maximum(np.abs(ref), 1e-300)
    dev[~np.isfinite(dev)] = np.inf
    over = np.flatnonzero(dev > DEPART_TOL)
    worst = float(np.max(dev))
    tier = "pass" if worst <= PASS_TOL else "warn" if worst <= DEPART_TOL else "fail"
    return Agreement(worst, int(it[over[0]]) if over.size else None, len(pairs), tier)


@dataclass(frozen=True)
class TimeToTarget:
    """When a run's loss first reached the target (all None when it did not)."""

    iteration: int | None
    seconds: float | None
    warm_seconds: float | None


def time_to_target(
    iteration: int | None, seconds: Sequence[float], build_s: float = 0.0
) -> TimeToTarget:
    """The wall time to ``iteration`` (the first at the target) on :data:`CLOCK`: the
    build's ``build_s`` plus the per-iteration ``seconds`` up to it (``seconds``), and the
    warm figure without the build and with the first iteration at
    ``min(s_0, median(s_1, …))`` (``warm_seconds``, None with a single iteration)."""
    s = np.asarray(seconds, dtype=float)
    if iteration is None or iteration >= s.size:
        return TimeToTarget(None, None, None)
    build = float(build_s) if np.isfinite(build_s) else 0.0
    iterations = float(np.sum(s[: iteration + 1]))
    warm = None
    if s.size > 1:
        warm = iterations - float(s[0]) + min(float(s[0]), float(np.median(s[1:])))
    return TimeToTarget(iteration, build + iterations, warm)


@dataclass(frozen=True)
class IterateCheck:
    """The backend's gradients against the reference's at the reference iterates."""

    #: the iterations compared, and ``rel`` at each (NaN where a gradient is missing)
    iterations: tuple[int, ...]
    errors: tuple[float, ...]

    @property
    def worst(self) -> float | None:
        """The largest error (NaN beats every number), None when nothing was compared."""
        if not self.errors:
            return None
        e = np.asarray(self.errors, dtype=float)
        return float("nan") if np.isnan(e).any() else float(np.max(e))

    @property
    def worst_at(self) -> int | None:
        if not self.errors:
            return None
        e = np.nan_to_num(np.asarray(self.errors, dtype=float), nan=np.inf)
        return self.iterations[int(np.argmax(e))]

    @property
    def tier(self) -> str:
        from sciml_bench.measure.metrics import gradient_tier

        return gradient_tier(self.worst) if self.errors else ""


def iterate_gradient_check(
    iterations: Sequence[int], thetas: Sequence[Sequence[float]],
    reference: Sequence[Sequence[float]], got: Sequence[Sequence[float]],
    log_params: Sequence[bool], directions: Sequence[Sequence[float]] = (),
) -> IterateCheck:  # fmt: skip
    """The norm-wise ``rel`` of ``got[j]`` against ``reference[j]`` at ``thetas[j]`` (iteration
    ``iterations[j]``), pairs beyond the shorter list left out: component by component, or
    along the unit ``directions`` ``v_i`` where given (``g·v_i`` against ``r·v_i``, as an
    ODE row with many parameters is held to its directional reference)."""
    from sciml_bench.measure.metrics import directional_error, gradient_error

    n = min(len(iterations), len(thetas), len(reference), len(got))
    V = np.asarray(directions, dtype=float)

    def one(j: int) -> float:
        g, r = np.asarray(got[j], float), np.asarray(reference[j], float)
        if V.size:
            return directional_error(g, V, V @ r)["rel"]
        return gradient_error(g, r, np.asarray(thetas[j], float),
                              np.asarray(log_params, bool))["rel"]  # fmt: skip

    return IterateCheck(tuple(int(k) for k in iterations[:n]), tuple(one(j) for j in range(n)))
