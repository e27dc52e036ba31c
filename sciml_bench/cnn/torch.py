"""PyTorch variants: ``torch-eager`` and ``torch-compile`` (``torch.compile`` of the model).

``torch`` is imported only inside functions (this module's name does not shadow it:
imports are absolute).
"""

from __future__ import annotations

import functools
import shutil
import time
from typing import Any

import numpy as np

from sciml_bench.cnn.config import CNNConfig, has_shortcut_conv, resnet_blocks
from sciml_bench.cnn.data import Dataset, EpochOrder, inference_images, init_params
from sciml_bench.cnn.train_loop import (
    Trainer,
    Unavailable,
    device_from_name,
    resolve_device,
)
from sciml_bench.measure.memory import torch_alloc_peak_mb

GPU_FIX = "pip install torch --index-url https://download.pytorch.org/whl/cu126 (a CUDA build)"


def load(request: str) -> None:
    import torch  # noqa: F401


@functools.cache
def resnet_classes() -> tuple[type, type]:
    """The ResNet-18 module classes (made once, after torch is imported)."""
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, c_in: int, c_out: int, stride: int, bn: Any):
            super().__init__()
            self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
            self.bn1 = bn(c_out)
            self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
            self.bn2 = bn(c_out)
            self.shortcut = (
                nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), bn(c_out))
                if has_shortcut_conv(c_in, c_out, stride)
                else nn.Identity()
            )

        def forward(self, x: Any) -> Any:
            out = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))

    class ResNet(nn.Module):
        def __init__(self, cfg: CNNConfig):
            super().__init__()

            def bn(c: int) -> Any:
                return nn.BatchNorm2d(c, eps=cfg.bn_eps, momentum=cfg.bn_momentum)

            w0 = cfg.resnet_widths[0]
            self.stem = nn.Conv2d(cfg.channels, w0, 3, 1, 1, bias=False)
            self.stem_bn = bn(w0)
            self.blocks = nn.Sequential(
                *(BasicBlock(i, o, s, bn) for i, o, s in resnet_blocks(cfg))
            )
            self.fc = nn.Linear(cfg.resnet_widths[-1], cfg.n_classes)

        def convs_and_bns(self) -> list[tuple[Any, Any]]:
            """(conv, its batch norm) in :func:`~sciml_bench.cnn.data.resnet_convs` order."""
            out = [(self.stem, self.stem_bn)]
            for b in self.blocks:
                out += [(b.conv1, b.bn1), (b.conv2, b.bn2)]
                if isinstance(b.shortcut, nn.Sequential):
                    out.append((b.shortcut[0], b.shortcut[1]))
            return out

        def forward(self, x: Any) -> Any:
            x = torch.relu(self.stem_bn(self.stem(x)))
            x = self.blocks(x)
            return self.fc(x.mean(dim=(2, 3)))  # global average pooling

    return BasicBlock, ResNet


def build_resnet(cfg: CNNConfig) -> Any:
    """The shared ResNet-18 with the NumPy initial weights."""
    import torch

    model = resnet_classes()[1](cfg)
    p = init_params(cfg)
    with torch.no_grad():
        pairs = model.convs_and_bns()
        for (conv, bn), w, g, b in zip(
            pairs, p["conv_w"], p["bn_gamma"], p["bn_beta"], strict=True
        ):
            conv.weight.copy_(torch.from_numpy(w))
            bn.weight.copy_(torch.from_numpy(g))
            bn.bias.copy_(torch.from_numpy(b))
        model.fc.weight.copy_(torch.from_numpy(p["dense_w"][0]))
        model.fc.bias.copy_(torch.from_numpy(p["dense_b"][0]))
    return model


