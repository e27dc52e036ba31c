"""Memory per gradient method: the spiral neural ODE's first gradient at 1x, 4x and 16x
its time horizon, for torchdiffeq backprop and adjoint and Diffrax's
RecursiveCheckpointAdjoint and BacksolveAdjoint.

The figure is each row's ``grad_rss_mb``: the RAM the first loss+gradient call needs
above the worker's RSS just before it (``sciml_bench.measure.memory.CallPeak``: the
rise of the kernel's high-water mark, else a sampled peak). Backpropagation through the
solver keeps every step's intermediates, so its memory should grow with the number of
steps, about linearly in the horizon; a continuous adjoint re-integrates backwards and
keeps only the state; a checkpointed adjoint keeps checkpoints sized by ``max_steps``.

The horizon is scaled without touching ``problems/``: the spiral's file is copied into
a temporary folder with ``span``, the 30 save points and the name stretched by each
factor, and run with ``sciml-bench run --problem-file`` (one fresh worker per case, as
a user runs it; its reference is built for the stretched problem).

    python benchmarks/gradient_memory.py                     # 1x, 4x, 16x; four methods
    python benchmarks/gradient_memory.py --scales 1,2 --methods torchdiffeq:backprop

Prints one row per method (MiB at each scale, steps, and the growth factor from the
first scale to the last) and exits 1 when a case did not end ``ok``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from sciml_bench.problem import spec

PROBLEM = "nonstiff-spiral-node"
#: backends whose first gradient call includes a JIT compilation
JIT_FIRST_CALL = {"diffrax", "julia"}
METHODS = (
    "torchdiffeq:backprop", "torchdiffeq:adjoint",
    "diffrax:RecursiveCheckpointAdjoint", "diffrax:BacksolveAdjoint",
)  # fmt: skip


def scaled_problem(factor: float, folder: Path) -> Path:
    """The spiral's file with its horizon, save points and name stretched by ``factor``
    (at 1x the shipped file itself, whose reference may be cached already)."""
    shipped = spec.problems_dir() / f"{PROBLEM}.toml"
    if factor == 1:
        return shipped
    text = shipped.read_text()
    end = 1.5 * factor
    edits = {
        f'name = "{PROBLEM}"': f'name = "{PROBLEM}-x{factor:g}"',
        "span = [0.0, 1.5]": f"span = [0.0, {end!r}]",
        "save = { linspace = [0.0, 1.5, 30] }": f"save = {{ linspace = [0.0, {end!r}, 30] }}",
    }
    for old, new in edits.items():
        if old not in text:
            sys.exit(f"gradient_memory: {PROBLEM}.toml no longer has {old!r}; update this script")
        text = text.replace(old, new)
    path = folder / f"{PROBLEM}-x{factor:g}.toml"
    path.write_text(text)
    return path


def run_scale(problem_file: Path, methods: list[tuple[str, str]], repeats: int,
              out: Path) -> list[dict]:  # fmt: skip
    """The case records of one ``sciml-bench run`` of every method at one horizon."""
    backends = sorted({b for b, _ in methods})
    gradients = sorted({g for _, g in methods})
    cmd = [sys.executable, "-m", "sciml_bench.cli.main", "run", "--problem-file",
           str(problem_file), "-b", ",".join(backends), "--gradient", ",".join(gradients),
           "--cold", "1", "--repeats", str(repeats), "--out", str(out), "--json"]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        sys.exit(f"gradient_memory: sciml-bench run failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return [x for x in json.loads(r.stdout) if x.get("kind") != "verdict"]


def growth_line(label: str, recs: list[dict | None]) -> str:
    """One method's MiB at every scale (``~``: a sampled lower bound, see CallPeak), the
    growth factor from the first scale to the last, the steps, and the MiB each extra
    step cost between them (backprop's tape; about 0 for a method flat in the steps)."""
    mem = [None if r is None else r.get("grad_rss_mb") for r in recs]
    steps = [None if r is None else r.get("steps") for r in recs]
    cells = " ".join(
        "       -" if m is None
        else f"{m:7.1f}" + ("~" if r is not None and r.get("grad_rss_source") == "sampled" else " ")
        for m, r in zip(mem, recs, strict=True)
    )
    m0, m1, s0, s1 = mem[0], mem[-1], steps[0], steps[-1]
    growth = f"{m1 / m0:6.2f}x" if m0 and m1 is not None else "     -"
    per_step = "-"
    if None not in (m0, m1, s0, s1) and s1 != s0:
        per_step = f"{(m1 - m0) / (s1 - s0):+.3f} MiB/step"  # type: ignore[operator]
    step_cells = "/".join("-" if s is None else str(s) for s in steps)
    return f"{label:<36} {cells}   {growth}   steps {step_cells}, {per_step}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scales", default="1,4,16", help="horizon factors, the first is the base")
    ap.add_argument("--methods", default=",".join(METHODS), help="backend:gradient, comma list")
    ap.add_argument("--repeats", type=int, default=1, help="steady repeats per case (min 1)")
    args = ap.parse_args(argv)
    scales = [float(s) for s in args.scales.split(",") if s.strip()]
    methods = [tuple(m.split(":", 1)) for m in args.methods.split(",") if m.strip()]
    if len(scales) < 2 or any(len(m) != 2 for m in methods):
        sys.exit("gradient_memory: give at least two --scales and --methods as backend:gradient")
    found: dict[tuple[str, str], list[dict | None]] = {m: [] for m in methods}  # type: ignore[misc]
    with tempfile.TemporaryDirectory(prefix="sciml-bench-gradmem-") as tmp_name:
        tmp = Path(tmp_name)
        for k in scales:
            print(f"horizon x{k:g} ...", file=sys.stderr, flush=True)
            recs = run_scale(scaled_problem(k, tmp), methods, args.repeats, tmp / f"x{k:g}")  # type: ignore[arg-type]
            for m in methods:
                found[m].append(next((r for r in recs if (r["backend"], r["gradient_method"]) == m), None))  # type: ignore[comparison-overlap]
    print(f"{PROBLEM}: the first gradient's RAM above the worker's RSS before it (MiB)")
    print(f"{'method':<36} " + " ".join(f"{'x' + format(k, 'g'):>8}" for k in scales)
          + f"   growth x{scales[0]:g}->x{scales[-1]:g}")  # fmt: skip
    bad = []
    for (backend, grad), recs in found.items():
        for k, r in zip(scales, recs, strict=True):
            if r is None or r.get("status") != "ok":
                bad.append(f"{backend} {grad} x{k:g}: "
                           + ("no row" if r is None else f"{r['status']}: {r.get('reason')}"))  # fmt: skip
        print(growth_line(f"{backend} {grad}", recs))
    if any(b in JIT_FIRST_CALL for b, _ in methods):
        print("  " + ", ".join(sorted({b for b, _ in methods} & JIT_FIRST_CALL)) + ": the first "
              "gradient compiles, and its figure includes the compiler's memory")
    for line in bad:
        print(f"  not ok: {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
