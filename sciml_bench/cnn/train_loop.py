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
   sum and ``throughput_ips`` measured images / ``train_s``; with ``pipeline="host"``,
   ``data_wait_s`` is the part of them spent starting each epoch's loader and getting
   batches from it;
7. memory peaks read (training only), then, untimed: ``accuracy`` and ``final_loss`` on the
   held-out split and ``initial_loss``, the same loss for the shared initial weights (equal
   across variants when they really start from the same model);
8. inference on the trained weights (:func:`_inference`): batch-1 latency and large-batch
   throughput, each call ending with the logits on the host (so synchronised).

Held-out evaluations during training (every ``eval_every`` steps, default at each epoch's
end) give the accuracy curve and the time to ``target_accuracy``. Each one is preceded by
a ``sync`` and stops the training clocks (time and GPU energy), so ``epoch_s``,
``train_s`` and ``energy_j`` exclude them; their total is ``eval_s``.
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
from collections.abc import Callable
from typing import Any

import numpy as np

from sciml_bench.cnn.config import CNNConfig
from sciml_bench.cnn.data import Dataset, make_dataset
from sciml_bench.measure.memory import Nvml, ResourceSampler, VramBaseline, gpu_count, rss_mb

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
    # second wave: architecture, pipeline, precision, curve, time to accuracy, inference
    "model", "param_count", "pipeline", "data_wait_s", "precision", "precision_policy",
    "accuracy_drop_vs_fp32", "precision_flagged", "eval_s",
    "curve_steps", "curve_train_s", "curve_accuracy",
    "target_accuracy", "target_reached", "time_to_accuracy_s", "steps_to_accuracy",
    "latency_p50_ms", "latency_p99_ms", "inference_batch", "inference_ips",
    "inference_warmup_s",
    # the machine it shared: thread budget, cores, load, other processes' CPU use
    "threads", "threads_source", "cores", "load_start", "others_cpu", "oversubscribed",
)  # fmt: skip

#: cores' worth of demand beyond a machine's cores before a row counts as oversubscribed
#: (half a core: a load average is a fraction, a thread count is not)
OVERSUBSCRIBED_SLACK = 0.5

#: a mixed-precision row whose accuracy is more than this below its fp32 row is flagged
PRECISION_TOLERANCE = 0.02


