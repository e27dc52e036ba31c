"""A run's plan, made by the run layer from the parsed options (issue 54): what each
problem is compiled with is what the planned backends declare they read
(``Backend.sources``), so a run without AMICI writes no SBML model and compiles no AMICI
module; the plan's refusals are the run layer's one-line errors. No worker starts here."""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from sciml_bench import backends
from sciml_bench.backends.base import CaseOptions
from sciml_bench.backends.program import BACKEND_TARGET, sources_of
from sciml_bench.cli.main import main
from sciml_bench.problem import codegen, reference, spec
from sciml_bench.results import store
from sciml_bench.run import cases, runner
from sciml_bench.run.execute import execute
from sciml_bench.run.options import RunError, RunOptions
from sciml_bench.run.plan import make_plan


def options(**given: Any) -> RunOptions:
    """``run``'s options as click would parse ``given`` (every other one at its default)."""
    base: dict[str, Any] = {f.name: None for f in fields(RunOptions)}
    base.update(problems=(), problem_files=(), backend_names=(), solvers=(), gradients=(),
                sweep=False, quick=True, out="results", refresh_reference=False,
                dataset="synthetic", as_json=False, jacobians=(), train=False,
                executor="local", dask=None, sbml_files=(), sbml_check=True, pin=True)  # fmt: skip
    base.update(given)
    return RunOptions(**base)


def _amici_cache() -> set[str]:
    """Everything under AMICI's compiled-model cache (tests/conftest.py sets the folder)."""
    root = Path(os.environ["SCIML_BENCH_AMICI_CACHE"])
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_a_diffsol_run_writes_no_sbml_and_compiles_no_amici_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run stiff-robertson -b diffsol --quick``, planned and carried out up to its cases
    (the runner that would start the workers is replaced by one that keeps what it is
    given): the compiled problem holds DiffSL and NumPy, no SBML model, and AMICI's model
    cache gains nothing."""
    given: list[tuple[Any, list[Any]]] = []

    def keep(compiled: Any, ref: Any, planned: Any, *rest: Any, **kw: Any) -> list[Any]:
        given.append((compiled, list(planned)))
        return []

    monkeypatch.setattr(runner, "run", keep)
    before = _amici_cache()
    said: list[str] = []
    plan = make_plan(options(problems=("stiff-robertson",), backend_names=("diffsol",),
                             out=str(tmp_path)), said.append)  # fmt: skip
    assert plan.backend_names == ["diffsol"] and plan.sources == ("diffsl",)
    records, path = execute(plan, said.append)
    (compiled, planned), = given
    assert sorted(compiled.source) == ["diffsl", "numpy"]
    assert "sbml" not in compiled.source and "sbml_model" not in compiled.source
    assert compiled.sbml_map is None
    assert {c.backend for c in planned} == {"diffsol"}  # no AMICI case could be built
    assert _amici_cache() == before
    assert records == [] and store.read(path).meta["status"] == "complete"
    assert said[0] == f"results: {path}" and said[1] == "reference for stiff-robertson ..."


@pytest.mark.parametrize(("names", "read"), [
    (["amici"], {"sbml", "numpy"}),
    (["diffrax", "torchode"], {"jax", "torch", "numpy"}),
    (["julia"], {"julia", "numpy"}),  # Julia reads NumPy's sparse pattern too
])  # fmt: skip
def test_each_run_compiles_what_its_backends_declare(names: list[str], read: set[str]) -> None:
    """The plan's sources are the planned backends' declarations, and the compiled problem
    holds those (NumPy's always: the bundle's array facts read it); SBML, and a model's own
    SBML text, only where AMICI is planned."""
    p = spec.load("stiff-robertson")
    plan = make_plan(options(problems=("stiff-robertson",), backend_names=tuple(names)),
                     lambda line: None)  # fmt: skip
    compiled = plan.compile(p, None, np.full((len(p.t_save), p.n_state), 0.5))
    assert set(compiled.source) == read
    if "sbml" in read:
        assert compiled.source["sbml"] == codegen.generate(p, "sbml")


def test_every_backend_gets_the_source_it_reads() -> None:
    """Each registered backend's declaration names its own target; a run of all of them
    compiles every target, as before the declarations; a backend that declares its
    sources (as a new SBML backend would, outside BACKEND_TARGET) is read from the class."""
    for name in backends.names():
        declared = sources_of(backends.get(name))
        assert declared is not None and BACKEND_TARGET[name] in declared, name
    assert sources_of(backends.get("amici")) == ("sbml",)
    p = spec.load("stiff-robertson")
    every = cases.sources_read(backends.names())
    assert every is not None
    assert reference.source_targets(p, sources=every) == codegen.targets(p)

    class Declared:
        name, sources = "sbml-reader", ("sbml",)

    class Silent:
        name, sources = "unknown-library", ()

    assert sources_of(Declared()) == ("sbml",)  # type: ignore[arg-type]
    assert sources_of(Silent()) is None  # type: ignore[arg-type]
    assert reference.source_targets(p) == tuple(t for t in codegen.targets(p) if t != "sbml")


@pytest.mark.parametrize("name", ["scipy", "cvodes", "diffsol"])
def test_a_case_builds_and_solves_from_only_its_declared_sources(name: str) -> None:
    """What a worker receives is enough: a case built from a problem compiled with its
    backend's sources alone solves (the in-process part of a worker, no process)."""
    b = backends.get(name)
    if not b.availability().ok:
        pytest.skip(f"{name} is not installed here")
    p = spec.load("stiff-robertson")
    compiled = reference.compile_problem(p, None, np.full((len(p.t_save), p.n_state), 0.5),
                                         sources=cases.sources_read([name]))  # fmt: skip
    opts = CaseOptions(b.default_solver(True), b.default_gradient(compiled), compiled.rtol,
                       compiled.atol, compiled.max_steps)  # fmt: skip
    solution = b.build(compiled, opts).solve(compiled.theta0)
    assert np.all(np.isfinite(solution.y)) and solution.y.shape == (len(p.t_save), p.n_state)


def test_the_plans_refusals_are_one_line_errors_of_the_run_layer() -> None:
    """The run layer raises its own error (no click below the command line); ``run``
    shows it as before: one line, exit code 2."""
    with pytest.raises(RunError, match="unknown backend 'nope'"):
        make_plan(options(problems=("stiff-robertson",), backend_names=("nope",)),
                  lambda line: None)  # fmt: skip
    r = CliRunner().invoke(main, ["run", "stiff-robertson", "-b", "nope"])
    assert r.exit_code == 2 and "Error: unknown backend 'nope'; choose from scipy" in r.output
    r = CliRunner().invoke(main, ["run", "stiff-robertson", "-b", "scipy", "--jacobian", "dense"])
    assert r.exit_code == 2 and "--jacobian applies to array problems" in r.output


def test_a_plan_notes_what_applies_to_some_targets_through_say() -> None:
    said: list[str] = []
    make_plan(options(problems=("stiff-robertson", "ensemble-lorenz"), backend_names=("scipy",),
                      solvers=(), sizes="1", quick=True), said.append)  # fmt: skip
    assert said == ["note: --sizes applies to problems with an [ensemble] section (e.g. "
                    "ensemble-lorenz) or array problems with [sizes] (e.g. "
                    "stiff-robertson-groups); stiff-robertson run(s) without it"]
