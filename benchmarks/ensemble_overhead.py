"""Ensembles: the harness overhead against bare scripts, and the spread between backends.

Two figures, measured side by side in one run:

1. **Harness overhead** on the Lorenz ensemble (``ensemble-lorenz``, ``--size`` members):
   sciml-bench's steady solve and loss+gradient times divided by the same work in a bare
   script written as a user of the library writes it (``_bare_ensemble_diffrax.py``,
   independent and coupled; ``_bare_ensemble_torchdiffeq.py``, coupled). Suite and bare
   runs are fresh processes, interleaved for ``--rounds`` rounds; a row's figure is the
   median of all the suite's raw samples over the median of all the bare ones
   (goal: <= 1.05).
2. **Backend spread at the largest size**: ``sciml-bench run ensemble-lorenz
   ensemble-spiral-node --sizes LADDER`` on ``--device``; per problem, the largest size
   every backend x semantics completed, and the slowest row's loss+gradient time over the
   fastest's there (solve time for a backend without a gradient is left out).

    python benchmarks/ensemble_overhead.py                      # CPU: size 256, ladder 16,256
    python benchmarks/ensemble_overhead.py --device cuda --ladder 1,256,4096,65536
    python benchmarks/ensemble_overhead.py --device cuda --skip-overhead --results F.h5
    python benchmarks/ensemble_overhead.py --skip-overhead --ladder 1,2 --repeats 1 \
        --problems my-ensemble.toml --backends scipy                  # a smoke test

Prints one line per overhead row, ``worst overhead = X.XXX``, then one line per problem.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from sciml_bench.backends.diffrax import DiffraxBackend
from sciml_bench.measure.device import device_env
from sciml_bench.problem import ensemble as ens
from sciml_bench.problem import reference, spec

HERE = Path(__file__).resolve().parent
PROBLEM = "ensemble-lorenz"
KINDS = ("solve", "grad")
#: (backend, semantics) rows with a bare twin
ROWS = (("diffrax", "independent"), ("diffrax", "coupled"), ("torchdiffeq", "coupled"))


def bare_config(size: int, solver: str, tmp: Path) -> Path:
    """The suite's first ``size`` Lorenz members and settings, as plain JSON."""
    problem = spec.load(PROBLEM)
    assert problem.ensemble is not None
    cp = reference.compile_problem(problem, None)
    assert not np.any(cp.loss_W), "the bare twins write the final-state loss only"
    b = ens.batch(problem.ensemble, cp.y0, len(cp.theta0), size)
    cfg = {
        "solver": solver, "rtol": cp.rtol, "atol": cp.atol, "max_steps": cp.max_steps,
        "t0": cp.t_span[0], "t1": cp.t_span[1], "t_save": cp.t_save.tolist(),
        "theta0": cp.theta0.tolist(), "C": cp.loss_C.tolist(),
        "Y0": b.y0.tolist(), "S": b.scale.tolist(), "A": b.shift.tolist(),
    }  # fmt: skip
    path = tmp / f"{PROBLEM}-{solver}-{size}.json"
    path.write_text(json.dumps(cfg))
    return path


def run_suite(
    problems: list[str],
    sizes: str,
    device: str,
    repeats: int,
    out: Path,
    backends: tuple[str, ...] = (),
) -> list[dict]:
    """Every record of one ``sciml-bench run`` (one fresh worker per case)."""
    from sciml_bench.results import store

    out.mkdir(parents=True)
    targets = [a for p in problems for a in (["--problem-file", p] if p.endswith(".toml") else [p])]
    r = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "run", *targets,
         *[a for b in backends for a in ("-b", b)], "--sizes", sizes,
         "--repeats", str(repeats), "--device", device, "--out", str(out), "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if r.returncode != 0:  # say why (an option the CLI refuses, say), not a bare traceback
        sys.exit(f"ensemble_overhead: sciml-bench run failed ({r.returncode}):\n{r.stderr[-3000:]}")
    (path,) = out.glob("*.h5")
    return list(store.read(path).records)


