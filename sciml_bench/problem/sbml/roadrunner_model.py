"""A problem as libRoadRunner runs it: which SBML it loads, where each problem parameter and
state is in that model, the tolerances in its units, and how a parameter change reaches the
initial assignments. Shared by the ``roadrunner`` backend (a worker: no sympy, no libsbml)
and the reference's second interpreter (:mod:`.second_interpreter`); ``roadrunner`` is
imported inside the functions that need it, and the others take a loaded ``RoadRunner``.

Two models (:class:`ModelPlan`): the modeller's own file (a ``run --sbml`` problem: each
state an SBML formula, each parameter an id; a reaction's local parameter promoted to a
global one by roadrunner's ``getParamPromotedSBML``, as ``<reaction>_<id>``), or the suite's
rate-rule export (each state a rate-rule parameter, each problem parameter a constant one).

Units. roadrunner integrates species as amounts ``n = [X]·V``; a problem state that is a
species' concentration is ``n / V`` (:class:`StateRead`'s ``factor``), and the shared
``atol`` on it is ``atol·V`` on ``n`` (:func:`tolerance_vector`). roadrunner's own scalar
absolute tolerance means something else: it multiplies it by each state's initial value
(or compartment size where that is zero), in an order that is not the state vector's where
a model has both species and rate rules, so the suite always sets a vector, in the state
vector's order.

Parameters. ``ExecutableModel.setValue("init(p)", v)`` then ``RoadRunner.resetAll()`` sets
``p`` and re-evaluates every initial assignment (a species ``A = 10*kf``, a parameter
``kf2 = 2*kf``) in microseconds (:func:`set_parameters`). ``RoadRunner.setValue("init(p)")``
edits the model instead (it removes any initial assignment of ``p``; 30-60 ms here), and
``setValue("p")`` with the default ``reset()`` leaves a parameter's initial assignment
(``kf2``) at its old value.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: the two models a problem can run as, as rows and messages name them
OWN, EXPORT = "the modeller's own file", "the suite's rate-rule export"


@dataclass(frozen=True)
class ModelPlan:
    """The SBML roadrunner loads (``text``), which one it is (:data:`OWN` or
    :data:`EXPORT`), each problem state's SBML formula and each problem parameter's global id
    in ``text``, and whether local parameters were promoted to global ones."""

    text: str
    which: str
    formulas: tuple[str, ...]
    parameters: tuple[str, ...]
    promoted: bool = False


@dataclass(frozen=True)
class StateRead:
    """Where a problem state is in a loaded model: its value is roadrunner's ``selection``
    and ``factor ×`` the state-vector entry ``column`` (whose sensitivity ``∂n/∂θ`` the
    forward sensitivity solver returns); ``column`` is "" where no state-vector entry
    gives it linearly (its sensitivity is then not offered: ``why``)."""

    selection: str
    column: str
    factor: float = 1.0
    why: str = ""


def export_id(name: str) -> str:
    """A problem's flat state or parameter name as the export's SBML id: ``u[1,2]`` is
    ``u_1_2``, ``k1`` stays ``k1``. The rule of ``write_arrays.sbml_id``, kept here so that
    a worker does not import sympy (tests/test_roadrunner.py checks they agree)."""
    found = re.fullmatch(r"(.+)\[([0-9,]+)\]", name)
    return name if found is None else f"{found[1]}_{found[2].replace(',', '_')}"


def export_plan(text: str, state_names: Sequence[str], param_names: Sequence[str]) -> ModelPlan:
    """The suite's rate-rule export: each state and parameter by its own id."""
    return ModelPlan(text, EXPORT, tuple(map(export_id, state_names)),
                     tuple(map(export_id, param_names)))  # fmt: skip


