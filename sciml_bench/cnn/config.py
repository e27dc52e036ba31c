"""The one configuration every CNN variant reads: architecture, init, optimizer, sizes.

Every number a framework would otherwise default (Adam's epsilon, the init scheme,
padding, pooling, TF32) is a field here, so no framework default leaks into the
comparison. Initial weights are drawn once in NumPy from ``seed`` and loaded into
each framework, so all variants start from the *same* weights, not just the same
scheme (``initial_loss`` in the record checks this).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class CNNConfig:
    """The run's every choice; ``model`` picks the architecture.

    ``small``: ``[conv(k, same) -> ReLU -> maxpool(2)] * n -> flatten -> dense -> dense``.
    ``resnet18``: a CIFAR-style ResNet-18 (:func:`resnet_blocks` is its one definition):
    conv3x3(64) -> BN -> ReLU, four stages of two basic blocks
    (``conv3x3 -> BN -> ReLU -> conv3x3 -> BN``, plus ``x`` or ``conv1x1 -> BN`` when the
    shape changes, then ReLU) with ``resnet_widths`` channels and strides 1, 2, 2, 2,
    global average pooling, one dense layer. Convolutions have no bias (BN follows).
    """

    # --- data and sizes ---
    image_size: int = 32
    channels: int = 3
    n_classes: int = 10
    batch_size: int = 32
    steps_per_epoch: int = 20
    #: measured epochs, after ``warmup_epochs`` untimed-for-throughput epochs
    epochs: int = 3
    warmup_epochs: int = 1
    #: held-out images for the final accuracy
    eval_size: int = 512
    #: synthetic data: distance between class patterns in noise std, the same at any image
    #: size (4 -> best possible accuracy ~0.86; 32 -> ~1, learnt within an epoch or two)
    separation: float = 32.0
    #: synthetic data: fraction of training labels replaced at random
    label_noise: float = 0.0
    seed: int = 0

    # --- architecture ---
    conv_channels: tuple[int, ...] = (32, 64)
    kernel_size: int = 3
    pool: int = 2
    hidden: int = 128

    #: "small" | "resnet18"
    model: str = "small"
    resnet_widths: tuple[int, ...] = (64, 128, 256, 512)
    resnet_blocks: tuple[int, ...] = (2, 2, 2, 2)
    #: batch norm, torch's convention: running = (1 - momentum) * running + momentum * batch
    bn_momentum: float = 0.1
    bn_eps: float = 1e-5

    # --- data pipeline ---
    #: "device": every batch on the device before timing (pure compute); "host": each
    #: framework's own loader from host memory, reshuffled each epoch with one shared seed
    pipeline: str = "device"
    #: torch DataLoader worker processes for ``pipeline="host"`` (0: the training process)
    loader_workers: int = 2

    # --- evaluation during training, time to accuracy, inference ---
    #: evaluate the held-out split every this many steps (0: at the end of every epoch)
    eval_every: int = 0
    #: held-out accuracy to reach; None: only the curve is recorded
    target_accuracy: float | None = None
    #: timed batch-1 forward calls after warm-up (0: no inference measurement)
    inference_calls: int = 100
    #: batch size of the inference throughput measurement
    inference_batch: int = 256

    # --- init: drawn in NumPy, loaded into every framework ---
    #: "he_uniform" | "he_normal" | "glorot_uniform" for weights; biases are zero
    init: str = "he_uniform"

    # --- optimizer: Adam, every hyperparameter explicit ---
    learning_rate: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    #: torch/optax default 1e-8, Keras 1e-7: set here so neither leaks in
    eps: float = 1e-8

    # --- numerics ---
    #: parameters and optimizer state (always float32, mixed precision included)
    dtype: str = "float32"
    #: TF32 for conv and matmul on Ampere+ GPUs; frameworks disagree by default
    allow_tf32: bool = True
    #: compute precision: "fp32" (TF32 off), "tf32" (TF32 as ``allow_tf32`` says: the first
    #: wave's numerics) or "bf16" (bf16 compute, float32 parameters and optimizer state)
    precision: str = "tf32"

    def __post_init__(self) -> None:
        if self.init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {self.init!r}")
        if self.dtype != "float32":
            raise ValueError("only float32 is supported")
        for name, allowed in (("model", MODELS), ("pipeline", PIPELINES),
                              ("precision", PRECISIONS)):  # fmt: skip
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise ValueError(f"target_accuracy must be in (0, 1], got {self.target_accuracy}")
        for name in ("eval_every", "inference_calls", "loader_workers"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        if self.inference_batch < 1:
            raise ValueError("inference_batch must be >= 1")
        for name in ("image_size", "channels", "batch_size", "steps_per_epoch", "epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.model == "resnet18":
            if self.image_size < 2 ** (len(self.resnet_widths) - 1):
                raise ValueError(
                    f"image_size {self.image_size} is too small for the ResNet's "
                    f"{len(self.resnet_widths) - 1} stride-2 stages"
                )
        elif self.feature_size < 1:
            raise ValueError(
                f"image_size {self.image_size} is too small for {len(self.conv_channels)} "
                f"pooling layers of size {self.pool}"
            )

    @property
    def feature_size(self) -> int:
        """Spatial size after the conv/pool stack (pooling floors, as in all frameworks)."""
        size = self.image_size
        for _ in self.conv_channels:
            size //= self.pool
        return size

    @property
    def tf32(self) -> bool:
        """Whether float32 matmuls and convolutions may use TF32 (GPUs with TF32 only)."""
        return self.allow_tf32 and self.precision != "fp32"

    @property
    def images_per_epoch(self) -> int:
        return self.batch_size * self.steps_per_epoch

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for name in TUPLE_FIELDS:
            out[name] = list(getattr(self, name))
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CNNConfig:
        # fields missing from an older record take their defaults
        return cls(**_with_tuples(d))

    def with_overrides(self, overrides: dict[str, Any] | None) -> CNNConfig:
        """A copy with ``overrides`` applied; unknown names are an error, not ignored."""
        if not overrides:
            return self
        names = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ValueError(f"unknown CNN config field(s): {unknown}; known: {sorted(names)}")
        return replace(self, **_with_tuples(overrides))


INITS = ("he_uniform", "he_normal", "glorot_uniform")
MODELS = ("small", "resnet18")
PIPELINES = ("device", "host")
PRECISIONS = ("fp32", "tf32", "bf16")
TUPLE_FIELDS = ("conv_channels", "resnet_widths", "resnet_blocks")
#: a CIFAR-style ResNet is made for 32x32 images: its image size unless one is asked for
RESNET_IMAGE_SIZE = 32
#: ``--quick --model resnet18``: 32x32 too, since below it the last stage works on maps of
#: 2x2 or less, where XLA's CPU convolutions leave their fast path (a 2-core run of JAX at
#: the quick preset's 16x16 ran past the 120 s quick budget); fewer, smaller steps keep
#: every variant inside that budget on 2 CPU cores, compilation included
QUICK_RESNET18: dict[str, Any] = {
    "image_size": RESNET_IMAGE_SIZE, "batch_size": 16, "steps_per_epoch": 4, "epochs": 1,
    "eval_size": 64, "inference_calls": 5, "inference_batch": 16,
}  # fmt: skip


def _with_tuples(d: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``d`` with the :data:`TUPLE_FIELDS` it has as tuples of ints (JSON gives lists)."""
    out = dict(d)
    for name in TUPLE_FIELDS:
        if name in out:
            out[name] = tuple(int(c) for c in out[name])
    return out


