"""The Julia backend, checked without Julia.

The Julia code is parsed (tree-sitter-julia) and linted (fatou); the project's UUIDs are
checked against the General registry's; the Python side (finding Julia, configuring
juliacall, mapping return codes, the setup command, the CLI) runs against fake ``julia``
executables. tests/test_julia_runtime.py runs the real thing where Julia exists.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import ssl
import stat
import subprocess
import sys
import textwrap
import time
import tomllib
import uuid
from pathlib import Path

import numpy as np
import pytest

from sciml_bench.backends import julia as jb
from sciml_bench.backends import julia_env
from sciml_bench.measure.status import Status

ROOT = Path(__file__).resolve().parent.parent
JULIA_DIR = ROOT / "julia"
MODULE = JULIA_DIR / "src" / "SciMLBenchJL.jl"
GPU_EXT = JULIA_DIR / "ext" / "SciMLBenchJLGPUExt.jl"
GPU_ENV = JULIA_DIR / "gpu"

#: UUIDs as the General registry has them (JuliaRegistries/General, <L>/<Name>/Package.toml;
#: SciMLBase's from its own Project.toml and its dependents'). A typo here or in
#: Project.toml makes `Pkg.instantiate` fail on a machine we cannot test on.
REGISTRY_UUIDS = {
    "CUDA": "052768ef-5323-5732-b1bb-66c8b64840ba",
    "ChainRulesCore": "d360d2e6-b24c-11e9-a2a3-2a2ae2dbcce4",
    "DiffEqGPU": "071ae1c0-96b5-11e9-1965-c90190d839ea",
    "DiffResults": "163ba53b-c6d8-5494-b064-1a9d43ac40c5",
    "Enzyme": "7da242da-08ed-463a-9acd-ee780be4f1d9",
    "ForwardDiff": "f6369f11-7733-5829-9624-2563aa707210",
    "OrdinaryDiffEq": "1dea7af3-3e70-54e6-95c3-0bf5283fa5ed",
    "OrdinaryDiffEqBDF": "6ad6398a-0878-4a85-9266-38940aa047c8",
    "OrdinaryDiffEqRosenbrock": "43230ef6-c299-4910-a778-202eb28ce4ce",
    "OrdinaryDiffEqSDIRK": "2d112036-d095-4a1e-ab9a-08536f3ecdbf",
    "OrdinaryDiffEqTsit5": "b1df2697-797e-41e3-8120-5422d3b24e4a",
    "OrdinaryDiffEqVerner": "79d7bb75-1356-48c1-b8c0-6832512096c2",
    "Optimisers": "3bd65402-5787-11e9-1adc-39752487f4e2",
    "PythonCall": "6099a3de-0909-46bc-b1f4-468b9a2dfc0d",
    "ReverseDiff": "37e2e3b7-166d-5795-8a7a-e32c996b4267",
    "SciMLBase": "0bca4576-84f4-4d90-8ffe-ffa030f20462",
    "SciMLSensitivity": "1ed8b502-d754-442c-8d5d-10ac956f44a1",
    # a standard library: its UUID is fixed in Julia's stdlib/SparseArrays/Project.toml
    "SparseArrays": "2f01184e-e22b-5df5-ae63-d93ebab69eaf",
    "StaticArrays": "90137ffa-7385-5640-81b9-e52037218182",
    "Zygote": "e88e6eb3-aa80-5325-afca-941959d7151f",
}


def julia_files() -> list[Path]:
    files = sorted(JULIA_DIR.rglob("*.jl"))
    assert MODULE in files and GPU_EXT in files
    return files


def package_sources() -> list[Path]:
    """The package's own source files (``src/``), which load only its ``[deps]``."""
    return sorted((JULIA_DIR / "src").glob("*.jl"))


# --- parsing and linting ---------------------------------------------------------------


def syntax_errors(source: bytes) -> list[str]:
    """ERROR and MISSING nodes of tree-sitter-julia's parse, as ``line:col text``."""
    tsj = pytest.importorskip("tree_sitter_julia")
    from tree_sitter import Language, Parser

    tree = Parser(Language(tsj.language())).parse(source)
    found: list[str] = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            row, col = node.start_point
            found.append(f"{row + 1}:{col + 1} {node.type} {node.text[:40]!r}")
        stack.extend(node.children)
    return found


def fatou() -> str:
    exe = shutil.which("fatou") or str(Path(sys.executable).with_name("fatou"))
    if not Path(exe).exists():
        pytest.skip("fatou (the Julia linter, `pip install fatou`) is not installed")
    return exe