def build_model(cfg: CNNConfig) -> Any:
    """The shared architecture (``torch.nn``), weights from :func:`init_params`."""
    import torch
    from torch import nn

    if cfg.model == "resnet18":
        return build_resnet(cfg)

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
    bf16_how = "torch.autocast bfloat16"

    def __init__(self, cfg: CNNConfig, data: Dataset, request: str, compile: bool):
        import torch
        import torch.nn.functional as F

        self.device, self.device_note = resolve_device(
            request, torch.cuda.is_available(), f"torch {torch.__version__}", GPU_FIX
        )
        if compile and self.device == "cpu" and not has_cxx_compiler():
            raise Unavailable(
                "torch.compile on CPU needs a C++ compiler (g++/c++), none on PATH",
                "apt-get install g++",
            )
        self._torch, self._cfg = torch, cfg
        self._dev = torch.device(self.device)
        if self.device == "cuda":
            self._configure_cuda(cfg)

        self.model = build_model(cfg).to(self._dev)
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
        self._data, self._infer = data, None
        self.model.train()
        self._place_batches(cfg, data)

    def _configure_cuda(self, cfg: CNNConfig) -> None:
        """TF32 as the config says, cuDNN autotuning, and a fresh allocator peak."""
        torch = self._torch
        torch.backends.cuda.matmul.allow_tf32 = cfg.tf32
        torch.backends.cudnn.allow_tf32 = cfg.tf32
        # XLA (JAX, TF) autotunes convolutions; without this cuDNN uses heuristics only
        torch.backends.cudnn.benchmark = True
        torch.cuda.reset_peak_memory_stats()

    def _put(self, x: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
        """Images (NCHW) and int64 labels on the device."""
        torch = self._torch
        xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))).to(self._dev)
        return xt, torch.from_numpy(y.astype(np.int64)).to(self._dev)

    def _place_batches(self, cfg: CNNConfig, data: Dataset) -> None:
        """The held-out batches on the device; the training batches too, or for the host
        pipeline a ``DataLoader`` over host memory."""
        self.eval = [self._put(x, y) for x, y in data.batches(cfg.batch_size, "eval")]
        self.host = cfg.pipeline == "host"
        if self.host:
            self._loader = self._host_loader(cfg, data)
            self._it: Any = None
        else:
            self.train = [self._put(x, y) for x, y in data.batches(cfg.batch_size, "train")]

    def _host_loader(self, cfg: CNNConfig, data: Dataset) -> Any:
        """The seed articles' idiom: a ``DataLoader`` from host memory in the shared order,
        pinned pages so the copies can be asynchronous (``non_blocking``)."""
        torch = self._torch
        from torch.utils.data import DataLoader, TensorDataset

        x_host = torch.from_numpy(np.ascontiguousarray(data.x_train.transpose(0, 3, 1, 2)))
        self._order = EpochOrder(cfg)
        return DataLoader(
            TensorDataset(x_host, torch.from_numpy(data.y_train.astype(np.int64))),
            batch_size=cfg.batch_size,
            sampler=self._order,
            drop_last=True,
            num_workers=cfg.loader_workers,
            pin_memory=self.device == "cuda",
            persistent_workers=cfg.loader_workers > 0,
        )

    def _autocast(self) -> Any:
        """bf16 autocast for ``precision="bf16"``; a no-op context otherwise."""
        return self._torch.autocast(
            self.device, dtype=self._torch.bfloat16, enabled=self._cfg.precision == "bf16"
        )

    def start_epoch(self, epoch: int) -> None:
        if self.host:
            self._order.epoch = epoch
            self._it = iter(self._loader)

    def step(self, i: int) -> None:
        if self.host:
            t = time.perf_counter()
            x, y = next(self._it)
            x, y = x.to(self._dev, non_blocking=True), y.to(self._dev, non_blocking=True)
            self.data_wait_s += time.perf_counter() - t
        else:
            x, y = self.train[i]
        self.optimizer.zero_grad(set_to_none=True)
        with self._autocast():
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
        model.eval()  # batch norm: running statistics
        loss, correct, n = 0.0, 0, 0
        with torch.no_grad(), self._autocast():
            for x, y in self.eval:
                logits = model(x).float()
                loss += float(self.loss_fn(logits, y, reduction="sum"))
                correct += int((logits.argmax(1) == y).sum())
                n += len(y)
        self.model.train()
        return loss / n, correct / n

    def predictor(self, n: int) -> Any:
        torch = self._torch
        self.model.eval()
        if self.compiled and self._infer is None:
            # one specialised graph per batch size, as the training step has
            self._infer = torch.compile(self.model, dynamic=False)
        forward = self._infer if self.compiled else self.model
        x = inference_images(self._data, n).transpose(0, 3, 1, 2)
        x = torch.from_numpy(np.ascontiguousarray(x)).to(self._dev)

        def call() -> Any:
            with torch.inference_mode(), self._autocast():
                return forward(x).float().cpu()  # to the host: synchronises

        return call

    def param_count(self) -> int | None:
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    def gpu_alloc_peak_mb(self) -> float | None:
        return torch_alloc_peak_mb(self._torch)

    def gpu_name(self) -> str | None:
        return self._torch.cuda.get_device_name()

    def read_device(self) -> str:
        devices = {p.device.type for p in self.model.parameters()}
        return device_from_name(",".join(sorted(devices)))  # mixed: neither cpu nor cuda

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
        if self.host:
            out.update(loader="torch.utils.data.DataLoader", loader_workers=self._cfg.loader_workers,
                       pin_memory=self.device == "cuda", non_blocking=True)  # fmt: skip
        if self.device == "cuda":
            out.update(
                cuda=torch.version.cuda,
                cudnn=torch.backends.cudnn.version(),
                allow_tf32=torch.backends.cudnn.allow_tf32,
                cudnn_benchmark=torch.backends.cudnn.benchmark,
            )
        return out


def has_cxx_compiler() -> bool:
    """Whether a C++ compiler (``g++`` or ``c++``) is on PATH: torch.compile needs one on CPU."""
    return shutil.which("g++") is not None or shutil.which("c++") is not None


def build_eager(cfg: CNNConfig, data: Dataset, request: str) -> Trainer:
    return TorchTrainer(cfg, data, request, compile=False)


def build_compiled(cfg: CNNConfig, data: Dataset, request: str) -> Trainer:
    return TorchTrainer(cfg, data, request, compile=True)
