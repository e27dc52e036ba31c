"""A minimal Diffrax script for ROBER, written the way Diffrax's docs recommend.

Hand-written RHS, ``jax.jit(jax.grad(loss))``, ``jax.block_until_ready``, timed
with ``time.perf_counter``. The loss arrays (observations and weights) are read
from the JSON file given on the command line so the loss is the suite's; no
sciml-bench code is imported. Prints one JSON line: the raw gradient timings.
"""

import json
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)
import diffrax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    repeats = int(sys.argv[2])

    def rober(t, y, k):
        y1, y2, y3 = y
        k1, k2, k3 = k
        return jnp.stack([
            -k1 * y1 + k3 * y2 * y3,
            k1 * y1 - k2 * y2**2 - k3 * y2 * y3,
            k2 * y2**2,
        ])

    W, O = jnp.asarray(cfg["W"]), jnp.asarray(cfg["O"])
    term = diffrax.ODETerm(rober)
    solver = diffrax.Kvaerno5()
    controller = diffrax.PIDController(rtol=cfg["rtol"], atol=cfg["atol"], pcoeff=0.3, icoeff=0.3)
    saveat = diffrax.SaveAt(ts=jnp.asarray(cfg["t_save"]))

    def loss(k):
        sol = diffrax.diffeqsolve(
            term, solver, 0.0, cfg["t1"], None, jnp.asarray(cfg["y0"]), args=k,
            saveat=saveat, stepsize_controller=controller, max_steps=cfg["max_steps"],
        )
        return jnp.sum(W * (sol.ys - O) ** 2)

    grad = jax.jit(jax.grad(loss))
    k = jnp.asarray(cfg["theta0"])
    jax.block_until_ready(grad(k))  # compile
    jax.block_until_ready(grad(k))  # warm-up, as the suite does
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(grad(k))
        samples.append(time.perf_counter() - t0)
    print(json.dumps({"grad_samples": samples}))


if __name__ == "__main__":
    main()
