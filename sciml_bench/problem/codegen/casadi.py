"""CasADi source: the right-hand side as CasADi symbolic expressions, for CVODES.

The generated Python defines ``rhs(t, y, p)``, which builds ``dy/dt`` as a CasADi column
from symbols ``y`` (the state, ``n_state × 1``), ``p`` (the parameters, ``n_params × 1``)
and ``t``, all of one symbol type: ``SX`` (scalar expression graphs, what CasADi
recommends for scalar-heavy functions) or ``MX`` (matrix-valued nodes). The cvodes backend
calls it once on symbols to build the integrator; CasADi differentiates the expression
graph for CVODES' Jacobians and sensitivities, so no Python runs per RHS evaluation.

A parameter differentiated in log space
(:func:`~sciml_bench.problem.compiled.log_scaled`) is held in ``p`` as its log and bound
as ``p_k = ca.exp(p[i])`` (a per-element one as ``ca.exp`` of its slice), so that CVODES'
sensitivities are taken along ``log θ`` and its error test weighs every parameter on one
scale; network weights and the other parameters are read as they are.

The *scalar form* writes one expression per state (common subexpressions bound first).
A network ``n(x) = s ⊙ (W_L σ(… σ(W_1 x + b_1) …) + b_L)`` is matrix algebra:
``W_l = reshape(p[a:b], cols, rows).T`` (the parameter vector stores ``W`` row-major,
CasADi reshapes column-major) and ``ca.mtimes(W_l, h) + b_l``, so that on ``MX`` symbols
a 252-parameter layer stays a few matrix nodes instead of thousands of scalar ones.

The *array form* (an array problem, :mod:`sciml_bench.problem.arrays`) is CasADi column
algebra on the grid, never one line per element: state ``s`` is the strided slice
``y[s::S]`` (the layout ``y[e * S + s]``), every template is one elementwise expression on
those columns (``*``, ``/``, ``**`` are elementwise in CasADi; ``step(x)`` is the
comparison ``x >= 0``, whose derivative CasADi takes as 0), and every operator is linear,
so it is one sparse matrix product ``mtimes(M, s)``: ``lap`` and ``shift`` are the
stencil's shifts under their boundary, ``sum``/``mean`` the block of ones (÷ n) that joins
the elements sharing the indices off the summed axes. The matrices are built once, when
the module loads, from element numbers with NumPy (the entries and ``_shift`` of
:mod:`.operators`, which the other targets read the grid with too), as CSC ``DM``s; the
components are interleaved back to ``y``'s layout by one ``reshape``. CasADi then derives
the exact sparse Jacobian from the graph.
"""

from __future__ import annotations

import math
from typing import Any

import sympy

from sciml_bench.problem.codegen.events import indicators
from sciml_bench.problem.codegen.operators import ENTRIES_PY, NEIGHBOURS_PY, SHIFT_PY
from sciml_bench.problem.codegen.printing import NamedPrinter, cse, symbol_names
from sciml_bench.problem.compiled import log_scaled
from sciml_bench.problem.generated import NOT_EXPRESSIBLE, NotExpressible
from sciml_bench.problem.spec import Network, Problem

#: sympy functions as CasADi names them (``abs`` is ``fabs`` on symbols)
FUNCTIONS = {
    "exp": "ca.exp", "log": "ca.log", "sqrt": "ca.sqrt", "tanh": "ca.tanh",
    "sinh": "ca.sinh", "cosh": "ca.cosh", "sin": "ca.sin", "cos": "ca.cos",
    "tan": "ca.tan", "Abs": "ca.fabs",
}  # fmt: skip
#: hidden-layer activations on a CasADi column ``z``
ACTIVATIONS = {"tanh": "ca.tanh({})", "sigmoid": "1 / (1 + ca.exp(-({})))", "identity": "{}"}


class _Printer(NamedPrinter):
    """sympy to Python on CasADi symbols: ``**`` for powers, ``ca.`` functions."""

    def emptyPrinter(self, expr: Any) -> str:  # noqa: N802 (sympy's name)
        raise NotExpressible(f"{type(expr).__name__} ({expr}) has no CasADi form")

    def _print_Exp1(self, expr: Any) -> str:
        return "ca.exp(1.0)"

    def _print_Pi(self, expr: Any) -> str:
        return repr(float(sympy.pi))

    def _print_Function(self, expr: Any) -> str:
        name = type(expr).__name__
        if name not in FUNCTIONS:
            raise NotExpressible(f"function {name} has no CasADi equivalent here")
        return f"{FUNCTIONS[name]}({', '.join(self._print(a) for a in expr.args)})"

    _print_Abs = _print_Function

    def _print_Pow(self, expr: sympy.Pow, rational: bool = False) -> str:
        base, exp = expr.as_base_exp()
        if exp == sympy.S.Half:
            return f"ca.sqrt({self._print(base)})"
        b = self._print(base) if base.is_Symbol else f"({self._print(base)})"
        if exp.is_Number and exp < 0:
            inner = base if exp == -1 else sympy.Pow(base, -exp, evaluate=False)
            return f"(1/({self._print(inner)}))"
        return f"{b}**({self._print(exp)})" if not exp.is_Integer else f"{b}**{int(exp)}"

    def _print_ImaginaryUnit(self, expr: Any) -> str:
        raise NotExpressible("a complex constant (e.g. sqrt of a negative number)")

    def _print_NaN(self, expr: Any) -> str:
        raise NotExpressible("a constant that is not a number")

    _print_Infinity = _print_NegativeInfinity = _print_ComplexInfinity = _print_NaN


