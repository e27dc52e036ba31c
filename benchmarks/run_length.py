"""Run length of the default benchmark, cold and warm reference cache.

Times ``sciml-bench run NAME`` with default settings as a user runs it: first
with an empty reference cache, then again with the cache warm (which must skip
the reference computation entirely: the run says "reference: read from the cache").

    python benchmarks/run_length.py                 # stiff-robertson (target < 3 min)
    python benchmarks/run_length.py --all           # every problem (target < 20 min)
    python benchmarks/run_length.py --problem my.toml -b scipy   # a smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sciml_bench.problem import spec


def timed_run(names: list[str], env: dict[str, str], out: str,
              extra: tuple[str, ...] = ()) -> tuple[float, str, list[dict]]:  # fmt: skip
    start = time.perf_counter()
    targets = [a for n in names for a in (["--problem-file", n] if n.endswith(".toml") else [n])]
    r = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "run", *targets, *extra, "--out", out,
         "--json"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    if r.returncode != 0:
        sys.exit(f"run_length: sciml-bench run failed ({r.returncode}):\n{r.stderr[-3000:]}")
    cases = [x for x in json.loads(r.stdout) if x.get("kind") != "verdict"]
    return time.perf_counter() - start, r.stderr, cases


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--all", action="store_true", help="every shipped problem in one run")
    ap.add_argument("--warm-only", action="store_true", help="skip the cold-cache run")
    ap.add_argument("--problem", default="stiff-robertson", help="a name or a .toml file")
    ap.add_argument("-b", "--backend", action="append", default=[],
                    help="only these backends (default: every one, as the default run)")
    args = ap.parse_args()
    names = spec.available_problems() if args.all else [args.problem]
    extra = tuple(a for b in args.backend for a in ("-b", b))
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, SCIML_BENCH_CACHE=cache)
        runs = ["warm"] if args.warm_only else ["cold", "warm"]
        for kind in runs:
            wall, log, records = timed_run(names, env, out, extra)
            refs = [ln for ln in log.splitlines() if ln.startswith("reference:")]
            by_case = {}
            for rec in records:
                key = f"{rec['problem']}/{rec['backend']}"
                by_case[key] = rec.get("status")
            label = "+".join(Path(n).stem for n in names) if not args.all else "all problems"
            print(f"{label}: {kind} reference "
                  f"cache: {wall / 60:.2f} min ({len(records)} cases; "
                  f"{sum('read from the cache' in r for r in refs)}/{len(refs)} references read from cache)")
            if kind == "warm":
                print("  statuses: " + ", ".join(f"{k}={v}" for k, v in by_case.items()))


if __name__ == "__main__":
    main()
