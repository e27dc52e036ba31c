"""diffsol's ladder rows against a bare pydiffsol script: the suite's steady solve and
gradient on ``stiff-robertson-groups`` (``--jacobian sparse``: ``faer_sparse``, BDF,
forward sensitivities) divided by the same work in ``_bare_diffsol_groups.py``, written
as a pydiffsol user and diffsol's own ``robertson_ode`` benchmark write it.

Each round runs, per size, one ``sciml-bench run stiff-robertson-groups --sizes N -b
diffsol --jacobian sparse`` (one fresh worker per rung, as a ladder runs) and fresh
processes of the twin: with its hand-written DiffSL (``hand``, the figure), and with the
suite's own generated DiffSL (``gen``), which splits what is left into the harness
(``suite / gen``) and the generated model (``gen / hand``). The twins run in the workers'
environment; the order alternates by round (suite first in even rounds, twins first in
odd ones). A row's figure is the median of the suite's raw samples over the median of
the twin's, with a 95 % hierarchical-bootstrap interval over rounds and samples
(``harness_overhead.ratio_ci``). Before any figure, the twin's loss and gradient at the
initial parameters are held to the suite's row (log-space gradient within 1e-3,
relative): the same work, or the script stops. Goal: ``suite / hand`` <= 1.15.

    python benchmarks/diffsol_bare_ladder.py [--sizes 100,1000] [--rounds 3] [--repeats 10]
    python benchmarks/diffsol_bare_ladder.py --sizes 2 --rounds 1 --repeats 2   # a smoke test

    python benchmarks/diffsol_bare_ladder.py --in-process 5 --rounds 6   # CPU time, one process

Prints per size and kind ``suite / hand`` and ``suite / gen`` with intervals, then
``worst suite/hand = X.XXX  95% CI [lo, hi]  (row)``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from harness_overhead import (  # benchmarks/ is sys.path[0]
    bare_samples,
    interleave,
    ratio_ci,
    worker_env,
)

from sciml_bench.backends.base import CaseOptions
from sciml_bench.backends.diffsol import DiffsolBackend, case_settings
from sciml_bench.problem import reference, spec
from sciml_bench.problem.compiled import log_scaled

PROBLEM = "stiff-robertson-groups"
KINDS = ("solve", "grad")
TWINS = ("hand", "gen")


def twin_config(n: int, tmp: Path) -> dict[str, Path]:
    """The twin's configs at ``n`` groups, ``hand`` and ``gen`` (the suite's DiffSL): the
    problem's data and the solver, matrices and gradient method the suite's sparse row uses."""
    problem = spec.at_size(spec.load(PROBLEM), n)
    cp = reference.compile_problem(problem, reference.get(problem))
    assert not np.any(cp.loss_C), "the twin writes the fit loss only"
    assert log_scaled(cp).all(), "the twin takes every rate as its log, as the suite's model"
    b = DiffsolBackend()
    opts = CaseOptions(b.default_solver(cp.stiff), b.default_gradient(cp), cp.rtol, cp.atol,
                       cp.max_steps, extra={"jacobian": "sparse"})  # fmt: skip
    st = case_settings(cp, opts)
    assert (st["sens_rtol"], st["sens_atol"]) == (cp.rtol, cp.atol), "twin: sens tolerances"
    cfg = {"n": n, "theta0": cp.theta0.tolist(), "rtol": cp.rtol, "atol": cp.atol,
           "t_save": cp.t_save.tolist(), "W": cp.loss_W.tolist(), "O": cp.loss_O.tolist(),
           "solver": st["solver"], "matrix_type": st["matrix_type"],
           "gradient": st["gradient"]}  # fmt: skip
    out = {}
    for twin in TWINS:
        path = tmp / f"groups-{n}-{twin}.json"
        extra = {"code": cp.source["diffsl"]} if twin == "gen" else {}
        path.write_text(json.dumps({**cfg, **extra}))
        out[twin] = path
    return out


def suite_rows(sizes: list[int], out: Path, repeats: int) -> dict[int, dict]:
    """The suite's diffsol rung per size, from one ``sciml-bench run``: its record."""
    from sciml_bench.results import store

    out.mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "run", PROBLEM, "--sizes",
         ",".join(map(str, sizes)), "-b", "diffsol", "--jacobian", "sparse", "--repeats",
         str(repeats), "--out", str(out)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    (path,) = out.glob("*.h5")
    found = {}
    for rec in store.read(path).records:
        if rec.get("backend") != "diffsol":
            continue
        assert rec["status"] == "ok", f"diffsol n={rec['size']}: {rec['reason']}"
        found[int(rec["size"])] = rec
    return found


def same_work(rec: dict, twin: dict, n: int) -> None:
    """The twin's loss and gradient equal the suite row's (log-space gradient, 1e-3): the
    twin's is along log θ already, the row's θ dL/dθ."""
    theta = np.asarray(json.loads(Path(twin["cfg"]).read_text())["theta0"])
    g_suite = theta * np.asarray(list(rec["gradient"].values()))  # {k1: ..., k2: ..., k3: ...}
    g_twin = np.asarray(twin["gradient"])
    err = np.max(np.abs(g_twin - g_suite)) / np.max(np.abs(g_suite))
    if err > 1e-3 or not np.isclose(twin["loss"], rec["loss"], rtol=1e-3):
        sys.exit(f"diffsol_bare_ladder: n={n}: the twin's gradient differs from the suite's "
                 f"by {err:.2e} (loss {twin['loss']:.6g} vs {rec['loss']:.6g}): not the same "
                 "work; fix _bare_diffsol_groups.py before reading any ratio")  # fmt: skip


