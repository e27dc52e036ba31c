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

5. the runs-a-side figure: the smallest n for which every window of n consecutive
   identical runs against the n slowed runs beside them, with the run as the unit, catches
   every steady timing (and does so at every larger n measured), with the false alarms of
   n against n identical runs (odd against even runs of every window of 2n) beside it.

``--ab`` measures that figure before and after interleaving (issue 34): the same counts of
runs with ``sciml-bench run --no-interleave`` and with ``--interleave``, the two modes'
runs alternating in time (so the machine's drift falls on both alike), and prints each
mode's figures. ``--interleave``/``--no-interleave`` alone passes that flag to every run.

Exit status 0 when no false alarm was raised and every steady timing of every slowed
comparison was caught. ``--from DIR`` re-reads the files of an earlier call instead of
running again.

    python benchmarks/compare_false_alarms.py                      # 20 runs + 20 slowed
    python benchmarks/compare_false_alarms.py --runs 2 -b scipy --repeats 5 --cold 1  # tiny
    python benchmarks/compare_false_alarms.py --ab --runs 8 --slowed-runs 8 \
        --problem stiff-robertson -b scipy,diffsol,cvodes        # interleaving, before/after
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


def run_once(folder: Path, args: argparse.Namespace, slowdown: float | None,
             interleave: bool | None = None) -> Path:  # fmt: skip
    """One ``sciml-bench run`` into ``folder`` (``--interleave`` or ``--no-interleave``
    when ``interleave`` says; None: ``run``'s default); returns its results file."""
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "sciml_bench.cli.main", "run", args.problem, "-b", args.backends,
           "--out", str(folder)]  # fmt: skip
    for flag in ("repeats", "cold"):
        if getattr(args, flag) is not None:
            cmd += [f"--{flag}", str(getattr(args, flag))]
    if interleave is not None:
        cmd.append("--interleave" if interleave else "--no-interleave")
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
    if interleave is not None:
        what += " --interleave" if interleave else " --no-interleave"
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


def windows_caught(runs: list[list[dict[str, Any]]], slow: list[list[dict[str, Any]]], n: int,
                   load_limit: float) -> dict[str, bool]:  # fmt: skip
    """Per timing kind, whether every window of ``n`` consecutive identical runs against
    the ``n`` slowed runs beside them (run ``s`` to ``s + n`` of each, interleaved in time)
    reported it slower in every case, with the run as the unit."""
    out: dict[str, bool] = {}
    for start in range(min(len(runs), len(slow)) - n + 1):
        comp = cmp.compare_many(runs[start:start + n], slow[start:start + n],
                                load_limit=load_limit)  # fmt: skip
        for c in timings(comp):
            out[c.metric] = out.get(c.metric, True) and c.verdict == cmp.SLOWER
    return out


def window_alarms(runs: list[list[dict[str, Any]]], n: int, load_limit: float) -> int | None:
    """The false alarms of ``n`` against ``n`` identical runs: every window of ``2n``
    consecutive identical runs, its odd against its even runs; None with fewer than 2n."""
    if 2 * n > len(runs):
        return None
    total = 0
    for start in range(len(runs) - 2 * n + 1):
        w = runs[start:start + 2 * n]
        total += sum(c.significant for c in timings(cmp.compare_many(w[0::2], w[1::2],
                                                                     load_limit=load_limit)))
    return total


def runs_a_side(runs: list[list[dict[str, Any]]], slow: list[list[dict[str, Any]]],
                load_limit: float = LOAD_LIMIT) -> tuple[int | None, str]:  # fmt: skip
    """The smallest n (2 and up: one run a side must clear the process floor) from which
    every window of n runs a side catches every steady timing, at every larger n measured
    too; None when none does. And a line: that n per timing kind, and the false alarms."""
    top = min(len(runs), len(slow))
    caught = {n: windows_caught(runs, slow, n, load_limit) for n in range(2, top + 1)}
    kinds = sorted({m for c in caught.values() for m in c}, key=[m for m, _ in cmp.METRICS].index)

    def smallest(ok: Any) -> int | None:
        good = [n for n in caught if all(ok(caught[m]) for m in range(n, top + 1))]
        return min(good) if good else None

    per = {m: smallest(lambda c, m=m: c.get(m, True)) for m in kinds}
    steady = smallest(lambda c: all(v for m, v in c.items() if m in STEADY))
    text = ", ".join(f"{m} {'>' + str(top) if v is None else v}" for m, v in per.items())
    alarms = window_alarms(runs, steady or top, load_limit)
    at = steady or top
    fa = (f"false alarms at {at} a side: {alarms} (odd vs even identical runs, every window of "
          f"{2 * at})" if alarms is not None else
          f"false alarms at {at} a side: not measured (needs {2 * at} identical runs)")  # fmt: skip
    return steady, f"{'>' + str(top) if steady is None else steady} ({text}); {fa}"


#: (z_{0.995} + z_{0.8})²: a two-sided test at alpha 0.01 with 80 % power
Z2 = (2.5758 + 0.8416) ** 2


