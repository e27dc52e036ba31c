"""An SBML model read into plain data: its quantities, reactions, rules and initial
assignments, all math as sympy over the ids' symbols (:mod:`.mathml`).

Nothing here decides what becomes a state; :mod:`.odes` does. The units of a species'
declared value are the units its id has in math: a concentration, unless the species has
``hasOnlySubstanceUnits`` (then an amount), so a species declared by ``initialAmount``
but meaning a concentration starts at ``amount / size`` (and the other way round).
A reaction's local parameters are promoted to model quantities named ``reaction_param``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import sympy

from sciml_bench.problem.sbml.mathml import Converter, sym


@dataclass
class Quantity:
    """A compartment, species, parameter, local parameter or species reference with an id."""

    id: str
    kind: str
    #: the declared value in the id's own units (None: not declared)
    declared: sympy.Expr | None
    constant: bool
    compartment: str = ""
    #: a species whose id means its amount (``hasOnlySubstanceUnits``)
    amount_valued: bool = False
    boundary: bool = False
    #: the id of the species' conversion factor ("" none)
    conversion: str = ""
    #: a promoted local parameter's ``(reaction id, local id)`` in the document; () else
    origin: tuple[str, str] = ()

    @property
    def element(self) -> str:
        """The SBML element this quantity is, as an error message names it."""
        if self.origin:
            return f"local parameter '{self.origin[1]}' of reaction '{self.origin[0]}'"
        return f"{self.kind} '{self.id}'"


@dataclass
class Reaction:
    id: str
    rate: sympy.Expr
    #: (species id, stoichiometry: products positive, reactants negative)
    terms: list[tuple[str, sympy.Expr]]


@dataclass
class Facts:
    quantities: dict[str, Quantity] = field(default_factory=dict)
    reactions: list[Reaction] = field(default_factory=list)
    rate_rules: dict[str, sympy.Expr] = field(default_factory=dict)
    assignment_rules: dict[str, sympy.Expr] = field(default_factory=dict)
    initial_assignments: dict[str, sympy.Expr] = field(default_factory=dict)
    name: str = ""
    level: tuple[int, int] = (3, 2)


def read_facts(doc: Any, source: str) -> Facts:
    """The model of a checked document (:func:`.refuse.check_document`)."""
    model = doc.getModel()
    functions = {f.getId(): f for f in model.getListOfFunctionDefinitions()}
    conv = Converter(functions, source)
    facts = Facts(name=model.getId() or model.getName(), level=(doc.getLevel(), doc.getVersion()))
    q = facts.quantities
    for c in model.getListOfCompartments():
        size = sympy.Float(c.getSize()) if c.isSetSize() else None
        q[c.getId()] = Quantity(c.getId(), "compartment", size, c.getConstant())
    model_factor = model.getConversionFactor() if model.isSetConversionFactor() else ""
    for s in model.getListOfSpecies():
        q[s.getId()] = _species(s, model_factor)
    for p in model.getListOfParameters():
        value = sympy.Float(p.getValue()) if p.isSetValue() else None
        q[p.getId()] = Quantity(p.getId(), "parameter", value, p.getConstant())
    # Level 3 Version 2 lets a rule or initial assignment omit its math: it then has no
    # effect (the Test Suite's NoMathML cases)
    for r in model.getListOfRules():
        if not r.isSetMath():
            continue
        target = facts.rate_rules if r.isRate() else facts.assignment_rules
        target[r.getVariable()] = conv.convert(r.getMath(), f"rule for '{r.getVariable()}'")
    for ia in model.getListOfInitialAssignments():
        if not ia.isSetMath():
            continue
        where = f"initial assignment to '{ia.getSymbol()}'"
        facts.initial_assignments[ia.getSymbol()] = conv.convert(ia.getMath(), where)
    for r in model.getListOfReactions():
        facts.reactions.append(_reaction(r, conv, facts, source))
    return facts


def _species(s: Any, model_factor: str) -> Quantity:
    """A species, its declared value in the units its id has in math."""
    comp = sym(s.getCompartment())
    amount_valued = s.getHasOnlySubstanceUnits()
    declared: sympy.Expr | None = None
    if s.isSetInitialAmount():
        amount = sympy.Float(s.getInitialAmount())
        declared = amount if amount_valued else amount / comp
    elif s.isSetInitialConcentration():
        conc = sympy.Float(s.getInitialConcentration())
        declared = conc * comp if amount_valued else conc
    factor = s.getConversionFactor() if s.isSetConversionFactor() else model_factor
    return Quantity(s.getId(), "species", declared, s.getConstant(), s.getCompartment(),
                    amount_valued, s.getBoundaryCondition(), factor)  # fmt: skip


def _reaction(r: Any, conv: Converter, facts: Facts, source: str) -> Reaction:
    """The kinetic law with local parameters promoted, and the signed stoichiometries."""
    law = r.getKineticLaw()
    local: dict[str, sympy.Expr] = {}
    # Level 3 names them local parameters, Level 2 parameters; libsbml may list one twice
    locals_ = {p.getId(): p for p in [*law.getListOfParameters(), *law.getListOfLocalParameters()]}
    for p in locals_.values():
        name = _free_name(f"{r.getId()}_{p.getId()}", facts)
        value = sympy.Float(p.getValue()) if p.isSetValue() else None
        facts.quantities[name] = Quantity(name, "local", value, True,
                                          origin=(r.getId(), p.getId()))  # fmt: skip
        local[p.getId()] = sym(name)
    rate = conv.convert(law.getMath(), f"reaction '{r.getId()}'", local)
    terms = []
    for sign, refs in ((-1, r.getListOfReactants()), (1, r.getListOfProducts())):
        for ref in refs:
            terms.append((ref.getSpecies(), sign * _stoichiometry(ref, r, conv, facts, source)))
    return Reaction(r.getId(), rate, terms)


def _stoichiometry(ref: Any, r: Any, conv: Converter, facts: Facts, source: str) -> sympy.Expr:
    """A number, the symbol of a species reference's id (its value set at the start), or
    Level 2's stoichiometryMath (which :mod:`.odes` requires to be constant)."""
    where = f"species reference to '{ref.getSpecies()}' in reaction '{r.getId()}'"
    if ref.isSetStoichiometryMath():
        return conv.convert(ref.getStoichiometryMath().getMath(), where)
    n = ref.getStoichiometry() if ref.isSetStoichiometry() else 1.0
    value = sympy.Integer(int(n)) if math.isfinite(n) and n == int(n) else sympy.Float(n)
    if not ref.isSetId():
        return value
    facts.quantities[ref.getId()] = Quantity(ref.getId(), "stoichiometry", value, True)
    return sym(ref.getId())


def _free_name(name: str, facts: Facts) -> str:
    """``name``, or with a numbered suffix where a model id already has it."""
    out, k = name, 1
    while out in facts.quantities:
        k += 1
        out = f"{name}_{k}"
    return out
