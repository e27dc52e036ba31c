"""Every check of the device axis that needs a GPU, in one call on the GPU machine.

    python benchmarks/gpu_checks.py [--out DIR] [--skip-run] [--skip-tests] [--skip-fuzz]

1. ``sciml-bench run stiff-robertson nonstiff-spiral-node --device cpu,cuda --quick``,
   its table printed as it printed, then a check of every row of its results file:
   each ODE row names the device it ran on; Diffrax and torchdiffeq ran where they were
   asked; SciPy and Julia ran on the CPU and say so under a ``cuda`` request; the GPU
   rows carry the GPU's name and a device-memory peak.
2. The GPU-marked tests (``pytest -m gpu``: ODE cases on CUDA with read-back and memory,
   the default keeping JAX on the CPU, the CNN variants on the GPU).
3. ``tests/test_fuzz.py`` whole, whose memory check once failed there (1481 MB of
   ``ru_maxrss`` grown by earlier CUDA imports, not by fuzzing).

Without a visible GPU it prints one line and exits with status 2. Exit 1 when a check
fails, 0 when all pass. ``--out`` keeps the results file (e.g. ``--out $OUT``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RUN = ["run", "stiff-robertson", "nonstiff-spiral-node", "--device", "cpu,cuda", "--quick"]


def row_problems(records: list[dict[str, Any]]) -> list[str]:
    """What is wrong with the device of each ODE row (empty when every row is honest)."""
    bad = []
    for r in records:
        if r.get("kind", "ode") != "ode" or r.get("status") == "unavailable":
            continue
        label = f"{r.get('problem')} {r.get('backend')} (asked {r.get('device_requested')})"
        dev, asked = r.get("device"), r.get("device_requested")
        if dev not in ("cpu", "cuda"):
            bad.append(f"{label}: no device read back ({r.get('status')}: {r.get('reason')})")
        elif r["backend"] in ("diffrax", "torchdiffeq") and dev != asked:
            bad.append(f"{label}: ran on {dev}")
        elif r["backend"] in ("scipy", "julia") and dev != "cpu":
            bad.append(f"{label}: a CPU-only backend reports {dev}")
        elif asked == "cuda" and dev == "cpu" and "runs only on the CPU" not in r.get("reason", ""):
            bad.append(f"{label}: on the CPU without saying so")
        if dev == "cuda" and r.get("status") == "ok":
            if not r.get("device_name"):
                bad.append(f"{label}: no GPU name")
            if r.get("alloc_peak_mb") is None or r.get("vram_max_mb") is None:
                bad.append(f"{label}: no device-memory peak")
    return bad


def run_table(out: Path) -> bool:
    from sciml_bench.results import store

    print("$ sciml-bench " + " ".join(RUN), flush=True)
    r = subprocess.run([sys.executable, "-m", "sciml_bench.cli.main", *RUN, "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT, timeout=1800)
    print(r.stdout, flush=True)
    if r.returncode != 0:
        print(f"FAIL: exit status {r.returncode}\n{r.stderr[-3000:]}")
        return False
    auto = [ln for ln in r.stderr.splitlines() if ln.startswith("--device")]
    print("\n".join(auto))
    (path,) = sorted(out.glob("*.h5"))[-1:]
    records = store.read(path).records
    bad = row_problems(records)
    for b in bad:
        print(f"FAIL: {b}")
    ran = sorted({(r["backend"], r.get("device"), r["status"]) for r in records
                  if r.get("kind", "ode") == "ode"})
    print("rows (backend, device, status):", ran)
    print(f"results file: {path}")
    if not bad:
        print("PASS: every row names the device it ran on")
    return not bad


def pytest(*args: str) -> bool:
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args]
    print("$ " + " ".join(cmd[1:]), flush=True)
    return subprocess.run(cmd, cwd=ROOT).returncode == 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="folder for the results file (default: temporary)")
    ap.add_argument("--skip-run", action="store_true")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--skip-fuzz", action="store_true")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from sciml_bench.measure.environment import gpus

    found = gpus()
    if not found:
        print("gpu_checks: no NVIDIA GPU visible (NVML sees none); run this on the GPU machine",
              file=sys.stderr)
        return 2
    print(f"GPU: {found[0]['name']}, driver {found[0]['driver']}", flush=True)
    ok = True
    if not a.skip_run:
        out = a.out or Path(tempfile.mkdtemp(prefix="gpu-checks-"))
        out.mkdir(parents=True, exist_ok=True)
        ok &= run_table(out)
    if not a.skip_tests:
        ok &= pytest("-m", "gpu", "tests/test_device.py", "tests/test_cnn.py")
    if not a.skip_fuzz:
        ok &= pytest("-s", "tests/test_fuzz.py")
    print("ALL GPU CHECKS PASSED" if ok else "SOME GPU CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
