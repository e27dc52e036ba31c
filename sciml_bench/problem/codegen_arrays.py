"""Code generation for array problems: vectorised code, never one line per element.

An array problem (:mod:`sciml_bench.problem.arrays`) is one elementwise template per state on
a grid. Each target gets it as array code on the whole grid, so the text is the same size at
N = 10 and N = 10,000 (only the shape constants change):

- ``numpy``: ``rhs(t, y, p)``; the exact sparse Jacobian as its pattern (``JAC_ROWS``,
  ``JAC_COLS``, ``JAC_INDPTR`` in CSC order, ``JAC_NNZ``, ``JAC_BANDS`` = (lower, upper)
  bandwidth) and vectorised values (``jac_values``), assembled as ``jac_sparse`` (a SciPy
  CSC matrix), ``jac`` (dense) and ``jac_banded`` (LSODA's packed band). All complex-safe,
  for the complex-step reference;
- ``torch``: ``class RHS(torch.nn.Module)`` (the parameters as its tensors, per-element
  ones shaped like the grid), ``rhs(t, y, p)`` and ``rhs_batch(t, Y, P)`` (states and
  parameters with leading batch dimensions), as :mod:`sciml_bench.problem.codegen` defines
  them for scalar problems;
- ``jax``: ``rhs(t, y, p)``;
- ``julia``: the in-place ``rhs!(du, u, p, t)``, broadcasting (``@.``) on reshaped views.

The Jacobian is the template's derivative with respect to each stencil neighbour, taken once
(:meth:`~sciml_bench.problem.arrays.ArrayModel.blocks`): the pattern of a block is its
neighbour's element index (the same ``_shift`` that the right-hand side uses, applied to the
grid of element numbers), and its values are one coefficient template evaluated on the grid.
Blocks meeting on one entry are summed (``np.bincount`` over precomputed slots).

The state layout is the one :mod:`~sciml_bench.problem.arrays` defines: ``y[e * S + s]``,
so ``y.reshape(*grid, S)[..., s]`` is state ``s`` on the grid. Axes are written negative, so
one body serves one trajectory and a batch. Julia is column-major: ``reshape(u, S, *reverse
(grid))`` holds the same numbers, and C axis ``a`` is Julia dimension ``ndim - a`` of a
state's view.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import sympy
from sympy.printing.precedence import PRECEDENCE, precedence

from sciml_bench.problem.arrays import ArrayModel, JacBlock, Operator
from sciml_bench.problem.printing import NamedPrinter

TARGETS = ("numpy", "torch", "jax", "julia")
_MODULE = {"numpy": "np.", "torch": "torch.", "jax": "jnp.", "julia": ""}
_HEADER = {
    "numpy": "import numpy as np",
    "torch": "import torch",
    "jax": "import jax.numpy as jnp\nimport numpy as np",
}


class _Printer(NamedPrinter):
    """sympy template -> elementwise source for one target (Julia inside ``@.``)."""

    def __init__(self, target: str, names: dict[sympy.Symbol, str]):
        super().__init__(names)
        self.target = target
        self.mod = _MODULE[target]

    def _print_Exp1(self, expr: Any) -> str:
        return f"{self.mod}exp(1.0)"

    def _print_Pi(self, expr: Any) -> str:
        return f"{self.mod}pi"

    def _print_Function(self, expr: Any) -> str:
        name = {"Abs": "abs"}.get(type(expr).__name__, type(expr).__name__)
        return f"{self.mod}{name}({', '.join(self._print(a) for a in expr.args)})"

    _print_Abs = _print_Function

    def _print_step(self, expr: Any) -> str:
        x = self._print(expr.args[0])
        return {
            # the real part: complex step through a step function has a zero derivative
            "numpy": f"np.heaviside(np.real({x}), 1.0)",
            "torch": f"({x} >= 0).to(torch.float64)",
            "jax": f"jnp.where({x} >= 0, 1.0, 0.0)",
            "julia": f"ifelse({x} >= 0, 1.0, 0.0)",
        }[self.target]

    def _print_Pow(self, expr: sympy.Pow, rational: bool = False) -> str:
        base, exp = expr.as_base_exp()
        if exp == sympy.S.Half:
            return f"{self.mod}sqrt({self._print(base)})"
        if exp.is_Number and exp < 0:
            inner = base if exp == -1 else sympy.Pow(base, -exp, evaluate=False)
            return f"(1/{self.parenthesize(inner, PRECEDENCE['Mul'], strict=True)})"
        b = self.parenthesize(base, PRECEDENCE["Pow"], strict=True)
        if precedence(base) <= PRECEDENCE["Pow"] or (base.is_Number and base < 0):
            b = f"({self._print(base)})"
        e = self._print(exp)
        if not (exp.is_Integer and exp >= 0) and not exp.is_Symbol:
            e = f"({e})"
        return f"{b}{'^' if self.target == 'julia' else '**'}{e}"


def _names(m: ArrayModel, target: str) -> dict[sympy.Symbol, str]:
    names: dict[sympy.Symbol, str] = {sympy.Symbol("t", real=True): "t"}
    names.update({s: f"s_{s.name}" for s in m.state_symbols})
    names.update({p: f"p_{p.name}" for p in m.param_symbols})
    index = "c_{}" if target == "torch" else "_I_{}"
    names.update({s: index.format(s.name) for s in m.index_symbols})
    names.update({op.symbol: f"o{k}" for k, op in enumerate(m.operators)})
    return names


def _full(e: sympy.Expr, m: ArrayModel, full: set[sympy.Symbol]) -> bool:
    """Whether ``e`` has the grid's full shape (it reads a state, an operator or a
    per-element quantity), rather than broadcasting as a scalar or an index column."""
    return bool(e.free_symbols & full)


def _full_symbols(m: ArrayModel) -> set[sympy.Symbol]:
    per_element = {s for s, p in zip(m.param_symbols, m.params, strict=True) if p.per_element}
    # a reduction keeps its axes as size 1 (keepdims): it broadcasts, like an index column
    grid_ops = {op.symbol for op in m.operators if op.kind not in ("sum", "mean")}
    return {*m.state_symbols, *grid_ops, *per_element}


def _axis(m: ArrayModel, a: int, target: str) -> int:
    """C axis ``a`` as the target indexes a state's grid: negative in Python (batch
    dimensions may lead), ``ndim - a`` in Julia (reversed, 1-based)."""
    return m.ndim - a if target == "julia" else a - m.ndim


def _op_source(op: Operator, m: ArrayModel, target: str) -> str:
    """An operator on its state's grid, as array code."""
    s = f"s_{m.states[op.state]}"
    julia = target == "julia"
    bc = f":{op.boundary}" if julia else f"'{op.boundary}'"

    def shift(x: str, k: int, a: int) -> str:
        return f"_shift({x}, {k}, {_axis(m, a, target)}, {bc})" if k else x

    if op.kind == "lap":
        terms = [shift(s, k, a) for a in range(m.ndim) for k in (1, -1)]
        plus, minus, times = (".+", ".-", ".*") if julia else ("+", "-", "*")
        return f"({f' {plus} '.join(terms)} {minus} {2 * m.ndim} {times} {s})"
    if op.kind == "shift":
        out = s
        for a, k in enumerate(op.offset):
            out = shift(out, k, a)
        return out
    axes = tuple(_axis(m, a, target) for a in op.axes)
    n = math.prod(m.shape[a] for a in op.axes)
    if julia:
        total = f"sum({s}; dims = {axes if len(axes) > 1 else f'({axes[0]},)'})"
        return total if op.kind == "sum" else f"({total} ./ {n})"
    if target == "torch":
        return f"torch.{op.kind}({s}, dim={axes}, keepdim=True)"
    return f"{_MODULE[target]}{op.kind}({s}, axis={axes}, keepdims=True)"


