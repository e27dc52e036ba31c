"""Python sources of an array problem: vectorised code, never one line per element.

Each target gets the problem as array code on the whole grid, so the text is the same
size at N = 10 and N = 10,000 (only the shape constants change):

- ``numpy``: ``rhs(t, y, p)``; the exact sparse Jacobian as its pattern (``JAC_ROWS``,
  ``JAC_COLS``, ``JAC_INDPTR`` in CSC order, ``JAC_NNZ``, ``JAC_BANDS`` = (lower, upper)
  bandwidth) and vectorised values (``jac_values``), assembled as ``jac_sparse`` (a SciPy
  CSC matrix), ``jac`` (dense) and ``jac_banded`` (LSODA's packed band); the exact
  ``∂f/∂θ`` the same way (``JACP_ROWS``, ``JACP_COLS``, ``jac_p_values``, ``jac_p_sparse``),
  sparse because a per-element parameter reaches its own element only (at
  P = 3n = 30,000 a dense one would be 7 GB). All complex-safe, for the complex-step
  reference;
- ``torch``: ``class RHS(torch.nn.Module)`` (the parameters as its tensors, per-element
  ones shaped like the grid), ``rhs(t, y, p)`` and ``rhs_batch(t, Y, P)`` (states and
  parameters with leading batch dimensions), as :mod:`.python` defines them for scalar
  problems;
- ``jax``: ``rhs(t, y, p)``.

The Jacobian is the template's derivative with respect to each stencil neighbour, taken once
(:meth:`~sciml_bench.problem.arrays.ArrayModel.blocks`): the pattern of a block is its
neighbour's element index (``_neighbours`` of :mod:`.operators`, the same ``_shift`` that
the right-hand side uses, applied to the grid of element numbers), and its values are one
coefficient template evaluated on the grid. Blocks meeting on one entry are summed
(``np.bincount`` over precomputed slots).

The state layout is the one :mod:`~sciml_bench.problem.arrays` defines: ``y[e * S + s]``,
so ``y.reshape(*grid, S)[..., s]`` is state ``s`` on the grid.
"""

from __future__ import annotations

from typing import Any

import sympy

import sciml_bench.problem.codegen.grid as grid
from sciml_bench.problem.arrays import ArrayModel, JacBlock
from sciml_bench.problem.codegen.operators import NEIGHBOURS_PY, SHIFT_PY
from sciml_bench.problem.codegen.printing import TIME, cse, drop_unused

TARGETS = ("numpy", "torch", "jax")
_HEADER = {
    "numpy": "import numpy as np",
    "torch": "import torch",
    "jax": "import jax.numpy as jnp\nimport numpy as np",
}

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

_PATTERN = '''

_EL = np.arange({n_el}).reshape(_SHAPE)
''' + NEIGHBOURS_PY + '''


def _nb(offset, bc):
    """Each element's neighbour at ``offset`` under ``bc`` (its element number, on a
    trailing axis of length 1) and where the neighbour exists (None: everywhere)."""
    el, ok = _neighbours(_EL, offset, bc)
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
        axes = tuple(grid.axis(m, a, "numpy") for a in b.axes)
        return f"    ({b.out}, {b.inp}, *_along({axes})),"
    bc = f"'{b.boundary}'" if b.boundary else "None"
    return f"    ({b.out}, {b.inp}, *_nb({b.offset}, {bc})),"


def _full_symbols(m: ArrayModel) -> set[sympy.Symbol]:
    """Symbols with the grid's full shape (a state, an operator or a per-element
    quantity), rather than broadcasting as a scalar or an index column."""
    per_element = {s for s, p in zip(m.param_symbols, m.params, strict=True) if p.per_element}
    # a reduction keeps its axes as size 1 (keepdims): it broadcasts, like an index column
    grid_ops = {op.symbol for op in m.operators if op.kind not in ("sum", "mean")}
    return {*m.state_symbols, *grid_ops, *per_element}


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
    lines += [f"o{k} = {grid.op_source(op, m, target)}" for k, op in enumerate(m.operators)]
    return lines


def _python_function(m: ArrayModel, target: str, form: str) -> list[str]:
    """The body of the right-hand side: bindings, common subexpressions, the stacked
    components in the layout of ``y``."""
    names = grid.names(m, target)
    repl, reduced = cse(m.templates)
    names.update({sym: sym.name for sym, _ in repl})
    printer = grid.GridPrinter(target, names)
    body = _bindings(m, target, form)
    full = _full_symbols(m)
    for sym, e in repl:
        body.append(f"{sym.name} = {printer.doprint(e)}")
        if e.free_symbols & full:
            full.add(sym)
    xp = grid.MODULE[target]
    first = f"s_{m.states[0]}"
    comps = []
    for e in reduced:
        c = printer.doprint(e)
        comps.append(c if e.free_symbols & full else f"{xp}zeros_like({first}) + ({c})")
    axis = "dim" if target == "torch" else "axis"
    body.append(f"return {xp}stack([{', '.join(comps)}], {axis}=-1).reshape(y.shape)")
    if target == "torch" and not any(TIME in f.free_symbols for f in m.templates):
        body = [ln for ln in body if not ln.startswith("t = ")]
    return drop_unused(body, grid.BOUND)


def _jac_values(m: ArrayModel) -> list[str]:
    """``jac_values(t, y, p)``: each block's coefficient on the grid, then assembled."""
    blocks = m.blocks()
    names = grid.names(m, "numpy")
    repl, reduced = cse([b.coeff for b in blocks])
    names.update({sym: sym.name for sym, _ in repl})
    printer = grid.GridPrinter("numpy", names)
    body = _bindings(m, "numpy", "functional")
    body += [f"{sym.name} = {printer.doprint(e)}" for sym, e in repl]
    body.append(f"return _assemble([{', '.join(printer.doprint(e) for e in reduced)}])")
    return drop_unused(body, grid.BOUND)


_PARAM_PATTERN = '''

