"""An SBML model's facts (:mod:`.facts`) as an ODE system: which quantities are states,
their initial values, their right-hand sides, and what every id means in time.

The maths, for a species S in compartment C of size V:

* **changed by reactions** (not a boundary condition, not constant, no rule): with
  ``v_r`` each reaction's rate (substance/time) and ``n_Sr`` its signed stoichiometry,
  the amount moves as ``dA/dt = f · Σ_r n_Sr v_r`` (``f`` the conversion factor, 1 if
  none). Where V is constant the state is the value S's id has in math: the amount
  (``hasOnlySubstanceUnits``) or the concentration, ``d[S]/dt = f · Σ_r n_Sr v_r / V``.
  Where V changes (a rule sets it), the state is the amount A, and S means ``A / V``;
* **a rate rule** ``dS/dt = g``: the state is S's value, with rate g;
* **an assignment rule** ``S = h``: no state; h is substituted wherever S appears;
* **otherwise** S's amount is constant (its concentration follows V).

Compartments and parameters are states when a rate rule sets them, substituted when an
assignment rule does, and constants otherwise, except the parameters chosen to be
differentiated, which stay symbols. Initial values come from initial assignments, then
assignment rules, then declared values, evaluated at t = 0 in dependency order, as
expressions of the chosen parameters: a state whose initial assignment reads one
(``STAT5 = init_STAT5``) starts at that expression, and a constant whose initial assignment
reads one (``k2 = 2*k``) is a *derived* parameter, a symbol of its own whose expression the
problem file states (:mod:`sciml_bench.problem.initial`), never a number frozen at the
import's parameter values (which would drop its path to the gradient).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import sympy

from sciml_bench.problem.sbml.facts import Facts
from sciml_bench.problem.sbml.mathml import TIME, inexpressible, sym
from sciml_bench.problem.sbml.refuse import SBMLError, variable_stoichiometry


class NoState(SBMLError):
    """A model with no ODE state: every quantity is constant or set by an assignment rule.
    Nothing to integrate, so no problem; ``system`` holds its values in time (expressions of
    t), which :mod:`.variables` evaluates directly."""

    system: System


class Pinned(SBMLError):
    """A refusal that keeping some differentiated parameters as numbers may lift (a
    stoichiometry, a switch or a function of them): ``blame`` names them."""

    blame: frozenset[str] = frozenset()


def _blamed(err: SBMLError, e: sympy.Expr, chosen: Iterable[str]) -> SBMLError:
    """``err`` as a :class:`Pinned` where ``e`` holds chosen parameters."""
    blame = frozenset(p for p in chosen if sym(p) in e.free_symbols)
    if not blame:
        return err
    pinned = Pinned(err.source, err.key, err.reason)
    pinned.blame = blame
    return pinned


@dataclass
class System:
    """The ODEs. States are symbols: an SBML id's own, or ``amount:ID`` for an amount
    held where the id means a concentration in a changing compartment."""

    states: list[sympy.Symbol]
    y0: list[float]
    rhs: list[sympy.Expr]
    #: differentiated parameters' ids and values
    params: list[str]
    theta0: list[float]
    #: every compartment's, species' and parameter's value in time (over states, params, t)
    values: dict[str, sympy.Expr] = field(default_factory=dict)
    #: every species' amount in time
    amounts: dict[str, sympy.Expr] = field(default_factory=dict)
    #: what each state is, for the problem file's comments
    notes: dict[sympy.Symbol, str] = field(default_factory=dict)
    #: each state's initial value as an expression of the chosen parameters (a number
    #: where it reads none); ``y0`` holds their values at ``theta0``
    starts: list[sympy.Expr] = field(default_factory=list)
    #: derived parameters: constants whose value at t = 0 reads chosen parameters, kept as
    #: their own symbols in ``rhs``, each an expression of the chosen parameters
    derived: dict[sympy.Symbol, sympy.Expr] = field(default_factory=dict)

    def expanded(self, e: sympy.Expr) -> sympy.Expr:
        """``e`` with every derived parameter replaced by its expression."""
        return e.xreplace(self.derived) if self.derived else e


def candidates(facts: Facts) -> list[str]:
    """The parameters that may be differentiated: global and local ones with a declared
    value, set neither by a rule nor by an initial assignment (they would be derived). A
    global one declared ``constant="false"`` counts where nothing changes it (no rule;
    events are refused before this), as the collection's Alkan_SciSignal2018 declares all
    of its 52: its value is then as constant as a constant's."""
    ruled = {*facts.rate_rules, *facts.assignment_rules, *facts.initial_assignments}
    return [q.id for q in facts.quantities.values()
            if q.kind in ("parameter", "local") and q.id not in ruled
            and q.declared is not None]  # fmt: skip


