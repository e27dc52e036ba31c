"""sympy expressions as DiffSL writes them: the printer both DiffSL forms share.

DiffSL (https://github.com/martinjrobins/diffsl) has ``+ - * /``, no power operator, a
fixed set of functions and float literals without signs; :class:`DiffSLPrinter` writes
that, and raises :class:`~sciml_bench.problem.generated.NotExpressible` for anything
else. Used by :mod:`.diffsl` (scalar models) and :mod:`.diffsl_arrays` (array models).
"""

from __future__ import annotations

from typing import Any

import sympy

from sciml_bench.problem.codegen.printing import NamedPrinter
from sciml_bench.problem.generated import NotExpressible

#: sympy functions as DiffSL writes them (its pre-defined functions). ``tan`` is
#: ``sin/cos``: DiffSL's ``tan`` compiles to ``llvm.tan``, which Enzyme (its automatic
#: differentiation) cannot differentiate, and pydiffsol 0.6.2 aborts the process on it
FUNCTIONS = {
    "exp": "exp({})", "log": "log({})", "sqrt": "sqrt({})", "tanh": "tanh({})",
    "sinh": "sinh({})", "cosh": "cosh({})", "sin": "sin({})", "cos": "cos({})",
    "tan": "(sin({0})/cos({0}))", "Abs": "abs({})",
}  # fmt: skip
#: integer powers written as products (cheaper than pow, and exact for negative bases)
MAX_PRODUCT_POWER = 4


class DiffSLPrinter(NamedPrinter):
    """sympy to DiffSL expressions: DiffSL has ``+ - * /``, no power operator, and the
    functions in :data:`FUNCTIONS`; numbers are float literals (symbols print by name, as
    in every generator)."""

    def emptyPrinter(self, expr: Any) -> str:  # noqa: N802 (sympy's name)
        raise NotExpressible(f"{type(expr).__name__} ({expr}) has no DiffSL form")

    def _print_Float(self, expr: sympy.Float) -> str:
        return number(float(expr))

    def _print_Integer(self, expr: sympy.Integer) -> str:
        return number(float(expr))

    def _print_Rational(self, expr: sympy.Rational) -> str:
        return number(float(expr))

    def _print_Exp1(self, expr: Any) -> str:
        return "exp(1.0)"

    def _print_Pi(self, expr: Any) -> str:
        return number(float(sympy.pi))

    def _print_Function(self, expr: Any) -> str:
        name = type(expr).__name__
        if name not in FUNCTIONS:
            raise NotExpressible(f"function {name} has no DiffSL equivalent")
        (arg,) = expr.args  # the grammar's functions take one argument
        return FUNCTIONS[name].format(self._print(arg))

    _print_Abs = _print_Function

    def _print_Pow(self, expr: sympy.Pow, rational: bool = False) -> str:
        base, exp = expr.as_base_exp()
        b = self._print(base) if base.is_Atom else f"({self._print(base)})"
        if exp == sympy.S.Half:
            return f"sqrt({self._print(base)})"
        if exp.is_Integer and 0 < abs(int(exp)) <= MAX_PRODUCT_POWER:
            product = "*".join([b] * abs(int(exp)))
            return f"({product})" if exp > 0 else f"(1.0/({product}))"
        return f"pow({self._print(base)}, {self._print(exp)})"

    def _print_ImaginaryUnit(self, expr: Any) -> str:
        raise NotExpressible("a complex constant (e.g. sqrt of a negative number)")

    def _print_NaN(self, expr: Any) -> str:
        raise NotExpressible("a constant that is not a number (nan)")

    _print_Infinity = _print_NegativeInfinity = _print_ComplexInfinity = _print_NaN


def number(v: float) -> str:
    """A DiffSL float literal: digits, an optional fraction and exponent; signs are
    operators, so a negative value is parenthesised."""
    if v != v or v in (float("inf"), float("-inf")):
        raise NotExpressible(f"the constant {v} has no DiffSL form")
    text = repr(abs(v))
    return f"(-{text})" if v < 0 else text
