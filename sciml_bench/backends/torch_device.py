"""Where a torch case's tensors live: one rule for torchdiffeq and torchode cases.

Every tensor is made on the named device (that is torch's pinning); a timed call ends
with :meth:`TorchPlaced.sync` so the clock holds the GPU's work; the read-back is the
device of the last result torch returned; the device-memory peak is the caching
allocator's; and :func:`torch_cuda_missing` says what keeps torch off a GPU.
"""

from __future__ import annotations

from typing import Any


class TorchPlaced:
    """Mixin for a case (single or ensemble) with ``torch``, ``device`` (its
    ``torch.device``) and ``last_device`` (the device of the last result) attributes.
    List it before :class:`~sciml_bench.backends.base.Case` or ``EnsembleCase``, whose
    host-only :meth:`placement` it falls back to on the CPU."""

    torch: Any
    device: Any
    last_device: Any

    def sync(self) -> None:
        """Wait for queued CUDA work: every timed call ends with it, before the clock is read."""
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def placement(self) -> tuple[str, str | None]:
        dev = self.last_device
        if dev.type == "cuda":
            return "cuda", self.torch.cuda.get_device_name(dev)
        return super().placement() if dev.type == "cpu" else (dev.type, None)  # type: ignore[misc]

    def alloc_peak_mb(self) -> float | None:
        from sciml_bench.measure.memory import torch_alloc_peak_mb

        return torch_alloc_peak_mb(self.torch) if self.device.type == "cuda" else None


def torch_cuda_missing() -> tuple[str, str] | None:
    """What keeps torch off the GPU here, with the fix, or ``None``."""
    import torch

    fix = (
        "pip install torch --index-url https://download.pytorch.org/whl/cu126 "
        "(a CUDA build), or use --device cpu"
    )
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build (torch.version.cuda is None)", fix
    if not torch.cuda.is_available():
        return (
            f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU "
            "(torch.cuda.is_available() is False: driver or CUDA_VISIBLE_DEVICES)",
            fix,
        )
    return None


def torch_dtype(torch: Any, dtype: str) -> Any:
    """The torch dtype of a case's ``--dtype`` name (``float64`` or ``float32``): the
    state, the time grid, the parameters and the loss's arrays are all made in it."""
    return {"float64": torch.float64, "float32": torch.float32}[dtype]