def _resolver(table: Mapping[sympy.Symbol, sympy.Expr], source: str) -> Callable[[sympy.Expr], sympy.Expr]:
    """Substitutes ``table``'s entries into an expression until none of its keys is left
    (assignment rules refer to each other; a cycle is refused)."""
    done: dict[sympy.Symbol, sympy.Expr] = {}
    busy: set[sympy.Symbol] = set()

    def one(s: sympy.Symbol) -> sympy.Expr:
        if s in done:
            return done[s]
        if s in busy:
            raise SBMLError(source, f"'{s.name}'", "its value depends on itself (a cycle of "
                            "rules or initial assignments)")  # fmt: skip
        busy.add(s)
        done[s] = resolve(table[s])
        busy.discard(s)
        return done[s]

    def resolve(e: sympy.Expr) -> sympy.Expr:
        inner = {s: one(s) for s in e.free_symbols if s in table}
        return e.xreplace(inner) if inner else e

    return resolve


def initial_values(facts: Facts, source: str) -> dict[str, float]:
    """Every quantity's value at t = 0 (initial assignment, else assignment rule, else
    its declared value); reactions' ids mean their rates."""
    exprs = initial_expressions(facts, source, {})
    return {q: _number(e, source, f"{facts.quantities[q].kind} '{q}'") for q, e in exprs.items()}


def initial_expressions(
    facts: Facts, source: str, chosen: Mapping[str, float]
) -> dict[str, sympy.Expr]:
    """Every quantity's value at t = 0 (:func:`initial_values`) as an expression of the
    ``chosen`` parameters (their symbols kept), each checked to be a finite number at their
    values; a number where it reads none of them."""
    table = _initial_table(facts, source)
    for p in chosen:
        table.pop(sym(p), None)
    resolve = _resolver(table, source)
    at = {sym(p): sympy.Float(v) for p, v in chosen.items()}
    out: dict[str, sympy.Expr] = {}
    for q in facts.quantities.values():
        key = sym(q.id)
        if key not in table and q.id not in chosen:
            raise SBMLError(source, f"{q.kind} '{q.id}'", "no value: neither declared, nor "
                            "set by an initial assignment or a rule")  # fmt: skip
        e = key if q.id in chosen else resolve(key)
        value = _number(e.xreplace(at), source, f"{q.kind} '{q.id}'")
        out[q.id] = e if e.free_symbols else sympy.Float(value)
    return out


def _initial_table(facts: Facts, source: str) -> dict[sympy.Symbol, sympy.Expr]:
    """What each id is at t = 0, before resolving: initial assignment, else assignment
    rule, else the declared value; reactions' ids their rates, time 0."""
    table: dict[sympy.Symbol, sympy.Expr] = {TIME: sympy.Integer(0)}
    for r in facts.reactions:
        table[sym(r.id)] = r.rate
    for q in facts.quantities.values():
        e = facts.initial_assignments.get(q.id, facts.assignment_rules.get(q.id, q.declared))
        if e is None and q.kind == "compartment":
            e = sympy.Float(1.0)  # SBML Level 2's size of a compartment that declares none
        if e is not None:
            table[sym(q.id)] = e
    return table


def number(v: float) -> sympy.Expr:
    """A constant as sympy: an integer where it is one (``2*x`` reads better than
    ``2.0*x``), else a float."""
    return sympy.Integer(int(v)) if abs(v) < 1e15 and v == int(v) else sympy.Float(v)


def _number(e: sympy.Expr, source: str, where: str) -> float:
    if isinstance(e, sympy.logic.boolalg.Boolean):
        raise SBMLError(source, where, "its initial value is a boolean, not a number")
    try:
        value = complex(e.evalf())
    except (TypeError, ValueError, AttributeError):  # a free symbol; a boolean
        names = sorted(s.name for s in e.free_symbols)
        raise SBMLError(source, where, f"its initial value refers to {', '.join(names) or e} "
                        "which the model does not define") from None  # fmt: skip
    if value.imag or value.real != value.real or abs(value.real) == float("inf"):
        raise SBMLError(source, where, f"its initial value {e} is not a finite real number")
    return value.real