def own_plan(
    text: str, states: Sequence[str], parameters: Sequence[str],
    locals_: Sequence[Sequence[str] | None] | None,
) -> ModelPlan:  # fmt: skip
    """The modeller's own file; where a differentiated parameter is a reaction's local one,
    the file with every local parameter promoted to a global one (roadrunner keeps local
    parameters out of reach: no selection, no sensitivity) and its id ``<reaction>_<id>``."""
    locals_ = list(locals_ or [None] * len(parameters))
    if not any(locals_):
        return ModelPlan(text, OWN, tuple(states), tuple(parameters))
    import roadrunner

    promoted = roadrunner.RoadRunner.getParamPromotedSBML(text)
    ids = tuple(p if not loc else f"{loc[0]}_{loc[1]}"
                for p, loc in zip(parameters, locals_, strict=True))  # fmt: skip
    return ModelPlan(promoted, OWN, tuple(states), ids, promoted=True)


def load(plan: ModelPlan) -> Any:
    """``roadrunner.RoadRunner(text)`` (the SBML compiled to native code by LLVM), its
    parameters checked against the plan: a missing one is named with what to do."""
    import roadrunner

    r = roadrunner.RoadRunner(plan.text)
    known = set(r.model.getGlobalParameterIds()) | set(r.model.getCompartmentIds())
    missing = [p for p in plan.parameters if p not in known]
    if missing:
        raise ValueError(f"libRoadRunner's model of {plan.which} has no parameter "
                         f"{', '.join(missing)}: re-import the model (sciml-bench import) so "
                         "that the problem's parameters name the file's")  # fmt: skip
    return r


def state_vector(r: Any) -> list[str]:
    """The ids of roadrunner's state vector (what CVODE integrates), in its order: the
    variables of rate rules, then the floating species (amounts) no assignment rule sets,
    read by index (conserved-moiety analysis off, its default: every such species is
    integrated; ``getNumIndFloatingSpecies`` counts the structural analysis's independent
    ones even then, 3 of Fiedler_BMCSystBiol2016's 6, where CVODE integrates all 6)."""
    m = r.model
    ruled = set(r.getAssignmentRuleIds())
    out = []
    for i in range(m.getNumRateRules() + m.getNumFloatingSpecies()):
        try:
            sid = m.getStateVectorId(i)
        except (RuntimeError, IndexError, ValueError):
            break
        if sid not in ruled:
            out.append(sid)
    return out


def _species_read(r: Any, species: str, amount: bool) -> StateRead:
    """A floating species' amount (``n``) or concentration (``n / V``)."""
    m = r.model
    comp = m.getCompartmentIds()[m.getCompartmentIndexForFloatingSpecies(
        list(m.getFloatingSpeciesIds()).index(species))]  # fmt: skip
    if species not in state_vector(r):
        return StateRead(species if amount else f"[{species}]", "", why=f"{species} is not "
                         "one of roadrunner's integrated states (an assignment rule sets it, "
                         "or nothing changes it)")  # fmt: skip
    if amount:
        return StateRead(species, species)
    volume = float(r.getValue(comp))
    if comp in m.getRateRuleSymbols():
        return StateRead(f"[{species}]", "", why=f"[{species}] lives in {comp}, whose size "
                         "changes in time: its sensitivity is not n/V's")  # fmt: skip
    return StateRead(f"[{species}]", species, 1.0 / volume)


def state_read(r: Any, formula: str) -> StateRead:
    """Where the problem state with SBML ``formula`` is (an id in SBML's meaning: a species'
    concentration unless it has only substance units; or ``X * C``, X's amount in its
    compartment C). Any other formula: a ``ValueError`` saying so."""
    species = list(r.model.getFloatingSpeciesIds())
    parts = [p.strip() for p in formula.split("*")]
    if len(parts) == 1 and parts[0] in species:
        return _species_read(r, parts[0], bool(r.getHasOnlySubstanceUnits(parts[0])))
    if len(parts) == 2 and parts[0] in species:
        m = r.model
        comp = m.getCompartmentIds()[m.getCompartmentIndexForFloatingSpecies(
            species.index(parts[0]))]  # fmt: skip
        if parts[1] == comp:
            return _species_read(r, parts[0], True)
    if len(parts) == 1 and parts[0].replace("_", "a").isalnum():
        column = parts[0] if parts[0] in state_vector(r) else ""
        return StateRead(parts[0], column, why="" if column else
                         f"{parts[0]} is not one of roadrunner's integrated states")  # fmt: skip
    raise ValueError(f"libRoadRunner: a state's SBML formula {formula!r} is neither an id nor "
                     "an amount 'X * C' (X's compartment): re-import the model")  # fmt: skip


