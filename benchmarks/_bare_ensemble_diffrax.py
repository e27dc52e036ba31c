"""Bare Diffrax twin of the suite's Lorenz ensemble, written as a Diffrax user writes it.

A hand-written Lorenz vector field; ``independent``: ``jax.vmap`` over ``diffeqsolve``
(each member its own steps); ``coupled``: one ``diffeqsolve`` of the stacked state with a
batched vector field (one error norm). ``jax.jit`` around the solve and around
``jax.value_and_grad`` of the mean loss, ``jax.block_until_ready``, ``time.perf_counter``.
The members (initial states, parameter scales and shifts), save times, tolerances and
loss weights come from the JSON file on the command line; no sciml-bench code is imported.
JAX's platform is whatever ``JAX_PLATFORMS`` says, as for the suite's pinned workers.

    python _bare_ensemble_diffrax.py CONFIG.json SEMANTICS REPEATS

Prints one JSON line: raw ``solve`` and ``grad`` timings in seconds.
"""

import json
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)
import diffrax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


def lorenz(t, u, p):
    sigma, rho, beta = p
    x, y, z = u
    return jnp.stack([sigma * (y - x), x * (rho - z) - y, x * y - beta * z])


def lorenz_batch(t, u, p):
    """Rows are members: ``u`` and ``p`` of shape ``(n, 3)``."""
    x, y, z = u[:, 0], u[:, 1], u[:, 2]
    sigma, rho, beta = p[:, 0], p[:, 1], p[:, 2]
    return jnp.stack([sigma * (y - x), x * (rho - z) - y, x * y - beta * z], axis=1)


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    semantics, repeats = sys.argv[2], int(sys.argv[3])
    solver = getattr(diffrax, cfg["solver"])()
    controller = diffrax.PIDController(rtol=cfg["rtol"], atol=cfg["atol"])
    saveat = diffrax.SaveAt(ts=jnp.asarray(cfg["t_save"]))
    Y0, S, A = (jnp.asarray(cfg[k]) for k in ("Y0", "S", "A"))
    C = jnp.asarray(cfg["C"])  # the loss: each member's weighted states, averaged
    theta = jnp.asarray(cfg["theta0"])

    def solve(field, y0, p):
        # throw=False as in the suite, whose rows report a failed solve instead of raising
        return diffrax.diffeqsolve(
            diffrax.ODETerm(field),
            solver,
            cfg["t0"],
            cfg["t1"],
            None,
            y0,
            args=p,
            saveat=saveat,
            stepsize_controller=controller,
            max_steps=cfg["max_steps"],
            throw=False,
        ).ys

    if semantics == "independent":

        def ys(th):
            return jax.vmap(lambda y0, p: solve(lorenz, y0, p))(Y0, th * S + A)
    else:

        def ys(th):
            return jnp.swapaxes(solve(lorenz_batch, Y0, th * S + A), 0, 1)

    def loss(th):
        return jnp.sum(C * ys(th)) / Y0.shape[0]

    out = {}
    for kind, fn in (("solve", jax.jit(ys)), ("grad", jax.jit(jax.value_and_grad(loss)))):
        jax.block_until_ready(fn(theta))  # compile
        jax.block_until_ready(fn(theta))  # warm-up, as the suite does
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(theta))
            samples.append(time.perf_counter() - t0)
        out[kind] = samples
    print(json.dumps(out))


if __name__ == "__main__":
    main()
