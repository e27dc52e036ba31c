"""libRoadRunner with the real library: the ``roadrunner`` backend and the second interpreter
of a reference (sciml_bench/backends/roadrunner.py, sciml_bench/problem/sbml/).

The SBML is written here (libsbml): species A starts at an initial assignment ``A = 10*kf``,
a parameter ``kf2 = 2*kf`` is assigned from another, A -> B at ``kf2*A``, B -> 0 at
``kd*B``, in a compartment of size 1.5. Its ``still`` twin has the same trajectory at the
file's values with A starting at 3 and R1 at ``2*kf*A`` (no initial assignment). Each is run
as the modeller's own file (``read.load`` keeps it) and as the suite's rate-rule export
(``sbml_model=None``), against the suite's reference: the solution, the moving start, the
gradient where roadrunner's forward sensitivities can be right and its refusal where they
cannot (an initial assignment; a one-state model, whose sensitivity solver does not
integrate), and the second interpreter on the model and on stiff-robertson.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from sciml_bench import backends
from sciml_bench.backends.base import CaseOptions, ProblemNotExpressible
from sciml_bench.problem import reference, spec
from sciml_bench.problem.gradient_measures import judged_scale, norm_error
from sciml_bench.problem.sbml import roadrunner_model, second_interpreter
from sciml_bench.problem.solution_measures import floor_of, solution_error

MISSING = "libroadrunner is not installed (pip install -c constraints.txt -e '.[roadrunner]')"
#: the gradient tier's pass bound, and the rows' solution measure at the problems' rtol 1e-6
GRADIENT_BOUND, SOLUTION_BOUND = 1e-4, 1e-4


def _needs_roadrunner() -> None:
    pytest.importorskip("roadrunner", reason=MISSING)


def _model(path: Path, moving: bool) -> Path:
    """The model of the module docstring; ``moving``: A's start and kf2 assigned from kf."""
    libsbml = pytest.importorskip("libsbml", reason="python-libsbml is not installed "
                                  "(pip install -c constraints.txt -e '.[sbml]')")  # fmt: skip
    doc = libsbml.SBMLDocument(3, 2)
    m = doc.createModel()
    m.setId("moving_start" if moving else "still_start")
    c = m.createCompartment()
    c.setId("cell"), c.setSize(1.5), c.setConstant(True), c.setSpatialDimensions(3)
    for sid, conc in (("A", 1.0 if moving else 3.0), ("B", 0.2)):
        s = m.createSpecies()
        s.setId(sid), s.setCompartment("cell"), s.setInitialConcentration(conc)
        s.setHasOnlySubstanceUnits(False), s.setBoundaryCondition(False), s.setConstant(False)
    for pid, value in (("kf", 0.3), ("kd", 0.5), *((("kf2", 0.0),) if moving else ())):
        p = m.createParameter()
        p.setId(pid), p.setValue(value), p.setConstant(True)
    for symbol, formula in ((("A", "10 * kf"), ("kf2", "2 * kf")) if moving else ()):
        ia = m.createInitialAssignment()
        ia.setSymbol(symbol), ia.setMath(libsbml.parseL3Formula(formula))
    r1 = "cell * kf2 * A" if moving else "cell * 2 * kf * A"
    for rid, reactant, product, law in (("R1", "A", "B", r1), ("R2", "B", None, "cell * kd * B")):
        r = m.createReaction()
        r.setId(rid), r.setReversible(False)
        ref = r.createReactant()
        ref.setSpecies(reactant), ref.setStoichiometry(1), ref.setConstant(True)
        if product:
            ref = r.createProduct()
            ref.setSpecies(product), ref.setStoichiometry(1), ref.setConstant(True)
        r.createKineticLaw().setMath(libsbml.parseL3Formula(law))
    out = path / f"{m.getId()}.xml"
    libsbml.writeSBMLToFile(doc, str(out))
    return out


