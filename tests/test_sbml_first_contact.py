"""A modeller's first contact with an SBML model (sciml_bench/problem/sbml): every id
readable (variables.py), a model with no ODE state evaluated rather than refused, the time
span taken from a PEtab problem beside the file, a stimulus its conditions set named, and
``--set`` to run one. Models and PEtab tables are written here, never the collection's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

libsbml = pytest.importorskip("libsbml", reason="python-libsbml is not installed "
                              "(pip install -c constraints.txt -e '.[sbml]')")  # fmt: skip

from sciml_bench.problem import reference  # noqa: E402
from sciml_bench.problem.sbml import odes, read, refuse  # noqa: E402
from sciml_bench.problem.sbml import variables as sv  # noqa: E402


def _model(folder: Path, stimulus: float = 0.0, with_state: bool = True) -> Path:
    """A in compartment `cell` (size 2), made at rate `u * k` and lost at `kd * A`; an
    assignment rule `obs = 3 * A + u`; a constant species `E`. Without ``with_state``, A is
    set by a rule instead (A = u * t): no ODE state."""
    doc = libsbml.SBMLDocument(3, 2)
    m = doc.createModel()
    m.setId("first_contact")
    c = m.createCompartment()
    c.setId("cell"), c.setSize(2.0), c.setConstant(True), c.setSpatialDimensions(3)
    for sid, conc, const in (("A", 0.5, False), ("E", 4.0, True)):
        s = m.createSpecies()
        s.setId(sid), s.setCompartment("cell"), s.setInitialConcentration(conc)
        s.setHasOnlySubstanceUnits(False), s.setBoundaryCondition(False), s.setConstant(const)
    for pid, value, const in (("k", 1.5, True), ("kd", 0.7, True), ("u", stimulus, False),
                              ("obs", 0.0, False)):  # fmt: skip
        p = m.createParameter()
        p.setId(pid), p.setValue(value), p.setConstant(const)
    rule = m.createAssignmentRule()
    rule.setVariable("obs"), rule.setMath(libsbml.parseL3Formula("3 * A + u"))
    if with_state:
        r = m.createReaction()
        r.setId("make"), r.setReversible(False)
        ref = r.createProduct()
        ref.setSpecies("A"), ref.setStoichiometry(1), ref.setConstant(True)
        r.createKineticLaw().setMath(libsbml.parseL3Formula("cell * (u * k + 0.1 - kd * A)"))
    else:
        ra = m.createAssignmentRule()
        ra.setVariable("A"), ra.setMath(libsbml.parseL3Formula("u * time + 0.5"))
    path = folder / "model_first.xml"
    libsbml.writeSBMLToFile(doc, str(path))
    return path


def _petab(folder: Path, conditions: dict[str, list[float]], times: list[float]) -> None:
    """A PEtab v1 problem beside the model: its YAML, conditions and measurements."""
    (folder / "first.yaml").write_text(
        "format_version: 1\nparameter_file: parameters.tsv\nproblems:\n- condition_files:\n"
        "  - conditions.tsv\n  measurement_files:\n  - measurements.tsv\n  sbml_files:\n"
        "  - model_first.xml\n")
    names = list(conditions)
    rows = ["\t".join(["conditionId", *names])]
    for j in range(len(conditions[names[0]])):
        rows.append("\t".join([f"c{j}", *(f"{conditions[n][j]:g}" for n in names)]))
    (folder / "conditions.tsv").write_text("\n".join(rows) + "\n")
    meas = ["observableId\tsimulationConditionId\tmeasurement\ttime"]
    meas += [f"obs_A\tc0\t1.0\t{t:g}" for t in times]
    (folder / "measurements.tsv").write_text("\n".join(meas) + "\n")


def test_every_id_is_readable_from_the_solution(tmp_path: Path) -> None:
    """Species as amount or concentration, the assignment rule, a constant species, a
    parameter, the compartment and the reaction's rate, from the reference's solution:
    A' = u k + 0.1 - kd A is solved in closed form here."""
    imp = read.read(_model(tmp_path, stimulus=0.2), t_end=2.0, saves=5)
    problem = imp.problem()
    ref = reference.get(problem)
    asked = sv.resolve(imp.facts, imp.system, ["A", "obs", "E", "kd", "cell", "make"], ["A"])
    got = sv.evaluate(asked, imp.system, np.asarray(ref.t), np.asarray(ref.y), problem.theta0)
    t = np.asarray(ref.t)
    steady = (0.2 * 1.5 + 0.1) / 0.7
    a = steady + (0.5 - steady) * np.exp(-0.7 * t)
    assert [v.kind for v in asked] == ["species amount", "parameter (assignment rule)",
                                       "species concentration", "parameter", "compartment size",
                                       "reaction rate"]  # fmt: skip
    want = np.column_stack([2 * a, 3 * a + 0.2, np.full_like(t, 4.0), np.full_like(t, 0.7),
                            np.full_like(t, 2.0), 2 * (0.2 * 1.5 + 0.1 - 0.7 * a)])  # fmt: skip
    assert np.allclose(got, want, rtol=1e-8, atol=1e-12)
    every = sv.resolve(imp.facts, imp.system, ["all"])
    assert {v.id for v in every} == {"cell", "A", "E", "k", "kd", "u", "obs", "make"}
    with pytest.raises(refuse.SBMLError, match="did you mean 'obs'"):
        sv.resolve(imp.facts, imp.system, ["ob"])


