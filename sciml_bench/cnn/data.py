"""The CNN's data, made in NumPy from a seed: identical bytes for every variant.

Images are channels-last, ``(N, H, W, C)`` float32; each framework converts its own
copy to its preferred layout before the timed loop. One epoch is one pass over
``x_train``: in a fixed order with ``pipeline="device"`` (no per-epoch reshuffle, so no
framework pays for one); in the order :func:`epoch_order` draws with ``pipeline="host"``,
where each framework's loader shuffles, all with the same seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sciml_bench.cnn.config import CNNConfig, has_shortcut_conv, resnet_blocks

DATASETS = ("synthetic", "digits")


@dataclass
class Dataset:
    """Train images (exactly one epoch's worth) and a held-out split."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_eval: np.ndarray
    y_eval: np.ndarray

    @property
    def chance_accuracy(self) -> float:
        """Accuracy of always guessing the most frequent held-out class."""
        counts = np.bincount(self.y_eval)
        return float(counts.max() / counts.sum())

    def batches(self, batch_size: int, split: str = "train") -> list[tuple[np.ndarray, np.ndarray]]:
        """Consecutive full batches of ``split`` (a trailing partial eval batch is kept)."""
        x, y = (self.x_train, self.y_train) if split == "train" else (self.x_eval, self.y_eval)
        return [
            (x[i : i + batch_size], y[i : i + batch_size]) for i in range(0, len(x), batch_size)
        ]


def make_dataset(cfg: CNNConfig, name: str = "synthetic") -> Dataset:
    if name == "synthetic":
        return synthetic(cfg)
    if name == "digits":
        return digits(cfg)
    raise ValueError(f"unknown dataset {name!r}; choose from {DATASETS}")


def synthetic(cfg: CNNConfig) -> Dataset:
    """Class-dependent patterns in Gaussian noise: learnable, so accuracy proves training.

    Each class owns a random coarse pattern (a 4x4 grid per channel, upsampled to the
    image, unit std). An image is its class's pattern times ``a`` plus unit noise, with
    ``a = separation / sqrt(2 * pixels)``: any two class patterns then lie ``separation``
    noise standard deviations apart whatever the image size, so difficulty does not
    change with the image size.

    Optionally a fraction ``label_noise`` of the *training* labels is replaced by random
    ones (held-out labels stay clean), which bounds how confident the model can get.
    """
    rng = np.random.default_rng(cfg.seed)
    size, c = cfg.image_size, cfg.channels
    coarse = rng.standard_normal((cfg.n_classes, 4, 4, c)).astype(np.float32)
    idx = np.arange(size) * 4 // size  # nearest-neighbour upsampling, any image size
    patterns = coarse[:, idx][:, :, idx]
    patterns /= patterns.std(axis=(1, 2, 3), keepdims=True) + 1e-6
    patterns *= cfg.separation / np.sqrt(2.0 * size * size * c)

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, cfg.n_classes, size=n).astype(np.int32)
        x = np.empty((n, size, size, c), dtype=np.float32)
        for i in range(0, n, 256):  # chunks keep float64 temporaries out of the peak RAM
            j = min(n, i + 256)
            x[i:j] = rng.standard_normal((j - i, size, size, c), dtype=np.float32)
            x[i:j] += patterns[y[i:j]]
        return x, y

    x_train, y_train = draw(cfg.images_per_epoch)
    x_eval, y_eval = draw(cfg.eval_size)
    flip = rng.random(len(y_train)) < cfg.label_noise  # training labels only
    y_train[flip] = rng.integers(0, cfg.n_classes, size=int(flip.sum()))
    return Dataset("synthetic", x_train, y_train, x_eval, y_eval)


