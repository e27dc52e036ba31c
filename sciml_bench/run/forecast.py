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
the forecast, 48 s, was 1.25x the 38 s that rung took (republished 2026-11-27: 55 s, 1.71x
the 32 s it took). So a rung is ``skipped`` up front
only when its forecast ``k · (t_solve + t_grad)`` exceeds :data:`MARGIN` times the budget,
with the forecast in its row, instead of being killed at the budget: on ROBER groups, the
dense Diffrax and diffsol rows at 3000 states each spent the whole 300 s budget before it.

A network's width (:mod:`sciml_bench.problem.network_width`) keeps the states and grows the
parameters: there ``n`` is the parameter count ``P`` (the right-hand side costs ``P¹``, a
forward sensitivity ``P²``), the same model on another axis.
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
#: published ladders' forecasts reached 1.71x a completed rung's wall time)
MARGIN = 2.0


@dataclass(frozen=True)
class Forecast:
    """The least ``seconds`` a rung of ``n`` states (or parameters: ``unit``) needs, and
    from what."""

    seconds: float
    n: int
    #: per call kind: (fastest sample at n₂, slope p used, bound at n₃)
    calls: dict[str, tuple[float, float, float]]
    sizes: tuple[int, ...]
    unit: str = "states"

    def beyond(self, budget_s: float) -> bool:
        """Whether the rung is skipped: its forecast exceeds :data:`MARGIN` budgets."""
        return self.seconds > MARGIN * budget_s

    def reason(self, budget_s: float) -> str:
        """Why the rung is not run, for its ``skipped`` row."""
        parts = [f"{kind} ≥ {bound:.3g} s (slope {p:.2f})"
                 for kind, (_, p, bound) in self.calls.items()]  # fmt: skip
        seen = " and ".join(str(n) for n in self.sizes)
        return (
            f"not run: forecast to need at least {self.seconds:.3g} s at {self.n} "
            f"{self.unit}, over {MARGIN:g} x the {budget_s:g} s budget ({CALLS} calls each of "
            f"{', '.join(parts)}, grown from the fastest samples at {seen} {self.unit}); "
            "--budget S runs it"
        )


def fastest(rec: dict[str, Any], kind: str) -> float | None:
    """The fastest steady sample of ``kind`` (``solve`` or ``grad``) in an ok row."""
    samples = [float(s) for s in rec.get(f"{kind}_samples") or () if s and s > 0]
    return min(samples) if samples else None


def least_seconds(
    completed: Sequence[dict[str, Any]], n: int, key: str = "n_state"
) -> Forecast | None:
    """The bound for a rung of ``n`` states (``key = "n_params"``: parameters) from the
    ladder's ``ok`` rows at smaller ``key`` (one: slope 0; two or more: the last two), or
    None without one."""
    done = sorted((r for r in completed if r.get(key) and r[key] < n),
                  key=lambda r: r[key])[-2:]  # fmt: skip
    if not done:
        return None
    calls: dict[str, tuple[float, float, float]] = {}
    for kind in ("solve", "grad"):
        times = [fastest(r, kind) for r in done]
        t2 = times[-1]
        if t2 is None:
            continue
        t1, n1, n2 = times[0], done[0][key], done[-1][key]
        p = math.log(t2 / t1) / math.log(n2 / n1) if t1 and n2 > n1 else 0.0
        p = max(0.0, p)
        calls[kind] = (t2, p, t2 * (n / n2) ** p)
    if not calls:
        return None
    seconds = CALLS * sum(bound for _, _, bound in calls.values())
    unit = "states" if key == "n_state" else "parameters"
    return Forecast(seconds, n, calls, tuple(int(r[key]) for r in done), unit)
