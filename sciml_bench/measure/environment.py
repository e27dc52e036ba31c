"""The environment a run was measured in, stored with its results."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

#: every library a backend, a CNN variant or the executor imports (``backends/*.py``,
#: ``cnn/*.py``, ``run/dask.py``): a CVODES- or diffsol-only run must name the versions it
#: measured as surely as a torch one; a package not installed is left out
PACKAGES = (
    "sciml-bench", "numpy", "scipy", "sympy", "h5py", "click", "torch", "torchdiffeq", "torchode",
    "jax", "jaxlib", "diffrax", "equinox", "lineax", "optimistix", "optax", "casadi",
    "pydiffsol", "amici", "swig", "scipy-openblas64", "python-libsbml", "juliacall", "juliapkg",
    "tensorflow", "keras", "scikit-learn", "dask",
    "distributed", "dask-jobqueue", "nvidia-ml-py", "psutil", "threadpoolctl",
)
#: what a row's ``blas`` keeps of each library :func:`threadpoolctl.threadpool_info` lists
BLAS_FIELDS = ("user_api", "internal_api", "version", "num_threads", "threading_layer",
               "architecture", "filepath")  # fmt: skip
THREAD_VARS = (
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "XLA_FLAGS",
    "JULIA_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
)
CACHE_VARS = (
    "JAX_COMPILATION_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "JULIA_DEPOT_PATH",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    # AMICI's compiled-model cache (sciml_bench.backends.amici): set, a build may load a model
    # compiled by an earlier process, and the row's model_source says so
    "SCIML_BENCH_AMICI_CACHE",
)
#: the compilation caches every worker gets fresh (``run.executor`` points them at an
#: empty folder of its own, whatever the shell set)
FRESH_CACHE_VARS = ("JAX_COMPILATION_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
#: test-only: a factor that slows every timed library call (``run.slowdown``)
SLOWDOWN_VAR = "SCIML_BENCH_TEST_SLOWDOWN"
#: what the executor tells a worker: its thread budget and why, the 1-minute load
#: average that budget was decided at (CNN), and that its caches are fresh folders
THREADS_VAR, THREADS_SOURCE_VAR = "SCIML_BENCH_THREADS", "SCIML_BENCH_THREADS_SOURCE"
LOAD_START_VAR, FRESH_CACHES_VAR = "SCIML_BENCH_LOAD_START", "SCIML_BENCH_FRESH_CACHES"


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            continue
    return out


def blas_libraries() -> dict[str, Any]:
    """The BLAS/LAPACK and OpenMP libraries loaded in this process, with their versions and
    thread counts (``threadpoolctl.threadpool_info``). Read in the worker that ran a case:
    each library loads its own (NumPy's OpenBLAS, torch's MKL or OpenBLAS, SciPy's), so
    the parent's list says nothing of what a case used. It reads loaded shared objects
    only (milliseconds); ``error`` says why there is no list."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError as e:  # not installed here: the row says so rather than omit it
        return {"error": f"threadpoolctl not importable: {e}"}
    try:
        libs = [{k: lib.get(k) for k in BLAS_FIELDS if lib.get(k) is not None}
                for lib in threadpool_info()]  # fmt: skip
    except Exception as e:  # a library it cannot query must not cost the case its row
        return {"error": f"threadpoolctl.threadpool_info failed: {type(e).__name__}: {e}"}
    return {"threadpoolctl": metadata.version("threadpoolctl"), "libraries": libs}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str | None:
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out + ("-dirty" if dirty else "")


def gpus() -> list[dict[str, Any]]:
    """GPUs seen by NVML; empty when there is no NVML or no GPU."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:
        return []
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            out.append({
                "index": i,
                "name": name.decode() if isinstance(name, bytes) else str(name),
                "memory_total_mb": mem.total / 2**20,
                "driver": str(pynvml.nvmlSystemGetDriverVersion()),
            })
        return out
    finally:
        pynvml.nvmlShutdown()


def fingerprint() -> dict[str, Any]:
    """Where a case ran: host name and the hardware that decides its timings (CPU model,
    core count, GPU model and driver). Two records compare fairly only when their
    :func:`hardware_label` agree."""
    import socket

    return {"host": socket.gethostname(), **_hardware(cpu_model(), os.cpu_count(), gpus())}


def _hardware(cpu: str, cores: int | None, g: list[dict[str, Any]]) -> dict[str, Any]:
    """The fields of a :func:`fingerprint` that :func:`hardware_label` reads."""
    return {
        "cpu_model": cpu, "cpu_count": cores,
        "gpu_model": ", ".join(sorted({str(x.get("name", "?")) for x in g})),
        "gpu_driver": str(g[0].get("driver", "")) if g else "",
    }  # fmt: skip


def hardware_label(fp: dict[str, Any]) -> str:
    """The hardware of a :func:`fingerprint` as one string (the host name left out:
    identical machines are the same hardware)."""
    label = f"{fp.get('cpu_model', '?')} x{fp.get('cpu_count', '?')}"
    if fp.get("gpu_model"):
        label += f"; {fp['gpu_model']} (driver {fp.get('gpu_driver') or '?'})"
    return label


def environment_hardware(env: dict[str, Any]) -> str | None:
    """The :func:`hardware_label` of a :func:`capture` block (the machine a local run ran
    on), None when it names no CPU."""
    if not env.get("cpu_model"):
        return None
    return hardware_label(_hardware(env["cpu_model"], env.get("cpu_count"), env.get("gpus") or []))


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity), else the machine's count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def load_average() -> float | None:
    """The 1-minute load average: runnable (and uninterruptible) threads, averaged
    exponentially over about a minute; None where the OS has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def free_cores() -> tuple[int, str]:
    """Cores left free by the machine's other load, and how that was decided.

    ``n = max(1, round(cores - load))`` with ``cores`` the usable CPUs and ``load`` the
    1-minute load average: a thread budget of ``n`` cannot oversubscribe a machine whose
    load stays what it was when it was read.
    """
    cores, load = usable_cores(), load_average()
    if load is None:
        return cores, f"free cores at start: {cores} usable (no load average here)"
    n = max(1, min(cores, int(cores - load + 0.5)))
    return n, f"free cores at start: {cores} usable, 1-min load average {load:.2f}"


def _caches_note() -> str:
    """How worker caches were set up, naming any cache folder of the shell's that the
    workers did not use."""
    note = "workers get fresh, empty JAX, TorchInductor and Triton cache folders (cold)"
    overridden = [k for k in FRESH_CACHE_VARS if os.environ.get(k)]
    if overridden:
        verb = "was" if len(overridden) == 1 else "were"
        note += f"; the shell's {', '.join(overridden)} {verb} not used (cold is forced)"
    return note


def capture(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "threads": {k: os.environ.get(k) for k in THREAD_VARS if k in os.environ},
        "packages": package_versions(),
        "gpus": gpus(),
        "git_commit": git_commit(),
        "cache_env": {k: os.environ.get(k) for k in CACHE_VARS if k in os.environ},
        "caches": _caches_note(),
        "loadavg_1min": load_average(),
    }
    if os.environ.get(SLOWDOWN_VAR):  # never in a real run: say so wherever it is read
        env["test_slowdown"] = os.environ[SLOWDOWN_VAR]
    if extra:
        env.update(extra)
    return env