def _one_state(path: Path) -> Path:
    """A -> 0 at ``cell * k * A`` with ``k`` the reaction's local parameter: one state."""
    import libsbml

    doc = libsbml.SBMLDocument(3, 2)
    m = doc.createModel()
    m.setId("one_state")
    c = m.createCompartment()
    c.setId("cell"), c.setSize(2.0), c.setConstant(True)
    s = m.createSpecies()
    s.setId("A"), s.setCompartment("cell"), s.setInitialConcentration(1.0)
    s.setHasOnlySubstanceUnits(False), s.setBoundaryCondition(False), s.setConstant(False)
    r = m.createReaction()
    r.setId("R1"), r.setReversible(False)
    ref = r.createReactant()
    ref.setSpecies("A"), ref.setStoichiometry(1), ref.setConstant(True)
    law = r.createKineticLaw()
    local = law.createLocalParameter()
    local.setId("k"), local.setValue(0.7)
    law.setMath(libsbml.parseL3Formula("cell * k * A"))
    out = path / "one_state.xml"
    libsbml.writeSBMLToFile(doc, str(out))
    return out


Imported = tuple[Any, Any]  # (problem, reference)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Imported]:
    """The moving and still models (own file), their exports, the one-state model."""
    from sciml_bench.problem.sbml import read

    folder = tmp_path_factory.mktemp("roadrunner")
    out: dict[str, Imported] = {}
    for name, moving in (("moving", True), ("still", False)):
        p = read.load(_model(folder, moving), t_end=4.0, saves=9)
        ref = reference.get(p)
        out[name] = (p, ref)
        out[f"{name}-export"] = (dataclasses.replace(p, sbml_model=None), ref)
    p = read.load(_one_state(folder), t_end=2.0, saves=5)
    out["one-state"] = (p, reference.get(p))
    return out


def _case(problem: Any, ref: Any) -> tuple[Any, Any]:
    """The roadrunner case of ``problem`` at its own tolerances, and its compiled problem."""
    cp = reference.compile_problem(problem, ref, sbml=True)
    options = CaseOptions("BDF", "forward", cp.rtol, cp.atol, cp.max_steps)
    return backends.get("roadrunner").build(cp, options), cp


def _solution_error(y: Any, cp: Any, ref_y: Any) -> float:
    return solution_error(y, np.asarray(ref_y), floor_of(cp.atol, cp.rtol))["rel_l2"]


def _gradient_error(g: Any, cp: Any, ref: Any) -> float:
    scale = judged_scale(cp.theta0, cp.log_params)
    return norm_error(np.asarray(g) * scale, np.asarray(ref.gradient) * scale)


def test_the_list_row_and_the_fix_when_it_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    from sciml_bench.cli.main import main

    res = CliRunner().invoke(main, ["list", "--json"])
    assert res.exit_code == 0, res.output
    (row,) = [b for b in json.loads(res.output)["backends"] if b["name"] == "roadrunner"]
    assert row["available"] == (importlib.util.find_spec("roadrunner") is not None)
    assert row["solvers"] == ["BDF", "Adams"] and row["gradient_methods"] == ["forward"]
    assert row["default_solver"] == {"stiff": "BDF", "nonstiff": "BDF"}
    assert list(backends.REGISTRY).index("roadrunner") == list(backends.REGISTRY).index("amici") + 1
    assert backends.get("roadrunner").sources == ("sbml",)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "roadrunner" else real(name, *a))  # fmt: skip
    found = backends.get("roadrunner").availability()
    assert not found.ok and "roadrunner" in found.reason
    assert found.fix == "pip install -c constraints.txt -e '.[roadrunner]'"
    check = second_interpreter.cross_check(*_robertson())
    assert not check.ok and check.agreement is None
    assert "pip install -c constraints.txt -e '.[roadrunner]'" in check.summary()


def test_the_export_ids_are_write_arrays_ids() -> None:
    pytest.importorskip("sympy")
    from sciml_bench.problem.sbml.write_arrays import sbml_id

    for name in ("k1", "y", "u[1,2]", "a_b[10]"):
        assert roadrunner_model.export_id(name) == sbml_id(name)


@pytest.mark.parametrize("route", ["moving", "moving-export"])
def test_the_solve_is_the_reference_s_on_both_routes(models: dict[str, Imported], route: str) -> None:
    _needs_roadrunner()
    problem, ref = models[route]
    case, cp = _case(problem, ref)
    own = route == "moving"
    assert case.info["sbml"] == ("the modeller's own file" if own else
                                 "the suite's rate-rule export")  # fmt: skip
    sol = case.solve(cp.theta0)
    assert sol.y.shape == (9, 2)
    assert _solution_error(sol.y, cp, ref.y) < SOLUTION_BOUND
    # the same numbers twice: nothing of the last solve is carried into the next
    assert np.array_equal(case.solve(cp.theta0).y, sol.y)


