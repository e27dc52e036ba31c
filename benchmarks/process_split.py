"""What splits a fresh process's speed: the same compiled Diffrax gradient in many fresh
processes, one thing varied at a time (issue 43).

Each process is a bare twin (no sciml-bench code) of a problem's loss gradient and solve:
Diffrax's (``_bare_diffrax.py``) by default, or CVODES through CasADi's or diffsol's
(``--backend``: ``_bare_cvodes.py``, ``_bare_diffsol.py``), run in the suite's worker
environment, and reports its raw samples; the figure of a process is its median. A
*variant* changes one thing against ``baseline``:

- ``pin0``, ``pin1``: the process pinned to one core (``taskset -c``);
- ``pinlate``: every thread pinned after the compiling calls, before the samples, by the
  suite's rule (``_bare_pin.py``: the core others use least; the 2026-11-28 figures in
  benchmarks/README.md pinned core 1);
- ``threads1``: XLA's and BLAS's thread counts at 1 (the baseline has the worker's budget);
- ``arena1``: ``MALLOC_ARENA_MAX=1``;
- ``noaslr``: address-space randomisation off (``setarch -R``);
- ``hugepages``: glibc's malloc on transparent huge pages (``glibc.malloc.hugetlb=1``);
- ``imports``: NumPy, SciPy, h5py and the suite's worker imported before JAX, as a worker does;
- ``warm100``: 100 untimed calls before the samples instead of 1.

Processes run round by round, the variants in a fresh random order each round, so that
the machine's drift falls on every variant alike; each process records the CPU other
processes took while it ran (cores' worth, from ``/proc/stat``), and rows above
``--load-limit`` are counted apart. Per variant it prints the per-process medians' range,
their max/min and 95th/5th percentile ratios, and the best two-mode split of their logs
(the two modes' centres and how many processes each holds): a split whose centres differ
by 1.2x or more is reported as bimodal.

    python benchmarks/process_split.py [--processes 20] [--variants baseline,pin0,...]
        [--repeats 200] [--backend diffrax|cvodes|diffsol] [--problem NAME] [--out FILE.json]

``--processes 40 --variants baseline`` is the issue's 40-process measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness_overhead import bare_config, worker_env  # noqa: E402

from sciml_bench.problem import spec  # noqa: E402
from sciml_bench.run.executor import thread_env  # noqa: E402

#: each problem's vector field in the bare twins
RHS = {"nonstiff-lotka-volterra": "lotka-volterra", "stiff-robertson": "robertson",
       "stiff-hires": "hires"}
#: a two-mode split whose centres differ by at least this much is called bimodal
BIMODAL = 1.2
IMPORTS_FIRST = (
    "import os, sys, runpy, numpy, scipy.integrate, h5py, sciml_bench.run.worker; "
    "sys.argv = sys.argv[1:]; sys.path.insert(0, os.path.dirname(sys.argv[0])); "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def variant_call(name: str, cfg: Path, repeats: int, base: dict[str, str],
                 backend: str = "diffrax") -> tuple[list[str], dict[str, str]]:
    """The command and environment of one process of variant ``name`` of ``backend``'s twin."""
    twin = str(HERE / f"_bare_{backend}.py")
    cmd, env = [sys.executable, twin, str(cfg), str(repeats)], dict(base)
    if name in ("pin0", "pin1"):
        cmd = ["taskset", "-c", name[-1], *cmd]
    elif name == "pinlate":
        env["BARE_PIN"] = "1"  # the suite's rule: the core others use least
    elif name == "threads1":
        env.update(thread_env(1, env.get("XLA_FLAGS", "")))
    elif name == "arena1":
        env["MALLOC_ARENA_MAX"] = "1"
    elif name == "noaslr":
        cmd = ["setarch", platform.machine(), "-R", *cmd]
    elif name == "hugepages":
        env["GLIBC_TUNABLES"] = "glibc.malloc.hugetlb=1"
    elif name == "imports":
        cmd = [sys.executable, "-c", IMPORTS_FIRST, *cmd[1:]]
    elif name == "warm100":
        if backend != "diffrax":
            raise SystemExit("warm100: only Diffrax's twin takes a warm-up count")
        cmd.append("100")
    elif name != "baseline":
        raise SystemExit(f"unknown variant {name!r}; choose from {', '.join(VARIANTS)}")
    return cmd, env


