"""The steady loop's mechanism, A/B in one process: the suite's Diffrax case timed three
ways, interleaved block by block so that machine drift hits all three alike.

- ``old``:  the loop before issue 23: each sample the full solve (states, result code and
  step counts in one buffer), then its check (``np.asarray``, status, finiteness) before
  the next sample starts (outside the clock, but between two calls);
- ``new``:  the worker's loop (:func:`sciml_bench.run.steady.take`): ``sol.ys`` alone,
  samples back to back, every one checked after the loop;
- ``bare``: a timeit-style loop of the same compiled ``ys`` function with
  ``jax.block_until_ready``, nothing else (what ``benchmarks/_bare_diffrax.py`` does).

Gradients: ``old`` checks each sample before the next; ``new`` checks after; ``bare`` is
the compiled gradient alone. Prints one line per problem and kind with the medians and
``new/bare`` and ``old/bare`` (goal for ``new/bare``: <= 1.05).

    JAX_PLATFORMS=cpu python benchmarks/steady_ab.py [--rounds 30] [--block 20]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from sciml_bench.backends.base import CaseOptions  # noqa: E402
from sciml_bench.backends.diffrax import DiffraxBackend, DiffraxCase  # noqa: E402
from sciml_bench.measure.clock import perf  # noqa: E402
from sciml_bench.problem import reference, spec  # noqa: E402
from sciml_bench.run.steady import Plan, take  # noqa: E402

PROBLEMS = ("nonstiff-spiral-node", "nonstiff-lotka-volterra", "stiff-robertson")


def old_loop(timed: Callable[[], Any], check: Callable[[Any], Any], n: int) -> list[float]:
    """The loop before: time one call, check it, then the next call."""
    out = []
    for _ in range(n):
        start = perf()
        raw = timed()
        out.append(perf() - start)
        check(raw)
        raw = None
    return out


def bare_loop(fn: Callable[[Any], Any], params: Any, n: int) -> list[float]:
    import jax

    out = []
    for _ in range(n):
        start = perf()
        jax.block_until_ready(fn(params))
        out.append(perf() - start)
    return out


def ab(name: str, rounds: int, block: int) -> dict[tuple[str, str], list[float]]:
    """Samples per (kind, way) for one problem, ``rounds`` interleaved blocks of ``block``."""
    problem = spec.load(name)
    cp = reference.compile_problem(problem, reference.get(problem))
    backend = DiffraxBackend()
    opts = CaseOptions(backend.default_solver(problem.stiff), "RecursiveCheckpointAdjoint",
                       cp.rtol, cp.atol, cp.max_steps)  # fmt: skip
    case = DiffraxCase(cp, opts)
    params = case.prepare(cp.theta0)
    full = (lambda: case._run(case._solve_full, params),
            lambda raw: case._checked_full(np.asarray(raw)))  # fmt: skip
    plan = Plan(repeats=block, warmups=0, budget_s=1e9, min_samples=block)
    ways: dict[str, dict[str, Callable[[], list[float]]]] = {
        "solve": {
            "old": lambda: old_loop(full[0], full[1], block),
            "new": lambda: take(case.timed_solve, case.check_solve, params, plan),
            "bare": lambda: bare_loop(case._solve_ys, params, block),
        },
        "grad": {
            "old": lambda: old_loop(lambda: case.timed_grad(params), case.check_grad, block),
            "new": lambda: take(case.timed_grad, case.check_grad, params, plan),
            "bare": lambda: bare_loop(case._value_and_grad, params, block),
        },
    }
    case.solve(cp.theta0)
    for kind in ways:  # compile and warm every way
        for run in ways[kind].values():
            run()
    got: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for kind, runs in ways.items():
            for way, run in runs.items():
                got.setdefault((kind, way), []).extend(run())
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--block", type=int, default=20)
    ap.add_argument("--problems", default=",".join(PROBLEMS))
    args = ap.parse_args()
    worst = 0.0
    for name in args.problems.split(","):
        got = ab(name, args.rounds, args.block)
        for kind in ("solve", "grad"):
            m = {w: float(np.median(got[kind, w])) for w in ("old", "new", "bare")}
            worst = max(worst, m["new"] / m["bare"])
            print(f"{name:<24} {kind:<5} old {m['old'] * 1e6:9.1f} us  new {m['new'] * 1e6:9.1f} us"
                  f"  bare {m['bare'] * 1e6:9.1f} us  new/bare {m['new'] / m['bare']:.3f}"
                  f"  old/bare {m['old'] / m['bare']:.3f}  (n={len(got[kind, 'new'])} each)")
    print(f"worst new/bare = {worst:.3f}")


if __name__ == "__main__":
    main()
