"""NumPy's exact Jacobians of a scalar problem: ``jac`` (∂f/∂y) and ``jac_p`` (∂f/∂θ).

sympy differentiates the equations; through a network the chain rule runs numerically
on the layers (``D_l = diag(σ'(z_l))``), so the text does not grow with the weights. Both
are complex-safe, for the complex-step reference.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import sympy

import sciml_bench.problem.codegen.native as native
from sciml_bench.problem.codegen.printing import NativePrinter, cse
from sciml_bench.problem.spec import Network, Problem

_NUMPY = native.TARGETS["numpy"]


@dataclass
class _Derivatives:
    """The nonzero entries of ``∂f/∂v`` (``main``: (i, j, expr)), ``∂f/∂n`` for network
    outputs (``net``: (i, k, expr)) and ``∂x_m/∂v`` for network inputs (``inputs``: (m, a,
    j, expr)), their shared subexpressions bound in ``body``, and the reduced entries
    in that order (``reduced``, consumed as the NumPy code is written)."""

    outs: list[sympy.Symbol]
    main: list[tuple[int, int, sympy.Expr]]
    net: list[tuple[int, int, sympy.Expr]]
    inputs: list[tuple[int, int, int, sympy.Expr]]
    printer: NativePrinter
    body: list[str]
    reduced: Iterator[sympy.Expr]


def _derivative_terms(problem: Problem, wrt: Sequence[sympy.Symbol]) -> _Derivatives:
    """What the NumPy Jacobians ``∂f/∂y`` and ``∂f/∂θ`` share: sympy's derivatives of the
    equations with respect to ``wrt`` and to the networks' outputs, and of the networks'
    inputs with respect to ``wrt``, with one CSE over all of them."""
    names = native.names(problem)
    n, rhs = problem.n_state, sympy.Matrix(problem.rhs)
    jm = rhs.jacobian(list(wrt)) if wrt else sympy.zeros(n, 0)
    outs = [o for net in problem.networks for o in net.outputs]
    jn = rhs.jacobian(outs) if outs else sympy.zeros(n, 0)
    jx = [sympy.Matrix(net.inputs).jacobian(list(wrt)) if wrt else sympy.zeros(len(net.inputs), 0)
          for net in problem.networks]  # fmt: skip
    main = [(i, j, jm[i, j]) for i in range(n) for j in range(jm.cols) if jm[i, j] != 0]
    net = [(i, k, jn[i, k]) for i in range(n) for k in range(len(outs)) if jn[i, k] != 0]
    inputs = [(m, a, j, jx[m][a, j]) for m in range(len(jx)) for a in range(jx[m].rows)
              for j in range(jx[m].cols) if jx[m][a, j] != 0]  # fmt: skip
    repl, reduced = cse([e for *_, e in main] + [e for *_, e in net] + [e for *_, e in inputs])
    for sym, _ in repl:
        names[sym] = sym.name
    printer = native.printer(_NUMPY, names)
    body = native.bindings(problem, _NUMPY, "y", "p")
    body += [f"{names[s]} = {printer.doprint(e)}" for s, e in repl]
    body.append("dt = np.result_type(y, p, float)")
    return _Derivatives(outs, main, net, inputs, printer, body, iter(reduced))


def _direct_entries(d: _Derivatives, n: int, matrix: str, cols: int) -> None:
    """Bind ``matrix`` (``n × cols``, the derivatives the equations have directly) and,
    with networks, ``JN`` (``∂f/∂n``), consuming their reduced entries."""
    d.body.append(f"{matrix} = np.zeros(({n}, {cols}), dtype=dt)")
    for (i, j, _), e in zip(d.main, d.reduced, strict=False):
        d.body.append(f"{matrix}[{i}, {j}] = {d.printer.doprint(e)}")
    if d.outs:
        d.body.append(f"JN = np.zeros(({n}, {len(d.outs)}), dtype=dt)")
        for (i, k, _), e in zip(d.net, d.reduced, strict=False):
            d.body.append(f"JN[{i}, {k}] = {d.printer.doprint(e)}")


def jac_lines(problem: Problem) -> list[str]:
    """The body of ``jac(t, y, p)``, the exact Jacobian ∂f/∂y; through networks by the
    chain rule,

        ∂f/∂y = ∂f/∂y|_n + ∂f/∂n · s ⊙ W_L D_{L-1} W_{L-1} … D_1 W_1 ∂x/∂y,

    with ``D_l = diag(σ'(z_l))`` evaluated numerically.
    """
    d = _derivative_terms(problem, problem.state_symbols)
    n, printer, body, it = problem.n_state, d.printer, d.body, d.reduced
    _direct_entries(d, n, "J", n)
    if d.outs:
        for net in problem.networks:
            body.append(f"D_{net.name} = np.zeros(({len(net.inputs)}, {n}), dtype=dt)")
        for (m, a, j, _), e in zip(d.inputs, it, strict=False):
            body.append(f"D_{problem.networks[m].name}[{a}, {j}] = {printer.doprint(e)}")
        col = 0
        for net in problem.networks:
            body += _state_chain(net, printer, col)
            col += len(net.outputs)
    body.append("return J")
    return ["    " + ln for ln in body]


def _state_chain(net: Network, printer: NativePrinter, col: int) -> list[str]:
    """Lines adding network ``net``'s term of ``∂f/∂y`` (see :func:`jac_lines`)."""
    _, acts = native.network_forward(net, _NUMPY, printer, "p")
    d = f"D_{net.name}"
    lines = []
    for layer, _slice in enumerate(net.slices(), 1):
        lines.append(f"{d} = W_{net.name}_{layer} @ {d}")
        if layer <= len(acts) and net.activation != "identity":
            a = acts[layer - 1]
            deriv = f"(1 - {a}**2)" if net.activation == "tanh" else f"({a} * (1 - {a}))"
            lines.append(f"{d} = {deriv}[:, None] * {d}")
    scale = f"np.array({list(net.output_scale)!r})"
    lines.append(f"J = J + JN[:, {col}:{col + len(net.outputs)}] @ ({scale}[:, None] * {d})")
    return lines


def param_jacobian_source(problem: Problem) -> str:
    """NumPy source defining ``jac_p(t, y, p)``, the exact ``∂f/∂θ`` (``n_state × n_params``)
    that forward sensitivities need (:mod:`sciml_bench.problem.sensitivity`); complex-safe.

    Named parameters by sympy; a network's weights by backpropagation through its layers.
    With ``G_l = ∂n/∂z_l`` (``G_L = diag(s)``, the output scale), ``∂n/∂b_l = G_l``,
    ``∂n/∂W_l[a, b] = G_l[:, a] h_{l-1}[b]`` and ``G_{l-1} = (G_l W_l) ⊙ σ'(z_{l-1})``;
    then ``∂f/∂w = ∂f/∂n · ∂n/∂w``, and named parameters read by a network's inputs add
    ``∂f/∂n · G_1 W_1 ∂x/∂p``. Not one of the targets: only the reference runs it.
    """
    params = problem.param_symbols
    d = _derivative_terms(problem, params)
    printer, body, it = d.printer, d.body, d.reduced
    _direct_entries(d, problem.n_state, "F", problem.n_params)
    if d.outs:
        reads = set()  # networks whose inputs read named parameters
        for m, net in enumerate(problem.networks):
            mine = [x for x in d.inputs if x[0] == m]
            if mine:
                reads.add(m)
                body.append(f"DX_{net.name} = np.zeros(({len(net.inputs)}, {len(params)}), dtype=dt)")
            for (_, a, j, _), e in zip(mine, it, strict=False):
                body.append(f"DX_{net.name}[{a}, {j}] = {printer.doprint(e)}")
        col = 0
        for m, net in enumerate(problem.networks):
            body += _param_backprop(net, printer, col, len(params) if m in reads else 0)
            col += len(net.outputs)
    body.append("return F")
    lines = [
        f"# Generated by sciml-bench from {problem.name!r}: the exact df/dtheta; do not edit.",
        _NUMPY.header, "", "", "def jac_p(t, y, p):", *["    " + ln for ln in body],
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def _param_backprop(net: Network, printer: NativePrinter, col: int, n_named: int) -> list[str]:
    """Lines adding network ``net``'s columns of ``F = ∂f/∂θ`` (see
    :func:`param_jacobian_source`); its forward pass is already bound by the bindings."""
    name, acts = net.name, native.network_forward(net, _NUMPY, printer, "p")[1]
    jn = f"JN[:, {col}:{col + len(net.outputs)}]"
    lines = [f"G = np.diag(np.array({list(net.output_scale)!r}, dtype=dt))"]
    layers = net.slices()
    for layer in range(len(layers), 0, -1):
        ow, rows, cols, ob = layers[layer - 1]
        h_prev = f"x_{name}" if layer == 1 else acts[layer - 2]
        lines += [
            f"FN = {jn} @ G",
            f"F[:, {ob}:{ob + rows}] = FN",
            f"F[:, {ow}:{ow + rows * cols}] = (FN[:, :, None] * {h_prev}[None, None, :])"
            f".reshape(FN.shape[0], {rows * cols})",
        ]
        if layer > 1:
            a = acts[layer - 2]
            deriv = {"tanh": f"(1 - {a}**2)", "sigmoid": f"({a} * (1 - {a}))"}.get(
                net.activation, "1.0")  # fmt: skip
            lines.append(f"G = (G @ W_{name}_{layer}) * {deriv}[None, :]")
    if n_named:  # named parameters read by the network's inputs
        lines.append(f"F[:, 0:{n_named}] += {jn} @ (G @ W_{name}_1) @ DX_{name}")
    return lines


def initial_jacobian_lines(problem: Problem) -> list[str]:
    """The body of ``y0_jac(p)``: ``∂y0/∂θ`` (``n_state × n_params``) by sympy, for an
    initial state that depends on the parameters (:mod:`sciml_bench.problem.initial`);
    network weights' columns are zero (no initial value reads them). Complex-safe."""
    params = problem.param_symbols
    names = native.names(problem)
    m = sympy.Matrix(problem.initial).jacobian(params)
    entries = [(i, j, m[i, j]) for i in range(m.rows) for j in range(m.cols) if m[i, j] != 0]
    repl, reduced = cse([e for *_, e in entries])
    for sym, _ in repl:
        names[sym] = sym.name
    printer = native.printer(_NUMPY, names)
    used = set().union(*(e.free_symbols for _, e in repl), *(e.free_symbols for e in reduced))
    body = [f"p_{s.name} = p[{i}]" for i, s in enumerate(params) if s in used]
    body += [f"{names[s]} = {printer.doprint(e)}" for s, e in repl]
    body.append(f"D = np.zeros(({problem.n_state}, {problem.n_params}), "
                "dtype=np.result_type(p, float))")  # fmt: skip
    body += [f"D[{i}, {j}] = {printer.doprint(e)}"
             for (i, j, _), e in zip(entries, reduced, strict=True)]  # fmt: skip
    body.append("return D")
    return body
