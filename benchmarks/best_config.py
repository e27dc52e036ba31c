"""Best configuration per backend on a stiff problem: what was tried, side by side.

Each backend's default for stiff problems (``default_solver``, the Diffrax PI
coefficients in ``backends/diffrax.py``, CVODES' linear solver per problem class in
``backends/cvodes.py``, diffsol's matrices and linear solver in ``backends/diffsol.py``)
is the fastest correct configuration found here. Runs in-process through the suite's own
backends, steady state (median of ``--repeats`` after a warm-up; ``--clock cpu`` times the
process's CPU time, steadier than wall time on a shared machine); prints one row per
configuration, with its time as a ratio to the backend's current default (the first row).

    python benchmarks/best_config.py [--problem stiff-robertson] [--repeats 10]
    python benchmarks/best_config.py --problem my.toml --solvers "" --repeats 1   # smoke test
    python benchmarks/best_config.py --backend cvodes --problem stiff-brusselator-2d --sizes 8,16,32
    python benchmarks/best_config.py --backend diffsol --problem stiff-robertson-groups --sizes 100,1000

``--backend cvodes`` tries CasADi's linear solvers (``qr``, ``csparse``, ``mumps`` on a
sparse Jacobian; ``lapacklu``, ``lapackqr`` on a dense one) with
``always_recalculate_jacobian`` on and off, and adds the forward gradient as a double pass
(the loss's own ``F`` call plus ``jtimes``, what the backend ran before) to measure that
pass's share. ``ldl`` is left out: CasADi's LDL solves symmetric systems only (on a
non-symmetric 3x3 it returns a wrong solution), and CVODES' Newton matrix is not
symmetric. ``--backend diffsol`` tries each matrix type with pydiffsol's linear solvers
(``lu``, and ``klu`` on sparse matrices where pydiffsol has it).

Errors are against the suite's SciPy reference (``--against reference``, the default for
a problem without ``[sizes]``) or against the first row (``--against first``, the default
for an array problem, whose tight reference at thousands of states takes hours); a fit
loss's observations are then the first row's solution at the truth parameters.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

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
#: CasADi's linear solvers tried per Jacobian kind (scalar problems: the sparse list)
CVODES_LINEAR_SOLVERS = {"sparse": ("qr", "csparse", "mumps"), "dense": ("lapacklu", "lapackqr")}
HEADER = ("backend  configuration  solve_ms  grad_ms  solve_ratio  grad_ratio  steps/rejected  "
          "sol_err  grad_err")  # fmt: skip

#: one configuration: (backend, label, solver, gradient method, options.extra, a hook that
#: changes the built case: ``hook(case, compiled_problem)``)
Config = tuple[str, str, str, str, dict[str, Any], Callable[[Any, Any], None] | None]


#: the clock of ``median_time``: wall time, or the process's CPU time (all its threads),
#: which on a shared, loaded machine is what a configuration costs rather than its wait
#: for a core (``--clock``)
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
CLOCK = CLOCKS["wall"]


def median_time(fn: Callable[[], object], repeats: int) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        t = CLOCK()
        fn()
        samples.append(CLOCK() - t)
    return float(np.median(samples))


def diffrax_configs(args: argparse.Namespace) -> list[Config]:
    """Diffrax's implicit solvers under each step-size controller, then SciPy's methods."""
    wanted = args.controllers.split(",")
    out: list[Config] = []
    for solver in filter(None, args.solvers.split(",")):  # --solvers "": SciPy's rows only
        for name, ctrl in CONTROLLERS.items():
            if name in wanted:
                out.append(("diffrax", f"{solver} {name}", solver, "RecursiveCheckpointAdjoint",
                            ctrl, None))  # fmt: skip
    for solver in () if args.no_scipy else ("LSODA", "BDF", "Radau"):
        out.append(("scipy", solver, solver, "none", {}, None))
    return out


def cvodes_configs(args: argparse.Namespace, array: bool) -> list[Config]:
    """CVODES BDF: the backend's default first, then each linear solver with CasADi's
    ``always_recalculate_jacobian`` on and off, then the forward gradient as a double pass."""
    base = {"jacobian": args.jacobian} if array else {}
    grad = args.gradient or "forward"
    out: list[Config] = [("cvodes", "default", "BDF", grad, dict(base), None)]
    for ls in CVODES_LINEAR_SOLVERS["dense" if args.jacobian == "dense" and array else "sparse"]:
        for arj in (True, False):
            extra = {**base, "linear_solver": ls, "always_recalculate_jacobian": arj}
            out.append(("cvodes", f"{ls} recalc_jac={arj}", "BDF", grad, extra, None))
    if grad == "forward":
        out.append(("cvodes", "default, double pass (F + jtimes)", "BDF", grad, dict(base),
                    cvodes_double_pass))  # fmt: skip
    return out


def cvodes_double_pass(case: Any, cp: Any) -> None:
    """The forward gradient as the backend ran it before: the loss on the MX graph of
    ``F``'s output and ``jtimes`` (CasADi calls ``F`` for the value, then its forward-mode
    integrator, which integrates the state again)."""
    import casadi as ca

    F, n = case.F, cp.n_params
    P = ca.MX.sym("p", n)
    Y = F(x0=case.x0, p=P)["xf"]
    W, O, C = (ca.DM(np.asarray(a).T) for a in (cp.loss_W, cp.loss_O, cp.loss_C))
    L = ca.sum1(ca.sum2(W * (Y - O) ** 2)) + ca.sum1(ca.sum2(C * Y))
    case.G = ca.Function("G", [P], [L, ca.jtimes(L, P, ca.DM.eye(n), False).T])


def diffsol_configs(args: argparse.Namespace, array: bool) -> list[Config]:
    """diffsol bdf: the default first, then each matrix type with each linear solver."""
    grad = args.gradient or "forward"
    base = {"jacobian": args.jacobian} if array else {}
    out: list[Config] = [("diffsol", "default", "bdf", grad, base, None)]
    kinds = ("dense", "sparse") if array else ("dense",)
    for kind in kinds:
        for ls in ("lu", "klu") if kind == "sparse" else ("lu",):
            out.append(("diffsol", f"{kind} matrices, {ls}", "bdf", grad, {"jacobian": kind},
                        _diffsol_linear_solver(ls)))  # fmt: skip
    return out


def _diffsol_linear_solver(name: str) -> Callable[[Any, Any], None]:
    def set_it(case: Any, cp: Any) -> None:
        import pydiffsol as ds

        if name == "klu" and not ds.is_klu_available():
            raise SolverFailure("unavailable", "pydiffsol built without KLU")
        case.ode.linear_solver = getattr(ds, name)

    return set_it


class Trials:
    """Runs configurations on one compiled problem and prints a row per configuration:
    times, their ratio to the first row, steps, and the errors against ``y_ref``/``g_ref``
    (the reference, or the first row's when they are None)."""

    def __init__(self, cp: Any, repeats: int, y_ref: Any = None, g_ref: Any = None):
        self.cp, self.repeats = cp, repeats
        self.y_ref, self.g_ref = y_ref, g_ref
        self.first: tuple[float, float | None] | None = None

    def run(self, config: Config) -> None:
        """One configuration's row. After the first row, a diffsol configuration runs in a
        forked child: pydiffsol 0.6.2's KLU ends the process with a segmentation fault on
        ROBER groups, which is then that row's result, not the end of the table."""
        backend, label = config[:2]
        if self.first is not None and backend == "diffsol":
            row = self.forked(config)
        else:
            row = self.row(config)
        print("  ".join((backend, label, *row)), flush=True)

    def row(self, config: Config) -> tuple[str, ...]:
        backend, label, solver, grad, extra, hook = config
        cp = self.cp
        b = backends.get(backend)
        b.load()
        opts = CaseOptions(solver, grad, cp.rtol, cp.atol, cp.max_steps, extra=extra)
        try:
            case = b.build(cp, opts)
            if hook is not None:
                hook(case, cp)
            return self.measure(b, case)
        except SolverFailure as e:
            return ("fail", "fail", "-", "-", "-", "-", e.reason[:60])

    def forked(self, config: Config) -> tuple[str, ...]:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: its row down the pipe, then out without teardown
            os.close(read)
            with os.fdopen(write, "w") as f:
                f.write("\t".join(self.row(config)))
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as f:
            text = f.read()
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status) or not text:
            why = f"the process died (signal {os.WTERMSIG(status)})" if os.WIFSIGNALED(status) \
                else "the process ended without a row"  # fmt: skip
            return ("crash", "crash", "-", "-", "-", "-", why)
        return tuple(text.split("\t"))

    def measure(self, b: Any, case: Any) -> tuple[str, ...]:
        cp, th = self.cp, self.cp.theta0
        sol = case.solve(th)
        solve_s = median_time(lambda: case.solve(th), self.repeats)
        grad_s = g = None
        if b.differentiable:
            _, g = case.loss_and_grad(th)
            grad_s = median_time(lambda: case.loss_and_grad(th), self.repeats)
        if self.first is None:  # the first row is the yardstick
            self.first = (solve_s, grad_s)
            self.y_ref = sol.y if self.y_ref is None else self.y_ref
            self.g_ref = g if self.g_ref is None else self.g_ref
        err = metrics.solution_error(sol.y, np.asarray(self.y_ref))["rel_l2"]
        gerr = None if g is None else metrics.gradient_error(
            g, np.asarray(self.g_ref), th, cp.log_params)["rel"]  # fmt: skip
        s0, g0 = self.first
        return (f"{solve_s * 1e3:.2f}", _ms(grad_s), f"{solve_s / s0:.2f}",
                "-" if grad_s is None or not g0 else f"{grad_s / g0:.2f}",
                f"{sol.stats.get('steps', sol.stats.get('rhs_evals'))}/"
                f"{sol.stats.get('rejected_steps', '-')}",
                f"{err:.1e}", "-" if gerr is None else f"{gerr:.1e}")  # fmt: skip


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.2f}"


