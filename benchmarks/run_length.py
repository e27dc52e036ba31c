"""Run length of the default benchmark, cold and warm reference cache.

Times ``sciml-bench run NAME`` with default settings as a user runs it: first
with an empty reference cache, then again with the cache warm (which must skip
the reference computation entirely: the run says "reference: cached").

    python benchmarks/run_length.py                 # stiff-robertson (target < 3 min)
    python benchmarks/run_length.py --all           # every problem (target < 20 min)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from sciml_bench.problem import spec


def timed_run(names: list[str], env: dict[str, str], out: str) -> tuple[float, str, list[dict]]:
    start = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "run", *names, "--out", out, "--json"],
        capture_output=True, text=True, env=env, check=True,
    )
    cases = [x for x in json.loads(r.stdout) if x.get("kind") != "verdict"]
    return time.perf_counter() - start, r.stderr, cases


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--all", action="store_true", help="every shipped problem in one run")
    ap.add_argument("--warm-only", action="store_true", help="skip the cold-cache run")
    args = ap.parse_args()
    names = spec.available_problems() if args.all else ["stiff-robertson"]
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, SCIML_BENCH_CACHE=cache)
        runs = ["warm"] if args.warm_only else ["cold", "warm"]
        for kind in runs:
            wall, log, records = timed_run(names, env, out)
            refs = [ln for ln in log.splitlines() if ln.startswith("reference:")]
            by_case = {}
            for rec in records:
                key = f"{rec['problem']}/{rec['backend']}"
                by_case[key] = rec.get("status")
            print(f"{'+'.join(names) if not args.all else 'all problems'}: {kind} reference "
                  f"cache: {wall / 60:.2f} min ({len(records)} cases; "
                  f"{sum('cached' in r for r in refs)}/{len(refs)} references read from cache)")
            if kind == "warm":
                print("  statuses: " + ", ".join(f"{k}={v}" for k, v in by_case.items()))


if __name__ == "__main__":
    main()
