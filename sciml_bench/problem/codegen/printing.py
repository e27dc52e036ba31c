"""What every code generator shares: the printers' base, symbol names, CSE, dead bindings.

Each target's printer starts from :class:`NamedPrinter`: declared symbols print as the
names the generated code binds them to, floats at full precision (``repr`` round-trips
every bit), integers as integers and rationals as a quotient of two integers, so that no
target ever rounds a constant of the problem file differently from another.
:class:`NativePrinter` is the one printer of the native targets (NumPy, torch, JAX,
Julia), which differ only in their function prefix and power operator; CasADi and DiffSL
write powers their own way (:mod:`.casadi`, :mod:`.diffsl_printing`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import sympy
from sympy.printing.precedence import PRECEDENCE, precedence
from sympy.printing.str import StrPrinter

#: the time symbol every problem's expressions use
TIME = sympy.Symbol("t", real=True)

#: a CSE result: the bound subexpressions ``(symbol, expr)`` and the reduced expressions
Reduced = tuple[list[tuple[sympy.Symbol, sympy.Expr]], list[sympy.Expr]]


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


class NativePrinter(NamedPrinter):
    """sympy to NumPy, torch, JAX or Julia source: functions prefixed by ``module``
    (``"np."``; ``""`` for Julia's Base), powers with ``pow_op`` (``**`` or ``^``)."""

    def __init__(self, names: dict[sympy.Symbol, str], module: str, pow_op: str):
        super().__init__(names)
        self.module = module
        self.pow_op = pow_op

    def _print_Exp1(self, expr: Any) -> str:
        return f"{self.module}exp(1.0)"

    def _print_Pi(self, expr: Any) -> str:
        return f"{self.module}pi"

    def _print_Function(self, expr: Any) -> str:
        name = {"Abs": "abs"}.get(type(expr).__name__, type(expr).__name__)
        return f"{self.module}{name}({', '.join(self._print(a) for a in expr.args)})"

    _print_Abs = _print_Function

    def _print_Pow(self, expr: sympy.Pow, rational: bool = False) -> str:
        base, exp = expr.as_base_exp()
        if exp == sympy.S.Half:
            return f"{self.module}sqrt({self._print(base)})"
        if exp.is_Number and exp < 0:
            # a reciprocal, so that x**-2 never meets an integer power of a negative base
            inner = base if exp == -1 else sympy.Pow(base, -exp, evaluate=False)
            return f"(1/{self.parenthesize(inner, PRECEDENCE['Mul'], strict=True)})"
        b = self.parenthesize(base, PRECEDENCE["Pow"], strict=True)
        if precedence(base) <= PRECEDENCE["Pow"] or (base.is_Number and base < 0):
            b = f"({self._print(base)})"
        e = self._print(exp)
        if not (exp.is_Integer and exp >= 0) and not exp.is_Symbol:
            e = f"({e})"
        return f"{b}{self.pow_op}{e}"


def symbol_names(*groups: tuple[Iterable[sympy.Symbol], str]) -> dict[sympy.Symbol, str]:
    """Time as ``t``, then each group's symbols by its format: ``{name}`` is the symbol's
    name, ``{k}`` its position in the group (``(states, "s_{name}")``, ``(states, "x{k}")``)."""
    names: dict[sympy.Symbol, str] = {TIME: "t"}
    for symbols, fmt in groups:
        names.update({s: fmt.format(name=s.name, k=k) for k, s in enumerate(symbols)})
    return names


def cse(exprs: Sequence[sympy.Expr]) -> Reduced:
    """Common subexpressions of ``exprs``, bound to real symbols ``cse0, cse1, ...``."""
    return sympy.cse(list(exprs), symbols=sympy.numbered_symbols("cse", real=True), order="none")


def drop_unused(lines: list[str], bound: str = r"(s_|p_)\w+") -> list[str]:
    """``lines`` without the bindings (``name = ...``, ``name`` matching ``bound``) that no
    later line reads, until none is left (a binding may be read by a dropped one alone)."""
    while True:
        out = []
        for i, ln in enumerate(lines):
            name = ln.split(" = ", 1)[0].strip()
            if re.fullmatch(bound, name) and not any(
                re.search(rf"\b{re.escape(name)}\b", later) for later in lines[i + 1 :]
            ):
                continue
            out.append(ln)
        if len(out) == len(lines):
            return out
        lines = out