_SHIFT_PY = '''

def _shift(x, k, axis, bc):
    """x at index i + k along axis: periodic wraps around; outside the grid, dirichlet
    reads 0 and neumann the nearest boundary value (zero flux)."""
    if bc == "periodic":
        return {xp}.roll(x, -k, axis)
    x = {xp}.moveaxis(x, axis, 0)
    n = x.shape[0]
    m = min(abs(k), n)
    body, edge = (x[m:], x[n - 1:]) if k > 0 else (x[:n - m], x[:1])
    pad = {xp}.repeat({xp}.zeros_like(edge) if bc == "dirichlet" else edge, m, axis=0)
    out = {xp}.concatenate([body, pad] if k > 0 else [pad, body])
    return {xp}.moveaxis(out, 0, axis)'''



def numpy_shift() -> Any:
    """The NumPy target's ``_shift`` as a function, for a generator that needs its values
    (DiffSL's operator matrices): one text, so the two cannot drift apart."""
    import numpy as np

    ns: dict[str, Any] = {"np": np}
    exec(_SHIFT_PY.format(xp="np"), ns)  # our own template, not a problem's text
    return ns["_shift"]


_SHIFT_TORCH = '''

def _shift(x, k, dim, bc):
    """x at index i + k along dim: periodic wraps around; outside the grid, dirichlet
    reads 0 and neumann the nearest boundary value (zero flux)."""
    if bc == "periodic":
        return torch.roll(x, -k, dims=dim)
    x = x.movedim(dim, 0)
    n = x.shape[0]
    m = min(abs(k), n)
    body, edge = (x[m:], x[n - 1:]) if k > 0 else (x[:n - m], x[:1])
    pad = (torch.zeros_like(edge) if bc == "dirichlet" else edge).expand((m,) + edge.shape[1:])
    out = torch.cat([body, pad] if k > 0 else [pad, body])
    return out.movedim(0, dim)'''

