"""Training to a target loss: each backend's time to target ÷ the fastest's, and the suite's
time per iteration ÷ a bare training loop written as the library's own examples write it.

1. Per problem (``--problems``, default the two with a ``[training]`` section), one
   ``sciml-bench run NAME --train`` on every available backend: each row's time to the
   target loss, from the build's start (build and compilation included) and warm (the
   iterations alone, the first at most the median), divided by
   the fastest row's; a row that did not reach it says why (its status and reason).
2. The spiral's median time per iteration (the first, compiling one, excluded) in the
   suite (``-b diffrax,torchdiffeq``) ÷ a bare loop: ``_bare_train_torchdiffeq.py``
   (``examples/ode_demo.py``'s loop with Adam) and ``_bare_train_diffrax.py`` (the Diffrax
   neural-ODE example's ``eqx.filter_jit`` step with ``optax.adam``), same data, weights,
   solver, tolerances and Adam constants. Suite and bare runs are fresh processes,
   interleaved for ``--rounds`` rounds; the figure is the median of every suite iteration
   ÷ the median of every bare one (goal <= 1.05), with the range of the per-round ratios.
   The bare loop's losses are held to the suite's curve (the same work: they must agree to
   the solver's rounding).

    python benchmarks/training.py [--quick] [--rounds 3] [--problems a,b] [--backends a,b]
        [--no-target]

``--quick`` trains 5 iterations: it proves the script runs (no target is reached, and
the ratios of 4 iterations are noise).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from sciml_bench.problem import reference, spec

HERE = Path(__file__).resolve().parent
OVERHEAD_BACKENDS = ("diffrax", "torchdiffeq")
PROBLEMS = ("nonstiff-spiral-node", "stiff-robertson-ude")


def suite_records(target: str, backends: tuple[str, ...], out: Path, quick: bool
                  ) -> list[dict[str, Any]]:  # fmt: skip
    """The training rows of one ``sciml-bench run TARGET --train`` (all backends: ())."""
    from sciml_bench.results import store

    out.mkdir(parents=True)
    cmd = [sys.executable, "-m", "sciml_bench.cli.main", "run", target, "--train", "--out",
           str(out), *(["--quick"] if quick else []), *[a for b in backends for a in ("-b", b)]]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    (path,) = out.glob("*.h5")
    return store.read(path).records


def bare_config(problem: spec.Problem, tmp: Path, quick: bool) -> Path:
    """The spiral's data and training constants for a bare loop (exactly the suite's)."""
    cp = reference.compile_problem(problem, reference.get(problem))
    tr = problem.training.quick(quick)
    cfg = {
        "rtol": cp.rtol, "atol": cp.atol, "max_steps": cp.max_steps, "t0": cp.t_span[0],
        "t1": cp.t_span[1], "t_save": cp.t_save.tolist(), "y0": cp.y0.tolist(),
        "theta0": cp.theta0.tolist(), "W": cp.loss_W.tolist(), "O": cp.loss_O.tolist(),
        "iterations": tr.iterations, "learning_rate": tr.adam.learning_rate,
        "beta1": tr.adam.beta1, "beta2": tr.adam.beta2, "eps": tr.adam.eps,
    }  # fmt: skip
    assert not np.any(cp.loss_C), "the bare loops write the fit loss only"
    path = tmp / f"{problem.name}-train.json"
    path.write_text(json.dumps(cfg))
    return path


def bare_run(backend: str, cfg: Path) -> dict[str, list[float]]:
    r = subprocess.run([sys.executable, str(HERE / f"_bare_train_{backend}.py"), str(cfg)],
                       capture_output=True, text=True, check=True)  # fmt: skip
    return json.loads(r.stdout.strip().splitlines()[-1])


def time_to_target_lines(name: str, records: list[dict[str, Any]]) -> list[str]:
    """Each row's time to target ÷ the fastest row's (with compilation, and warm)."""
    hits = [r for r in records if r.get("time_to_target_s")]
    best = min((r["time_to_target_s"] for r in hits), default=None)
    best_warm = min((r["time_to_target_warm_s"] for r in hits if r.get("time_to_target_warm_s")),
                    default=None)  # fmt: skip
    target = next((r.get("target_loss") for r in records if r.get("target_loss")), "?")
    out = [f"{name}: time to target loss {target} (iteration, s with compilation / warm) "
           "÷ the fastest"]  # fmt: skip
    for r in records:
        label = f"  {r['backend']:<12} {r.get('solver', ''):<9}"
        if r.get("time_to_target_s"):
            t, w = r["time_to_target_s"], r.get("time_to_target_warm_s")
            warm = f"{w:8.3g} s  ({w / best_warm:5.2f})" if w and best_warm else "-"
            out.append(f"{label} it {r['target_iteration']:>5}  {t:8.3g} s ({t / best:5.2f})  "
                       f"warm {warm}")  # fmt: skip
        else:
            why = r.get("reason") or f"not reached in {r.get('iterations_done')} iterations"
            out.append(f"{label} {r.get('status')}: {why[:110]}")
    return out


def overhead(rounds: int, quick: bool, tmp: Path) -> float:
    """The suite's median time per iteration ÷ the bare loop's, per backend; the worst."""
    problem = spec.load("nonstiff-spiral-node")
    cfg = bare_config(problem, tmp, quick)
    suite: dict[str, list[float]] = {}
    bare: dict[str, list[float]] = {}
    per_round: dict[str, list[float]] = {}
    agree: dict[str, float] = {}
    for rnd in range(rounds):
        recs = suite_records(problem.name, OVERHEAD_BACKENDS, tmp / f"overhead{rnd}", quick)
        for r in recs:
            b = r["backend"]
            assert r["status"] == "ok", f"{b}: {r['status']}: {r.get('reason')}"
            alone = bare_run(b, cfg)
            s, a = r["iteration_samples"][1:], alone["seconds"][1:]
            suite.setdefault(b, []).extend(s)
            bare.setdefault(b, []).extend(a)
            per_round.setdefault(b, []).append(float(np.median(s) / np.median(a)))
            dev = np.abs(np.asarray(alone["loss"]) - r["curve_loss"]) / np.abs(r["curve_loss"])
            agree[b] = max(agree.get(b, 0.0), float(np.max(dev)))
        print(f"round {rnd + 1} of {rounds} done", file=sys.stderr)
    worst = 0.0
    for b in sorted(suite):
        s, a = float(np.median(suite[b])), float(np.median(bare[b]))
        worst = max(worst, s / a)
        rr = per_round[b]
        print(f"overhead {b:<12} spiral  suite {s * 1e3:8.3f} ms / bare {a * 1e3:8.3f} ms per "
              f"iteration = {s / a:.3f}  (n={len(suite[b])} each; rounds {min(rr):.2f}-"
              f"{max(rr):.2f}; losses agree to {agree[b]:.1e})")  # fmt: skip
    print(f"worst overhead = {worst:.3f}")
    return worst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="5 iterations: proves the script runs")
    ap.add_argument("--problems", default=",".join(PROBLEMS))
    ap.add_argument("--backends", default="",
                    help="the time-to-target table's backends, comma-separated [every one]")
    ap.add_argument("--no-target", action="store_true", help="only the overhead figure")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        if not args.no_target:
            backends = tuple(b for b in args.backends.split(",") if b)
            for i, target in enumerate(p for p in args.problems.split(",") if p):
                recs = suite_records(target, backends, tmp / f"t{i}", args.quick)
                for line in time_to_target_lines(target, recs):
                    print(line)
        overhead(args.rounds, args.quick, tmp)


if __name__ == "__main__":
    main()
