"""The TensorFlow variant: a Keras model and Keras Adam in one ``tf.function(jit_compile=True)``.

A custom step (GradientTape + ``apply_gradients``) rather than ``model.fit``: ``fit`` feeds
NumPy through ``tf.data`` (a host-to-device copy per step) and runs callbacks, which the
other variants do not pay. The XLA-compiled step is what ``fit(jit_compile=True)`` runs.

Known optimizer difference, kept because it is Keras's: Keras adds ``eps`` to the
un-bias-corrected ``sqrt(v)``; torch/Optax add it to the corrected one. The two agree
up to ``eps * sqrt(1 - beta2**t)``, negligible at ``eps = 1e-8``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from sciml_bench.cnn.config import CNNConfig, has_shortcut_conv, resnet_blocks
from sciml_bench.cnn.data import Dataset, epoch_order, inference_images, init_params
from sciml_bench.cnn.train_loop import (
    Trainer,
    device_from_name,
    passes,
    resolve_device,
)

GPU_FIX = "pip install 'tensorflow[and-cuda]' (TensorFlow's CUDA libraries)"


def load(request: str) -> None:
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if request == "cpu":
        tf.config.set_visible_devices([], "GPU")  # before any op initialises the GPU
    for gpu in gpus:
        # also set by TF_FORCE_GPU_ALLOW_GROWTH before import; this is the API's word
        tf.config.experimental.set_memory_growth(gpu, True)


def build_resnet(cfg: CNNConfig) -> Any:
    """The shared ResNet-18 in Keras (channels-last), weights from :func:`init_params`.

    3x3 convolutions pad one pixel on every side explicitly (``ZeroPadding2D`` then
    ``valid``), as torch and the JAX model do: Keras's ``same`` pads stride-2 convolutions
    asymmetrically. Batch norm: ``momentum = 1 - bn_momentum`` (Keras's convention), the
    same ``eps``; it normalises in float32 under the mixed policy, as the others do. One
    difference kept because it is Keras's: its running variance averages the *biased*
    batch variance (torch and the JAX model: unbiased, larger by ``n / (n - 1)``).
    """
    import keras

    layers = keras.layers
    pairs: list[tuple[Any, Any]] = []

    def conv_bn(x: Any, c: int, k: int, stride: int) -> Any:
        if k > 1:
            x = layers.ZeroPadding2D(k // 2)(x)
        conv = layers.Conv2D(c, k, strides=stride, padding="valid", use_bias=False)
        bn = layers.BatchNormalization(momentum=1.0 - cfg.bn_momentum, epsilon=cfg.bn_eps)
        pairs.append((conv, bn))
        return bn(conv(x))

    inputs = keras.Input((cfg.image_size, cfg.image_size, cfg.channels))
    x = layers.ReLU()(conv_bn(inputs, cfg.resnet_widths[0], 3, 1))
    for c_in, c_out, stride in resnet_blocks(cfg):
        out = layers.ReLU()(conv_bn(x, c_out, 3, stride))
        out = conv_bn(out, c_out, 3, 1)
        if has_shortcut_conv(c_in, c_out, stride):
            x = conv_bn(x, c_out, 1, stride)
        x = layers.ReLU()(layers.Add()([out, x]))
    x = layers.GlobalAveragePooling2D()(x)
    fc = layers.Dense(cfg.n_classes)
    model = keras.Model(inputs, fc(x))

    p = init_params(cfg)
    for (conv, bn), w, g, b in zip(pairs, p["conv_w"], p["bn_gamma"], p["bn_beta"], strict=True):
        conv.set_weights([w.transpose(2, 3, 1, 0)])  # OIHW -> HWIO
        bn.set_weights([g, b, np.zeros_like(g), np.ones_like(g)])
    fc.set_weights([p["dense_w"][0].T, p["dense_b"][0]])
    return model


def build_model(cfg: CNNConfig) -> Any:
    """The shared architecture in Keras (channels-last), weights from :func:`init_params`."""
    import keras

    if cfg.model == "resnet18":
        return build_resnet(cfg)
    layers = keras.layers
    inputs = keras.Input((cfg.image_size, cfg.image_size, cfg.channels))
    x = inputs
    for c in cfg.conv_channels:
        x = layers.Conv2D(c, cfg.kernel_size, padding="same", activation="relu")(x)
        x = layers.MaxPooling2D(cfg.pool)(x)
    x = layers.Flatten()(x)
    x = layers.Dense(cfg.hidden, activation="relu")(x)
    model = keras.Model(inputs, layers.Dense(cfg.n_classes)(x))

    p = init_params(cfg)
    convs = [la for la in model.layers if isinstance(la, layers.Conv2D)]
    denses = [la for la in model.layers if isinstance(la, layers.Dense)]
    for la, w, b in zip(convs, p["conv_w"], p["conv_b"], strict=True):
        la.set_weights([w.transpose(2, 3, 1, 0), b])  # OIHW -> HWIO
    # torch flattens (C, H, W), Keras (H, W, C): permute the first dense layer's inputs
    w0 = p["dense_w"][0]
    c, s = cfg.conv_channels[-1], cfg.feature_size
    w0 = w0.reshape(-1, c, s, s).transpose(2, 3, 1, 0).reshape(s * s * c, -1)
    denses[0].set_weights([w0, p["dense_b"][0]])
    denses[1].set_weights([p["dense_w"][1].T, p["dense_b"][1]])
    return model


def loss_of(logits: Any, y: Any) -> Any:
    """Per-example softmax cross-entropy with integer labels."""
    import tensorflow as tf

    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)


class TensorFlowTrainer(Trainer):
    bf16_how = "Keras mixed_precision policy mixed_bfloat16"

    def __init__(self, cfg: CNNConfig, data: Dataset, request: str):
        import keras
        import tensorflow as tf

        self._tf = tf
        sees_gpu = bool(tf.config.list_logical_devices("GPU"))
        self.device, self.device_note = resolve_device(
            request, sees_gpu, f"tensorflow {tf.__version__}", GPU_FIX
        )
        self._tf_device = "/GPU:0" if self.device == "cuda" else "/CPU:0"
        tf.config.experimental.enable_tensor_float_32_execution(cfg.tf32)
        if cfg.precision == "bf16":  # float32 variables, bfloat16 compute
            keras.mixed_precision.set_global_policy("mixed_bfloat16")
        self._data = data

        with tf.device(self._tf_device):
            self.model = build_model(cfg)
            self.optimizer = keras.optimizers.Adam(
                learning_rate=cfg.learning_rate,
                beta_1=cfg.beta1,
                beta_2=cfg.beta2,
                epsilon=cfg.eps,
                amsgrad=False,
            )
            self.optimizer.build(self.model.trainable_variables)

            def put(x: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
                return tf.identity(tf.constant(x)), tf.identity(tf.constant(y))

            bs = cfg.batch_size
            self.eval = [put(x, y) for x, y in data.batches(bs, "eval")]
        self.host = cfg.pipeline == "host"
        if self.host:
            # tf.data from host memory with prefetching; variables, not constants, so the
            # images are not serialised into the pipeline's graph (a 2 GB limit)
            with tf.device("/CPU:0"):
                self._x_host = tf.Variable(data.x_train, trainable=False)
                self._y_host = tf.Variable(data.y_train, trainable=False)
            self._it: Any = None
            # the iterator's place: the pass it began at, batches taken since, and the
            # pass after its last
            self._pass = self._taken = self._end = 0
        else:
            with tf.device(self._tf_device):
                self.train = [put(x, y) for x, y in data.batches(bs, "train")]
        self._eval_fns: dict[bool, Any] = {}
        self._predict: Any = None

        model, optimizer = self.model, self.optimizer

        @tf.function(jit_compile=True)
        def step(x: Any, y: Any) -> None:
            with tf.GradientTape() as tape:
                logits = tf.cast(model(x, training=True), tf.float32)
                loss = tf.reduce_mean(loss_of(logits, y))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

        self._step, self._cfg = step, cfg

    def _open(self, epoch: int) -> None:
        """One tf.data pipeline over the passes from ``epoch`` to the run's last, each in
        the shared order, and one iterator kept across them: tf.data's idiom for several
        epochs (Keras's ``fit`` keeps one iterator over a repeated dataset given
        ``steps_per_epoch``), prefetching across the passes' boundaries.

        Not a new pipeline and iterator per pass: that re-traces the ``map`` function and
        tears the previous iterator down inside the next (measured) pass. The first
        iterator, alive through the step's XLA compilation, was slow to tear down (tf.data's
        autotuning; docs/cnn.md, ``--pipeline``), which landed in the first measured epoch
        as data wait; the warm-up never began a second pass to absorb it.
        """
        tf, cfg = self._tf, self._cfg
        end = max(len(passes(cfg)), epoch + 1)
        order = np.concatenate([epoch_order(cfg, e) for e in range(epoch, end)])
        xh, yh = self._x_host, self._y_host
        self._it = None  # the old iterator, if any, goes before the new one starts
        ds = (
            tf.data.Dataset.from_tensor_slices(order)
            .batch(cfg.batch_size, drop_remainder=True)
            .map(lambda idx: (tf.gather(xh, idx), tf.gather(yh, idx)),
                 num_parallel_calls=tf.data.AUTOTUNE)
            .prefetch(tf.data.AUTOTUNE)
        )  # fmt: skip
        self._it = iter(ds)
        self._pass, self._taken, self._end = epoch, 0, end

    def start_epoch(self, epoch: int) -> None:
        if not self.host:
            return
        steps = self._cfg.steps_per_epoch
        done, mid = divmod(self._taken, steps)
        if self._it is None or mid or self._pass + done != epoch or epoch >= self._end:
            self._open(epoch)  # not where the iterator stands (passes out of turn): restart

    def step(self, i: int) -> None:
        if self.host:
            t = time.perf_counter()
            x, y = next(self._it)
            self._taken += 1
            self.data_wait_s += time.perf_counter() - t
        else:
            x, y = self.train[i]
        with self._tf.device(self._tf_device):
            self._step(x, y)

    def sync(self) -> None:
        self._tf.test.experimental.sync_devices()

    def evaluate(self, initial: bool = False) -> tuple[float, float]:
        tf = self._tf
        loss, correct, n = 0.0, 0, 0
        with tf.device(self._tf_device):
            if initial not in self._eval_fns:  # made once: the curve evaluates many times
                model = build_model(self._cfg) if initial else self.model

                @tf.function(jit_compile=True)
                def batch_eval(x: Any, y: Any) -> tuple[Any, Any]:
                    logits = tf.cast(model(x, training=False), tf.float32)
                    hits = tf.cast(tf.argmax(logits, axis=1, output_type=tf.int32) == y, tf.int32)
                    return tf.reduce_sum(loss_of(logits, y)), tf.reduce_sum(hits)

                self._eval_fns[initial] = batch_eval
            batch_eval = self._eval_fns[initial]
            for x, y in self.eval:
                batch_loss, batch_correct = batch_eval(x, y)
                loss += float(batch_loss)
                correct += int(batch_correct)
                n += int(y.shape[0])
        return loss / n, correct / n

    def predictor(self, n: int) -> Any:
        tf = self._tf
        model = self.model
        if self._predict is None:
            self._predict = tf.function(jit_compile=True)(lambda x: model(x, training=False))
        with tf.device(self._tf_device):
            x = tf.identity(tf.constant(inference_images(self._data, n)))

        def call() -> Any:
            with tf.device(self._tf_device):
                return self._predict(x).numpy()  # to the host: synchronises

        return call

    def param_count(self) -> int | None:
        return sum(int(np.prod(v.shape)) for v in self.model.trainable_variables)

    def gpu_alloc_peak_mb(self) -> float | None:
        return self._tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20

    def gpu_name(self) -> str | None:
        gpu = self._tf.config.list_physical_devices("GPU")[0]
        return self._tf.config.experimental.get_device_details(gpu).get("device_name")

    def read_device(self) -> str:
        # Keras 3 variables hold a tf.Variable (``value``), whose device is a TF name
        names = {device_from_name(getattr(v, "value", v).device)
                 for v in self.model.trainable_variables}  # fmt: skip
        return ",".join(sorted(names))  # mixed: neither cpu nor cuda

    def settings(self) -> dict[str, Any]:
        import keras

        tf = self._tf
        threading = tf.config.threading
        return {
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
            "jit_compile": True,
            "tf_intra_op_threads": threading.get_intra_op_parallelism_threads(),
            "tf_inter_op_threads": threading.get_inter_op_parallelism_threads(),
            "TF_FORCE_GPU_ALLOW_GROWTH": os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH"),
            "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
            "tf32": tf.config.experimental.tensor_float_32_execution_enabled(),
            "adam_eps_form": "Keras: eps added to uncorrected sqrt(v)",
            "keras_dtype_policy": keras.mixed_precision.global_policy().name,
            "loader": "tf.data, prefetch(AUTOTUNE), one iterator across epochs"
            if self.host
            else None,
            "bn_running_variance": "Keras: biased batch variance (torch, JAX: unbiased)"
            if self._cfg.model == "resnet18"
            else None,
        }


def build(cfg: CNNConfig, data: Dataset, request: str) -> Trainer:
    return TensorFlowTrainer(cfg, data, request)
