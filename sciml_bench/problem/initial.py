"""Initial values that depend on parameters, and derived parameters.

A state's initial value may be a number or an expression of the parameters
(``initial = ["10*k", 0.0]``): ``y(t0) = y0(θ)``, so that a change of ``θ`` moves the
start as it moves the equations. A *derived* parameter is a string in ``[parameters]``
(``k2 = "2*k"``): an expression of the differentiated parameters (and of other derived
ones), evaluated once, not itself differentiated; its path to the loss is part of the
gradient with respect to the parameters it is made of. SBML initial assignments
(``init_STAT5`` setting a species' start) and parameters assigned from others are
imported this way instead of frozen to numbers at the import's parameter values.

The maths every gradient then carries: with ``y0 = y0(θ)``,

    forward sensitivities start at  S(t0) = ∂y0/∂θ   (not 0),
    an adjoint adds                 λ(t0)ᵀ ∂y0/∂θ   to ∫ Fᵀλ dt,

and a library that differentiates through its own solve (Diffrax, torch, Julia) sees
``y0`` computed from ``θ`` inside the differentiated function. Derived parameters are
substituted into the equations and the initial values before anything else sees them, so
every target differentiates ``k2 = 2k`` by the chain rule with no code of its own.

Only scalar problems take them: an array problem's initial values are grid expressions of
sizes and indices (:mod:`sciml_bench.problem.arrays`), and an ensemble or a training run
varies and trains the parameters of problems whose start is fixed (both refused by name).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import sympy

from sciml_bench.problem import expr


class _Reader(Protocol):
    def fail(self, key: str, reason: str) -> Exception: ...


def is_derived(value: Any) -> bool:
    """Whether a ``[parameters]`` entry is a derived parameter (an expression string)."""
    return isinstance(value, str)


def derived_parameters(
    r: _Reader, table: Mapping[str, Any], differentiated: Sequence[str], states: Sequence[str]
) -> list[tuple[str, sympy.Expr]]:
    """The derived parameters of ``[parameters]`` (string entries), each as an expression of
    the ``differentiated`` ones alone (derived ones substituted, in any order; a cycle is
    refused), in file order."""
    raw = {str(k): v for k, v in table.items() if is_derived(v)}
    symbols = expr.symbols([*differentiated, *raw])
    parsed: dict[str, sympy.Expr] = {}
    for name, text in raw.items():
        key = f"parameters.{name}"
        try:
            parsed[name] = expr.parse(text, symbols)
        except expr.ExprError as e:
            raise r.fail(key, f"{e}{_only_parameters(e, states)}") from None
    return [(name, _resolve(r, name, parsed, symbols, set())) for name in raw]


def _only_parameters(e: expr.ExprError, states: Sequence[str]) -> str:
    """The fix when a derived parameter does not parse: it is evaluated once, from the
    parameters (a state or time belongs in the equations); a string in ``[parameters]`` is
    a derived parameter, so a differentiated one is written as a number."""
    if e.unknown in (*states, "t"):
        return ("; a derived parameter is evaluated once, from the parameters: a value that "
                "changes in time belongs in the equations")  # fmt: skip
    return ("; a string in [parameters] is a derived parameter, an expression of the "
            "differentiated ones: to differentiate this one, write a number")  # fmt: skip


def _resolve(
    r: _Reader, name: str, parsed: Mapping[str, sympy.Expr], symbols: Mapping[str, sympy.Symbol],
    busy: set[str],
) -> sympy.Expr:  # fmt: skip
    """``parsed[name]`` with every derived parameter it reads replaced by its expression."""
    if name in busy:
        raise r.fail(f"parameters.{name}", "a derived parameter that depends on itself (a "
                     f"cycle through {', '.join(sorted(busy))}); define it from the "
                     "differentiated (numeric) parameters")  # fmt: skip
    e = parsed[name]
    inner = {symbols[d]: _resolve(r, d, parsed, symbols, busy | {name})
             for d in parsed if symbols[d] in e.free_symbols}  # fmt: skip
    return e.xreplace(inner) if inner else e


def substitution(derived: Sequence[tuple[str, sympy.Expr]]) -> dict[sympy.Symbol, sympy.Expr]:
    """Each derived parameter's symbol mapped to its expression (``xreplace`` it in)."""
    return {sympy.Symbol(name, real=True): e for name, e in derived}


