"""DiffSL source for diffsol: the problem as the text pydiffsol JIT-compiles.

DiffSL (https://github.com/martinjrobins/diffsl) describes an ODE ``du/dt = F(u, p, t)`` as
named tensors: ``in_i`` the parameters (values passed at solve time), ``u_i`` the state
with its initial values, intermediate tensors, and ``F_i`` the right-hand side. Names are
letters and digits only (``_`` introduces a tensor's indices), so states are written
``x0, x1, ...`` and named parameters ``p0, p1, ...`` in declaration order, each with its
problem name in a comment; network weights are one labelled range ``w`` of ``in_i``. A
parameter differentiated in log space (:func:`~sciml_bench.problem.compiled.log_scaled`)
comes in as its log, ``lp{i}`` in ``in_i``, and its value is the tensor
``p{i} { exp(lp{i}) }``, evaluated once per solve (it reads inputs only): diffsol's
sensitivities are then taken along ``log θ``, on one scale for rates from 0.04 to 3e7.

The *scalar form* writes one expression per state (common subexpressions as scalar
tensors ``c0, c1, ...``). A network ``n(x) = s ⊙ (W_L σ(… σ(W_1 x + b_1) …) + b_L)`` is
written with DiffSL's tensor operations: each ``W_l`` is a matrix tensor whose rows are
slices of ``w`` (row-major, as the parameter vector stores it), the product
``W_lij * h_j`` is a contraction over ``j``, and ``σ`` applies elementwise. An array
problem (``[sizes]``) gets the *array form* instead, one vector expression per state with
its operators as sparse matrices: :mod:`.diffsl_arrays`.

A problem DiffSL cannot express (a sympy node without a DiffSL equivalent, an activation
DiffSL lacks) gives no model: the source is a comment holding
:data:`~sciml_bench.problem.generated.NOT_EXPRESSIBLE` and what is missing, which the
diffsol backend turns into an ``unavailable`` row.
"""

from __future__ import annotations

import math

import sympy

from sciml_bench.problem.codegen.diffsl_arrays import array_model
from sciml_bench.problem.codegen.diffsl_printing import DiffSLPrinter, number
from sciml_bench.problem.codegen.printing import cse, symbol_names
from sciml_bench.problem.compiled import log_scaled
from sciml_bench.problem.generated import NOT_EXPRESSIBLE, NotExpressible
from sciml_bench.problem.spec import Network, Problem

#: hidden-layer activations, as DiffSL writes them on a tensor ``z``
ACTIVATIONS = {"tanh": "tanh({})", "sigmoid": "sigmoid({})", "identity": "{}"}


def _names(problem: Problem) -> dict[sympy.Symbol, str]:
    names = symbol_names((problem.state_symbols, "x{k}"), (problem.param_symbols, "p{k}"))
    for m, net in enumerate(problem.networks):
        names.update({o: f"n{m}y{k + 1}" for k, o in enumerate(net.outputs)})
    return names


def _inputs(problem: Problem) -> list[str]:
    """``in_i``: named parameters, then the network weights as the labelled range ``w``
    (the weights follow the named parameters in the parameter vector). A parameter in
    log space (:func:`~sciml_bench.problem.compiled.log_scaled`) comes in as its log
    ``lp{i}``, and the scalar tensor ``p{i} { exp(lp{i}) }`` after ``in_i`` is its value."""
    log = log_scaled(problem)
    named, values = [], []
    for i, (n, v) in enumerate(zip(problem.param_names, problem.theta0, strict=False)):
        if i >= len(problem.param_symbols):
            break
        if log[i]:
            named.append(f"lp{i} = {number(math.log(v))},  // log {n}")
            values.append(f"p{i} {{ exp(lp{i}) }}")
        else:
            named.append(f"p{i} = {number(v)},  // {n}")
    n_named = len(problem.param_symbols)
    if problem.n_params > n_named:
        named.append(f"({n_named}:{problem.n_params}): w = 0.0,  // network weights")
    if not named:
        return []
    return ["in_i {", *[f"  {x}" for x in named], "}", *values]


