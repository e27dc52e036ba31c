"""Where a case runs: the ``--device`` request, its resolution and the worker's pinning.

A device is ``cpu`` or ``cuda``. The user asks for one or several (``--device cpu,cuda``),
or ``auto``, which resolves once per run, in the parent, to a concrete device (``cuda``
when NVML sees a GPU). Each worker is then *pinned* before its framework starts
(:func:`device_env`, read by every executor), and the record stores what the framework
reports it used, read back from the arrays (:func:`normalize` names it), not what was asked.

Only the standard library is imported here; NVML is imported lazily by
:mod:`sciml_bench.measure.memory`.
"""

from __future__ import annotations

from collections.abc import Sequence

#: concrete devices, and what ``--device`` accepts besides them
DEVICES = ("cpu", "cuda")
REQUESTS = ("auto", *DEVICES)


class DeviceError(ValueError):
    """A device request that cannot be honoured here; its message is one line with the fix."""


def parse(text: str | None, default: str) -> list[str]:
    """The requested devices of ``--device`` (``cpu``, ``cuda``, ``auto`` or a comma list),
    in order, without repeats; ``default`` when ``text`` is empty."""
    items = [x.strip().lower() for x in (text or default).split(",") if x.strip()]
    bad = [x for x in items if x not in REQUESTS]
    if bad or not items:
        raise DeviceError(
            f"--device {text!r}: choose cpu, cuda, auto or a comma list such as cpu,cuda"
        )
    return list(dict.fromkeys(items))


NO_GPU = (
    "--device cuda: no NVIDIA GPU is visible here (NVML finds none); "
    "use --device cpu, or --device auto to use a GPU only when there is one"
)


def resolve(requests: Sequence[str], gpus: int) -> tuple[list[str], str]:
    """Concrete devices for ``requests`` given the number of GPUs NVML sees, and a line
    saying what ``auto`` chose (empty without ``auto``). ``cuda`` with no GPU is a
    :class:`DeviceError`: never a silent fall back to the CPU."""
    note = ""
    out: list[str] = []
    for r in requests:
        if r == "auto":
            r = "cuda" if gpus else "cpu"
            seen = f"NVML sees {gpus} GPU(s)" if gpus else "NVML sees no GPU"
            note = f"--device auto: running on {r} ({seen})"
        elif r == "cuda" and not gpus:
            raise DeviceError(NO_GPU)
        out.append(r)
    return list(dict.fromkeys(out)), note


def device_env(device: str | None) -> dict[str, str]:
    """Environment variables that pin a worker's frameworks to ``device`` before they start.

    JAX reads ``JAX_PLATFORMS`` when its first backend starts, so this must be in the
    worker's environment, not set after import. ``cpu`` keeps JAX off a GPU even where a
    CUDA plugin is installed (JAX would take the GPU by default). ``cuda`` lists the CPU
    second, as JAX's own default on a GPU machine has it (host callbacks use it), with
    CUDA first so that it is the default device; a CUDA backend that cannot start is a
    loud error, and the worker's read-back catches any array that still lands on the CPU.
    Torch has no such variable: its cases create their tensors on the named device.
    ``SCIML_BENCH_DEVICE`` tells the Julia backend which project to start (``julia/gpu``
    with DiffEqGPU on ``cuda``) before juliacall starts. ``None`` or ``auto`` (a CNN job
    that resolves its own device) pins nothing.
    """
    if device == "cpu":
        return {"JAX_PLATFORMS": "cpu", "SCIML_BENCH_DEVICE": "cpu"}
    if device == "cuda":
        # no preallocation of 75% of VRAM: the memory peak must be the case's own
        return {"JAX_PLATFORMS": "cuda,cpu", "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
                "SCIML_BENCH_DEVICE": "cuda"}  # fmt: skip
    return {}


def normalize(platform: str) -> str:
    """A framework's name for a device platform as ``cpu`` or ``cuda`` (JAX says ``gpu``)."""
    p = platform.lower()
    return "cuda" if p in ("gpu", "cuda") else p


def mismatch(backend: str, after: str, wanted: str, reported: str, name: str | None) -> str:
    """The reason of an ``error`` row whose library put the arrays on another device than
    the one its worker was pinned to, naming both."""
    return (f"{backend}: device mismatch after {after}: asked for {wanted}, "
            f"the library reports {reported} ({name or 'unnamed'})")  # fmt: skip


def cpu_only_note(backend: str) -> str:
    """The reason a CPU-only backend's row gives when a GPU was asked for."""
    return f"{backend} runs only on the CPU; it ran there although --device cuda was asked for"