def build(facts: Facts, chosen: Iterable[str], source: str) -> System:
    """The ODE system with the ``chosen`` parameters kept as symbols, the initial values
    and derived parameters as expressions of them."""
    init = initial_values(facts, source)
    chosen = list(chosen)
    starts = initial_expressions(facts, source, {p: init[p] for p in chosen})
    kinds = _classify(facts, source)
    system = System([], [], [], chosen, [init[p] for p in chosen])
    system.derived = _derived(facts, starts, kinds, set(chosen))
    table = _meaning(facts, init, starts, kinds, set(chosen), system.derived)
    resolve = _resolver(table, source)
    for d, e in system.derived.items():
        _check(e, source, f"initial assignment to '{d.name}'", chosen)
    for r in facts.reactions:
        _check(system.expanded(resolve(r.rate)), source, f"reaction '{r.id}'", chosen)
    for qid, kind in kinds.items():
        _add_state(facts, qid, kind, (init, starts), resolve, system, source)
    for q in facts.quantities.values():
        if q.kind != "stoichiometry":
            system.values[q.id] = system.expanded(resolve(sym(q.id)))
        if q.kind == "species":
            comp = system.expanded(resolve(sym(q.compartment)))
            system.amounts[q.id] = system.values[q.id] * (1 if q.amount_valued else comp)
    if not system.states:
        err = NoState(source, "model", "no state: every quantity is constant or set by an "
                      "assignment rule, so there is nothing for a solver to integrate (its "
                      "variables are functions of t: `sciml-bench reference --sbml FILE "
                      "--variables all` evaluates them)")  # fmt: skip
        err.system = system
        raise err
    return system


def _derived(
    facts: Facts, starts: Mapping[str, sympy.Expr], kinds: Mapping[str, str], chosen: set[str]
) -> dict[sympy.Symbol, sympy.Expr]:
    """The derived parameters: quantities that are no state, no chosen parameter and set by
    no assignment rule (so constant in time), whose value at t = 0 reads a chosen one. A
    stoichiometry set by an initial assignment of parameters (the Test Suite's 01082:
    ``4 * p1``) is one: constant in time, its path to the gradient kept."""
    return {sym(q.id): starts[q.id] for q in facts.quantities.values()
            if q.id not in kinds and q.id not in chosen
            and q.id not in facts.assignment_rules and q.id not in facts.rate_rules
            and starts[q.id].free_symbols}  # fmt: skip


def _classify(facts: Facts, source: str) -> dict[str, str]:
    """Each state's kind, in model order: ``rate`` (a rate rule), ``value`` (reactions
    move the value its id has) or ``amount`` (reactions move its amount, the id means
    amount / size)."""
    moved = {s for r in facts.reactions for s, _ in r.terms}
    varying = {*facts.rate_rules, *facts.assignment_rules}
    kinds: dict[str, str] = {}
    for q in facts.quantities.values():
        if q.id in facts.rate_rules:
            kinds[q.id] = "rate"
        elif (q.kind == "species" and q.id in moved and not q.boundary and not q.constant
              and q.id not in facts.assignment_rules):
            kinds[q.id] = "amount" if q.compartment in varying and not q.amount_valued else "value"
    for target in [*facts.rate_rules, *facts.assignment_rules]:
        if target not in facts.quantities:
            raise SBMLError(source, f"rule for '{target}'", "sets no compartment, species or "
                            "parameter")  # fmt: skip
        if facts.quantities[target].kind == "stoichiometry":
            raise variable_stoichiometry(source, f"species reference '{target}'")
    return kinds


def _meaning(
    facts: Facts, init: Mapping[str, float], starts: Mapping[str, sympy.Expr],
    kinds: Mapping[str, str], chosen: set[str], derived: Mapping[sympy.Symbol, sympy.Expr],
) -> dict[sympy.Symbol, sympy.Expr]:  # fmt: skip
    """What each id stands for in time, where it is not a state's, a chosen parameter's or
    a derived parameter's own symbol: an assignment rule, a constant, ``amount / size``, a
    reaction's rate."""
    varying = {*facts.rate_rules, *facts.assignment_rules}
    table: dict[sympy.Symbol, sympy.Expr] = {}
    for r in facts.reactions:
        table[sym(r.id)] = r.rate
    for q in facts.quantities.values():
        key, kind = sym(q.id), kinds.get(q.id)
        if kind == "amount":
            table[key] = sympy.Symbol(f"amount:{q.id}", real=True) / sym(q.compartment)
        elif q.id in facts.assignment_rules:
            table[key] = facts.assignment_rules[q.id]
        elif kind is None and q.id not in chosen and key not in derived:
            if q.kind == "species" and q.compartment in varying and not q.amount_valued:
                # a species no rule or reaction moves keeps its amount; its concentration
                # follows its compartment's size
                amount = starts[q.id] * starts[q.compartment]
                table[key] = (amount if amount.free_symbols else number(float(amount))) / sym(q.compartment)
            else:
                table[key] = number(init[q.id])
    return table


