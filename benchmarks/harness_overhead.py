"""Harness overhead: sciml-bench's steady solve and gradient times divided by the same
work in a bare script written as a user of the library writes it.

Rows: spiral neural ODE, Lotka-Volterra and ROBER, for Diffrax and torchdiffeq, and
ROBER, HIRES and Lotka-Volterra for CVODES (through CasADi) and diffsol (pydiffsol), solve
and loss+gradient. torchdiffeq's dopri5 cannot reach ROBER's t = 1e5 (it stops at the
step bound), so its ROBER row integrates the same equations to t = 0.1. The bare twins
are ``_bare_diffrax.py``, ``_bare_torchdiffeq.py``, ``_bare_cvodes.py`` (a CasADi
integrator function called in a loop) and ``_bare_diffsol.py`` (a pydiffsol ``Ode``
solved in a loop): hand-written vector fields, the library's own calls, nothing of
sciml-bench. Each twin gets the suite's solver, options and gradient method for the
problem (what the backend's defaults pick), so the rows compare the same work. Each suite run (``sciml-bench run``, one
fresh worker per case) and each bare run is a fresh process, interleaved suite/bare for
``--rounds`` rounds so that machine drift hits both alike; the order within a round
alternates (suite first in even rounds, bare first in odd ones), so that a drift inside a
round does not always favour the same side. The bare twins run in the workers'
environment (:meth:`LocalExecutor.env`: ``JAX_PLATFORMS``, fresh JAX cache folders, the
same thread variables), so that only the harness differs. The twins pin their steady
samples as the suite's workers do (``BARE_PIN=1``: every thread on the core others use
least, after the first solve and gradient, :mod:`sciml_bench.measure.affinity`'s rule);
``--no-pin`` runs both sides unpinned (``run --no-pin``).

A row's figure is over per-process medians (:func:`process_ratio_ci`, goal: <= 1.05): the
geometric mean of the suite's processes' medians divided by the bare processes', with a
95 % confidence interval from a hierarchical bootstrap: rounds (one suite and one bare
process each) are resampled with replacement, then each chosen round's samples, so that
both the spread between fresh processes (on a shared 2-core VM, sub-millisecond rows
moved by ±25 % between unpinned processes running identical code) and the spread within
one count; with one round the interval is the within-process spread alone. ``worst
overhead`` is the row with the largest figure, printed with its interval; a worst row
whose interval holds 1.05 is not shown to miss the goal.

    python benchmarks/harness_overhead.py [--rounds 3] [--repeats 20] [--backends cvodes,diffsol]
    JAX_PLATFORMS=cpu python benchmarks/harness_overhead.py --in-process 20 --rounds 10 \
        --backends diffrax      # CPU time, the suite's case and the twin in one process
    python benchmarks/harness_overhead.py --rounds 1 --repeats 2 \
        --problems nonstiff-lotka-volterra --backends torchdiffeq     # a smoke test

Prints one line per row, then ``worst overhead = X.XXX  95% CI [lo, hi]  (row)``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from sciml_bench import backends as registry
from sciml_bench.backends.base import CaseOptions
from sciml_bench.backends.diffrax import STIFF_CONTROLLER, DiffraxBackend
from sciml_bench.problem import reference, spec
from sciml_bench.problem.compiled import CompiledProblem, log_scaled

HERE = Path(__file__).resolve().parent
BACKENDS = ("diffrax", "torchdiffeq")
COMPILED = ("cvodes", "diffsol")
KINDS = ("solve", "grad")


def short_robertson(tmp: Path) -> Path:
    """ROBER's equations and loss on t in (0, 0.1), where dopri5 finishes in ~100 steps."""
    text = (spec.problems_dir() / "stiff-robertson.toml").read_text()
    edits = {
        'name = "stiff-robertson"': 'name = "stiff-robertson-short"',
        "span = [0.0, 1.0e5]": "span = [0.0, 0.1]",
        "save = { logspace = [-5.0, 5.0, 40] }": "save = { logspace = [-5.0, -1.0, 20] }",
    }
    for old, new in edits.items():
        assert old in text, f"stiff-robertson.toml no longer has {old!r}; update this script"
        text = text.replace(old, new)
    path = tmp / "stiff-robertson-short.toml"
    path.write_text(text)
    return path