def compiled(problem: Any, against: str, first: Config) -> tuple[Any, Any, Any]:
    """The compiled problem and the reference solution and gradient (None, None when
    ``against`` is ``first``: the first configuration's solution at the truth parameters
    then stands in for a fit loss's observations)."""
    if against == "reference":
        ref = reference.get(problem)
        return reference.compile_problem(problem, ref), np.asarray(ref.y), np.asarray(ref.gradient)
    shape = (len(problem.t_save), problem.n_state)
    cp = reference.compile_problem(problem, None, observations=np.zeros(shape))
    if problem.loss.kind == "fit":
        backend, _, solver, grad, extra, _ = first
        case = backends.get(backend).build(
            cp, CaseOptions(solver, grad, cp.rtol, cp.atol, cp.max_steps, extra=extra))
        obs = case.solve(np.asarray(problem.loss.truth)).y
        cp = reference.compile_problem(problem, None, observations=obs)
    return cp, None, None


def configs(args: argparse.Namespace, array: bool) -> list[Config]:
    if args.backend == "cvodes":
        return cvodes_configs(args, array)
    if args.backend == "diffsol":
        return diffsol_configs(args, array)
    return diffrax_configs(args)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--problem", default="stiff-robertson")
    ap.add_argument("--backend", choices=("diffrax", "cvodes", "diffsol"), default="diffrax")
    ap.add_argument("--sizes", default="", help="an array problem's sizes [its default size]")
    ap.add_argument("--jacobian", choices=("sparse", "dense"), default="sparse",
                    help="an array problem's Jacobian kind (cvodes, diffsol)")
    ap.add_argument("--gradient", default="", help="cvodes/diffsol: forward or adjoint")
    ap.add_argument("--against", choices=("reference", "first"), default="",
                    help="errors against the SciPy reference or the first row")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--clock", choices=tuple(CLOCKS), default="wall",
                    help="wall time, or the process's CPU time (steadier on a shared machine)")
    ap.add_argument("--solvers", default="Kvaerno5,Kvaerno4,Kvaerno3")
    ap.add_argument("--controllers", default=",".join(CONTROLLERS), help="names from CONTROLLERS")
    ap.add_argument("--no-scipy", action="store_true")
    args = ap.parse_args()
    global CLOCK
    CLOCK = CLOCKS[args.clock]
    base = spec.load(args.problem)
    sizes = [int(v) for v in args.sizes.split(",") if v] or [None]
    for size in sizes:
        problem = base if size is None else spec.at_size(base, size)
        array = problem.array is not None
        cfgs = configs(args, array)
        against = args.against or ("first" if array else "reference")
        cp, y_ref, g_ref = compiled(problem, against, cfgs[0])
        print(f"\n{problem.name}{'' if size is None else f' size {size}'}: {problem.n_state} "
              f"states, {args.clock} clock, rtol={cp.rtol:g} atol={cp.atol:g} max_steps={cp.max_steps}; errors "
              f"against the {against}{' row' if against == 'first' else ''}")  # fmt: skip
        print(HEADER)
        trials = Trials(cp, args.repeats, y_ref, g_ref)
        for config in cfgs:
            trials.run(config)


if __name__ == "__main__":
    main()
