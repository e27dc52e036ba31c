"""The AMICI backend, with the real library: a real SBML import and C++ compile.

One compile serves the file (the tests that need it are ``slow``: they wait for a real
worker's C++ compile, about 20 s here): a real ``sciml-bench run stiff-robertson -b amici --quick``
compiles the model cold into a cache folder (its row must show the compile in its time
to first gradient), and the in-process cases load that compiled model from the cache.
AMICI's −llh gradient against the suite's reference gradient, forward against adjoint,
the loss from the likelihood against the loss from the solution, an array problem (one
rate rule per element, KLU) against its reference gradient, and the refusals: a loss
AMICI's likelihood cannot state, and AMICI not installed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sciml_bench import backends
from sciml_bench.backends.base import CaseOptions, ProblemNotExpressible
from sciml_bench.measure import metrics
from sciml_bench.problem import codegen, reference, spec
from sciml_bench.problem.generated import not_expressible
from sciml_bench.results import store

AMICI_MISSING = importlib.util.find_spec("amici") is None
needs_amici = pytest.mark.skipif(
    AMICI_MISSING, reason="amici is not installed: pip install -c constraints.txt -e '.[amici]'"
)
needs_libsbml = pytest.mark.skipif(
    importlib.util.find_spec("libsbml") is None,
    reason="python-libsbml is not installed: pip install -c constraints.txt -e '.[sbml]'",
)
CACHE_VAR = "SCIML_BENCH_AMICI_CACHE"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh compiled-model cache for this file, set for this process and its workers."""
    folder = tmp_path_factory.mktemp("amici-cache")
    before = os.environ.get(CACHE_VAR)
    os.environ[CACHE_VAR] = str(folder)
    yield folder
    if before is None:
        os.environ.pop(CACHE_VAR, None)
    else:
        os.environ[CACHE_VAR] = before