#: ∂f/∂θ's blocks: (output state, parameter offset, one column per element?)
_PB = {pblocks}
JACP_SHAPE = (_N, {n_params})
JACP_ROWS = np.concatenate([_EL.ravel() * _NS + s for s, _, _ in _PB] or [[]]).astype(int)
JACP_COLS = np.concatenate([o + _EL.ravel() if e else np.full(_EL.size, o)
                            for _, o, e in _PB] or [[]]).astype(int)


def jac_p_sparse(t, y, p):
    """The exact ∂f/∂θ, SciPy CSR."""
    from scipy import sparse

    return sparse.csr_matrix((jac_p_values(t, y, p), (JACP_ROWS, JACP_COLS)), JACP_SHAPE)'''


def param_blocks(m: ArrayModel) -> list[tuple[int, Any, sympy.Expr]]:
    """``∂f_s/∂θ_k`` as blocks ``(s, parameter, coefficient template)``, the nonzero ones.
    A per-element parameter's block is diagonal over the elements (column ``offset + e``
    for element ``e``); a scalar one's is a column (``offset``) over every element."""
    out = []
    for s, f in enumerate(m.templates):
        for prm, sym in zip(m.params, m.param_symbols, strict=True):
            d = sympy.diff(f, sym)
            if d != 0:
                out.append((s, prm, d))
    return out


def _jac_p_values(m: ArrayModel) -> list[str]:
    """``jac_p_values(t, y, p)``: each ∂f/∂θ block's coefficient on the grid, raveled, in
    the order of ``JACP_ROWS``/``JACP_COLS``."""
    blocks = param_blocks(m)
    names = grid.names(m, "numpy")
    repl, reduced = cse([c for *_, c in blocks])
    names.update({sym: sym.name for sym, _ in repl})
    printer = grid.GridPrinter("numpy", names)
    body = _bindings(m, "numpy", "functional")
    body += [f"{sym.name} = {printer.doprint(e)}" for sym, e in repl]
    parts = ", ".join(printer.doprint(e) for e in reduced)
    body.append(f"return np.concatenate([np.broadcast_to(c, _SHAPE).ravel() for c in [{parts}]]"
                " or [np.zeros(0)])")
    return drop_unused(body, grid.BOUND)


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


def _torch_source(m: ArrayModel, head: list[str]) -> list[str]:
    lines = [*head, _SHIFT_TORCH, "", ""]
    lines += _torch_module(m) + ["", ""]
    lines += ["def rhs(t, y, p):", '    """The same on a parameter vector p."""']
    lines += ["    " + ln for ln in _python_function(m, "torch", "functional")] + ["", ""]
    lines += [
        "def rhs_batch(t, y, p):",
        '    """A batch of states y (..., n_state); p shared (1-D) or one per member."""',
    ]
    return lines + ["    " + ln for ln in _python_function(m, "torch", "batched")]


def python_source(problem: Any, target: str) -> str:
    """Source of an array problem for a Python target (see the module docstring)."""
    m: ArrayModel = problem.array
    head = [f"# Generated by sciml-bench from {problem.name!r} for {target} "
            f"(grid {'x'.join(map(str, m.shape))}); do not edit.", _HEADER[target], ""]  # fmt: skip
    if target == "torch":
        return "\n".join(_torch_source(m, head)) + "\n"
    xp = grid.MODULE[target].rstrip(".")
    lines = [*head, *_constants(m), SHIFT_PY.format(xp=xp), "", ""]
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
        pblocks = [(b, prm.offset, prm.per_element) for b, prm, _ in param_blocks(m)]
        lines += ["", "", "def jac_p_values(t, y, p):", '    """∂f/∂θ, JACP_ROWS/COLS order."""']
        lines += ["    " + ln for ln in _jac_p_values(m)]
        lines.append(_PARAM_PATTERN.format(pblocks=pblocks, n_params=m.n_params))
    return "\n".join(lines) + "\n"
