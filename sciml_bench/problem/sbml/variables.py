"""Every SBML id a modeller may ask for, read from an import's solution: a species as its
amount or its concentration (as asked), a compartment's size, a parameter (constant,
derived, or set by a rule), an assignment-rule variable, a reaction's rate.

:func:`~.odes.build` holds every quantity's value in time as an expression of the states,
the differentiated parameters and t (``System.values``; a species' amount in
``System.amounts``), so a variable is that expression evaluated on the solution at the save
points. A model with no ODE state (only rules and constants) has nothing to integrate: its
variables are expressions of t alone, evaluated directly (:func:`stateless`), never refused.
``sciml-bench reference --sbml`` prints them; ``benchmarks/sbml_conformance.py`` compares
them with the SBML Test Suite's results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy

from sciml_bench.problem import hints
from sciml_bench.problem.sbml import odes
from sciml_bench.problem.sbml.facts import Facts
from sciml_bench.problem.sbml.mathml import TIME, sym
from sciml_bench.problem.sbml.refuse import SBMLError


@dataclass
class Variable:
    """One asked-for id: what it is and its value as an expression of the states, the
    differentiated parameters and t."""

    id: str
    kind: str
    expr: sympy.Expr


def readable(facts: Facts) -> list[str]:
    """Every id a variable can name: compartments, species, parameters (a reaction's local
    ones as ``REACTION_PARAM``) and reactions (their rates), in model order."""
    return [*(q.id for q in facts.quantities.values() if q.kind != "stoichiometry"),
            *(r.id for r in facts.reactions)]  # fmt: skip


def resolve(
    facts: Facts, system: odes.System, ids: Sequence[str], amounts: Sequence[str] = (),
    concentrations: Sequence[str] = (), source: str = "",
) -> list[Variable]:  # fmt: skip
    """The variables ``ids`` (``"all"``: every :func:`readable` one): species in ``amounts``
    as amounts, those in ``concentrations`` as concentrations (amount / size), the others
    as the value their id has in math (a concentration unless ``hasOnlySubstanceUnits``);
    an unknown id is an :class:`SBMLError` naming the nearest."""
    known = readable(facts)
    names = known if list(ids) == ["all"] else list(ids)
    out = []
    for v in names:
        if v not in known:
            raise SBMLError(source, "variables", f"{v!r} is no compartment, species, parameter "
                            f"or reaction of the model{hints.did_you_mean(v, known)}")  # fmt: skip
        unit = "amount" if v in amounts else "concentration" if v in concentrations else ""
        out.append(_one(facts, system, v, unit))
    return out


def _one(facts: Facts, system: odes.System, v: str, unit: str) -> Variable:
    """Variable ``v``; a species in ``unit`` (``amount``, ``concentration``, or "" for the
    value its id has in math)."""
    q = facts.quantities.get(v)
    if q is None:  # a reaction: its rate
        reaction = next(r for r in facts.reactions if r.id == v)
        return Variable(v, "reaction rate", system.expanded(_in_time(reaction.rate, system)))
    if q.kind == "species":
        unit = unit or ("amount" if q.amount_valued else "concentration")
        if unit == "amount":
            return Variable(v, "species amount", system.amounts[v])
        size = system.values[q.compartment]
        return Variable(v, "species concentration", system.amounts[v] / size)
    kind = {"compartment": "compartment size", "local": "local parameter"}.get(q.kind, q.kind)
    if v in facts.assignment_rules:
        kind += " (assignment rule)"
    return Variable(v, kind, system.values[v])


def _in_time(e: sympy.Expr, system: odes.System) -> sympy.Expr:
    """A reaction's rate over the states, parameters and t: each id in it by its value."""
    return e.xreplace({sym(k): v for k, v in system.values.items() if sym(k) in e.free_symbols})


def evaluate(
    variables: Sequence[Variable], system: odes.System, t: np.ndarray, y: np.ndarray,
    theta: Sequence[float],
) -> np.ndarray:  # fmt: skip
    """The variables at the save points ``t`` (``n_t × n_vars``), from the states ``y``
    (``n_t × n_state``, the system's order) and the differentiated parameters ``theta``."""
    args = [TIME, *system.states, *map(sym, system.params)]
    t = np.asarray(t, dtype=float)
    y = np.asarray(y, dtype=float).reshape(len(t), len(system.states))
    cols = []
    for v in variables:
        f = sympy.lambdify(args, v.expr, modules="numpy")
        cols.append(np.broadcast_to(np.asarray(f(t, *y.T, *theta), dtype=float), t.shape))
    return np.column_stack(cols) if cols else np.zeros((len(t), 0))


def stateless(facts: Facts, source: str) -> odes.System | None:
    """The system of a model with no ODE state (its variables are expressions of t), or
    None when it has states (import it as usual)."""
    try:
        odes.build(facts, [], source)
    except odes.NoState as e:
        return e.system
    return None


def table(variables: Sequence[Variable], t: np.ndarray, values: np.ndarray) -> dict[str, Any]:
    """The variables as JSON: ``{"t": [...], "variables": {id: [...]}, "kinds": {id: kind}}``."""
    return {"t": np.asarray(t, float).tolist(),
            "variables": {v.id: values[:, k].tolist() for k, v in enumerate(variables)},
            "kinds": {v.id: v.kind for v in variables}}  # fmt: skip


def of_model(
    path: str, ids: Sequence[str], amounts: Sequence[str] = (), t_end: float | None = None,
    settings: dict[str, float] | None = None, refresh: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """The variables ``ids`` of the SBML model at ``path``, imported as ``sciml-bench
    import`` does, at its save points: from the reference solution (cached), or, for a
    model with no ODE state, as the functions of t they are. JSON-able: :func:`table`'s
    keys, plus ``problem``, ``source`` (``reference`` or ``no ODE state``) and ``method``."""
    from sciml_bench.problem import reference
    from sciml_bench.problem.sbml import read
    from sciml_bench.problem.sbml.facts import read_facts

    try:
        imported = read.read(path, t_end=t_end, settings=settings)
    except odes.NoState as e:
        facts = read_facts(read.parse_file(path), path)
        span = t_end if t_end is not None else read.default_span(path)[0]
        t = np.linspace(0.0, span, read.DEFAULT_SAVES)
        asked = resolve(facts, e.system, ids, amounts, source=path)
        values = evaluate(asked, e.system, t, np.zeros((len(t), 0)), e.system.theta0)
        return {"problem": facts.name, "source": "no ODE state: functions of t, evaluated",
                "method": "sympy expressions of t", **table(asked, t, values)}  # fmt: skip
    problem = imported.problem()
    ref = reference.get_or_missing(problem, refresh=refresh)
    if ref.missing:
        raise SBMLError(path, "reference", f"no reference solution: {ref.missing}")
    asked = resolve(imported.facts, imported.system, ids, amounts, source=path)
    values = evaluate(asked, imported.system, np.asarray(ref.t), np.asarray(ref.y),
                      problem.theta0)  # fmt: skip
    return {"problem": problem.name, "source": "reference", "method": ref.method,
            **table(asked, np.asarray(ref.t), values)}  # fmt: skip