@pytest.mark.parametrize("route", ["moving", "moving-export"])
def test_changing_kf_moves_a_s_start(models: dict[str, Imported], route: str) -> None:
    """A = 10*kf: at kf = 0.6 roadrunner starts A at 6 (kf2 = 1.2 with it, on the own file),
    the whole trajectory the reference solver's at the new parameters; back at kf = 0.3,
    A starts at 3 again."""
    _needs_roadrunner()
    problem, ref = models[route]
    case, cp = _case(problem, ref)
    theta = np.array([0.6, 0.5])
    y = case.solve(theta).y
    assert y[0, 0] == pytest.approx(6.0, rel=1e-12)
    tight = reference.solve_at(problem, theta, "BDF", 1e-10, 1e-14)
    assert _solution_error(y, cp, tight) < SOLUTION_BOUND
    if route == "moving":
        assert case.rr["kf2"] == pytest.approx(1.2, rel=1e-12)
    assert case.solve(cp.theta0).y[0, 0] == pytest.approx(3.0, rel=1e-12)


@pytest.mark.parametrize("route", ["still", "still-export"])
def test_the_gradient_is_the_reference_s(models: dict[str, Imported], route: str) -> None:
    """Forward sensitivities against the reference gradient, norm-wise on the judged scale."""
    _needs_roadrunner()
    problem, ref = models[route]
    case, cp = _case(problem, ref)
    assert case.blocked == ""
    loss, g = case.loss_and_grad(cp.theta0)
    assert loss == pytest.approx(ref.loss, rel=1e-3)
    assert _gradient_error(g, cp, ref) < GRADIENT_BOUND, (g, ref.gradient)


@pytest.mark.parametrize("route, moved", [("moving", "kf moves kf2, A"),
                                          ("moving-export", "kf moves A"),
                                          ("one-state", "the model has one state")])  # fmt: skip
def test_a_gradient_roadrunner_would_get_wrong_is_refused(
    models: dict[str, Imported], route: str, moved: str
) -> None:
    """roadrunner's sensitivities start at zero and perturb a parameter in the right-hand
    side only (``A = 10*kf`` would be lost), and a one-state model's sensitivity solver does
    not integrate: each refused with why, after a solve that is right (the one-state
    model's parameter is a reaction's local one, promoted to ``R1_k``)."""
    _needs_roadrunner()
    problem, ref = models[route]
    case, cp = _case(problem, ref)
    assert _solution_error(case.solve(cp.theta0).y, cp, ref.y) < SOLUTION_BOUND
    with pytest.raises(ProblemNotExpressible) as e:
        case.loss_and_grad(cp.theta0)
    assert moved in e.value.reason and e.value.reason.startswith("roadrunner: no gradient")
    assert case.info["gradient_refused"] in e.value.reason
    if route == "one-state":
        assert case.plan.parameters == ("R1_k",) and case.plan.promoted


def test_the_state_vector_and_its_tolerances_in_roadrunner_s_order() -> None:
    """roadrunner integrates rate rules' variables first, then the species reactions change
    (amounts; one set by an assignment rule is not integrated): the tolerance vector
    follows that order, atol x size for a species read as a concentration."""
    _needs_roadrunner()
    import libsbml
    import roadrunner

    doc = libsbml.SBMLDocument(3, 2)
    m = doc.createModel()
    c = m.createCompartment()
    c.setId("cell"), c.setSize(2.0), c.setConstant(True)
    for sid in ("A", "C"):
        sp = m.createSpecies()
        sp.setId(sid), sp.setCompartment("cell"), sp.setInitialConcentration(1.0)
        sp.setHasOnlySubstanceUnits(False), sp.setBoundaryCondition(False), sp.setConstant(False)
    for pid, constant in (("k", True), ("z", False)):
        p = m.createParameter()
        p.setId(pid), p.setValue(0.5), p.setConstant(constant)
    for rule, var, formula in ((m.createAssignmentRule(), "C", "2 * A"),
                               (m.createRateRule(), "z", "-k * z")):  # fmt: skip
        rule.setVariable(var), rule.setMath(libsbml.parseL3Formula(formula))
    r1 = m.createReaction()
    r1.setId("R1"), r1.setReversible(False)
    ref = r1.createReactant()
    ref.setSpecies("A"), ref.setStoichiometry(1), ref.setConstant(True)
    r1.createKineticLaw().setMath(libsbml.parseL3Formula("cell * k * A"))
    r = roadrunner.RoadRunner(libsbml.writeSBMLToString(doc))
    assert roadrunner_model.state_vector(r) == ["z", "A"]
    assert roadrunner_model.tolerance_vector(r, 1e-10, ["A", "z"]) == [1e-10, 2e-10]
    assert roadrunner_model.tolerance_vector(r, 1e-10, ["A * cell", "z"]) == [1e-10, 1e-10]
    reads = [roadrunner_model.state_read(r, f) for f in ("A", "A * cell", "z", "C")]
    assert [(s.selection, s.column, s.factor) for s in reads[:3]] == [
        ("[A]", "A", 0.5), ("A", "A", 1.0), ("z", "z", 1.0)]
    assert reads[3].column == "" and "assignment rule" in reads[3].why