def digits(cfg: CNNConfig) -> Dataset:
    """scikit-learn's bundled 8x8 digits (1797 images, no download).

    Needs ``image_size=8, channels=1, n_classes=10`` (:func:`digits_config` sets them).
    The held-out split is at most 20% of the images; the training epoch cycles through
    the rest in a seeded order until it has ``batch_size * steps_per_epoch`` images.
    """
    from sklearn.datasets import load_digits

    if (cfg.image_size, cfg.channels, cfg.n_classes) != (8, 1, 10):
        raise ValueError("digits needs image_size=8, channels=1, n_classes=10")
    bunch = load_digits()
    x = (bunch.images.astype(np.float32) / 16.0)[..., None]
    y = bunch.target.astype(np.int32)
    rng = np.random.default_rng(cfg.seed)
    order = rng.permutation(len(x))
    n_eval = min(cfg.eval_size, len(x) // 5)
    ev, tr = order[:n_eval], order[n_eval:]
    mean, std = x[tr].mean(), x[tr].std()  # standardise with training statistics only
    x = (x - mean) / std
    reps = -(-cfg.images_per_epoch // len(tr))
    cycle = np.concatenate([rng.permutation(tr) for _ in range(reps)])[: cfg.images_per_epoch]
    return Dataset("digits", x[cycle], y[cycle], x[ev], y[ev])


def digits_config(cfg: CNNConfig) -> CNNConfig:
    """``cfg`` with the digits' fixed image geometry."""
    return cfg.with_overrides({"image_size": 8, "channels": 1, "n_classes": 10})


def inference_images(data: Dataset, n: int) -> np.ndarray:
    """``n`` held-out images (cycled when there are fewer) for the inference measurement."""
    return np.resize(data.x_eval, (n, *data.x_eval.shape[1:]))


def epoch_order(cfg: CNNConfig, epoch: int) -> np.ndarray:
    """The training images' order in ``epoch`` for ``pipeline="host"``: one seed, every loader."""
    return np.random.default_rng([cfg.seed, 2, epoch]).permutation(cfg.images_per_epoch)


class EpochOrder:
    """A sampler (any iterable with a length; torch's ``DataLoader`` takes one) that yields
    :func:`epoch_order` of its current ``epoch``, set before each pass."""

    def __init__(self, cfg: CNNConfig):
        self.cfg, self.epoch = cfg, 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(epoch_order(self.cfg, self.epoch).tolist())

    def __len__(self) -> int:
        return self.cfg.images_per_epoch


def resnet_convs(cfg: CNNConfig) -> list[tuple[int, int, int, int]]:
    """Every ResNet convolution as ``(c_in, c_out, kernel, stride)`` in the canonical order
    that :func:`init_params` and every framework's builder follow: the stem, then per block
    ``conv1, conv2`` and, where it has one, the shortcut's ``conv1x1``. Each is followed by
    batch norm."""
    out = [(cfg.channels, cfg.resnet_widths[0], 3, 1)]
    for c_in, c_out, stride in resnet_blocks(cfg):
        out += [(c_in, c_out, 3, stride), (c_out, c_out, 3, 1)]
        if has_shortcut_conv(c_in, c_out, stride):
            out.append((c_in, c_out, 1, stride))
    return out


def init_params(cfg: CNNConfig) -> dict[str, list[np.ndarray]]:
    """Initial weights in NumPy, in torch's layouts; every framework loads these.

    Small CNN: ``{"conv_w": [(O, I, k, k), ...], "conv_b": [...], "dense_w": [(O, I),
    (O, I)], "dense_b": [...]}``; the first dense layer's inputs are in (C, H, W) flatten
    order. ResNet-18: ``conv_w`` in :func:`resnet_convs` order (no biases), ``bn_gamma``
    (ones) and ``bn_beta`` (zeros) per convolution (running mean 0, variance 1), and one
    dense layer.
    """
    rng = np.random.default_rng(cfg.seed + 1)  # independent of the data stream

    def weight(shape: tuple[int, ...], fan_in: int, fan_out: int) -> np.ndarray:
        if cfg.init == "he_uniform":
            bound = np.sqrt(6.0 / fan_in)
            w = rng.uniform(-bound, bound, size=shape)
        elif cfg.init == "he_normal":
            w = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
        else:  # glorot_uniform
            bound = np.sqrt(6.0 / (fan_in + fan_out))
            w = rng.uniform(-bound, bound, size=shape)
        return w.astype(np.float32)

    if cfg.model == "resnet18":
        convs = resnet_convs(cfg)
        width = cfg.resnet_widths[-1]
        return {
            "conv_w": [weight((o, i, k, k), i * k * k, o * k * k) for i, o, k, _ in convs],
            "bn_gamma": [np.ones(o, np.float32) for _, o, _, _ in convs],
            "bn_beta": [np.zeros(o, np.float32) for _, o, _, _ in convs],
            "dense_w": [weight((cfg.n_classes, width), width, cfg.n_classes)],
            "dense_b": [np.zeros(cfg.n_classes, np.float32)],
        }
    k = cfg.kernel_size
    params: dict[str, list[np.ndarray]] = {"conv_w": [], "conv_b": [], "dense_w": [], "dense_b": []}
    c_in = cfg.channels
    for c_out in cfg.conv_channels:
        params["conv_w"].append(weight((c_out, c_in, k, k), c_in * k * k, c_out * k * k))
        params["conv_b"].append(np.zeros(c_out, np.float32))
        c_in = c_out
    n_flat = c_in * cfg.feature_size**2
    for n_in, n_out in ((n_flat, cfg.hidden), (cfg.hidden, cfg.n_classes)):
        params["dense_w"].append(weight((n_out, n_in), n_in, n_out))
        params["dense_b"].append(np.zeros(n_out, np.float32))
    return params