VARIANTS = ("baseline", "pin0", "pin1", "pinlate", "threads1", "arena1", "noaslr", "hugepages",
            "imports", "warm100")


def busy_seconds() -> float:
    """CPU seconds every core has spent busy since boot (``/proc/stat``)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    vals = [int(v) for v in fields]
    idle = vals[3] + vals[4]  # idle + iowait
    return (sum(vals[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def one_process(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run one process; its per-kind medians and the others' CPU while it ran."""
    ru0, busy0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), busy_seconds(), time.time()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"process_split: a twin process failed (exit status {r.returncode}):"
                         f" {' '.join(cmd)}\n{r.stderr[-2000:]}")  # fmt: skip
    ru1, busy1, t1 = resource.getrusage(resource.RUSAGE_CHILDREN), busy_seconds(), time.time()
    own = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return {**{k: float(np.median(v)) for k, v in out.items()},
            "others_cpu": max(0.0, (busy1 - busy0 - own) / (t1 - t0)), "wall_s": t1 - t0}


def two_modes(values: list[float]) -> tuple[float, float, int, int]:
    """The split of ``values``' logs into a low and a high group that leaves the least
    within-group variance: (low centre, high centre, n low, n high) as geometric means."""
    x = np.sort(np.log(values))
    best = (np.inf, 0)
    for k in range(1, len(x)):
        sse = ((x[:k] - x[:k].mean()) ** 2).sum() + ((x[k:] - x[k:].mean()) ** 2).sum()
        best = min(best, (sse, k))
    k = best[1] or len(x)
    lo, hi = np.exp(x[:k].mean()), np.exp(x[k:].mean()) if k < len(x) else np.nan
    return float(lo), float(hi), k, len(x) - k


def summary_line(name: str, kind: str, medians: list[float]) -> str:
    m = np.asarray(medians) * 1e3
    lo, hi, n_lo, n_hi = two_modes(list(m))
    split = hi / lo
    modes = (f"bimodal {lo:.3f} | {hi:.3f} ms ({n_lo}/{n_hi}, {split:.2f}x)"
             if split >= BIMODAL else f"one mode (best split {split:.2f}x)")
    return (f"{name:<10} {kind:<5} n={len(m):<3} median {np.median(m):7.3f} ms  "
            f"range {m.min():.3f}-{m.max():.3f}  max/min {m.max() / m.min():5.2f}x  "
            f"p95/p5 {np.percentile(m, 95) / np.percentile(m, 5):5.2f}x  {modes}")


def report(rows: list[dict[str, Any]], variants: list[str], load_limit: float) -> None:
    for kind in ("grad", "solve"):
        for name in variants:
            quiet = [r[kind] for r in rows if r["variant"] == name and r["others_cpu"] <= load_limit]
            n_loaded = sum(1 for r in rows if r["variant"] == name) - len(quiet)
            if len(quiet) >= 2:
                extra = f"  ({n_loaded} loaded left out)" if n_loaded else ""
                print(summary_line(name, kind, quiet) + extra)
            else:
                print(f"{name:<10} {kind:<5} too few quiet processes ({n_loaded} loaded)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=20, help="fresh processes per variant")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--repeats", type=int, default=200, help="samples per kind per process")
    ap.add_argument("--problem", default="nonstiff-lotka-volterra", choices=sorted(RHS))
    ap.add_argument("--backend", default="diffrax", choices=("diffrax", "cvodes", "diffsol"),
                    help="whose bare twin runs (the suite's solver and gradient method)")
    ap.add_argument("--load-limit", type=float, default=0.5,
                    help="others' cores above which a process is left out of the figures")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="write every process's figures here (JSON)")
    args = ap.parse_args()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    rng = random.Random(args.seed)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        problem = spec.load(args.problem)
        cfg = bare_config(problem, RHS[args.problem], args.backend, Path(tmp))
        base = worker_env(Path(tmp) / "scratch")
        for rnd in range(args.processes):
            for name in rng.sample(variants, len(variants)):
                cmd, env = variant_call(name, cfg, args.repeats, base, args.backend)
                rows.append({"variant": name, "round": rnd, **one_process(cmd, env)})
                if args.out:
                    args.out.write_text(json.dumps(rows, indent=1))
            print(f"round {rnd + 1}/{args.processes} done", file=sys.stderr, flush=True)
    report(rows, variants, args.load_limit)


if __name__ == "__main__":
    main()
