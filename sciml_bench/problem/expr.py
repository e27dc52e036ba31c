"""The safe expression parser: a whitelist grammar from strings to sympy.

Problem files are data from strangers, so expressions are never given to
``eval``, ``exec``, ``ast`` or ``sympify``. A hand-written tokenizer and
recursive-descent parser accept exactly

    expr  := term (("+" | "-") term)*
    term  := unary (("*" | "/") unary)*
    unary := ("+" | "-") unary | power
    power := atom (("^" | "**") unary)?          # right-associative; -x^2 = -(x^2)
    atom  := NUMBER | NAME | FUNC "(" expr ")" | OP "(" arg ("," arg)* ")" | "(" expr ")"
    arg   := NAME | ("+" | "-")? INTEGER

with NAME one of the names the caller declares and FUNC one of
:data:`FUNCTIONS` (or of the caller's extra ``functions``). ``OP`` calls exist only where
the caller declares operators (array problems: ``lap(u, periodic)``, ``shift(u, 1, neumann)``,
:mod:`sciml_bench.problem.arrays`): their arguments are bare names and integer literals,
never expressions, and the caller's handler validates them and returns the expression the
call stands for. Anything else, including attribute access, subscripts,
keywords, strings and calls of undeclared functions, is a :class:`ExprError`.
Sizes are bounded (length, nesting depth, literal magnitude, constant folding
results) so that no input can hang the parser or blow up memory.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping

import sympy

from sciml_bench.problem import hints

#: functions an expression may call, all of one argument
FUNCTIONS: Mapping[str, sympy.FunctionClass] = {
    "exp": sympy.exp,
    "log": sympy.log,
    "sqrt": sympy.sqrt,
    "tanh": sympy.tanh,
    "sinh": sympy.sinh,
    "cosh": sympy.cosh,
    "sin": sympy.sin,
    "cos": sympy.cos,
    "tan": sympy.tan,
    "abs": sympy.Abs,
}

MAX_LENGTH = 20_000
MAX_DEPTH = 64
MAX_MAGNITUDE = 1e300
MAX_EXPONENT = 64

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\*\*|[-+*/^(),])
    """,
    re.VERBOSE | re.ASCII,  # ASCII digits and spaces only: "٣" is not a number here
)


class ExprError(ValueError):
    """An expression that is not in the grammar, with the reason.

    ``unknown`` is the undeclared name it met (else None), so that a caller who knows the
    file can say where to declare it."""

    def __init__(self, reason: str, unknown: str | None = None):
        super().__init__(reason)
        self.unknown = unknown


#: one argument of an operator call: ``("name", text, position)`` or ``("int", value, position)``
OpArg = tuple[str, "str | int", int]
#: an operator's handler: its arguments and the call's position -> the expression it stands for
Operator = Callable[[list[OpArg], int], sympy.Expr]