def bare_config(problem: spec.Problem, rhs: str, backend: str, tmp: Path) -> Path:
    """The problem's data for a bare twin, with the solver the suite uses by default."""
    cp = reference.compile_problem(problem, reference.get(problem))
    cfg = {
        "rhs": rhs, "rtol": cp.rtol, "atol": cp.atol, "max_steps": cp.max_steps,
        "t0": cp.t_span[0], "t1": cp.t_span[1], "t_save": cp.t_save.tolist(),
        "y0": cp.y0.tolist(), "theta0": cp.theta0.tolist(),
        "W": cp.loss_W.tolist(), "O": cp.loss_O.tolist(),
    }
    if backend == "diffrax":
        solver = DiffraxBackend().default_solver(problem.stiff)
        cfg.update(solver=solver, controller=STIFF_CONTROLLER if problem.stiff else {})
    elif backend in COMPILED:
        # the twins take every parameter's log, as the suite's compiled models do
        assert log_scaled(cp).all(), f"{problem.name}: a parameter not in log space"
        cfg.update(compiled_config(cp, backend))
    else:
        cfg.update(solver="dopri5", controller={})
    assert not np.any(cp.loss_C), "the bare twins write the fit loss only"
    path = tmp / f"{problem.name}-{backend}.json"
    path.write_text(json.dumps(cfg))
    return path


def compiled_config(cp: CompiledProblem, backend: str) -> dict[str, object]:
    """The solver, options and gradient method the cvodes or diffsol backend picks."""
    b = registry.get(backend)
    options = CaseOptions(b.default_solver(cp.stiff), b.default_gradient(cp), cp.rtol, cp.atol,
                          cp.max_steps)  # fmt: skip
    cfg: dict[str, object] = {"solver": options.solver, "gradient": options.gradient_method}
    if backend == "cvodes":
        from sciml_bench.backends.cvodes import integrator_options

        cfg["options"] = integrator_options(options)
    else:
        from sciml_bench.backends.diffsol import matrix_type

        cfg["matrix_type"] = matrix_type(cp.n_state)
    return cfg


def suite_samples(target: str, backends: tuple[str, ...], out: Path, repeats: int,
                  pin: bool = True) -> dict[str, dict[str, list[float]]]:
    """Steady samples per backend and kind from one ``sciml-bench run`` (``--no-pin``
    where ``pin`` is False)."""
    from sciml_bench.results import store

    src = ["--problem-file", target] if target.endswith(".toml") else [target]
    out.mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "run", *src,
         *[a for b in backends for a in ("-b", b)], "--cold", "1",
         "--repeats", str(repeats), "--out", str(out), "--json",
         *([] if pin else ["--no-pin"])],
        capture_output=True, text=True, check=True,
    )
    (path,) = out.glob("*.h5")
    found: dict[str, dict[str, list[float]]] = {}
    for rec in store.read(path).records:
        assert rec["status"] == "ok", f"{rec['backend']} {target}: {rec['reason']}"
        found[rec["backend"]] = {k: list(rec[f"{k}_samples"]) for k in KINDS}
    return found


def worker_env(scratch: Path, pin: bool = False) -> dict[str, str]:
    """The environment a suite worker of a CPU case gets (the executor's own), for the
    bare twins: the same device pin, fresh cache folders and thread variables; with
    ``pin``, ``BARE_PIN=1``: the twin pins its steady samples as a suite worker does."""
    from sciml_bench.run.executor import LocalExecutor

    scratch.mkdir(parents=True, exist_ok=True)
    env = LocalExecutor().env(str(scratch), {"device": "cpu", "kind": "ode"})
    if pin:
        env["BARE_PIN"] = "1"
    return env


