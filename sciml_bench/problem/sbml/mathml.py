"""SBML math (libsbml's ``ASTNode`` trees of MathML) to sympy, and the test of whether
an expression is one the problem format, and so every target, can state.

An SBML id becomes the real symbol of that name (:func:`sym`); time is :data:`TIME`, a
symbol no SBML id can spell. Function definitions are expanded at each call (their
body with the arguments substituted). Everything MathML has is converted, so that what
folds to a number once the model's constants are put in (``floor(2.5)``, a ``piecewise``
whose condition is on constants) is accepted; what stays symbolic and lies outside the
expression grammar of :mod:`sciml_bench.problem.expr` (``piecewise`` on a state or on
time, ``floor``, ``arcsin``, ``min``, ...) is refused by :func:`inexpressible` with
the element it came from. ``delay`` and ``rateOf`` are refused at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import sympy

from sciml_bench.problem.sbml.refuse import SBMLError

#: time (``csymbol`` time): ``:`` cannot occur in an SBML id, so no id can clash with it
TIME = sympy.Symbol("csymbol:time", real=True)
#: Avogadro's constant as SBML Level 3 Version 1 fixes it (and the Test Suite's results use)
AVOGADRO = 6.02214179e23
#: how deep MathML may nest (function calls count their body's depth)
MAX_DEPTH = 200

#: the functions the expression grammar has (sqrt is a power in sympy)
EXPRESSIBLE = (sympy.exp, sympy.log, sympy.tanh, sympy.sinh, sympy.cosh, sympy.sin,
               sympy.cos, sympy.tan, sympy.Abs)  # fmt: skip


def sym(sbml_id: str) -> sympy.Symbol:
    """The symbol of an SBML id."""
    return sympy.Symbol(sbml_id, real=True)


def _recip(f: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda x: 1 / f(x)


def _unary_table() -> dict[int, Callable[[Any], Any]]:
    import libsbml as L

    return {
        L.AST_FUNCTION_EXP: sympy.exp, L.AST_FUNCTION_LN: sympy.log,
        L.AST_FUNCTION_ABS: sympy.Abs, L.AST_FUNCTION_SIN: sympy.sin,
        L.AST_FUNCTION_COS: sympy.cos, L.AST_FUNCTION_TAN: sympy.tan,
        L.AST_FUNCTION_SINH: sympy.sinh, L.AST_FUNCTION_COSH: sympy.cosh,
        L.AST_FUNCTION_TANH: sympy.tanh, L.AST_FUNCTION_SEC: _recip(sympy.cos),
        L.AST_FUNCTION_CSC: _recip(sympy.sin), L.AST_FUNCTION_COT: _recip(sympy.tan),
        L.AST_FUNCTION_SECH: _recip(sympy.cosh), L.AST_FUNCTION_CSCH: _recip(sympy.sinh),
        L.AST_FUNCTION_COTH: _recip(sympy.tanh), L.AST_FUNCTION_ARCSIN: sympy.asin,
        L.AST_FUNCTION_ARCCOS: sympy.acos, L.AST_FUNCTION_ARCTAN: sympy.atan,
        L.AST_FUNCTION_ARCSINH: sympy.asinh, L.AST_FUNCTION_ARCCOSH: sympy.acosh,
        L.AST_FUNCTION_ARCTANH: sympy.atanh, L.AST_FUNCTION_ARCSEC: lambda x: sympy.acos(1 / x),
        L.AST_FUNCTION_ARCCSC: lambda x: sympy.asin(1 / x),
        L.AST_FUNCTION_ARCCOT: lambda x: sympy.atan(1 / x),
        L.AST_FUNCTION_ARCCOTH: lambda x: sympy.atanh(1 / x),
        L.AST_FUNCTION_ARCSECH: lambda x: sympy.acosh(1 / x),
        L.AST_FUNCTION_ARCCSCH: lambda x: sympy.asinh(1 / x),
        L.AST_FUNCTION_FLOOR: sympy.floor, L.AST_FUNCTION_CEILING: sympy.ceiling,
        L.AST_FUNCTION_FACTORIAL: sympy.factorial, L.AST_LOGICAL_NOT: sympy.Not,
    }  # fmt: skip


def _nary_table() -> dict[int, Callable[[list[Any]], Any]]:
    import libsbml as L

    def chain(rel: Callable[[Any, Any], Any]) -> Callable[[list[Any]], Any]:
        return lambda a: sympy.And(*[rel(x, y) for x, y in zip(a, a[1:], strict=False)])

    return {
        L.AST_PLUS: lambda a: sympy.Add(*a),
        L.AST_TIMES: lambda a: sympy.Mul(*a),
        L.AST_MINUS: lambda a: -a[0] if len(a) == 1 else a[0] - a[1],
        L.AST_DIVIDE: lambda a: a[0] / a[1],
        L.AST_POWER: lambda a: a[0] ** a[1], L.AST_FUNCTION_POWER: lambda a: a[0] ** a[1],
        L.AST_FUNCTION_ROOT: lambda a: a[0] ** 0.5 if len(a) == 1 else a[1] ** (1 / a[0]),
        L.AST_FUNCTION_LOG: lambda a: sympy.log(a[0], 10) if len(a) == 1
        else sympy.log(a[1]) / sympy.log(a[0]),
        L.AST_FUNCTION_MIN: lambda a: sympy.Min(*a), L.AST_FUNCTION_MAX: lambda a: sympy.Max(*a),
        L.AST_FUNCTION_QUOTIENT: lambda a: sympy.floor(a[0] / a[1]),
        L.AST_FUNCTION_REM: lambda a: a[0] - a[1] * sympy.sign(a[0] / a[1])
        * sympy.floor(sympy.Abs(a[0] / a[1])),
        L.AST_LOGICAL_AND: lambda a: sympy.And(*a), L.AST_LOGICAL_OR: lambda a: sympy.Or(*a),
        L.AST_LOGICAL_XOR: lambda a: sympy.Xor(*a),
        L.AST_LOGICAL_IMPLIES: lambda a: sympy.Implies(a[0], a[1]),
        L.AST_RELATIONAL_EQ: chain(sympy.Eq), L.AST_RELATIONAL_NEQ: chain(sympy.Ne),
        L.AST_RELATIONAL_LT: chain(sympy.Lt), L.AST_RELATIONAL_LEQ: chain(sympy.Le),
        L.AST_RELATIONAL_GT: chain(sympy.Gt), L.AST_RELATIONAL_GEQ: chain(sympy.Ge),
    }  # fmt: skip


class Converter:
    """Converts one model's math; ``functions`` are its function definitions by id."""

    def __init__(self, functions: Mapping[str, Any], source: str):
        self.functions = functions
        self.source = source
        self.unary = _unary_table()
        self.nary = _nary_table()
        self.bodies: dict[str, tuple[list[sympy.Symbol], sympy.Expr]] = {}

    def convert(self, ast: Any, where: str, local: Mapping[str, sympy.Expr] | None = None) -> Any:
        """``ast`` as sympy; ``local`` maps ids that mean something else here (a kinetic
        law's local parameters, a function's arguments). ``where`` names the element."""
        if ast is None:
            raise SBMLError(self.source, where, "no math (an empty MathML element)")
        try:
            return self._node(ast, where, local or {}, 0)
        except SBMLError:
            raise
        except (TypeError, ValueError, ZeroDivisionError, RecursionError) as e:
            raise SBMLError(self.source, where, f"math no target can express: {e}") from None

    def _node(self, ast: Any, where: str, local: Mapping[str, sympy.Expr], depth: int) -> Any:
        import libsbml as L

        if depth > MAX_DEPTH:
            raise SBMLError(self.source, where, f"math nested deeper than {MAX_DEPTH} levels")
        kind = ast.getType()
        leaf = self._leaf(ast, kind, where, local)
        if leaf is not None:
            return leaf
        args = [self._node(ast.getChild(i), where, local, depth + 1)
                for i in range(ast.getNumChildren())]  # fmt: skip
        if kind in self.unary and len(args) == 1:
            return self.unary[kind](args[0])
        if kind in self.nary and (kind in (L.AST_PLUS, L.AST_TIMES) or args):
            return self.nary[kind](args)
        if kind == L.AST_FUNCTION_PIECEWISE:
            return _piecewise(args)
        if kind == L.AST_FUNCTION:
            return self._call(ast.getName(), args, where, depth)
        if kind == L.AST_FUNCTION_DELAY:
            raise SBMLError(self.source, where, "delay() is not supported: a problem file "
                            "states ODEs, not delay equations")  # fmt: skip
        if kind == L.AST_FUNCTION_RATE_OF:
            raise SBMLError(self.source, where, "rateOf() is not supported: a problem file "
                            "cannot refer to a derivative")  # fmt: skip
        name = ast.getName() or f"MathML node type {kind}"
        raise SBMLError(self.source, where, f"the MathML element {name!r} is not supported")

    def _leaf(self, ast: Any, kind: int, where: str, local: Mapping[str, sympy.Expr]) -> Any:
        """A number, name or constant; None for an operator."""
        import libsbml as L

        if kind == L.AST_INTEGER:
            return sympy.Integer(ast.getInteger())
        if kind in (L.AST_REAL, L.AST_REAL_E):
            value = ast.getReal()
            return sympy.Float(value) if value == value and abs(value) != float("inf") else (
                sympy.nan if value != value else sympy.oo * (1 if value > 0 else -1))
        if kind == L.AST_RATIONAL:
            return sympy.Rational(ast.getNumerator(), ast.getDenominator())
        if kind == L.AST_NAME:
            name = ast.getName()
            return local[name] if name in local else sym(name)
        constants = {L.AST_NAME_TIME: TIME, L.AST_NAME_AVOGADRO: sympy.Float(AVOGADRO),
                     L.AST_CONSTANT_E: sympy.E, L.AST_CONSTANT_PI: sympy.pi,
                     L.AST_CONSTANT_TRUE: sympy.true, L.AST_CONSTANT_FALSE: sympy.false}  # fmt: skip
        return constants.get(kind)

    def _call(self, name: str, args: list[Any], where: str, depth: int) -> Any:
        """A function definition's body with ``args`` in place of its arguments."""
        fd = self.functions.get(name)
        if fd is None:
            raise SBMLError(self.source, where, f"call of {name!r}, which no function "
                            "definition declares")  # fmt: skip
        if name not in self.bodies:
            self.bodies[name] = (None, None)  # type: ignore[assignment]  # marks recursion
            dummies = [sympy.Dummy(f"{name}_{i}") for i in range(fd.getNumArguments())]
            local = {fd.getArgument(i).getName(): d for i, d in enumerate(dummies)}
            body = self._node(fd.getBody(), f"function '{name}'", local, depth + 1)
            self.bodies[name] = (dummies, body)
        dummies, body = self.bodies[name]
        if dummies is None:
            raise SBMLError(self.source, f"function '{name}'", "a function that calls itself")
        if len(args) != len(dummies):
            raise SBMLError(self.source, where, f"{name}() takes {len(dummies)} argument(s), "
                            f"given {len(args)}")  # fmt: skip
        return body.xreplace(dict(zip(dummies, args, strict=True)))


