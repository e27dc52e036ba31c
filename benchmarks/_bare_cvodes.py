"""Bare CVODES-through-CasADi twins of the suite's problems, written as a CasADi user
writes them.

Hand-written CasADi expressions for the vector field, taking the parameters' logs
(``exp(p)`` inside, as the suite's model takes a parameter differentiated in log space;
every parameter of these problems is), ``casadi.integrator(..., "cvodes", ...)`` over the
save times, called in a loop with ``time.perf_counter``; the gradient is a
``casadi.Function`` of the log parameters returning the loss and its forward (``jtimes``)
or reverse (``gradient``) derivative. The problem's data (initial state, parameters, save
times, tolerances, loss arrays, solver and gradient method) come from the JSON file on
the command line, so the twin solves exactly the suite's problem; no sciml-bench code is
imported.

    python _bare_cvodes.py CONFIG.json REPEATS

Prints one JSON line: raw ``solve`` and ``grad`` timings in seconds.
"""

import json
import sys
import time

import casadi as ca
import numpy as np
from _bare_pin import pin_as_the_suite


def lotka_volterra(t, u, p):
    a, b, c, d = (p[i] for i in range(4))
    x, y = u[0], u[1]
    return ca.vertcat(a * x - b * x * y, -c * y + d * x * y)


def robertson(t, y, k):
    y1, y2, y3 = y[0], y[1], y[2]
    return ca.vertcat(
        -k[0] * y1 + k[2] * y2 * y3,
        k[0] * y1 - k[1] * y2**2 - k[2] * y2 * y3,
        k[1] * y2**2,
    )


def hires(t, y, k):
    k1, k2, k3, k4, k5, k6, k7, k8, k9, oks = (k[i] for i in range(10))
    y1, y2, y3, y4, y5, y6, y7, y8 = (y[i] for i in range(8))
    return ca.vertcat(
        -k1 * y1 + k2 * y2 + k6 * y3 + oks,
        k1 * y1 - (k2 + k3) * y2,
        -(k6 + k1) * y3 + k2 * y4 + k5 * y5,
        k3 * y2 + k1 * y3 - (k4 + k2) * y4,
        -(k5 + k1) * y5 + k2 * y6 + k2 * y7,
        -k7 * y6 * y8 + k8 * y4 + k1 * y5 - k2 * y6 + k8 * y7,
        k7 * y6 * y8 - (k2 + k8 + k9) * y7,
        -k7 * y6 * y8 + (k2 + k8 + k9) * y7,
    )


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    repeats = int(sys.argv[2])
    field = {"lotka-volterra": lotka_volterra, "robertson": robertson, "hires": hires}[cfg["rhs"]]
    n, m = len(cfg["y0"]), len(cfg["theta0"])
    x, p, t = ca.SX.sym("x", n), ca.SX.sym("p", m), ca.SX.sym("t")
    F = ca.integrator("F", "cvodes", {"x": x, "p": p, "t": t, "ode": field(t, x, ca.exp(p))},
                      cfg["t0"], cfg["t_save"], cfg["options"])  # fmt: skip
    x0, theta = ca.DM(cfg["y0"]), ca.DM(np.log(cfg["theta0"]))
    W, O = ca.DM(np.asarray(cfg["W"]).T), ca.DM(np.asarray(cfg["O"]).T)

    P = ca.MX.sym("p", m)
    D = F(x0=x0, p=P)["xf"] - O
    L = ca.sum1(ca.sum2(W * D * D))
    dL = ca.jtimes(L, P, ca.DM.eye(m)) if cfg["gradient"] == "forward" else ca.gradient(L, P)
    G = ca.Function("G", [P], [L, dL])

    out = {}
    kinds = (("solve", lambda: F(x0=x0, p=theta)), ("grad", lambda: G(theta)))
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
