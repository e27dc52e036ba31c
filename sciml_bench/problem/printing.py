"""The number and name printing every code generator shares.

Each target's printer (:mod:`~sciml_bench.problem.codegen`,
:mod:`~sciml_bench.problem.codegen_arrays`, :mod:`~sciml_bench.problem.codegen_casadi`,
:mod:`~sciml_bench.problem.printing_diffsl`)
starts from :class:`NamedPrinter`: declared symbols print as the names the generated code
binds them to, floats at full precision (``repr`` round-trips every bit), integers as
integers and rationals as a quotient of two integers, so that no target ever rounds a
constant of the problem file differently from another.
"""

from __future__ import annotations

import sympy
from sympy.printing.str import StrPrinter


class NamedPrinter(StrPrinter):
    """``StrPrinter`` at full precision, with symbols printed by ``names``."""

    def __init__(self, names: dict[sympy.Symbol, str]):
        super().__init__({"full_prec": True})
        self.names = names

    def _print_Symbol(self, expr: sympy.Symbol) -> str:
        return self.names[expr]

    def _print_Float(self, expr: sympy.Float) -> str:
        return repr(float(expr))

    def _print_Integer(self, expr: sympy.Integer) -> str:
        return str(int(expr))

    def _print_Rational(self, expr: sympy.Rational) -> str:
        return f"({int(expr.p)}/{int(expr.q)})"
