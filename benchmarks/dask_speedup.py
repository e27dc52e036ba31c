"""Wall-clock speed-up of a ``--sweep`` on a Dask LocalCluster of N workers over the
local executor, measured side by side in one run.

Both runs are ``sciml-bench run PROBLEM --sweep`` as a user types it (a fresh
process each, the Dask one starting and closing its LocalCluster inside its
time), and must give the same rows (status per case). On a machine with C
cores expect at most about min(N, C)x, less the cluster's start-up.

    python benchmarks/dask_speedup.py                        # stiff-robertson, scipy, N = cores
    python benchmarks/dask_speedup.py --workers 8 -b scipy -b torchdiffeq nonstiff-lotka-volterra
    python benchmarks/dask_speedup.py my.toml --tolerances 1e-4,1e-6 --quick --workers 1  # smoke
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


def timed_run(args: list[str], out: str) -> tuple[float, list[dict]]:
    start = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "run", *args, "--out", out, "--json"],
        capture_output=True, text=True, check=False,
    )
    wall = time.perf_counter() - start
    if r.returncode:
        sys.exit(f"sciml-bench run {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return wall, [x for x in json.loads(r.stdout) if x.get("kind") != "verdict"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("problem", nargs="?", default="stiff-robertson")
    ap.add_argument("-b", "--backend", action="append", default=None, help="default: scipy")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--quick", action="store_true", help="pass --quick to both runs")
    ap.add_argument("--tolerances", help="these rtols instead of --sweep's ladder (comma list)")
    a = ap.parse_args()
    target = ["--problem-file", a.problem] if a.problem.endswith(".toml") else [a.problem]
    ladder = ["--tolerances", a.tolerances] if a.tolerances else ["--sweep"]
    common = target + ladder + [f"-b{b}" for b in a.backend or ["scipy"]]
    common += ["--quick"] if a.quick else []
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    with tempfile.TemporaryDirectory() as out:
        local_s, local = timed_run(common, out)
        dask_s, remote = timed_run([*common, "--executor", "dask", "--workers", str(a.workers)], out)

    def rows(recs: list[dict]) -> list[tuple]:
        return sorted((r["backend"], r["solver"], r.get("rtol") or 0, r["status"]) for r in recs)

    same = rows(local) == rows(remote)
    print(
        f"{a.problem} {' '.join(ladder)}, {len(local)} case(s) ({', '.join(a.backend or ['scipy'])}), "
        f"{os.cpu_count()} cores, load {' '.join(load)}: local {local_s:.1f} s, "
        f"dask LocalCluster x{a.workers} {dask_s:.1f} s = {local_s / dask_s:.2f}x speed-up "
        f"(rows {'identical' if same else 'DIFFERENT'} in status)"
    )
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