Samples = dict[tuple[int, str, str], list[list[float]]]  # (n, who, kind) -> rounds


def run_round(rnd: int, sizes: list[int], cfgs: dict, repeats: int, tmp: Path,
              got: Samples) -> None:
    """One round: the suite's ladder and every twin, order alternating by round."""
    env = worker_env(tmp / f"env-{rnd}")

    def twins() -> dict[tuple[int, str], dict]:
        return {(n, t): {**bare_samples("diffsol_groups", cfgs[n][t], repeats, env),
                         "cfg": str(cfgs[n][t])}
                for n in sizes for t in TWINS}  # fmt: skip

    alone = twins() if rnd % 2 else {}
    recs = suite_rows(sizes, tmp / f"suite-{rnd}", repeats)
    alone = alone or twins()
    for n in sizes:
        same_work(recs[n], alone[n, "hand"], n)
        for k in KINDS:
            got.setdefault((n, "suite", k), []).append(list(recs[n][f"{k}_samples"]))
            for t in TWINS:
                got.setdefault((n, t, k), []).append(alone[n, t][k])


def report(sizes: list[int], got: Samples) -> None:
    worst = (0.0, 0.0, 0.0, "")
    for n in sizes:
        for k in KINDS:
            s, h, g = (got[n, who, k] for who in ("suite", "hand", "gen"))
            r, lo, hi = ratio_ci(s, h)
            rg, glo, ghi = ratio_ci(s, g)
            med = [float(np.median(np.concatenate(x))) * 1e3 for x in (s, h, g)]
            print(f"diffsol {PROBLEM} n={n:<5} {k:<5} suite {med[0]:9.3f} ms / hand "
                  f"{med[1]:9.3f} ms = {r:.3f}  95% CI [{lo:.3f}, {hi:.3f}];  suite / gen "
                  f"{med[2]:9.3f} ms = {rg:.3f}  [{glo:.3f}, {ghi:.3f}]  "
                  f"(n={sum(map(len, s))} each)")  # fmt: skip
            if r > worst[0]:
                worst = (r, lo, hi, f"n={n} {k}")
    r, lo, hi, row = worst
    print(f"worst suite/hand = {r:.3f}  95% CI [{lo:.3f}, {hi:.3f}]  ({row})")


def case_calls(n: int, cfgs: dict[str, Path]) -> dict[str, dict[str, Callable[[], Any]]]:
    """The calls timed in one process at ``n`` groups: the suite's own case
    (:class:`DiffsolCase`, the worker's ``timed_solve`` and ``timed_grad``) and each twin's."""
    import _bare_diffsol_groups as twin

    from sciml_bench.backends.diffsol import DiffsolCase

    problem = spec.at_size(spec.load(PROBLEM), n)
    cp = reference.compile_problem(problem, reference.get(problem))
    cfg = json.loads(cfgs["hand"].read_text())
    case = DiffsolCase(cp, CaseOptions(cfg["solver"], cfg["gradient"], cp.rtol, cp.atol,
                                       cp.max_steps, extra={"jacobian": "sparse"}))  # fmt: skip
    params = case.prepare(cp.theta0)
    calls = {"suite": {"solve": partial(case.timed_solve, params),
                       "grad": partial(case.timed_grad, params)}}  # fmt: skip
    for t in TWINS:
        calls[t] = twin.calls(json.loads(cfgs[t].read_text()))
    return calls


def in_process(sizes: list[int], rounds: int, block: int, tmp: Path) -> None:
    """The suite's case and the twins' calls in one process, interleaved block by block
    (``harness_overhead.interleave``), each call timed in process CPU seconds (every thread
    of the process) and wall: on a loaded machine the CPU time is the work done, the wall time
    also what the other processes took. The interval covers the spread between blocks of
    one process, not between processes."""
    for n in sizes:
        got = interleave(case_calls(n, twin_config(n, tmp)), rounds, block)
        for k in KINDS:
            line = [f"in-process n={n:<5} {k:<5}"]
            for clock in ("cpu", "wall"):
                for t in TWINS:
                    r, lo, hi = ratio_ci(got["suite", k, clock], got[t, k, clock])
                    line.append(f"{clock} suite/{t} {r:.3f} [{lo:.3f}, {hi:.3f}]")
            med = float(np.median(np.concatenate(got["suite", k, "cpu"]))) * 1e3
            print("  ".join(line) + f"  (suite {med:.3f} ms cpu; {rounds}x{block} each)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="100,1000", help="comma list of group counts")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--in-process", type=int, metavar="BLOCK", default=0,
                    help="instead: the suite's case and the twins in one process, --rounds "
                         "interleaved blocks of BLOCK calls, CPU and wall time")  # fmt: skip
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    got: Samples = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if args.in_process:
            return in_process(sizes, args.rounds, args.in_process, tmp)
        cfgs = {n: twin_config(n, tmp) for n in sizes}
        for rnd in range(args.rounds):
            run_round(rnd, sizes, cfgs, args.repeats, tmp, got)
            print(f"round {rnd + 1} of {args.rounds} done", file=sys.stderr)
    report(sizes, got)


if __name__ == "__main__":
    main()