def _add_state(
    facts: Facts, qid: str, kind: str, init: tuple[Mapping[str, float], Mapping[str, sympy.Expr]],
    resolve: Callable[[sympy.Expr], sympy.Expr], system: System, source: str,
) -> None:  # fmt: skip
    """One state: its symbol, initial value (a number and an expression of the chosen
    parameters, ``init``), right-hand side and note."""
    q = facts.quantities[qid]
    values, starts = init
    start = starts[qid] if kind != "amount" else starts[qid] * starts[q.compartment]
    _check(start, source, f"initial value of '{qid}'", system.params)
    system.starts.append(start)
    moving = "; it starts at an expression of the parameters (an initial assignment)" if (
        start.free_symbols) else ""
    if kind == "rate":
        rhs = resolve(facts.rate_rules[qid])
        _check(system.expanded(rhs), source, f"rate rule for '{qid}'", system.params)
        system.states.append(sym(qid))
        system.y0.append(values[qid])
        system.notes[sym(qid)] = f"{q.kind} {qid}, set by a rate rule{moving}"
        system.rhs.append(rhs)
        return
    flux = sympy.Integer(0)
    for r in facts.reactions:
        for species, n in r.terms:
            if species == qid:
                stoich = resolve(n)
                # constant in time: a number, or (derived) an expression of the parameters
                if system.expanded(stoich).free_symbols - set(map(sym, system.params)):
                    err = variable_stoichiometry(source, f"reaction '{r.id}'")
                    raise _blamed(err, system.expanded(stoich), system.params)
                flux += stoich * resolve(sym(r.id))
    if q.conversion:
        flux *= resolve(sym(q.conversion))
    size = values[q.compartment]
    if kind == "amount":
        state = sympy.Symbol(f"amount:{qid}", real=True)
        system.y0.append(values[qid] * size)
        system.notes[state] = (f"the amount of species {qid} (its compartment {q.compartment} "
                               f"changes){moving}")  # fmt: skip
    else:
        state = sym(qid)
        system.y0.append(values[qid])
        unit = "amount" if q.amount_valued else f"concentration in {q.compartment} (size {size:g})"
        system.notes[state] = f"species {qid}, {unit}{moving}"
        if not q.amount_valued:
            # a derived compartment size stays its symbol; a constant one is its number
            flux = flux / resolve(sym(q.compartment))
    system.states.append(state)
    system.rhs.append(flux)


def _check(e: sympy.Expr, source: str, where: str, chosen: Iterable[str]) -> None:
    why = inexpressible(e)
    if why:
        raise _blamed(SBMLError(source, where, why), e, chosen)


def prune(system: System) -> System:
    """Drops the differentiated parameters that neither a right-hand side nor an initial
    value reads (their gradient is zero), putting their values in (a derived parameter
    left reading none becomes its number)."""
    exprs = [*map(system.expanded, system.rhs), *system.starts]
    used = set().union(*(e.free_symbols for e in exprs)) if exprs else set()
    keep = [i for i, p in enumerate(system.params) if sym(p) in used]
    drop = {sym(p): number(v) for p, v in zip(system.params, system.theta0, strict=True)
            if sym(p) not in used}  # fmt: skip
    system.values = {k: v.xreplace(drop) for k, v in system.values.items()}
    system.amounts = {k: v.xreplace(drop) for k, v in system.amounts.items()}
    system.starts = [e.xreplace(drop) for e in system.starts]
    derived = {d: e.xreplace(drop) for d, e in system.derived.items()}
    constant = {d: number(float(e)) for d, e in derived.items() if not e.free_symbols}
    system.derived = {d: e for d, e in derived.items() if d not in constant}
    system.rhs = [e.xreplace(constant) for e in system.rhs]
    system.params = [system.params[i] for i in keep]
    system.theta0 = [system.theta0[i] for i in keep]
    return system
