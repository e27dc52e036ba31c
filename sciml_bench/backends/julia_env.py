"""Finding Julia and the suite's Julia project, without starting Julia.

This module uses the standard library only, so a worker can configure juliacall with it
before anything heavy is imported. It never downloads and never hangs: Julia is looked for
in explicit options and environment variables, then on ``PATH``, and asked only
``julia --version`` under a short timeout. (``juliacall`` itself would, left alone, resolve
a Julia through ``juliapkg``, which may download one; :func:`configure_juliacall` points it
at the Julia found here and at ``julia/`` instead.)

Package images are built by :func:`setup` (``sciml-bench julia setup``), never during a
measurement; :func:`pkgimage_state` says whether they are present, so that a cold start can
be recorded as warm or cold honestly.

GPU ensembles run in a second environment, ``julia/gpu`` (SciMLBenchJL plus CUDA, DiffEqGPU
and StaticArrays, which load its GPU extension), so that CPU users never install CUDA. A
worker pinned to ``cuda`` (:func:`worker_device`) uses it; ``sciml-bench julia setup
--project julia/gpu`` sets it up.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The juliacall release this project is written against; ``julia/Project.toml`` pins
#: PythonCall to the same version, because juliacall requires exactly its own.
JULIACALL_VERSION = "0.9.37"
#: juliacall 0.9.37 requires Julia ^1.10.3.
MIN_JULIA = (1, 10, 3)
#: The Julia package that the backend drives.
PACKAGE = "SciMLBenchJL"
#: Its heavy dependencies, whose package images decide how cold a start is.
HEAVY_PACKAGES = ("SciMLSensitivity", "Zygote", "OrdinaryDiffEqRosenbrock")
#: Loading these beside SciMLBenchJL loads its GPU extension (julia/Project.toml).
GPU_TRIGGERS = ("CUDA", "DiffEqGPU", "StaticArrays")
#: The GPU environment's heavy packages and the extension, whose package images it needs.
GPU_PACKAGES = ("CUDA", "DiffEqGPU", "SciMLBenchJLGPUExt")
#: ``julia --version`` must answer within this many seconds.
PROBE_TIMEOUT_S = 1.5

#: The ``julia/`` folder of a source checkout (the package is not shipped in wheels).
DEFAULT_PROJECT = Path(__file__).resolve().parents[2] / "julia"
#: The GPU environment: SciMLBenchJL by path, with CUDA, DiffEqGPU and StaticArrays.
GPU_PROJECT = DEFAULT_PROJECT / "gpu"

INSTALL_FIX = (
    "Install Julia 1.10 or 1.11 with juliaup (https://github.com/JuliaLang/juliaup): "
    "`curl -fsSL https://install.julialang.org | sh`, then `juliaup add 1.11` and "
    "`juliaup default 1.11`; or point PYTHON_JULIACALL_EXE at a julia executable. "
    "Then run `sciml-bench julia setup`."
)
SETUP_FIX = "Run `sciml-bench julia setup` (instantiates and precompiles julia/; minutes, once)."
GPU_SETUP_FIX = (
    "Run `sciml-bench julia setup --project julia/gpu` on the GPU machine (installs CUDA.jl "
    "and DiffEqGPU beside SciMLBenchJL and precompiles them; minutes, once)."
)


@dataclass(frozen=True)
class JuliaProbe:
    """What the availability probe found: ``ok``, or why not and how to fix it."""

    ok: bool
    reason: str = ""
    fix: str = ""
    exe: str | None = None
    #: where the executable came from: an option, an environment variable, or ``PATH``
    source: str = ""
    version: tuple[int, int, int] | None = None
    project: Path = DEFAULT_PROJECT
    details: dict[str, Any] = field(default_factory=dict)


class JuliaNotFound(RuntimeError):
    """Julia (or the suite's Julia project) cannot be used here."""


def find_julia(exe: str | None = None) -> tuple[str | None, str]:
    """The Julia executable to use and where its name came from.

    Order: the explicit ``exe``; ``PYTHON_JULIACALL_EXE``; ``PYTHON_JULIAPKG_EXE`` (a Julia
    that juliapkg was told to use); ``julia`` on ``PATH``. Returns ``(None, what was looked
    for)`` when none resolves to an executable.
    """
    candidates = [
        ("option", exe),
        ("PYTHON_JULIACALL_EXE", os.environ.get("PYTHON_JULIACALL_EXE")),
        ("PYTHON_JULIAPKG_EXE", os.environ.get("PYTHON_JULIAPKG_EXE")),
    ]
    for source, name in candidates:
        if name:
            path = shutil.which(name)
            if path is None:
                return None, f"{source}={name!r} is not an executable"
            return os.path.abspath(path), source
    path = shutil.which("julia")
    if path is None:
        return None, "julia executable not found on PATH and PYTHON_JULIACALL_EXE unset"
    return os.path.abspath(path), "PATH"


def worker_device() -> str:
    """``cuda`` in a process pinned to the GPU, else ``cpu``: the executor's
    ``SCIML_BENCH_DEVICE`` (``measure.device.device_env``, set before anything starts)."""
    return "cuda" if os.environ.get("SCIML_BENCH_DEVICE", "").strip().lower() == "cuda" else "cpu"


def project_dir(project: str | os.PathLike[str] | None = None) -> Path:
    """The Julia project: the option, ``PYTHON_JULIACALL_PROJECT``,
    ``SCIML_BENCH_JULIA_PROJECT``, or ``julia/`` beside this package (``julia/gpu`` in a
    process pinned to ``cuda``)."""
    for value in (
        project,
        os.environ.get("PYTHON_JULIACALL_PROJECT"),
        os.environ.get("SCIML_BENCH_JULIA_PROJECT"),
    ):
        if value:
            return Path(value).resolve()
    return GPU_PROJECT if worker_device() == "cuda" else DEFAULT_PROJECT


def is_gpu_project(project: Path) -> bool:
    """Whether ``project`` is an environment that loads SciMLBenchJL's GPU extension: it
    lists SciMLBenchJL and every trigger package as dependencies."""
    import tomllib

    try:
        deps = tomllib.loads((project / "Project.toml").read_text()).get("deps", {})
    except (OSError, tomllib.TOMLDecodeError):
        return False
    return PACKAGE in deps and all(name in deps for name in GPU_TRIGGERS)


_VERSION_RE = re.compile(r"julia version (\d+)\.(\d+)\.(\d+)")


def parse_version(text: str) -> tuple[int, int, int] | None:
    """``(1, 11, 2)`` from ``julia --version`` output, or ``None``."""
    m = _VERSION_RE.search(text)
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def julia_version(exe: str, timeout: float = PROBE_TIMEOUT_S) -> tuple[int, int, int]:
    """Ask ``exe --version``; raise :class:`JuliaNotFound` if it fails or is slow."""
    try:
        out = subprocess.run(
            [exe, "--startup-file=no", "--version"],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise JuliaNotFound(f"`{exe} --version` did not answer within {timeout} s") from None
    except OSError as e:
        raise JuliaNotFound(f"`{exe} --version` could not run: {e}") from None
    version = parse_version(out.stdout)
    if out.returncode != 0 or version is None:
        text = (out.stdout + out.stderr).strip()[:200]
        raise JuliaNotFound(f"`{exe} --version` failed (exit {out.returncode}): {text!r}")
    return version


def openssl_conflict(version: tuple[int, int, int]) -> str:
    """Why this Julia cannot share a process with this Python, or ``""``.

    Julia 1.12 bundles OpenSSL 3.5; a Python linked against an older OpenSSL 3 cannot
    load it beside its own, which is why juliapkg caps Julia at 1.11 for such a Python.
    """
    import ssl  # here, not at import: a worker configures juliacall before loading libssl

    if version[:2] >= (1, 12) and ssl.OPENSSL_VERSION_INFO[:2] < (3, 5):
        return (
            f"Julia {'.'.join(map(str, version))} needs OpenSSL 3.5 but this Python links "
            f"{ssl.OPENSSL_VERSION}; juliacall supports this Python with Julia 1.10-1.11 only"
        )
    return ""


def depot() -> Path:
    """The first Julia depot: where packages and their compiled caches live."""
    for entry in os.environ.get("JULIA_DEPOT_PATH", "").split(os.pathsep):
        if entry:
            return Path(entry).expanduser()
    return Path.home() / ".julia"


def pkgimage_state(version: tuple[int, int, int], gpu: bool = False) -> dict[str, Any]:
    """Which package caches exist for this Julia, read from the depot without Julia.

    ``present[name]`` is true when ``compiled/vX.Y/name/`` holds a cache file (``gpu``: the
    GPU environment's packages too). Julia alone can tell whether a cache is still valid;
    :meth:`JuliaBackend.load` asks it in-process (``Base.isprecompiled``) and records that.
    """
    compiled = depot() / "compiled" / f"v{version[0]}.{version[1]}"
    present = {}
    for name in (PACKAGE, *HEAVY_PACKAGES, *(GPU_PACKAGES if gpu else ())):
        folder = compiled / name
        present[name] = folder.is_dir() and any(folder.glob("*.ji"))
    return {"compiled_dir": str(compiled), "present": present, "warm": all(present.values())}


def juliacall_installed() -> tuple[bool, str]:
    """Whether juliacall is importable at the pinned version (found without importing)."""
    import importlib.metadata
    import importlib.util

    if importlib.util.find_spec("juliacall") is None:
        return False, "Python package juliacall is not installed"
    installed = importlib.metadata.version("juliacall")
    if installed != JULIACALL_VERSION:
        return False, (
            f"juliacall {installed} is installed but julia/Project.toml pins PythonCall to "
            f"{JULIACALL_VERSION} (juliacall requires exactly its own PythonCall version)"
        )
    return True, ""


def probe(
    exe: str | None = None,
    project: str | os.PathLike[str] | None = None,
    *,
    need_juliacall: bool = True,
    timeout: float = PROBE_TIMEOUT_S,
) -> JuliaProbe:
    """Cheap availability check (< 2 s): never starts Julia beyond ``--version``."""
    proj = project_dir(project)
    if need_juliacall:
        ok, why = juliacall_installed()
        if not ok:
            return JuliaProbe(
                False,
                why,
                f"pip install -c constraints.txt -e '.[julia]' (juliacall=={JULIACALL_VERSION})",
                project=proj,
            )
    path, source = find_julia(exe)
    if path is None:
        return JuliaProbe(False, source, INSTALL_FIX, project=proj)
    try:
        version = julia_version(path, timeout)
    except JuliaNotFound as e:
        return JuliaProbe(False, str(e), INSTALL_FIX, exe=path, source=source, project=proj)
    base = {"exe": path, "source": source, "version": version, "project": proj}
    bad = _version_problem(version, path)
    if bad is not None:
        return JuliaProbe(False, *bad, **base)
    why, fix, details = _project_state(proj, version)
    return JuliaProbe(not why, why, fix if why else "", details=details, **base)


def _version_problem(version: tuple[int, int, int], path: str) -> tuple[str, str] | None:
    """``(why, fix)`` when this Julia cannot host juliacall, else ``None``."""
    if version < MIN_JULIA:
        dotted = ".".join(map(str, version))
        return f"Julia {dotted} at {path} is older than juliacall's minimum 1.10.3", INSTALL_FIX
    conflict = openssl_conflict(version)
    if conflict:
        return conflict, ("juliaup add 1.11 && juliaup default 1.11, or "
                          "set PYTHON_JULIACALL_EXE to a Julia 1.10/1.11")  # fmt: skip
    return None


def _project_state(proj: Path, version: tuple[int, int, int]) -> tuple[str, str, dict[str, Any]]:
    """``(why, fix, details)`` for the suite's Julia project under this Julia: why it is not
    set up (missing, not instantiated, without package images; ``""`` when it is), how to
    fix that, and the probe's details (the package images found, once looked for)."""
    if not (proj / "Project.toml").is_file():
        why = f"no Julia project at {proj} (expected the suite's julia/ folder)"
        fix = "Set SCIML_BENCH_JULIA_PROJECT to the julia/ folder of a sciml-bench checkout."
        return why, fix, {}
    # Pkg writes Manifest.toml, or Manifest-vX.Y.toml where one already exists.
    gpu = is_gpu_project(proj)
    fix = GPU_SETUP_FIX if gpu else SETUP_FIX
    if not any(proj.glob("Manifest*.toml")):
        return f"the Julia project {proj} is not instantiated (no Manifest.toml)", fix, {}
    images = pkgimage_state(version, gpu)
    missing = [
        name for name in (PACKAGE, *(GPU_PACKAGES if gpu else ())) if not images["present"][name]
    ]
    if not missing:
        return "", fix, {"pkgimages": images}
    why = (
        f"{', '.join(missing)} {'has' if len(missing) == 1 else 'have'} no package image "
        f"for Julia {'.'.join(map(str, version))} in {images['compiled_dir']}; "
        "precompiling is a setup step, not part of a measured cold start"
    )
    return why, fix, {"pkgimages": images}


@functools.cache
def cached_probe() -> JuliaProbe:
    """:func:`probe` with the defaults, once per process."""
    return probe()


def configure_juliacall(found: JuliaProbe | None = None) -> dict[str, str]:
    """Point juliacall at the Julia and project found here; call before ``import juliacall``.

    Sets ``PYTHON_JULIACALL_EXE`` and ``PYTHON_JULIACALL_PROJECT`` together (juliacall
    wants both or neither), so juliapkg never resolves or downloads anything; skips
    startup files so a user's ``startup.jl`` is not timed. Returns what was set.
    """
    found = found or cached_probe()
    if not found.ok:
        raise JuliaNotFound(f"{found.reason}. {found.fix}")
    wanted = {
        "PYTHON_JULIACALL_EXE": found.exe or "",
        "PYTHON_JULIACALL_PROJECT": str(found.project),
    }
    for key, value in wanted.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("PYTHON_JULIACALL_STARTUP_FILE", "no")
    os.environ.setdefault("PYTHON_JULIAPKG_OFFLINE", "yes")  # belt and braces
    threads = os.environ.get("PYTHON_JULIACALL_THREADS") or os.environ.get("JULIA_NUM_THREADS")
    if threads and threads.strip() not in ("", "1"):
        # juliacall: Julia threads (EnsembleThreads) need Julia's signal handling, or its
        # garbage collector can crash the process.
        os.environ.setdefault("PYTHON_JULIACALL_HANDLE_SIGNALS", "yes")
    keys = (*wanted, "PYTHON_JULIACALL_STARTUP_FILE")
    return {k: os.environ[k] for k in keys}


#: Seconds the first ``import juliacall`` took in this process (``None`` until then).
JULIACALL_IMPORT_S: float | None = None


def import_juliacall() -> Any:
    """Import juliacall once, timing it: this starts Julia and loads PythonCall.

    A worker may call this first thing (before NumPy, and never after torch); the backend's
    ``load`` then reports the time measured here as its ``juliacall_init`` sub-phase.
    """
    global JULIACALL_IMPORT_S
    if "juliacall" not in sys.modules:
        configure_juliacall()
        t0 = time.perf_counter()
        import juliacall  # noqa: F401

        JULIACALL_IMPORT_S = time.perf_counter() - t0
    return sys.modules["juliacall"]


def gpu_package_path(project: Path) -> Path:
    """Where the GPU environment's ``[sources]`` puts SciMLBenchJL (``..``, i.e. ``julia/``)."""
    import tomllib

    sources = tomllib.loads((project / "Project.toml").read_text()).get("sources", {})
    path = sources.get(PACKAGE, {}).get("path")
    found = (project / path).resolve() if path else DEFAULT_PROJECT
    if '"' in str(found):
        raise JuliaNotFound(f"the path {found} contains a double quote; move the checkout")
    return found


def setup_command(exe: str, project: Path) -> list[str]:
    """The command that instantiates and precompiles the Julia project.

    For the GPU environment it also develops SciMLBenchJL from ``julia/`` on Julia 1.10
    (1.11 reads the environment's ``[sources]``) and loads the GPU packages, which loads
    and so checks the GPU extension.
    """
    steps = ["using Pkg", "Pkg.instantiate()", "Pkg.precompile()", f"using {PACKAGE}"]
    if is_gpu_project(project):
        package = str(gpu_package_path(project))
        develop = f'VERSION < v"1.11" && Pkg.develop(path = raw"{package}")'
        steps = [steps[0], develop, *steps[1:], f"using {', '.join(GPU_TRIGGERS)}"]
    script = "; ".join([*steps, "Pkg.status()"])
    return [exe, "--startup-file=no", f"--project={project}", "-e", script]


def setup(
    progress: Callable[[str], None] | None = None,
    *,
    exe: str | None = None,
    project: str | os.PathLike[str] | None = None,
) -> int:
    """Instantiate and precompile ``julia/``, streaming Julia's output line by line.

    This downloads the Julia packages (from Julia's package servers) and builds their
    package images: minutes, once per Julia version. Returns Julia's exit code.
    """
    path, source = find_julia(exe)
    if path is None:
        raise JuliaNotFound(f"{source}. {INSTALL_FIX}")
    proj = project_dir(project)
    env = dict(os.environ)
    # PythonCall is in the project (juliacall loads it from there); if a precompile worker
    # loads it, make it use this Python rather than install one through CondaPkg.
    env.setdefault("JULIA_PYTHONCALL_EXE", sys.executable)
    env.setdefault("JULIA_CONDAPKG_BACKEND", "Null")
    say = progress or (lambda line: None)
    with subprocess.Popen(
        setup_command(path, proj),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        bufsize=1,
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            say(line.rstrip("\n"))
        return proc.wait()
