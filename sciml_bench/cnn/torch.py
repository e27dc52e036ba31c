"""PyTorch variants: ``torch-eager`` and ``torch-compile`` (``torch.compile`` of the model).

``torch`` is imported only inside functions (this module's name does not shadow it:
imports are absolute).
"""

from __future__ import annotations

import shutil
from typing import Any

import numpy as np

from sciml_bench.cnn.config import CNNConfig
from sciml_bench.cnn.data import Dataset, init_params
from sciml_bench.cnn.train_loop import Trainer, Unavailable, resolve_device
from sciml_bench.measure.memory import torch_alloc_peak_mb

GPU_FIX = "pip install torch --index-url https://download.pytorch.org/whl/cu126 (a CUDA build)"


def load(request: str) -> None:
    import torch  # noqa: F401


def build_model(cfg: CNNConfig) -> Any:
    """The shared architecture as a ``torch.nn.Sequential``, weights from :func:`init_params`."""
    import torch
    from torch import nn

    layers: list[nn.Module] = []
    c_in = cfg.channels
    for c_out in cfg.conv_channels:
        layers += [
            nn.Conv2d(c_in, c_out, cfg.kernel_size, padding=cfg.kernel_size // 2),
            nn.ReLU(),
            nn.MaxPool2d(cfg.pool),
        ]
        c_in = c_out
    n_flat = c_in * cfg.feature_size**2
    layers += [
        nn.Flatten(),
        nn.Linear(n_flat, cfg.hidden),
        nn.ReLU(),
        nn.Linear(cfg.hidden, cfg.n_classes),
    ]
    model = nn.Sequential(*layers)

    p = init_params(cfg)
    convs = [m for m in model if isinstance(m, nn.Conv2d)]
    denses = [m for m in model if isinstance(m, nn.Linear)]
    with torch.no_grad():
        for m, w, b in zip(
            convs + denses, p["conv_w"] + p["dense_w"], p["conv_b"] + p["dense_b"], strict=True
        ):
            m.weight.copy_(torch.from_numpy(w))
            m.bias.copy_(torch.from_numpy(b))
    return model


class TorchTrainer(Trainer):
    def __init__(self, cfg: CNNConfig, data: Dataset, request: str, compile: bool):
        import torch
        import torch.nn.functional as F

        self.device, self.device_note = resolve_device(
            request, torch.cuda.is_available(), f"torch {torch.__version__}", GPU_FIX
        )
        if (
            compile
            and self.device == "cpu"
            and shutil.which("g++") is None
            and shutil.which("c++") is None
        ):
            raise Unavailable(
                "torch.compile on CPU needs a C++ compiler (g++/c++), none on PATH",
                "apt-get install g++",
            )
        self._torch, self._cfg = torch, cfg
        self._dev = dev = torch.device(self.device)
        if self.device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = cfg.allow_tf32
            torch.backends.cudnn.allow_tf32 = cfg.allow_tf32
            # XLA (JAX, TF) autotunes convolutions; without this cuDNN uses heuristics only
            torch.backends.cudnn.benchmark = True
            torch.cuda.reset_peak_memory_stats()

        self.model = build_model(cfg).to(dev)
        self.optimizer = torch.optim.Adam(
            self.model.parameters(),
            lr=cfg.learning_rate,
            betas=(cfg.beta1, cfg.beta2),
            eps=cfg.eps,
            weight_decay=0.0,
        )
        self.forward = torch.compile(self.model) if compile else self.model
        self.compiled = compile
        self.loss_fn = F.cross_entropy

        def put(x: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
            xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))).to(dev)
            return xt, torch.from_numpy(y.astype(np.int64)).to(dev)

        bs = cfg.batch_size
        self.train = [put(x, y) for x, y in data.batches(bs, "train")]
        self.eval = [put(x, y) for x, y in data.batches(bs, "eval")]

    def step(self, i: int) -> None:
        x, y = self.train[i]
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.forward(x), y)
        loss.backward()
        self.optimizer.step()  # no loss.item(): that would sync host and device every step

    def sync(self) -> None:
        if self.device == "cuda":
            self._torch.cuda.synchronize()

    def evaluate(self, initial: bool = False) -> tuple[float, float]:
        torch = self._torch
        # the eager module (same weights): evaluating the compiled one would compile again
        model = build_model(self._cfg).to(self._dev) if initial else self.model
        loss, correct, n = 0.0, 0, 0
        with torch.no_grad():
            for x, y in self.eval:
                logits = model(x)
                loss += float(self.loss_fn(logits, y, reduction="sum"))
                correct += int((logits.argmax(1) == y).sum())
                n += len(y)
        return loss / n, correct / n

    def alloc_peak_mb(self) -> float | None:
        if self.device != "cuda":
            return None
        return torch_alloc_peak_mb(self._torch)

    def device_name(self) -> str | None:
        if self.device == "cuda":
            return self._torch.cuda.get_device_name()
        return None

    def settings(self) -> dict[str, Any]:
        torch = self._torch
        out: dict[str, Any] = {
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "torch_interop_threads": torch.get_num_interop_threads(),
            "compiled": self.compiled,
            "compile_mode": "default, model only (optimizer step eager, foreach Adam)"
            if self.compiled
            else None,
        }
        if self.device == "cuda":
            out.update(
                cuda=torch.version.cuda,
                cudnn=torch.backends.cudnn.version(),
                allow_tf32=torch.backends.cudnn.allow_tf32,
                cudnn_benchmark=torch.backends.cudnn.benchmark,
            )
        return out


def build_eager(cfg: CNNConfig, data: Dataset, request: str) -> Trainer:
    return TorchTrainer(cfg, data, request, compile=False)


def build_compiled(cfg: CNNConfig, data: Dataset, request: str) -> Trainer:
    return TorchTrainer(cfg, data, request, compile=True)
