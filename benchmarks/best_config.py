"""Best configuration per backend on a stiff problem: what was tried, side by side.

Each backend's default for stiff problems (``default_solver``, the Diffrax PI
coefficients in ``backends/diffrax.py``) is the fastest correct configuration
found here. Runs in-process through the suite's own backends, steady state
(median of ``--repeats`` after a warm-up); prints one row per configuration.

    python benchmarks/best_config.py [--problem stiff-robertson] [--repeats 10]
    python benchmarks/best_config.py --problem my.toml --solvers "" --repeats 1   # smoke test
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from sciml_bench import backends
from sciml_bench.backends.base import CaseOptions
from sciml_bench.measure import metrics
from sciml_bench.measure.status import SolverFailure
from sciml_bench.problem import reference, spec

CONTROLLERS = {
    "I (pcoeff=0, icoeff=1)": {"pcoeff": 0.0, "icoeff": 1.0},
    "PI 0.3/0.3": {"pcoeff": 0.3, "icoeff": 0.3},
    "PI 0.2/0.4": {"pcoeff": 0.2, "icoeff": 0.4},
    "PI 0.4/0.3": {"pcoeff": 0.4, "icoeff": 0.3},
    "PID 0.2/0.4/0.1": {"pcoeff": 0.2, "icoeff": 0.4, "dcoeff": 0.1},
}


def median_time(fn: Callable[[], object], repeats: int) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return float(np.median(samples))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--problem", default="stiff-robertson")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--solvers", default="Kvaerno5,Kvaerno4,Kvaerno3")
    ap.add_argument("--controllers", default=",".join(CONTROLLERS), help="names from CONTROLLERS")
    ap.add_argument("--no-scipy", action="store_true")
    args = ap.parse_args()
    problem = spec.load(args.problem)
    ref = reference.get(problem)
    cp = reference.compile_problem(problem, ref)
    y_ref, g_ref = np.asarray(ref.y), np.asarray(ref.gradient)
    rows = []

    def trial(backend: str, solver: str, grad: str, extra: dict, label: str) -> None:
        b = backends.get(backend)
        b.load()
        opts = CaseOptions(solver, grad, cp.rtol, cp.atol, cp.max_steps, extra=extra)
        case = b.build(cp, opts)
        try:
            sol = case.solve(cp.theta0)
            solve_s = median_time(lambda: case.solve(cp.theta0), args.repeats)
            err = metrics.solution_error(sol.y, y_ref)["rel_l2"]
            grad_s = gerr = None
            if b.differentiable:
                _, g = case.loss_and_grad(cp.theta0)
                grad_s = median_time(lambda: case.loss_and_grad(cp.theta0), args.repeats)
                gerr = metrics.gradient_error(g, g_ref, cp.theta0, cp.log_params)["max_rel"]
            steps = sol.stats.get("steps", sol.stats.get("rhs_evals"))
            rejected = sol.stats.get("rejected_steps", "-")
            rows.append((backend, label, f"{solve_s * 1e3:.2f}",
                         "-" if grad_s is None else f"{grad_s * 1e3:.2f}",
                         f"{steps}/{rejected}", f"{err:.1e}", "-" if gerr is None else f"{gerr:.1e}"))
        except SolverFailure as e:
            rows.append((backend, label, "fail", "fail", "-", "-", e.reason[:50]))
        print("  ".join(rows[-1]), flush=True)

    print(f"{args.problem}: rtol={cp.rtol:g} atol={cp.atol:g} max_steps={cp.max_steps}")
    print("backend  configuration  solve_ms  grad_ms  steps/rejected  sol_err  grad_err")
    wanted = args.controllers.split(",")
    for solver in filter(None, args.solvers.split(",")):  # --solvers "": SciPy's rows only
        for name, ctrl in CONTROLLERS.items():
            if name in wanted:
                trial("diffrax", solver, "RecursiveCheckpointAdjoint", ctrl, f"{solver} {name}")
    for solver in () if args.no_scipy else ("LSODA", "BDF", "Radau"):
        trial("scipy", solver, "none", {}, solver)


if __name__ == "__main__":
    main()