def tolerance_vector(r: Any, atol: float, formulas: Sequence[str]) -> list[float]:
    """The shared ``atol`` per entry of roadrunner's state vector (:func:`state_vector`'s
    order, which CVODE receives as given), in its units: ``atol·V`` for a species whose
    problem state (or, if it is none, whose SBML id) means its concentration, ``atol`` for an
    amount or a rate rule's variable. (roadrunner's own scaling of a scalar tolerance puts
    species before rate rules, the state vector the other way round.)"""
    amounts = {f.split("*")[0].strip() for f in formulas if "*" in f}
    m = r.model
    species = list(m.getFloatingSpeciesIds())
    volumes = m.getCompartmentVolumes()
    out = []
    for sid in state_vector(r):
        if sid in species and sid not in amounts and not r.getHasOnlySubstanceUnits(sid):
            v = abs(float(volumes[m.getCompartmentIndexForFloatingSpecies(species.index(sid))]))
            out.append(atol * v if v > 0 else atol)
        else:
            out.append(atol)
    return out


def set_parameters(r: Any, ids: Sequence[str], values: Sequence[float]) -> None:
    """Each parameter's initial value, then ``resetAll()``: every state, parameter and
    compartment back to its (new) initial value, initial assignments re-evaluated from the
    new values, time at its start."""
    m = r.model
    for pid, v in zip(ids, values, strict=True):
        m.setValue(f"init({pid})", float(v))
    r.resetAll()


def check_parameters(r: Any, ids: Sequence[str], values: Sequence[float]) -> None:
    """Set the parameters (:func:`set_parameters`) and read them back: a parameter the model
    assigns itself (an initial assignment of its own) would keep the model's value, so the
    problem could not set it; a ``ValueError`` names it."""
    set_parameters(r, ids, values)
    kept = [f"{p} (set {float(v):g}, the model keeps {float(r.getValue(p)):g})"
            for p, v in zip(ids, values, strict=True) if float(r.getValue(p)) != float(v)]
    if kept:
        raise ValueError(f"libRoadRunner's model assigns {', '.join(kept)} itself (an initial "
                         "assignment), so the problem cannot set it: re-import the model")


def _snapshot(r: Any) -> dict[str, float]:
    """Every global parameter's, compartment's and species' (amount) current value."""
    m = r.model
    out: dict[str, float] = {}
    for ids, values in ((m.getGlobalParameterIds(), m.getGlobalParameterValues()),
                        (m.getCompartmentIds(), m.getCompartmentVolumes()),
                        (m.getFloatingSpeciesIds(), m.getFloatingSpeciesAmounts()),
                        (m.getBoundarySpeciesIds(), m.getBoundarySpeciesAmounts())):  # fmt: skip
        out.update(zip(ids, (float(v) for v in values), strict=True))
    return out


def moved_by(r: Any, ids: Sequence[str], values: Sequence[float]) -> dict[str, list[str]]:
    """Per parameter, what else its change moves at the start (a state's initial value, a
    parameter or compartment assigned from it): each set 0.1% off in turn
    (:func:`set_parameters`), everything compared with the start at ``values``. Leaves the
    model at ``values``. Empty lists: each parameter reaches the model through its own
    value alone."""
    set_parameters(r, ids, values)
    base = _snapshot(r)
    out = {}
    for i, pid in enumerate(ids):
        nudged = list(values)
        nudged[i] = nudged[i] * 1.001 if nudged[i] != 0 else 1e-3
        set_parameters(r, ids, nudged)
        now = _snapshot(r)
        out[pid] = [k for k, v in now.items() if k != pid and v != base[k]]
    set_parameters(r, ids, values)
    return out


def output_times(t0: float, t_save: Sequence[float]) -> tuple[list[float], int]:
    """The times ``simulate(times=...)`` takes (it starts at the first) and how many leading
    rows to drop: the save points, after ``t0`` where the first save point is later."""
    times = [float(t) for t in t_save]
    return ([float(t0), *times], 1) if times[0] > t0 else (times, 0)