_SHIFT_JULIA = '''
"""`x` at index `i + k` along dimension `d`: periodic wraps around; outside the grid,
dirichlet reads 0 and neumann the nearest boundary value (zero flux)."""
function _shift(x::AbstractArray, k::Int, d::Int, bc::Symbol)
    bc === :periodic && return circshift(x, ntuple(i -> i == d ? -k : 0, ndims(x)))
    n = size(x, d)
    out = selectdim(x, d, clamp.((1:n) .+ k, 1, n))
    bc === :neumann && return copy(out)
    inside = reshape(1 .<= (1:n) .+ k .<= n, ntuple(i -> i == d ? n : 1, ndims(x)))
    return out .* inside
end
'''

_PATTERN = '''

_EL = np.arange({n_el}).reshape(_SHAPE)


def _nb(offset, bc):
    """Each element's neighbour at ``offset`` under ``bc`` (its element number, on a
    trailing axis of length 1) and where the neighbour exists (None: everywhere)."""
    el, ok = _EL, np.ones(_SHAPE, dtype=bool)
    for axis, k in zip(range(-len(offset), 0), offset):
        if k:
            el, ok = _shift(el, k, axis, bc), _shift(ok, k, axis, bc)
    return el[..., None], (None if ok.all() else ok[..., None])


def _along(axes):
    """Each element's partners in a sum over ``axes`` (negative): the elements sharing its
    indices off those axes, on a trailing axis."""
    el = np.moveaxis(_EL, axes, range(-len(axes), 0))
    el = el.reshape(el.shape[:el.ndim - len(axes)] + (-1,))
    for a in sorted(d % _EL.ndim for d in axes):
        el = np.expand_dims(el, a)
    return np.broadcast_to(el, _SHAPE + el.shape[-1:]), None


def _coo(out, inp, el, ok):
    rows = np.broadcast_to(_EL[..., None], el.shape) * _NS + out
    cols = el * _NS + inp
    if ok is None:
        return rows.ravel(), cols.ravel()
    ok = np.broadcast_to(ok, el.shape)
    return rows[ok], cols[ok]


#: the Jacobian's blocks: (output state, input state, neighbour element, where it exists)
_BLOCKS = [
{blocks}
]
_KEY = np.concatenate([c * _N + r for r, c in (_coo(*b) for b in _BLOCKS)])
_UNIQUE, _SLOT = np.unique(_KEY, return_inverse=True)
JAC_ROWS = _UNIQUE % _N
JAC_COLS = _UNIQUE // _N
JAC_NNZ = int(_UNIQUE.size)
JAC_INDPTR = np.searchsorted(JAC_COLS, np.arange(_N + 1))
JAC_BANDS = (int(np.max(JAC_ROWS - JAC_COLS, initial=0)),
             int(np.max(JAC_COLS - JAC_ROWS, initial=0)))


def _assemble(coeffs):
    """The values in CSC order: each block's coefficient on its entries, summed where
    blocks meet (a stencil's centre and the element's own dependence)."""
    parts = []
    for c, (_, _, el, ok) in zip(coeffs, _BLOCKS):
        v = np.broadcast_to(np.asarray(c)[..., None], el.shape)
        parts.append(v[np.broadcast_to(ok, el.shape)] if ok is not None else v.ravel())
    v = np.concatenate(parts)
    if np.iscomplexobj(v):  # the complex-step reference
        return np.bincount(_SLOT, v.real, JAC_NNZ) + 1j * np.bincount(_SLOT, v.imag, JAC_NNZ)
    return np.bincount(_SLOT, v, JAC_NNZ)


def jac_sparse(t, y, p):
    """The exact Jacobian as a SciPy CSC matrix."""
    from scipy import sparse

    return sparse.csc_matrix((jac_values(t, y, p), JAC_ROWS, JAC_INDPTR), shape=(_N, _N))


def jac(t, y, p):
    """The exact Jacobian, dense."""
    v = jac_values(t, y, p)
    J = np.zeros((_N, _N), dtype=v.dtype)
    J[JAC_ROWS, JAC_COLS] = v
    return J


def jac_banded(t, y, p):
    """The exact Jacobian in LSODA's packed band: row ``uband + i - j``, column ``j``."""
    v = jac_values(t, y, p)
    lower, upper = JAC_BANDS
    B = np.zeros((lower + upper + 1, _N), dtype=v.dtype)
    B[upper + JAC_ROWS - JAC_COLS, JAC_COLS] = v
    return B'''


