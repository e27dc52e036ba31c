"""An SBML file as a problem: the checks, the ODEs, and the choices a problem file needs
that SBML does not hold, each a stated default the user can change.

* **differentiated parameters**: every non-zero constant parameter the equations use
  (global, or a reaction's local one promoted as ``reaction_param``), in log space where
  positive; ``parameters=[...]`` chooses them;
* **time**: t in (0, ``t_end``), ``saves`` evenly spaced save points from 0
  (:data:`DEFAULT_T_END`, :data:`DEFAULT_SAVES`), or the ``save_points`` given;
* **loss**: the fit to observations made at a perturbed truth that the shipped problems
  use, here every differentiated parameter times :data:`TRUTH_FACTOR`, scaled per state;
* **tolerances**: rtol 1e-6, atol 1e-10, as the shipped stiff problems; ``stiff = true``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import sympy

from sciml_bench.problem import expr, hints
from sciml_bench.problem.codegen.printing import NamedPrinter
from sciml_bench.problem.sbml import odes, refuse
from sciml_bench.problem.sbml.facts import Facts, read_facts
from sciml_bench.problem.sbml.mathml import TIME, sym
from sciml_bench.problem.spec import NAME_RE, RESERVED, Problem, SBMLModel, from_dict

DEFAULT_T_END = 10.0
DEFAULT_SAVES = 51
#: the truth the fit loss's observations are made at: each differentiated parameter x 1.1
TRUTH_FACTOR = 1.1
RTOL, ATOL = 1e-6, 1e-10
#: the parameter a model without one gets: it scales time (1 leaves the model as it is)
TIME_SCALE = "time_scale"
TIME_SCALE_NOTE = ("the model has no constant parameter to differentiate, so time_scale "
                   "(= 1, the model as written) multiplies every right-hand side: the "
                   "gradient is the sensitivity to the model's speed")


@dataclass
class Imported:
    """A problem table (``spec.from_dict`` validates it), the comments its file shows,
    and the ODE system with the problem-file name of each symbol."""

    data: dict[str, Any]
    comments: dict[str, str]
    system: odes.System
    names: dict[sympy.Symbol, str]
    source: str
    facts: Facts
    #: the checked libsbml document it was read from (:mod:`.semantic` changes copies)
    document: Any = None

    def text(self, name: sympy.Expr) -> str:
        """An expression as the problem file writes it."""
        return _Printer(self.names).doprint(name)

    def problem(self) -> Problem:
        """The validated problem, holding its SBML file (:meth:`sbml_model`)."""
        return replace(from_dict(self.data, source=self.source), sbml_model=self.sbml_model())

    def sbml_model(self) -> SBMLModel | None:
        """The file as AMICI and libRoadRunner run it, with each state's formula and each
        parameter's id there; None where a parameter is no element of it (``time_scale``)
        or the file cannot be read again."""
        params = [self.facts.quantities.get(p) for p in self.system.params]
        if any(q is None for q in params) or not Path(self.source).is_file():
            return None
        return SBMLModel(
            path=self.source, text=Path(self.source).read_text(encoding="utf-8"),
            states=tuple(_formula(s, self.facts) for s in self.system.states),
            parameters=tuple(self.system.params),
            locals=tuple(q.origin or None for q in params if q is not None),
        )  # fmt: skip


def parse_file(path: str | Path) -> Any:
    """The checked libsbml document of ``path`` (:mod:`.refuse`: the raw bytes first)."""
    source = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise refuse.SBMLError(source, "file", f"cannot read: {e.strerror or e}") from None
    return parse_text(refuse.check_bytes(raw, source), source)


def parse_text(text: str, source: str) -> Any:
    """libsbml's document of checked text (:func:`.refuse.check_bytes`)."""
    try:
        import libsbml
    except ImportError:
        raise refuse.SBMLError(source, "file", "reading SBML needs python-libsbml: "
                               "pip install -c constraints.txt -e '.[sbml]'") from None  # fmt: skip
    doc = libsbml.readSBMLFromString(text)
    refuse.check_document(doc, source)
    refuse.check_model(doc.getModel(), source)
    return doc


def read(
    path: str | Path, parameters: Sequence[str] | None = None, t_end: float = DEFAULT_T_END,
    saves: int = DEFAULT_SAVES, save_points: Sequence[float] | None = None,
) -> Imported:  # fmt: skip
    """The problem of the SBML model at ``path`` (options: the module's docstring)."""
    return read_document(parse_file(path), str(path), parameters, (t_end, saves, save_points))


