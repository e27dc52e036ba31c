"""Process RAM and GPU readings for workers: an RSS/NVML sampling thread and NVML helpers.

RAM peak is the larger of the sampled RSS and the kernel's own peak of the process
(``VmHWM``; :func:`high_water_mb`), which catches spikes between samples. GPU readings come from NVML (the module
``pynvml`` of the ``nvidia-ml-py`` package), imported lazily: with no NVML library or
no GPU every GPU helper returns ``None`` instead of raising.

NVML sees the whole device, not this process, so VRAM figures are reported relative to
a baseline read before the framework starts.
"""

from __future__ import annotations

import os
import resource
import sys
import threading
import time
from typing import Any

MB = 1024.0 * 1024.0


def rss_mb() -> float:
    """Current resident set size of this process, in MiB."""
    import psutil

    return psutil.Process().memory_info().rss / MB


def ru_maxrss_mb() -> float:
    """Peak RSS of this process so far, as the kernel counts it (KiB on Linux, bytes on macOS).

    On Linux a spawned process starts with its parent's peak at the spawn: ``ru_maxrss``
    is the larger of that and its own (see :func:`high_water_mb`)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / MB if sys.platform == "darwin" else peak / 1024.0


def high_water_mb() -> float:
    """This process's own peak RSS (MiB): ``VmHWM`` of ``/proc/self/status`` on Linux.

    Unlike ``ru_maxrss`` it starts at zero in a fresh process: a worker spawned by a
    parent of 300 MiB has ``ru_maxrss >= 300`` from its first instruction (the kernel
    carries the parent's peak over the exec), so a rise of ``ru_maxrss`` there says
    nothing below the parent's size. Elsewhere ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    return ru_maxrss_mb()


def oom_kills() -> int | None:
    """How many processes the kernel's out-of-memory killer has killed since boot
    (``oom_kill`` of ``/proc/vmstat``, Linux 4.13 on); None where it cannot be read. A
    worker that died of SIGKILL while this count rose was, most likely, one of them."""
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return None


def process_rss_mb(pid: int) -> float | None:
    """Another process's resident set size (MiB), None once it is gone."""
    import psutil

    try:
        return float(psutil.Process(pid).memory_info().rss) / MB
    except (psutil.Error, OSError):
        return None


class Nvml:
    """One GPU as NVML sees it. Use :meth:`open`, which returns ``None`` when there is none."""

    def __init__(self, pynvml: Any, handle: Any, index: int):
        self._nvml = pynvml
        self._handle = handle
        self.index = index

    @classmethod
    def open(cls) -> Nvml | None:
        """The first GPU visible to CUDA in this process, or ``None`` (no NVML, no GPU)."""
        try:
            import pynvml

            pynvml.nvmlInit()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            first = visible.split(",")[0].strip() if visible is not None else "0"
            if first == "" or first == "-1":
                return None
            if first.isdigit():
                index = int(first)
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            else:  # a GPU-/MIG- UUID
                handle = pynvml.nvmlDeviceGetHandleByUUID(first)
                index = pynvml.nvmlDeviceGetIndex(handle)
            return cls(pynvml, handle, index)
        except Exception:
            return None

    def _try(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self._nvml, fn)(self._handle, *args)
        except Exception:
            return None

    def used_mb(self) -> float | None:
        info = self._try("nvmlDeviceGetMemoryInfo")
        return None if info is None else info.used / MB

    def utilization(self) -> int | None:
        rates = self._try("nvmlDeviceGetUtilizationRates")
        return None if rates is None else int(rates.gpu)

    def energy_mj(self) -> int | None:
        """Energy since the driver loaded, in mJ (Volta and newer)."""
        return self._try("nvmlDeviceGetTotalEnergyConsumption")

    def name(self) -> str | None:
        name = self._try("nvmlDeviceGetName")
        return name.decode() if isinstance(name, bytes) else name


def gpu_count() -> int:
    """Number of NVIDIA GPUs NVML sees on this machine (0 without NVML)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:
        return 0


class ResourceSampler:
    """A daemon thread that samples RSS (and, given an :class:`Nvml`, VRAM and utilisation).

    Use as a context manager or with :meth:`start`/:meth:`stop`. Sampling holds the GIL
    for microseconds every ``interval`` seconds; 50 ms costs well under 1% of a core.
    """

    def __init__(self, interval: float = 0.05, nvml: Nvml | None = None):
        self.interval = interval
        self.nvml = nvml
        self.rss_peak_mb = 0.0
        self.vram_peak_mb: float | None = None
        #: (time.perf_counter(), GPU utilisation %) pairs
        self.utilization: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="resource-sampler", daemon=True)

    def sample(self) -> None:
        """Take one sample now (also called by the thread)."""
        self.rss_peak_mb = max(self.rss_peak_mb, rss_mb())
        if self.nvml is not None:
            used = self.nvml.used_mb()
            if used is not None:
                self.vram_peak_mb = max(self.vram_peak_mb or 0.0, used)
            util = self.nvml.utilization()
            if util is not None:
                self.utilization.append((time.perf_counter(), util))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> ResourceSampler:
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def __enter__(self) -> ResourceSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def ram_max_mb(self) -> float:
        """Peak RAM: the sampled peak or the kernel's own peak of this process
        (:func:`high_water_mb`, not the parent's), whichever is larger."""
        return max(self.rss_peak_mb, high_water_mb())

    def mean_utilization(self, t0: float, t1: float) -> float | None:
        """Mean GPU utilisation (%) over samples taken in ``[t0, t1]``."""
        window = [u for t, u in self.utilization if t0 <= t <= t1]
        return sum(window) / len(window) if window else None


class VramBaseline:
    """GPU memory in use, relative to a reading taken before the framework starts.

    NVML sees the whole device (other processes, the CUDA context), so a case's VRAM is
    ``used - baseline``; :meth:`peak_mb` takes the peak a :class:`ResourceSampler` saw.
    Shared by the CNN baselines and the ODE cases.
    """

    def __init__(self, nvml: Nvml):
        self.nvml = nvml
        self.baseline_mb = nvml.used_mb()

    @classmethod
    def open(cls) -> VramBaseline | None:
        """The baseline of the GPU this process would use, or ``None`` (no NVML, no GPU)."""
        nvml = Nvml.open()
        return cls(nvml) if nvml is not None else None

    def sampler(self) -> ResourceSampler:
        """A started sampler of this GPU (and of RSS)."""
        return ResourceSampler(nvml=self.nvml).start()

    def now_mb(self) -> float | None:
        return _minus(self.nvml.used_mb(), self.baseline_mb)

    def peak_mb(self, sampler: ResourceSampler) -> float | None:
        return _minus(sampler.vram_peak_mb, self.baseline_mb)


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def torch_alloc_peak_mb(torch: Any) -> float | None:
    """PyTorch's caching allocator's peak on the current CUDA device since its last
    ``torch.cuda.reset_peak_memory_stats()`` (MiB); ``None`` without CUDA."""
    if not torch.cuda.is_available():
        return None
    return torch.cuda.max_memory_allocated() / MB


def jax_alloc_peak_mb(device: Any) -> float | None:
    """XLA's allocator peak on a JAX device (``memory_stats()["peak_bytes_in_use"]``, MiB);
    ``None`` where the device reports none (the CPU)."""
    try:
        stats = device.memory_stats() or {}
    except Exception:  # some platforms raise instead of returning None
        return None
    peak = stats.get("peak_bytes_in_use")
    return None if peak is None else peak / MB


def return_free_heap() -> None:
    """Give the C heap's free pages back to the kernel (glibc ``malloc_trim(0)``), so that
    RSS counts live memory only; a no-op where there is no glibc (macOS, musl)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class CallPeak:
    """What one call needs in RAM: the peak RSS during it above the RSS just before it.

    ``need = max RSS(t), t in the call  -  RSS(start)``, in MiB. The start is read after
    :func:`return_free_heap`, so memory an earlier phase freed but the allocator kept
    is not counted as already there. The peak comes from two sources:

    - the kernel's high-water mark of the process (:func:`high_water_mb`), which never
      decreases: if it *rose* during the call, the call set a new process peak and that
      peak is exactly the new mark (``source = "high_water"``);
    - otherwise the call stayed below a peak set earlier (a JIT compilation, say), which
      the mark cannot see under; then the peak is the largest RSS sampled every
      ``interval`` seconds by a thread (``source = "sampled"``: a lower bound that can
      miss a spike shorter than the interval).

    Use :meth:`start` just before the call and :meth:`stop` just after it (after the
    call's clock is read: joining the thread is not the call's time). :attr:`own_s` is
    the probe's own time in both (the heap trim can take a fraction of a second in a
    large, fragmented heap), for a caller to leave out of a time that spans the call.
    The call itself pays only the page faults of reusing trimmed pages (their cost:
    docs/measurements.md, "Memory per gradient method") and a sample every ``interval``.
    """

    def __init__(self, interval: float = 0.01):
        self.sampler = ResourceSampler(interval=interval)
        self.rss0_mb = 0.0
        self.high_water0_mb = 0.0
        self.own_s = 0.0

    def start(self) -> CallPeak:
        t0 = time.perf_counter()
        return_free_heap()
        self.high_water0_mb = high_water_mb()
        self.rss0_mb = rss_mb()
        self.sampler.start()
        self.own_s += time.perf_counter() - t0
        return self

    def stop(self) -> tuple[float, str]:
        """``(need in MiB, source)``, source ``"high_water"`` or ``"sampled"``."""
        t0 = time.perf_counter()
        self.sampler.stop()
        high_water = high_water_mb()
        if high_water > self.high_water0_mb:
            peak, source = high_water, "high_water"
        else:
            peak, source = self.sampler.rss_peak_mb, "sampled"
        self.own_s += time.perf_counter() - t0
        return max(0.0, peak - self.rss0_mb), source
