"""Bare Diffrax twins of the suite's problems, written as a Diffrax user writes them.

A hand-written vector field, ``jax.jit`` around ``diffeqsolve`` (as Diffrax's own
``benchmarks/lotka_volterra.py`` does) and around ``jax.value_and_grad`` of the loss,
``jax.block_until_ready``, ``time.perf_counter``. The problem's data (initial state,
parameters, save times, tolerances, loss arrays) come from the JSON file on the command
line, so the twin solves exactly the suite's problem; no sciml-bench code is imported.

    python _bare_diffrax.py CONFIG.json REPEATS [WARMUPS]

Prints one JSON line: raw ``solve`` and ``grad`` timings in seconds. ``WARMUPS`` (default
1, as the suite) is the untimed calls after the compiling one. ``BARE_PIN=1`` pins every
thread after the compiling calls, before the samples (``_bare_pin.py``).
"""

import json
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)
import diffrax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from _bare_pin import pin_as_the_suite  # noqa: E402


def lotka_volterra(t, u, p):
    a, b, c, d = p
    x, y = u
    return jnp.stack([a * x - b * x * y, -c * y + d * x * y])


def robertson(t, y, k):
    y1, y2, y3 = y
    k1, k2, k3 = k
    return jnp.stack([
        -k1 * y1 + k3 * y2 * y3,
        k1 * y1 - k2 * y2**2 - k3 * y2 * y3,
        k2 * y2**2,
    ])


def spiral(t, y, p):
    """u.^3 -> Dense(2, 50, tanh) -> Dense(50, 2), the weights as a pytree."""
    return p["W2"] @ jnp.tanh(p["W1"] @ y**3 + p["b1"]) + p["b2"]


def spiral_params(theta):
    theta = jnp.asarray(theta)
    return {"W1": theta[:100].reshape(50, 2), "b1": theta[100:150],
            "W2": theta[150:250].reshape(2, 50), "b2": theta[250:252]}


def calls(cfg: dict) -> dict:
    """The compiled ``solve`` and ``grad`` (``jax.value_and_grad`` of the loss) and the
    parameters they take, from the config's data."""
    field = {"lotka-volterra": lotka_volterra, "robertson": robertson, "spiral": spiral}
    term = diffrax.ODETerm(field[cfg["rhs"]])
    solver = getattr(diffrax, cfg["solver"])()
    controller = diffrax.PIDController(rtol=cfg["rtol"], atol=cfg["atol"], **cfg["controller"])
    saveat = diffrax.SaveAt(ts=jnp.asarray(cfg["t_save"]))
    y0 = jnp.asarray(cfg["y0"])
    W, O = jnp.asarray(cfg["W"]), jnp.asarray(cfg["O"])
    params = spiral_params(cfg["theta0"]) if cfg["rhs"] == "spiral" else jnp.asarray(cfg["theta0"])

    def ys(p):
        # throw=False as in the suite, whose rows report a failed solve instead of raising
        return diffrax.diffeqsolve(
            term, solver, cfg["t0"], cfg["t1"], None, y0, args=p, saveat=saveat,
            stepsize_controller=controller, max_steps=cfg["max_steps"], throw=False,
        ).ys

    def loss(p):
        return jnp.sum(W * (ys(p) - O) ** 2)

    return {"solve": jax.jit(ys), "grad": jax.jit(jax.value_and_grad(loss)), "params": params}


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    repeats = int(sys.argv[2])
    warmups = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    fns = calls(cfg)
    params = fns["params"]
    out = {}
    for kind in ("solve", "grad"):
        jax.block_until_ready(fns[kind](params))  # compile
    pin_as_the_suite()
    for kind in ("solve", "grad"):
        fn = fns[kind]
        for _ in range(warmups):  # one, as the suite does, unless asked
            jax.block_until_ready(fn(params))
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(params))
            samples.append(time.perf_counter() - t0)
        out[kind] = samples
    print(json.dumps(out))


if __name__ == "__main__":
    main()
