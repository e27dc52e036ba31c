"""The measuring harness every CNN variant shares; frameworks only supply a :class:`Trainer`.

Timeline of one worker (all clocks are ``time.perf_counter``; device work is awaited with
``Trainer.sync`` before every clock read that ends a phase, and never inside a phase):

1. environment set before any framework starts (JAX preallocation off, TF memory growth
   on, a fresh TorchInductor cache), NVML baseline read, NumPy data made;
2. ``import_s``: import the framework;
3. ``setup_s``: pick the device, build the model from the shared NumPy initial weights,
   put every train and eval batch on the device;
4. ``time_to_first_step_s``: the first optimizer step, including tracing/compilation;
5. ``warmup_epoch_s``: the whole warm-up epoch(s), first step included;
6. ``epoch_s``: each measured epoch, synchronised once at its end; ``train_s`` is their
   sum and ``throughput_ips`` measured images / ``train_s``;
7. memory peaks read (training only), then, untimed: ``accuracy`` and ``final_loss`` on the
   held-out split and ``initial_loss``, the same loss for the shared initial weights (equal
   across variants when they really start from the same model).
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
from abc import ABC, abstractmethod
from typing import Any

from sciml_bench.cnn.config import CNNConfig
from sciml_bench.cnn.data import Dataset, make_dataset
from sciml_bench.measure.memory import Nvml, ResourceSampler, gpu_count, rss_mb

#: Every record carries these keys (``None`` where not measured), whatever its status.
RECORD_FIELDS = (
    "problem", "backend", "solver", "gradient_method", "status", "reason", "fix",
    "device", "device_requested", "device_name", "dataset",
    "image_size", "channels", "batch_size", "steps_per_epoch", "epochs", "warmup_epochs",
    "data_s", "import_s", "setup_s", "time_to_first_step_s", "cold_start_s",
    "warmup_epoch_s", "epoch_s", "train_s", "throughput_ips",
    "initial_loss", "final_loss", "accuracy", "chance_accuracy", "trained_to_chance",
    "ram_initial_mb", "ram_after_setup_mb", "ram_max_mb",
    "vram_baseline_mb", "vram_initial_mb", "vram_max_mb", "alloc_peak_mb",
    "energy_j", "gpu_utilization", "settings", "config",
)  # fmt: skip


class Unavailable(Exception):
    """The variant cannot run here as asked (e.g. ``--device cuda`` on a CPU-only build)."""

    def __init__(self, reason: str, fix: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.fix = fix


class Trainer(ABC):
    """One framework's model, optimizer state and device-resident batches."""

    #: "cpu" or "cuda": where the training actually runs
    device: str = "cpu"
    #: why the device differs from the one asked for (e.g. a CPU-only build on a GPU box)
    device_note: str = ""

    @abstractmethod
    def step(self, i: int) -> None:
        """Queue one optimizer step on training batch ``i``. Must not wait for the device."""

    @abstractmethod
    def sync(self) -> None:
        """Block until all queued device work has finished."""

    @abstractmethod
    def evaluate(self, initial: bool = False) -> tuple[float, float]:
        """Mean cross-entropy and accuracy on the held-out split (untimed).

        ``initial=True`` evaluates a fresh model with the shared initial weights instead of
        the trained one; it runs after training so that it warms nothing before the timed
        first step. Equal initial losses across variants show they start identically.
        """

    def alloc_peak_mb(self) -> float | None:
        """The framework allocator's peak device memory, where it reports one."""
        return None

    def device_name(self) -> str | None:
        return None

    def settings(self) -> dict[str, Any]:
        """Framework versions, threads and numerics flags, recorded with the result."""
        return {}


def resolve_device(request: str, sees_gpu: bool, framework: str, gpu_fix: str) -> tuple[str, str]:
    """The device to run on and a note when it is not the GPU a GPU machine offers.

    ``cuda`` asked for but unseen by the framework is :class:`Unavailable` (no silent
    fallback); ``auto`` falls back to CPU only with a note saying why.
    """
    if request == "cpu":
        return "cpu", ""
    if sees_gpu:
        return "cuda", ""
    gpus = gpu_count()
    why = (
        f"{framework} sees no GPU although NVML reports {gpus} (CPU-only build or CUDA libraries "
        f"missing); fix: {gpu_fix}"
        if gpus
        else f"no GPU on this machine (NVML reports none) so {framework} cannot use one"
    )
    if request == "cuda":
        raise Unavailable(f"--device cuda asked for, but {why}", gpu_fix if gpus else "")
    return "cpu", f"ran on CPU: {why}" if gpus else ""


