"""The JAX variant: an Equinox model, an Optax Adam, one ``jax.jit`` step.

JAX, Equinox and Optax are imported only inside functions. Preallocation is switched
off by the harness before the first import (see ``train_loop.prepare_environment``).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np

from sciml_bench.cnn.config import CNNConfig
from sciml_bench.cnn.data import Dataset, init_params
from sciml_bench.cnn.train_loop import Trainer, resolve_device
from sciml_bench.measure.memory import jax_alloc_peak_mb

GPU_FIX = "pip install -U 'jax[cuda12]' (a CUDA build of jaxlib)"


def load(request: str) -> None:
    if request == "cpu":  # keep JAX off the GPU entirely, not just unused
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import equinox  # noqa: F401
    import jax  # noqa: F401
    import optax  # noqa: F401


@functools.cache
def cnn_class() -> type:
    """The Equinox module class, made once (a pytree type must be the same object each time)."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    class CNN(eqx.Module):
        convs: list
        denses: list
        pool: eqx.nn.MaxPool2d

        def __call__(self, x: Any) -> Any:
            for conv in self.convs:
                x = self.pool(jax.nn.relu(conv(x)))
            x = jax.nn.relu(self.denses[0](jnp.ravel(x)))  # (C, H, W) order, as torch
            return self.denses[1](x)

    return CNN


def build_model(cfg: CNNConfig) -> Any:
    """The shared architecture as an Equinox module on one (C, H, W) image (own random init)."""
    import equinox as eqx
    import jax

    keys = iter(jax.random.split(jax.random.PRNGKey(0), 2 + len(cfg.conv_channels)))
    convs, c_in = [], cfg.channels
    for c_out in cfg.conv_channels:
        convs.append(
            eqx.nn.Conv2d(
                c_in, c_out, cfg.kernel_size, padding=cfg.kernel_size // 2, key=next(keys)
            )
        )
        c_in = c_out
    n_flat = c_in * cfg.feature_size**2
    denses = [
        eqx.nn.Linear(n_flat, cfg.hidden, key=next(keys)),
        eqx.nn.Linear(cfg.hidden, cfg.n_classes, key=next(keys)),
    ]
    pool = eqx.nn.MaxPool2d(cfg.pool, stride=cfg.pool)
    return cnn_class()(convs, denses, pool)


def load_model(cfg: CNNConfig) -> Any:
    """The model with the shared NumPy initial weights.

    The skeleton is built abstractly (``filter_eval_shape``): Equinox's own random init
    would run op by op, costing seconds of setup for weights we then overwrite.
    """
    import equinox as eqx
    import jax.numpy as jnp

    model = eqx.filter_eval_shape(build_model, cfg)
    p = init_params(cfg)
    for i, (w, b) in enumerate(zip(p["conv_w"], p["conv_b"], strict=True)):
        model = eqx.tree_at(
            lambda m, i=i: (m.convs[i].weight, m.convs[i].bias),
            model,
            (jnp.asarray(w), jnp.asarray(b)[:, None, None]),
        )
    for i, (w, b) in enumerate(zip(p["dense_w"], p["dense_b"], strict=True)):
        model = eqx.tree_at(
            lambda m, i=i: (m.denses[i].weight, m.denses[i].bias),
            model,
            (jnp.asarray(w), jnp.asarray(b)),
        )
    return model


class JaxTrainer(Trainer):
    def __init__(self, cfg: CNNConfig, data: Dataset, request: str):
        import equinox as eqx
        import jax
        import jax.numpy as jnp
        import optax

        self._jax = jax
        try:
            gpus = jax.devices("gpu")
        except RuntimeError:
            gpus = []
        self.device, self.device_note = resolve_device(
            request, bool(gpus), f"jax {jax.__version__}", GPU_FIX
        )
        dev = gpus[0] if self.device == "cuda" else jax.devices("cpu")[0]
        self._dev = dev
        precision = "tensorfloat32" if cfg.allow_tf32 else "highest"
        jax.config.update("jax_default_matmul_precision", precision)

        self._cfg = cfg
        params, static = eqx.partition(load_model(cfg), eqx.is_array)
        optim = optax.adam(cfg.learning_rate, b1=cfg.beta1, b2=cfg.beta2, eps=cfg.eps, eps_root=0.0)
        # all of the state committed to the device: the step's outputs are, and a mismatch
        # between first and later inputs would compile the step twice
        self.state = jax.device_put((params, optim.init(params)), dev)

        def loss_fn(params: Any, x: Any, y: Any) -> Any:
            logits = jax.vmap(eqx.combine(params, static))(x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), logits

        def step(state: Any, x: Any, y: Any) -> Any:
            params, opt_state = state
            grads, _ = jax.grad(loss_fn, has_aux=True)(params, x, y)
            updates, opt_state = optim.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state

        def evaluate(params: Any, x: Any, y: Any) -> Any:
            loss, logits = loss_fn(params, x, y)
            return loss * len(y), jnp.sum(jnp.argmax(logits, axis=1) == y)

        # donating the old state lets XLA update in place, as torch does (CPU ignores it)
        self._step = jax.jit(step, donate_argnums=(0,) if self.device == "cuda" else ())
        self._eval = jax.jit(evaluate)

        def put(x: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
            x_nchw = np.ascontiguousarray(x.transpose(0, 3, 1, 2))  # torch's layout, as Equinox
            return jax.device_put(x_nchw, dev), jax.device_put(y, dev)

        bs = cfg.batch_size
        self.train = [put(x, y) for x, y in data.batches(bs, "train")]
        self.eval = [put(x, y) for x, y in data.batches(bs, "eval")]

    def step(self, i: int) -> None:
        x, y = self.train[i]
        self.state = self._step(self.state, x, y)

    def sync(self) -> None:
        self._jax.block_until_ready(self.state)
        self._jax.block_until_ready(self.train)

    def evaluate(self, initial: bool = False) -> tuple[float, float]:
        import equinox as eqx

        params = self.state[0]
        if initial:
            params, _ = eqx.partition(load_model(self._cfg), eqx.is_array)
            params = self._jax.device_put(params, self._dev)
        loss, correct, n = 0.0, 0, 0
        for x, y in self.eval:
            batch_loss, batch_correct = self._eval(params, x, y)
            loss += float(batch_loss)
            correct += int(batch_correct)
            n += len(y)
        return loss / n, correct / n

    def alloc_peak_mb(self) -> float | None:
        if self.device != "cuda":
            return None
        return jax_alloc_peak_mb(self._dev)

    def device_name(self) -> str | None:
        return self._dev.device_kind if self.device == "cuda" else None

    def settings(self) -> dict[str, Any]:
        import equinox
        import jaxlib
        import optax

        jax = self._jax
        return {
            "jax": jax.__version__,
            "jaxlib": jaxlib.__version__,
            "equinox": equinox.__version__,
            "optax": optax.__version__,
            "jax_backend": jax.default_backend(),
            "XLA_PYTHON_CLIENT_PREALLOCATE": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
            "XLA_PYTHON_CLIENT_ALLOCATOR": os.environ.get("XLA_PYTHON_CLIENT_ALLOCATOR"),
            "XLA_FLAGS": os.environ.get("XLA_FLAGS"),
            "jax_default_matmul_precision": jax.config.jax_default_matmul_precision,
            "jax_compilation_cache_dir": jax.config.jax_compilation_cache_dir,
        }


def build(cfg: CNNConfig, data: Dataset, request: str) -> Trainer:
    return JaxTrainer(cfg, data, request)
