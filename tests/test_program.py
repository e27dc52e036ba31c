"""`sciml-bench codegen` prints the whole program a case runs (issue 25, item 2): built from
the worker's own functions, runnable, and printing what the backend's own case computes."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from sciml_bench import backends
from sciml_bench.backends import program as prog
from sciml_bench.cli.main import main
from sciml_bench.problem import codegen, reference, spec
from sciml_bench.run import runner
from sciml_bench.run.ode import case_options

DATA = Path(__file__).parent / "data"
TINY = DATA / "train-tiny.toml"  # a fit loss, a tanh network and a named parameter
DECAY = str(DATA / "decay.toml")


def _case(path: Path, backend: str, solver: str = "", gradient: str = "") -> tuple[Any, Any]:
    """The compiled problem (made-up observations: no reference needed) and the options
    the runner's plan gives ``backend``, as the worker reads them from its job."""
    p = spec.load(path)
    obs = np.linspace(0.2, 0.8, len(p.t_save) * p.n_state).reshape(len(p.t_save), p.n_state)
    ref = reference.missing(p, "not needed here", obs.tolist())
    compiled = reference.compile_problem(p, ref)
    case = runner.plan(compiled, [backend], [solver] if solver else (),
                       [gradient] if gradient else ())[0]  # fmt: skip
    return compiled, case_options(runner.case_job(case, compiled, ref, runner.Settings()))


