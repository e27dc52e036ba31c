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
``--rounds`` rounds so that machine drift hits both alike. A row's figure is the median
of all the suite's raw samples divided by the median of all the bare ones (goal: <= 1.05);
beside it, the range of the per-round ratios shows how far one pair of fresh processes
can be apart on this machine (on a shared 2-core VM, sub-millisecond rows move by
±25% between processes running identical code).

    python benchmarks/harness_overhead.py [--rounds 3] [--repeats 20] [--backends cvodes,diffsol]
    python benchmarks/harness_overhead.py --rounds 1 --repeats 2 \
        --problems nonstiff-lotka-volterra --backends torchdiffeq     # a smoke test

Prints one line per row, then ``worst overhead = X.XXX``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from sciml_bench import backends as registry
from sciml_bench.backends.base import CaseOptions
from sciml_bench.backends.diffrax import STIFF_CONTROLLER, DiffraxBackend
from sciml_bench.problem import reference, spec
from sciml_bench.problem.compiled import CompiledProblem

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


def suite_samples(target: str, backends: tuple[str, ...], out: Path, repeats: int
                  ) -> dict[str, dict[str, list[float]]]:
    """Steady samples per backend and kind from one ``sciml-bench run``."""
    from sciml_bench.results import store

    src = ["--problem-file", target] if target.endswith(".toml") else [target]
    out.mkdir(parents=True)
    subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "run", *src,
         *[a for b in backends for a in ("-b", b)], "--cold", "1",
         "--repeats", str(repeats), "--out", str(out), "--json"],
        capture_output=True, text=True, check=True,
    )
    (path,) = out.glob("*.h5")
    found: dict[str, dict[str, list[float]]] = {}
    for rec in store.read(path).records:
        assert rec["status"] == "ok", f"{rec['backend']} {target}: {rec['reason']}"
        found[rec["backend"]] = {k: list(rec[f"{k}_samples"]) for k in KINDS}
    return found


def bare_samples(backend: str, cfg: Path, repeats: int) -> dict[str, list[float]]:
    r = subprocess.run(
        [sys.executable, str(HERE / f"_bare_{backend}.py"), str(cfg), str(repeats)],
        capture_output=True, text=True, check=True,
    )
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--problems", help="comma list of the rows' problems (default: all; "
                    "stiff-robertson-short is torchdiffeq's ROBER)")
    ap.add_argument("--backends", default=",".join(BACKENDS + COMPILED), help="comma list")
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
        suite: dict[tuple[str, str, str], list[float]] = {}
        bare: dict[tuple[str, str, str], list[float]] = {}
        # each round's ratio of medians: how far one pair of processes can be off
        rounds: dict[tuple[str, str, str], list[float]] = {}
        for rnd in range(args.rounds):
            for g, (target, _, backends) in enumerate(groups):
                got = suite_samples(target, backends, tmp / f"r{rnd}g{g}", args.repeats)
                for b in backends:
                    name, cfg = configs[target, b]
                    alone = bare_samples(b, cfg, args.repeats)
                    for k in KINDS:
                        suite.setdefault((b, name, k), []).extend(got[b][k])
                        bare.setdefault((b, name, k), []).extend(alone[k])
                        ratio = float(np.median(got[b][k]) / np.median(alone[k]))
                        rounds.setdefault((b, name, k), []).append(ratio)
            print(f"round {rnd + 1} of {args.rounds} done", file=sys.stderr)
    worst = 0.0
    for key in sorted(suite):
        b, name, k = key
        s, a = float(np.median(suite[key])), float(np.median(bare[key]))
        worst = max(worst, s / a)
        r = rounds[key]
        print(f"{b:<12} {name:<24} {k:<5}  suite {s * 1e3:9.3f} ms / bare {a * 1e3:9.3f} ms "
              f"= {s / a:.3f}  (n={len(suite[key])} each; rounds {min(r):.2f}-{max(r):.2f})")
    print(f"worst overhead = {worst:.3f}")


if __name__ == "__main__":
    main()
