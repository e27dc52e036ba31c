"""A scalar problem as an SBML Level 3 Version 2 model: each state a non-constant
parameter with a rate rule ``dy/dt = f(y, θ, t)``, each named parameter a constant
parameter, time the ``csymbol`` time; a state whose initial value is an expression of the
parameters gets an initial assignment (its declared value is the one at the parameters'
values). The math is built node by node from the sympy
expressions (no formula text is parsed), so ``log`` is ``ln`` and nothing else
changes meaning. What SBML has no place for (the save points, tolerances and loss) is
the importer's to choose again (:mod:`.read`). An array problem is written one rate rule per
element (:mod:`.write_arrays`); networks are refused.
"""

from __future__ import annotations

from typing import Any

import sympy

from sciml_bench.problem.arrays import step
from sciml_bench.problem.sbml.refuse import SBMLError
from sciml_bench.problem.sbml.write_arrays import write_model
from sciml_bench.problem.spec import Problem


def _functions() -> dict[type, int]:
    import libsbml as L

    return {sympy.exp: L.AST_FUNCTION_EXP, sympy.log: L.AST_FUNCTION_LN,
            sympy.Abs: L.AST_FUNCTION_ABS, sympy.sin: L.AST_FUNCTION_SIN,
            sympy.cos: L.AST_FUNCTION_COS, sympy.tan: L.AST_FUNCTION_TAN,
            sympy.sinh: L.AST_FUNCTION_SINH, sympy.cosh: L.AST_FUNCTION_COSH,
            sympy.tanh: L.AST_FUNCTION_TANH}  # fmt: skip


def ast(e: sympy.Expr, where: str = "") -> Any:
    """``e`` as a libsbml ``ASTNode``; the symbol ``t`` is time."""
    import libsbml as L

    if isinstance(e, sympy.Symbol):
        if e.name == "t":
            node = L.ASTNode(L.AST_NAME_TIME)
            node.setName("time")
            return node
        node = L.ASTNode(L.AST_NAME)
        node.setName(e.name)
        return node
    if e.is_Integer:
        node = L.ASTNode(L.AST_INTEGER)
        node.setValue(int(e))
        return node
    if e.is_Number:
        node = L.ASTNode(L.AST_REAL)
        node.setValue(float(e))
        return node
    if isinstance(e, step):
        return _step(e.args[0], where)
    kinds = {sympy.Add: L.AST_PLUS, sympy.Mul: L.AST_TIMES, sympy.Pow: L.AST_POWER,
             **_functions()}  # fmt: skip
    kind = kinds.get(type(e)) or kinds.get(getattr(e, "func", None))  # type: ignore[call-overload]
    if kind is None:
        raise SBMLError("", where, f"{type(e).__name__} has no SBML counterpart here")
    node = L.ASTNode(kind)
    for arg in e.args:
        node.addChild(ast(arg, where))
    return node


def _step(x: sympy.Expr, where: str) -> Any:
    """Heaviside ``step(x)`` as ``piecewise(1, x >= 0, 0)``."""
    import libsbml as L

    geq = L.ASTNode(L.AST_RELATIONAL_GEQ)
    geq.addChild(ast(x, where))
    geq.addChild(ast(sympy.Integer(0), where))
    node = L.ASTNode(L.AST_FUNCTION_PIECEWISE)
    for child in (ast(sympy.Integer(1), where), geq, ast(sympy.Integer(0), where)):
        node.addChild(child)
    return node


def document(problem: Problem) -> Any:
    """The libsbml document of ``problem``."""
    import libsbml as L

    if problem.networks:
        raise SBMLError(problem.source, "problem", f"{problem.name} is a problem with networks: "
                        "only problems without networks are written as SBML")  # fmt: skip
    if problem.events:  # written as rate rules alone, the doses would vanish without a word
        raise SBMLError(problem.source, "events", f"{problem.name} has [[events]], which the "
                        "SBML export does not write yet (issue 51)")  # fmt: skip
    doc = L.SBMLDocument(3, 2)
    model = doc.createModel()
    model.setId(_sid(problem.name))
    model.setName(problem.description or problem.name)
    if problem.array is not None:
        write_model(model, problem, ast, _parameter)
        return doc
    for name, value in zip(problem.param_names, problem.theta0, strict=True):
        _parameter(model, name, value, constant=True)
    for name, y0, rhs in zip(problem.state_names, problem.y0, problem.rhs, strict=True):
        _parameter(model, name, y0, constant=False)
        rule = model.createRateRule()
        rule.setVariable(name)
        rule.setMath(ast(rhs, f"equations.{name}"))
    for name, start in zip(problem.state_names, problem.initial, strict=False):
        if start.free_symbols:  # a start that moves with the parameters (problem/initial.py)
            assignment = model.createInitialAssignment()
            assignment.setSymbol(name)
            assignment.setMath(ast(start, f"state.initial.{name}"))
    return doc


def _parameter(model: Any, name: str, value: float, constant: bool) -> None:
    p = model.createParameter()
    p.setId(name)
    p.setValue(float(value))
    p.setConstant(constant)


def _sid(name: str) -> str:
    """A problem name as an SBML id (letters, digits, ``_``; no leading digit)."""
    out = "".join(c if c.isalnum() and c.isascii() else "_" for c in name)
    return out if out[:1].isalpha() else f"m_{out}"


def text(problem: Problem) -> str:
    """``problem`` as SBML text."""
    import libsbml as L

    return L.writeSBMLToString(document(problem))
