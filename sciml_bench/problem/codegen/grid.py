"""The native targets' pieces for an array problem: the grid printer, names, operators.

An array problem (:mod:`sciml_bench.problem.arrays`) is one elementwise template per state
on a grid; NumPy, torch, JAX (:mod:`.arrays_python`) and Julia (:mod:`.julia`) write it
as array code on the whole grid. Operators are written on a state's grid as shifts
(``_shift``, the boundary applied) or reductions; axes are written negative in Python,
so one body serves one trajectory and a batch, and as ``ndim - a`` in Julia, which is
column-major (C axis ``a`` is Julia dimension ``ndim - a`` of a state's view).
"""

from __future__ import annotations

import math
from typing import Any

import sympy

from sciml_bench.problem.arrays import ArrayModel, Operator
from sciml_bench.problem.codegen.printing import NativePrinter, symbol_names

#: the array targets' function prefixes
MODULE = {"numpy": "np.", "torch": "torch.", "jax": "jnp.", "julia": ""}
#: the bindings an array body may drop when nothing reads them
BOUND = r"(s_|p_|c_|o|cse)\w+"


class GridPrinter(NativePrinter):
    """sympy template -> elementwise source for one target (Julia inside ``@.``)."""

    def __init__(self, target: str, names: dict[sympy.Symbol, str]):
        super().__init__(names, MODULE[target], "^" if target == "julia" else "**")
        self.target = target

    def _print_step(self, expr: Any) -> str:
        x = self._print(expr.args[0])
        return {
            # the real part: complex step through a step function has a zero derivative
            "numpy": f"np.heaviside(np.real({x}), 1.0)",
            "torch": f"({x} >= 0).to(torch.float64)",
            "jax": f"jnp.where({x} >= 0, 1.0, 0.0)",
            "julia": f"ifelse({x} >= 0, 1.0, 0.0)",
        }[self.target]


def names(m: ArrayModel, target: str) -> dict[sympy.Symbol, str]:
    """States ``s_``, parameters ``p_``, indices (``c_`` in torch, built per call; the
    module constants ``_I_`` elsewhere) and operators ``o{k}``."""
    index = "c_{name}" if target == "torch" else "_I_{name}"
    return symbol_names((m.state_symbols, "s_{name}"), (m.param_symbols, "p_{name}"),
                        (m.index_symbols, index),
                        ([op.symbol for op in m.operators], "o{k}"))  # fmt: skip


def axis(m: ArrayModel, a: int, target: str) -> int:
    """C axis ``a`` as the target indexes a state's grid: negative in Python (batch
    dimensions may lead), ``ndim - a`` in Julia (reversed, 1-based)."""
    return m.ndim - a if target == "julia" else a - m.ndim


def op_source(op: Operator, m: ArrayModel, target: str) -> str:
    """An operator on its state's grid, as array code."""
    s = f"s_{m.states[op.state]}"
    julia = target == "julia"
    bc = f":{op.boundary}" if julia else f"'{op.boundary}'"

    def shift(x: str, k: int, a: int) -> str:
        return f"_shift({x}, {k}, {axis(m, a, target)}, {bc})" if k else x

    if op.kind == "lap":
        terms = [shift(s, k, a) for a in range(m.ndim) for k in (1, -1)]
        plus, minus, times = (".+", ".-", ".*") if julia else ("+", "-", "*")
        return f"({f' {plus} '.join(terms)} {minus} {2 * m.ndim} {times} {s})"
    if op.kind == "shift":
        out = s
        for a, k in enumerate(op.offset):
            out = shift(out, k, a)
        return out
    axes = tuple(axis(m, a, target) for a in op.axes)
    n = math.prod(m.shape[a] for a in op.axes)
    if julia:
        total = f"sum({s}; dims = {axes if len(axes) > 1 else f'({axes[0]},)'})"
        return total if op.kind == "sum" else f"({total} ./ {n})"
    if target == "torch":
        return f"torch.{op.kind}({s}, dim={axes}, keepdim=True)"
    return f"{MODULE[target]}{op.kind}({s}, axis={axes}, keepdims=True)"
