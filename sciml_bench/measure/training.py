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
else ``fail``. Backends at rtol 1e-6 stay well inside :data:`PASS_TOL` of the reference
(their gradients differ from it by the solver tolerance; measured: docs/training.md,
"Training-level correctness"). The
curve cannot see a gradient's magnitude under Adam, which normalises every step, so the
gradients themselves are compared too.

**Gradients at iterates.** At a few iterates ``θ_k`` of the reference curve
(:func:`sciml_bench.problem.training_reference.check_iterations`: 0, 1, 3, 7, 15, …
below K) the backend's gradient ``g_k`` (its ODE case, after the training, untimed) is
held to the reference's ``r_k`` on the ODE rows' measure and rule, by the same functions:
the norm-wise ``rel`` of :func:`sciml_bench.measure.metrics.gradient_error` on every
component (log-space components where the parameter is differentiated in log space; no
projections at any size), and the tier of :func:`sciml_bench.measure.metrics.gradient_tier`
against the reference's own error ``ε_k`` there (its tolerance pair and adjoint
cross-check, :func:`~sciml_bench.problem.training_reference.iterate_error`). The row keeps
the worst iterate's ``rel``, the largest ``ε_k`` (None if any iterate has none) and their
tier: ``within(max_k rel_k, max_k ε_k, E)`` holds exactly where every iterate is within
``E`` with its own estimate at most ``E/10``, and ``max rel − max ε > 1e-2`` implies some
iterate's ``rel_k − ε_k > 1e-2``, so the row's tier is what the iterates' would give. The
worst iterate's worst component is named, as an ODE row's (:func:`iterate_gradient_check`).
A 1 % error over the whole gradient is ``rel = 1e-2``, outside the pass tier (1e-4).
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
    #: the reference's own error at each (None: it has no estimate there)
    reference_errors: tuple[float | None, ...] = ()
    #: at each, the worst component's error and its index (-1: none)
    worst_components: tuple[tuple[float, int], ...] = ()

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
        return self.iterations[self._worst_index()]

    def _worst_index(self) -> int:
        return int(np.argmax(np.nan_to_num(np.asarray(self.errors, dtype=float), nan=np.inf)))

    @property
    def reference_error(self) -> float | None:
        """The largest of the reference's own errors (None if any iterate has none)."""
        if not self.errors or len(self.reference_errors) != len(self.errors):
            return None
        if any(e is None for e in self.reference_errors):
            return None
        return float(max(self.reference_errors))  # type: ignore[type-var]

    @property
    def worst_component(self) -> tuple[float, int] | None:
        """The worst iterate's worst component ``(error, index)``, where compared."""
        if not self.errors or len(self.worst_components) != len(self.errors):
            return None
        return self.worst_components[self._worst_index()]

    @property
    def tier(self) -> str:
        """The ODE rows' tier of the worst error against the largest reference error."""
        from sciml_bench.measure.metrics import gradient_tier

        return gradient_tier(self.worst, self.reference_error) if self.errors else ""

    @property
    def tier_note(self) -> str:
        """Why the check is ``unjudged`` ("" when it is judged)."""
        from sciml_bench.measure.metrics import tier_note

        return tier_note(self.worst, self.reference_error) if self.errors else ""


def iterate_gradient_check(
    iterations: Sequence[int], thetas: Sequence[Sequence[float]],
    reference: Sequence[Sequence[float]], got: Sequence[Sequence[float]],
    log_params: Sequence[bool], reference_errors: Sequence[float | None] = (),
) -> IterateCheck:  # fmt: skip
    """``got[j]`` against ``reference[j]`` at ``thetas[j]`` (iteration ``iterations[j]``) on
    the ODE rows' measure, every component (:func:`~sciml_bench.measure.metrics.gradient_error`),
    with the reference's own error there (``reference_errors[j]``; none given: None, so
    the check is ``unjudged``); pairs beyond the shorter list left out."""
    from sciml_bench.measure.metrics import gradient_error

    n = min(len(iterations), len(thetas), len(reference), len(got))
    own = list(reference_errors) + [None] * n
    scores = [gradient_error(np.asarray(got[j], float), np.asarray(reference[j], float),
                             np.asarray(thetas[j], float), np.asarray(log_params, bool))
              for j in range(n)]  # fmt: skip
    return IterateCheck(
        tuple(int(k) for k in iterations[:n]), tuple(float(e["rel"]) for e in scores),
        tuple(None if own[j] is None else float(own[j]) for j in range(n)),  # type: ignore[arg-type]
        tuple((float(e["worst"]), int(e["worst_index"])) for e in scores),
    )
