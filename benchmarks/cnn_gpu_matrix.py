"""The CNN second-wave GPU matrix in one call: host pipeline x fp32/bf16, and ResNet-18.

Runs, each into its own results file under ``--out``::

    sciml-bench run cnn --device cuda --pipeline host --precision fp32,bf16 --target-accuracy T
    sciml-bench run cnn --device cuda --model resnet18 --precision fp32,bf16 --target-accuracy T

for torch-eager, torch-compile and jax (``-b``; TensorFlow too when ``--with-tensorflow``),
prints each run's table, then one summary line per variant: bf16 training throughput and
batch-1 latency as ratios to fp32. Exits 2 with one line when no NVIDIA GPU is visible.
Usage (on the GPU machine)::

    python benchmarks/cnn_gpu_matrix.py                 # the ApX-sized runs
    python benchmarks/cnn_gpu_matrix.py --quick         # CI sizes, a smoke test
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys

VARIANTS = ("torch-eager", "torch-compile", "jax")


def _cli(args: list[str]) -> int:
    cmd = [sys.executable, "-c", "from sciml_bench.cli.main import main; main()", *args]
    print("$ sciml-bench " + " ".join(args), flush=True)
    return subprocess.run(cmd, check=False).returncode


def _summary(path: str) -> list[str]:
    from sciml_bench.results.store import read

    recs = [r for r in read(path).records if r.get("status") == "ok"]
    out = []
    for r in recs:
        if r.get("precision") != "bf16":
            continue
        ref = next((f for f in recs if f.get("precision") == "fp32"
                    and f["backend"] == r["backend"]), None)  # fmt: skip
        if ref is None:
            continue
        speed = r["throughput_ips"] / ref["throughput_ips"]
        lat = (r.get("latency_p50_ms") or 0) / (ref.get("latency_p50_ms") or float("nan"))
        flag = " FLAGGED" if r.get("precision_flagged") else ""
        out.append(
            f"  {r['backend']:<14} {r.get('model')}/{r.get('pipeline')}: bf16 trains {speed:.2f}x "
            f"fp32's images/s, batch-1 p50 latency {lat:.2f}x, accuracy {r['accuracy']:.3f} vs "
            f"{ref['accuracy']:.3f}{flag}"
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="CI sizes")
    ap.add_argument("--out", default="results/gpu-matrix", help="folder for the results files")
    ap.add_argument("--target-accuracy", default="0.9")
    ap.add_argument("--with-tensorflow", action="store_true")
    a = ap.parse_args()

    from sciml_bench.measure.memory import gpu_count

    if not gpu_count():
        print("cnn_gpu_matrix: no NVIDIA GPU is visible (NVML finds none); run it on the GPU "
              "machine", file=sys.stderr)  # fmt: skip
        return 2
    names = [*VARIANTS, *(["tensorflow"] if a.with_tensorflow else [])]
    common = ["--device", "cuda", "--precision", "fp32,bf16", "--target-accuracy",
              a.target_accuracy, *(x for n in names for x in ("-b", n))]  # fmt: skip
    if a.quick:
        common.append("--quick")
    runs = {"host pipeline": ["--pipeline", "host"], "resnet18": ["--model", "resnet18"]}
    worst = 0
    for label, extra in runs.items():
        folder = os.path.join(a.out, label.replace(" ", "-"))
        rc = _cli(["run", "cnn", *extra, *common, "--out", folder])
        worst = max(worst, rc)
        files = sorted(glob.glob(os.path.join(folder, "*.h5")), key=os.path.getmtime)
        if files:
            print(f"\nbf16 vs fp32, {label}:")
            print("\n".join(_summary(files[-1])) or "  (no ok fp32/bf16 pair)")
        print()
    return worst


if __name__ == "__main__":
    sys.exit(main())