def bare_samples(backend: str, cfg: Path, repeats: int, env: dict[str, str] | None = None
                 ) -> dict[str, list[float]]:
    """One fresh process of ``_bare_BACKEND.py``: its raw samples per kind."""
    r = subprocess.run(
        [sys.executable, str(HERE / f"_bare_{backend}.py"), str(cfg), str(repeats)],
        capture_output=True, text=True, check=True, env=env,
    )
    return json.loads(r.stdout.strip().splitlines()[-1])


def ratio_ci(suite: list[list[float]], bare: list[list[float]], n_boot: int = 2000,
             seed: int = 0) -> tuple[float, float, float]:
    """``(r, lo, hi)``: ``r = median(suite) / median(bare)`` over every round's samples, and
    a 95 % percentile interval of ``r`` from a hierarchical bootstrap.

    ``suite[i]`` and ``bare[i]`` are round ``i``'s samples (one fresh process each). Each
    replicate draws ``R`` rounds with replacement, then, in every drawn round, as many
    samples as it has with replacement, and takes the ratio of the pooled medians: the
    interval holds both the spread between processes and within one. With one round it
    is the within-process spread alone (it cannot show the process-to-process spread)."""
    rng = np.random.default_rng(seed)
    point = float(np.median(np.concatenate(suite)) / np.median(np.concatenate(bare)))
    rounds = len(suite)
    reps = np.empty(n_boot)
    for b in range(n_boot):
        picks = rng.integers(0, rounds, rounds)
        s = np.concatenate([rng.choice(suite[i], len(suite[i])) for i in picks])
        a = np.concatenate([rng.choice(bare[i], len(bare[i])) for i in picks])
        reps[b] = np.median(s) / np.median(a)
    lo, hi = np.percentile(reps, [2.5, 97.5])
    return point, float(lo), float(hi)


def _process_ratio(suite: list[Any], bare: list[Any]) -> float:
    """``exp(mean ln median(suite_i) − mean ln median(bare_i))``: the ratio of the geometric
    means of the two sides' per-process medians."""
    s = np.mean([np.log(np.median(x)) for x in suite])
    b = np.mean([np.log(np.median(x)) for x in bare])
    return float(np.exp(s - b))


def process_ratio_ci(suite: list[list[float]], bare: list[list[float]], n_boot: int = 2000,
                     seed: int = 0) -> tuple[float, float, float]:
    """``(r, lo, hi)``: the suite/bare ratio over per-process medians
    (:func:`_process_ratio`; ``suite[i]``, ``bare[i]``: round ``i``'s process, one a side),
    and a 95 % percentile interval from a hierarchical bootstrap: ``R`` rounds drawn with
    replacement (a round's two processes together: they ran side by side), then each drawn
    round's samples with replacement, the ratio recomputed. It holds the spread between
    processes and within one; with one round, the within-process spread alone."""
    rng = np.random.default_rng(seed)
    point = _process_ratio(suite, bare)
    rounds = len(suite)
    reps = np.empty(n_boot)
    for b in range(n_boot):
        picks = rng.integers(0, rounds, rounds)
        reps[b] = _process_ratio([rng.choice(suite[i], len(suite[i])) for i in picks],
                                 [rng.choice(bare[i], len(bare[i])) for i in picks])  # fmt: skip
    lo, hi = np.percentile(reps, [2.5, 97.5])
    return point, float(lo), float(hi)


def interleave(calls: dict[str, dict[str, Callable[[], Any]]], rounds: int, block: int
               ) -> dict[tuple[str, str, str], list[list[float]]]:
    """``calls[who][kind]`` timed in one process, ``rounds`` rounds of one block of
    ``block`` calls each, every (kind, who) in turn: samples per ``(who, kind, clock)``,
    one list per round, in process CPU seconds (``time.process_time``: every thread of
    the process, what the call did whatever else the machine ran) and wall seconds. A
    first round warms every call and is dropped."""
    got: dict[tuple[str, str, str], list[list[float]]] = {}
    for rnd in range(rounds + 1):
        for kind in KINDS:
            for who, fns in calls.items():
                cpu, wall = [], []
                for _ in range(block):
                    c, w = time.process_time(), time.perf_counter()
                    fns[kind]()
                    cpu.append(time.process_time() - c)
                    wall.append(time.perf_counter() - w)
                if rnd:
                    got.setdefault((who, kind, "cpu"), []).append(cpu)
                    got.setdefault((who, kind, "wall"), []).append(wall)
    return got