def _names(problem: Problem) -> dict[sympy.Symbol, str]:
    outs = [o for net in problem.networks for o in net.outputs]
    return symbol_names((problem.state_symbols, "s_{name}"),
                        (problem.param_symbols, "p_{name}"), (outs, "n_{name}"))  # fmt: skip


def _network(net: Network, printer: _Printer) -> list[str]:
    """Lines evaluating ``net`` on CasADi columns, ending in its scaled outputs."""
    if net.activation not in ACTIVATIONS:
        raise NotExpressible(f"activation {net.activation!r} has no CasADi form here")
    n = net.name
    lines = [f"x_{n} = ca.vertcat({', '.join(printer.doprint(e) for e in net.inputs)})"]
    h, last = f"x_{n}", len(net.slices())
    for layer, (ow, rows, cols, ob) in enumerate(net.slices(), 1):
        lines.append(f"W_{n}_{layer} = ca.reshape(p[{ow}:{ow + rows * cols}], {cols}, {rows}).T")
        z = f"ca.mtimes(W_{n}_{layer}, {h}) + p[{ob}:{ob + rows}]"
        act = ACTIVATIONS[net.activation] if layer < last else "{}"
        h = f"h_{n}_{layer}"
        lines.append(f"{h} = {act.format(z)}")
    lines += [f"n_{o.name} = {scale!r} * {h}[{k}]"
              for k, (o, scale) in enumerate(zip(net.outputs, net.output_scale, strict=True))]  # fmt: skip
    return lines


def _param(read: str, log: bool) -> str:
    """A parameter's value from its slot of ``p``: ``exp`` of it where ``p`` holds its
    log (:func:`~sciml_bench.problem.compiled.log_scaled`)."""
    return f"ca.exp({read})" if log else read


def _log_comment(names: list[str]) -> list[str]:
    """The comment saying which parameters ``p`` holds as logs, and why (none: no line)."""
    if not names:
        return []
    logs = ", ".join(f"log({n})" for n in names[:6]) + (", ..." if len(names) > 6 else "")
    return [f"# p holds {logs}, the scale the gradient is taken in:",
            "# CVODES' sensitivity error test then weighs every parameter alike"]


def _scalar_body(problem: Problem) -> list[str]:
    """The body of ``rhs``: bindings, networks, subexpressions, then ``return``."""
    names = _names(problem)
    printer = _Printer(names)
    log = log_scaled(problem)
    lines = [f"s_{n} = y[{i}]" for i, n in enumerate(problem.state_names)]
    lines += _log_comment([s.name for i, s in enumerate(problem.param_symbols) if log[i]])
    lines += [f"p_{s.name} = {_param(f'p[{i}]', bool(log[i]))}"
              for i, s in enumerate(problem.param_symbols)]  # fmt: skip
    for net in problem.networks:
        lines += _network(net, printer)
    repl, reduced = cse(problem.rhs)
    for sym, _ in repl:
        names[sym] = sym.name
    lines += [f"{names[s]} = {printer.doprint(e)}" for s, e in repl]
    # a constant component must still be a symbol of y's type, so that vertcat stacks it
    comps = [printer.doprint(e) if e.free_symbols else f"{printer.doprint(e)} + 0 * y[0]"
             for e in reduced]  # fmt: skip
    lines.append(f"return ca.vertcat({', '.join(comps)})")
    return lines


class _ArrayPrinter(_Printer):
    """The scalar printer on grid columns: ``step(x)`` as CasADi's comparison."""

    def _print_step(self, expr: Any) -> str:
        return f"({self._print(expr.args[0])} >= 0)"