def for_model(cfg: CNNConfig, preset: str, overrides: dict[str, Any] | None) -> CNNConfig:
    """``cfg`` sized for its model: a ResNet-18 at :data:`RESNET_IMAGE_SIZE`, with the
    quick preset's steps cut to :data:`QUICK_RESNET18`; a size the user gave wins."""
    if cfg.model != "resnet18":
        return cfg
    sizes = QUICK_RESNET18 if preset == "quick" else {"image_size": RESNET_IMAGE_SIZE}
    return cfg.with_overrides({k: v for k, v in sizes.items() if k not in (overrides or {})})


def resnet_blocks(cfg: CNNConfig) -> list[tuple[int, int, int]]:
    """The ResNet's basic blocks as ``(c_in, c_out, stride)``, in order: its one definition.

    A block whose stride is not 1 or whose channels change has a ``conv1x1 -> BN`` shortcut.
    """
    out, c_in = [], cfg.resnet_widths[0]
    for stage, (width, n) in enumerate(zip(cfg.resnet_widths, cfg.resnet_blocks, strict=True)):
        for b in range(n):
            out.append((c_in, width, 2 if stage > 0 and b == 0 else 1))
            c_in = width
    return out


def has_shortcut_conv(c_in: int, c_out: int, stride: int) -> bool:
    return stride != 1 or c_in != c_out


def _rgb_preset(image_size: int, steps_per_epoch: int, epochs: int) -> CNNConfig:
    """A full-size preset: RGB images, batches of 32, 512 held-out images."""
    return CNNConfig(image_size=image_size, channels=3, batch_size=32,
                     steps_per_epoch=steps_per_epoch, epochs=epochs, eval_size=512)  # fmt: skip


#: Named sizes. ``gpu`` mirrors ApX's comparison (224x224x3, batch 32, 5 measured epochs
#: of 100 steps plus one warm-up epoch); ``cpu`` finishes in minutes on two cores;
#: ``quick`` is for tests and CI (seconds per variant, except torch.compile's compile).
PRESETS: dict[str, CNNConfig] = {
    "quick": CNNConfig(
        image_size=16,
        channels=1,
        batch_size=32,
        steps_per_epoch=8,
        epochs=2,
        eval_size=256,
        separation=128.0,  # 24 steps must be enough to learn
        conv_channels=(8, 16),
        hidden=32,
        learning_rate=3e-3,
        loader_workers=1,
        inference_calls=10,
        inference_batch=64,
    ),
    "cpu": _rgb_preset(image_size=64, steps_per_epoch=50, epochs=3),
    "gpu": _rgb_preset(image_size=224, steps_per_epoch=100, epochs=5),
}