def diffrax_calls(target: str, cfg: Path) -> dict[str, dict[str, Callable[[], Any]]]:
    """The worker's own Diffrax case (``timed_solve``, ``timed_grad``: the compiled call
    and ``block_until_ready``) and the bare twin's compiled calls, blocked alike."""
    import _bare_diffrax as twin
    import jax

    from sciml_bench.backends.diffrax import DiffraxCase

    problem = spec.load(target)
    cp = reference.compile_problem(problem, reference.get(problem))
    b = DiffraxBackend()
    case = DiffraxCase(cp, CaseOptions(b.default_solver(cp.stiff), b.default_gradient(cp),
                                       cp.rtol, cp.atol, cp.max_steps))  # fmt: skip
    params = case.prepare(cp.theta0)
    bare = twin.calls(json.loads(cfg.read_text()))
    case.solve(cp.theta0)  # the first solve, as the worker's, before its steady samples

    def blocked(fn: Callable[[Any], Any]) -> Callable[[], Any]:
        return lambda: jax.block_until_ready(fn(bare["params"]))

    return {"suite": {"solve": partial(case.timed_solve, params),
                      "grad": partial(case.timed_grad, params)},
            "bare": {"solve": blocked(bare["solve"]), "grad": blocked(bare["grad"])}}  # fmt: skip


def in_process(groups: list, configs: dict, rounds: int, block: int) -> None:
    """``--in-process``: Diffrax's rows with the suite's case and the bare twin in this one
    process (:func:`interleave`), CPU and wall ratios with intervals over the blocks (the
    spread inside one process; the process-to-process spread is the default mode's)."""
    worst = (0.0, 0.0, 0.0, "")
    for target, _, backends in groups:
        if "diffrax" not in backends:
            continue
        name, cfg = configs[target, "diffrax"]
        got = interleave(diffrax_calls(target, cfg), rounds, block)
        for kind in KINDS:
            line = f"in-process diffrax {name:<24} {kind:<5}"
            for clock in ("cpu", "wall"):
                r, lo, hi = ratio_ci(got["suite", kind, clock], got["bare", kind, clock])
                line += f"  {clock} suite/bare {r:.3f} [{lo:.3f}, {hi:.3f}]"
                if clock == "cpu" and r > worst[0]:
                    worst = (r, lo, hi, f"{name} {kind}")
            ms = float(np.median(np.concatenate(got["bare", kind, "cpu"]))) * 1e3
            print(f"{line}  (bare {ms:.3f} ms cpu; {rounds}x{block} each)")
    r, lo, hi, row = worst
    print(f"worst in-process cpu overhead = {r:.3f}  95% CI [{lo:.3f}, {hi:.3f}]  ({row})")


Rows = dict[tuple[str, str, str], list[list[float]]]


def run_round(rnd: int, groups: list, configs: dict, repeats: int, tmp: Path,
              env: dict[str, str], pin: bool = True) -> tuple[Rows, Rows]:
    """One round: every group's suite run and its bare twins, each a fresh process; the
    suite goes first in even rounds and the twins in odd ones. Returns the round's samples
    per row ``(backend, problem, kind)``, suite's and bare's."""
    suite: Rows = {}
    bare: Rows = {}
    for g, (target, _, backends) in enumerate(groups):
        cfgs = {b: configs[target, b][1] for b in backends}
        alone = {b: bare_samples(b, c, repeats, env) for b, c in cfgs.items()} if rnd % 2 else {}
        got = suite_samples(target, backends, tmp / f"r{rnd}g{g}", repeats, pin)
        alone = alone or {b: bare_samples(b, c, repeats, env) for b, c in cfgs.items()}
        for b in backends:
            name = configs[target, b][0]
            for k in KINDS:
                suite.setdefault((b, name, k), []).append(got[b][k])
                bare.setdefault((b, name, k), []).append(alone[b][k])
    return suite, bare


