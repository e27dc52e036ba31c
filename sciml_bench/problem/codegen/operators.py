"""Array operators as sparse matrices: stencil or sum -> (row, col, value) entries.

An array problem's operators (:mod:`sciml_bench.problem.arrays`) are linear maps of one
state on the grid. ``lap`` and ``shift`` are stencils: a sum of ``coefficient x (the grid
shifted by offset under the boundary)``; ``sum``/``mean`` join each element to the
elements sharing its indices off the summed axes (scaled by 1/count for mean).

This module owns that logic once, as NumPy source text on a grid of element numbers:

- :data:`SHIFT_PY` (``_shift``: x at index i + k along an axis under a boundary), which
  every Python target's generated module defines for its right-hand side;
- :data:`NEIGHBOURS_PY` (``_neighbours``: each element's neighbour at an offset, and
  where it exists), from which the NumPy Jacobian's pattern is built;
- :data:`ENTRIES_PY` (``_stencil_entries``, ``_group_entries``: an operator's matrix
  entries), from which CasADi's operator matrices are built when its module loads.

Generated modules embed the text (so their size does not grow with the grid); DiffSL,
which needs the entries written out, runs the same text here (:func:`operator_matrix`),
so the targets cannot read the grid differently.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from sciml_bench.problem.arrays import Operator

#: ``_shift`` in ``{xp}`` (``np`` or ``jnp``), defined by the generated Python modules
SHIFT_PY = '''

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

#: ``_neighbours`` (NumPy, after ``_shift``)
NEIGHBOURS_PY = '''

def _neighbours(el, offset, bc):
    """Each element's neighbour at ``offset`` (trailing axes) under ``bc``, as its number
    in ``el``, and where the neighbour exists."""
    nb, ok = el, np.ones(el.shape, dtype=bool)
    for axis, k in zip(range(-len(offset), 0), offset):
        if k:
            nb, ok = _shift(nb, k, axis, bc), _shift(ok, k, axis, bc)
    return nb, ok'''

#: ``_stencil_entries`` and ``_group_entries`` (NumPy, after ``_neighbours``)
ENTRIES_PY = '''

def _stencil_entries(el, terms, bc):
    """(rows, cols, values) of Σ coefficient x (the grid shifted by offset under bc) for
    ``terms`` = [(offset, coefficient)], duplicates not summed."""
    rows, cols, vals = [], [], []
    for offset, coeff in terms:
        nb, ok = _neighbours(el, offset, bc)
        rows.append(el[ok])
        cols.append(nb[ok])
        vals.append(np.full(int(ok.sum()), float(coeff)))
    return np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)


def _group_entries(el, axes, scale):
    """(rows, cols, values) of scale x the sum over axes (negative), broadcast back: each
    element joined to the elements sharing its indices off those axes."""
    groups = np.moveaxis(el, axes, range(-len(axes), 0))
    groups = groups.reshape(-1, math.prod(el.shape[a] for a in axes))
    m = groups.shape[1]
    rows = np.repeat(groups, m, axis=1).ravel()
    cols = np.tile(groups, (1, m)).ravel()
    return rows, cols, np.full(rows.size, float(scale))'''


@functools.cache
def _helpers() -> dict[str, Any]:
    import numpy as np

    ns: dict[str, Any] = {"np": np, "math": math}
    # our own templates, not a problem's text
    exec("\n".join([SHIFT_PY.format(xp="np"), NEIGHBOURS_PY, ENTRIES_PY]), ns)  # noqa: S102
    return ns


def reduction_scale(op: Operator, shape: tuple[int, ...]) -> float:
    """What a reduction multiplies its sum by: 1 for ``sum``, 1/count for ``mean``."""
    return 1.0 if op.kind == "sum" else 1.0 / math.prod(shape[a] for a in op.axes)


def operator_matrix(op: Operator, shape: tuple[int, ...]) -> dict[tuple[int, int], float]:
    """The ``n × n`` matrix ``M`` with ``o = M x`` for operator ``op`` on a grid of
    ``shape``, as ``{(row, col): value}``: duplicates summed, zeros dropped."""
    import numpy as np

    ns = _helpers()
    el = np.arange(math.prod(shape)).reshape(shape)
    if op.kind in ("sum", "mean"):
        axes = tuple(a - len(shape) for a in op.axes)
        rows, cols, vals = ns["_group_entries"](el, axes, reduction_scale(op, shape))
    else:
        rows, cols, vals = ns["_stencil_entries"](el, op.stencil(len(shape)), op.boundary)
    out: dict[tuple[int, int], float] = {}
    for r, c, v in zip(rows.tolist(), cols.tolist(), vals.tolist(), strict=True):
        out[(r, c)] = out.get((r, c), 0.0) + v
    return {k: v for k, v in out.items() if v != 0.0}
