"""SBML in and out (sciml_bench/problem/sbml): a model written here with libsbml imports
to the ODEs derived by hand and solves to their solution; each construct a problem file
cannot state is refused in one line; ROBER exported and imported again is the same
problem. No file of the SBML Test Suite is used (benchmarks/sbml_conformance.py runs it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sympy
from click.testing import CliRunner

libsbml = pytest.importorskip("libsbml", reason="python-libsbml is not installed "
                              "(pip install -c constraints.txt -e '.[sbml]')")  # fmt: skip

from sciml_bench.cli.main import main  # noqa: E402
from sciml_bench.problem import spec  # noqa: E402
from sciml_bench.problem.reference import _Solver  # noqa: E402
from sciml_bench.problem.sbml import problem_file, read, refuse, write  # noqa: E402


def _math(model: Any, formula: str) -> Any:
    ast = libsbml.parseL3FormulaWithModel(formula, model)
    assert ast is not None, libsbml.getLastParseL3Error()
    return ast


def _species(model: Any, sid: str, comp: str, conc: float | None = None,
             amount: float | None = None, boundary: bool = False) -> Any:  # fmt: skip
    s = model.createSpecies()
    s.setId(sid)
    s.setCompartment(comp)
    s.setHasOnlySubstanceUnits(False)
    s.setBoundaryCondition(boundary)
    s.setConstant(False)
    if conc is not None:
        s.setInitialConcentration(conc)
    if amount is not None:
        s.setInitialAmount(amount)
    return s


def _reaction(model: Any, rid: str, reactants: dict[str, float], products: dict[str, float],
              law: str, local: dict[str, float] | None = None) -> Any:  # fmt: skip
    r = model.createReaction()
    r.setId(rid)
    r.setReversible(False)
    for sid, n in reactants.items():
        ref = r.createReactant()
        ref.setSpecies(sid), ref.setStoichiometry(n), ref.setConstant(True)
    for sid, n in products.items():
        ref = r.createProduct()
        ref.setSpecies(sid), ref.setStoichiometry(n), ref.setConstant(True)
    kl = r.createKineticLaw()
    for pid, value in (local or {}).items():
        lp = kl.createLocalParameter()
        lp.setId(pid), lp.setValue(value)
    kl.setMath(_math(model, law))
    return r


def _parameter(model: Any, pid: str, value: float, constant: bool = True) -> None:
    p = model.createParameter()
    p.setId(pid), p.setValue(value), p.setConstant(constant)


def _base() -> tuple[Any, Any]:
    """Two compartments of non-unit size, four species (one a boundary condition)."""
    doc = libsbml.SBMLDocument(3, 2)
    m = doc.createModel()
    m.setId("handmade")
    for cid, size in (("c1", 2.0), ("c2", 0.5)):
        c = m.createCompartment()
        c.setId(cid), c.setSize(size), c.setConstant(True), c.setSpatialDimensions(3)
    _species(m, "A", "c1", conc=1.0)
    _species(m, "B", "c1", amount=0.4)  # 0.2 as a concentration
    _species(m, "C", "c2", conc=0.0)
    _species(m, "D", "c1", conc=3.0, boundary=True)
    return doc, m


def handmade(tmp_path: Path) -> Path:
    """Reactions, compartments of size 2 and 0.5, an assignment rule, a function
    definition, a local parameter and a boundary species (see :func:`hand_rhs`)."""
    doc, m = _base()
    for pid, value in (("k1", 0.7), ("Vmax", 1.5), ("kdeg", 0.2)):
        _parameter(m, pid, value)
    _parameter(m, "total", 0.0, constant=False)
    rule = m.createAssignmentRule()
    rule.setVariable("total"), rule.setMath(_math(m, "A + B"))
    fd = m.createFunctionDefinition()
    fd.setId("mm"), fd.setMath(libsbml.parseL3Formula("lambda(S, V, K, V*S/(K + S))"))
    _reaction(m, "R1", {"A": 1}, {"B": 2}, "c1 * k1 * A * D")
    _reaction(m, "R2", {"B": 1}, {"C": 1}, "c1 * mm(B, Vmax, Km)", local={"Km": 0.3})
    _reaction(m, "R3", {"C": 1}, {}, "c2 * kdeg * C * total")
    path = tmp_path / "handmade.xml"
    path.write_text(libsbml.writeSBMLToString(doc))
    return path


def hand_rhs(_t: float, y: np.ndarray) -> list[float]:
    """The same model derived by hand, in concentrations: d[S]/dt = Σ n v / V."""
    a, b, c = y
    v1 = 2.0 * 0.7 * a * 3.0
    v2 = 2.0 * 1.5 * b / (0.3 + b)
    v3 = 0.5 * 0.2 * c * (a + b)
    return [-v1 / 2.0, (2 * v1 - v2) / 2.0, (v2 - v3) / 0.5]


def test_a_handmade_model_imports_to_its_hand_derived_odes(tmp_path: Path) -> None:
    from scipy.integrate import solve_ivp

    imported = read.read(handmade(tmp_path), t_end=3.0, saves=31)
    problem = spec.from_dict(imported.data, source="handmade.xml")
    assert problem.state_names == ("A", "B", "C")
    assert problem.y0 == pytest.approx((1.0, 0.2, 0.0))
    assert set(problem.param_names) == {"k1", "Vmax", "kdeg", "R2_Km"}
    assert all(problem.log_params)
    y = _Solver(problem, "BDF", 1e-10, 1e-12).solve(np.asarray(problem.theta0))
    want = solve_ivp(hand_rhs, (0, 3), [1.0, 0.2, 0.0], method="LSODA", rtol=1e-11,
                     atol=1e-13, t_eval=problem.t_save).y.T  # fmt: skip
    np.testing.assert_allclose(y, want, rtol=1e-7, atol=1e-10)
    truth = dict(zip(problem.param_names, problem.loss.truth, strict=True))
    assert truth["k1"] == pytest.approx(0.77)


def test_the_written_problem_file_reads_back_to_the_same_problem(tmp_path: Path) -> None:
    imported = read.read(handmade(tmp_path))
    text = problem_file.text(imported, "sciml-bench import handmade.xml")
    assert "# Differentiated: every non-zero constant parameter" in text
    assert "# A: species A, concentration in c1 (size 2)" in text
    again = spec.loads(text, source="handmade.toml")
    direct = spec.from_dict(imported.data)
    assert again.rhs == direct.rhs and again.theta0 == direct.theta0
    assert again.t_span == (0.0, 10.0) and len(again.t_save) == 51


def test_parameters_chosen_by_name_and_an_unknown_one_refused(tmp_path: Path) -> None:
    path = handmade(tmp_path)
    problem = read.load(path, parameters=["k1"])
    assert problem.param_names == ("k1",)
    assert "1.5" in str(problem.rhs[1])  # Vmax is a number now
    with pytest.raises(refuse.SBMLError, match=r"cannot differentiate 'k9': the model has no "):
        read.read(path, parameters=["k9"])


def test_a_parameter_declared_zero_is_not_differentiated_by_default(tmp_path: Path) -> None:
    doc, m = _base()
    _parameter(m, "k1", 0.7)
    _parameter(m, "kzero", 0.0)  # a real model's switched-off term (Lang_PLOSComputBiol2024)
    _reaction(m, "R1", {"A": 1}, {"B": 1}, "c1 * (k1 + kzero) * A")
    path = tmp_path / "zero.xml"
    path.write_text(libsbml.writeSBMLToString(doc))
    assert read.load(path).param_names == ("k1",)
    assert read.load(path, parameters=["k1", "kzero"]).param_names == ("k1", "kzero")


def _refused(tmp_path: Path, doc: Any, match: str) -> None:
    path = tmp_path / "model.xml"
    path.write_text(libsbml.writeSBMLToString(doc))
    with pytest.raises(refuse.SBMLError, match=match):
        read.read(path)
    r = CliRunner().invoke(main, ["import", str(path)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1, r.output


def _with_reaction() -> tuple[Any, Any]:
    doc, m = _base()
    _parameter(m, "k", 1.0)
    _reaction(m, "R1", {"A": 1}, {"B": 1}, "k * A")
    return doc, m


def test_an_event_is_refused_by_its_id(tmp_path: Path) -> None:
    doc, m = _with_reaction()
    e = m.createEvent()
    e.setId("pulse"), e.setUseValuesFromTriggerTime(True)
    trig = e.createTrigger()
    trig.setMath(_math(m, "time > 1")), trig.setInitialValue(False), trig.setPersistent(True)
    a = e.createEventAssignment()
    a.setVariable("A"), a.setMath(_math(m, "1"))
    _refused(tmp_path, doc, r"\[event 'pulse'\]: events are not supported")


def test_an_algebraic_rule_is_refused(tmp_path: Path) -> None:
    doc, m = _with_reaction()
    _parameter(m, "x", 1.0, constant=False)
    m.createAlgebraicRule().setMath(_math(m, "x - A"))
    _refused(tmp_path, doc, "algebraic rules are not supported")


def test_a_delay_is_refused(tmp_path: Path) -> None:
    doc, m = _with_reaction()
    m.getReaction(0).getKineticLaw().setMath(_math(m, "k * delay(A, 0.5)"))
    _refused(tmp_path, doc, r"\[reaction 'R1'\]: delay\(\) is not supported")


def test_a_fast_reaction_is_refused(tmp_path: Path) -> None:
    doc = libsbml.SBMLDocument(3, 1)  # Level 3 Version 2 dropped the attribute
    m = doc.createModel()
    c = m.createCompartment()
    c.setId("c1"), c.setSize(1.0), c.setConstant(True)
    _species(m, "A", "c1", conc=1.0), _species(m, "B", "c1", conc=0.0)
    _parameter(m, "k", 1.0)
    _reaction(m, "R1", {"A": 1}, {"B": 1}, "k * A").setFast(True)
    _refused(tmp_path, doc, r"\[reaction 'R1'\]: fast reactions are not supported")


def test_variable_stoichiometry_is_refused(tmp_path: Path) -> None:
    doc, m = _with_reaction()
    ref = m.getReaction(0).getProduct(0)
    ref.setId("nB"), ref.setConstant(False)
    rule = m.createAssignmentRule()
    rule.setVariable("nB"), rule.setMath(_math(m, "1 + time"))
    _refused(tmp_path, doc, r"\[species reference 'nB'\]: variable stoichiometry")


def test_a_switch_in_time_is_refused_and_one_on_constants_is_folded(tmp_path: Path) -> None:
    doc, m = _with_reaction()
    law = m.getReaction(0).getKineticLaw()
    law.setMath(_math(m, "piecewise(k * A, time < 1, 0)"))
    _refused(tmp_path, doc, r"\[reaction 'R1'\]: a piecewise .* expresses a switch")
    law.setMath(_math(m, "piecewise(k * A, c1 > 1, 0)"))  # c1 = 2: always the first
    path = tmp_path / "folded.xml"
    path.write_text(libsbml.writeSBMLToString(doc))
    assert str(read.load(path).rhs[0]) == "-A*k/2"


@pytest.mark.parametrize("package", ["comp", "fbc"])
def test_a_package_is_refused(tmp_path: Path, package: str) -> None:
    doc, _ = _with_reaction()
    text = libsbml.writeSBMLToString(doc)
    uri = f"http://www.sbml.org/sbml/level3/version1/{package}/version{1 + (package == 'fbc')}"
    text = text.replace("<sbml ", f'<sbml xmlns:{package}="{uri}" {package}:required="false" ', 1)
    path = tmp_path / "model.xml"
    path.write_text(text)
    with pytest.raises(refuse.SBMLError, match=f"package '{package}' is not supported"):
        read.read(path)


@pytest.mark.parametrize("declaration", [
    '<!DOCTYPE sbml [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;">]>',
    '<!DOCTYPE sbml [<!ENTITY x SYSTEM "file:///etc/passwd">]>',
])  # fmt: skip
def test_entity_declarations_are_refused_before_parsing(tmp_path: Path, declaration: str) -> None:
    doc, _ = _with_reaction()
    text = libsbml.writeSBMLToString(doc).replace("<sbml ", f"{declaration}\n<sbml ", 1)
    path = tmp_path / "hostile.xml"
    path.write_text(text)
    with pytest.raises(refuse.SBMLError, match="<!DOCTYPE> declaration"):
        read.read(path)


def test_too_many_elements_and_too_many_bytes_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc, _ = _with_reaction()
    path = tmp_path / "big.xml"
    path.write_text(libsbml.writeSBMLToString(doc))
    monkeypatch.setattr(refuse, "MAX_ELEMENTS", 10)
    with pytest.raises(refuse.SBMLError, match="XML elements, over the 10 read"):
        read.read(path)
    monkeypatch.setattr(refuse, "MAX_BYTES", 100)
    with pytest.raises(refuse.SBMLError, match="bytes is over the 100"):
        read.read(path)


def test_a_model_without_parameters_gets_a_time_scale(tmp_path: Path) -> None:
    doc, m = _base()
    _reaction(m, "R1", {"A": 1}, {"B": 1}, "0.5 * A")
    path = tmp_path / "model.xml"
    path.write_text(libsbml.writeSBMLToString(doc))
    imported = read.read(path)
    assert imported.data["parameters"] == {"time_scale": 1.0}
    assert "the sensitivity to the model's speed" in problem_file.text(imported, "x")


def test_export_then_import_gives_robers_equations(tmp_path: Path) -> None:
    rober = spec.load("stiff-robertson")
    path = tmp_path / "rober.xml"
    r = CliRunner().invoke(main, ["export-sbml", "stiff-robertson", "-o", str(path)])
    assert r.exit_code == 0, r.output
    back = _round_trip(rober, path)
    assert back.state_names == rober.state_names and back.param_names == rober.param_names
    assert back.y0 == rober.y0 and back.theta0 == rober.theta0
    for a, b in zip(back.rhs, rober.rhs, strict=True):
        assert sympy.simplify(a - b) == 0
    theta = np.asarray(rober.theta0)
    ya = _Solver(back, "BDF", 1e-8, 1e-14).solve(theta)
    yb = _Solver(rober, "BDF", 1e-8, 1e-14).solve(theta)
    np.testing.assert_array_equal(ya, yb)


def _round_trip(problem: spec.Problem, path: Path) -> spec.Problem:
    """The imported problem with the original's time, tolerances and loss (what SBML
    does not hold)."""
    data = read.read(path).data
    for key in ("time", "tolerances", "loss", "solver", "reference", "name"):
        if key in problem.content:
            data[key] = problem.content[key]
    return spec.from_dict(data, source=str(path))


@pytest.mark.slow
def test_robers_round_trip_has_the_same_reference_solution_and_gradient(tmp_path: Path) -> None:
    from sciml_bench.problem import reference

    rober = spec.load("stiff-robertson")
    path = tmp_path / "rober.xml"
    path.write_text(write.text(rober))
    back = _round_trip(rober, path)
    a, b = reference.get(back), reference.get(rober)
    np.testing.assert_allclose(a.y, b.y, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(a.gradient, b.gradient, rtol=1e-6)


def test_export_refuses_networks_and_writes_array_problems() -> None:
    r = CliRunner().invoke(main, ["export-sbml", "nonstiff-spiral-node"])
    assert r.exit_code == 2 and "only problems without networks" in r.output
    r = CliRunner().invoke(main, ["export-sbml", "stiff-robertson-groups"])  # n = 10
    assert r.exit_code == 0 and r.output.count("<rateRule") == 30


def test_run_sbml_loads_the_imported_problem(tmp_path: Path) -> None:
    """``run --sbml`` imports as ``import`` does; ``--t-end`` ends its time span (as the
    published real models' runs use it) and is refused without an SBML model."""
    from sciml_bench.run.problems import sbml_problem

    path = str(handmade(tmp_path))
    problem = sbml_problem(path, None)
    assert problem.state_names == ("A", "B", "C") and problem.n_params == 4
    assert problem.t_span[1] == read.DEFAULT_T_END
    later = sbml_problem(path, 240.0)
    assert later.t_span[1] == 240.0 and later.t_save[-1] == 240.0
    assert len(later.t_save) == read.DEFAULT_SAVES
    r = CliRunner().invoke(main, ["run", "stiff-robertson", "--t-end", "5", "-b", "scipy"])
    assert r.exit_code == 2 and "--t-end applies to --sbml models" in r.output
