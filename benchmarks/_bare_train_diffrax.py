"""Bare Diffrax training loop for the spiral, written as Diffrax's neural-ODE example
writes one: an Equinox module holding an ``eqx.nn.MLP`` vector field (on ``y**3``),
``eqx.filter_value_and_grad`` of the loss, and one ``eqx.filter_jit`` step applying
``optax.adam``'s update (``optim.update``, ``eqx.apply_updates``); the suite's solver,
tolerances, save points, loss and Adam constants. No sciml-bench code is imported.

    python _bare_train_diffrax.py CONFIG.json

Prints one JSON line: the raw ``seconds`` of every iteration and its ``loss``.
"""

import json
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)
import diffrax  # noqa: E402
import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402


class Func(eqx.Module):
    mlp: eqx.nn.MLP

    def __call__(self, t, y, args):
        return self.mlp(y**3)


def spiral_model(theta):
    """u.^3 -> Dense(2, 50, tanh) -> Dense(50, 2), the weights from ``theta``."""
    mlp = eqx.nn.MLP(2, 2, 50, depth=1, activation=jnp.tanh, key=jax.random.PRNGKey(0))
    th = jnp.asarray(theta)
    values = [th[:100].reshape(50, 2), th[100:150], th[150:250].reshape(2, 50), th[250:252]]
    mlp = eqx.tree_at(lambda m: [m.layers[0].weight, m.layers[0].bias, m.layers[1].weight,
                                 m.layers[1].bias], mlp, values)
    return Func(mlp)


def main() -> None:
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    y0, ts = jnp.asarray(cfg["y0"]), jnp.asarray(cfg["t_save"])
    W, O = jnp.asarray(cfg["W"]), jnp.asarray(cfg["O"])
    controller = diffrax.PIDController(rtol=cfg["rtol"], atol=cfg["atol"])

    def predict(model):
        return diffrax.diffeqsolve(
            diffrax.ODETerm(model), diffrax.Tsit5(), cfg["t0"], cfg["t1"], None, y0,
            saveat=diffrax.SaveAt(ts=ts), stepsize_controller=controller,
            max_steps=cfg["max_steps"], throw=False,
        ).ys

    @eqx.filter_value_and_grad
    def grad_loss(model):
        return jnp.sum(W * (predict(model) - O) ** 2)

    optim = optax.adam(cfg["learning_rate"], b1=cfg["beta1"], b2=cfg["beta2"], eps=cfg["eps"])

    @eqx.filter_jit
    def make_step(model, opt_state):
        loss, grads = grad_loss(model)
        updates, opt_state = optim.update(grads, opt_state)
        model = eqx.apply_updates(model, updates)
        return loss, model, opt_state

    model = spiral_model(cfg["theta0"])
    opt_state = optim.init(eqx.filter(model, eqx.is_inexact_array))
    seconds, losses = [], []
    for _ in range(cfg["iterations"]):
        t0 = time.perf_counter()
        loss, model, opt_state = make_step(model, opt_state)
        jax.block_until_ready((loss, model, opt_state))
        seconds.append(time.perf_counter() - t0)
        losses.append(float(loss))
    print(json.dumps({"seconds": seconds, "loss": losses}))


if __name__ == "__main__":
    main()
