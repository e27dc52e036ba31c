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
from typing import Any

import numpy as np

from sciml_bench.cnn.config import CNNConfig
from sciml_bench.cnn.data import Dataset, init_params
from sciml_bench.cnn.train_loop import Trainer, resolve_device

GPU_FIX = "pip install 'tensorflow[and-cuda]' (TensorFlow's CUDA libraries)"


def load(request: str) -> None:
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if request == "cpu":
        tf.config.set_visible_devices([], "GPU")  # before any op initialises the GPU
    for gpu in gpus:
        # also set by TF_FORCE_GPU_ALLOW_GROWTH before import; this is the API's word
        tf.config.experimental.set_memory_growth(gpu, True)


def build_model(cfg: CNNConfig) -> Any:
    """The shared architecture in Keras (channels-last), weights from :func:`init_params`."""
    import keras

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
    def __init__(self, cfg: CNNConfig, data: Dataset, request: str):
        import keras
        import tensorflow as tf

        self._tf = tf
        sees_gpu = bool(tf.config.list_logical_devices("GPU"))
        self.device, self.device_note = resolve_device(
            request, sees_gpu, f"tensorflow {tf.__version__}", GPU_FIX
        )
        self._tf_device = "/GPU:0" if self.device == "cuda" else "/CPU:0"
        tf.config.experimental.enable_tensor_float_32_execution(cfg.allow_tf32)

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
            self.train = [put(x, y) for x, y in data.batches(bs, "train")]
            self.eval = [put(x, y) for x, y in data.batches(bs, "eval")]

        model, optimizer = self.model, self.optimizer

        @tf.function(jit_compile=True)
        def step(x: Any, y: Any) -> None:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(loss_of(model(x, training=True), y))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

        self._step, self._cfg = step, cfg

    def step(self, i: int) -> None:
        x, y = self.train[i]
        with self._tf.device(self._tf_device):
            self._step(x, y)

    def sync(self) -> None:
        self._tf.test.experimental.sync_devices()

    def evaluate(self, initial: bool = False) -> tuple[float, float]:
        tf = self._tf
        loss, correct, n = 0.0, 0, 0
        with tf.device(self._tf_device):
            model = build_model(self._cfg) if initial else self.model

            @tf.function(jit_compile=True)
            def batch_eval(x: Any, y: Any) -> tuple[Any, Any]:
                logits = model(x, training=False)
                hits = tf.cast(tf.argmax(logits, axis=1, output_type=tf.int32) == y, tf.int32)
                return tf.reduce_sum(loss_of(logits, y)), tf.reduce_sum(hits)

            for x, y in self.eval:
                batch_loss, batch_correct = batch_eval(x, y)
                loss += float(batch_loss)
                correct += int(batch_correct)
                n += int(y.shape[0])
        return loss / n, correct / n

    def alloc_peak_mb(self) -> float | None:
        if self.device != "cuda":
            return None
        return self._tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20

    def device_name(self) -> str | None:
        if self.device != "cuda":
            return None
        gpu = self._tf.config.list_physical_devices("GPU")[0]
        return self._tf.config.experimental.get_device_details(gpu).get("device_name")

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
        }


def build(cfg: CNNConfig, data: Dataset, request: str) -> Trainer:
    return TensorFlowTrainer(cfg, data, request)
