"""The array form of DiffSL: an array problem as one vector expression per state.

An array problem (:mod:`sciml_bench.problem.arrays`) has ``S`` states on a grid of ``n``
elements (C order, flattened). DiffSL's state ``u_i`` holds them *state by state*: state
``s`` is the labelled range ``(s n : (s+1) n): x{s}``, so every template
``f_s(x_0, …, x_{S-1}, operators, parameters, t)`` is one elementwise vector expression
on ``x{s}_i`` and ``F_i`` lists the ``S`` ranges in the same order. The suite's flat layout
interleaves the states (``y[e S + s]``); the model's output is ``out_i = u_i`` and the
diffsol backend reorders what pydiffsol returns (solutions, sensitivities, the adjoint's
``∂L/∂out``) by the permutation of the problem's state layout ``(S, n)``
(:attr:`~sciml_bench.problem.arrays.ArrayModel.state_layout`, which the compiled problem
carries as data; the model's first line states it for a reader, and nothing parses it). (The
permutation written in DiffSL, ``P_ij u_j``, has ``n S`` single entries and no diagonal
run: it made ROBER's 1000 groups compile many times slower; docs/problems.md, "Problems
that scale", the DiffSL array form.)

Operators are linear maps of one state, written as DiffSL tensors:

- ``lap`` and ``shift``: a sparse matrix ``L{k}_ij`` (the stencil's neighbours under the
  boundary, duplicates summed: :func:`~.operators.operator_matrix`) and ``o{k}_i = L{k}_ij x{s}_j``; the matrix is written as
  diagonal runs ``(r0..r1, c0..c1): v`` (DiffSL's diagonal ranges), so a stencil costs
  O(runs) source lines, not O(n);
- ``sum``/``mean`` over every axis: the contraction ``o{k} = c Σ_i x{s}_i`` (a scalar that
  broadcasts); over some axes: the matrix joining the elements that share the other
  indices.

Parameters: a scalar one is a named element of ``in_i``, a per-element one a labelled
range. Subexpressions of the grid indices alone (``x = i/(N-1)``, a forcing's spatial
mask) are evaluated once here, on the grid, into constant tensors ``g{k}_i``;
``step(x)`` elsewhere is ``heaviside(x)`` (1 at ``x >= 0``, as the suite's ``step``).
A template of scalars alone (``c + t``) is broadcast through a ones vector ``one_i``
(DiffSL fills a range from a vector only). diffsol finds the Jacobian's sparsity itself
(from the compiled model), so the same model serves dense and sparse matrices. What DiffSL
cannot write (a function it lacks, an index expression not finite on the grid) raises
:class:`~sciml_bench.problem.generated.NotExpressible` with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import sympy

from sciml_bench.problem.arrays import ArrayModel, grid_values
from sciml_bench.problem.codegen.diffsl_printing import DiffSLPrinter, number
from sciml_bench.problem.codegen.operators import operator_matrix, reduction_scale
from sciml_bench.problem.codegen.printing import cse, symbol_names
from sciml_bench.problem.compiled import log_scaled
from sciml_bench.problem.generated import NotExpressible


class _ArrayPrinter(DiffSLPrinter):
    """The scalar printer on DiffSL vectors: names carry their ``_i``; ``step`` is
    DiffSL's ``heaviside`` (its derivative 0, as the suite's)."""

    def _print_step(self, expr: Any) -> str:
        return f"heaviside({self._print(expr.args[0])})"


def diagonal_runs(entries: dict[tuple[int, int], float]) -> Iterator[tuple[int, int, int, float]]:
    """``(row, col, length, value)``: the entries as runs along diagonals (rows ``row`` to
    ``row + length`` at columns ``col`` onwards, one value), longest first in each
    diagonal, so that a stencil matrix is O(diagonals + boundary rows) runs."""
    keys = sorted(entries, key=lambda rc: (rc[1] - rc[0], rc[0]))
    i = 0
    while i < len(keys):
        r, c = keys[i]
        v, length = entries[keys[i]], 1
        while i + length < len(keys) and keys[i + length] == (r + length, c + length) and \
                entries[keys[i + length]] == v:  # fmt: skip
            length += 1
        yield r, c, length, v
        i += length


def matrix_tensor(name: str, entries: dict[tuple[int, int], float], n_rows: int,
                  n_cols: int) -> list[str]:  # fmt: skip
    """A DiffSL sparse matrix ``name_ij`` of shape ``n_rows × n_cols``: one element per
    diagonal run, and an explicit zero at the last corner (DiffSL infers a tensor's shape
    from its largest indices and drops zero values)."""
    lines = [f"{name}_ij {{"]
    for r, c, length, v in diagonal_runs(entries):
        at = f"({r}, {c})" if length == 1 else f"({r}..{r + length}, {c}..{c + length})"
        lines.append(f"  {at}: {number(v)},")
    if (n_rows - 1, n_cols - 1) not in entries:
        lines.append(f"  ({n_rows - 1}, {n_cols - 1}): 0.0,")
    lines.append("}")
    return lines


def vector_tensor(name: str, values: np.ndarray) -> list[str]:
    """A constant DiffSL vector ``name_i``, one element per grid element (a run of equal
    values as one ranged element)."""
    parts, v = [], values.ravel().tolist()
    i = 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and v[j + 1] == v[i]:
            j += 1
        parts.append(number(v[i]) if j == i else f"({i}:{j + 1}): {number(v[i])}")
        i = j + 1
    return [f"{name}_i {{ {', '.join(parts)} }}"]


class _Hoister:
    """Replaces each largest subexpression of the grid indices alone by a constant
    vector ``g{k}`` evaluated on the grid (a constant where the grid makes it one)."""

    def __init__(self, m: ArrayModel):
        self.m, self.index = m, set(m.index_symbols)
        self.tensors: list[tuple[sympy.Symbol, np.ndarray]] = []

    def __call__(self, e: sympy.Expr) -> sympy.Expr:
        free = e.free_symbols
        if free and free <= self.index:
            values = grid_values(e, self.m.index_symbols, self.m.shape).ravel()
            if not np.all(np.isfinite(values)):
                raise NotExpressible(f"{e} is not finite on every grid element")
            if np.all(values == values[0]):
                return sympy.Float(values[0])
            sym = sympy.Symbol(f"g{len(self.tensors)}", real=True)
            self.tensors.append((sym, values))
            return sym
        if not e.args or not (free & self.index):
            return e
        return e.func(*[self(a) for a in e.args])


def _names(m: ArrayModel, full_sums: set[int]) -> dict[sympy.Symbol, str]:
    """DiffSL names: states ``x{s}_i``, parameters ``p{k}`` (``p{k}_i`` per element),
    operators ``o{k}_i`` (``o{k}``, a scalar, for a sum over every axis)."""
    names = symbol_names((m.state_symbols, "x{k}_i"))
    names.update({sym: f"p{k}_i" if prm.per_element else f"p{k}"
                  for k, (sym, prm) in enumerate(zip(m.param_symbols, m.params, strict=True))})  # fmt: skip
    names.update({op.symbol: f"o{k}" if k in full_sums else f"o{k}_i"
                  for k, op in enumerate(m.operators)})  # fmt: skip
    return names


def _inputs(problem: Any) -> list[str]:
    """``in_i``: the parameters in the parameter vector's order; a per-element one is a
    labelled range (its value here is only a default: the solve passes the parameters).
    A parameter in log space (:func:`~sciml_bench.problem.compiled.log_scaled`; one flag
    per parameter, a per-element one is in log space as a whole) comes in as its log
    ``lp{k}`` and its value is the tensor ``p{k} { exp(lp{k}) }`` (``p{k}_i`` per element)
    after ``in_i``."""
    m, theta = problem.array, np.asarray(problem.theta0, dtype=float)
    log = log_scaled(problem)
    parts, values = [], []
    for k, prm in enumerate(m.params):
        a, lg = prm.offset, bool(log[prm.offset])
        name, note = (f"lp{k}", f"log {prm.name}") if lg else (f"p{k}", prm.name)
        vals = theta[a : a + m.n_elements] if prm.per_element else theta[a : a + 1]
        vals = np.log(vals) if lg else vals
        if prm.per_element:
            v = number(float(vals[0])) if np.all(vals == vals[0]) else "0.0"
            parts.append(f"  ({a}:{a + m.n_elements}): {name} = {v},  // {note}")
        else:
            parts.append(f"  {name} = {number(float(vals[0]))},  // {note}")
        if lg:
            i = "_i" if prm.per_element else ""
            values.append(f"p{k}{i} {{ exp(lp{k}{i}) }}")
    return ["in_i {", *parts, "}", *values]


def _state(problem: Any) -> tuple[list[str], list[str]]:
    """``(constant tensors, u_i)``: state ``s`` is the range ``(s n:(s+1) n)``, its
    initial values one number or a constant vector ``y0x{s}_i``."""
    m = problem.array
    n, S = m.n_elements, len(m.states)
    y0 = np.asarray(problem.y0, dtype=float).reshape(n, S)
    consts, parts = [], []
    for s, name in enumerate(m.states):
        v = y0[:, s]
        if np.all(v == v[0]):
            init = number(float(v[0]))
        else:
            consts += vector_tensor(f"y0x{s}", v)
            init = f"y0x{s}_i"
        parts.append(f"  ({s * n}:{(s + 1) * n}): x{s} = {init},  // {name}")
    return consts, ["u_i {", *parts, "}"]


def _operators(m: ArrayModel, full_sums: set[int]) -> tuple[list[str], list[str], set[int]]:
    """``(matrices, operator tensors, operators that are identically 0)``."""
    mats, ops, zero = [], [], set()
    seen: dict[tuple[Any, ...], str] = {}  # lap(u) and lap(v) share one matrix
    for k, op in enumerate(m.operators):
        x = f"x{op.state}"
        if k in full_sums:
            scale = reduction_scale(op, m.shape)
            ops.append(f"o{k} {{ {number(scale)} * {x}_i }}")
            continue
        entries = operator_matrix(op, m.shape)
        if not entries:  # e.g. a dirichlet shift by the whole grid: reads only zeros
            zero.add(k)
            continue
        key = tuple(sorted(entries.items()))
        if key not in seen:
            seen[key] = f"L{k}"
            mats += matrix_tensor(f"L{k}", entries, m.n_elements, m.n_elements)
        ops.append(f"o{k}_i {{ {seen[key]}_ij * {x}_j }}")
    return mats, ops, zero


def _layout_line(m: ArrayModel) -> str:
    """The comment that states the model's layout, for a reader of the model (the
    backends read :attr:`~sciml_bench.problem.arrays.ArrayModel.state_layout`)."""
    S, n = m.state_layout
    return (
        f"// layout: {S} states x {n} elements, state by state "
        "(u[s*n + e]); the suite's flat y[e*S + s] is out reshaped (S, n), transposed"
    )


def _templates(m: ArrayModel, names: dict[sympy.Symbol, str],
               zero: set[int]) -> tuple[list[str], list[str], list[str]]:  # fmt: skip
    """``(grid constants, subexpressions, F_i)`` from the templates: index-only parts
    hoisted to constant vectors, common subexpressions bound as ``c{k}`` / ``c{k}_i``."""
    hoist = _Hoister(m)
    zeros = {m.operators[k].symbol: 0 for k in zero}
    templates = [hoist(sympy.sympify(f).subs(zeros)) for f in m.templates]
    consts = [ln for g, v in hoist.tensors for ln in vector_tensor(g.name, v)]
    names.update({g: f"{g.name}_i" for g, _ in hoist.tensors})
    vectors = {s for s, text in names.items() if text.endswith("_i")}
    repl, reduced = cse(templates)
    printer = _ArrayPrinter(names)
    lines = []
    for k, (sym, e) in enumerate(repl):
        vec = bool(e.free_symbols & vectors)
        names[sym] = f"c{k}_i" if vec else f"c{k}"
        if vec:
            vectors.add(sym)
        lines.append(f"{names[sym]} {{ {printer.doprint(e)} }}")
    n = m.n_elements
    F, ones = ["F_i {"], []
    for s, (name, e) in enumerate(zip(m.states, reduced, strict=True)):
        text = printer.doprint(e)
        if not (sympy.sympify(e).free_symbols & vectors):
            # a template of scalars alone (parameters, t): DiffSL fills a range from a
            # vector only (a scalar there fails its layout check), so broadcast it
            text = f"({text}) * one_i"
            ones = [f"one_i {{ (0:{n}): 1.0 }}"]
        F.append(f"  ({s * n}:{(s + 1) * n}): {text},  // d{name}/dt")
    return consts + ones, lines, [*F, "}"]


def array_model(problem: Any) -> list[str]:
    """The array form (module docstring) of an array problem, as DiffSL lines."""
    m = problem.array
    if m.n_state < 1:
        raise NotExpressible("an array problem without states")
    full_sums = {k for k, op in enumerate(m.operators)
                 if op.kind in ("sum", "mean") and len(op.axes) == m.ndim}  # fmt: skip
    names = _names(m, full_sums)
    mats, ops, zero = _operators(m, full_sums)
    grid, subexpr, F = _templates(m, names, zero)
    y0_consts, u = _state(problem)
    return [_layout_line(m), *_inputs(problem), *grid, *y0_consts, *mats, *u, *ops, *subexpr,
            *F, "out_i { u_i }"]  # fmt: skip