def _block_source(b: JacBlock, m: ArrayModel) -> str:
    if b.axes:
        axes = tuple(_axis(m, a, "numpy") for a in b.axes)
        return f"    ({b.out}, {b.inp}, *_along({axes})),"
    bc = f"'{b.boundary}'" if b.boundary else "None"
    return f"    ({b.out}, {b.inp}, *_nb({b.offset}, {bc})),"


def _cse(exprs: Sequence[sympy.Expr]) -> tuple[list[tuple[sympy.Symbol, sympy.Expr]], list]:
    return sympy.cse(list(exprs), symbols=sympy.numbered_symbols("cse", real=True), order="none")


def _drop_unused(lines: list[str]) -> list[str]:
    """Drop bindings (states, parameters, indices, operators) no later line reads,
    until none is left (an operator's state may be read by that operator alone)."""
    while True:
        out = []
        for i, ln in enumerate(lines):
            name = ln.split(" = ", 1)[0].strip()
            if re.fullmatch(r"(s_|p_|c_|o|cse)\w+", name) and not any(
                re.search(rf"\b{re.escape(name)}\b", later) for later in lines[i + 1 :]
            ):
                continue
            out.append(ln)
        if len(out) == len(lines):
            return out
        lines = out


def _bindings(m: ArrayModel, target: str, form: str) -> list[str]:
    """States as grids, parameters (per-element ones as grids), indices, time, operators."""
    shape = m.shape
    torch = target == "torch"
    batched = torch and form == "batched"
    lines = [f"Y = y.reshape(y.shape[:-1] + {(*shape, len(m.states))})"]
    lines += [f"s_{s} = Y[..., {i}]" for i, s in enumerate(m.states)]
    for p in m.params:
        a, b = p.offset, p.offset + (m.n_elements if p.per_element else 1)
        if torch and form == "module":
            lines.append(f"p_{p.name} = self.p_{p.name}")
        elif p.per_element:
            lines.append(f"p_{p.name} = p[..., {a}:{b}].reshape(p.shape[:-1] + {shape})")
        elif batched:  # one value per member: a column against the members' grids
            lines.append(f"p_{p.name} = p[..., {a}].reshape(p.shape[:-1] + {(1,) * m.ndim})")
        else:
            lines.append(f"p_{p.name} = p[{a}]")
    if torch:
        lines.append("t = torch.as_tensor(t, dtype=y.dtype, device=y.device)")
        lines.append(f"t = t.reshape(t.shape + {(1,) * m.ndim})")
        for a, s in enumerate(m.index_symbols):
            dims = tuple(n if d == a else 1 for d, n in enumerate(shape))
            lines.append(f"c_{s.name} = torch.arange({shape[a]}, dtype=y.dtype, "
                         f"device=y.device).reshape({dims})")  # fmt: skip
    lines += [f"o{k} = {_op_source(op, m, target)}" for k, op in enumerate(m.operators)]
    return lines


