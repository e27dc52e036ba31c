"""CNN baselines: one small CNN trained four ways, from one shared config.

Variants: ``torch-eager``, ``torch-compile``, ``jax`` (Equinox + Optax, ``jit``) and
``tensorflow`` (Keras, ``jit_compile=True``). The public API:

- :func:`variants` — what exists and whether it can run here (never imports a framework);
- :func:`jobs` — one JSON-able payload per variant;
- :func:`run_variant` — run one payload inside a fresh worker process; returns a flat
  record and never raises.

A run whose held-out accuracy is not clearly above chance keeps status ``"ok"`` (its
timings are of real work) but has ``trained_to_chance: True`` and says so in ``reason``.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any

from sciml_bench.cnn.config import PRECISIONS, PRESETS, CNNConfig, for_model
from sciml_bench.cnn.data import DATASETS, digits_config

__all__ = [
    "PRESETS", "CNNConfig", "VariantInfo", "compare_precision", "jobs", "run_variant", "variants",
]  # fmt: skip


def compare_precision(rec: dict[str, Any], earlier: list[dict[str, Any]]) -> dict[str, Any]:
    """A finished row with its accuracy compared with its fp32 (else tf32) row among
    ``earlier``: see :func:`sciml_bench.cnn.train_loop.compare_precision`."""
    from sciml_bench.cnn.train_loop import compare_precision as compare

    return compare(rec, earlier)


@dataclass(frozen=True)
class VariantInfo:
    """A variant, the modules it needs and, when it cannot run, why and how to fix it."""

    name: str
    framework: str
    modules: tuple[str, ...]
    extra: str
    #: ``module:function`` returning a Trainer; imported only inside the worker
    builder: str
    available: bool = True
    reason: str = ""
    fix: str = ""


_VARIANTS = (
    VariantInfo("torch-eager", "torch", ("torch",), "torch", "sciml_bench.cnn.torch:build_eager"),
    VariantInfo("torch-compile", "torch", ("torch",), "torch", "sciml_bench.cnn.torch:build_compiled"),
    VariantInfo("jax", "jax", ("jax", "equinox", "optax"), "jax", "sciml_bench.cnn.jax:build"),
    VariantInfo(
        "tensorflow", "tensorflow", ("tensorflow", "keras"), "tensorflow",
        "sciml_bench.cnn.tensorflow:build",
    ),
)  # fmt: skip


def variants() -> dict[str, VariantInfo]:
    """Every variant with its availability, found with ``find_spec`` (nothing imported)."""
    out = {}
    for v in _VARIANTS:
        missing = [m for m in v.modules if importlib.util.find_spec(m) is None]
        if missing:
            v = VariantInfo(
                **{**v.__dict__, "available": False,
                   "reason": f"Python package(s) not installed: {', '.join(missing)}",
                   "fix": f"pip install -c constraints.txt -e '.[{v.extra}]'"}
            )  # fmt: skip
        out[v.name] = v
    return out


def preset_for(quick: bool, device: str) -> str:
    """``quick``, else ``gpu`` where a GPU will be used, else ``cpu``."""
    if quick:
        return "quick"
    if device == "cuda":
        return "gpu"
    if device == "auto":
        from sciml_bench.measure.memory import gpu_count

        return "gpu" if gpu_count() else "cpu"
    return "cpu"


def jobs(
    quick: bool,
    device: str = "auto",
    dataset: str = "synthetic",
    overrides: dict[str, Any] | None = None,
    precisions: tuple[str, ...] | list[str] = (),
) -> list[dict[str, Any]]:
    """One JSON-able payload per variant (and per precision), all with the same config.

    ``overrides`` maps :class:`CNNConfig` field names to values (unknown names raise).
    ``dataset="digits"`` fixes the image geometry to 8x8x1, 10 classes. ``model="resnet18"``
    trains at :data:`~sciml_bench.cnn.config.RESNET_IMAGE_SIZE` unless an image size is
    given, with fewer steps at ``quick`` (:func:`~sciml_bench.cnn.config.for_model`).
    ``precisions`` runs each variant once per
    precision, fp32 and tf32 before bf16 so that a bf16 row can be compared with its
    reference as it ends.
    """
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, got {device!r}")
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose from {DATASETS}")
    preset = preset_for(quick, device)
    cfg = PRESETS[preset].with_overrides(overrides)
    cfg = for_model(cfg, preset, overrides)  # a ResNet-18 at 32x32, quick or not
    if dataset == "digits":
        cfg = digits_config(cfg)
    unknown = [p for p in precisions if p not in PRECISIONS]
    if unknown:
        raise ValueError(f"unknown precision(s) {unknown}; choose from {', '.join(PRECISIONS)}")
    ordered = [p for p in PRECISIONS if p in precisions] or [cfg.precision]
    configs = [
        cfg.with_overrides({"precision": p, "allow_tf32": p != "fp32" and cfg.allow_tf32})
        for p in ordered
    ]
    return [
        {
            "kind": "cnn",
            "variant": name,
            "preset": preset,
            "config": c.to_json(),
            "device": device,
            "dataset": dataset,
        }
        for name in variants()
        for c in configs
    ]


def run_variant(job: dict[str, Any], progress: Any = None) -> dict[str, Any]:
    """Train one variant as ``job`` says and return its flat record; never raises.

    Call it in a fresh process: it sets environment variables (JAX preallocation, TF
    memory growth, a cold TorchInductor cache) that only take effect before the
    framework is first imported, and it measures import and compilation.
    ``progress(stage, s=None)`` hears of each stage (see ``train_loop.measure``).
    """
    from sciml_bench.cnn import train_loop

    name = job.get("variant", "")
    rec = train_loop.empty_record(name, job)
    info = variants().get(name)
    if info is None:
        rec.update(
            status="error", reason=f"unknown CNN variant {name!r}; known: {sorted(variants())}"
        )
        return rec
    if not info.available:
        # the fix in the reason too, as an ODE backend's unavailable row has it
        rec.update(status="unavailable", reason=f"{info.reason}. Fix: {info.fix}", fix=info.fix)
        return rec
    try:
        module_name, fn = info.builder.split(":")
        module = importlib.import_module(module_name)  # our module; the framework comes later
        return train_loop.measure(name, job, getattr(module, fn), module.load, progress)
    except BaseException as exc:  # measure() reports its own failures; this is a last resort
        if isinstance(exc, KeyboardInterrupt):
            raise
        return train_loop.error_record(rec, exc)
