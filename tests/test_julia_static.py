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

#: UUIDs as the General registry has them (JuliaRegistries/General, <L>/<Name>/Package.toml;
#: SciMLBase's from its own Project.toml and its dependents'). A typo here or in
#: Project.toml makes `Pkg.instantiate` fail on a machine we cannot test on.
REGISTRY_UUIDS = {
    "ChainRulesCore": "d360d2e6-b24c-11e9-a2a3-2a2ae2dbcce4",
    "Enzyme": "7da242da-08ed-463a-9acd-ee780be4f1d9",
    "ForwardDiff": "f6369f11-7733-5829-9624-2563aa707210",
    "OrdinaryDiffEq": "1dea7af3-3e70-54e6-95c3-0bf5283fa5ed",
    "OrdinaryDiffEqBDF": "6ad6398a-0878-4a85-9266-38940aa047c8",
    "OrdinaryDiffEqRosenbrock": "43230ef6-c299-4910-a778-202eb28ce4ce",
    "OrdinaryDiffEqSDIRK": "2d112036-d095-4a1e-ab9a-08536f3ecdbf",
    "OrdinaryDiffEqTsit5": "b1df2697-797e-41e3-8120-5422d3b24e4a",
    "OrdinaryDiffEqVerner": "79d7bb75-1356-48c1-b8c0-6832512096c2",
    "PythonCall": "6099a3de-0909-46bc-b1f4-468b9a2dfc0d",
    "ReverseDiff": "37e2e3b7-166d-5795-8a7a-e32c996b4267",
    "SciMLBase": "0bca4576-84f4-4d90-8ffe-ffa030f20462",
    "SciMLSensitivity": "1ed8b502-d754-442c-8d5d-10ac956f44a1",
    "Zygote": "e88e6eb3-aa80-5325-afca-941959d7151f",
}


def julia_files() -> list[Path]:
    files = sorted(JULIA_DIR.rglob("*.jl"))
    assert MODULE in files
    return files


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


# --- the project file ------------------------------------------------------------------


def project() -> dict:
    return tomllib.loads((JULIA_DIR / "Project.toml").read_text())


def test_project_uuids_are_the_registrys():
    proj = project()
    for name, value in proj["deps"].items():
        assert REGISTRY_UUIDS.get(name) == value, f"{name}: {value} is not the registry's UUID"
    assert uuid.UUID(proj["uuid"]).version == 4
    assert proj["name"] == MODULE.stem


def test_project_compat():
    proj = project()
    compat = proj["compat"]
    assert set(proj["deps"]) <= set(compat), "every dependency needs a [compat] entry"
    # juliacall loads PythonCall from this project and requires exactly its own version.
    assert compat["PythonCall"] == "=" + julia_env.JULIACALL_VERSION
    assert compat["julia"] == ".".join(map(str, julia_env.MIN_JULIA))


def test_pinned_juliacall_matches_project():
    # juliacall requires PythonCall at exactly its own version, and Project.toml pins it;
    # the constraints file is where the suite pins what `pip install -c` installs.
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert any(
        s.startswith("juliacall") for s in pyproject["project"]["optional-dependencies"]["julia"]
    )
    pins = (ROOT / "constraints.txt").read_text().split()
    assert f"juliacall=={julia_env.JULIACALL_VERSION}" in pins


def test_module_imports_every_dependency():
    src = MODULE.read_text()
    for name in project()["deps"]:
        if name == "PythonCall":  # loaded by juliacall itself, from this project
            continue
        assert re.search(rf"^(using|import) {name}\b", src, re.M), name


# --- Python and Julia agree ------------------------------------------------------------