def lint(*paths: Path) -> list[dict]:
    out = subprocess.run(
        [fatou(), "lint", "--no-config", "--output", "json", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return json.loads(out.stdout) if out.stdout.strip() else []


def test_tree_sitter_sees_an_error():
    # Guards the guard: a parser that accepted anything would pass every test below.
    assert syntax_errors(b"function f(x)\n    y = x +\nend\n")


@pytest.mark.parametrize("path", julia_files(), ids=lambda p: p.name)
def test_julia_source_parses(path: Path):
    assert syntax_errors(path.read_bytes()) == []


def test_fatou_lint_is_clean():
    diagnostics = lint(*julia_files())
    errors = [d for d in diagnostics if d.get("severity") == "error"]
    assert errors == [], json.dumps(errors, indent=1)
    # Warnings (unused imports, unused bindings) are bugs in code this small.
    assert diagnostics == [], json.dumps(diagnostics, indent=1)


def test_fatou_reports_errors(tmp_path: Path):
    bad = tmp_path / "bad.jl"
    bad.write_text("function f(x)\n    y = x +\nend\n")
    assert any(d["severity"] == "error" for d in lint(bad))


def test_fatou_format_is_stable():
    out = subprocess.run(
        [fatou(), "format", "--no-config", "--check", *map(str, julia_files())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout[-3000:]


# --- the generated right-hand side -----------------------------------------------------


def generated_rhs() -> str:
    from sciml_bench.problem import codegen, spec

    return codegen.julia_source(spec.load("stiff-robertson"))


def test_generated_rhs_parses_and_lints(tmp_path: Path):
    src = generated_rhs()
    assert syntax_errors(src.encode()) == []
    # One in-place function with the signature SciMLBenchJL.define_rhs looks up.
    assert re.findall(r"^function (\w+!?)\((.*)\)$", src, re.M) == [("rhs!", "du, u, p, t")]
    path = tmp_path / "rhs.jl"
    path.write_text(src)
    assert [d for d in lint(path) if d["severity"] == "error"] == []


def test_a_moving_starts_y0_parses_lints_and_reads_the_logs(tmp_path: Path):
    """A start that depends on the parameters (problem/initial.py): the source defines
    ``y0(p)`` beside ``rhs!`` (SciMLBenchJL.build_case's ``moving_start`` looks it up and
    passes ``u0 = y0(p)`` to ``solve``), reading the same logs as ``rhs!``."""
    from sciml_bench.problem import codegen, spec

    text = (ROOT / "tests" / "test_initial_values.py").read_text()
    toml = text.split('TEXT = """', 1)[1].split('"""', 1)[0]
    src = codegen.julia_source(spec.loads(toml))
    assert syntax_errors(src.encode()) == []
    assert re.findall(r"^function (\w+!?)\((.*)\)$", src, re.M) == [
        ("rhs!", "du, u, p, t"), ("y0", "p")]
    assert "p_ka = exp(p[1])" in src.split("function y0", 1)[1]
    path = tmp_path / "rhs.jl"
    path.write_text(src)
    assert [d for d in lint(path) if d["severity"] == "error"] == []
    jl = (ROOT / "julia" / "src" / "SciMLBenchJL.jl").read_text()
    assert "define_rhs(src, :y0)" in jl and "u0 = c.u0fn(p)" in jl


ARRAY_OPERATORS = """
name = "grid"
stiff = false
[sizes]
N = 5
M = 4
[state]
names = ["u", "v"]
shape = ["N", "M"]
initial = [1.0, "i/N"]
[parameters]
c = 0.7
D = { value = "1 + j", per_element = true }
[equations]
u = "D*lap(u, dirichlet) + c*shift(v, 1, -1, neumann) - mean(u, 1)*v + step(t - 1)"
v = "lap(v, neumann) + shift(u, -2, 1, periodic) - exp(-sum(u, 0))*v + sin(i*j)*sum(u)"
[time]
span = [0.0, 1.0]
save = [1.0]
[loss]
kind = "final"
weights = [1.0, 2.0]
"""


@pytest.mark.parametrize("name", ["stiff-robertson-groups", "stiff-brusselator-2d", "operators"])
def test_generated_array_rhs_parses_and_lints(name: str, tmp_path: Path):
    """An array problem's Julia is broadcasting code on views: every operator, a
    per-element parameter, indices and step parse and lint clean, and the module defines
    the in-place rhs! that define_rhs looks up (plus its _shift helper)."""
    from sciml_bench.problem import codegen, spec

    p = spec.loads(ARRAY_OPERATORS, "grid.toml") if name == "operators" else spec.load(name)
    src = codegen.generate(p, "julia")
    assert syntax_errors(src.encode()) == []
    assert re.findall(r"^function (\w+!?)\((.*)\)$", src, re.M) == [
        ("_shift", "x::AbstractArray, k::Int, d::Int, bc::Symbol"), ("rhs!", "du, u, p, t"),
    ]  # fmt: skip
    assert re.search(r"^    @views @\. dU\[2, :(, :)?\] = ", src, re.M)
    assert "for " not in src.split("function rhs!", 1)[1]  # array code, never a loop
    path = tmp_path / "rhs.jl"
    path.write_text(src)
    assert [d for d in lint(path) if d["severity"] == "error"] == []


# --- the project file ------------------------------------------------------------------


def project() -> dict:
    return tomllib.loads((JULIA_DIR / "Project.toml").read_text())


def gpu_env() -> dict:
    return tomllib.loads((GPU_ENV / "Project.toml").read_text())


def test_project_uuids_are_the_registrys():
    proj = project()
    for name, value in {**proj["deps"], **proj["weakdeps"]}.items():
        assert REGISTRY_UUIDS.get(name) == value, f"{name}: {value} is not the registry's UUID"
    assert uuid.UUID(proj["uuid"]).version == 4
    assert proj["name"] == MODULE.stem
    assert not set(proj["deps"]) & set(proj["weakdeps"]), "a package is a dep or a weak dep"


def test_project_compat():
    proj = project()
    compat = proj["compat"]
    deps = {**proj["deps"], **proj["weakdeps"]}
    assert set(deps) <= set(compat), "every dependency needs a [compat] entry"
    assert set(compat) <= set(deps) | {"julia"}, "a [compat] entry for no dependency"
    # juliacall loads PythonCall from this project and requires exactly its own version.
    assert compat["PythonCall"] == "=" + julia_env.JULIACALL_VERSION
    assert compat["julia"] == ".".join(map(str, julia_env.MIN_JULIA))


def test_gpu_extension_is_declared():
    proj = project()
    (name, triggers), *others = proj["extensions"].items()
    assert others == [] and name == GPU_EXT.stem
    assert sorted(triggers) == sorted(julia_env.GPU_TRIGGERS) == sorted(proj["weakdeps"])
    assert name in julia_env.GPU_PACKAGES  # its package image is checked on cuda
    assert re.search(rf"^module {name}$", GPU_EXT.read_text(), re.M)


def test_gpu_environment():
    # An environment (no name or uuid) that holds the package by path and its triggers.
    env, proj = gpu_env(), project()
    assert "name" not in env and "uuid" not in env
    deps = env["deps"]
    assert deps.pop(julia_env.PACKAGE) == proj["uuid"]
    for name, value in deps.items():
        assert REGISTRY_UUIDS.get(name) == value, f"{name}: {value} is not the registry's UUID"
    assert set(julia_env.GPU_TRIGGERS) | {"PythonCall"} == set(deps)
    assert (GPU_ENV / env["sources"][julia_env.PACKAGE]["path"]).resolve() == JULIA_DIR
    compat = env["compat"]
    assert set(deps) | {"julia"} == set(compat)
    for name in compat:  # the same bounds as the package's, so one resolve satisfies both
        assert compat[name] == proj["compat"][name], name
    assert julia_env.is_gpu_project(GPU_ENV) and not julia_env.is_gpu_project(JULIA_DIR)


def test_pinned_juliacall_matches_project():
    # juliacall requires PythonCall at exactly its own version, and Project.toml pins it;
    # the constraints file is where the suite pins what `pip install -c` installs.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert any(
        s.startswith("juliacall") for s in pyproject["project"]["optional-dependencies"]["julia"]
    )
    pins = (ROOT / "constraints.txt").read_text().split()
    assert f"juliacall=={julia_env.JULIACALL_VERSION}" in pins


def imported_packages(path: Path) -> set[str]:
    """Packages a file loads with top-level ``using``/``import`` (``X``, ``X: a``,
    ``X, Y``); relative (``.X``) and ``Base``/``Core`` names are not packages."""
    found: set[str] = set()
    for m in re.finditer(r"^(?:using|import) ([^:\n]+)", path.read_text(), re.M):
        for name in m[1].split(","):
            name = name.strip().split(".")[0]
            if name and name not in ("Base", "Core"):
                found.add(name)
    return found


def test_imported_packages_parser():
    # Guards the guard: every form the Julia sources use.
    assert imported_packages(MODULE) >= {"ChainRulesCore", "OrdinaryDiffEqBDF", "Zygote"}
    assert imported_packages(GPU_EXT) == {
        "CUDA", "DiffEqGPU", "SciMLBase", "SciMLBenchJL", "StaticArrays"
    }  # fmt: skip


def test_module_imports_every_dependency():
    proj = project()
    used = set().union(*(imported_packages(p) for p in package_sources()))
    # Every package the package's code loads is a [deps] entry, and none is left unused;
    # a weak dependency is loaded by the extension alone (it may not be installed).
    assert used <= set(proj["deps"]), used - set(proj["deps"])
    assert set(proj["deps"]) - {"PythonCall"} <= used  # PythonCall: loaded by juliacall


def test_extension_imports():
    proj = project()
    used = imported_packages(GPU_EXT)
    # An extension can load its parent, the parent's deps and its own triggers only.
    allowed = set(proj["deps"]) | set(proj["weakdeps"]) | {proj["name"]}
    assert used <= allowed, used - allowed
    assert set(julia_env.GPU_TRIGGERS) <= used


# --- Python and Julia agree ------------------------------------------------------------


def julia_dict_keys(name: str, path: Path = MODULE) -> set[str]:
    src = path.read_text()
    block = re.search(rf"const {name} = Dict\{{.*?\n\)\n", src, re.S)
    assert block, name
    return set(re.findall(r'^\s+"([\w-]+)" =>', block[0], re.M))


def julia_exports() -> set[str]:
    return {
        name.strip()
        for line in re.findall(r"^export (.+)$", MODULE.read_text(), re.M)
        for name in line.split(",")
    }


def julia_functions() -> set[str]:
    """Functions defined at top level of the package's sources (long or short form)."""
    src = "\n".join(p.read_text() for p in package_sources())
    return set(re.findall(r"^function (\w+!?)\(", src, re.M)) | set(
        re.findall(r"^(\w+!?)\(.*\) =", src, re.M)
    )


def test_python_calls_exported_julia_functions():
    # Every SciMLBenchJL function the Python glue calls is defined and exported.
    py = Path(jb.__file__).read_text()
    called = set(re.findall(r"self\._mod(?:ule)?\.(\w+)\(", py)) | set(
        re.findall(r"self\._mod(?:ule)?\.(\w+),", py)
    ) | set(re.findall(r"\bmodule\.(\w+)", py))  # handles looked up once, at build
    assert {"build_ensemble_case", "solve_ensemble_raw", "check_ensemble_solve",
            "solve_case_raw", "check_solve_case", "as_params", "gpu_status"} <= called
    assert called <= julia_exports(), called - julia_exports()
    assert julia_exports() <= julia_functions(), julia_exports() - julia_functions()


def test_gpu_kernel_solvers_match():
    assert julia_dict_keys("KERNEL_SOLVERS", GPU_EXT) == set(jb.GPU_KERNEL_SOLVERS)
    ext = GPU_EXT.read_text()
    for gpu_name in jb.GPU_KERNEL_SOLVERS.values():
        assert f"DiffEqGPU.{gpu_name}()" in ext
    array = re.search(r"^const ARRAY_SOLVERS = \((.*)\)$", ext, re.M)
    assert array and tuple(re.findall(r'"(\w+)"', array[1])) == jb.GPU_ARRAY_SOLVERS
    assert set(jb.GPU_ARRAY_SOLVERS) <= set(jb.SOLVERS)
    for semantics, alg in jb.GPU_ENSEMBLES.items():
        call = alg.removeprefix("DiffEqGPU.").replace("CUDA.CUDABackend()", "backend")
        assert f"DiffEqGPU.{call}" in ext, (semantics, call)


def test_solver_names_match():
    assert julia_dict_keys("SOLVERS") == set(jb.SOLVERS)


def test_gradient_names_match():
    assert julia_dict_keys("GRADIENTS") == set(jb.GRADIENT_METHODS)


def test_defaults():
    backend = jb.JuliaBackend()
    assert backend.solvers()[backend.default_solver(True)].stiff
    assert not backend.solvers()[backend.default_solver(False)].stiff


# --- return codes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "retcode, status",
    [
        ("MaxIters", Status.MAX_STEPS),
        ("DtLessThanMin", Status.DT_UNDERFLOW),
        ("Unstable", Status.NONFINITE),
        ("DtNaN", Status.NONFINITE),
        ("Exception:DomainError", Status.NONFINITE),
        ("InitialFailure", Status.SOLVER_FAILURE),
        ("ConvergenceFailure", Status.SOLVER_FAILURE),
        ("Failure", Status.SOLVER_FAILURE),
        ("Exception:MethodError", Status.ERROR),
    ],
)
def test_status_for(retcode: str, status: Status):
    assert jb.status_for(retcode) is status


def test_failure_reason_names_retcode_and_time():
    err = jb.failure("MaxIters", 12.5, 1e5, "Tsit5")
    assert err.status is Status.MAX_STEPS
    assert err.t_reached == 12.5
    assert "ReturnCode.MaxIters" in err.reason and "t=12.5" in err.reason
    err = jb.failure("Exception:MethodError", float("nan"), 1.0, "Rodas5P", "no method")
    assert err.t_reached is None and "MethodError" in err.reason and "no method" in err.reason


# --- finding Julia, with fake executables ------------------------------------------------


def fake_julia(folder: Path, body: str) -> Path:
    """A ``julia`` shell script with the given body."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "julia"
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def no_julia(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``PATH`` without julia (but with /bin, for the fake scripts' shell)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", os.pathsep.join([str(empty), "/bin", "/usr/bin"]))
    for key in ("PYTHON_JULIACALL_EXE", "PYTHON_JULIAPKG_EXE", "PYTHON_JULIACALL_PROJECT"):
        monkeypatch.delenv(key, raising=False)
    if shutil.which("julia"):
        pytest.skip("a julia executable is installed system-wide")
    return empty


@pytest.fixture
def julia_project(tmp_path: Path) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    shutil.copy(JULIA_DIR / "Project.toml", proj / "Project.toml")
    return proj


def test_probe_without_julia(no_julia: Path):
    t0 = time.perf_counter()
    found = julia_env.probe(need_juliacall=False)
    assert time.perf_counter() - t0 < 2
    assert not found.ok
    assert found.reason == "julia executable not found on PATH and PYTHON_JULIACALL_EXE unset"
    assert "juliaup" in found.fix and "sciml-bench julia setup" in found.fix


def test_availability_without_julia_in_a_fresh_process(no_julia: Path):
    # As a runner asks: a new interpreter, the real backend class, a wall-clock budget
    # (the timeout: a hang fails). Cheap is asserted as what it does, not as a wall time
    # (a fresh interpreter's start on a loaded machine is no property of the probe): it
    # imports neither juliacall nor juliapkg, so it starts no Julia.
    code = (
        "import json, sys; from sciml_bench.backends.julia import JuliaBackend; "
        "a = JuliaBackend().availability(); "
        "print(json.dumps([a.ok, a.reason, a.fix, "
        "sorted(m for m in ('juliacall', 'juliapkg') if m in sys.modules)]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, env=os.environ
    )
    assert out.returncode == 0, out.stderr
    ok, reason, fix, imported = json.loads(out.stdout)
    assert not ok and reason and fix
    assert "julia" in reason.lower()
    assert imported == []


def test_probe_bad_explicit_exe(no_julia: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTHON_JULIACALL_EXE", "/nonexistent/julia")
    found = julia_env.probe(need_juliacall=False)
    assert not found.ok and "PYTHON_JULIACALL_EXE" in found.reason


def test_probe_hanging_julia_times_out(no_julia: Path):
    fake_julia(no_julia, "sleep 30\n")
    t0 = time.perf_counter()
    found = julia_env.probe(need_juliacall=False, timeout=0.5)
    # stopped at its 0.5 s timeout, not after the script's 30 s (a loaded machine's
    # process start and kill take their time: the bound is far from both)
    assert time.perf_counter() - t0 < 10
    assert not found.ok and "did not answer" in found.reason


def test_probe_old_julia(no_julia: Path):
    fake_julia(no_julia, 'echo "julia version 1.9.4"\n')
    found = julia_env.probe(need_juliacall=False)
    assert not found.ok and "1.9.4" in found.reason and "1.10.3" in found.reason


def test_probe_julia_112_with_old_openssl(no_julia: Path, monkeypatch: pytest.MonkeyPatch):
    fake_julia(no_julia, 'echo "julia version 1.12.1"\n')
    monkeypatch.setattr(ssl, "OPENSSL_VERSION_INFO", (3, 0, 13, 0, 15))
    found = julia_env.probe(need_juliacall=False)
    assert not found.ok and "OpenSSL" in found.reason


def test_probe_needs_setup(no_julia: Path, julia_project: Path):
    fake_julia(no_julia, 'echo "julia version 1.11.2"\n')
    found = julia_env.probe(project=julia_project, need_juliacall=False)
    assert not found.ok and "Manifest.toml" in found.reason
    assert "sciml-bench julia setup" in found.fix
    assert found.version == (1, 11, 2) and found.source == "PATH"


def test_probe_needs_package_images(
    no_julia: Path, julia_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    fake_julia(no_julia, 'echo "julia version 1.11.2"\n')
    (julia_project / "Manifest.toml").write_text("")
    depot = tmp_path / "depot"
    monkeypatch.setenv("JULIA_DEPOT_PATH", str(depot) + os.pathsep)
    found = julia_env.probe(project=julia_project, need_juliacall=False)
    assert not found.ok and "package image" in found.reason
    for name in (julia_env.PACKAGE, *julia_env.HEAVY_PACKAGES):
        folder = depot / "compiled" / "v1.11" / name
        folder.mkdir(parents=True)
        (folder / "abcd_1234.ji").write_bytes(b"")
    found = julia_env.probe(project=julia_project, need_juliacall=False)
    assert found.ok, found.reason
    assert found.details["pkgimages"]["warm"]


def test_configure_juliacall(no_julia: Path, julia_project: Path, monkeypatch):
    exe = fake_julia(no_julia, 'echo "julia version 1.11.2"\n')
    for key in ("PYTHON_JULIACALL_STARTUP_FILE", "PYTHON_JULIAPKG_OFFLINE"):
        monkeypatch.delenv(key, raising=False)
    found = julia_env.JuliaProbe(True, exe=str(exe), project=julia_project)
    env = julia_env.configure_juliacall(found)
    # Both or neither: juliacall refuses one without the other.
    assert env["PYTHON_JULIACALL_EXE"] == str(exe) == os.environ["PYTHON_JULIACALL_EXE"]
    assert os.environ["PYTHON_JULIACALL_PROJECT"] == str(julia_project)
    assert os.environ["PYTHON_JULIAPKG_OFFLINE"] == "yes"
    with pytest.raises(julia_env.JuliaNotFound, match="nope"):
        julia_env.configure_juliacall(julia_env.JuliaProbe(False, "nope", "fix it"))


# --- setup -------------------------------------------------------------------------------


def test_setup_streams_julia_output(no_julia: Path, julia_project: Path):
    exe = fake_julia(
        no_julia,
        """\
        echo "args: $*"
        echo "pythoncall exe: $JULIA_PYTHONCALL_EXE"
        echo "precompiling..." >&2
        exit 0
        """,
    )
    lines: list[str] = []
    code = julia_env.setup(lines.append, project=julia_project)
    assert code == 0
    args = lines[0]
    assert f"--project={julia_project}" in args and "--startup-file=no" in args
    assert "Pkg.instantiate()" in args and "Pkg.precompile()" in args
    # A precompile worker that loads PythonCall must use this Python, not download one.
    assert lines[1] == f"pythoncall exe: {sys.executable}"
    assert "precompiling..." in lines  # stderr is streamed too
    assert julia_env.setup_command(str(exe), julia_project)[0] == str(exe)


def test_setup_reports_failure(no_julia: Path, julia_project: Path):
    fake_julia(no_julia, 'echo "ERROR: Unsatisfiable requirements"\nexit 1\n')
    assert julia_env.setup(None, project=julia_project) == 1


def test_setup_without_julia(no_julia: Path):
    with pytest.raises(julia_env.JuliaNotFound, match="juliaup"):
        julia_env.setup(None)


# --- CLI ---------------------------------------------------------------------------------


def test_cli_status_without_julia(no_julia: Path):
    from click.testing import CliRunner

    from sciml_bench.cli.julia import julia

    result = CliRunner().invoke(julia, ["status", "--json"])
    assert result.exit_code == 2  # as every sciml-bench error that says what to do
    report = json.loads(result.output)
    assert report["available"] is False and "julia" in report["reason"]


def test_cli_setup_with_fake_julia(no_julia: Path, julia_project: Path):
    from click.testing import CliRunner

    from sciml_bench.cli.julia import julia

    fake_julia(
        no_julia,
        """\
        case "$*" in *--version*) echo "julia version 1.11.2"; exit 0;; esac
        echo "Precompiling project..."
        """,
    )
    result = CliRunner().invoke(julia, ["setup", "--project", str(julia_project)])
    assert result.exit_code == 0, result.output
    assert "Julia 1.11.2" in result.output and "Precompiling project..." in result.output


def test_cli_setup_without_julia(no_julia: Path):
    from click.testing import CliRunner

    from sciml_bench.cli.julia import julia

    result = CliRunner().invoke(julia, ["setup"])
    assert result.exit_code == 2 and "juliaup" in result.output
    (line,) = result.output.strip().splitlines()  # one line: what is wrong, then the fix
    assert line.startswith("Error: ") and "Fix: Install Julia" in line


# --- the Python glue, against a fake juliacall ---------------------------------------------


class FakeJuliaError(Exception):
    pass


class FakeSciMLBenchJL:
    """Returns what SciMLBenchJL returns, in the same layout (time-major flat ``y``)."""

    def __init__(self):
        self.built = None

    def versions(self):
        return (("julia", "1.11.2"), ("SciMLSensitivity", "7.96.0"))

    def build_case(self, src, u0, theta0, t0, t1, tsave, rtol, atol, maxiters, *rest):
        if "rhs!" not in src:
            raise FakeJuliaError("the generated source does not define `rhs!(du, u, p, t)`")
        weights, _obs, _lin, solver, gradient, *more = rest  # dtype, dt (0: adaptive), pattern
        step, pattern = more[:2], more[2:]
        self.built = dict(u0=u0, p0=theta0, src=src, tsave=tsave, W=weights,
                          names=(solver, gradient), maxiters=maxiters, step=tuple(step),
                          pattern=pattern)  # fmt: skip
        return "case"

    # the timed calls return an opaque raw result (Julia's Raw); the checks read it

    def as_params(self, a):
        self.converted = getattr(self, "converted", 0) + 1
        return np.array(a, dtype=float)  # a Julia Vector{Float64}

    def case_params(self, case, a):
        self.converted = getattr(self, "converted", 0) + 1
        self.case_params_in = np.array(a)
        dtype = np.float32 if self.built["step"][:1] == ("float32",) else float
        return np.array(a, dtype=dtype)  # a Julia Vector{T}, T the case's element type

    def solve_case_raw(self, case, p):
        return ("raw", p)

    def check_solve_case(self, case, raw):
        return self.solve_case(case, raw[1])

    def loss_and_grad_case_raw(self, case, p):
        return ("raw", p)

    def check_grad_case(self, case, raw):
        return self.loss_and_grad_case(case, raw[1])

    def solve_ensemble_raw(self, case, p):
        return ("raw", p)

    def check_ensemble_solve(self, case, raw):
        return self.solve_ensemble_case(case, raw[1])

    def loss_and_grad_ensemble_raw(self, case, p, w):
        self.weights = w
        return ("raw", p)

    def check_ensemble_grad(self, case, raw):
        return self.loss_and_grad_ensemble_case(case, raw[1])

    # what the checks return, in SciMLBenchJL's layout

    def solve_case(self, case, theta):
        if theta[0] < 0:
            return ([], "MaxIters", 2.5, (7, 1, 60, -1, -1), "")
        y = np.arange(len(self.built["tsave"]) * len(self.built["u0"]), dtype=float)
        return (y.tolist(), "Success", 5.0, (10, 2, 70, 3, 4), "")

    def loss_and_grad_case(self, case, theta):
        if getattr(self, "grad_u", None) is not None:  # a test's ∂L/∂p, whatever p is
            return (1.5, list(self.grad_u), "Success", 5.0, "")
        if theta[0] < 0:
            return (float("nan"), [], "Exception:DomainError", float("nan"), "log of -1")
        if theta[0] == 0:
            return (1.0, [float("nan"), 0.0], "Success", 5.0, "")
        if theta[0] > 100:
            raise FakeJuliaError("MethodError: no method matching ...")
        return (1.5, [0.25, -1.0], "Success", 5.0, "")

    # ensembles: the layout and return values of julia/src/ensemble.jl

    gpu_reason = "CUDA.functional() is false: CUDA.jl 5.8.2 finds no usable GPU or driver"

    def gpu_status(self):
        return self.gpu_reason

    def gpu_device_name(self):
        return "NVIDIA H100 80GB HBM3"

    def build_ensemble_case(self, src, static_src, Y0, S, A, theta0, t0, t1, tsave, *rest):
        rtol, atol, maxiters, W, O, C, solver, gradient, device, semantics = rest
        self.ensemble = dict(src=src, static_src=static_src, Y0=Y0, S=S, A=A, theta0=theta0,
                             tsave=tsave, W=W, O=O, C=C, maxiters=maxiters,
                             names=(solver, gradient, device, semantics))  # fmt: skip
        return "ensemble case"

    def solve_ensemble_case(self, case, theta):
        n, n_state = self.ensemble["Y0"].shape
        n_save = len(self.ensemble["tsave"])
        if theta[0] < 0:  # 3 of the members hit maxiters, the second first
            return ([], 3, 2, "MaxIters", 0.5, [7] * n, [50] * n, "saved 2 of 4 points")
        # Julia's Y[state, save, member] = 100 member + 10 save + state (0-based), and vec()
        # flattens it column-major.
        m, j, k = np.meshgrid(np.arange(n), np.arange(n_save), np.arange(n_state), indexing="ij")
        Y = np.transpose(100.0 * m + 10.0 * j + k, (2, 1, 0))
        if theta[0] == 0:
            Y[0, 0, 1] = np.nan
        steps = [-1] * n if theta[1] < 0 else list(range(10, 10 + n))
        return (Y.flatten(order="F").tolist(), 0, 0, "Success", 5.0, steps, [-1] * n, "")

    # training: the layout and return values of julia/src/training.jl

    def build_training(self, case, eta, beta1, beta2, epsilon):
        self.trained = {"case": case, "rule": (eta, beta1, beta2, epsilon),
                        "p": np.array([0.5, 0.2]), "steps": 0}  # fmt: skip
        return "train state"

    def training_rule(self, state):
        return getattr(self, "held_rule", self.trained["rule"])

    def train_step_case(self, state):
        t = self.trained
        if t["p"][0] > 0.5 + 1e-9:  # the second step's solve fails
            return (float("nan"), "MaxIters", 1.5, "")
        t["steps"] += 1
        t["p"] = t["p"] + t["rule"][0]
        return (1.0 / t["steps"], "Success", 5.0, "")

    def training_parameters(self, state):
        return self.trained["p"].tolist()

    def loss_and_grad_ensemble_case(self, case, theta):
        if theta[0] < 0:
            return (float("nan"), [], 0, 0, "Exception:DomainError", float("nan"), "log of -1")
        if theta[0] == 0:
            return (float("nan"), [], 1, 4, "DtLessThanMin", 0.25, "saved 1 of 4 points")
        return (2.5, [0.5, -2.0], 0, 0, "Success", float("nan"), "")


class FakeMain:
    def __init__(self):
        self.SciMLBenchJL = FakeSciMLBenchJL()

    def seval(self, code):
        answers = {"string(VERSION)": "1.11.2", "Sys.BINDIR": "/fake/bin", "Threads.nthreads()": 2}
        return answers.get(code, True if "isprecompiled" in code else None)


@pytest.fixture
def fake_juliacall(monkeypatch: pytest.MonkeyPatch):
    import types

    mod = types.ModuleType("juliacall")
    mod.Main = FakeMain()
    mod.JuliaError = FakeJuliaError
    monkeypatch.setitem(sys.modules, "juliacall", mod)
    monkeypatch.setattr(julia_env, "JULIACALL_IMPORT_S", None)
    return mod


#: A -> B -> C with two rates (tests/test_julia_runtime.py's chain)
TOY = """
name = "toy"
stiff = true
[state]
names = ["a", "b", "c"]
initial = [1.0, 0.0, 0.0]
[parameters]
k1 = 0.5
k2 = 0.2
[equations]
a = "-k1*a"
b = "k1*a - k2*b"
c = "k2*b"
[time]
span = [0.0, 5.0]
save = [1.0, 2.0, 3.0, 4.0]
[loss]
kind = "final"
weights = [0.0, 1.0, 0.5]
"""


def compiled(n_save: int = 4, log: bool | tuple[bool, bool] = False):
    """The toy problem compiled, its model in θ (``log`` False: the fake's failure branches
    read θ as given) or, as codegen writes it by default, in log θ (``log`` per parameter)."""
    from sciml_bench.problem import codegen, spec
    from sciml_bench.problem.compiled import CompiledProblem

    log = (log, log) if isinstance(log, bool) else log

    return CompiledProblem(
        name="toy",
        stiff=True,
        state_names=["a", "b", "c"],
        param_names=["k1", "k2"],
        y0=np.array([1.0, 0.0, 0.0]),
        theta0=np.array([0.5, 0.2]),
        log_params=np.array(log),
        t_span=(0.0, 5.0),
        t_save=np.linspace(1.0, 5.0, n_save),
        rtol=1e-6,
        atol=1e-9,
        max_steps=1000,
        loss_W=np.ones((n_save, 3)),
        loss_O=np.zeros((n_save, 3)),
        loss_C=np.zeros((n_save, 3)),
        source={"julia": codegen.julia_source(spec.loads(TOY), log=log)},
    )


def build(fake_juliacall, log: bool = False, **overrides):
    from sciml_bench.backends.base import CaseOptions

    backend = jb.JuliaBackend()
    phases = backend.load()
    opts = {
        "solver": "Rodas5P",
        "gradient_method": "forward_diff",
        "rtol": 1e-6,
        "atol": 1e-9,
        "max_steps": 1000,
        **overrides,
    }
    return backend, phases, backend.build(compiled(log=log), CaseOptions(**opts))


def test_load_and_build_with_fake_juliacall(fake_juliacall):
    backend, phases, case = build(fake_juliacall)
    # juliacall was imported by the caller, so its init is theirs to report.
    assert set(phases) == {"precompile_check", "package_load"}
    assert backend.load_info["pkgimage_valid"] is True
    assert backend.load_info["versions"]["SciMLSensitivity"] == "7.96.0"
    built = fake_juliacall.Main.SciMLBenchJL.built
    assert built["names"] == ("Rodas5P", "forward_diff") and built["maxiters"] == 1000
    assert built["W"].shape == (4, 3) and built["W"].flags.c_contiguous


def test_solve_reshapes_time_major(fake_juliacall):
    _, _, case = build(fake_juliacall)
    sol = case.solve(np.array([0.5, 0.2]))
    assert sol.y.shape == (4, 3) and sol.y[1, 0] == 3.0  # row = save time, column = state
    assert sol.stats == {
        "steps": 10,
        "rejected_steps": 2,
        "rhs_evals": 70,
        "jac_evals": 3,
        "lu_decomps": 4,
    }


def test_solver_failure_is_a_status(fake_juliacall):
    from sciml_bench.measure.status import SolverFailure

    _, _, case = build(fake_juliacall)
    with pytest.raises(SolverFailure) as info:
        case.solve(np.array([-1.0, 0.2]))
    assert info.value.status is Status.MAX_STEPS and info.value.t_reached == 2.5
    assert "ReturnCode.MaxIters" in info.value.reason
    with pytest.raises(SolverFailure) as info:
        case.loss_and_grad(np.array([-1.0, 0.2]))
    assert info.value.status is Status.NONFINITE and "log of -1" in info.value.reason


def test_gradient(fake_juliacall):
    from sciml_bench.measure.status import SolverFailure

    _, _, case = build(fake_juliacall)
    value, grad = case.loss_and_grad(np.array([0.5, 0.2]))
    assert value == 1.5 and grad.tolist() == [0.25, -1.0]
    with pytest.raises(SolverFailure) as info:  # NaN gradient after a successful solve
        case.loss_and_grad(np.array([0.0, 0.2]))
    assert info.value.status is Status.NONFINITE
    with pytest.raises(SolverFailure) as info:  # a Julia exception never escapes
        case.loss_and_grad(np.array([1000.0, 0.2]))
    assert info.value.status is Status.ERROR and "MethodError" in info.value.reason


def test_array_problem_with_a_sparse_jacobian_hands_julia_its_pattern(fake_juliacall):
    """build_case gets the exact pattern (1-based rows and columns, from the generated NumPy
    module) for a sparse Jacobian, nothing for a dense one; the row names what Julia does."""
    from sciml_bench.backends.base import CaseOptions
    from sciml_bench.problem import reference, spec

    p = spec.at_size(spec.load("stiff-robertson-groups"), 4)
    ref = reference.Reference(p.name, p.content_hash, "", 1e-12, 1e-16, list(p.t_save), [],
                              [[1.0] * p.n_state] * len(p.t_save), 0.0, [0.0] * 3, "", 1e-4,
                              None, 0.0)  # fmt: skip
    problem = reference.compile_problem(p, ref)
    backend = jb.JuliaBackend()
    backend.load()
    built = fake_juliacall.Main.SciMLBenchJL
    for kind in ("sparse", "dense"):
        opts = CaseOptions("FBDF", "forward_diff", 1e-6, 1e-10, 100, extra={"jacobian": kind})
        case = backend.build(problem, opts)
        if kind == "dense":
            assert built.built["pattern"] == [] and "dense" in case.info["linear_solver"]
            continue
        rows, cols = built.built["pattern"]
        assert rows.dtype == np.int64 and rows.min() == 1 and cols.max() == p.n_state
        assert len(rows) == problem.jac_nnz == 7 * 4
        assert (rows[0], cols[0]) == (1, 1) and "jac_prototype" in case.info["linear_solver"]


def test_build_rejects_bad_options(fake_juliacall):
    with pytest.raises(ValueError, match="unknown Julia solver"):
        build(fake_juliacall, solver="dopri5")
    with pytest.raises(ValueError, match="unknown Julia gradient"):
        build(fake_juliacall, gradient_method="backsolve")


# --- ensembles ----------------------------------------------------------------------------


def problem_sources() -> dict[str, tuple[str, bool]]:
    """Every shipped problem's generated Julia source, and whether it builds arrays (a
    network, or an array problem's broadcasting code)."""
    from sciml_bench.problem import codegen, spec

    out = {}
    for path in sorted((ROOT / "problems").glob("*.toml")):
        problem = spec.load(path.stem)
        if problem.events:  # Julia's source refuses events so far (tests/test_events.py)
            continue
        arrays = bool(problem.networks) or problem.array is not None
        out[path.stem] = (codegen.generate(problem, "julia"), arrays)
    return out


def body_assignments(src: str) -> list[tuple[str, str]]:
    return re.findall(r"^ {8}(\S+) = (.+)$", src, re.M)


@pytest.mark.parametrize("name", sorted(problem_sources()))
def test_static_rhs_source(name: str, tmp_path: Path):
    src, neural = problem_sources()[name]
    src = jb.theta_source(src)  # the θ form, which ensemble_plan hands the GPU kernel
    static = jb.static_rhs_source(src)
    if neural:
        # Array literals, slices and broadcasts cannot run inside a GPU kernel.
        assert static is None
        return
    assert static is not None
    assert syntax_errors(static.encode()) == []
    path = tmp_path / "rhs.jl"
    path.write_text(static)
    assert [d for d in lint(path) if d["severity"] == "error"] == []
    assert re.findall(r"^function (\w+!?)\((.*)\)$", static, re.M) == [("rhs", "u, p, t")]
    # The same computation, line for line: du[k] = e becomes du_k = e, then SVector{n}.
    inplace, derived = body_assignments(src), body_assignments(static)
    assert [(re.sub(r"^du\[(\d+)\]$", r"du_\1", a), e) for a, e in inplace] == derived
    n = sum(a.startswith("du[") for a, _ in inplace)
    outputs = ", ".join(f"du_{k}" for k in range(1, n + 1))
    assert f"SVector{{{n}}}({outputs})" in static


def test_static_rhs_source_refuses_what_it_cannot_prove():
    src = generated_rhs()
    assert jb.static_rhs_source(src) is not None
    assert jb.static_rhs_source(src.replace("rhs!(du, u, p, t)", "f!(du, u, p, t)")) is None
    assert jb.static_rhs_source(src.replace("du[2] =", "du[3] =", 1)) is None  # order
    assert jb.static_rhs_source(src.replace("    return nothing\n", "")) is None
    # a broadcast, a slice or an array literal in any line
    for bad in ("exp.(s_y1)", "sum(u[1:2])", "[s_y1, s_y2][1]", "s_y1 .* s_y2"):
        assert jb.static_rhs_source(src.replace("s_y1 = u[1]", f"s_y1 = {bad}")) is None
    # a float literal's dot is not a broadcast
    assert jb.static_rhs_source(src.replace("s_y1 = u[1]", "s_y1 = 1.0*u[1]")) is not None


@pytest.mark.parametrize(
    "env, device",
    [
        ({}, "cpu"),
        ({"JAX_PLATFORMS": "cpu"}, "cpu"),
        ({"JAX_PLATFORMS": "cuda,cpu"}, "cpu"),  # a user's JAX setting is not a pin
        ({"SCIML_BENCH_DEVICE": "cuda"}, "cuda"),
        ({"SCIML_BENCH_DEVICE": "cpu", "JAX_PLATFORMS": "cuda,cpu"}, "cpu"),
    ],
)
def test_worker_device_and_project(env: dict, device: str, monkeypatch: pytest.MonkeyPatch):
    from sciml_bench.measure.device import device_env

    for key in ("SCIML_BENCH_DEVICE", "JAX_PLATFORMS", "PYTHON_JULIACALL_PROJECT",
                "SCIML_BENCH_JULIA_PROJECT"):  # fmt: skip
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert julia_env.worker_device() == device
    want = julia_env.GPU_PROJECT if device == "cuda" else julia_env.DEFAULT_PROJECT
    assert julia_env.project_dir() == want
    # what a worker pinned by the executor sees
    for pinned in ("cpu", "cuda"):
        monkeypatch.delenv("SCIML_BENCH_DEVICE", raising=False)
        for key, value in device_env(pinned).items():
            monkeypatch.setenv(key, value)
        assert julia_env.worker_device() == pinned


def test_probe_gpu_environment_needs_its_images(
    no_julia: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    fake_julia(no_julia, 'echo "julia version 1.11.2"\n')
    env = tmp_path / "gpu"
    env.mkdir()
    shutil.copy(GPU_ENV / "Project.toml", env / "Project.toml")
    found = julia_env.probe(project=env, need_juliacall=False)
    assert not found.ok and "Manifest.toml" in found.reason
    assert found.fix == julia_env.GPU_SETUP_FIX and "--project julia/gpu" in found.fix
    (env / "Manifest.toml").write_text("")
    depot = tmp_path / "depot"
    monkeypatch.setenv("JULIA_DEPOT_PATH", str(depot))
    for name in (julia_env.PACKAGE, *julia_env.HEAVY_PACKAGES):
        (depot / "compiled" / "v1.11" / name).mkdir(parents=True)
        (depot / "compiled" / "v1.11" / name / "a_1.ji").write_bytes(b"")
    found = julia_env.probe(project=env, need_juliacall=False)
    assert not found.ok
    assert "CUDA, DiffEqGPU, SciMLBenchJLGPUExt have no package image" in found.reason
    for name in julia_env.GPU_PACKAGES:
        (depot / "compiled" / "v1.11" / name).mkdir(parents=True)
        (depot / "compiled" / "v1.11" / name / "a_1.ji").write_bytes(b"")
    found = julia_env.probe(project=env, need_juliacall=False)
    assert found.ok, found.reason


def test_setup_command_for_the_gpu_environment():
    cmd = julia_env.setup_command("julia", GPU_ENV)
    script = cmd[-1]
    assert cmd[2] == f"--project={GPU_ENV}"
    # Julia 1.10 ignores [sources]: develop the package from julia/ by path
    assert f'VERSION < v"1.11" && Pkg.develop(path = raw"{JULIA_DIR}")' in script
    assert script.index("Pkg.develop") < script.index("Pkg.instantiate()")
    assert "using CUDA, DiffEqGPU, StaticArrays" in script  # loads the extension
    assert syntax_errors(script.replace("; ", "\n").encode()) == []
    plain = julia_env.setup_command("julia", JULIA_DIR)[-1]
    assert "Pkg.develop" not in plain and "CUDA" not in plain


def test_configure_juliacall_with_threads(no_julia: Path, julia_project: Path, monkeypatch):
    exe = fake_julia(no_julia, 'echo "julia version 1.11.2"\n')
    monkeypatch.delenv("PYTHON_JULIACALL_HANDLE_SIGNALS", raising=False)
    monkeypatch.delenv("PYTHON_JULIACALL_THREADS", raising=False)
    monkeypatch.setenv("JULIA_NUM_THREADS", "1")
    found = julia_env.JuliaProbe(True, exe=str(exe), project=julia_project)
    julia_env.configure_juliacall(found)
    assert "PYTHON_JULIACALL_HANDLE_SIGNALS" not in os.environ
    monkeypatch.setenv("JULIA_NUM_THREADS", "4")  # EnsembleThreads: Julia must own signals
    julia_env.configure_juliacall(found)
    assert os.environ["PYTHON_JULIACALL_HANDLE_SIGNALS"] == "yes"


def lorenz(n_save: int = 4):
    """ensemble-lorenz's compiled problem (its generated Julia source included)."""
    from sciml_bench.problem import codegen, spec

    problem = compiled(n_save)
    problem.source = {"julia": codegen.julia_source(spec.load("ensemble-lorenz"))}
    problem.state_names, problem.param_names = ["x", "y", "z"], ["sigma", "rho", "beta"]
    problem.y0, problem.theta0 = np.array([1.0, 0.0, 0.0]), np.array([10.0, 28.0, 8 / 3])
    return problem


def ensemble_batch(n: int, observations: bool = False):
    from sciml_bench.problem.ensemble import Batch

    rng = np.random.default_rng(1)
    obs = rng.random((n, 4, 3)) if observations else None
    return Batch(np.tile([1.0, 0.0, 0.0], (n, 1)), rng.random((n, 3)), np.zeros((n, 3)), obs)


def options(**overrides):
    from sciml_bench.backends.base import CaseOptions

    opts = {"solver": "Tsit5", "gradient_method": "forward_diff", "rtol": 1e-6, "atol": 1e-8,
            "max_steps": 1000, **overrides}  # fmt: skip
    return CaseOptions(**opts)


@pytest.mark.parametrize(
    "semantics, device, overrides, n, why",
    [
        ("coupled", "cpu", {}, 4, "EnsembleGPUArray (one fused system, one step size), on cuda"),
        ("independent", "tpu", {}, 4, "no independent ensemble on tpu"),
        ("independent", "cuda", {"solver": "Rodas5P"}, 4, "EnsembleGPUKernel runs Tsit5, Vern7"),
        ("coupled", "cuda", {"solver": "FBDF"}, 4, "need analytic Jacobians"),
        ("coupled", "cuda", {"gradient_method": "gauss_adjoint"}, 4, "ForwardDiff (forward_diff)"),
        ("independent", "cuda", {}, 1, "one-member ensemble with EnsembleSerial on the CPU"),
    ],
)
def test_ensemble_not_offered(semantics, device, overrides, n, why):
    from sciml_bench.backends.base import EnsembleNotOffered

    with pytest.raises(EnsembleNotOffered, match=re.escape(why)):
        jb.ensemble_plan(lorenz(), options(**overrides), n, semantics, device)


def test_gpu_ensemble_refuses_a_network_rhs():
    from sciml_bench.backends.base import EnsembleNotOffered
    from sciml_bench.problem import codegen, spec

    problem = lorenz()
    problem.source = {"julia": codegen.julia_source(spec.load("ensemble-spiral-node"))}
    with pytest.raises(EnsembleNotOffered, match="cannot run inside a GPU kernel"):
        jb.ensemble_plan(problem, options(), 16, "independent", "cuda")
    # the CPU runs it, and so does no static form
    assert jb.ensemble_plan(problem, options(), 16, "independent", "cpu")["static_src"] == ""


def test_ensemble_plans():
    cpu = jb.ensemble_plan(lorenz(), options(), 4, "independent", "cpu")
    assert cpu["ensemble"] == "SciMLBase.EnsembleThreads()" and cpu["solver"] == "Tsit5()"
    assert cpu["sensealg"] == jb.GRADIENT_METHODS["forward_diff"] and cpu["static_src"] == ""
    kernel = jb.ensemble_plan(lorenz(), options(solver="Vern7"), 4, "independent", "cuda")
    assert kernel["solver"] == "GPUVern7()" and "EnsembleGPUKernel" in kernel["ensemble"]
    assert kernel["static_src"].startswith("# Out-of-place") and kernel["sensealg"] == (
        jb.GPU_GRADIENT_INFO
    )
    array = jb.ensemble_plan(lorenz(), options(), 4, "coupled", "cuda")
    assert array["solver"] == "Tsit5()" and "EnsembleGPUArray" in array["ensemble"]
    assert array["static_src"] == ""  # EnsembleGPUArray runs the in-place rhs!
    with pytest.raises(ValueError, match="unknown Julia solver"):
        jb.ensemble_plan(lorenz(), options(solver="dopri5"), 4, "independent", "cpu")


def build_ensemble(fake_juliacall, n=4, semantics="independent", device="cpu", obs=False):
    backend = jb.JuliaBackend()
    batch = ensemble_batch(n, obs)
    case = backend.build_ensemble(lorenz(), options(device=device), batch, semantics)
    return case, batch, fake_juliacall.Main.SciMLBenchJL.ensemble


def test_build_ensemble_hands_julia_the_python_shapes(fake_juliacall):
    case, batch, built = build_ensemble(fake_juliacall)
    assert built["names"] == ("Tsit5", "forward_diff", "cpu", "independent")
    assert built["Y0"].shape == (4, 3) and built["S"].shape == (4, 3) and built["A"].shape == (4, 3)
    np.testing.assert_array_equal(built["S"], batch.scale)
    # no per-member observations: one shared block, broadcast over members in Julia
    assert built["O"].shape == (1, 4, 3) and built["W"].shape == (4, 3)
    assert all(built[k].flags.c_contiguous for k in ("Y0", "S", "A", "O", "W", "C"))
    assert built["static_src"] == "" and built["maxiters"] == 1000
    assert case.semantics == "independent"
    assert case.info["ensemble"] == "SciMLBase.EnsembleThreads()" and case.info["threads"] == 2
    assert case.info["members"] == 4 and case.info["shared_theta"] is False
    assert case.placement()[0] == "cpu"
    _, batch, built = build_ensemble(fake_juliacall, obs=True)
    np.testing.assert_array_equal(built["O"], batch.observations)


def test_ensemble_solve_layout_and_counters(fake_juliacall):
    case, _, _ = build_ensemble(fake_juliacall)
    sol = case.solve(np.array([10.0, 28.0, 2.0]))
    assert sol.y.shape == (4, 4, 3)  # (member, save time, state)
    assert sol.y[2, 1, 0] == 210.0 and sol.y[3, 0, 2] == 302.0
    assert sol.steps.tolist() == [10, 11, 12, 13] and sol.rhs_evals is None  # -1: unreported
    assert case.solve(np.array([10.0, -1.0, 2.0])).steps is None


def test_ensemble_member_failures_are_statuses(fake_juliacall):
    from sciml_bench.measure.status import SolverFailure

    case, _, _ = build_ensemble(fake_juliacall)
    with pytest.raises(SolverFailure) as info:
        case.solve(np.array([-1.0, 28.0, 2.0]))
    assert info.value.status is Status.MAX_STEPS and info.value.t_reached == 0.5
    assert "ReturnCode.MaxIters" in info.value.reason
    assert "3 of 4 members (first: member 1)" in info.value.reason  # Julia's 2, 0-based
    with pytest.raises(SolverFailure) as info:
        case.solve(np.array([0.0, 28.0, 2.0]))
    assert info.value.status is Status.NONFINITE and "1 of 4 members" in info.value.reason
    with pytest.raises(SolverFailure) as info:
        case.loss_and_grad(np.array([-1.0, 28.0, 2.0]))
    assert info.value.status is Status.NONFINITE and "log of -1" in info.value.reason
    with pytest.raises(SolverFailure) as info:
        case.loss_and_grad(np.array([0.0, 28.0, 2.0]))
    assert info.value.status is Status.DT_UNDERFLOW and "member 3" in info.value.reason


def test_ensemble_gradient(fake_juliacall):
    case, _, _ = build_ensemble(fake_juliacall)
    value, grad = case.loss_and_grad(np.array([10.0, 28.0, 2.0]))
    assert value == 2.5 and grad.tolist() == [0.5, -2.0]
    jl = fake_juliacall.Main.SciMLBenchJL
    assert jl.weights.tolist() == [0.25] * 4  # the members' mean
    # the gradient check weighs the first members alone, on the same (timed) case
    w = np.array([0.5, 0.5, 0.0, 0.0])
    case.check_grad(case.grad_raw(case.prepare(np.array([10.0, 28.0, 2.0]), w)))
    assert jl.weights.tolist() == w.tolist()


def test_timed_calls_take_prepared_parameters_and_return_raw_results(fake_juliacall):
    """θ is converted once (``as_params``), before the timed calls; a timed call returns
    Julia's raw result, and the check is a second call."""
    _, _, case = build(fake_juliacall)
    jl = fake_juliacall.Main.SciMLBenchJL
    params = case.prepare(np.array([0.5, 0.2]))
    converted = jl.converted
    raws = [case.timed_solve(params) for _ in range(3)] + [case.timed_grad(params)[0]]
    assert jl.converted == converted  # no conversion inside the timed calls
    assert all(r[0] == "raw" for r in raws)
    assert case.check_solve(raws[0]).y.shape == (4, 3)


def _julia_function_body(name: str) -> str:
    src = "\n".join(p.read_text() for p in package_sources())
    m = re.search(rf"^function {name}\(.*?^end$", src, re.S | re.M)
    assert m, name
    return m[0]


@pytest.mark.parametrize("name", ["solve_case_raw", "loss_and_grad_case_raw",
                                  "solve_ensemble_raw", "loss_and_grad_ensemble_raw"])  # fmt: skip
def test_julia_timed_calls_hold_the_library_call_alone(name: str):
    """No conversion of θ, no return-code check, no member loop and no copy of the
    states inside a timed call: those are the check's (``check_*``), a second call."""
    body = _julia_function_body(name)
    # converted before, by as_params (ensembles) or case_params (the case's element type T)
    assert re.search(r"p::Vector\{(Float64|T)\}", body.splitlines()[0])
    for forbidden in ("Vector{Float64}(", "Array(", "vec(", "retcode", "for ", "stats",
                      "member_states", "check_"):  # fmt: skip
        assert forbidden not in body, (name, forbidden)
    assert "return Raw(" in body


def test_cuda_ensemble_without_a_usable_gpu(fake_juliacall):
    from sciml_bench.backends.base import EnsembleNotOffered

    with pytest.raises(EnsembleNotOffered) as info:
        build_ensemble(fake_juliacall, device="cuda")
    assert "CUDA.functional() is false" in str(info.value)
    assert julia_env.GPU_SETUP_FIX in str(info.value)


def test_cuda_ensemble_build(fake_juliacall):
    fake_juliacall.Main.SciMLBenchJL.gpu_reason = ""
    case, _, built = build_ensemble(fake_juliacall, device="cuda")
    assert built["names"] == ("Tsit5", "forward_diff", "cuda", "independent")
    assert built["static_src"] == jb.static_rhs_source(built["src"])
    assert case.info["solver"] == "GPUTsit5()" and "EnsembleGPUKernel" in case.info["ensemble"]
    assert case.placement() == ("cuda", "NVIDIA H100 80GB HBM3")
    case, _, built = build_ensemble(fake_juliacall, semantics="coupled", device="cuda")
    assert built["static_src"] == "" and case.semantics == "coupled"


# --- training (Optimisers.jl's Adam) --------------------------------------------------------


def test_training_module_is_optimisers_adam_with_every_constant():
    src = (JULIA_DIR / "src" / "training.jl").read_text()
    # positional: Adam(η, β, ϵ) in Optimisers 0.3 and 0.4 (src/rules.jl, @def struct Adam)
    assert "Optimisers.Adam(Float64(eta), (Float64(beta1), Float64(beta2)), Float64(epsilon))" in src
    assert "Optimisers.setup(rule, p)" in src and "Optimisers.update!(s.opt, s.p, grad)" in src
    assert "Zygote.withgradient(q -> loss(s.case, q), s.p)" in src
    assert "rule.eta" in src and "rule.beta[1]" in src and "rule.epsilon" in src  # read back
    assert project()["compat"]["Optimisers"] == "0.3, 0.4"


def test_adam_constants_reach_julia(fake_juliacall):
    from sciml_bench.problem.training import Adam

    backend = jb.JuliaBackend()
    adam = Adam(0.03, 0.8, 0.95, 0.3)
    loop = backend.build_training(compiled(), options(solver="Rodas5P"), adam)
    fake = fake_juliacall.Main.SciMLBenchJL
    assert fake.trained["case"] == "case" and fake.trained["rule"] == (0.03, 0.8, 0.95, 0.3)
    assert loop.info["optimizer"] == "Optimisers.Adam(0.03, (0.8, 0.95), 0.3)"
    assert loop.check(loop.step()) == 1.0
    np.testing.assert_allclose(loop.parameters(), [0.53, 0.23])


def test_julia_holding_another_epsilon_is_caught(fake_juliacall):
    from sciml_bench.problem.training import Adam

    fake_juliacall.Main.SciMLBenchJL.held_rule = (0.03, 0.8, 0.95, 1e-8)  # its default ε
    with pytest.raises(RuntimeError, match=r"holds .* \(0.03, 0.8, 0.95, 1e-08\), not the "
                                           r"declared \(0.03, 0.8, 0.95, 0.3\)"):
        jb.JuliaBackend().build_training(compiled(), options(solver="Rodas5P"),
                                         Adam(0.03, 0.8, 0.95, 0.3))  # fmt: skip


def test_julia_training_failure_is_a_status(fake_juliacall):
    from sciml_bench.measure.status import SolverFailure
    from sciml_bench.problem.training import Adam

    loop = jb.JuliaBackend().build_training(compiled(), options(solver="Rodas5P"),
                                            Adam(0.1, 0.9, 0.999, 1e-8))  # fmt: skip
    loop.check(loop.step())
    with pytest.raises(SolverFailure) as info:
        loop.check(loop.step())
    assert info.value.status is Status.MAX_STEPS and "ReturnCode.MaxIters" in info.value.reason


# --- float32 and fixed steps (--dtype, --dt) -----------------------------------------------


def test_julia_float_types_and_fixed_step_are_the_real_api():
    """The element types Julia builds in are those the backend offers, and a fixed step is
    OrdinaryDiffEq's ``adaptive = false`` with ``dt``, splatted into the one ``solve`` call
    that solves and differentiates (so the gradient runs at the same fixed step)."""
    src = MODULE.read_text()
    types = re.search(r"^const FLOAT_TYPES = Dict\{String, DataType\}\((.*)\)$", src, re.M)
    assert types and dict(re.findall(r'"(\w+)" => (\w+)', types[1])) == {
        "float64": "Float64", "float32": "Float32"}
    assert set(jb.JuliaBackend.dtypes) == {"float64", "float32"}
    assert re.search(r"step_kwargs\(c::BenchCase\) =\s*iszero\(c\.dt\) \? \(;\) : "
                     r"\(; adaptive = false, dt = c\.dt\)", src)  # fmt: skip
    solve = _julia_function_body("_solve")
    assert "step_kwargs(c)...," in solve and "maxiters = c.maxiters" in solve
    assert "case_params" in julia_exports()
    assert jb.SOLVERS["Tsit5-fixed"].fixed_step and not jb.SOLVERS["Tsit5"].fixed_step


def test_julia_build_hands_over_dtype_and_step(fake_juliacall):
    _, _, case = build(fake_juliacall, solver="Tsit5-fixed", dtype="float32", dt=0.5)
    built = fake_juliacall.Main.SciMLBenchJL.built
    assert built["names"] == ("Tsit5-fixed", "forward_diff")
    assert built["step"] == ("float32", 0.5)
    assert case.prepare(np.array([0.5, 0.2])).values.dtype == np.float32  # case_params: T
    assert case.info["dtype"] == "float32" and "adaptive = false" in case.info["fixed_step"]
    _, _, case = build(fake_juliacall)  # adaptive, float64: dt 0
    assert fake_juliacall.Main.SciMLBenchJL.built["step"] == ("float64", 0.0)


def test_julia_fixed_step_needs_dt_and_fits_the_step_bound(fake_juliacall):
    from sciml_bench.measure.status import SolverFailure

    with pytest.raises(ValueError, match="needs a step dt"):
        build(fake_juliacall, solver="Tsit5-fixed")
    with pytest.raises(ValueError, match="adaptive"):
        build(fake_juliacall, solver="Tsit5", dt=0.5)
    with pytest.raises(SolverFailure) as info:  # 5 / 1e-3 = 5000 steps > max_steps 1000
        build(fake_juliacall, solver="Tsit5-fixed", dt=1e-3)
    assert info.value.status is Status.MAX_STEPS and "5000 steps" in info.value.reason


# --- the model in log θ (parameters in the gradient's scale) --------------------------------

#: every shipped problem, and the grid of every array operator (ARRAY_OPERATORS)
def _without_events(stem: str) -> bool:
    from sciml_bench.problem import spec

    return not spec.load(stem).events


#: every shipped problem Julia runs (one with events: a refusal, tests/test_events.py)
MODEL_NAMES = sorted([*(p.stem for p in (ROOT / "problems").glob("*.toml")
                        if _without_events(p.stem)), "operators"])  # fmt: skip


def load_model(name: str):
    from sciml_bench.problem import spec

    return spec.loads(ARRAY_OPERATORS, "grid.toml") if name == "operators" else spec.load(name)


def test_robertson_model_reads_exp_of_log_rates():
    """Each rate is bound as exp of what p holds (p is log k), and the header says so."""
    src = generated_rhs()
    assert re.findall(r"^ {8}(p_\w+) = (.+)$", src, re.M) == [
        ("p_k1", "exp(p[1])"), ("p_k2", "exp(p[2])"), ("p_k3", "exp(p[3])")]  # fmt: skip
    assert "# p holds log(k1), log(k2), log(k3), the scale the gradient is taken in" in src
    assert src.index("# p holds") < src.index("function rhs!")  # outside the body


def test_array_models_read_exp_of_log_parameters():
    """An array problem's scalar parameter is exp of its entry, a per-element one exp. of
    its reshaped slice (one flag per parameter)."""
    from sciml_bench.problem import codegen, spec

    groups = codegen.generate(spec.at_size(spec.load("stiff-robertson-groups"), 4), "julia")
    assert re.findall(r"^ {4}(p_k\d) = (.+)$", groups, re.M) == [
        ("p_k1", "exp(p[1])"), ("p_k2", "exp(p[2])"), ("p_k3", "exp(p[3])")]  # fmt: skip
    grid = codegen.generate(load_model("operators"), "julia")
    assert "    p_c = exp(p[1])\n" in grid
    assert "    p_D = exp.(reshape(view(p, 2:21), 4, 5))\n" in grid  # D: 20 values, grid 5x4
    assert syntax_errors(grid.encode()) == []


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_generated_model_takes_log_theta_where_log_scaled_says(name: str):
    """The model reads exp of exactly the parameters log_scaled marks (an ensemble
    problem's: none, its members' θ .* s .+ a are natural units), and its θ form
    (theta_source, what ensembles and training run) is codegen's own text without logs."""
    from sciml_bench.problem import codegen
    from sciml_bench.problem.compiled import log_scaled

    p = load_model(name)
    src = codegen.generate(p, "julia")
    want = log_scaled(p) if p.ensemble is None else np.zeros(p.n_params, dtype=bool)
    np.testing.assert_array_equal(jb.log_read(src, p.n_params), want)
    theta = codegen.julia_source(p, log=np.zeros(p.n_params, dtype=bool))
    assert jb.theta_source(src) == theta and not jb.log_read(theta, p.n_params).any()
    assert ("exp(p[" in src or "exp.(reshape(view(p," in src) == bool(want.any())
    assert ("# p holds log(" in src) == bool(want.any())


#: Julia's functions in the generated scalar models, as NumPy's
_JULIA_MATH = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh,
               "sin": np.sin, "cos": np.cos, "abs": np.abs}  # fmt: skip


def eval_julia_rhs(src: str, u: np.ndarray, p: np.ndarray, t: float) -> np.ndarray:
    """The generated scalar ``rhs!`` evaluated line by line in Python: 1-based indexing
    and ``^`` transliterated, nothing else (a test of what the text computes)."""
    env: dict = {"u": u, "p": p, "t": t, "du": np.zeros_like(u), **_JULIA_MATH}
    body = src.split("    @inbounds begin\n", 1)[1].split("\n    end\n", 1)[0]
    for line in body.splitlines():
        line = re.sub(r"\b(du|u|p)\[(\d+)\]", lambda m: f"{m[1]}[{int(m[2]) - 1}]", line.strip())
        exec(line.replace("^", "**"), env)  # noqa: S102 (our own generated text)
    return env["du"]


@pytest.mark.parametrize("name", ["stiff-robertson", "stiff-orego", "stiff-hires",
                                  "nonstiff-lotka-volterra"])  # fmt: skip
def test_log_model_computes_the_suites_rhs_at_theta(name: str):
    """Fed u = log θ, the generated Julia model computes the suite's f(y, θ) (the NumPy
    reference's); fed θ it does not (the exp is there), and its θ form fed θ does."""
    from sciml_bench.backends.compiled import model_parameters
    from sciml_bench.problem import codegen, spec
    from sciml_bench.problem.compiled import log_scaled

    p = spec.load(name)
    theta, y = np.asarray(p.theta0, float), np.asarray(p.y0, float) + 0.1
    f = codegen.load_python(codegen.generate(p, "numpy"))["rhs"](0.5, y, theta)
    src = codegen.generate(p, "julia")
    u = model_parameters(theta, log_scaled(p))
    np.testing.assert_allclose(eval_julia_rhs(src, y, u, 0.5), f, rtol=1e-12)
    with np.errstate(over="ignore"):  # exp(3e7): the θ fed where log θ belongs
        assert not np.allclose(eval_julia_rhs(src, y, theta, 0.5), f, rtol=1e-6)
    np.testing.assert_allclose(eval_julia_rhs(jb.theta_source(src), y, theta, 0.5), f,
                               rtol=1e-12)  # fmt: skip


def test_log_case_is_built_at_log_theta0_and_converts_the_gradient(fake_juliacall):
    """Julia is handed u = log θ (p0 and every prepared vector) and returns ∂L/∂u; the case
    returns ∂L/∂θ = (∂L/∂u)/θ through compiled.natural_gradient (a fake ∂L/∂u here)."""
    from sciml_bench.measure.status import SolverFailure

    _, _, case = build(fake_juliacall, log=True)
    jl = fake_juliacall.Main.SciMLBenchJL
    assert "p_k1 = exp(p[1])" in jl.built["src"]
    np.testing.assert_allclose(jl.built["p0"], np.log([0.5, 0.2]), rtol=1e-15)
    theta = np.array([0.4, 3.0e7])
    jl.grad_u = [0.25, -1.0]
    value, grad = case.loss_and_grad(theta)
    np.testing.assert_allclose(jl.case_params_in, np.log(theta), rtol=1e-15)
    assert value == 1.5
    np.testing.assert_allclose(grad, [0.25 / 0.4, -1.0 / 3.0e7], rtol=1e-14)
    assert case.info["parameter_scale"] == "log θ for 2 of 2 parameters (the model computes exp)"
    with pytest.raises(SolverFailure) as info:  # log θ does not exist
        case.prepare(np.array([-1.0, 0.2]))
    assert info.value.status is Status.ERROR and "takes its log" in info.value.reason


def test_mixed_and_float32_cases_convert_at_the_models_own_u(fake_juliacall):
    """Only the parameters in log space are divided by θ; under float32 the chain rule is
    taken at u rounded to Float32, the point the model computed exp at."""
    from sciml_bench.backends.base import CaseOptions

    backend = jb.JuliaBackend()
    case = backend.build(compiled(log=(True, False)),
                         CaseOptions("Rodas5P", "forward_diff", 1e-6, 1e-9, 1000))  # fmt: skip
    jl = fake_juliacall.Main.SciMLBenchJL
    np.testing.assert_allclose(jl.built["p0"], [np.log(0.5), 0.2], rtol=1e-15)
    jl.grad_u = [2.0, 3.0]
    _, grad = case.loss_and_grad(np.array([0.5, 0.2]))
    np.testing.assert_allclose(grad, [4.0, 3.0], rtol=1e-15)
    case = backend.build(compiled(log=True), CaseOptions("Rodas5P", "forward_diff", 1e-6, 1e-9,
                                                         1000, dtype="float32"))  # fmt: skip
    params = case.prepare(np.array([0.3, 3.0e7]))
    u32 = np.log([0.3, 3.0e7]).astype(np.float32)
    assert params.values.dtype == np.float32 and params.u.tolist() == u32.astype(float).tolist()
    _, grad = case.loss_and_grad(np.array([0.3, 3.0e7]))
    np.testing.assert_allclose(grad, [2.0, 3.0] * np.exp(-u32.astype(float)), rtol=1e-15)


def test_training_and_ensembles_run_the_theta_form(fake_juliacall):
    """Optimisers.jl updates θ and ensemble members are θ .* s .+ a: both are handed the
    model's θ form (no exp) at θ0, whatever the single case runs."""
    from sciml_bench.problem import codegen, spec
    from sciml_bench.problem.ensemble import Batch
    from sciml_bench.problem.training import Adam

    theta_src = codegen.julia_source(spec.loads(TOY), log=(False, False))
    backend = jb.JuliaBackend()
    loop = backend.build_training(compiled(log=True), options(solver="Rodas5P"),
                                  Adam(0.1, 0.9, 0.999, 1e-8))  # fmt: skip
    jl = fake_juliacall.Main.SciMLBenchJL
    assert jl.built["src"] == theta_src and jl.built["p0"].tolist() == [0.5, 0.2]
    assert loop.info["parameter_scale"] == "θ for all 2 parameters"
    n = 3
    batch = Batch(np.tile([1.0, 0.0, 0.0], (n, 1)), np.ones((n, 2)), np.zeros((n, 2)), None)
    backend.build_ensemble(compiled(log=True), options(), batch, "independent")
    assert jl.ensemble["src"] == theta_src and jl.ensemble["theta0"].tolist() == [0.5, 0.2]


def test_a_model_disagreeing_with_log_params_is_refused(fake_juliacall):
    """The chain rule is applied where log_scaled says; a model reading exp elsewhere is
    an error at build, never a silently wrong gradient."""
    problem = compiled(log=True)
    problem.log_params = np.array([True, False])
    with pytest.raises(ValueError, match=r"takes log θ for parameters \[0, 1\], but the "
                                         r"problem's log_params say \[0\]"):  # fmt: skip
        jb.JuliaBackend().build(problem, options(solver="Rodas5P"))