def prepare_environment() -> dict[str, Any]:
    """Settings that must precede any framework import; returns what was set, for the record.

    A value already set by the user is kept and recorded as such.
    """
    # a framework imported before this point ignores the variables below
    out: dict[str, Any] = {
        "preimported": ",".join(m for m in ("torch", "jax", "tensorflow") if m in sys.modules),
    }
    for key, value in (
        ("XLA_PYTHON_CLIENT_PREALLOCATE", "false"),  # else JAX grabs 75% of VRAM up front
        ("TF_FORCE_GPU_ALLOW_GROWTH", "true"),  # else TF grabs (nearly) all VRAM
        ("TF_CPP_MIN_LOG_LEVEL", "2"),  # TF's start-up info lines are noise in a worker's log
    ):
        os.environ.setdefault(key, value)
        out[key] = os.environ[key]
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if cache is None:
        cache = tempfile.mkdtemp(prefix="sciml-bench-inductor-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        # Triton's cache is separate; keep it cold too (GPU only, harmless elsewhere)
        os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(cache, "triton"))
        out["inductor_cache"] = "cold (fresh temporary directory, removed afterwards)"
        out["_remove"] = cache
    else:
        warm = os.path.isdir(cache) and bool(os.listdir(cache))
        out["inductor_cache"] = f"{'warm' if warm else 'cold'} (user-set {cache})"
    out["TORCHINDUCTOR_CACHE_DIR"] = cache
    out["JAX_COMPILATION_CACHE_DIR"] = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    out["cpu_count"] = os.cpu_count()
    # other load on the machine makes timings noisy; the record should show it
    out["loadavg_1min_start"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    out["python"] = platform.python_version()
    return out


def empty_record(variant: str, job: dict[str, Any]) -> dict[str, Any]:
    rec: dict[str, Any] = dict.fromkeys(RECORD_FIELDS)
    cfg = job.get("config", {})
    rec.update(
        problem="cnn",
        backend=variant,
        solver="",
        gradient_method="",
        reason="",
        fix="",
        device_requested=job.get("device", "auto"),
        dataset=job.get("dataset", "synthetic"),
        settings={},
        config=cfg,
    )
    for key in (
        "image_size",
        "channels",
        "batch_size",
        "steps_per_epoch",
        "epochs",
        "warmup_epochs",
    ):
        rec[key] = cfg.get(key)
    return rec


def error_record(rec: dict[str, Any], exc: BaseException) -> dict[str, Any]:
    """``rec`` marked as failed with the exception; never raises."""
    if isinstance(exc, Unavailable):
        rec.update(status="unavailable", reason=exc.reason, fix=exc.fix)
    else:
        rec.update(status="error", reason=f"{type(exc).__name__}: {exc}")
        rec["settings"] = {**rec.get("settings", {}), "traceback": traceback.format_exc()[-4000:]}
    return rec


def chance_margin(chance: float, n: int) -> float:
    """How far above chance accuracy must be to count as trained: 3 binomial std, >= 5 points."""
    return max(0.05, 3.0 * (chance * (1.0 - chance) / max(n, 1)) ** 0.5)


def measure(
    variant: str, job: dict[str, Any], build: Any, load: Any, progress: Any = None
) -> dict[str, Any]:
    """Run one variant's full timeline and return its flat record.

    ``load(device_request)`` imports the framework (timed); ``build(cfg, data, device_request)`` returns a
    :class:`Trainer` with everything on the device (timed as setup). ``progress(stage, s)``,
    when given, hears of each stage as it ends, and of the first step as it starts
    (compilation can make it the longest wait).
    """
    note = progress or (lambda stage, s=None: None)
    rec = empty_record(variant, job)
    sampler: ResourceSampler | None = None
    try:
        rec["settings"] = prepare_environment()
        rec["ram_initial_mb"] = rss_mb()
        request = job.get("device", "auto")
        # NVML baseline before the framework touches the GPU
        nvml = Nvml.open() if request != "cpu" else None
        vram_base = nvml.used_mb() if nvml else None
        cfg = CNNConfig.from_json(job["config"])

        t = time.perf_counter()
        data: Dataset = make_dataset(cfg, job.get("dataset", "synthetic"))
        rec["data_s"] = time.perf_counter() - t
        sampler = ResourceSampler(nvml=nvml).start()

        t = time.perf_counter()
        load(request)
        rec["import_s"] = time.perf_counter() - t
        note("import", rec["import_s"])
        t = time.perf_counter()
        trainer: Trainer = build(cfg, data, request)
        trainer.sync()
        rec["setup_s"] = time.perf_counter() - t
        note("setup", rec["setup_s"])
        rec["device"] = trainer.device
        rec["device_name"] = trainer.device_name()
        if trainer.device_note:
            rec["reason"] = trainer.device_note
        rec["ram_after_setup_mb"] = rss_mb()
        on_gpu = trainer.device == "cuda" and nvml is not None
        if on_gpu:
            rec["vram_baseline_mb"] = vram_base
            rec["vram_initial_mb"] = _minus(nvml.used_mb(), vram_base)

        note("first_step")
        timing = _train(trainer, cfg, sampler, nvml if on_gpu else None)
        rec.update(timing)
        rec["cold_start_s"] = rec["import_s"] + rec["setup_s"] + rec["time_to_first_step_s"]
        # memory of training only: read before the evaluations below allocate more
        rec["ram_max_mb"] = sampler.ram_max_mb
        if on_gpu and sampler.vram_peak_mb is not None:
            rec["vram_max_mb"] = sampler.vram_peak_mb - vram_base
        rec["alloc_peak_mb"] = trainer.alloc_peak_mb()

        rec["final_loss"], rec["accuracy"] = trainer.evaluate()
        rec["initial_loss"], _ = trainer.evaluate(initial=True)
        rec.update(_chance(rec, data))
        rec["settings"].update(trainer.settings())
        if hasattr(os, "getloadavg"):
            rec["settings"]["loadavg_1min_end"] = os.getloadavg()[0]
        rec["status"] = "ok"
    except BaseException as exc:  # a worker reports, never raises
        if isinstance(exc, KeyboardInterrupt):
            raise
        error_record(rec, exc)
    finally:
        created = rec["settings"].pop("_remove", None)
        if created:  # our cold cache: leave no compiled artefacts behind in /tmp
            shutil.rmtree(created, ignore_errors=True)
        if sampler is not None:
            sampler.stop()
            if rec["ram_max_mb"] is None:
                rec["ram_max_mb"] = sampler.ram_max_mb
    return rec


def _chance(rec: dict[str, Any], data: Dataset) -> dict[str, Any]:
    """``chance_accuracy``, ``trained_to_chance`` and, when it did not learn, a reason."""
    chance = data.chance_accuracy
    margin = chance_margin(chance, len(data.y_eval))
    out: dict[str, Any] = {"chance_accuracy": chance}
    out["trained_to_chance"] = bool(rec["accuracy"] < chance + margin)
    if out["trained_to_chance"]:
        why = (
            f"trained to chance: held-out accuracy {rec['accuracy']:.3f} is within {margin:.3f} "
            f"of chance {chance:.3f}; the timings are of a run that did not learn"
        )
        out["reason"] = f"{rec['reason']}; {why}" if rec["reason"] else why
    return out


def _train(
    trainer: Trainer, cfg: CNNConfig, sampler: ResourceSampler, nvml: Nvml | None
) -> dict[str, Any]:
    """The timed part: first step, warm-up epoch(s), measured epochs."""
    steps = cfg.steps_per_epoch
    t0 = time.perf_counter()
    trainer.step(0)
    trainer.sync()
    first = time.perf_counter() - t0
    for epoch in range(cfg.warmup_epochs):
        for i in range(1 if epoch == 0 else 0, steps):
            trainer.step(i)
        trainer.sync()
    warmup = time.perf_counter() - t0

    energy0 = nvml.energy_mj() if nvml else None
    t_start = time.perf_counter()
    epoch_s: list[float] = []
    for _ in range(cfg.epochs):
        t = time.perf_counter()
        for i in range(steps):
            trainer.step(i)
        trainer.sync()
        epoch_s.append(time.perf_counter() - t)
    t_end = time.perf_counter()
    energy1 = nvml.energy_mj() if nvml else None
    sampler.sample()

    train_s = sum(epoch_s)
    out: dict[str, Any] = {
        "time_to_first_step_s": first,
        "warmup_epoch_s": warmup if cfg.warmup_epochs else None,
        "epoch_s": epoch_s,
        "train_s": train_s,
        "throughput_ips": cfg.epochs * cfg.images_per_epoch / train_s,
    }
    if energy0 is not None and energy1 is not None:
        out["energy_j"] = (energy1 - energy0) / 1000.0
    if nvml is not None:
        out["gpu_utilization"] = sampler.mean_utilization(t_start, t_end)
    return out


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b
