"""Spiral neural ODE: torchdiffeq's steady gradient time divided by Diffrax's.

Diffrax's docs claim torchdiffeq is "~1.3 to ~20 times slower" on non-stiff
neural ODEs. Both backends run here side by side, in one `sciml-bench run`
of ``nonstiff-spiral-node`` at the same tolerances (default rtol 1e-6, plus
any given with ``--tolerances``), each case in its own fresh worker.

    python benchmarks/spiral_ratio.py [--tolerances 1e-6,1e-9] [--repeats 20]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tolerances", default="1e-6,1e-9")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as out:
        r = subprocess.run(
            [sys.executable, "-m", "sciml_bench.cli.main", "run", "nonstiff-spiral-node",
             "-b", "diffrax", "-b", "torchdiffeq", "--tolerances", args.tolerances,
             "--cold", "1", "--repeats", str(args.repeats), "--json", "--out", out],
            capture_output=True, text=True, check=True,
        )
    records = [x for x in json.loads(r.stdout) if x.get("kind") != "verdict"]
    for rtol in sorted({rec["rtol"] for rec in records}, reverse=True):
        d = next(x for x in records if x["rtol"] == rtol and x["backend"] == "diffrax")
        t = next(x for x in records if x["rtol"] == rtol and x["backend"] == "torchdiffeq")
        if d["status"] != "ok" or t["status"] != "ok":
            print(f"rtol={rtol:g}: diffrax {d['status']}, torchdiffeq {t['status']}: no ratio")
            continue
        print(
            f"spiral rtol={rtol:g}: torchdiffeq {t['grad_s'] * 1e3:.2f} ms / diffrax "
            f"{d['grad_s'] * 1e3:.3f} ms = {t['grad_s'] / d['grad_s']:.1f}x (steady loss+grad; "
            f"grad err {t['gradient_error']:.1e} vs {d['gradient_error']:.1e}; "
            f"solve ratio {t['solve_s'] / d['solve_s']:.1f}x)"
        )


if __name__ == "__main__":
    main()