@pytest.fixture(scope="module")
def row(cache: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The row of a real ``run stiff-robertson -b amici --quick``: a fresh worker, the model
    compiled cold (the cache is empty) and left in the cache for the cases below."""
    out = tmp_path_factory.mktemp("results")
    r = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "run", "stiff-robertson", "-b", "amici",
         "--quick", "--json", "--out", str(out), "--threads", "2"],
        capture_output=True, text=True, timeout=600, env=dict(os.environ),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert [x["backend"] for x in json.loads(r.stdout) if x.get("kind") != "verdict"] == ["amici"]
    (path,) = out.glob("*.h5")
    (found,) = [x for x in store.read(path).records if x.get("kind") == "ode"]
    return dict(found)


@pytest.fixture(scope="module")
def problem() -> tuple[Any, reference.Reference]:
    p = spec.load("stiff-robertson")
    ref = reference.get(p)
    return reference.compile_problem(p, ref, sbml=True), ref


@pytest.fixture(scope="module")
def robertson(row: dict[str, Any], problem) -> tuple[Any, reference.Reference]:
    """stiff-robertson once the run has left its compiled model in the cache."""
    return problem


def _case(problem: Any, method: str) -> Any:
    return backends.get("amici").build(
        problem, CaseOptions("BDF", method, problem.rtol, problem.atol, problem.max_steps)
    )


@pytest.mark.slow
@needs_amici
def test_a_quick_run_row_is_ok_with_a_tier_and_the_compile_in_its_build(row) -> None:
    assert row["status"] == "ok", row["reason"]
    assert row["gradient_tier"] == "pass" and row["gradient_method"] == "forward"
    assert row["solver"] == "BDF"
    info, detail = row["case_info"], row["ttfg_detail"]
    assert info["model_source"] == "compiled"  # cold: the cache was empty
    assert row["model_sources"] == ["compiled"]
    assert info["linear_solver"].startswith("dense")
    assert info["conservation_laws"] == "reduction on (AMICI's default); 0 found"
    assert info["parameter_scale"] == "AMICI ParameterScaling ln (log θ) for 3 of 3 parameters"
    # the build phase holds the code generation and the C++ compile, timed
    assert {"sbml_import", "codegen", "cxx_compile", "model_load"} <= set(detail)
    build = row["phases"][0][1]  # import, build, first solve, first gradient
    assert 1.0 < detail["cxx_compile"] < build < row["ttfg_s"]
    assert 100 < row["steps"] < row["max_steps"]


@pytest.mark.slow
@needs_amici
def test_minus_llh_gradient_is_the_suites_loss_gradient(robertson) -> None:
    """AMICI's −∇llh (σ = 1/√(2W), ``ln`` parameters) against the suite's reference
    gradient, judged as a row is: inside the pass tier (measured 2.2e-6 forward, 1.2e-5
    adjoint, norm-wise). The loss −llh − K equals the loss of AMICI's own solution: to
    rounding where the trajectory is the solve's (the adjoint's forward pass), to the
    solve's error where the sensitivities join the error test and move the steps
    (forward: 1.5e-5)."""
    problem, ref = robertson
    for method, bound, same in (("forward", 2e-5, 1e-4), ("adjoint", metrics.PASS_TOL, 1e-10)):
        case = _case(problem, method)
        assert case.info["model_source"] == "cache"  # the run's compile, not another one
        loss, grad = case.loss_and_grad(problem.theta0)
        err = metrics.gradient_error(grad, np.asarray(ref.gradient), problem.theta0,
                                     problem.log_params)  # fmt: skip
        assert err["rel"] < bound, (method, err)
        assert loss == pytest.approx(ref.loss, rel=1e-4)
        y = case.solve(problem.theta0).y
        assert loss == pytest.approx(problem.loss_numpy(y), rel=same)


@pytest.mark.slow
@needs_amici
def test_a_parameter_on_the_linear_scale_gives_the_same_gradient(robertson) -> None:
    """k2 left on AMICI's ``none`` scale (the others ``ln``): the same compiled model (the
    scale is set at run time) and still ∂L/∂θ in natural units (measured 4.6e-6)."""
    problem, ref = robertson
    mixed = dataclasses.replace(problem, log_params=np.array([True, False, True]))
    case = _case(mixed, "forward")
    assert case.info["parameter_scale"].endswith("2 of 3 parameters, none (linear) for the other 1")
    assert case.info["model_source"] == "cache"
    grad = case.loss_and_grad(problem.theta0)[1]
    err = metrics.gradient_error(grad, np.asarray(ref.gradient), problem.theta0, problem.log_params)
    assert err["rel"] < 2e-5


@pytest.mark.slow
@needs_amici
def test_forward_and_adjoint_agree(robertson) -> None:
    problem, _ = robertson
    fwd, adj = (_case(problem, m).loss_and_grad(problem.theta0)[1] * problem.theta0
                for m in ("forward", "adjoint"))  # fmt: skip
    assert np.max(np.abs(fwd - adj)) < 1e-4 * np.max(np.abs(adj))


@needs_amici
def test_a_loss_amici_cannot_state_is_refused_with_the_reason(problem) -> None:
    """A ``final`` loss (``Σ C·y``, no Gaussian likelihood) never reaches AMICI."""
    problem, _ = problem
    final = dataclasses.replace(problem, loss_W=np.zeros_like(problem.loss_W),
                                loss_C=np.ones_like(problem.loss_C))  # fmt: skip
    with pytest.raises(ProblemNotExpressible, match="linear term Σ C·y"):
        _case(final, "forward")


@needs_libsbml
def test_the_sbml_target_is_rate_rules_one_per_element_of_an_array() -> None:
    src = codegen.generate(spec.load("stiff-robertson"), "sbml")
    assert not_expressible(src) is None
    assert src.count("<rateRule") == 3 and src.count('constant="true"') == 3
    groups = spec.at_size(spec.load("stiff-robertson-groups"), 2)
    src = codegen.generate(groups, "sbml")
    assert not_expressible(src) is None
    assert src.count("<rateRule") == 6 and src.count('constant="true"') == 3
    assert '<rateRule variable="y3_1">' in src


@pytest.mark.slow
@needs_amici
def test_an_array_problem_runs_with_klu_and_its_gradient_passes(cache: Path) -> None:
    """stiff-robertson-groups at n = 2 (6 rate rules, shared k1..k3) with the sparse
    Jacobian kind: KLU, and ∂L/∂θ inside the pass tier against the reference."""
    p = spec.at_size(spec.load("stiff-robertson-groups"), 2)
    ref = reference.get(p)
    problem = reference.compile_problem(p, ref, sbml=True)
    case = backends.get("amici").build(problem, CaseOptions(
        "BDF", "forward", problem.rtol, problem.atol, problem.max_steps,
        extra={"jacobian": "sparse"}))  # fmt: skip
    assert case.info["linear_solver"].startswith("KLU")
    assert case.info["observables"][:2] == ["y1_0", "y2_0"]
    loss, grad = case.loss_and_grad(problem.theta0)
    err = metrics.gradient_error(grad, np.asarray(ref.gradient), problem.theta0,
                                 problem.log_params)  # fmt: skip
    assert err["rel"] < metrics.PASS_TOL, err
    assert loss == pytest.approx(ref.loss, rel=1e-4)


@needs_libsbml
def test_the_sbml_model_is_made_only_when_asked() -> None:
    """``compile_problem`` writes the SBML model only with ``sbml=True`` (a run with AMICI
    among its backends, ``codegen --backend amici``): at 20,000 states it costs seconds of
    every run's start. Without it, AMICI's case says what was missing, not a KeyError."""
    from sciml_bench.backends.compiled import expressible_source

    p = spec.load("stiff-robertson")
    obs = np.full((len(p.t_save), p.n_state), 0.5)
    plain = reference.compile_problem(p, None, obs)
    assert sorted(plain.source) == sorted(set(codegen.targets(p)) - {"sbml"})
    with pytest.raises(RuntimeError, match="compiled without its sbml source"):
        expressible_source("amici", plain, "sbml")
    full = reference.compile_problem(p, None, obs, sbml=True)
    assert full.source["sbml"] == codegen.generate(p, "sbml")
    assert {t: s for t, s in full.source.items() if t != "sbml"} == plain.source


def test_without_amici_the_backend_is_unavailable_with_the_fix(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "amici" else real(name, *a))  # fmt: skip
    found = backends.get("amici").availability()
    assert not found.ok and "amici" in found.reason
    assert found.fix == "pip install -c constraints.txt -e '.[amici]'"


@pytest.mark.slow
@needs_amici
def test_the_printed_program_prints_what_the_case_computes(robertson, tmp_path: Path) -> None:
    """``codegen --backend amici``'s program, run in a fresh process (its own C++ compile),
    prints the solution, loss and gradient of the backend's case to 1e-10; a problem with
    no SBML prints no program, only why."""
    from sciml_bench.backends import program as prog

    problem, _ = robertson
    options = CaseOptions("BDF", "forward", problem.rtol, problem.atol, problem.max_steps)
    path = tmp_path / "case.py"
    path.write_text(prog.program(problem, "amici", options, "test"))
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = prog.parse_output(r.stdout)
    case = _case(problem, "forward")
    theta = problem.theta0
    assert np.max(np.abs(out["y"] - case.solve(theta).y)) <= 1e-10 * np.max(np.abs(out["y"]))
    loss, grad = case.loss_and_grad(theta)
    assert abs(out["loss"] - loss) <= 1e-10 * abs(loss)
    assert np.max(np.abs(out["gradient"] - grad)) <= 1e-10 * np.max(np.abs(grad))
    # a neural ODE has no SBML form (networks are refused): no program, only why
    n = spec.load("nonstiff-spiral-node")
    node = reference.compile_problem(n, None, np.zeros((len(n.t_save), n.n_state)), sbml=True)
    text = prog.program(node, "amici", options, "test")
    assert text.startswith("# sciml-bench: amici runs no program for nonstiff-spiral-node")


def test_a_row_whose_model_came_from_the_cache_says_so_under_its_table() -> None:
    from sciml_bench.results.table import reference_notes

    rows = [
        {"backend": "amici", "gradient_method": "forward",
         "model_sources": ["compiled", "cache", "cache"]},
        {"backend": "amici", "gradient_method": "adjoint", "model_sources": ["compiled"]},
    ]  # fmt: skip
    notes = [n for n in reference_notes(rows) if n.startswith("TTFG (cache)")]
    assert notes == ["TTFG (cache): amici forward: 2 of 3 cold process(es) loaded the compiled "
                     "model from the cache, with no code generation or compile in their build"]
    rows[0]["ttfg_cached_samples"] = [1.21, 1.19]
    assert reference_notes(rows)[-1].endswith(
        "; the TTFG shown is the compiling process(es)', the loads took 1.21 s, 1.19 s")


def test_a_rows_ttfg_is_its_compiling_processes_where_others_loaded_the_cache() -> None:
    """A ladder's cheap rung: the first process compiled AMICI's model (13 s), the other two
    loaded it from the run's cache (1.2 s): the row's TTFG is the compile's, the loads kept
    beside it; a failed process has no TTFG; all compiled (or all loaded) keeps every one."""
    from sciml_bench.run.jobs import Process
    from sciml_bench.run.ode import compiled_ttfg

    def proc(source: str, ttfg: float | None, status: str = "ok") -> Process:
        events = [{"case_info": {"model_source": source}}]
        return Process(events + ([{"ttfg_s": ttfg}] if ttfg is not None else []), status, "")

    runs = [proc("compiled", 13.0), proc("cache", 1.2), proc("cache", 1.3)]
    assert compiled_ttfg(runs, [13.0, 1.2, 1.3]) == ([13.0], [1.2, 1.3])
    failed = [proc("compiled", None, "crashed"), proc("cache", 1.2), proc("cache", 1.3)]
    assert compiled_ttfg(failed, [1.2, 1.3]) == ([1.2, 1.3], [])
    built = [proc("compiled", 13.0), proc("compiled", 12.5)]
    assert compiled_ttfg(built, [13.0, 12.5]) == ([13.0, 12.5], [])
