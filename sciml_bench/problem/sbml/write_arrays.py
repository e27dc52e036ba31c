"""An array problem as SBML: core SBML has no arrays, so every element is written out.

State ``s`` of grid element ``(i, j, ...)`` is the non-constant parameter
``{s}_{i}_{j}`` with the rate rule ``d{s}_{i}_{j}/dt = f_s`` evaluated at that element;
a per-element parameter ``p`` is the constant parameters ``{p}_{i}_{j}``, a shared one
the constant parameter ``{p}`` (once). These are the flat names of
:func:`sciml_bench.problem.arrays.flat_names` (``u[1,2]``) with brackets and commas as
``_`` (:func:`sbml_id`), written in the layout's order ``y[e*S + s]`` (and the parameters
in the flat parameter vector's), so an importer's state and parameter vectors are the
array problem's.

Element ``e``'s right-hand side is the template ``f_s`` with the grid indices set to
``e``'s, each state and per-element parameter replaced by ``e``'s own, and each operator
``o = M x`` (``lap``, ``shift``, ``sum``, ``mean``) replaced by the weighted sum
``Σ_c M[e, c] x_c`` of row ``e`` of its sparse matrix
(:func:`sciml_bench.problem.codegen.operators.operator_matrix`, the boundary conditions
included, as DiffSL reads them). ``step(x)`` is ``piecewise(1, x >= 0, 0)``; where ``x``
is a number at the element it is folded first.

Above :data:`MAX_SBML_STATES` states the export is refused: one rate rule per element
makes the file and every SBML tool's symbolic work grow with the grid.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
import sympy

from sciml_bench.problem.arrays import ArrayModel, flat_names
from sciml_bench.problem.codegen.operators import operator_matrix
from sciml_bench.problem.sbml.refuse import SBMLError

#: the most states (elements x states per element) an array problem is written with
MAX_SBML_STATES = 20_000


def sbml_id(flat_name: str) -> str:
    """A flat state or parameter name as its SBML id: ``u[1,2]`` is ``u_1_2``, ``k1``
    stays ``k1`` (a valid SId: a letter, then letters, digits and ``_``)."""
    found = re.fullmatch(r"(.+)\[([0-9,]+)\]", flat_name)
    return flat_name if found is None else f"{found[1]}_{found[2].replace(',', '_')}"


def _number(v: float) -> sympy.Expr:
    """An operator weight as sympy: an integer where it is one (-4, 1), else a float."""
    return sympy.Integer(int(v)) if float(v).is_integer() else sympy.Float(v)


def _element_symbols(names: Sequence[str]) -> list[sympy.Symbol]:
    return [sympy.Symbol(sbml_id(n), real=True) for n in names]


def element_rhs(m: ArrayModel) -> list[sympy.Expr]:
    """Every element's right-hand side in the layout order ``y[e*S + s]``: the template
    with indices, states, per-element parameters and operator rows of element ``e``.

    An operator ``o = M x_r`` becomes ``Σ_c M[e, c] x_r[c]``, ``M`` from
    :func:`~sciml_bench.problem.codegen.operators.operator_matrix`."""
    S = len(m.states)
    ys = _element_symbols(flat_names(m.states, m.shape))  # ys[e*S + s]
    rows: list[dict[int, list[tuple[int, float]]]] = []
    for op in m.operators:
        by_row: dict[int, list[tuple[int, float]]] = defaultdict(list)
        for (r, c), v in sorted(operator_matrix(op, m.shape).items()):
            by_row[r].append((c, v))
        rows.append(by_row)
    out: list[sympy.Expr] = []
    for e, ix in enumerate(np.ndindex(*m.shape)):
        tag = "_".join(map(str, ix))
        sub: dict[sympy.Expr, sympy.Expr] = {
            sym: sympy.Integer(k) for sym, k in zip(m.index_symbols, ix, strict=True)}
        sub.update({m.state_symbols[s]: ys[e * S + s] for s in range(S)})
        sub.update({sym: sympy.Symbol(f"{p.name}_{tag}", real=True)
                    for sym, p in zip(m.param_symbols, m.params, strict=True) if p.per_element})
        for op, by_row in zip(m.operators, rows, strict=True):
            sub[op.symbol] = sympy.Add(*[_number(v) * ys[c * S + op.state]
                                         for c, v in by_row.get(e, [])])  # fmt: skip
        out += [f.xreplace(sub) for f in m.templates]
    return out


def check_size(name: str, source: str, n_state: int) -> None:
    """Refuse a problem of more than :data:`MAX_SBML_STATES` states, in one line."""
    if n_state > MAX_SBML_STATES:
        raise SBMLError(source, "problem", f"{name} has {n_state} states at these sizes; SBML "
                        f"export writes one rate rule per element, at most {MAX_SBML_STATES} "
                        "states: choose a smaller size")  # fmt: skip


def write_model(model: Any, problem: Any, ast: Any, parameter: Any) -> None:
    """The parameters (flat order, ids by :func:`sbml_id`) and one rate rule per element
    of an array ``problem`` into the libsbml ``model``; ``ast`` and ``parameter`` are the
    scalar writer's (:mod:`.write`)."""
    m: ArrayModel = problem.array
    check_size(problem.name, problem.source, m.n_state)
    states = [sbml_id(n) for n in problem.state_names]
    params = [sbml_id(n) for n in problem.param_names]
    clash = sorted(n for n, k in Counter(states + params).items() if k > 1)
    if clash:
        raise SBMLError(problem.source, "problem", f"SBML ids {clash[:3]} name two things: "
                        "rename a state or parameter")  # fmt: skip
    for name, value in zip(params, problem.theta0, strict=True):
        parameter(model, name, value, True)
    for name, y0, rhs in zip(states, problem.y0, element_rhs(m), strict=True):
        parameter(model, name, y0, False)
        rule = model.createRateRule()
        rule.setVariable(name)
        rule.setMath(ast(rhs, f"equations.{name}"))