def _python_function(m: ArrayModel, target: str, form: str) -> list[str]:
    """The body of the right-hand side: bindings, common subexpressions, the stacked
    components in the layout of ``y``."""
    names = _names(m, target)
    repl, reduced = _cse(m.templates)
    names.update({sym: sym.name for sym, _ in repl})
    printer = _Printer(target, names)
    body = _bindings(m, target, form)
    full = _full_symbols(m)
    for sym, e in repl:
        body.append(f"{sym.name} = {printer.doprint(e)}")
        if _full(e, m, full):
            full.add(sym)
    xp = _MODULE[target]
    first = f"s_{m.states[0]}"
    comps = []
    for e in reduced:
        c = printer.doprint(e)
        comps.append(c if _full(e, m, full) else f"{xp}zeros_like({first}) + ({c})")
    axis = "dim" if target == "torch" else "axis"
    body.append(f"return {xp}stack([{', '.join(comps)}], {axis}=-1).reshape(y.shape)")
    if target == "torch":
        body = [ln for ln in body if not ln.startswith("t = ")] if not _uses_t(m) else body
    return _drop_unused(body)


def _uses_t(m: ArrayModel) -> bool:
    return any(sympy.Symbol("t", real=True) in f.free_symbols for f in m.templates)


def _jac_values(m: ArrayModel) -> list[str]:
    """``jac_values(t, y, p)``: each block's coefficient on the grid, then assembled."""
    blocks = m.blocks()
    names = _names(m, "numpy")
    repl, reduced = _cse([b.coeff for b in blocks])
    names.update({sym: sym.name for sym, _ in repl})
    printer = _Printer("numpy", names)
    body = _bindings(m, "numpy", "functional")
    body += [f"{sym.name} = {printer.doprint(e)}" for sym, e in repl]
    body.append(f"return _assemble([{', '.join(printer.doprint(e) for e in reduced)}])")
    return _drop_unused(body)


def _constants(m: ArrayModel) -> list[str]:
    lines = [f"_SHAPE = {m.shape}", f"_NS = {len(m.states)}", f"_N = {m.n_state}"]
    for a, s in enumerate(m.index_symbols):
        dims = tuple(n if d == a else 1 for d, n in enumerate(m.shape))
        lines.append(f"_I_{s.name} = np.arange({m.shape[a]}, dtype=float).reshape({dims})")
    return lines


def _torch_module(m: ArrayModel) -> list[str]:
    init = []
    for p in m.params:
        if p.per_element:
            v = f"p[{p.offset}:{p.offset + m.n_elements}].reshape({m.shape})"
        else:
            v = f"p[{p.offset}]"
        init.append(f"self.p_{p.name} = torch.nn.Parameter({v}.clone())")
    return [
        "class RHS(torch.nn.Module):",
        '    """The right-hand side on the grid; its parameter tensors are the problem\'s',
        '    parameters (per-element ones shaped like the grid)."""',
        "",
        "    def __init__(self, p):",
        "        super().__init__()",
        *["        " + ln for ln in init],
        "",
        "    def forward(self, t, y):",
        *["        " + ln for ln in _python_function(m, "torch", "module")],
    ]