def julia_dict_keys(name: str) -> set[str]:
    src = MODULE.read_text()
    block = re.search(rf"const {name} = Dict\{{.*?\n\)\n", src, re.S)
    assert block, name
    return set(re.findall(r'^\s+"(\w+)" =>', block[0], re.M))


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
    # As a runner asks: a new interpreter, the real backend class, a wall-clock budget.
    code = (
        "import json; from sciml_bench.backends.julia import JuliaBackend; "
        "a = JuliaBackend().availability(); print(json.dumps([a.ok, a.reason, a.fix]))"
    )
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, env=os.environ
    )
    elapsed = time.perf_counter() - t0
    assert out.returncode == 0, out.stderr
    ok, reason, fix = json.loads(out.stdout)
    assert not ok and reason and fix
    assert "julia" in reason.lower()
    assert elapsed < 2, f"availability took {elapsed:.2f} s"


def test_probe_bad_explicit_exe(no_julia: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTHON_JULIACALL_EXE", "/nonexistent/julia")
    found = julia_env.probe(need_juliacall=False)
    assert not found.ok and "PYTHON_JULIACALL_EXE" in found.reason


def test_probe_hanging_julia_times_out(no_julia: Path):
    fake_julia(no_julia, "sleep 30\n")
    t0 = time.perf_counter()
    found = julia_env.probe(need_juliacall=False, timeout=0.5)
    assert time.perf_counter() - t0 < 2
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
    assert result.exit_code == 1
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
    assert result.exit_code != 0 and "juliaup" in result.output


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
        weights, _obs, _lin, *names = rest
        self.built = dict(u0=u0, tsave=tsave, W=weights, names=tuple(names), maxiters=maxiters)
        return "case"

    def solve_case(self, case, theta):
        if theta[0] < 0:
            return ([], "MaxIters", 2.5, (7, 1, 60, -1, -1), "")
        y = np.arange(len(self.built["tsave"]) * len(self.built["u0"]), dtype=float)
        return (y.tolist(), "Success", 5.0, (10, 2, 70, 3, 4), "")

    def loss_and_grad_case(self, case, theta):
        if theta[0] < 0:
            return (float("nan"), [], "Exception:DomainError", float("nan"), "log of -1")
        if theta[0] == 0:
            return (1.0, [float("nan"), 0.0], "Success", 5.0, "")
        if theta[0] > 100:
            raise FakeJuliaError("MethodError: no method matching ...")
        return (1.5, [0.25, -1.0], "Success", 5.0, "")


class FakeMain:
    def __init__(self):
        self.SciMLBenchJL = FakeSciMLBenchJL()

    def seval(self, code):
        return {"string(VERSION)": "1.11.2", "Sys.BINDIR": "/fake/bin"}.get(
            code, True if "isprecompiled" in code else None
        )


@pytest.fixture
def fake_juliacall(monkeypatch: pytest.MonkeyPatch):
    import types

    mod = types.ModuleType("juliacall")
    mod.Main = FakeMain()
    mod.JuliaError = FakeJuliaError
    monkeypatch.setitem(sys.modules, "juliacall", mod)
    monkeypatch.setattr(julia_env, "JULIACALL_IMPORT_S", None)
    return mod


def compiled(n_save: int = 4):
    from sciml_bench.problem.compiled import CompiledProblem

    return CompiledProblem(
        name="toy",
        stiff=True,
        state_names=["a", "b", "c"],
        param_names=["k1", "k2"],
        y0=np.array([1.0, 0.0, 0.0]),
        theta0=np.array([0.5, 0.2]),
        log_params=np.array([False, False]),
        t_span=(0.0, 5.0),
        t_save=np.linspace(1.0, 5.0, n_save),
        rtol=1e-6,
        atol=1e-9,
        max_steps=1000,
        loss_W=np.ones((n_save, 3)),
        loss_O=np.zeros((n_save, 3)),
        loss_C=np.zeros((n_save, 3)),
        source={"julia": generated_rhs()},
    )


def build(fake_juliacall, **overrides):
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
    return backend, phases, backend.build(compiled(), CaseOptions(**opts))


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


def test_build_rejects_bad_options(fake_juliacall):
    with pytest.raises(ValueError, match="unknown Julia solver"):
        build(fake_juliacall, solver="dopri5")
    with pytest.raises(ValueError, match="unknown Julia gradient"):
        build(fake_juliacall, gradient_method="backsolve")