#: what the array form's module defines before ``rhs``, after the shared ``_shift`` and
#: operator entries (:mod:`.operators`): the operator matrices built from those entries
_ARRAY_HELPERS = """

def _matrix(rows, cols, vals):
    \"\"\"The n_el x n_el CasADi matrix (CSC) of the triplets, duplicates summed.\"\"\"
    keys, slot = np.unique(cols * _NE + rows, return_inverse=True)
    values = np.bincount(slot, vals, keys.size)
    r, c = keys % _NE, keys // _NE
    colind = np.searchsorted(c, np.arange(_NE + 1))
    return ca.DM(ca.Sparsity(_NE, _NE, colind.tolist(), r.tolist()), values)


def _stencil(terms, bc):
    \"\"\"Σ coefficient x (the grid shifted by offset under bc), as a matrix.\"\"\"
    return _matrix(*_stencil_entries(_EL, terms, bc))


def _along(axes, scale):
    \"\"\"scale x the sum over axes (negative), broadcast back, as a matrix.\"\"\"
    return _matrix(*_group_entries(_EL, axes, scale))
"""


def _array_operator(op: Any, m: Any) -> str:
    """The matrix of one operator (a module-level constant of the array form)."""
    if op.kind in ("sum", "mean"):
        n = math.prod(m.shape[a] for a in op.axes)
        axes = tuple(a - m.ndim for a in op.axes)
        return f"_along({axes}, {1.0 if op.kind == 'sum' else 1.0 / n!r})"
    return f"_stencil({op.stencil(m.ndim)}, {op.boundary!r})"


def _array_body(problem: Problem) -> tuple[list[str], list[str]]:
    """The array form: ``(module constants, body of rhs)``."""
    m = problem.array
    S = len(m.states)
    names = symbol_names((m.state_symbols, "s_{name}"), (m.param_symbols, "p_{name}"),
                         (m.index_symbols, "_I_{name}"),
                         ([op.symbol for op in m.operators], "o{k}"))  # fmt: skip
    consts = [f"_SHAPE = {m.shape}", f"_NE = {m.n_elements}",
              "_EL = np.arange(_NE).reshape(_SHAPE)"]  # fmt: skip
    for a, s in enumerate(m.index_symbols):
        consts.append(f"_I_{s.name} = ca.DM(np.indices(_SHAPE)[{a}].ravel().astype(float))")
    ops = [f"_OP{k} = {_array_operator(op, m)}" for k, op in enumerate(m.operators)]
    body = [f"s_{s} = y[{i}::{S}]" for i, s in enumerate(m.states)]
    # one log flag per parameter: a per-element one is in log space as a whole (spec)
    log = log_scaled(problem)
    body += _log_comment([prm.name for prm in m.params if log[prm.offset]])
    for prm in m.params:
        a = prm.offset
        read = f"p[{a}:{a + m.n_elements}]" if prm.per_element else f"p[{a}]"
        body.append(f"p_{prm.name} = {_param(read, bool(log[a]))}")
    body += [f"o{k} = ca.mtimes(_OP{k}, s_{m.states[op.state]})"
             for k, op in enumerate(m.operators)]  # fmt: skip
    repl, reduced = cse(m.templates)
    names.update({sym: sym.name for sym, _ in repl})
    printer = _ArrayPrinter(names)
    body += [f"{sym.name} = {printer.doprint(e)}" for sym, e in repl]
    # a component that reads no state is a scalar or an index column: made a full column
    comps = [f"ca.DM.zeros(_NE, 1) + ({printer.doprint(e)})" for e in reduced]
    body.append(f"return ca.reshape(ca.horzcat({', '.join(comps)}).T, {m.n_state}, 1)")
    return consts + ops, body


#: the array form's lines before its constants: imports, then the helpers
_ARRAY_PREAMBLE = ["import math", "", "import casadi as ca", "import numpy as np",
                   SHIFT_PY.format(xp="np"), NEIGHBOURS_PY, ENTRIES_PY, _ARRAY_HELPERS]
_DOC = {
    False: ['    """dy/dt as a CasADi column from symbols y (state), p (parameters) and t."""'],
    True: ['    """dy/dt as a CasADi column from symbols y (state), p (parameters) and t:',
           '    column algebra on the grid, operators as sparse matrix products."""'],
}


def casadi_source(problem: Problem) -> str:
    """Python defining ``rhs(t, y, p)`` on CasADi symbols (or, when CasADi cannot express
    the problem, a comment saying why; see
    :func:`~sciml_bench.problem.generated.not_expressible`); an array problem's is the
    array form (see the module docstring)."""
    head = [f"# Generated by sciml-bench from {problem.name!r} for casadi; do not edit."]
    array = problem.array is not None
    try:
        if array:
            consts, body = _array_body(problem)
            preamble = [*_ARRAY_PREAMBLE, *consts]
        else:
            preamble, body = ["import casadi as ca"], _scalar_body(problem)
    except NotExpressible as e:
        return "\n".join([*head, f"# {NOT_EXPRESSIBLE} in CasADi: {e}"]) + "\n"
    try:
        start = _initial(problem)
    except NotExpressible as e:
        return "\n".join([*head, f"# {NOT_EXPRESSIBLE} in CasADi: an initial value: {e}"]) + "\n"
    try:
        events = _event_lines(problem)
    except NotExpressible as e:
        return "\n".join([*head, f"# {NOT_EXPRESSIBLE} in CasADi 3.8: {e}"]) + "\n"
    lines = [*head, *preamble, "", "", "def rhs(t, y, p):", *_DOC[array]]
    return "\n".join([*lines, *["    " + ln for ln in body], *start, *events]) + "\n"