def _network(net: Network, m: int, first_weight: int, printer: DiffSLPrinter) -> list[str]:
    """Tensors evaluating network ``m``: inputs ``n{m}x_i``, per layer ``l`` the weight
    matrix ``n{m}W{l}_ij`` (rows sliced from ``w``), pre-activation ``n{m}z{l}_i`` and
    activation ``n{m}h{l}_i``; then each output ``n{m}y{k}`` as a scalar."""
    if net.activation not in ACTIVATIONS:
        raise NotExpressible(f"activation {net.activation!r} has no DiffSL form")
    out = [f"n{m}x_i {{ {', '.join(printer.doprint(e) for e in net.inputs)} }}"]
    h = f"n{m}x"
    last = len(net.slices())
    for layer, (ow, rows, cols, ob) in enumerate(net.slices(), 1):
        ow, ob = ow - first_weight, ob - first_weight  # offsets into the range w
        W = f"n{m}W{layer}"
        out.append(f"{W}_ij {{")
        out += [f"  ({r}, 0:{cols}): w_j[{ow + r * cols}:{ow + (r + 1) * cols}],"
                for r in range(rows)]  # fmt: skip
        out.append("}")
        out.append(f"n{m}z{layer}_i {{ {W}_ij * {h}_j }}")
        act = ACTIVATIONS[net.activation] if layer < last else "{}"
        out.append(f"n{m}h{layer}_i {{ {act.format(f'n{m}z{layer}_i + w_i[{ob}:{ob + rows}]')} }}")
        h = f"n{m}h{layer}"
    for k, scale in enumerate(net.output_scale):
        # DiffSL indexes dense vectors only, and a one-element vector is not stored dense:
        # its one element is its contraction (sum) to a scalar
        element = f"{h}_i" if len(net.output_scale) == 1 else f"{h}_i[{k}]"
        out.append(f"n{m}y{k + 1} {{ {number(scale)} * {element} }}")
    return out


def _scalar_model(problem: Problem) -> list[str]:
    """The scalar form: one DiffSL expression per state component."""
    names = _names(problem)
    printer = DiffSLPrinter(names)
    lines = _inputs(problem)
    lines.append("u_i {")
    # a start that depends on the parameters reads the inputs (their p{i} tensors): diffsol
    # then starts its sensitivities at du0/dp (problem/initial.py)
    starts = ([printer.doprint(e) for e in problem.initial] if problem.initial
              else [number(v) for v in problem.y0])  # fmt: skip
    lines += [f"  x{i} = {v},  // {n}"
              for i, (n, v) in enumerate(zip(problem.state_names, starts, strict=True))]  # fmt: skip
    lines.append("}")
    first_weight = len(problem.param_symbols)
    for m, net in enumerate(problem.networks):
        lines += _network(net, m, first_weight, printer)
    repl, reduced = cse(problem.rhs)
    for k, (sym, _) in enumerate(repl):
        names[sym] = f"c{k}"
    lines += [f"c{k} {{ {printer.doprint(e)} }}" for k, (_, e) in enumerate(repl)]
    lines.append("F_i {")
    lines += [f"  {printer.doprint(e)},  // d{n}/dt"
              for n, e in zip(problem.state_names, reduced, strict=True)]  # fmt: skip
    lines.append("}")
    return lines


def diffsl_source(problem: Problem) -> str:
    """The DiffSL model of ``problem`` (or, when DiffSL cannot express it, a comment
    saying why; see :func:`~sciml_bench.problem.generated.not_expressible`)."""
    head = f"// Generated by sciml-bench from {problem.name!r} for diffsl; do not edit."
    try:
        body = array_model(problem) if problem.array is not None else _scalar_model(problem)
    except NotExpressible as e:
        body = [f"// {NOT_EXPRESSIBLE} in DiffSL: {e}"]
    return "\n".join([head, *body]) + "\n"
