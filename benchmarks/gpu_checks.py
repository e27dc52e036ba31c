"""Every check of the device axis that needs a GPU, in one call on the GPU machine.

    python benchmarks/gpu_checks.py [--out DIR] [--skip-run] [--skip-ensembles]
                                    [--skip-tests] [--skip-fuzz]

1. ``sciml-bench run stiff-robertson nonstiff-spiral-node --device cpu,cuda --quick``,
   its table printed as it printed, then a check of every row of its results file:
   each ODE row names the device it ran on; Diffrax, torchdiffeq and torchode ran where
   they were asked; SciPy and Julia ran on the CPU and say so under a ``cuda`` request;
   the GPU rows carry the GPU's name and a device-memory peak.
2. ``sciml-bench run ensemble-lorenz ensemble-spiral-node --device cpu,cuda --sizes
   1,256,4096,65536 --quick --budget 90``: every ensemble ladder on both devices, each
   row printed with its device (asked and reported), then the same
   check: the GPU-capable ensembles (Diffrax both semantics, torchdiffeq coupled,
   torchode independent) asked for ``cuda`` say ``cuda``, with the GPU's name and a
   memory peak when ok; SciPy's loop says ``cpu`` under either request. A large CPU rung
   may end ``budget_exceeded`` (the rest of its ladder ``skipped``): an honest row, not a
   failed check. It takes about 10-20 minutes; with the device tool's 10-minute calls,
   run it alone (``--skip-run --skip-tests --skip-fuzz``).
3. The GPU-marked tests (``pytest -m gpu``: ODE cases and ensembles on CUDA with
   read-back and memory, the default keeping JAX on the CPU, the CNN variants on the GPU).
4. ``tests/test_fuzz.py`` whole, whose memory check once failed there (1481 MB of
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
ENSEMBLES = ["run", "ensemble-lorenz", "ensemble-spiral-node", "--device", "cpu,cuda",
             "--sizes", "1,256,4096,65536", "--quick", "--budget", "90"]  # fmt: skip
#: backends whose ensembles (and ODE cases) run on the GPU when asked
ON_GPU = ("diffrax", "torchdiffeq", "torchode")
#: rows that never ran a worker: no device was read back, by design
NOT_RUN = ("unavailable", "skipped")


def row_problems(records: list[dict[str, Any]], kind: str = "ode") -> list[str]:
    """What is wrong with the device of each row of ``kind`` (``ode`` or ``ensemble``);
    empty when every row is honest."""
    bad = []
    for r in records:
        if r.get("kind", "ode") != kind or r.get("status") in NOT_RUN:
            continue
        label = f"{r.get('problem')} {r.get('backend')} (asked {r.get('device_requested')})"
        if kind == "ensemble":
            label = (f"{r.get('problem')} {r.get('backend')} {r.get('semantics')} "
                     f"n={r.get('size')} (asked {r.get('device_requested')})")  # fmt: skip
        dev, asked = r.get("device"), r.get("device_requested")
        if dev not in ("cpu", "cuda"):
            bad.append(f"{label}: no device read back ({r.get('status')}: {r.get('reason')})")
        elif r["backend"] in ON_GPU and dev != asked:
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


def ensemble_lines(records: list[dict[str, Any]]) -> list[str]:
    """Each ensemble row with the device it asked for and the one it reports."""

    def ms(key: str) -> str:
        v = r.get(key)
        return f"{v * 1e3:.3g}" if isinstance(v, float) else "-"

    def num(key: str, fmt: str) -> str:
        v = r.get(key)
        return format(v, fmt) if isinstance(v, int | float) else "-"

    head = (f"{'problem':<21} {'backend':<12} {'semantics':<12} {'size':>6} {'asked':<5} "
            f"{'device':<6} {'status':<16} {'solve ms':>9} {'grad ms':>9} {'members/s':>10} "
            f"{'alloc MB':>9} {'VRAM MB':>8}  device name")  # fmt: skip
    out = [head]
    for r in records:
        if r.get("kind") != "ensemble":
            continue
        out.append(
            f"{r.get('problem', ''):<21} {r.get('backend', ''):<12} {r.get('semantics') or '-':<12} "
            f"{num('size', 'd'):>6} {r.get('device_requested') or '-':<5} "
            f"{r.get('device') or '-':<6} {r.get('status', ''):<16} {ms('solve_s'):>9} "
            f"{ms('grad_s'):>9} {num('throughput', '.3g'):>10} {num('alloc_peak_mb', '.0f'):>9} "
            f"{num('vram_max_mb', '.0f'):>8}  {r.get('device_name') or '-'}"
        )
    return out


def run_ensembles(out: Path) -> bool:
    """Every ensemble ladder on the CPU and the GPU; each row's device checked."""
    from sciml_bench.results import store

    print("$ sciml-bench " + " ".join(ENSEMBLES), flush=True)
    r = subprocess.run([sys.executable, "-m", "sciml_bench.cli.main", *ENSEMBLES, "--out",
                        str(out)], capture_output=True, text=True, cwd=ROOT, timeout=3600)  # fmt: skip
    print(r.stdout, flush=True)
    if r.returncode != 0:
        print(f"FAIL: exit status {r.returncode}\n{r.stderr[-3000:]}")
        return False
    (path,) = sorted(out.glob("*.h5"), key=lambda p: p.stat().st_mtime)[-1:]
    records = store.read(path).records
    print("\n".join(ensemble_lines(records)))
    bad = row_problems(records, "ensemble")
    gpu_ok = [x for x in records if x.get("kind") == "ensemble" and x.get("device") == "cuda"
              and x.get("status") == "ok"]  # fmt: skip
    if not gpu_ok:
        bad.append("no ensemble row ran ok on cuda")
    for b in bad:
        print(f"FAIL: {b}")
    print(f"results file: {path}")
    if not bad:
        print(f"PASS: every ensemble row names the device it ran on ({len(gpu_ok)} ok on cuda)")
    return not bad


def run_table(out: Path) -> bool:
    from sciml_bench.results import store

    print("$ sciml-bench " + " ".join(RUN), flush=True)
    r = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", *RUN, "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1800,
    )
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
    ran = sorted(
        {
            (r["backend"], r.get("device"), r["status"])
            for r in records
            if r.get("kind", "ode") == "ode"
        }
    )
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
    ap.add_argument("--skip-ensembles", action="store_true")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--skip-fuzz", action="store_true")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from sciml_bench.measure.environment import gpus

    found = gpus()
    if not found:
        print(
            "gpu_checks: no NVIDIA GPU visible (NVML sees none); run this on the GPU machine",
            file=sys.stderr,
        )
        return 2
    print(f"GPU: {found[0]['name']}, driver {found[0]['driver']}", flush=True)
    ok = True
    out = a.out or Path(tempfile.mkdtemp(prefix="gpu-checks-"))
    out.mkdir(parents=True, exist_ok=True)
    if not a.skip_run:
        ok &= run_table(out)
    if not a.skip_ensembles:
        ok &= run_ensembles(out)
    if not a.skip_tests:
        ok &= pytest(
            "-m",
            "gpu",
            "tests/test_device.py",
            "tests/test_ensemble_device.py",
            "tests/test_cnn.py",
        )
    if not a.skip_fuzz:
        ok &= pytest("-s", "tests/test_fuzz.py")
    print("ALL GPU CHECKS PASSED" if ok else "SOME GPU CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
