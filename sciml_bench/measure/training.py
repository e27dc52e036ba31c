"""Training metrics: time to the target loss, and how far a loss curve is from the reference's.

A training loop reports, for iteration ``k`` (θ_0 the initial parameters), the loss
``L_k = L(θ_k)`` computed by that iteration's gradient and the timed seconds ``s_k`` of the
iteration (gradient and optimizer update; iteration 0 includes any compilation).

**Time to target.** ``k*`` is the first iteration with ``L_k ≤ target``. Its wall time
is ``T = Σ_{i ≤ k*} s_i``, from the first iteration's start, compilation included; the
*warm* figure counts the first iteration at the median of the others,
``T_warm = T − s_0 + median(s_1, …)``: what the run would take with its compilation
excluded.

**Curve agreement** over the first ``K`` iterations against the reference curve ``R``
(SciPy's gradient in the same Adam loop, :mod:`sciml_bench.problem.training_reference`):

    dev_k = |L_k − R_k| / max(|R_k|, tiny)

``deviation`` is ``max_k dev_k``; the curve *departed* at the first ``k`` with
``dev_k > DEPART_TOL``; tiers: ``pass`` ≤ :data:`PASS_TOL`, ``warn`` ≤ :data:`DEPART_TOL`,
else ``fail``. Backends at rtol 1e-6 stay within about 1e-4 of the reference over 20
iterations of the spiral (their gradients differ from it by the solver tolerance); a
gradient that is wrong by 1% departs within a few iterations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PASS_TOL = 1e-3
DEPART_TOL = 1e-2


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


def time_to_target(iteration: int | None, seconds: Sequence[float]) -> TimeToTarget:
    """The wall time to ``iteration`` (the first at the target) from the per-iteration
    ``seconds``, with the first iteration's compilation (``seconds``) and without it
    (``warm_seconds``: the first iteration counted at the median of the others)."""
    s = np.asarray(seconds, dtype=float)
    if iteration is None or iteration >= s.size:
        return TimeToTarget(None, None, None)
    total = float(np.sum(s[: iteration + 1]))
    warm = total - float(s[0]) + float(np.median(s[1:])) if s.size > 1 else None
    return TimeToTarget(iteration, total, warm)