def _tokenize(text: str) -> list[tuple[str, str, int]]:
    tokens: list[tuple[str, str, int]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            ch = text[pos]
            hint = ""
            if ch == ".":
                hint = " (attribute access is not allowed)"
            elif ch in "[]{}":
                hint = " (subscripts and literals are not allowed)"
            elif ch in "'\"":
                hint = " (strings are not allowed)"
            raise ExprError(f"unexpected character {ch!r} at position {pos}{hint}")
        kind = m.lastgroup
        assert kind is not None
        if kind != "ws":
            tokens.append((kind, m.group(), pos))
        pos = m.end()
    tokens.append(("end", "", len(text)))
    return tokens


def _check_number(value: sympy.Expr) -> sympy.Expr:
    """Reject constants that cannot be represented as a finite real float64."""
    if not value.free_symbols:
        try:
            f = float(value)
        except (OverflowError, TypeError, ValueError) as e:
            raise ExprError("constant subexpression is not a finite real number") from e
        if not math.isfinite(f) or abs(f) > MAX_MAGNITUDE:
            raise ExprError(f"constant subexpression out of range (|x| <= {MAX_MAGNITUDE:g})")
        if not value.is_Number:
            # fold sin(3), exp(2)... to a float now: re-evaluating ever larger constant
            # trees in sympy is what made long constant sums slow
            return sympy.Float(f)
    return value


class _Parser:
    def __init__(
        self,
        text: str,
        names: Mapping[str, sympy.Expr],
        operators: Mapping[str, Operator] | None = None,
        functions: Mapping[str, sympy.FunctionClass] | None = None,
    ):
        self.tokens = _tokenize(text)
        self.i = 0
        self.names = names
        self.depth = 0
        self.operators = operators or {}
        self.functions = {**FUNCTIONS, **(functions or {})}

    def peek(self) -> tuple[str, str, int]:
        return self.tokens[self.i]

    def take(self) -> tuple[str, str, int]:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def expect(self, value: str) -> None:
        kind, text, pos = self.take()
        if text != value or kind == "end":
            found = "end of expression" if kind == "end" else repr(text)
            raise ExprError(f"expected {value!r} at position {pos}, found {found}")

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ExprError(f"expression nested deeper than {MAX_DEPTH} levels")

    def parse(self) -> sympy.Expr:
        e = self.expr()
        kind, text, pos = self.peek()
        if kind != "end":
            raise ExprError(f"unexpected {text!r} at position {pos}")
        return e

    def expr(self) -> sympy.Expr:
        self.enter()
        # Operands are collected and combined once: folding them one by one is
        # quadratic in sympy (a 20,000-character sum took minutes).
        terms = [self.term()]
        while self.peek()[1] in ("+", "-") and self.peek()[0] == "op":
            op = self.take()[1]
            rhs = self.term()
            terms.append(rhs if op == "+" else -rhs)
        self.depth -= 1
        return terms[0] if len(terms) == 1 else _check_number(sympy.Add(*terms))

    def term(self) -> sympy.Expr:
        factors = [self.unary()]
        while self.peek()[1] in ("*", "/") and self.peek()[0] == "op":
            op, pos = self.take()[1:]
            rhs = self.unary()
            if op == "/":
                if rhs.is_Number and rhs == 0:
                    raise ExprError(f"division by the constant zero at position {pos}")
                rhs = sympy.Pow(rhs, -1)
            factors.append(rhs)
        return factors[0] if len(factors) == 1 else _check_number(sympy.Mul(*factors))

    def take_op(self, *ops: str) -> str | None:
        """The operator at the cursor, taken, if it is one of ``ops``; else None."""
        kind, text, _ = self.peek()
        if kind == "op" and text in ops:
            self.take()
            return text
        return None

    def nested_unary(self) -> sympy.Expr:
        """A unary operand one nesting level deeper (:meth:`enter` bounds the recursion)."""
        self.enter()
        e = self.unary()
        self.depth -= 1
        return e

    def unary(self) -> sympy.Expr:
        sign = self.take_op("+", "-")
        if sign is None:
            return self.power()
        e = self.nested_unary()
        return -e if sign == "-" else e

    def power(self) -> sympy.Expr:
        base = self.atom()
        pos = self.peek()[2]
        if self.take_op("^", "**"):
            exponent = self.nested_unary()
            if exponent.is_Number and abs(float(exponent)) > MAX_EXPONENT:
                raise ExprError(
                    f"exponent {exponent} at position {pos} is too large (|n| <= {MAX_EXPONENT})"
                )
            if base.is_Number and exponent.is_Number:
                try:
                    value = float(base) ** float(exponent)
                except (OverflowError, ZeroDivisionError) as e:
                    raise ExprError(f"constant power at position {pos} is out of range") from e
                if isinstance(value, complex):
                    raise ExprError(f"constant power at position {pos} is not real")
                return _check_number(sympy.Float(value))
            return _check_number(sympy.Pow(base, exponent))
        return base

    def atom(self) -> sympy.Expr:
        kind, text, pos = self.take()
        if kind == "number":
            value: sympy.Expr
            if re.fullmatch(r"\d+", text) and len(text) <= 15:
                value = sympy.Integer(int(text))
            else:
                f = float(text)
                if not math.isfinite(f):
                    raise ExprError(f"number {text!r} at position {pos} is out of range")
                value = sympy.Float(f)
            return _check_number(value)
        if kind == "name":
            if self.peek()[1] == "(" and text in self.operators:
                return self.operator_call(text, pos)
            if self.peek()[1] == "(":
                if text not in self.functions:
                    callable_ = sorted([*self.functions, *self.operators])
                    raise ExprError(
                        f"call of {text!r} at position {pos} is not allowed "
                        f"(allowed functions: {', '.join(callable_)})"
                        + hints.did_you_mean(text, callable_)
                    )
                self.take()
                self.enter()
                arg = self.expr()
                self.depth -= 1
                if self.peek()[1] == ",":
                    raise ExprError(f"{text}() takes exactly one argument")
                self.expect(")")
                return _check_number(self.functions[text](arg))
            if text in self.names:
                return self.names[text]
            if text in self.functions or text in self.operators:
                raise ExprError(f"function {text!r} at position {pos} must be called")
            known = ", ".join(self.names) or "none"
            raise ExprError(
                f"unknown name {text!r} at position {pos} (known names: {known})"
                + hints.did_you_mean(text, self.names),
                unknown=text,
            )
        if kind == "op" and text == "(":
            self.enter()
            e = self.expr()
            self.depth -= 1
            self.expect(")")
            return e
        found = "end of expression" if kind == "end" else repr(text)
        raise ExprError(f"expected a number, name or '(' at position {pos}, found {found}")


    def operator_call(self, name: str, pos: int) -> sympy.Expr:
        """``OP(arg, ...)``: bare names and (signed) integer literals, handed to the
        operator's handler with their positions."""
        self.take()  # "("
        args: list[OpArg] = []
        while True:
            kind, text, at = self.take()
            sign = 1
            if kind == "op" and text in ("+", "-"):
                sign = -1 if text == "-" else 1
                kind, text, _ = self.take()
            if kind == "name" and sign == 1:
                args.append(("name", text, at))
            elif kind == "number" and re.fullmatch(r"\d{1,6}", text):
                args.append(("int", sign * int(text), at))
            else:
                found = "end of expression" if kind == "end" else repr(text)
                raise ExprError(
                    f"{name}() takes names and integers, found {found} at position {at}"
                )
            kind, text, at = self.take()
            if text == ")" and kind == "op":
                return _check_number(self.operators[name](args, pos))
            if text != "," or kind != "op":
                found = "end of expression" if kind == "end" else repr(text)
                raise ExprError(f"expected ',' or ')' at position {at}, found {found}")


def parse(
    text: object,
    names: Mapping[str, sympy.Expr],
    operators: Mapping[str, Operator] | None = None,
    functions: Mapping[str, sympy.FunctionClass] | None = None,
) -> sympy.Expr:
    """Parse ``text`` into a sympy expression over the declared ``names`` (a name may
    stand for any expression: array problems bind sizes and definitions this way).

    ``operators`` and ``functions`` extend the grammar for array problems; without them
    it is exactly the grammar above. Raises :class:`ExprError` for anything outside it.
    """
    if not isinstance(text, str):
        raise ExprError(f"expected an expression string, got {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise ExprError(f"expression longer than {MAX_LENGTH} characters")
    if not text.strip():
        raise ExprError("empty expression")
    try:
        return _Parser(text, names, operators, functions).parse()
    except RecursionError as e:  # sympy's own recursion on pathological trees
        raise ExprError("expression too deeply nested") from e


def symbols(names: Iterable[str]) -> dict[str, sympy.Symbol]:
    """Real sympy symbols for the declared names."""
    return {n: sympy.Symbol(n, real=True) for n in names}