def initial_values(
    r: _Reader, raw: Any, states: Sequence[str], params: Sequence[str],
    derived: Sequence[tuple[str, sympy.Expr]], theta0: Sequence[float],
) -> tuple[list[float], tuple[sympy.Expr, ...]]:  # fmt: skip
    """``[state] initial``: the values at ``θ0`` and, where any entry is an expression, every
    entry as an expression of the parameters (``()`` when all are numbers)."""
    if not isinstance(raw, list) or len(raw) != len(states):
        got = f"{len(raw)} values" if isinstance(raw, list) else type(raw).__name__
        raise r.fail("state.initial", f"expected {len(states)} values (numbers, or expressions "
                     f"of the parameters), got {got}")  # fmt: skip
    symbols = expr.symbols([*params, *(n for n, _ in derived)])
    sub = substitution(derived)
    exprs: list[sympy.Expr] = []
    for i, (name, v) in enumerate(zip(states, raw, strict=True)):
        exprs.append(_one(r, f"state.initial[{i}]", name, v, symbols, sub, states))
    if all(e.is_Number for e in exprs):
        return [float(e) for e in exprs], ()
    at = {sympy.Symbol(p, real=True): sympy.Float(v) for p, v in zip(params, theta0, strict=False)}
    values = [value_at(r, f"state.initial[{i}]", f"the initial value of state {name!r}", e, at)
              for i, (name, e) in enumerate(zip(states, exprs, strict=True))]  # fmt: skip
    return values, tuple(exprs)


def _one(
    r: _Reader, key: str, state: str, v: Any, symbols: Mapping[str, sympy.Symbol],
    sub: Mapping[sympy.Symbol, sympy.Expr], states: Sequence[str],
) -> sympy.Expr:  # fmt: skip
    """One initial value: a finite number, or an expression of the parameters."""
    if isinstance(v, str):
        try:
            return expr.parse(v, symbols).xreplace(sub)
        except expr.ExprError as e:
            where = ("; an initial value is an expression of the parameters (the state at t0 "
                     "cannot depend on states or time)") if e.unknown in (*states, "t") else ""  # fmt: skip
            raise r.fail(key, f"{e}{where}") from None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise r.fail(key, f"expected a number or an expression string, got {type(v).__name__}")
    try:
        f = float(v)
    except OverflowError:  # an integer literal beyond float64
        f = math.inf
    if not math.isfinite(f):
        raise r.fail(key, f"the initial value of state {state!r} is {v}, not a finite number; "
                     f"write the value {state} starts from at t0, e.g. 0.0")  # fmt: skip
    return sympy.Float(f) if f != int(f) or abs(f) >= 1e15 else sympy.Integer(int(f))


def value_at(
    r: _Reader, key: str, what: str, e: sympy.Expr, at: Mapping[sympy.Symbol, Any]
) -> float:
    """``e`` at the initial parameters ``at``: a finite real number, else refused at ``key``
    naming ``what`` it is (an initial value, an event's time)."""
    try:
        value = complex(e.xreplace(at).evalf())
    except (TypeError, ValueError):
        value = complex(math.nan)
    if value.imag or not math.isfinite(value.real):
        raise r.fail(key, f"{what}, {e}, is not a finite real number at the parameters' "
                     "values")  # fmt: skip
    return value.real


def depends(problem: Any) -> bool:
    """Whether ``problem``'s initial state moves with its parameters."""
    return bool(getattr(problem, "initial", ()))


def expressions(problem: Any) -> list[sympy.Expr]:
    """Every initial value as an expression (numbers where constant)."""
    if problem.initial:
        return list(problem.initial)
    return [sympy.Float(v) for v in problem.y0]