def run_spread(runs: list[list[dict[str, Any]]], factor: float) -> str:
    """The run-to-run spread of identical runs, what interleaving is meant to cut: per
    timing kind, the median over cases of the log standard deviation of the runs' values
    (:func:`~sciml_bench.results.compare.run_center`: the geometric mean of each run's
    processes' medians), and the runs a side that spread asks for to catch ``factor`` at
    alpha 0.01 with 80 % power, ``n = 2 Z2 σ² / ln(factor)²`` (the largest case's σ)."""
    sds: dict[str, list[float]] = {}
    for recs in cmp.by_case(runs).values():
        for m, key in cmp.METRICS:
            who = key.replace("_samples", "_sample_process")
            vals = [cmp.run_center(r[key], r.get(who)) for r in recs if r.get(key)]
            vals = [v for v in vals if v > 0 and math.isfinite(v)]
            if len(vals) >= 3:
                sds.setdefault(m, []).append(float(np.std(np.log(vals), ddof=1)))
    parts = [f"{m} {float(np.median(v)):.3f} (largest {max(v):.3f}: n = "
             f"{math.ceil(2 * Z2 * max(v) ** 2 / math.log(factor) ** 2)})"
             for m, v in sorted(sds.items(), key=lambda kv: [m for m, _ in cmp.METRICS].index(kv[0]))]  # fmt: skip
    return "; ".join(parts) or "fewer than 3 runs"


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
    print(f"run-to-run spread of identical runs (log sd of the runs' values, median over "
          f"cases; runs a side it asks for, for {factor:g}x): {run_spread(runs, factor)}")
    if len(runs) >= 2 and len(slow) >= 2:
        for limit, how in ((LOAD_LIMIT, "at compare's defaults"),
                           (math.inf, "judging rows under load too")):  # fmt: skip
            print(f"runs a side to catch {factor:g}x in every steady timing, {how}: "
                  f"{runs_a_side(runs, slow, limit)[1]}")  # fmt: skip
    return ok and steady_ok


#: ``--ab``'s two modes: the folder of each under ``--out``, and the flag its runs get
MODES = {"off": False, "on": True}


def read_back(folder: Path, slowdown: float) -> tuple[list[Path], list[Path], float]:
    """The identical and slowed files of an earlier call (``--from``), and the factor."""
    identical = sorted((folder / "identical").glob("*.h5"))
    slowed = sorted((folder / "slowed").glob("*.h5"))
    factor = float(read(slowed[0]).environment.get("test_slowdown", slowdown)) \
        if slowed else slowdown
    return identical, slowed, factor


def measure(out: Path, args: argparse.Namespace) -> dict[str, tuple[list[Path], list[Path]]]:
    """Every run, the slowed ones spread among the identical ones; with ``--ab`` each
    position runs once per mode, the modes' order alternating (off, on; on, off; ...)
    so that neither mode always runs later. Keys: the mode's folder ("" without --ab)."""
    modes = list(MODES) if args.ab else [""]
    files: dict[str, tuple[list[Path], list[Path]]] = {m: ([], []) for m in modes}
    for pos, is_slowed in enumerate(interleaved(args.runs, args.slowed_runs)):
        for mode in modes if pos % 2 == 0 else modes[::-1]:
            flag = MODES[mode] if mode else args.interleave
            kind = "slowed" if is_slowed else "identical"
            path = run_once(out / mode / kind, args, args.slowdown if is_slowed else None, flag)
            files[mode][is_slowed].append(path)
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20, help="identical runs [20]")
    ap.add_argument("--slowed-runs", type=int, default=20, help="runs with the slowdown [20]")
    ap.add_argument("--slowdown", type=float, default=1.3, help="the slowdown factor [1.3]")
    ap.add_argument("--problem", default="nonstiff-lotka-volterra")
    ap.add_argument("-b", "--backends", default="scipy,diffrax,torchode")
    ap.add_argument("--repeats", type=int, help="sciml-bench run --repeats [its default, 10]")
    ap.add_argument("--cold", type=int, help="sciml-bench run --cold [its default, 3]")
    ap.add_argument("--interleave", action=argparse.BooleanOptionalAction, default=None,
                    help="pass --interleave (--no-interleave) to every run [run's default]")
    ap.add_argument("--ab", action="store_true", help="every run once without and once with "
                    "--interleave, alternating; each mode's figures (the runs a side before "
                    "and after interleaving)")
    ap.add_argument("--out", type=Path, help="keep the results files here [a temporary folder]")
    ap.add_argument("--from", dest="reuse", type=Path,
                    help="read the files of an earlier --out instead of running")
    args = ap.parse_args(argv)
    if args.runs < 2:
        ap.error("--runs: at least 2 identical runs make a pair")
    if args.ab and args.interleave is not None:
        ap.error("--ab runs both modes: drop --interleave/--no-interleave")
    modes = list(MODES) if args.ab else [""]
    if args.reuse:
        found = {m: read_back(args.reuse / m, args.slowdown) for m in modes}
    else:
        out = args.out or Path(tempfile.mkdtemp(prefix="compare-false-alarms-"))
        print(f"results files in {out}", file=sys.stderr)
        found = {m: (*v, args.slowdown) for m, v in measure(out, args).items()}
    ok = True
    for mode, (identical, slowed, factor) in found.items():
        if mode:
            print(f"\n== {'--interleave' if MODES[mode] else '--no-interleave'} "
                  f"({'after' if MODES[mode] else 'before'} interleaving) ==")  # fmt: skip
        ok = report(identical, slowed, factor) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
