"""The JAX variant: an Equinox model, an Optax Adam, one ``jax.jit`` step.

JAX, Equinox and Optax are imported only inside functions. Preallocation is switched
off by the harness before the first import (see ``train_loop.prepare_environment``).
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import numpy as np

from sciml_bench.cnn.config import CNNConfig, has_shortcut_conv, resnet_blocks
from sciml_bench.cnn.data import Dataset, epoch_order, inference_images, init_params
from sciml_bench.cnn.train_loop import Trainer, device_from_name, resolve_device
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


def _conv(x: Any, w: Any, stride: int) -> Any:
    """The bias-free convolution of NCHW ``x`` with OIHW ``w``, padded by half the kernel."""
    import jax

    pad = w.shape[-1] // 2
    return jax.lax.conv_general_dilated(
        x, w, (stride, stride), [(pad, pad), (pad, pad)],
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
    )  # fmt: skip


def batch_norm(
    y: Any, gamma: Any, beta: Any, running: Any, train: bool, momentum: float, eps: float
) -> tuple[Any, Any]:
    """Torch's ``BatchNorm2d`` on NCHW ``y``: the normalised ``y`` and the new running
    ``(mean, var)``.

    ``out = gamma * (y - mean) / sqrt(var + eps) + beta`` per channel, in float32 and cast
    back to ``y``'s dtype. Training takes ``mean`` and the biased ``var`` over the batch and
    space (``n`` values) and updates ``running = (1 - m) * running + m * (mean, var * n /
    (n - 1))``; evaluation takes the running statistics and leaves them.
    """
    import jax
    import jax.numpy as jnp

    y32 = y.astype(jnp.float32)
    mean_r, var_r = running
    if train:
        mean, var = y32.mean(axis=(0, 2, 3)), y32.var(axis=(0, 2, 3))
        n = y.shape[0] * y.shape[2] * y.shape[3]
        m = momentum
        running = jax.lax.stop_gradient(
            ((1 - m) * mean_r + m * mean, (1 - m) * var_r + m * var * n / (n - 1))
        )
    else:
        mean, var = mean_r, var_r
    scale = gamma.astype(jnp.float32) * jax.lax.rsqrt(var + eps)
    shift = beta.astype(jnp.float32) - mean * scale
    return (y32 * scale[:, None, None] + shift[:, None, None]).astype(y.dtype), running


@functools.cache
def resnet_class() -> type:
    """The ResNet-18 as an Equinox module on a batch ``(N, C, H, W)`` (batch norm needs the
    batch); the running statistics are state passed in and returned, as JAX wants.

    Batch norm as torch's ``BatchNorm2d`` computes it (:func:`batch_norm`), its statistics
    in float32 whatever the compute precision (as torch and Keras do).
    """
    import equinox as eqx
    import jax

    class ResNet(eqx.Module):
        convs: list
        gammas: list
        betas: list
        fc_w: Any
        fc_b: Any
        blocks: tuple = eqx.field(static=True)
        momentum: float = eqx.field(static=True)
        eps: float = eqx.field(static=True)

        def __call__(self, x: Any, state: Any, train: bool) -> tuple[Any, Any]:
            new_state: list[Any] = []

            def conv_bn(x: Any, i: int, stride: int) -> Any:
                y, running = batch_norm(
                    _conv(x, self.convs[i], stride), self.gammas[i], self.betas[i], state[i],
                    train, self.momentum, self.eps,
                )  # fmt: skip
                new_state.append(running)
                return y

            x = jax.nn.relu(conv_bn(x, 0, 1))
            i = 1
            for c_in, c_out, stride in self.blocks:
                out = jax.nn.relu(conv_bn(x, i, stride))
                out = conv_bn(out, i + 1, 1)
                i += 2
                if has_shortcut_conv(c_in, c_out, stride):
                    x = conv_bn(x, i, stride)
                    i += 1
                x = jax.nn.relu(out + x)
            x = x.mean(axis=(2, 3))  # global average pooling
            return x @ self.fc_w.T + self.fc_b, new_state

    return ResNet


def load_resnet(cfg: CNNConfig) -> tuple[Any, Any]:
    """The ResNet with the shared NumPy initial weights, and its initial batch-norm state."""
    import jax.numpy as jnp

    p = init_params(cfg)
    model = resnet_class()(
        [jnp.asarray(w) for w in p["conv_w"]],
        [jnp.asarray(g) for g in p["bn_gamma"]],
        [jnp.asarray(b) for b in p["bn_beta"]],
        jnp.asarray(p["dense_w"][0]),
        jnp.asarray(p["dense_b"][0]),
        tuple(resnet_blocks(cfg)),
        cfg.bn_momentum,
        cfg.bn_eps,
    )
    state = [(jnp.zeros(len(g)), jnp.ones(len(g))) for g in p["bn_gamma"]]
    return model, state


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


def load_model_and_state(cfg: CNNConfig) -> tuple[Any, Any]:
    """Either architecture with the shared initial weights, and its batch-norm state."""
    if cfg.model == "resnet18":
        return load_resnet(cfg)
    return load_model(cfg), []


def load_model(cfg: CNNConfig) -> Any:
    """The small CNN with the shared NumPy initial weights.

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


