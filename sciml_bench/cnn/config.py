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
    """A small CNN: ``[conv(k, same) -> ReLU -> maxpool(2)] * n -> flatten -> dense -> dense``."""

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
    dtype: str = "float32"
    #: TF32 for conv and matmul on Ampere+ GPUs; frameworks disagree by default
    allow_tf32: bool = True

    def __post_init__(self) -> None:
        if self.init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {self.init!r}")
        if self.dtype != "float32":
            raise ValueError("only float32 is supported")
        for name in ("image_size", "channels", "batch_size", "steps_per_epoch", "epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.feature_size < 1:
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
    def images_per_epoch(self) -> int:
        return self.batch_size * self.steps_per_epoch

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["conv_channels"] = list(self.conv_channels)
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CNNConfig:
        d = dict(d)
        if "conv_channels" in d:
            d["conv_channels"] = tuple(int(c) for c in d["conv_channels"])
        return cls(**d)

    def with_overrides(self, overrides: dict[str, Any] | None) -> CNNConfig:
        """A copy with ``overrides`` applied; unknown names are an error, not ignored."""
        if not overrides:
            return self
        names = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ValueError(f"unknown CNN config field(s): {unknown}; known: {sorted(names)}")
        d = dict(overrides)
        if "conv_channels" in d:
            d["conv_channels"] = tuple(int(c) for c in d["conv_channels"])
        return replace(self, **d)


INITS = ("he_uniform", "he_normal", "glorot_uniform")

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
    ),
    "cpu": CNNConfig(
        image_size=64,
        channels=3,
        batch_size=32,
        steps_per_epoch=50,
        epochs=3,
        eval_size=512,
    ),
    "gpu": CNNConfig(
        image_size=224,
        channels=3,
        batch_size=32,
        steps_per_epoch=100,
        epochs=5,
        eval_size=512,
    ),
}
