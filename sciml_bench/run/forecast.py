"""The least a ladder rung can cost, from the sizes its ladder completed.

A rung of an array problem is one worker process: the first solve and gradient (the
warm-up), then at least :data:`~sciml_bench.run.steady.MIN_SAMPLES` steady samples of each,
so at least ``k = 1 + MIN_SAMPLES`` calls of each kind. Each call at ``n₃`` states costs at
least the fastest steady sample at the last completed size ``n₂``, grown by the slope
between the last two completed sizes ``n₁ < n₂``:

    t(n₃) ≥ t(n₂) · (n₃ / n₂)^max(0, p),    p = log(t₂ / t₁) / log(n₂ / n₁).

The rung's worker also builds its model once before the first call (AMICI generates and
compiles C++ whose size grows with the states, issue 41): the build phase of the fastest
cold process at ``n₂`` grows by its own slope the same way and counts once, not ``k`` times.

This is a lower bound for any cost that is a sum of powers of ``n`` with non-negative
coefficients (overhead ``n⁰``, the right-hand side ``n¹``, a dense LU ``n³``): the log-log
slope of such a sum never decreases, so the slope beyond ``n₂`` is at least ``p``. Real
libraries can break that model (caches, a factorisation that changes strategy with size):
diffsol's sparse Brusselator's slope fell between sizes, and its forecast overshot what
the rung took (docs/problems.md, "Problems that scale", the size ladders). So a rung is
``skipped`` up front only when its forecast ``k · (t_solve + t_grad)`` exceeds
:data:`MARGIN` times the budget, with the forecast in its row, instead of being killed at
the budget, as ROBER groups' dense Diffrax and diffsol rungs at 3,000 states were before
the forecast.

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
#: a rung is skipped when its forecast exceeds this many budgets (the model's slack: above
#: the most a published ladder's forecast overshot a completed rung's wall time,
#: docs/problems.md, "Problems that scale", the size ladders)
MARGIN = 2.0


@dataclass(frozen=True)
class Forecast:
    """The least ``seconds`` a rung of ``n`` states (or parameters: ``unit``) needs, and
    from what."""

    seconds: float
    n: int
    #: per call kind (``build``: once, the rest :data:`CALLS` times): (fastest at n₂,
    #: slope p used, bound at n₃)
    calls: dict[str, tuple[float, float, float]]
    sizes: tuple[int, ...]
    unit: str = "states"

    def beyond(self, budget_s: float) -> bool:
        """Whether the rung is skipped: its forecast exceeds :data:`MARGIN` budgets."""
        return self.seconds > MARGIN * budget_s

    def reason(self, budget_s: float) -> str:
        """Why the rung is not run, for its ``skipped`` row."""
        parts = [f"{kind} ≥ {bound:.3g} s (slope {p:.2f})"
                 for kind, (_, p, bound) in self.calls.items() if kind != "build"]  # fmt: skip
        build = self.calls.get("build")
        once = f"a build ≥ {build[2]:.3g} s (slope {build[1]:.2f}), then " if build else ""
        seen = " and ".join(str(n) for n in self.sizes)
        return (
            f"not run: forecast to need at least {self.seconds:.3g} s at {self.n} "
            f"{self.unit}, over {MARGIN:g} x the {budget_s:g} s budget ({once}{CALLS} calls each of "
            f"{', '.join(parts)}, grown from the fastest samples at {seen} {self.unit}); "
            "--budget S runs it"
        )


def fastest(rec: dict[str, Any], kind: str) -> float | None:
    """The fastest steady sample of ``kind`` (``solve`` or ``grad``) in an ok row."""
    samples = [float(s) for s in rec.get(f"{kind}_samples") or () if s and s > 0]
    return min(samples) if samples else None


def build_seconds(rec: dict[str, Any]) -> float | None:
    """The fastest process's build phase (model construction, code generation, a C++
    compile) in an ok row, or None where the row records none."""
    names = [str(n) for n in rec.get("phase_names", ())]
    phases = rec.get("phases")
    if "build" not in names or phases is None:
        return None
    at = names.index("build")
    # a worker's row holds NumPy arrays, a read-back one lists: no truth tests on either
    times = [float(p[at]) for p in phases if len(p) > at and p[at] > 0]
    return min(times) if times else None


def _grown(
    times: Sequence[float | None], sizes: Sequence[int], n: int
) -> tuple[float, float, float] | None:
    """``(t₂, p, t₂·(n/n₂)^max(0, p))`` from the last two sizes' times, or None without
    a time at the last size."""
    t2 = times[-1]
    if t2 is None:
        return None
    t1, n1, n2 = times[0], sizes[0], sizes[-1]
    p = math.log(t2 / t1) / math.log(n2 / n1) if t1 and n2 > n1 else 0.0
    p = max(0.0, p)
    return (t2, p, t2 * (n / n2) ** p)


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
    sizes = [r[key] for r in done]
    calls: dict[str, tuple[float, float, float]] = {}
    for kind in ("solve", "grad"):
        grown = _grown([fastest(r, kind) for r in done], sizes, n)
        if grown is not None:
            calls[kind] = grown
    if not calls:
        return None
    seconds = CALLS * sum(bound for _, _, bound in calls.values())
    build = _grown([build_seconds(r) for r in done], sizes, n)
    if build is not None:
        calls["build"] = build
        seconds += build[2]
    unit = "states" if key == "n_state" else "parameters"
    return Forecast(seconds, n, calls, tuple(int(r[key]) for r in done), unit)
