"""False alarms of ``sciml-bench compare`` between identical runs, and a deliberate
slowdown still caught (issue 23 A).

Runs ``sciml-bench run PROBLEM -b BACKENDS`` ``--runs`` times with the same code and
``--slowed-runs`` more times, spread evenly among them, with ``SCIML_BENCH_TEST_SLOWDOWN=F``
(:mod:`sciml_bench.run.slowdown`: every library call a cold phase or a steady sample
times is made F times as long, by a busy wait inside the call; test-only, never active
otherwise). Then, with ``compare``'s defaults:

1. every pair of identical runs (i < j): the share of timings reported slower or faster
   (target 0), beside the share the test alone would flag (p < alpha and no noise
   floor: the rule before issue 23), and how many were not judged because a row ran
   while other processes took more than ``LOAD_LIMIT`` cores (its ``others_cpu``);
2. the noise floor measured: the largest ratio of medians between identical runs, per
   timing kind and over all (with the 95th percentile), over every pair and over the
   timings of rows not under load; ``NOISE_FLOOR`` in ``sciml_bench/measure/noise.py``
   must be at least the latter's largest;
3. each identical run against each slowed run, one run a side: the share of timings
   reported slower (a steady timing must clear ``PROCESS_FLOOR``, 2.1x, so a 1.3x
   slowdown is not reported this way, by design);
4. with four runs or more, odd against even identical runs with the run as the unit
   (Welch's t on the runs' values; they interleave in time, as the slowed runs do; target
   0 reported), then the first half against the second (minutes apart: the machine's
   drift, printed, not a target); and, with two slowed runs or more, the identical runs
   against the slowed ones the same way (target: every steady solve and gradient caught).
   This 2-core VM's process-to-process spread (up to 2x) needs about 20 runs a side to
   catch 1.3x in a steady timing, hence the defaults (about 32 minutes).

Exit status 0 when no false alarm was raised and every steady timing of every slowed
comparison was caught. ``--from DIR`` re-reads the files of an earlier call instead of
running again.

    python benchmarks/compare_false_alarms.py                      # 20 runs + 20 slowed
    python benchmarks/compare_false_alarms.py --runs 2 -b scipy --repeats 5 --cold 1  # tiny
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sciml_bench.measure.environment import SLOWDOWN_VAR, load_average
from sciml_bench.measure.noise import (
    LOAD_LIMIT,
    NOISE_FLOOR,
    PROCESS_FLOOR,
    measured_floor,
    others_load,
)
from sciml_bench.results import compare as cmp
from sciml_bench.results.store import read

STEADY = ("solve", "grad")


def run_once(folder: Path, args: argparse.Namespace, slowdown: float | None) -> Path:
    """One ``sciml-bench run`` into ``folder``; returns its results file."""
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "sciml_bench.cli.main", "run", args.problem, "-b", args.backends,
           "--out", str(folder)]  # fmt: skip
    for flag in ("repeats", "cold"):
        if getattr(args, flag) is not None:
            cmd += [f"--{flag}", str(getattr(args, flag))]
    env = dict(os.environ)
    env.pop(SLOWDOWN_VAR, None)
    if slowdown is not None:
        env[SLOWDOWN_VAR] = str(slowdown)
    before, t0 = load_average(), time.monotonic()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"sciml-bench run failed ({r.returncode}): {r.stderr[-2000:]}")
    files = sorted(folder.glob("*.h5"), key=lambda p: p.stat().st_mtime)
    what = f"slowed x{slowdown:g}" if slowdown else "identical"
    print(f"  {what} run {len(files)}: {time.monotonic() - t0:.0f} s, load average "
          f"{before if before is None else round(before, 2)} -> {_round(load_average())}",
          file=sys.stderr, flush=True)  # fmt: skip
    return files[-1]


def interleaved(runs: int, slowed: int) -> list[bool]:
    """The order of the runs, True for a slowed one, spread evenly among the identical ones
    (6 + 3: I I S I I S I I S). This machine drifts over minutes (SciPy's LV solve: 5.4 ms
    in two consecutive identical runs, 9.3-10.6 ms in the next three, 2026-11-26), so
    slowed runs all taken after the identical ones would be judged against the drift."""
    total = runs + slowed
    return [(i + 1) * slowed // total > i * slowed // total for i in range(total)]


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def timings(comp: cmp.Comparison) -> list[cmp.Change]:
    return [c for cc in comp.cases for c in cc.changes]


def under_load(comp: cmp.Comparison) -> list[bool]:
    """For each of :func:`timings`, whether a row behind it ran while other processes took
    more than ``LOAD_LIMIT`` cores (its ``others_cpu``), whatever its verdict."""
    out = []
    for cc in comp.cases:
        loads = [others_load(r) for r in (*cc.old_runs, *cc.new_runs)]
        busy = any(x is not None and x > LOAD_LIMIT for x in loads)
        out += [busy] * len(cc.changes)
    return out


def flagged_by_test_alone(c: cmp.Change) -> bool:
    """Whether the test by itself, with no noise floor, would flag this timing."""
    return c.verdict != cmp.TOO_FEW and c.p < cmp.ALPHA


def false_alarms(
    runs: list[list[dict[str, Any]]], load_limit: float = LOAD_LIMIT
) -> tuple[list[cmp.Change], list[bool], int]:
    """Every timing of every pair of identical runs, whether each was under load, and the
    pairs compared."""
    out: list[cmp.Change] = []
    busy: list[bool] = []
    pairs = list(itertools.combinations(range(len(runs)), 2))
    for i, j in pairs:
        comp = cmp.compare(runs[i], runs[j], load_limit=load_limit)
        out += timings(comp)
        busy += under_load(comp)
    return out, busy, len(pairs)


def floor_line(changes: Sequence[cmp.Change]) -> tuple[str, float]:
    """The floor identical runs call for (:func:`~sciml_bench.measure.noise.measured_floor`:
    the largest ratio, folded above 1) per timing kind and over all, with the 95th
    percentile of all."""
    by_metric = {m: [c.ratio for c in changes if c.metric == m] for m, _ in cmp.METRICS}
    every = [r for rs in by_metric.values() for r in rs]
    largest = measured_floor(every)
    if math.isnan(largest):
        return "no timing measured twice", largest
    parts = [f"{m} {measured_floor(rs):.3f}x" for m, rs in by_metric.items() if rs]
    return (f"{', '.join(parts)}; all {largest:.3f}x (95th percentile "
            f"{measured_floor(every, 0.95):.3f}x, {len(every)} ratios)"), largest  # fmt: skip


def caught_line(changes: Sequence[cmp.Change]) -> tuple[str, bool]:
    """Per timing kind, how many slowed timings were reported slower; and whether every
    steady one was."""
    parts, all_steady = [], True
    for m, _ in cmp.METRICS:
        cs = [c for c in changes if c.metric == m]
        if not cs:
            continue
        hit = sum(c.verdict == cmp.SLOWER for c in cs)
        med = float(np.median([c.ratio for c in cs]))
        extra = ""
        too_few = sum(c.verdict == cmp.TOO_FEW for c in cs)
        if too_few:
            extra = f", {too_few} n too small"
        off = sum(c.verdict == cmp.LOADED for c in cs)
        if off:
            extra += f", {off} not judged: loaded"
        parts.append(f"{m} {hit}/{len(cs)} (median ratio {med:.3f}x{extra})")
        if m in STEADY and hit < len(cs):
            all_steady = False
    return "; ".join(parts), all_steady


def share(n: int, total: int) -> str:
    return f"{n}/{total} = {100 * n / total:.1f}%" if total else "0/0"


def unit_false_alarms(runs: list[list[dict[str, Any]]]) -> bool:
    """The runs as the unit between identical runs: odd against even runs, which
    interleave in time as the slowed runs do (the target: none reported); then the first
    half against the second, minutes later, which measures the machine's drift, not the
    code (reported, not a target). True when the interleaved comparison reported none."""
    inter = timings(cmp.compare_many(runs[0::2], runs[1::2]))
    print(f"runs as the unit, odd vs even runs (interleaved in time): reported "
          f"{share(sum(c.significant for c in inter), len(inter))}")  # fmt: skip
    half = len(runs) // 2
    halves = timings(cmp.compare_many(runs[:half], runs[half:]))
    drift = float(np.median([c.ratio for c in halves])) if halves else math.nan
    print(f"  time-ordered, runs 1-{half} vs {half + 1}-{len(runs)} (the machine's drift "
          f"between the halves, not the code): reported "
          f"{share(sum(c.significant for c in halves), len(halves))}, median ratio "
          f"{drift:.3f}x")  # fmt: skip
    return not any(c.significant for c in inter)


def report(identical: list[Path], slowed: list[Path], factor: float) -> bool:
    """Print the figures; True when the targets are met."""
    runs = [read(p).records for p in identical]
    slow = [read(p).records for p in slowed]
    backends = sorted({r["backend"] for rs in runs for r in rs})
    problem = runs[0][0]["problem"] if runs and runs[0] else "?"
    changes, busy, pairs = false_alarms(runs)
    flagged = [c for c in changes if c.significant]
    loaded = [c for c in changes if c.verdict == cmp.LOADED]
    print(f"identical runs: {len(runs)} of {problem} ({','.join(backends)}), {pairs} pairs, "
          f"{len(changes)} timings compared")  # fmt: skip
    print(f"false alarms at compare's defaults (noise floor {NOISE_FLOOR:g}x, steady "
          f"timings {PROCESS_FLOOR:g}x, alpha "
          f"{cmp.ALPHA:g}): {share(len(flagged), len(changes))}; the test alone (no floor) "
          f"would flag {share(sum(map(flagged_by_test_alone, changes)), len(changes))}; "
          f"not judged (others took > {LOAD_LIMIT:g} cores): {share(len(loaded), len(changes))}")  # fmt: skip
    for c in flagged:
        print(f"  flagged: {c.metric} {c.ratio:.3f}x p={c.p:.2g}")
    anyway, _, _ = false_alarms(runs, math.inf)
    print(f"  judging rows under load too (--load-limit inf): "
          f"{share(sum(c.significant for c in anyway), len(anyway))} reported")  # fmt: skip
    text, largest_all = floor_line(changes)
    print(f"noise floor measured (largest ratio between identical runs), every pair: {text}")
    quiet = [c for c, b in zip(changes, busy, strict=True) if not b]
    text, largest = floor_line(quiet)
    print(f"  timings of rows not under load (others_cpu <= {LOAD_LIMIT:g}): {text}")
    ok = not flagged
    if largest > PROCESS_FLOOR:  # nan (no quiet timing) is not
        print(f"  NOTE: identical runs differed by {largest:.3f}x, more than PROCESS_FLOOR "
              f"{PROCESS_FLOOR:g}x: raise it, or measure on a quieter machine")  # fmt: skip
    steady_ok = True
    if slow:
        caught = [c for o in runs for s in slow for c in timings(cmp.compare(o, s))]
        text, steady_ok = caught_line(caught)
        print(f"deliberate {factor:g}x slowdown, one run a side, {len(runs)} x {len(slow)} "
              f"comparisons: caught {text}")  # fmt: skip
        if factor < PROCESS_FLOOR:
            print(f"  (one run a side, a steady timing must clear the process floor "
                  f"{PROCESS_FLOOR:g}x: {factor:g}x is below it by design; the runs-as-unit "
                  "line below is the target)")  # fmt: skip
        anyway = [c for o in runs for s in slow
                  for c in timings(cmp.compare(o, s, load_limit=math.inf))]  # fmt: skip
        print(f"  judging rows under load too: caught {caught_line(anyway)[0]}")
    if len(runs) >= 4:
        ok = unit_false_alarms(runs) and ok
    if len(slow) >= 2:
        text, unit_ok = caught_line(timings(cmp.compare_many(runs, slow)))
        print(f"runs as the unit, {len(runs)} identical vs {len(slow)} slowed: caught {text}")
        if factor < PROCESS_FLOOR:
            steady_ok = unit_ok
    elif slow and factor < PROCESS_FLOOR:
        print(f"  (give --slowed-runs 2 or more to test the {factor:g}x slowdown with the run "
              "as the unit)")  # fmt: skip
    return ok and steady_ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20, help="identical runs [20]")
    ap.add_argument("--slowed-runs", type=int, default=20, help="runs with the slowdown [20]")
    ap.add_argument("--slowdown", type=float, default=1.3, help="the slowdown factor [1.3]")
    ap.add_argument("--problem", default="nonstiff-lotka-volterra")
    ap.add_argument("-b", "--backends", default="scipy,diffrax,torchode")
    ap.add_argument("--repeats", type=int, help="sciml-bench run --repeats [its default, 10]")
    ap.add_argument("--cold", type=int, help="sciml-bench run --cold [its default, 3]")
    ap.add_argument("--out", type=Path, help="keep the results files here [a temporary folder]")
    ap.add_argument("--from", dest="reuse", type=Path,
                    help="read the files of an earlier --out instead of running")
    args = ap.parse_args(argv)
    if args.runs < 2:
        ap.error("--runs: at least 2 identical runs make a pair")
    if args.reuse:
        identical = sorted((args.reuse / "identical").glob("*.h5"))
        slowed = sorted((args.reuse / "slowed").glob("*.h5"))
        factor = float(read(slowed[0]).environment.get("test_slowdown", args.slowdown)) \
            if slowed else args.slowdown
    else:
        out = args.out or Path(tempfile.mkdtemp(prefix="compare-false-alarms-"))
        print(f"results files in {out}", file=sys.stderr)
        identical, slowed = [], []
        for is_slowed in interleaved(args.runs, args.slowed_runs):
            if is_slowed:
                slowed.append(run_once(out / "slowed", args, args.slowdown))
            else:
                identical.append(run_once(out / "identical", args, None))
        factor = args.slowdown
    return 0 if report(identical, slowed, factor) else 1


if __name__ == "__main__":
    sys.exit(main())