class Unavailable(Exception):
    """The variant cannot run here as asked (e.g. ``--device cuda`` on a CPU-only build)."""

    def __init__(self, reason: str, fix: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.fix = fix


class Trainer(ABC):
    """One framework's model, optimizer state and its batches (on the device, or a loader)."""

    #: "cpu" or "cuda": where the training actually runs
    device: str = "cpu"
    #: why the device differs from the one asked for (e.g. a CPU-only build on a GPU box)
    device_note: str = ""
    #: ``pipeline="host"``: seconds the training thread spent getting batches from the
    #: loader (waiting on it, or preparing the next batch itself); the harness resets it
    #: and adds each epoch's whole ``start_epoch``
    data_wait_s: float = 0.0
    #: the framework's means of computing in bfloat16, in words, for ``precision_policy``
    bf16_how: str = ""
    #: the run's configuration (each trainer sets it)
    _cfg: CNNConfig

    def start_epoch(self, epoch: int) -> None:
        """Begin pass ``epoch`` over the training data (a host loader starts its order)."""
        return None

    @abstractmethod
    def step(self, i: int) -> None:
        """Queue one optimizer step on training batch ``i``. Must not wait for the device."""

    def predictor(self, n: int) -> Callable[[], Any]:
        """A call that runs the trained model forward on ``n`` device-resident held-out
        images (compiled where the variant compiles) and returns the logits on the host."""
        raise NotImplementedError

    def param_count(self) -> int | None:
        """Trainable parameters, counted by the framework itself."""
        return None

    def precision_policy(self) -> str:
        """How the variant computes, in words, for the record (:func:`policy_text`)."""
        return policy_text(self._cfg.precision, self.device, self.bf16_how) if self.bf16_how else ""

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
        """The framework allocator's peak GPU memory, where it runs on a GPU and reports one."""
        return self.gpu_alloc_peak_mb() if self.device == "cuda" else None

    def gpu_alloc_peak_mb(self) -> float | None:
        """:meth:`alloc_peak_mb` of a trainer on a GPU (asked only then)."""
        return None

    def device_name(self) -> str | None:
        """The GPU's name, on a GPU run (None on a CPU: the executor names the CPU)."""
        return self.gpu_name() if self.device == "cuda" else None

    def gpu_name(self) -> str | None:
        """:meth:`device_name` of a trainer on a GPU (asked only then)."""
        return None

    def read_device(self) -> str:
        """Where the framework reports the trained parameters live (``cpu`` or ``cuda``),
        read back from them, not the device this trainer chose."""
        raise NotImplementedError

    def settings(self) -> dict[str, Any]:
        """Framework versions, threads and numerics flags, recorded with the result."""
        return {}


def device_from_name(name: str) -> str:
    """``cpu`` or ``cuda`` from a framework's device string (TensorFlow's
    ``/job:localhost/replica:0/task:0/device:GPU:0``, torch's ``cuda:0``, JAX's ``gpu``)."""
    from sciml_bench.measure.device import normalize

    last = name.rsplit("device:", 1)[-1].split(":")[0]
    return normalize(last)


def check_device(trainer: Trainer, rec: dict[str, Any], after: str) -> None:
    """Record the device read back from the parameters; one other than the trainer's
    choice is an error naming both (as an ODE row's mismatch is)."""
    from sciml_bench.measure.device import mismatch

    rec["device"] = got = trainer.read_device()
    if got != trainer.device:
        raise RuntimeError(mismatch(rec["backend"], after, trainer.device, got,
                                    trainer.device_name()))  # fmt: skip


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
        from sciml_bench.measure.environment import FRESH_CACHES_VAR

        warm = os.path.isdir(cache) and bool(os.listdir(cache))
        who = "the executor's fresh folder" if os.environ.get(FRESH_CACHES_VAR) else "user-set"
        out["inductor_cache"] = f"{'warm' if warm else 'cold'} ({who} {cache})"
    out["TORCHINDUCTOR_CACHE_DIR"] = cache
    out["JAX_COMPILATION_CACHE_DIR"] = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    out["cpu_count"] = os.cpu_count()
    # other load on the machine makes timings noisy; the record should show it
    out["loadavg_1min_start"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    out["python"] = platform.python_version()
    return out


def machine_share() -> dict[str, Any]:
    """The worker's thread budget as the executor set it (``--threads``, else the free
    cores at the run's start; each framework reads it from its environment variables),
    the usable cores, and the 1-minute load average the budget was decided at (read by
    the executor before the run's first CNN worker, so no earlier variant's own load is
    in it; this worker's own reading when run by hand)."""
    from sciml_bench.measure import environment as env

    threads = os.environ.get(env.THREADS_VAR)
    load = os.environ.get(env.LOAD_START_VAR)
    return {
        "threads": int(threads) if threads else None,
        "threads_source": os.environ.get(env.THREADS_SOURCE_VAR) or "each library's default",
        "cores": env.usable_cores(),
        "load_start": float(load) if load else env.load_average(),
    }


class CpuShare:
    """CPU time other processes took while this worker ran, in cores' worth.

    ``others = (Δ busy CPU seconds of the machine − Δ CPU seconds of this process and its
    children) / Δ wall seconds``, from ``psutil`` (Linux ``/proc/stat``, 10 ms ticks:
    read over the whole worker, from import to the end of inference, not over a quick
    run's few milliseconds of epochs). Unlike the load average it has no lag: an earlier
    variant's load, gone before this one started, is not in it.
    """

    def __init__(self) -> None:
        self._start = self._read()

    @staticmethod
    def _read() -> tuple[float, float, float] | None:
        try:
            import psutil

            from sciml_bench.measure.clock import busy_cpu_s

            busy = busy_cpu_s()
            me = psutil.Process()
            own = sum(me.cpu_times()[:2])
            for child in me.children(recursive=True):
                try:
                    own += sum(child.cpu_times()[:2])
                except psutil.Error:
                    continue
        except Exception:  # no psutil, or a platform without these counters
            return None
        return time.perf_counter(), busy, own

    def others(self) -> float | None:
        end = self._read()
        if self._start is None or end is None or end[0] <= self._start[0]:
            return None
        wall = end[0] - self._start[0]
        return max(0.0, ((end[1] - self._start[1]) - (end[2] - self._start[2])) / wall)


def oversubscription(share: dict[str, Any]) -> str:
    """Why a row's machine was oversubscribed, or ``""``: its thread budget (every core
    without one) plus the other processes' demand, at the run's start (the 1-minute load
    average) or during the worker (``others_cpu``), exceeded the cores by more than
    :data:`OVERSUBSCRIBED_SLACK`."""
    cores = share["cores"]
    threads = share.get("threads") or cores  # a library's own default uses every core
    why = []
    if share.get("load_start") is not None and threads + share["load_start"] > cores + OVERSUBSCRIBED_SLACK:
        why.append(f"the 1-minute load average was {share['load_start']:.2f} at the start")
    if share.get("others_cpu") is not None and threads + share["others_cpu"] > cores + OVERSUBSCRIBED_SLACK:
        why.append(f"other processes used {share['others_cpu']:.2f} cores during the run")
    if not why:
        return ""
    fewer = ", or give fewer --threads" if threads > 1 else ""
    return (f"machine oversubscribed: {' and '.join(why)}, with {threads} thread(s) on "
            f"{cores} cores; these timings include waiting for a core (run on a quieter "
            f"machine{fewer})")  # fmt: skip


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
        model=cfg.get("model", "small"),
        pipeline=cfg.get("pipeline", "device"),
        precision=cfg.get("precision", "tf32"),
        target_accuracy=cfg.get("target_accuracy"),
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
    cpu = CpuShare()
    try:
        rec.update(machine_share())
        rec["settings"] = prepare_environment()
        rec["ram_initial_mb"] = rss_mb()
        request = job.get("device", "auto")
        # NVML baseline before the framework touches the GPU
        vram = VramBaseline.open() if request != "cpu" else None
        nvml = vram.nvml if vram else None
        cfg = CNNConfig.from_json(job["config"])

        t = time.perf_counter()
        data: Dataset = make_dataset(cfg, job.get("dataset", "synthetic"))
        rec["data_s"] = time.perf_counter() - t
        sampler = ResourceSampler(nvml=nvml).start()

        trainer = _import_and_set_up(rec, cfg, data, request, load, build, note)
        on_gpu = trainer.device == "cuda" and nvml is not None
        gpu_vram = vram if on_gpu else None
        if gpu_vram is not None:
            rec["vram_baseline_mb"] = gpu_vram.baseline_mb
            rec["vram_initial_mb"] = gpu_vram.now_mb()

        note("first_step")
        rec.update(_train(trainer, cfg, sampler, nvml if on_gpu else None))
        rec["cold_start_s"] = rec["import_s"] + rec["setup_s"] + rec["time_to_first_step_s"]
        _record_training_memory(rec, trainer, sampler, gpu_vram)
        check_device(trainer, rec, "training")
        _record_trained_model(rec, trainer, cfg, data)
        _record_machine_load(rec, trainer, cpu)
        rec["status"] = "ok"
    except BaseException as exc:  # a worker reports, never raises
        if isinstance(exc, KeyboardInterrupt):
            raise
        error_record(rec, exc)
    finally:
        _clean_up(rec, sampler)
    return rec


def _import_and_set_up(
    rec: dict[str, Any],
    cfg: CNNConfig,
    data: Dataset,
    request: str,
    load: Any,
    build: Any,
    note: Callable[..., None],
) -> Trainer:
    """Time the framework's import (``import_s``) and the trainer's construction with its
    batches on the device (``setup_s``); record where it runs and the memory after setup."""
    t = time.perf_counter()
    load(request)
    rec["import_s"] = time.perf_counter() - t
    note("import", rec["import_s"])
    t = time.perf_counter()
    trainer: Trainer = build(cfg, data, request)
    trainer.sync()
    rec["setup_s"] = time.perf_counter() - t
    note("setup", rec["setup_s"])
    check_device(trainer, rec, "setup")
    rec["device_name"] = trainer.device_name()
    if trainer.device_note:
        rec["reason"] = trainer.device_note
    rec["ram_after_setup_mb"] = rss_mb()
    return trainer


def _record_training_memory(
    rec: dict[str, Any], trainer: Trainer, sampler: ResourceSampler, vram: VramBaseline | None
) -> None:
    """The memory peaks of training only (``vram`` given on a GPU run): read before the
    untimed evaluations allocate more."""
    rec["ram_max_mb"] = sampler.ram_max_mb
    if vram is not None:
        rec["vram_max_mb"] = vram.peak_mb(sampler)
    rec["alloc_peak_mb"] = trainer.alloc_peak_mb()


def _record_trained_model(
    rec: dict[str, Any], trainer: Trainer, cfg: CNNConfig, data: Dataset
) -> None:
    """The untimed results of the trained model: held-out loss and accuracy, the initial
    weights' loss, the chance check, parameter count, precision, then inference timings."""
    rec["final_loss"], rec["accuracy"] = trainer.evaluate()
    rec["initial_loss"], _ = trainer.evaluate(initial=True)
    rec.update(_chance(rec, data))
    rec["param_count"] = trainer.param_count()
    rec["precision_policy"] = trainer.precision_policy()
    caveat = precision_note(cfg.precision, trainer.device)
    if caveat:
        rec["reason"] = with_reason(rec["reason"], caveat)
    if cfg.inference_calls:
        rec.update(_inference(trainer, cfg))


def _record_machine_load(rec: dict[str, Any], trainer: Trainer, cpu: CpuShare) -> None:
    """The framework's settings and what else the machine ran meanwhile: the load at the
    end, other processes' CPU use, and whether that oversubscribed the cores."""
    rec["settings"].update(trainer.settings())
    if hasattr(os, "getloadavg"):
        rec["settings"]["loadavg_1min_end"] = os.getloadavg()[0]
    rec["others_cpu"] = cpu.others()
    loaded = oversubscription(rec)
    rec["oversubscribed"] = bool(loaded)
    if loaded:
        rec["reason"] = with_reason(rec["reason"], loaded)


def _clean_up(rec: dict[str, Any], sampler: ResourceSampler | None) -> None:
    """Remove the worker's own cold compile cache and stop the sampler, keeping its RAM
    peak when the run failed before training read it."""
    created = rec["settings"].pop("_remove", None)
    if created:  # our cold cache: leave no compiled artefacts behind in /tmp
        shutil.rmtree(created, ignore_errors=True)
    if sampler is not None:
        sampler.stop()
        if rec["ram_max_mb"] is None:
            rec["ram_max_mb"] = sampler.ram_max_mb


def with_reason(reason: str | None, why: str) -> str:
    """``reason`` with ``why`` appended after a semicolon (``why`` alone when it is empty)."""
    return f"{reason}; {why}" if reason else why


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
        out["reason"] = with_reason(rec["reason"], why)
    return out


class _Clock:
    """One stretch of training: seconds and, on a GPU, energy; evaluations left out."""

    def __init__(self, nvml: Nvml | None):
        self.nvml, self.seconds = nvml, 0.0
        self.energy_mj: float | None = 0.0 if nvml else None
        self._t, self._e = 0.0, None

    def start(self) -> None:
        self._e = self.nvml.energy_mj() if self.nvml else None
        self._t = time.perf_counter()

    def stop(self) -> None:
        """End a segment; the caller has synchronised the device."""
        self.seconds += time.perf_counter() - self._t
        e = self.nvml.energy_mj() if self.nvml else None
        if e is None or self._e is None or self.energy_mj is None:
            self.energy_mj = None
        else:
            self.energy_mj += e - self._e


class _Curve:
    """Held-out accuracy every ``every`` steps against the training time so far."""

    def __init__(self, trainer: Trainer, every: int):
        self.trainer, self.every = trainer, every
        self.steps: list[int] = []
        self.train_s: list[float] = []
        self.accuracy: list[float] = []
        self.eval_s = 0.0

    def point(self, step: int, train_s: float) -> None:
        t = time.perf_counter()
        _, acc = self.trainer.evaluate()
        self.eval_s += time.perf_counter() - t
        self.steps.append(step)
        self.train_s.append(train_s)
        self.accuracy.append(acc)


def _epoch(
    trainer: Trainer,
    epoch: int | None,
    start: int,
    steps: int,
    done: int,
    curve: _Curve,
    before: float,
    nvml: Nvml | None = None,
) -> tuple[_Clock, int]:
    """Steps ``start .. steps-1`` of a pass (begun with ``start_epoch(epoch)`` unless
    ``epoch`` is None); returns its clock and the steps done so far. An evaluation that
    falls due stops the clock around it; ``before`` is the training time already spent."""
    clock = _Clock(nvml)
    clock.start()
    if epoch is not None:
        # starting a host loader's pass (TF checks that its one tf.data iterator stands
        # there, torch makes a DataLoader iterator, JAX gathers batch 0) is waiting for
        # data; whatever the trainer counted inside it is part of this, so it is counted once
        wait, t = trainer.data_wait_s, time.perf_counter()
        trainer.start_epoch(epoch)
        trainer.data_wait_s = wait + time.perf_counter() - t
    for i in range(start, steps):
        trainer.step(i)
        done += 1
        if done % curve.every == 0:
            trainer.sync()
            clock.stop()
            curve.point(done, before + clock.seconds)
            clock.start()
    trainer.sync()
    clock.stop()
    return clock, done


def passes(cfg: CNNConfig) -> range:
    """The passes :func:`_train` begins, in order (``start_epoch`` is called with each):
    pass 0 holds the first step and the first warm-up epoch, further warm-up epochs follow,
    then the measured epochs. A host loader may prepare them all up front."""
    return range(max(1, cfg.warmup_epochs) + cfg.epochs)


def _train(
    trainer: Trainer, cfg: CNNConfig, sampler: ResourceSampler, nvml: Nvml | None
) -> dict[str, Any]:
    """The timed part: first step, warm-up epoch(s), measured epochs, with the curve."""
    steps = cfg.steps_per_epoch
    curve = _Curve(trainer, cfg.eval_every or steps)
    t0 = time.perf_counter()
    trainer.start_epoch(0)
    trainer.step(0)
    trainer.sync()
    first = time.perf_counter() - t0
    trained, done = first, 1  # training seconds so far: the curve's time axis
    if done % curve.every == 0:
        curve.point(done, trained)
    for epoch in range(cfg.warmup_epochs):
        clock, done = _epoch(trainer, epoch or None, 1 if epoch == 0 else 0, steps, done,
                             curve, trained)  # fmt: skip
        trained += clock.seconds
    warmup = trained

    trainer.data_wait_s = 0.0
    t_start = time.perf_counter()
    epoch_s: list[float] = []
    energy: float | None = 0.0
    for epoch in passes(cfg)[-cfg.epochs :]:  # epochs >= 1
        clock, done = _epoch(trainer, epoch, 0, steps, done, curve, trained, nvml)
        trained += clock.seconds
        epoch_s.append(clock.seconds)
        energy = None if energy is None or clock.energy_mj is None else energy + clock.energy_mj
    t_end = time.perf_counter()
    sampler.sample()
    if not curve.steps or curve.steps[-1] != done:
        # the trained weights close the curve, so the target counts where training ended
        curve.point(done, trained)

    train_s = sum(epoch_s)
    out: dict[str, Any] = {
        "time_to_first_step_s": first,
        "warmup_epoch_s": warmup if cfg.warmup_epochs else None,
        "epoch_s": epoch_s,
        "train_s": train_s,
        "throughput_ips": cfg.epochs * cfg.images_per_epoch / train_s,
        "data_wait_s": trainer.data_wait_s if cfg.pipeline == "host" else None,
        "eval_s": curve.eval_s,
        "curve_steps": curve.steps,
        "curve_train_s": curve.train_s,
        "curve_accuracy": curve.accuracy,
    }
    out.update(time_to_accuracy(curve.steps, curve.train_s, curve.accuracy, cfg.target_accuracy))
    if nvml is not None and energy is not None:
        out["energy_j"] = energy / 1000.0
    if nvml is not None:
        out["gpu_utilization"] = sampler.mean_utilization(t_start, t_end)
    return out


def time_to_accuracy(
    steps: list[int], train_s: list[float], accuracy: list[float], target: float | None
) -> dict[str, Any]:
    """The first evaluation at or above ``target``: its training time and step count."""
    if target is None:
        return {"target_reached": None, "time_to_accuracy_s": None, "steps_to_accuracy": None}
    for n, t, a in zip(steps, train_s, accuracy, strict=True):
        if a >= target:
            return {"target_reached": True, "time_to_accuracy_s": t, "steps_to_accuracy": n}
    return {"target_reached": False, "time_to_accuracy_s": None, "steps_to_accuracy": None}


def _inference(trainer: Trainer, cfg: CNNConfig) -> dict[str, Any]:
    """Batch-1 latency (p50, p99 over ``inference_calls`` calls) and throughput at
    ``inference_batch``, each after warm-up calls (compilation lands there)."""
    t = time.perf_counter()
    one = trainer.predictor(1)
    for _ in range(3):
        one()
    big = trainer.predictor(cfg.inference_batch)
    big()
    big()
    warmup = time.perf_counter() - t
    lat = np.empty(cfg.inference_calls)
    for i in range(cfg.inference_calls):
        t = time.perf_counter()
        one()
        lat[i] = time.perf_counter() - t
    reps = max(3, cfg.inference_calls // 10)
    t = time.perf_counter()
    for _ in range(reps):
        big()
    big_s = time.perf_counter() - t
    return {
        "latency_p50_ms": float(np.percentile(lat, 50)) * 1e3,
        "latency_p99_ms": float(np.percentile(lat, 99)) * 1e3,
        "inference_batch": cfg.inference_batch,
        "inference_ips": reps * cfg.inference_batch / big_s,
        "inference_warmup_s": warmup,
    }


def cpu_has_bf16_matrix_units() -> bool | None:
    """Whether this x86 CPU has AMX-BF16 tiles (Linux ``/proc/cpuinfo``); None if unknown."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return "amx_bf16" in line.split()
    except OSError:
        pass
    return None


def precision_note(precision: str, device: str) -> str:
    """What a row's precision means on the hardware it ran on, when that needs saying."""
    if precision == "bf16" and device == "cpu":
        amx = cpu_has_bf16_matrix_units()
        if amx is False:
            return ("bf16 on a CPU with no bf16 matrix units (no AMX-BF16): expect it no "
                    "faster than fp32")  # fmt: skip
        if amx is None:
            return "bf16 on a CPU whose bf16 matrix units are unknown (no /proc/cpuinfo)"
    if precision == "tf32" and device == "cpu":
        return "tf32 on a CPU computes as fp32 (TF32 is a GPU mode)"
    return ""


def policy_text(precision: str, device: str, bf16_how: str) -> str:
    """The ``precision_policy`` of a row: what ran, in words."""
    if precision == "bf16":
        return (
            f"{bf16_how}; float32 parameters and optimizer state; no loss scaling (bf16 needs none)"
        )
    if device != "cuda":
        return "float32 (TF32 is a GPU mode: the CPU computes tf32 and fp32 alike)"
    return "float32, TF32 on for matmul and convolution" if precision == "tf32" else (
        "float32, TF32 off")  # fmt: skip


def compare_precision(rec: dict[str, Any], earlier: list[dict[str, Any]]) -> dict[str, Any]:
    """``rec`` with its accuracy drop against the fp32 row (else the tf32 row) of the same
    variant, model, pipeline, data and device among ``earlier``; flagged (and a reason
    added) when the drop exceeds :data:`PRECISION_TOLERANCE`; a bf16 row with no such row
    says it was not checked."""
    if rec.get("status") != "ok" or rec.get("precision") in (None, "fp32"):
        return rec
    same = ("backend", "model", "pipeline", "dataset", "device", "image_size", "epochs")
    for ref_precision in ("fp32", "tf32"):
        if ref_precision == rec.get("precision"):
            break
        for r in earlier:
            if (r.get("status") == "ok" and r.get("precision") == ref_precision
                    and all(r.get(k) == rec.get(k) for k in same)):  # fmt: skip
                drop = float(r["accuracy"]) - float(rec["accuracy"])
                out = {**rec, "accuracy_drop_vs_fp32": drop,
                       "precision_flagged": drop > PRECISION_TOLERANCE}  # fmt: skip
                if out["precision_flagged"]:
                    why = (
                        f"{rec['precision']} accuracy {rec['accuracy']:.3f} is {drop:.3f} below "
                        f"the {ref_precision} row's (tolerance {PRECISION_TOLERANCE})"
                    )
                    out["reason"] = with_reason(rec.get("reason"), why)
                return out
    if rec.get("precision") == "bf16":  # nothing to hold it to: say so rather than pass it
        why = "accuracy not checked against fp32 (run --precision fp32,bf16 to check it)"
        return {**rec, "reason": with_reason(rec.get("reason"), why)}
    return rec
