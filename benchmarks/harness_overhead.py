"""Harness overhead: sciml-bench's steady Diffrax gradient time on stiff-robertson
divided by the same call in a minimal standalone Diffrax script.

Both run as fresh subprocesses, interleaved A/B/A/B for ``--rounds`` rounds so
that machine drift hits both alike; the figure is the ratio of the medians of
all raw samples (target: <= 1.05).

    python benchmarks/harness_overhead.py [--rounds 4] [--repeats 20]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from sciml_bench.problem import reference, spec

HERE = Path(__file__).resolve().parent


def suite_samples(out: str, repeats: int) -> list[float]:
    r = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "run", "stiff-robertson", "-b", "diffrax",
         "--solver", "Kvaerno5", "--cold", "1", "--repeats", str(repeats), "--out", out, "--json"],
        capture_output=True, text=True, check=True,
    )
    from sciml_bench.results import store as results

    (rec,) = json.loads(r.stdout)
    assert rec["status"] == "ok", rec["reason"]
    path = sorted(Path(out).glob("*.h5"))[-1]
    (stored,) = results.read(path).records
    return stored["grad_samples"]


def standalone_samples(cfg: str, repeats: int) -> list[float]:
    r = subprocess.run(
        [sys.executable, str(HERE / "_standalone_diffrax.py"), cfg, str(repeats)],
        capture_output=True, text=True, check=True,
    )
    return json.loads(r.stdout.strip().splitlines()[-1])["grad_samples"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()

    problem = spec.load("stiff-robertson")
    ref = reference.get(problem)
    cp = reference.compile_problem(problem, ref)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "rober.json"
        cfg.write_text(json.dumps({
            "W": cp.loss_W.tolist(), "O": cp.loss_O.tolist(), "rtol": cp.rtol, "atol": cp.atol,
            "t_save": cp.t_save.tolist(), "t1": cp.t_span[1], "y0": cp.y0.tolist(),
            "theta0": cp.theta0.tolist(), "max_steps": cp.max_steps,
        }))
        suite: list[float] = []
        alone: list[float] = []
        for i in range(args.rounds):
            suite += suite_samples(tmp, args.repeats)
            alone += standalone_samples(str(cfg), args.repeats)
            print(f"round {i + 1}: suite {np.median(suite) * 1e3:.2f} ms, "
                  f"standalone {np.median(alone) * 1e3:.2f} ms", file=sys.stderr)
    ratio = float(np.median(suite) / np.median(alone))
    print(f"harness overhead (Diffrax, stiff-robertson, steady loss+grad): "
          f"suite {np.median(suite) * 1e3:.2f} ms / standalone {np.median(alone) * 1e3:.2f} ms "
          f"= {ratio:.3f}  (n={len(suite)} each; target <= 1.05)")


if __name__ == "__main__":
    main()