def _run_program(text: str, tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "case.py"
    path.write_text(text)
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return prog.parse_output(r.stdout)


def _constants(text: str) -> dict[str, Any]:
    """The program's header, ``NAME = literal`` at module level, read without running it."""
    return {node.targets[0].id: ast.literal_eval(node.value)
            for node in ast.parse(text).body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id.isupper()}  # fmt: skip


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def test_the_program_is_the_workers_own_source_and_settings() -> None:
    from sciml_bench.backends import diffrax

    compiled, options = _case(TINY, "diffrax", solver="Kvaerno4")
    text = prog.program(compiled, "diffrax", options, "sciml-bench codegen x")
    compile(text, "<program>", "exec")  # valid Python
    # the function the case calls, verbatim, and the vector field the worker loads
    assert inspect.getsource(diffrax.compiled_calls) in text
    assert compiled.source["jax"] in text
    # self-contained: it never imports the suite
    assert not [ln for ln in text.splitlines()
                if ln.lstrip().startswith(("import sciml_bench", "from sciml_bench"))]  # fmt: skip
    # the settings the case computes: the stiff solver's PI coefficients included
    settings = diffrax.case_settings(compiled, options)
    assert settings["controller"] == {"rtol": 1e-6, "atol": 1e-8, "pcoeff": 0.3, "icoeff": 0.3}
    ns = _constants(text)
    assert ns["SETTINGS"] == settings
    assert ns["THETA"] == compiled.theta0.tolist()  # every bit (repr round-trips)
    assert np.array_equal(ns["LOSS_O"], compiled.loss_O)
    assert ns["T_SAVE"] == compiled.t_save.tolist()


def test_codegen_command_picks_the_case_and_refuses_bad_names() -> None:
    cli = CliRunner()
    r = cli.invoke(main, ["codegen", "--problem-file", DECAY, "--target", "jax"])
    assert r.exit_code == 0, r.output
    assert "SETTINGS = {'solver': 'Tsit5'" in r.stdout  # diffrax's non-stiff default
    assert "'adjoint': 'RecursiveCheckpointAdjoint'" in r.stdout
    assert "--backend diffrax --solver Tsit5 --gradient RecursiveCheckpointAdjoint" in r.stdout
    r = cli.invoke(main, ["codegen", "--problem-file", DECAY, "--backend", "diffrax",
                          "--solver", "Kvaerno5", "--gradient", "DirectAdjoint"])  # fmt: skip
    assert "'solver': 'Kvaerno5'" in r.stdout and "'adjoint': 'DirectAdjoint'" in r.stdout
    # the vector field alone, as before
    r = cli.invoke(main, ["codegen", "--problem-file", DECAY, "--target", "jax", "--rhs-only"])
    assert r.stdout == codegen.generate(spec.load(DECAY), "jax")
    # a backend without a whole program yet says so, then gives its vector field
    r = cli.invoke(main, ["codegen", "--problem-file", DECAY, "--backend", "torchode"])
    assert r.exit_code == 0 and r.stdout.startswith(f"{prog.NOT_YET} torchode yet")
    assert codegen.generate(spec.load(DECAY), "torch") in r.stdout
    r = cli.invoke(main, ["codegen", "ensemble-lorenz", "--target", "jax"])
    assert r.exit_code == 2 and "ensemble-lorenz is an ensemble" in r.output
    for args, says in (
        (["--target", "jax", "--backend", "torchdiffeq"], "--backend torchdiffeq runs the torch"),
        (["--target", "jax", "--solver", "dopri5"], "--solver 'dopri5' is offered by none of diffrax"),
        (["--backend", "nope"], "unknown backend 'nope'"),
        (["--rhs-only", "--solver", "Tsit5"], "--rhs-only prints the vector field alone"),
    ):  # fmt: skip
        r = cli.invoke(main, ["codegen", "--problem-file", DECAY, *args])
        assert r.exit_code == 2 and says in r.output, (args, r.output)


@pytest.mark.parametrize(("backend", "module"), [
    pytest.param("diffrax", "diffrax", marks=pytest.mark.slow),
    pytest.param("torchdiffeq", "torchdiffeq", marks=pytest.mark.slow),
    pytest.param("scipy", "scipy"),
    pytest.param("cvodes", "casadi"),
    pytest.param("diffsol", "pydiffsol"),
])  # fmt: skip
def test_the_printed_program_prints_what_the_backends_case_computes(
    backend: str, module: str, tmp_path: Path
) -> None:
    """The program, run in a fresh process, prints the solution, loss and gradient of the
    backend's own case (built here, as the worker builds it) to 1e-10."""
    pytest.importorskip(module, reason=f"{module} is not installed")
    compiled, options = _case(TINY, backend)
    out = _run_program(prog.program(compiled, backend, options, "test"), tmp_path)
    b = backends.get(backend)
    case = b.build(compiled, options)
    theta = compiled.theta0
    assert np.array_equal(out["t"], compiled.t_save)
    assert _rel(out["y"], case.solve(theta).y) < 1e-10
    if not b.differentiable:
        assert out["loss"] is None and out["gradient"] is None
        return
    loss, grad = case.loss_and_grad(theta)
    assert abs(out["loss"] - loss) <= 1e-10 * abs(loss)
    assert _rel(out["gradient"], grad) < 1e-10


def test_diffsol_program_of_an_array_problem_prints_the_suite_layout(tmp_path: Path) -> None:
    """ROBER's groups (n = 2) on faer_sparse: the program reorders the array model's state
    (stored state by state) to the suite's layout, as the case does, to 1e-10."""
    pytest.importorskip("pydiffsol", reason="pydiffsol is not installed")
    from dataclasses import replace

    p = spec.at_size(spec.load("stiff-robertson-groups"), 2)
    obs = np.linspace(0.2, 0.8, len(p.t_save) * p.n_state).reshape(len(p.t_save), p.n_state)
    ref = reference.missing(p, "not needed here", obs.tolist())
    compiled = reference.compile_problem(p, ref)
    case = runner.plan(compiled, ["diffsol"], (), ("adjoint",))[0]
    options = case_options(runner.case_job(case, compiled, ref, runner.Settings()))
    options = replace(options, extra={**options.extra, "jacobian": "sparse"})
    text = prog.program(compiled, "diffsol", options, "test")
    assert _constants(text)["SETTINGS"]["layout"] == [3, 2]
    out = _run_program(text, tmp_path)
    c = backends.get("diffsol").build(compiled, options)
    assert c.info["matrix_type"] == "faer_sparse"
    y = c.solve(compiled.theta0).y
    assert _rel(out["y"], y) < 1e-10 and y[-1, 0] == pytest.approx(y[-1, 3])  # y1 of both groups
    loss, grad = c.loss_and_grad(compiled.theta0)
    assert abs(out["loss"] - loss) <= 1e-10 * abs(loss) and _rel(out["gradient"], grad) < 1e-10