def read_document(
    doc: Any, source: str, parameters: Sequence[str] | None = None,
    time: tuple[float, int, Sequence[float] | None] = (DEFAULT_T_END, DEFAULT_SAVES, None),
) -> Imported:  # fmt: skip
    """:func:`read` of a checked libsbml document (:func:`parse_text`): what
    :mod:`.semantic` re-imports after changing one parameter's value in it. ``time`` is
    ``(t_end, saves, save_points)``."""
    facts = read_facts(doc, source)
    system = _system(facts, _chosen(facts, parameters, source), parameters is None, source)
    names = _names([*system.states, *map(sym, system.params), *used_derived(system)])
    data, comments = _table(facts, system, names, Path(source).stem, time)
    data["description"] = (f"Imported from {Path(source).name} (SBML Level {facts.level[0]} "
                           f"Version {facts.level[1]}) by sciml-bench import")  # fmt: skip
    return Imported(data, comments, system, names, source, facts, doc)


def load(path: str | Path, **options: Any) -> Problem:
    """The validated :class:`Problem` of an SBML file (``run --sbml``), holding the file
    itself for the backends that run SBML (:meth:`Imported.problem`)."""
    return read(path, **options).problem()


def _formula(state: sympy.Symbol, facts: Facts) -> str:
    """A state's value as an SBML formula: its id, or, for an amount held where the id means
    a concentration (``amount:X``), ``X * C``, C its compartment (concentration times size)."""
    name = state.name
    if name.startswith("amount:"):
        species = name.split(":", 1)[1]
        return f"{species} * {facts.quantities[species].compartment}"
    return name


def _system(facts: Facts, chosen: list[str], default: bool, source: str) -> odes.System:
    """The ODEs; by default, a parameter that cannot stay a symbol (a stoichiometry, a
    switch's condition, a function outside the grammar, an exponent) is kept as its number,
    and the parameters no equation uses are dropped. A model left with none gets
    :data:`TIME_SCALE` (= 1) multiplying every right-hand side."""
    while True:
        try:
            system = odes.build(facts, chosen, source)
        except odes.Pinned as e:
            if not default:
                raise
            chosen = [p for p in chosen if p not in e.blame]
            continue
        exponents = _in_exponents([*map(system.expanded, system.rhs), *system.starts],
                                  chosen) if default else set()  # fmt: skip
        if not exponents:
            break
        chosen = [p for p in chosen if p not in exponents]
    if default:
        system = odes.prune(system)
    if not system.params:
        if not default:
            raise refuse.SBMLError(source, "parameters", "choose at least one parameter")
        name = TIME_SCALE
        while name in facts.quantities:
            name += "_"
        system.rhs = [sym(name) * e for e in system.rhs]
        system.params, system.theta0 = [name], [1.0]
        system.notes[sym(name)] = TIME_SCALE_NOTE
    return system


def used_derived(system: odes.System) -> list[sympy.Symbol]:
    """The derived parameters the right-hand sides read, in model order."""
    used = set().union(*(e.free_symbols for e in system.rhs)) if system.rhs else set()
    return [d for d in system.derived if d in used]


def _in_exponents(rhs: list[sympy.Expr], chosen: list[str]) -> set[str]:
    """The chosen parameters in an exponent (a Hill coefficient): kept as numbers by
    default, since x^h's derivative in h is x^h log x, undefined where x = 0 (a species
    starting at 0), and the exact Jacobian's h x^(h-1) is 0/0 there."""
    found: set[str] = set()
    for e in rhs:
        for power in e.atoms(sympy.Pow):
            found |= {p for p in chosen if sym(p) in power.exp.free_symbols}
    return found


def _chosen(facts: Facts, parameters: Sequence[str] | None, source: str) -> list[str]:
    """The differentiated parameters: the default (non-zero ones) or those named."""
    allowed = odes.candidates(facts)
    if parameters is None:
        return [p for p in allowed if not _is_zero(facts.quantities[p].declared)]
    unknown = [p for p in parameters if p not in allowed]
    if unknown:
        shown = ", ".join(allowed[:12]) + (f" and {len(allowed) - 12} more" if len(allowed) > 12 else "")
        raise refuse.SBMLError(source, "parameters", f"cannot differentiate {unknown[0]!r}: "
                               f"{_not_a_candidate(facts, unknown[0])}; the model's parameters "
                               f"that can be: {shown or 'none'}")  # fmt: skip
    return list(dict.fromkeys(parameters))


def _not_a_candidate(facts: Facts, name: str) -> str:
    """Why ``name`` is not among :func:`odes.candidates`, and what to do instead."""
    q = facts.quantities.get(name)
    if q is None:
        return "the model has no parameter of that id" + hints.did_you_mean(
            name, [k for k, v in facts.quantities.items() if v.kind in ("parameter", "local")])
    if q.kind not in ("parameter", "local"):
        return (f"it is a {q.kind}, not a parameter (to differentiate its value, make it a "
                f"parameter in the SBML and set the {q.kind} from it by an initial assignment)")
    if name in facts.rate_rules or name in facts.assignment_rules:
        return "a rule sets it, so it is no constant to differentiate: differentiate what its rule reads"
    if name in facts.initial_assignments:
        return ("an initial assignment sets it from other values (a derived parameter): "
                "differentiate the parameters its assignment reads; its path is in their gradient")
    return "it declares no value"


