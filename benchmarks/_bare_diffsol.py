"""Bare pydiffsol twins of the suite's problems, written as a pydiffsol user writes them.

Hand-written DiffSL for the vector field, its parameters taken as their logs (``la`` in,
``a { exp(la) }``), as the suite's model takes a parameter differentiated in log space (every
parameter of these problems is), one ``pydiffsol.Ode``, ``ode.solve_dense`` called in a loop
with ``time.perf_counter``; the gradient is ``ode.solve_fwd_sens`` (or
``solve_adjoint_fwd`` + ``solve_adjoint_bkwd``) and the loss's chain rule in NumPy. The
problem's data (initial state, parameters, save times, tolerances, loss arrays, solver,
matrix type, gradient method) come from the JSON file on the command line, so the twin
solves exactly the suite's problem; no sciml-bench code is imported.

    python _bare_diffsol.py CONFIG.json REPEATS

Prints one JSON line: raw ``solve`` and ``grad`` timings in seconds.
"""

import json
import sys
import time

import numpy as np
import pydiffsol as ds
from _bare_pin import pin_as_the_suite

MODELS = {
    "lotka-volterra": """
        in_i { la = 0, lb = 0, lc = 0, ld = 0 }
        a { exp(la) } b { exp(lb) } c { exp(lc) } d { exp(ld) }
        u_i { x = 1, y = 1 }
        F_i { a*x - b*x*y, -c*y + d*x*y }
    """,
    "robertson": """
        in_i { lk1 = 0, lk2 = 0, lk3 = 0 }
        k1 { exp(lk1) } k2 { exp(lk2) } k3 { exp(lk3) }
        u_i { y1 = 1, y2 = 0, y3 = 0 }
        F_i { -k1*y1 + k3*y2*y3, k1*y1 - k2*y2*y2 - k3*y2*y3, k2*y2*y2 }
    """,
    "hires": """
        in_i { lk1 = 0, lk2 = 0, lk3 = 0, lk4 = 0, lk5 = 0, lk6 = 0, lk7 = 0, lk8 = 0, lk9 = 0,
               loks = 0 }
        k1 { exp(lk1) } k2 { exp(lk2) } k3 { exp(lk3) } k4 { exp(lk4) } k5 { exp(lk5) }
        k6 { exp(lk6) } k7 { exp(lk7) } k8 { exp(lk8) } k9 { exp(lk9) } oks { exp(loks) }
        u_i { y1 = 1, y2 = 0, y3 = 0, y4 = 0, y5 = 0, y6 = 0, y7 = 0, y8 = 0.0057 }
        F_i {
            -k1*y1 + k2*y2 + k6*y3 + oks,
            k1*y1 - (k2 + k3)*y2,
            -(k6 + k1)*y3 + k2*y4 + k5*y5,
            k3*y2 + k1*y3 - (k4 + k2)*y4,
            -(k5 + k1)*y5 + k2*y6 + k2*y7,
            -k7*y6*y8 + k8*y4 + k1*y5 - k2*y6 + k8*y7,
            k7*y6*y8 - (k2 + k8 + k9)*y7,
            -k7*y6*y8 + (k2 + k8 + k9)*y7,
        }
    """,
}


def loss_and_grad(ode, theta, ts, W, O, gradient: str):
    """The timed gradient call: ``L = Σ W (y - O)²`` and ``dL/dθ`` by diffsol's adjoint
    (``solve_adjoint_fwd`` + ``solve_adjoint_bkwd``) or forward sensitivities."""

    def grad():
        if gradient == "adjoint":
            sol, checkpoint = ode.solve_adjoint_fwd(theta, ts)
            D = sol.ys - O
            return np.sum(W * D * D), ode.solve_adjoint_bkwd(sol, checkpoint, 2 * W * D)
        sol = ode.solve_fwd_sens(theta, ts)
        D = sol.ys - O
        return np.sum(W * D * D), np.einsum("ij,kij->k", 2 * W * D, np.asarray(sol.sens))

    return grad


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    repeats = int(sys.argv[2])
    ode = ds.Ode(MODELS[cfg["rhs"]], scalar_type=ds.f64,
                 matrix_type=getattr(ds, cfg["matrix_type"]), ode_solver=getattr(ds, cfg["solver"]))  # fmt: skip
    ode.rtol, ode.atol = cfg["rtol"], cfg["atol"]
    ode.sens_rtol = ode.param_rtol = cfg["rtol"]
    ode.sens_atol = ode.param_atol = cfg["atol"]
    theta = np.log(cfg["theta0"])  # the model's inputs: every parameter's log
    ts = np.asarray(cfg["t_save"])
    W, O = np.asarray(cfg["W"]).T, np.asarray(cfg["O"]).T  # diffsol's (n_state, n_save)

    grad = loss_and_grad(ode, theta, ts, W, O, cfg["gradient"])
    out = {}
    kinds = (("solve", lambda: ode.solve_dense(theta, ts)), ("grad", grad))
    for _, fn in kinds:
        fn()  # first call: the suite's first solve, then its first gradient
    pin_as_the_suite()
    for kind, fn in kinds:
        fn()  # warm-up, as the suite does
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        out[kind] = samples
    print(json.dumps(out))


if __name__ == "__main__":
    main()