def test_a_model_with_no_ode_state_is_evaluated_not_refused(tmp_path: Path) -> None:
    path = _model(tmp_path, stimulus=0.3, with_state=False)
    with pytest.raises(odes.NoState, match="--variables all") as e:
        read.read(path)
    asked = sv.resolve(read.read_facts(read.parse_file(path), str(path)), e.value.system,
                       ["A", "obs"])  # fmt: skip
    t = np.linspace(0, 3, 4)
    got = sv.evaluate(asked, e.value.system, t, np.zeros((4, 0)), e.value.system.theta0)
    assert np.allclose(got[:, 0], 0.3 * t + 0.5) and np.allclose(got[:, 1], 3 * (0.3 * t + 0.5) + 0.3)


def test_the_span_comes_from_a_petab_problem_beside_the_file(tmp_path: Path) -> None:
    path = _model(tmp_path)
    t_end, why = read.default_span(path)
    assert t_end == read.DEFAULT_T_END and "a default" in why
    _petab(tmp_path, {"u": [0.0, 5.0, 20.0]}, [0.0, 12.5, 90.0, 45.0])
    t_end, why = read.default_span(path)
    assert t_end == 90.0 and "measurements.tsv" in why
    imp = read.read(path)
    assert imp.data["time"]["span"] == [0.0, 90.0] and imp.span_note == why


def test_a_stimulus_left_at_zero_is_named_and_set(tmp_path: Path) -> None:
    """u is 0 in the file, 0, 5 and 20 in the conditions beside it: the note names it and the
    ``--set`` that runs another; set, the start and the loss's gradient come alive, and the
    problem file says what was set."""
    from sciml_bench.problem.sbml import problem_file

    path = _model(tmp_path)
    _petab(tmp_path, {"u": [0.0, 5.0, 20.0]}, [10.0])
    rest = read.read(path)
    assert "set u, 0 in the SBML, to 0, 5, 20" in rest.condition_note
    assert "--set u=5 runs another" in rest.condition_note
    alive = read.read(path, settings=read.parse_settings(["u=5"]))
    assert alive.condition_note == "" and "u" in alive.system.params
    assert "# Set in the SBML before the import (--set): u = 5" in problem_file.text(alive, "x")
    for bad, says in (("u", "write NAME=VALUE"), ("u=inf", "finite"), ("kdd=1", "did you mean 'kd'")):
        with pytest.raises(refuse.SBMLError, match=says):
            read.read(path, settings=read.parse_settings([bad]))


def test_a_constant_false_parameter_nothing_changes_is_differentiated(tmp_path: Path) -> None:
    """u is declared constant="false" and no rule sets it: with a value it is a candidate;
    naming a rule-set one says why not (obs) and what to do."""
    imp = read.read(_model(tmp_path, stimulus=0.2))
    assert "u" in imp.system.params
    with pytest.raises(refuse.SBMLError, match="a rule sets it") as e:
        read.read(_model(tmp_path, stimulus=0.2), parameters=["obs"])
    assert "differentiate what its rule reads" in e.value.reason


def test_reference_prints_any_id_the_user_names(tmp_path: Path) -> None:
    """``sciml-bench reference --sbml F --variables ... --json``: the assignment rule and a
    species' amount from the reference solution; a model with no ODE state as functions of t;
    an unknown id is one line, exit 2."""
    import json

    from click.testing import CliRunner

    from sciml_bench.cli.main import main

    path = _model(tmp_path, stimulus=0.2)
    r = CliRunner().invoke(main, ["reference", "--sbml", str(path), "--t-end", "2",
                                  "--variables", "obs,A", "--amounts", "A", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    a = np.asarray(doc["variables"]["A"]) / 2.0  # the amount over the size 2
    assert doc["source"] == "reference" and doc["kinds"]["A"] == "species amount"
    assert np.allclose(doc["variables"]["obs"], 3 * a + 0.2, rtol=1e-10)
    (tmp_path / "no-state").mkdir()
    still = _model(tmp_path / "no-state", stimulus=0.3, with_state=False)
    r = CliRunner().invoke(main, ["reference", "--sbml", str(still), "--variables", "A"])
    assert r.exit_code == 0 and "no ODE state" in r.output, r.output
    bad = CliRunner().invoke(main, ["reference", "--sbml", str(path), "--variables", "Aa"])
    assert bad.exit_code == 2 and "did you mean 'A'" in bad.output


@pytest.mark.slow
def test_run_sbml_sets_the_stimulus_and_records_both_checks(tmp_path: Path) -> None:
    """``run --sbml F --set u=5`` (SciPy and CVODES): the span from the PEtab problem beside
    the file, the check against the document and libRoadRunner's reading, both on the
    results file; the explicit-only libraries left out by default, said."""
    from click.testing import CliRunner

    from sciml_bench.cli.main import main
    from sciml_bench.results import store

    path = _model(tmp_path)
    _petab(tmp_path, {"u": [0.0, 5.0]}, [3.0])
    r = CliRunner().invoke(main, ["run", "--sbml", str(path), "--set", "u=5", "-b",
                                  "scipy,cvodes", "--quick", "--out", str(tmp_path / "out")])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "time span: t_end 3: the last measurement time" in r.output
    assert "semantic check against the SBML document: 3 parameters" in r.output
    files = list((tmp_path / "out").glob("*.h5"))
    checks = store.read(files[0]).environment["model_checks"]["first_contact"]
    assert checks["settings"] == {"u": 5.0} and checks["semantic"]["ok"] is True
    rr = checks.get("second_interpreter", {})
    assert rr.get("ok") is True or "not installed" in rr.get("skipped", ""), rr
    left = CliRunner().invoke(main, ["run", "--sbml", str(path), "--quick", "-b", "scipy",
                                     "--out", str(tmp_path / "out2")])  # fmt: skip
    assert "left out" not in left.output  # named backends run as named
