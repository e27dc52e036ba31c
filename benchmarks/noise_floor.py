"""The noise floor measured: identical code as two rows, how often a verdict names a winner
(issue 43 item 3).

Each *run* is one interleaved run through the runner API (``runner.run``, the path
``sciml-bench run`` takes: real workers, ``--cold`` fresh processes a row, each taking its
share of the steady samples, pinned or not as ``run`` would): every backend of
``--backends`` on ``--problem`` planned twice, as two rows A and B that are identical but
for their case index, their processes in one seeded random order. Between A and B any
difference is noise, so a verdict that names either one the winner is a *false winner*.

For every steady timing each backend has (``solve_s``; ``grad_s`` where it computes a
gradient), over ``--runs`` runs, it prints:

- the false-winner rate at each constant floor of :data:`CANDIDATES` (a ratio
  ``max(A, B) / min(A, B)`` at or beyond the floor names a winner), with a 95 %
  Clopper-Pearson interval;
- the adaptive rule's rate: the floor each run's pair gets from
  :func:`sciml_bench.results.verdict.floor_of` (its rows' per-process medians, the spread
  pooled over the run's rows), and the floors it set (median, range);
- the smallest constant floor whose false-winner rate is at most 5 %: just above the
  ``(⌊0.05·N⌋ + 1)``-th largest ratio of N, with the rate's interval there.

The same lines over every steady timing together close the output. ``--no-pin`` runs the
workers unpinned (``run --no-pin``), to compare. The run time is estimated before the
first run and refined after it; each run prints a progress line. ``--out FILE.json``
keeps the pairs (ratio and floor of each); ``--from FILE.json`` re-reads them.

    python benchmarks/noise_floor.py                                    # 20 runs
    python benchmarks/noise_floor.py --runs 40 --backends diffrax --no-pin
    python benchmarks/noise_floor.py --runs 2 --backends scipy --repeats 3 --cold 2  # tiny
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sciml_bench.measure.noise import clears_noise, folded

#: constant floors whose false-winner rate is printed
CANDIDATES = (1.05, 1.1, 1.2, 1.3, 1.5, 2.1)
#: the false-winner rate a floor may have
TARGET = 0.05
#: about how long one worker process takes, seconds (cold phases and steady samples at the
#: suite's defaults on a 2-core machine): the estimate printed before the first run
PROCESS_S = {"scipy": 2.5, "diffrax": 14.0, "cvodes": 4.0, "diffsol": 5.0,
             "torchdiffeq": 10.0, "torchode": 14.0, "amici": 30.0, "julia": 60.0}  # fmt: skip
#: the steady timings judged, and the verdict's criterion they are judged by
KEYS = ("solve_s", "grad_s")


def one_run(args: argparse.Namespace, folder: Path, seed: int) -> list[dict[str, Any]]:
    """One interleaved run of every backend planned twice; its records in case order."""
    from sciml_bench.problem import reference, spec
    from sciml_bench.results.store import ResultsWriter
    from sciml_bench.run import runner

    problem = spec.load(args.problem)
    ref = reference.get_or_missing(problem)
    compiled = reference.compile_problem(problem, ref)
    cases = [c for c in runner.plan(compiled, args.backends.split(",")) for _ in (0, 1)]
    settings = runner.Settings(cold=args.cold, repeats=args.repeats, interleave=True,
                               seed=seed, pin=not args.no_pin)  # fmt: skip
    writer = ResultsWriter(folder / f"run-{seed}.h5", {}, "benchmarks/noise_floor.py")
    try:
        recs = runner.run(compiled, ref, cases, writer, settings, progress=lambda m: None)
    finally:
        writer.finish("complete")
    return sorted(recs, key=lambda r: r.get("case_index", 0))


def pairs_of(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each backend's A/B pair of one run, per steady timing both rows have: the ratio
    ``B / A`` and the floor the verdict's rule gives it (pooled over the run's ok rows)."""
    from sciml_bench.results.store import summarize
    from sciml_bench.results.verdict import floor_of, run_pool

    rows = [summarize(r) for r in records]
    ok = [r for r in rows if r.get("status") == "ok"]
    out = []
    for a, b in zip(rows[::2], rows[1::2], strict=True):
        for key in KEYS:
            ta, tb = a.get(key), b.get(key)
            if a.get("status") != "ok" or b.get("status") != "ok" or not ta or not tb:
                continue
            f = floor_of("steady gradient", key, a, b, run_pool(ok, key))
            out.append({"backend": a["backend"], "key": key, "ratio": float(tb) / float(ta),
                        "floor": f.value, "source": f.source,
                        "pin": a.get("steady_affinity")})  # fmt: skip
    return out


