"""An SBML file as a problem: the checks, the ODEs, and the choices a problem file needs
that SBML does not hold, each a stated default the user can change.

* **differentiated parameters**: every non-zero constant parameter the equations use
  (global, or a reaction's local one promoted as ``reaction_param``), in log space where
  positive; ``parameters=[...]`` chooses them;
* **time**: t in (0, ``t_end``), ``saves`` evenly spaced save points from 0
  (:data:`DEFAULT_SAVES`), or the ``save_points`` given; ``t_end`` by default the model's
  own span where one lies beside it (the last measurement time of a PEtab problem naming
  the file: :func:`default_span`), else :data:`DEFAULT_T_END`, the reason stated;
* **loss**: the fit to observations made at a perturbed truth that the shipped problems
  use, here every differentiated parameter times :data:`TRUTH_FACTOR`, scaled per state;
* **tolerances**: rtol 1e-6, atol 1e-10, as the shipped stiff problems; ``stiff = true``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
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
    #: how the time span's end was chosen when none was given (:func:`default_span`)
    span_note: str = ""
    #: the values set in the document before the import (``--set``)
    settings: dict[str, float] = field(default_factory=dict)
    #: a stimulus the PEtab conditions beside the file set and the file leaves at 0
    #: (:func:`condition_hint`), or ""
    condition_note: str = ""

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
    path: str | Path, parameters: Sequence[str] | None = None, t_end: float | None = None,
    saves: int = DEFAULT_SAVES, save_points: Sequence[float] | None = None,
    settings: Mapping[str, float] | None = None,
) -> Imported:  # fmt: skip
    """The problem of the SBML model at ``path`` (options: the module's docstring; no
    ``t_end``: :func:`default_span`'s, its reason in ``Imported.span_note``). ``settings``
    set values in the document first (:func:`apply_settings`: a stimulus the file leaves
    at 0 for its conditions to set, ``import --set il13_level=20``)."""
    note = ""
    if t_end is None and save_points is None:
        t_end, note = default_span(path)
    doc = parse_file(path)
    if settings:
        apply_settings(doc, settings, str(path))
    imported = read_document(doc, str(path), parameters,
                             (t_end or DEFAULT_T_END, saves, save_points))  # fmt: skip
    imported.span_note = note
    imported.settings = dict(settings or {})
    imported.condition_note = condition_hint(path, imported.facts, imported.settings)
    return imported


def condition_hint(path: str | Path, facts: Facts, settings: Mapping[str, float]) -> str:
    """Where a PEtab problem beside the file sets, in its conditions, a quantity the SBML
    leaves at 0 (a stimulus: Raia_CancerResearch2011's ``il13_level`` is 0 in the file, 0, 4,
    20 and 80 in its conditions, and without it 12 of its 14 states never move), a note
    naming it and the ``--set`` that runs one condition; "" otherwise."""
    zero = {q.id for q in facts.quantities.values()
            if q.declared is not None and _is_zero(q.declared) and q.id not in settings}  # fmt: skip
    for table in _petab_files(path, "condition_files"):
        lines = [ln.split("\t") for ln in _lines(table)]
        for k, column in enumerate(lines[0] if lines else []):
            values = sorted({float(v) for v in (row[k] for row in lines[1:] if k < len(row))
                             if _number_text(v)})  # fmt: skip
            others = [v for v in values if v != 0]
            if column in zero and others:
                shown = ", ".join(f"{v:g}" for v in values[:8])
                return (f"the PEtab conditions beside the file ({table.name}) set {column}, 0 "
                        f"in the SBML, to {shown}: as the file stands it runs {column} = 0 (at "
                        f"rest, if {column} is a stimulus); --set {column}={others[0]:g} runs "
                        "another")  # fmt: skip
    return ""


def _number_text(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _petab_files(path: str | Path, key: str) -> list[Path]:
    """The files a PEtab v1 YAML beside ``path`` (naming it among its ``sbml_files``) lists
    under ``key``."""
    folder, name = Path(path).parent, Path(path).name
    out: list[Path] = []
    for yaml in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        text = "\n".join(_lines(yaml))
        if re.search(rf"^\s*-\s*{re.escape(name)}\s*$", text, re.M):
            out += [folder / m for m in _listed(text + "\n", key)]
    return out


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []


def apply_settings(doc: Any, settings: Mapping[str, float], source: str) -> None:
    """Each ``id = value`` set in the document: a parameter's value, a compartment's size or
    a species' initial amount or concentration (as it is declared); an initial assignment
    of that id would override the value, so one there is an error naming it."""
    model = doc.getModel()
    for sid, value in settings.items():
        if model.getInitialAssignmentBySymbol(sid) is not None:
            raise refuse.SBMLError(source, f"--set {sid}", "an initial assignment sets it: "
                                   "set the values its assignment reads instead")  # fmt: skip
        element = (model.getParameter(sid) or model.getCompartment(sid)
                   or model.getSpecies(sid))  # fmt: skip
        if element is None:
            known = [x.getId() for x in (*model.getListOfParameters(),
                                         *model.getListOfCompartments(),
                                         *model.getListOfSpecies())]  # fmt: skip
            raise refuse.SBMLError(source, f"--set {sid}", "no parameter, compartment or "
                                   f"species of that id{hints.did_you_mean(sid, known)}")  # fmt: skip
        if element.getTypeCode() == libsbml_codes()["species"]:
            rc = (element.setInitialAmount(value) if element.isSetInitialAmount()
                  else element.setInitialConcentration(value))  # fmt: skip
        elif element.getTypeCode() == libsbml_codes()["compartment"]:
            rc = element.setSize(value)
        else:
            rc = element.setValue(value)
        if rc != 0:
            raise refuse.SBMLError(source, f"--set {sid}", f"libsbml could not set it ({rc})")


def libsbml_codes() -> dict[str, int]:
    """libsbml's type codes of the elements :func:`apply_settings` sets."""
    import libsbml

    return {"species": libsbml.SBML_SPECIES, "compartment": libsbml.SBML_COMPARTMENT}


def parse_settings(pairs: Sequence[str]) -> dict[str, float]:
    """``NAME=VALUE`` pairs (``--set``) as a mapping; a malformed one is an error saying how."""
    out = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        try:
            if not eq or not name.strip():
                raise ValueError
            out[name.strip()] = float(value)
        except ValueError:
            raise refuse.SBMLError("--set", pair, "write NAME=VALUE, e.g. --set il13_level=20") from None
        if not math.isfinite(out[name.strip()]):
            raise refuse.SBMLError("--set", pair, "the value must be a finite number")
    return out


def default_span(path: str | Path) -> tuple[float, str]:
    """The end of the time span an import takes when none is given, and why: the last
    measurement time of a PEtab problem beside the file (a YAML in its folder naming it among
    its ``sbml_files``, with its ``measurement_files``), else :data:`DEFAULT_T_END`. Read
    without a YAML parser: PEtab v1's YAML lists files one per ``- name`` line."""
    files = _petab_files(path, "measurement_files")
    times = [t for f in files for t in _measurement_times(f)]
    if times:
        return max(times), (f"t_end {max(times):g}: the last measurement time of the PEtab "
                            f"problem beside the file ({files[0].name}); --t-end changes it")  # fmt: skip
    return DEFAULT_T_END, (f"t_end {DEFAULT_T_END:g}: a default (SBML states no time span and no "
                           "PEtab problem lies beside the file); --t-end sets the model's own")  # fmt: skip


def _listed(text: str, key: str) -> list[str]:
    """The ``- item`` lines under ``key:`` in a PEtab v1 YAML."""
    block = re.search(rf"^(\s*)(?:-\s*)?{key}:\s*\n((?:\1\s*-\s*.+\n?)+)", text, re.M)
    return re.findall(r"-\s*(\S+)", block.group(2)) if block else []


def _measurement_times(path: Path) -> list[float]:
    """The ``time`` column of a PEtab measurement table (numbers only; none if unreadable)."""
    lines = _lines(path)
    head = lines[0].split("\t") if lines else []
    if "time" not in head:
        return []
    k = head.index("time")
    out = []
    for row in lines[1:]:
        cells = row.split("\t")
        try:
            out.append(float(cells[k]))
        except (IndexError, ValueError):
            continue
    return [t for t in out if math.isfinite(t) and t > 0]


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