def report(suite: Rows, bare: Rows) -> None:
    """One line per row (figure over per-process medians, interval, per-round range), then
    the worst row."""
    worst: tuple[float, float, float, str] = (0.0, 0.0, 0.0, "")
    for key in sorted(suite):
        b, name, k = key
        r, lo, hi = process_ratio_ci(suite[key], bare[key])
        s, a = (float(np.exp(np.mean([np.log(np.median(p)) for p in x[key]])))
                for x in (suite, bare))  # the geometric means of the process medians
        per = [float(np.median(x) / np.median(y)) for x, y in zip(suite[key], bare[key], strict=True)]
        n = sum(map(len, suite[key]))
        print(f"{b:<12} {name:<24} {k:<5}  suite {s * 1e3:9.3f} ms / bare {a * 1e3:9.3f} ms "
              f"= {r:.3f}  95% CI [{lo:.3f}, {hi:.3f}]  (n={n} each; rounds "
              f"{min(per):.2f}-{max(per):.2f})")  # fmt: skip
        if r > worst[0]:
            worst = (r, lo, hi, f"{b} {name} {k}")
    r, lo, hi, row = worst
    print(f"worst overhead = {r:.3f}  95% CI [{lo:.3f}, {hi:.3f}]  ({row})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--problems", help="comma list of the rows' problems (default: all; "
                    "stiff-robertson-short is torchdiffeq's ROBER)")
    ap.add_argument("--backends", default=",".join(BACKENDS + COMPILED), help="comma list")
    ap.add_argument("--no-pin", action="store_true",
                    help="the suite's workers and the twins unpinned (run --no-pin)")
    ap.add_argument("--in-process", type=int, metavar="BLOCK", default=0,
                    help="instead: Diffrax's rows, the suite's case and the twin in one "
                         "process, --rounds interleaved blocks of BLOCK calls, CPU and wall")  # fmt: skip
    args = ap.parse_args()
    wanted_backends = set(args.backends.split(","))

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        # (what sciml-bench runs, the twin's vector field, the backends on it)
        groups = [
            ("nonstiff-spiral-node", "spiral", BACKENDS),
            ("nonstiff-lotka-volterra", "lotka-volterra", BACKENDS + COMPILED),
            ("stiff-robertson", "robertson", ("diffrax", *COMPILED)),
            (str(short_robertson(tmp)), "robertson", ("torchdiffeq",)),
            ("stiff-hires", "hires", COMPILED),
        ]
        groups = [
            (target, rhs, tuple(b for b in backends if b in wanted_backends))
            for target, rhs, backends in groups
            if not args.problems or spec.load(target).name in args.problems.split(",")
        ]
        groups = [g for g in groups if g[2]]
        if not groups:
            sys.exit("harness_overhead: no row left; see --problems and --backends")
        configs = {}
        for target, rhs, backends in groups:
            problem = spec.load(target)
            for b in backends:
                configs[target, b] = (problem.name, bare_config(problem, rhs, b, tmp))
        if args.in_process:
            return in_process(groups, configs, args.rounds, args.in_process)
        suite: Rows = {}
        bare: Rows = {}
        for rnd in range(args.rounds):
            env = worker_env(tmp / f"bare-env-{rnd}", pin=not args.no_pin)
            got = run_round(rnd, groups, configs, args.repeats, tmp, env, not args.no_pin)
            for into, part in zip((suite, bare), got, strict=True):
                for key, rounds in part.items():
                    into.setdefault(key, []).extend(rounds)
            print(f"round {rnd + 1} of {args.rounds} done", file=sys.stderr)
    report(suite, bare)


if __name__ == "__main__":
    main()