def _piecewise(args: list[Any]) -> Any:
    """``piecewise(v1, c1, v2, c2, ..., otherwise)``; no otherwise is undefined (NaN)."""
    pairs = [(args[i], args[i + 1]) for i in range(0, len(args) - 1, 2)]
    otherwise = args[-1] if len(args) % 2 else sympy.nan
    return sympy.Piecewise(*pairs, (otherwise, True))


def inexpressible(e: Any) -> str | None:
    """Why ``e`` is not an expression of the problem grammar (None when it is):
    a switch, a boolean, a function outside :data:`EXPRESSIBLE`, a non-finite number."""
    if isinstance(e, sympy.logic.boolalg.Boolean) and not isinstance(e, sympy.Symbol):
        return "a boolean (true/false, a comparison) where a number is needed"
    if e.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan):
        return "an infinite or undefined value (e.g. a division by zero)"
    for node in sympy.preorder_traversal(e):
        if isinstance(node, sympy.Piecewise):
            return ("a piecewise whose condition depends on a state, time or a "
                    "differentiated parameter: no target of a problem file expresses a switch")
        if isinstance(node, sympy.Function) and not isinstance(node, EXPRESSIBLE):
            return (f"the function {type(node).__name__}() of a state, time or a differentiated "
                    "parameter: the problem grammar has exp, log, sqrt, powers, abs, and "
                    "sin/cos/tan with their hyperbolic forms")
        if isinstance(node, sympy.logic.boolalg.Boolean) and not isinstance(node, sympy.Symbol):
            return "a boolean (true/false, a comparison) where a number is needed"
    return None