def training_functions(cfg: CNNConfig, static: Any, optim: Any) -> tuple[Any, Any, Any]:
    """The training step, the batch evaluation and the prediction, for ``jax.jit``.

    ``step((params, opt_state, bn), x, y)`` is one Adam update on the mean softmax
    cross-entropy of the batch; ``evaluate(params, bn, x, y)`` gives the batch's summed
    cross-entropy and its number of correct predictions; ``predict(params, bn, x)`` the
    logits. ``static`` is the model's non-array part (``eqx.partition``).
    """
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import optax

    bf16 = cfg.precision == "bf16"

    def compute(tree: Any) -> Any:
        """bf16 copies of the float arrays for ``precision="bf16"`` (the float32 masters
        stay in the state; the gradient flows back through the cast)."""
        if not bf16:
            return tree
        return jax.tree.map(
            lambda a: a.astype(jnp.bfloat16) if jnp.issubdtype(a.dtype, jnp.floating) else a,
            tree,
        )

    def forward(params: Any, bn: Any, x: Any, train: bool) -> tuple[Any, Any]:
        model = eqx.combine(compute(params), static)
        if cfg.model == "resnet18":
            logits, bn = model(compute(x), bn, train)
        else:
            logits = jax.vmap(model)(compute(x))
        return logits.astype(jnp.float32), bn

    def loss_fn(params: Any, bn: Any, x: Any, y: Any) -> Any:
        logits, bn = forward(params, bn, x, True)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), bn

    def step(state: Any, x: Any, y: Any) -> Any:
        params, opt_state, bn = state
        grads, bn = jax.grad(loss_fn, has_aux=True)(params, bn, x, y)
        updates, opt_state = optim.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, bn

    def evaluate(params: Any, bn: Any, x: Any, y: Any) -> Any:
        logits, _ = forward(params, bn, x, False)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).sum()
        return loss, jnp.sum(jnp.argmax(logits, axis=1) == y)

    def predict(params: Any, bn: Any, x: Any) -> Any:
        return forward(params, bn, x, False)[0]

    return step, evaluate, predict