def _is_zero(value: sympy.Expr | None) -> bool:
    """Whether a declared value is zero: ``sympy.Float(0.0) != 0`` holds in SymPy 1.14, so a
    parameter declared ``0.0`` would be differentiated; an undeclared one is not zero."""
    return value is not None and bool(sympy.sympify(value).is_zero)


def _names(symbols: Sequence[sympy.Symbol]) -> dict[sympy.Symbol, str]:
    """A problem-file name for each symbol: the SBML id where the grammar allows it, else
    a close valid one (``amount:S`` is ``S_amount``; a reserved name gets ``_``)."""
    out: dict[sympy.Symbol, str] = {TIME: "t"}
    used = {"t"}
    for s in symbols:
        base = s.name.split(":", 1)[1] + "_amount" if s.name.startswith("amount:") else s.name
        base = re.sub(r"^[^A-Za-z]+", "", base)[:60] or "x"
        name = base if base not in RESERVED else base + "_"
        k = 1
        while name in used or not NAME_RE.fullmatch(name):
            k += 1
            name = f"{base}_{k}"
        out[s] = name
        used.add(name)
    return out


def _table(
    facts: Facts, system: odes.System, names: dict[sympy.Symbol, str], stem: str,
    time: tuple[float, int, Sequence[float] | None],
) -> tuple[dict[str, Any], dict[str, str]]:  # fmt: skip
    """The problem table and its comments."""
    printer = _Printer(names)
    params: dict[str, Any] = {}
    for p, v in zip(system.params, system.theta0, strict=True):
        params[names[sym(p)]] = v if v > 0 else {"value": v, "log": False}
    derived = used_derived(system)
    for d in derived:  # an expression string: evaluated once from the numbers above
        params[names[d]] = _text(printer, system.derived[d], f"parameters.{names[d]}")
    truth = {names[sym(p)]: float(f"{v * TRUTH_FACTOR:.12g}") for p, v in zip(system.params, system.theta0, strict=True)}
    t_end, saves, points = time
    save = {"points": list(points)} if points is not None else {"linspace": [0.0, t_end, saves]}
    data: dict[str, Any] = {
        "name": re.sub(r"[^A-Za-z0-9_.-]", "-", facts.name or stem)[:100].lstrip("-_.") or "sbml",
        "description": "",
        "stiff": True,
        "state": {"names": [names[s] for s in system.states], "initial": _starts(printer, system, names)},
        "parameters": params,
        "equations": {names[s]: _text(printer, e, names[s]) for s, e in zip(system.states, system.rhs, strict=True)},
        "time": {"span": [0.0, float(points[-1]) if points is not None else t_end], "save": save},
        "tolerances": {"rtol": RTOL, "atol": ATOL},
        "loss": {"kind": "fit", "truth": truth},
    }  # fmt: skip
    comments = {f"{'state' if s in system.states else 'parameters'}.{names[s]}": note
                for s, note in system.notes.items()}  # fmt: skip
    for d in derived:
        comments[f"parameters.{names[d]}"] = (
            f"derived: {d.name}'s initial assignment, an expression of the differentiated "
            "parameters evaluated once (its path to the gradient kept)")  # fmt: skip
    return data, comments


def _starts(printer: _Printer, system: odes.System, names: dict[sympy.Symbol, str]) -> list[Any]:
    """Each state's initial value: its number, or (an initial assignment that reads a
    differentiated parameter) the expression, so that the start moves with them."""
    return [_text(printer, e, f"state.initial.{names[s]}") if e.free_symbols else v
            for s, e, v in zip(system.states, system.starts, system.y0, strict=True)]  # fmt: skip


def _text(printer: _Printer, e: sympy.Expr, where: str) -> str:
    """``e`` in the grammar of :mod:`sciml_bench.problem.expr`, checked by parsing it."""
    text = printer.doprint(e)
    try:
        expr.parse(text, {n: sympy.Symbol(n) for n in printer.names.values()})
    except expr.ExprError as err:
        raise refuse.SBMLError("", f"equations.{where}", f"no problem file can state it: {err}") from None
    return text


class _Printer(NamedPrinter):
    """sympy as the expression grammar writes it: the problem-file names (the code
    generators' printer), ``abs``, and the constants e and pi as floats."""

    def _print_Abs(self, e: sympy.Abs) -> str:
        return f"abs({self._print(e.args[0])})"

    def _print_Exp1(self, e: Any) -> str:
        return repr(math.e)

    def _print_Pi(self, e: Any) -> str:
        return repr(math.pi)
