"""The least a ladder rung can cost, from the sizes its ladder completed.

A rung of an array problem is one worker process: the first solve and gradient (the
warm-up), then at least :data:`~sciml_bench.run.steady.MIN_SAMPLES` steady samples of each,
so at least ``k = 1 + MIN_SAMPLES`` calls of each kind. Each call at ``n₃`` states costs at
least the fastest steady sample at the last completed size ``n₂``, grown by the slope
between the last two completed sizes ``n₁ < n₂``:

    t(n₃) ≥ t(n₂) · (n₃ / n₂)^max(0, p),    p = log(t₂ / t₁) / log(n₂ / n₁).

This is a lower bound for any cost that is a sum of powers of ``n`` with non-negative
coefficients (overhead ``n⁰``, the right-hand side ``n¹``, a dense LU ``n³``): the log-log
slope of such a sum never decreases, so the slope beyond ``n₂`` is at least ``p``. Real
libraries can break that model (caches, a factorisation that changes strategy with size):
diffsol's sparse Brusselator went from slope 2.16 (128→512 states) to 0.59 (512→2048), and
the forecast, 48 s, was 1.25x the 38 s that rung took. So a rung is ``skipped`` up front
only when its forecast ``k · (t_solve + t_grad)`` exceeds :data:`MARGIN` times the budget,
with the forecast in its row, instead of being killed at the budget: on ROBER groups, the
dense Diffrax and diffsol rows at 3000 states each spent the whole 300 s budget before it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sciml_bench.run.steady import MIN_SAMPLES

#: calls of each kind a rung makes at least: the warm-up, then the steady minimum
CALLS = 1 + MIN_SAMPLES
#: a rung is skipped when its forecast exceeds this many budgets (the model's slack: the
#: published ladders' forecasts reached 1.25x a completed rung's wall time)
MARGIN = 1.5


@dataclass(frozen=True)
class Forecast:
    """The least ``seconds`` a rung of ``n_state`` states needs, and from what."""

    seconds: float
    n_state: int
    #: per call kind: (fastest sample at n₂, slope p used, bound at n₃)
    calls: dict[str, tuple[float, float, float]]
    sizes: tuple[int, ...]

    def beyond(self, budget_s: float) -> bool:
        """Whether the rung is skipped: its forecast exceeds :data:`MARGIN` budgets."""
        return self.seconds > MARGIN * budget_s

    def reason(self, budget_s: float) -> str:
        """Why the rung is not run, for its ``skipped`` row."""
        parts = [f"{kind} ≥ {bound:.3g} s (slope {p:.2f})"
                 for kind, (_, p, bound) in self.calls.items()]  # fmt: skip
        seen = " and ".join(str(n) for n in self.sizes)
        return (
            f"not run: forecast to need at least {self.seconds:.3g} s at {self.n_state} "
            f"states, over {MARGIN:g} x the {budget_s:g} s budget ({CALLS} calls each of "
            f"{', '.join(parts)}, grown from the fastest samples at {seen} states); "
            "--budget S runs it"
        )


def fastest(rec: dict[str, Any], kind: str) -> float | None:
    """The fastest steady sample of ``kind`` (``solve`` or ``grad``) in an ok row."""
    samples = [float(s) for s in rec.get(f"{kind}_samples") or () if s and s > 0]
    return min(samples) if samples else None


def least_seconds(completed: Sequence[dict[str, Any]], n_state: int) -> Forecast | None:
    """The bound for a rung of ``n_state`` states from the ladder's ``ok`` rows at smaller
    sizes (one: slope 0; two or more: the last two), or None without one."""
    done = sorted((r for r in completed if r.get("n_state") and r["n_state"] < n_state),
                  key=lambda r: r["n_state"])[-2:]  # fmt: skip
    if not done:
        return None
    calls: dict[str, tuple[float, float, float]] = {}
    for kind in ("solve", "grad"):
        times = [fastest(r, kind) for r in done]
        t2 = times[-1]
        if t2 is None:
            continue
        t1, n1, n2 = times[0], done[0]["n_state"], done[-1]["n_state"]
        p = math.log(t2 / t1) / math.log(n2 / n1) if t1 and n2 > n1 else 0.0
        p = max(0.0, p)
        calls[kind] = (t2, p, t2 * (n_state / n2) ** p)
    if not calls:
        return None
    seconds = CALLS * sum(bound for _, _, bound in calls.values())
    return Forecast(seconds, n_state, calls, tuple(int(r["n_state"]) for r in done))