def python_source(problem: Any, target: str) -> str:
    """Source of an array problem for a Python target (see the module docstring)."""
    m: ArrayModel = problem.array
    head = [f"# Generated by sciml-bench from {problem.name!r} for {target} "
            f"(grid {'x'.join(map(str, m.shape))}); do not edit.", _HEADER[target], ""]  # fmt: skip
    if target == "torch":
        lines = [*head, _SHIFT_TORCH, "", ""]
        lines += _torch_module(m) + ["", ""]
        lines += ["def rhs(t, y, p):", '    """The same on a parameter vector p."""']
        lines += ["    " + ln for ln in _python_function(m, "torch", "functional")] + ["", ""]
        lines += [
            "def rhs_batch(t, y, p):",
            '    """A batch of states y (..., n_state); p shared (1-D) or one per member."""',
        ]
        lines += ["    " + ln for ln in _python_function(m, "torch", "batched")]
        return "\n".join(lines) + "\n"
    xp = _MODULE[target].rstrip(".")
    lines = [*head, *_constants(m), _SHIFT_PY.format(xp=xp), "", ""]
    lines += ["def rhs(t, y, p):"] + [
        "    " + ln for ln in _python_function(m, target, "functional")
    ]
    if target == "numpy":
        blocks = "\n".join(_block_source(b, m) for b in m.blocks())
        lines += [
            "",
            "",
            "def jac_values(t, y, p):",
            '    """The exact Jacobian\'s values, in the order of JAC_ROWS/JAC_COLS."""',
        ]
        lines += ["    " + ln for ln in _jac_values(m)]
        lines.append(_PATTERN.format(n_el=m.n_elements, blocks=blocks))
    return "\n".join(lines) + "\n"


def julia_source(problem: Any) -> str:
    """The in-place ``rhs!(du, u, p, t)`` of an array problem, broadcasting on views."""
    m: ArrayModel = problem.array
    dims = ", ".join(str(n) for n in reversed(m.shape))
    colons = ", ".join(":" for _ in m.shape)
    names = _names(m, "julia")
    repl, reduced = _cse(m.templates)
    names.update({sym: sym.name for sym, _ in repl})
    printer = _Printer("julia", names)
    body = [
        f"U = reshape(u, {len(m.states)}, {dims})",
        f"dU = reshape(du, {len(m.states)}, {dims})",
    ]
    body += [f"s_{s} = @view U[{i + 1}, {colons}]" for i, s in enumerate(m.states)]
    for p in m.params:
        if p.per_element:
            body.append(
                f"p_{p.name} = reshape(view(p, {p.offset + 1}:{p.offset + m.n_elements}), {dims})"
            )
        else:
            body.append(f"p_{p.name} = p[{p.offset + 1}]")
    body += [f"o{k} = {_op_source(op, m, 'julia')}" for k, op in enumerate(m.operators)]
    body += [f"{sym.name} = @. {printer.doprint(e)}" for sym, e in repl]
    body += [
        f"@views @. dU[{i + 1}, {colons}] = {printer.doprint(e)}" for i, e in enumerate(reduced)
    ]
    consts = []
    for a, s in enumerate(m.index_symbols):
        jdims = ", ".join(str(m.shape[a]) if d == m.ndim - 1 - a else "1" for d in range(m.ndim))
        consts.append(f"const _I_{s.name} = reshape(collect(0.0:{m.shape[a] - 1}), {jdims})")
    lines = [
        f"# Generated by sciml-bench from {problem.name!r} for julia "
        f"(grid {'x'.join(map(str, m.shape))}); do not edit.",
        *consts,
        _SHIFT_JULIA,
        "function rhs!(du, u, p, t)",
        *["    " + ln for ln in _drop_unused(body)],
        "    return nothing",
        "end",
    ]
    return "\n".join(lines) + "\n"


def generate(problem: Any, target: str) -> str:
    """The exact source a backend runs for an array problem and ``target``."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    return julia_source(problem) if target == "julia" else python_source(problem, target)
