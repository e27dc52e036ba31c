"""How each library's cost grows with an array problem's size.

Runs ``sciml-bench run PROBLEM --sizes ...`` as a user types it (a fresh process; its wall
time is the figure of the 15-minute goal) or reads results files (``--from``), then prints:

- per backend x solver x Jacobian kind, the exponent ``p`` of time against states,
  ``time ∝ n^p``, over the three largest sizes that line completed (solve and gradient);
- for SciPy and every library that offers both kinds, dense ÷ sparse solve time at the
  largest size both completed;
- each line's last completed size and how the next one ended (budget, memory refusal).

    python benchmarks/scaling.py                                   # stiff-robertson-groups 1,10,100,1000
    python benchmarks/scaling.py stiff-brusselator-2d --sizes 8,16,32
    python benchmarks/scaling.py stiff-robertson-groups --sizes 1,10 -b scipy --quick
    python benchmarks/scaling.py stiff-robertson-groups --sizes 1,2 -b scipy --jacobian sparse --quick
    python benchmarks/scaling.py --from results/stiff-robertson-groups-*.h5
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sciml_bench.results import growth  # noqa: E402

DEFAULT_SIZES = {"stiff-robertson-groups": "1,10,100,1000", "stiff-brusselator-2d": "8,16,32"}


def run(problem: str, sizes: str, extra: list[str]) -> tuple[float, list[dict[str, Any]]]:
    """``sciml-bench run`` in a fresh process: its wall time and its JSON rows."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "sciml_bench.cli.main", "run", problem, "--sizes", sizes,
               "--json", "--out", out, *extra]  # fmt: skip
        start = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT)
        wall = time.perf_counter() - start
    if r.returncode:
        sys.exit(f"{' '.join(cmd[2:])} failed:\n{r.stderr[-3000:]}")
    # the case rows; the verdict records (kind "verdict") that follow them are not rows
    return wall, [row for row in json.loads(r.stdout) if row.get("kind") != "verdict"]


def read(paths: list[str]) -> list[dict[str, Any]]:
    from sciml_bench.results import store

    return [r for p in paths for r in store.read(p).records]


def endings(records: list[dict[str, Any]]) -> list[str]:
    """Per line: the largest size completed and how the first size that did not ended."""
    out: dict[Any, str] = {}
    for r in sorted(records, key=lambda r: r.get("size") or 0):
        if not growth.is_sized(r):
            continue
        key = growth.line_key(r)
        if r.get("status") == "ok" or key in out:
            continue
        last = r.get("largest_ok_size")
        out[key] = (f"{growth.line_label(key)}: largest size completed {last if last else 'none'}; "
                    f"size {r.get('size', '-')} {r.get('status')}: {str(r.get('reason'))[:110]}")  # fmt: skip
    return list(out.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("problem", nargs="?", default="stiff-robertson-groups")
    ap.add_argument("--sizes", help="comma-separated sizes [per problem: 1,10,100,1000; 8,16,32]")
    ap.add_argument("-b", "--backend", action="append", default=[], help="default: every one")
    ap.add_argument("--quick", action="store_true", help="pass --quick (1 cold process, 3 repeats)")
    ap.add_argument("--jacobian", help="pass --jacobian (dense, sparse) [both]")
    ap.add_argument("--from", dest="files", nargs="+", help="results files instead of a run")
    a = ap.parse_args()
    if a.files:
        records, head = read(a.files), f"{len(a.files)} results file(s)"
    else:
        sizes = a.sizes or DEFAULT_SIZES.get(a.problem, "1,10,100")
        extra = [f"-b{b}" for b in a.backend] + (["--quick"] if a.quick else [])
        extra += [f"--jacobian={a.jacobian}"] if a.jacobian else []
        wall, records = run(a.problem, sizes, extra)
        load = (
            Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
        )
        head = (f"sciml-bench run {a.problem} --sizes {sizes} {' '.join(extra)}: {len(records)} "
                f"row(s) in {wall:.0f} s ({wall / 60:.1f} min), load {' '.join(load)}")  # fmt: skip
    print(head)
    for title, lines in (
        ("exponent p of time against states (time ∝ n^p), three largest sizes completed",
         growth.growth_texts(records)),
        ("dense ÷ sparse solve time, largest size both completed", growth.ratio(records)),
        ("dense ÷ sparse gradient time, largest size both completed",
         growth.ratio(records, "grad_s")),
        ("where each line stopped", endings(records)),
    ):  # fmt: skip
        print(f"{title}:")
        print("\n".join(f"  {ln}" for ln in lines) if lines else "  (none)")


if __name__ == "__main__":
    main()