def _robertson() -> tuple[Any, Any]:
    p = spec.load("stiff-robertson")
    return p, reference.get(p)


def test_robertson_s_gradient_and_solution() -> None:
    _needs_roadrunner()
    problem, ref = _robertson()
    case, cp = _case(problem, ref)
    assert _solution_error(case.solve(cp.theta0).y, cp, ref.y) < SOLUTION_BOUND
    loss, g = case.loss_and_grad(cp.theta0)
    assert _gradient_error(g, cp, ref) < GRADIENT_BOUND
    assert loss == pytest.approx(ref.loss, rel=1e-4)
    # the save points start after t0: roadrunner starts at t0 and the row drops it
    assert case.settings["times"][0] == 0.0 and case.settings["drop"] == 1


@pytest.mark.parametrize("route", ["moving", "moving-export", "robertson"])
def test_the_second_interpreter_agrees(models: dict[str, Imported], route: str) -> None:
    _needs_roadrunner()
    problem, ref = _robertson() if route == "robertson" else models[route]
    check = second_interpreter.cross_check(problem, ref)
    assert check.ok and check.agreement is not None and check.agreement <= 1e-6, check.summary()
    assert check.kind.startswith("libRoadRunner 2.") and check.kind.endswith("at rtol 1e-10")
    own = route == "moving"
    assert check.model == ("the modeller's own file" if own else "the suite's rate-rule export")
    assert "agrees with the reference" in check.summary()
    assert check.to_json()["ok"] is True


def test_the_second_interpreter_sees_a_wrong_reference(models: dict[str, Imported]) -> None:
    """A reference whose B is 1% off is named, with B the worst state."""
    _needs_roadrunner()
    problem, ref = models["moving"]
    y = np.array(ref.y)
    y[:, 1] *= 1.01
    check = second_interpreter.cross_check(problem, dataclasses.replace(ref, y=y.tolist()))
    assert not check.ok and check.worst_state == "B" and "DISAGREES" in check.summary()


@pytest.mark.slow
def test_a_quick_run_has_an_ok_roadrunner_row(tmp_path: Path) -> None:
    _needs_roadrunner()
    from sciml_bench.results import store

    r = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "run", "stiff-robertson", "-b",
         "roadrunner,scipy", "--quick", "--json", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = tmp_path.glob("*.h5")
    rows = {x["backend"]: x for x in store.read(path).records if x.get("kind") == "ode"}
    row = rows["roadrunner"]
    assert row["status"] == "ok", row["reason"]
    assert row["gradient_method"] == "forward" and row["gradient_tier"] == "pass"
    assert row["case_info"]["sbml"] == "the suite's rate-rule export"
    assert rows["scipy"]["status"] == "ok"


@pytest.mark.slow
def test_a_refused_gradient_leaves_a_timed_solve_row_saying_why(tmp_path: Path) -> None:
    """``run --sbml`` on the moving model: roadrunner's sensitivities would miss the path
    through A = 10*kf, so its row is a solve row (TTFG to the first solve, solve samples, no
    gradient) whose reason names kf and what it moves, never an unavailable one."""
    _needs_roadrunner()
    from sciml_bench.results import store

    model = _model(tmp_path, moving=True)
    r = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "run", "--sbml", str(model), "-b",
         "roadrunner", "--quick", "--t-end", "4", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = (tmp_path / "out").glob("*.h5")
    (row,) = [x for x in store.read(path).records if x.get("kind") == "ode"]
    assert row["status"] == "ok" and row["ttfg_kind"] == "solve"
    assert row.get("gradient") is None and len(row["solve_samples"]) >= 3
    assert "no gradient: " in row["reason"] and "kf" in row["reason"]
    assert row["solution_error"] < 1e-5