class JaxTrainer(Trainer):
    bf16_how = "bfloat16 compute (parameters and inputs cast inside the jitted step)"

    def __init__(self, cfg: CNNConfig, data: Dataset, request: str):
        import equinox as eqx
        import jax
        import optax

        self._jax = jax
        self._dev = self._pick_device(request, cfg)
        self._cfg, self._data = cfg, data
        model, bn_state = load_model_and_state(cfg)
        params, static = eqx.partition(model, eqx.is_array)
        self._static = static
        optim = optax.adam(cfg.learning_rate, b1=cfg.beta1, b2=cfg.beta2, eps=cfg.eps, eps_root=0.0)
        # all of the state committed to the device: the step's outputs are, and a mismatch
        # between first and later inputs would compile the step twice
        self.state = jax.device_put((params, optim.init(params), bn_state), self._dev)

        step, evaluate, predict = training_functions(cfg, static, optim)
        # donating the old state lets XLA update in place, as torch does (CPU ignores it)
        self._step = jax.jit(step, donate_argnums=(0,) if self.device == "cuda" else ())
        self._eval = jax.jit(evaluate)
        self._predict = jax.jit(predict)
        self._place_batches(cfg, data)

    def _pick_device(self, request: str, cfg: CNNConfig) -> Any:
        """Set ``device`` (and the note when it is not the GPU asked for) and the matmul
        precision; return the JAX device to put everything on."""
        jax = self._jax
        try:
            gpus = jax.devices("gpu")
        except RuntimeError:
            gpus = []
        self.device, self.device_note = resolve_device(
            request, bool(gpus), f"jax {jax.__version__}", GPU_FIX
        )
        precision = "tensorfloat32" if cfg.tf32 else "highest"
        jax.config.update("jax_default_matmul_precision", precision)
        return gpus[0] if self.device == "cuda" else jax.devices("cpu")[0]

    def _put(self, x: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
        """Images (in torch's NCHW layout, as Equinox takes them) and labels on the device."""
        x_nchw = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
        return self._jax.device_put(x_nchw, self._dev), self._jax.device_put(y, self._dev)

    def _place_batches(self, cfg: CNNConfig, data: Dataset) -> None:
        """The held-out batches on the device; the training batches too, unless the host
        pipeline batches them by hand from host memory, one batch ahead."""
        bs = cfg.batch_size
        self.eval = [self._put(x, y) for x, y in data.batches(bs, "eval")]
        self.host = cfg.pipeline == "host"
        if self.host:
            self._order = epoch_order(cfg, 0)
            self._ahead: Any = None
        else:
            self.train = [self._put(x, y) for x, y in data.batches(bs, "train")]

    def _host_batch(self, i: int) -> Any:
        """Gather batch ``i`` of this epoch's order on the host and start its copy (async)."""
        t = time.perf_counter()
        bs = self._cfg.batch_size
        idx = self._order[i * bs : (i + 1) * bs]
        out = self._put(self._data.x_train[idx], self._data.y_train[idx])
        self.data_wait_s += time.perf_counter() - t
        return out

    def start_epoch(self, epoch: int) -> None:
        if self.host:
            self._order = epoch_order(self._cfg, epoch)
            self._ahead = self._host_batch(0)

    def step(self, i: int) -> None:
        if not self.host:
            x, y = self.train[i]
            self.state = self._step(self.state, x, y)
            return
        x, y = self._ahead
        self.state = self._step(self.state, x, y)  # dispatched; the device works on it ...
        if i + 1 < self._cfg.steps_per_epoch:  # ... while the host prepares the next batch
            self._ahead = self._host_batch(i + 1)

    def sync(self) -> None:
        self._jax.block_until_ready(self.state)
        if not self.host:
            self._jax.block_until_ready(self.train)

    def evaluate(self, initial: bool = False) -> tuple[float, float]:
        import equinox as eqx

        params, _, bn = self.state
        if initial:
            model, bn = load_model_and_state(self._cfg)
            params, _ = eqx.partition(model, eqx.is_array)
            params, bn = self._jax.device_put((params, bn), self._dev)
        loss, correct, n = 0.0, 0, 0
        for x, y in self.eval:
            batch_loss, batch_correct = self._eval(params, bn, x, y)
            loss += float(batch_loss)
            correct += int(batch_correct)
            n += len(y)
        return loss / n, correct / n

    def predictor(self, n: int) -> Any:
        params, _, bn = self.state
        x, _ = self._put(inference_images(self._data, n), np.zeros(n, np.int32))

        def call() -> Any:
            return np.asarray(self._predict(params, bn, x))  # to the host: synchronises

        return call

    def param_count(self) -> int | None:
        return sum(int(a.size) for a in self._jax.tree.leaves(self.state[0]))

    def gpu_alloc_peak_mb(self) -> float | None:
        return jax_alloc_peak_mb(self._dev)

    def gpu_name(self) -> str | None:
        return self._dev.device_kind

    def read_device(self) -> str:
        leaves = self._jax.tree.leaves(self.state[0])
        platforms = {d.platform for leaf in leaves for d in leaf.devices()}
        return device_from_name(",".join(sorted(platforms)))  # mixed: neither cpu nor cuda

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