def bare_samples(backend: str, cfg: Path, arg: str, repeats: int, device: str) -> dict:
    env = {**os.environ, **device_env(device)}
    r = subprocess.run(
        [sys.executable, str(HERE / f"_bare_ensemble_{backend}.py"), str(cfg), arg, str(repeats)],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    return json.loads(r.stdout.strip().splitlines()[-1])


def overhead(args: argparse.Namespace, tmp: Path) -> None:
    configs = {
        "diffrax": bare_config(args.size, DiffraxBackend().ensemble_solver(False), tmp),
        "torchdiffeq": bare_config(args.size, "dopri5", tmp),
    }
    suite: dict[tuple[str, str, str], list[float]] = {}
    bare: dict[tuple[str, str, str], list[float]] = {}
    for rnd in range(args.rounds):
        recs = run_suite([PROBLEM], str(args.size), args.device, args.repeats,
                         tmp / f"r{rnd}", ("diffrax", "torchdiffeq"))  # fmt: skip
        got = {(r["backend"], r["semantics"]): r for r in recs}
        for backend, semantics in ROWS:
            rec = got[backend, semantics]
            assert rec["status"] == "ok", f"{backend} {semantics}: {rec['reason']}"
            arg = semantics if backend == "diffrax" else args.device
            alone = bare_samples(backend, configs[backend], arg, args.repeats, args.device)
            for k in KINDS:
                suite.setdefault((backend, semantics, k), []).extend(rec[f"{k}_samples"])
                bare.setdefault((backend, semantics, k), []).extend(alone[k])
        print(f"round {rnd + 1} of {args.rounds} done", file=sys.stderr, flush=True)
    worst = 0.0
    for key in sorted(suite):
        b, sem, k = key
        s, a = float(np.median(suite[key])), float(np.median(bare[key]))
        worst = max(worst, s / a)
        print(
            f"{b:<12} {sem:<12} {k:<5} n={args.size:<6} suite {s * 1e3:9.3f} ms / "
            f"bare {a * 1e3:9.3f} ms = {s / a:.3f}  ({len(suite[key])} samples each)"
        )
    print(f"worst overhead = {worst:.3f}  ({PROBLEM}, {args.device})")


def spread_lines(records: list[dict], device: str) -> list[str]:
    """Per ensemble problem in ``records``: at the largest size every backend x semantics
    asked for ``device`` completed, the slowest row's loss+gradient time over the
    fastest's."""
    out = []
    for problem in sorted({r["problem"] for r in records if r.get("kind") == "ensemble"}):
        rows = [r for r in records if r["problem"] == problem and r.get("grad_samples") is not None
                and len(r["grad_samples"]) and r.get("device_requested", r.get("device"))
                == device]  # fmt: skip
        lines = {(r["backend"], r["semantics"], r.get("device")) for r in rows}
        done = [
            n
            for n in sorted({r["size"] for r in rows})
            if sum(r["size"] == n for r in rows) == len(lines)
        ]
        if not done:
            out.append(f"{problem}: no size where every row completed")
            continue
        n = max(done)
        t = {f"{r['backend']}/{r['semantics']}/{r.get('device')}": float(np.median(r["grad_samples"]))
             for r in rows if r["size"] == n}  # fmt: skip
        slow, fast = max(t, key=t.__getitem__), min(t, key=t.__getitem__)
        out.append(
            f"{problem}: at n={n} on {device}, slowest {slow} {t[slow] * 1e3:.3g} ms / "
            f"fastest {fast} {t[fast] * 1e3:.3g} ms = {t[slow] / t[fast]:.1f}x "
            f"(loss+gradient, {len(t)} rows)"
        )
    return out


def spread(args: argparse.Namespace, tmp: Path) -> None:
    if args.results:
        from sciml_bench.results import store

        recs = [r for f in args.results for r in store.read(f).records]
    else:
        problems = args.problems or [
            n for n in spec.available_problems() if spec.load(n).ensemble is not None
        ]
        recs = run_suite(problems, args.ladder, args.device, args.repeats, tmp / "ladder",
                         tuple(args.backends))  # fmt: skip
    print("\n".join(spread_lines(recs, args.device)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--size", type=int, default=256, help="members for the overhead rows")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument(
        "--ladder",
        default=None,
        help="sizes for the spread figure [cpu: 16,256; cuda: 1,256,4096,65536]",
    )
    ap.add_argument("--skip-spread", action="store_true")
    ap.add_argument(
        "--results",
        nargs="+",
        type=Path,
        help="take the spread from these results files (an ensemble ladder already run, "
        "e.g. by gpu_checks.py) instead of running the ladder again",
    )
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--problems", type=lambda t: t.split(","),
                    help="the spread's ensemble problems (names or .toml files), comma list "
                    "[every shipped one]")
    ap.add_argument("--backends", type=lambda t: t.split(","), default=[],
                    help="the spread's backends, comma list [every one]")
    args = ap.parse_args()
    if args.device == "cuda":
        from sciml_bench.measure.memory import gpu_count

        if gpu_count() == 0:
            sys.exit("ensemble_overhead: --device cuda, but no NVIDIA GPU is visible (NVML sees none)")
    if args.ladder is None:
        args.ladder = "16,256" if args.device == "cpu" else "1,256,4096,65536"
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if not args.skip_overhead:
            overhead(args, tmp)
        if not args.skip_spread:
            spread(args, tmp)


if __name__ == "__main__":
    main()
