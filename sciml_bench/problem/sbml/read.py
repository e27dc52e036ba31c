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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sympy
from sympy.printing.str import StrPrinter

from sciml_bench.problem import expr
from sciml_bench.problem.sbml import odes, refuse
from sciml_bench.problem.sbml.facts import Facts, read_facts
from sciml_bench.problem.sbml.mathml import TIME, sym
from sciml_bench.problem.spec import NAME_RE, RESERVED, Problem, from_dict

DEFAULT_T_END = 10.0
DEFAULT_SAVES = 51
#: the truth the fit loss's observations are made at: each differentiated parameter x 1.1
TRUTH_FACTOR = 1.1
RTOL, ATOL = 1e-6, 1e-10


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

    def text(self, name: sympy.Expr) -> str:
        """An expression as the problem file writes it."""
        return _Printer(self.names).doprint(name)


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
                               "pip install 'sciml-bench[sbml]'") from None  # fmt: skip
    doc = libsbml.readSBMLFromString(text)
    refuse.check_document(doc, source)
    refuse.check_model(doc.getModel(), source)
    return doc


def read(
    path: str | Path, parameters: Sequence[str] | None = None, t_end: float = DEFAULT_T_END,
    saves: int = DEFAULT_SAVES, save_points: Sequence[float] | None = None,
) -> Imported:  # fmt: skip
    """The problem of the SBML model at ``path`` (options: the module's docstring)."""
    source = str(path)
    facts = read_facts(parse_file(path), source)
    chosen = _chosen(facts, parameters, source)
    system = odes.build(facts, chosen, source)
    if parameters is None:
        system = odes.prune(system)
    if not system.params:
        raise refuse.SBMLError(source, "parameters", "no non-zero constant parameter that the "
                               "equations use, so nothing to differentiate")  # fmt: skip
    names = _names([*system.states, *map(sym, system.params)])
    data, comments = _table(facts, system, names, Path(path).stem, (t_end, saves, save_points))
    data["description"] = (f"Imported from {Path(path).name} (SBML Level {facts.level[0]} "
                           f"Version {facts.level[1]}) by sciml-bench import")  # fmt: skip
    return Imported(data, comments, system, names, source, facts)


def load(path: str | Path, **options: Any) -> Problem:
    """The validated :class:`Problem` of an SBML file (``run --sbml``)."""
    imported = read(path, **options)
    return from_dict(imported.data, source=str(path))


def _chosen(facts: Facts, parameters: Sequence[str] | None, source: str) -> list[str]:
    """The differentiated parameters: the default (non-zero ones) or those named."""
    allowed = odes.candidates(facts)
    if parameters is None:
        return [p for p in allowed if facts.quantities[p].declared != 0]
    unknown = [p for p in parameters if p not in allowed]
    if unknown:
        raise refuse.SBMLError(source, "parameters", f"cannot differentiate {unknown}: choose "
                               f"from the constant parameters {allowed}")  # fmt: skip
    return list(dict.fromkeys(parameters))


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
    truth = {names[sym(p)]: float(f"{v * TRUTH_FACTOR:.12g}") for p, v in zip(system.params, system.theta0, strict=True)}
    t_end, saves, points = time
    save = {"points": list(points)} if points is not None else {"linspace": [0.0, t_end, saves]}
    data: dict[str, Any] = {
        "name": re.sub(r"[^A-Za-z0-9_.-]", "-", facts.name or stem)[:100].lstrip("-_.") or "sbml",
        "description": "",
        "stiff": True,
        "state": {"names": [names[s] for s in system.states], "initial": system.y0},
        "parameters": params,
        "equations": {names[s]: _text(printer, e, names[s]) for s, e in zip(system.states, system.rhs, strict=True)},
        "time": {"span": [0.0, float(points[-1]) if points is not None else t_end], "save": save},
        "tolerances": {"rtol": RTOL, "atol": ATOL},
        "loss": {"kind": "fit", "truth": truth},
    }  # fmt: skip
    comments = {f"state.{names[s]}": note for s, note in system.notes.items()}
    return data, comments


def _text(printer: _Printer, e: sympy.Expr, where: str) -> str:
    """``e`` in the grammar of :mod:`sciml_bench.problem.expr`, checked by parsing it."""
    text = printer.doprint(e)
    try:
        expr.parse(text, {n: sympy.Symbol(n) for n in printer.names.values()})
    except expr.ExprError as err:
        raise refuse.SBMLError("", f"equations.{where}", f"no problem file can state it: {err}") from None
    return text


class _Printer(StrPrinter):
    """sympy as the expression grammar writes it: the problem-file names, ``abs``,
    constants as floats."""

    def __init__(self, names: dict[sympy.Symbol, str]):
        super().__init__()
        self.names = names

    def _print_Symbol(self, e: sympy.Symbol) -> str:
        return self.names[e]

    def _print_Float(self, e: sympy.Float) -> str:
        return repr(float(e))

    def _print_Abs(self, e: sympy.Abs) -> str:
        return f"abs({self._print(e.args[0])})"

    def _print_Exp1(self, e: Any) -> str:
        return repr(math.e)

    def _print_Pi(self, e: Any) -> str:
        return repr(math.pi)