def _initial(problem: Problem) -> list[str]:
    """``y0(p)``, the initial state as a CasADi column of the parameter symbols ``p`` (held
    as logs where :func:`log_scaled`), where it depends on them
    (:mod:`sciml_bench.problem.initial`): CVODES' forward sensitivities start at its
    Jacobian and CasADi's reverse mode runs through it."""
    if not problem.initial:
        return []
    printer = _Printer(_names(problem))
    body = _bindings(problem, list(problem.initial))
    # a constant component is a symbol of p's type, so that vertcat stacks it
    comps = [printer.doprint(e) if e.free_symbols else f"{printer.doprint(e)} + 0 * p[0]"
             for e in problem.initial]  # fmt: skip
    return ["", "", "def y0(p):", '    """The initial state as a CasADi column of p."""',
            *["    " + ln for ln in [*body, f"return ca.vertcat({', '.join(comps)})"]]]


def _event_lines(problem: Problem) -> list[str]:
    """``zero(t, y, p)`` and ``transition(k, t, y, p)`` for a problem with events (nothing
    without): CasADi's integrator fires event ``k`` where ``zero``'s component ``k``, the
    event's indicator (:func:`~.events.indicators`: positive before, crossing zero going
    down), crosses zero, sets the state to ``transition``'s column ``k``, and carries the
    forward sensitivities across (the jump term included, by the implicit function theorem
    on the indicator). A time event on a save point is not expressible: CasADi 3.8 finds
    crossings at the output times, and an indicator that reaches exactly zero there is
    never positive again, so the event never fires (measured: both doses of a dosing
    schedule put on save points were skipped)."""
    if not problem.events:
        return []
    for k, e in enumerate(problem.events):
        on_save = any(math.isclose(e.time0, t, rel_tol=1e-12) for t in problem.t_save)
        if e.at is not None and on_save:
            raise NotExpressible(f"event {k} at t = {e.time0:g} sits on a save point, where "
                                 "CasADi's events never fire (the indicator reaches zero at "
                                 "an output time); move the save point off the event")  # fmt: skip
    printer = _Printer(_names(problem))
    zeros = indicators(problem)
    posts = [_state_after(problem, e.assign, printer) for e in problem.events]
    assigned = [v for e in problem.events for _, v in e.assign]
    return ["", "", "def zero(t, y, p):",
            '    """One indicator per event: CasADi fires event k where its component k',
            '    crosses zero going down (tau - t for a time; h, or -h going up, for a root)."""',
            *["    " + ln for ln in _bindings(problem, zeros)],
            f"    return ca.vertcat({', '.join(printer.doprint(z) for z in zeros)})",
            "", "", "def transition(k, t, y, p):",
            '    """The state just after event k, from the state just before it."""',
            *["    " + ln for ln in _bindings(problem, assigned)],
            f"    return ca.conditional(k, [{', '.join(posts)}], y)"]  # fmt: skip


def _state_after(
    problem: Problem, assign: tuple[tuple[int, sympy.Expr], ...], printer: _Printer
) -> str:
    """The state after one event as a CasADi column: each assigned state's expression (a
    constant one made a symbol of ``y``'s type, so that ``vertcat`` stacks it), ``y[i]``
    for a state it keeps."""
    new = dict(assign)

    def component(i: int) -> str:
        if i not in new:
            return f"y[{i}]"
        text = printer.doprint(new[i])
        return text if new[i].free_symbols else f"{text} + 0 * y[0]"

    return f"ca.vertcat({', '.join(component(i) for i in range(problem.n_state))})"


def _bindings(problem: Problem, exprs: list[sympy.Expr]) -> list[str]:
    """Locals for the states and parameters ``exprs`` read (``p`` holds logs where
    :func:`log_scaled`): the initial values' and the events' functions."""
    used = set().union(*(e.free_symbols for e in exprs)) if exprs else set()
    log = log_scaled(problem)
    return ([f"s_{s.name} = y[{i}]" for i, s in enumerate(problem.state_symbols) if s in used]
            + [f"p_{s.name} = {_param(f'p[{i}]', bool(log[i]))}"
               for i, s in enumerate(problem.param_symbols) if s in used])  # fmt: skip