def interval(k: int, n: int) -> tuple[float, float]:
    """The 95 % Clopper-Pearson interval of a rate of ``k`` in ``n``."""
    from scipy.stats import beta

    lo = 0.0 if k == 0 else float(beta.ppf(0.025, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(0.975, k + 1, n - k))
    return lo, hi


def rate(k: int, n: int) -> str:
    lo, hi = interval(k, n)
    return f"{k}/{n} = {100 * k / n:.0f} % [{100 * lo:.0f}, {100 * hi:.0f}]"


def smallest_floor(ratios: Sequence[float], target: float = TARGET) -> tuple[float, int]:
    """The smallest constant floor with at most ``target`` of ``ratios`` at or beyond it
    (folded): just above the ``(⌊target·N⌋ + 1)``-th largest; and the false winners there."""
    vals = sorted((folded(r) for r in ratios), reverse=True)
    k = math.floor(target * len(vals))
    if k >= len(vals):
        return 1.0, 0
    floor = math.nextafter(vals[k], math.inf)
    return floor, sum(v >= floor for v in vals)  # at most k: ties at vals[k] stay inside


def report(title: str, pairs: Sequence[dict[str, Any]]) -> list[str]:
    """The lines of one timing (or of all): rates at the candidates, the adaptive rule's,
    and the smallest constant floor at most 5 %."""
    n = len(pairs)
    if not n:
        return [f"{title}: no pair measured"]
    ratios = [p["ratio"] for p in pairs]
    lines = [f"{title}: {n} pairs, ratios {min(map(folded, ratios)):.3f}x-"
             f"{max(map(folded, ratios)):.3f}x (folded)"]  # fmt: skip
    for c in CANDIDATES:
        k = sum(clears_noise(r, c) for r in ratios)
        lines.append(f"  floor {f'{c:g}x:':<6} false winners {rate(k, n)}")
    k = sum(clears_noise(p["ratio"], p["floor"]) for p in pairs)
    floors = sorted(p["floor"] for p in pairs)
    lines.append(f"  adaptive rule: false winners {rate(k, n)}; its floors median "
                 f"{floors[n // 2]:.2f}x, {floors[0]:.2f}x-{floors[-1]:.2f}x")  # fmt: skip
    c, k = smallest_floor(ratios)
    lines.append(f"  smallest constant floor with false winners <= {TARGET:.0%}: {c:.3f}x "
                 f"({rate(k, n)})")  # fmt: skip
    return lines


def estimate_s(args: argparse.Namespace) -> float:
    """Seconds the runs should take: two rows a backend, ``--cold`` processes a row."""
    per_run = sum(2 * args.cold * PROCESS_S.get(b, 10.0) for b in args.backends.split(","))
    return args.runs * per_run


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every run's pairs, with a progress line per run and the estimate refined."""
    est = estimate_s(args)
    print(f"{args.runs} runs of {args.backends} on {args.problem}, 2 rows x {args.cold} "
          f"processes each, {'unpinned' if args.no_pin else 'pinned'}: about "
          f"{est / 60:.0f} min (estimated)", file=sys.stderr, flush=True)  # fmt: skip
    pairs: list[dict[str, Any]] = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            pairs += [{**p, "run": i} for p in pairs_of(one_run(args, Path(tmp), args.seed + i))]
            spent = time.monotonic() - t0
            left = spent / (i + 1) * (args.runs - i - 1)
            print(f"  run {i + 1}/{args.runs}: {spent:.0f} s so far, about {left / 60:.1f} "
                  "min left", file=sys.stderr, flush=True)  # fmt: skip
    return pairs


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--backends", "-b", default="scipy,diffrax,cvodes")
    ap.add_argument("--problem", default="nonstiff-lotka-volterra")
    ap.add_argument("--cold", type=int, default=3, help="processes a row [3, run's default]")
    ap.add_argument("--repeats", type=int, default=10, help="steady samples a row [10]")
    ap.add_argument("--no-pin", action="store_true", help="workers unpinned (run --no-pin)")
    ap.add_argument("--seed", type=int, default=43, help="first run's interleaving seed")
    ap.add_argument("--out", help="write the pairs to this JSON file")
    ap.add_argument("--from", dest="source", help="re-read the pairs of an earlier --out")
    args = ap.parse_args(argv)
    if args.source:
        pairs = json.loads(Path(args.source).read_text())["pairs"]
    else:
        pairs = measure(args)
        if args.out:
            Path(args.out).write_text(json.dumps({"args": vars(args), "pairs": pairs}, indent=1))
    groups = sorted({(p["backend"], p["key"]) for p in pairs})
    for backend, key in groups:
        print("\n".join(report(f"{backend} {key}",
                               [p for p in pairs if (p["backend"], p["key"]) == (backend, key)])))
    print("\n".join(report("every steady timing", pairs)))
    pins = sorted({str(p.get("pin")) for p in pairs})
    print(f"steady affinity of the rows: {', '.join(pins)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
