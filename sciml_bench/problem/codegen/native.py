"""The native targets' pieces for a scalar problem: bindings, networks, the printer.

NumPy, torch, JAX and Julia share one printer (:class:`~.printing.NativePrinter`); a
target only chooses its array module, its power operator and its indexing
(:class:`Target`). The sources themselves are written by :mod:`.python`
(``rhs``/``RHS``), :mod:`.jacobian` (NumPy's exact Jacobians) and :mod:`.julia`
(``rhs!``). For the array targets (torch, jax) a network whose inputs are one
elementwise function of the whole state, and whose outputs are the whole right-hand
side, is written on the state vector (``net(y**3)``), as a user of those libraries
writes it, instead of component by component (:func:`vector_net`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import sympy

from sciml_bench.problem.codegen.printing import NativePrinter, symbol_names
from sciml_bench.problem.spec import Network, Problem


@dataclass(frozen=True)
class Target:
    module: str  # prefix for functions, "" for Julia's Base
    pow_op: str
    index_base: int
    stack: str  # how a list of components becomes a vector
    header: str


TARGETS = {
    "numpy": Target("np.", "**", 0, "np.array([{}])", "import numpy as np"),
    "torch": Target("torch.", "**", 0, "torch.stack([{}])", "import torch"),
    "jax": Target("jnp.", "**", 0, "jnp.stack([{}])", "import jax.numpy as jnp"),
    "julia": Target("", "^", 1, "", ""),
}

#: which torch function is written: the module's ``forward``, ``rhs`` or ``rhs_batch``
Form = Literal["module", "functional", "batched"]


def names(problem: Problem) -> dict[sympy.Symbol, str]:
    """What the generated code binds each symbol to: ``s_``, ``p_`` and ``n_`` (network
    outputs) before the symbol's name."""
    outs = [o for net in problem.networks for o in net.outputs]
    return symbol_names((problem.state_symbols, "s_{name}"),
                        (problem.param_symbols, "p_{name}"), (outs, "n_{name}"))  # fmt: skip


def printer(target: Target, names: dict[sympy.Symbol, str]) -> NativePrinter:
    """The printer of ``target`` with symbols printed by ``names``."""
    return NativePrinter(names, target.module, target.pow_op)


@dataclass(frozen=True)
class VectorNet:
    """A network written on the state vector: ``x = input`` (source text on ``y``);
    when ``output`` is set, the right-hand side is ``output`` (the last layer, scaled)."""

    input: str
    output: str | None


def bindings(problem: Problem, target: Target, y: str, p: str,
             vector: VectorNet | None = None, form: Form = "module",
             log: Sequence[bool] | None = None) -> list[str]:  # fmt: skip
    """Bind states and mechanistic parameters to locals, then evaluate networks.

    torch's module reads each parameter from itself (``self.p_k``), never slicing a
    vector; its ``functional`` twin (``rhs(t, y, p)``) slices ``p`` as NumPy and JAX do;
    the ``batched`` one takes columns (``Y[..., k]``, ``P[..., k]``), so one shared
    ``P`` broadcasts over the members and a per-member one lines up with them.

    ``log[i]`` (Julia's single-trajectory model): ``p`` holds ``u_i = log θ_i`` and the
    binding is ``p_k = exp(p[i])``, so the library differentiates along ``log θ_i``
    (:func:`~sciml_bench.problem.compiled.log_scaled`).
    """
    b = target.index_base
    torch = target.module == "torch."
    module = torch and form == "module"
    at = "..., " if torch and form == "batched" else ""
    lines = [f"s_{n} = {y}[{at}{i + b}]" for i, n in enumerate(problem.state_names)]
    for i, s in enumerate(problem.param_symbols):
        read = f"{p}[{at}{i + b}]"
        if log is not None and log[i]:
            read = f"{target.module}exp({read})"
        lines.append(f"p_{s.name} = self.p_{s.name}" if module else f"p_{s.name} = {read}")
    pr = printer(target, names(problem))
    for net in problem.networks:
        lines += network_forward(net, target, pr, p, vector, form)[0]
    return lines


def vector_net(problem: Problem, target: Target) -> VectorNet | None:
    """The vector form of the problem's one network, when its inputs are one elementwise
    function g of the whole state (input k = g(state k)), or None."""
    if len(problem.networks) != 1 or target.module not in ("torch.", "jnp."):
        return None
    net = problem.networks[0]
    states = problem.state_symbols
    if len(net.inputs) != len(states):
        return None
    v = sympy.Symbol("y", real=True)
    forms = set()
    for s, e in zip(states, net.inputs, strict=True):
        if not e.free_symbols <= {s} or s not in e.free_symbols:
            return None
        forms.add(e.subs(s, v))
    if len(forms) != 1:
        return None
    x = printer(target, {v: "y"}).doprint(forms.pop())
    last = f"h_{net.name}_{len(net.slices())}"
    output = None
    scales = set(net.output_scale)
    if list(problem.rhs) == net.outputs and len(scales) == 1:
        (scale,) = scales
        output = last if scale == 1.0 else f"{scale!r} * {last}"
    return VectorNet(x, output)


def _activation(kind: str, z: str, target: Target) -> str:
    m = target.module
    dot = "." if not m else ""  # Julia broadcasts elementwise functions with a dot
    if kind == "tanh":
        return f"{m}tanh{dot}({z})"
    if kind == "sigmoid":
        return f"1 {dot}/ (1 {dot}+ {m}exp{dot}(-{z}))"
    return z


def torch_component(
    c: str, e: sympy.Expr, printer: NativePrinter, like: str, batched: bool,
    whole: sympy.Expr | None = None,
) -> str:  # fmt: skip
    """Source ``c`` of expression ``e`` as a tensor shaped like ``like`` (a state column),
    so that components stack: a constant is filled in, and on a batch a value shared by
    the members (one that reads no state; states print as ``s_<name>``) is broadcast.

    ``whole`` is ``e`` with the CSE definitions substituted back (the equation as
    written): whether a component reads the state is decided on it, since a CSE symbol
    (``cse0 = k1*y1``) hides the state it reads."""
    symbols = (e if whole is None else whole).free_symbols
    if not symbols:
        return f"torch.full_like({like}, {c})"
    if batched and not any(printer.doprint(v).startswith("s_") for v in symbols):
        return f"({c}) + torch.zeros_like({like})"
    return c


def _network_input(
    net: Network, target: Target, printer: NativePrinter, vector: VectorNet | None,
    batched: bool,
) -> str:  # fmt: skip
    """The line binding ``x_<net>``, the network's input vector."""
    n = net.name
    comps = [printer.doprint(e) for e in net.inputs]
    if vector is not None:
        return f"x_{n} = {vector.input}"
    if target.pow_op == "^":  # Julia
        return f"x_{n} = [{', '.join(comps)}]"
    if target.module == "torch.":
        at = "..., " if batched else ""
        comps = [
            torch_component(c, e, printer, f"y[{at}0]", batched)
            for c, e in zip(comps, net.inputs, strict=True)
        ]
        dim = ", dim=-1" if batched else ""
        return f"x_{n} = torch.stack([{', '.join(comps)}]{dim})"
    return f"x_{n} = {target.stack.format(', '.join(comps))}"


def network_forward(
    net: Network, target: Target, printer: NativePrinter, p: str,
    vector: VectorNet | None = None, form: Form = "module",
) -> tuple[list[str], list[str]]:  # fmt: skip
    """Lines evaluating ``net``, and the names of each layer's activation output.

    NumPy and JAX use ``W @ x`` on slices of the parameter vector; torch calls
    ``torch.nn.functional.linear`` on the module's weight tensors (``_dense`` on a
    batch); Julia reads row-major ``W`` as the transpose of a column-major reshape.
    """
    n, b = net.name, target.index_base
    julia = target.pow_op == "^"
    torch = target.module == "torch."
    batched = torch and form == "batched"
    at = "..., " if batched else ""
    lines = [_network_input(net, target, printer, vector, batched)]
    h = f"x_{n}"
    acts = []
    last = len(net.slices())
    for layer, (ow, rows, cols, ob) in enumerate(net.slices(), 1):
        if julia:
            w = f"{p}[{ow + b}:{ow + rows * cols}]"
            lines.append(f"W_{n}_{layer} = transpose(reshape({w}, {cols}, {rows}))")
            lines.append(f"b_{n}_{layer} = {p}[{ob + b}:{ob + rows}]")
            z = f"W_{n}_{layer} * {h} .+ b_{n}_{layer}"
        elif batched:
            z = f"_dense({h}, {p}, {ow}, {rows}, {cols}, {ob})"
        elif torch and form == "module":
            z = f"torch.nn.functional.linear({h}, self.W_{n}_{layer}, self.b_{n}_{layer})"
        else:
            lines.append(f"W_{n}_{layer} = {p}[{ow}:{ow + rows * cols}].reshape({rows}, {cols})")
            lines.append(f"b_{n}_{layer} = {p}[{ob}:{ob + rows}]")
            z = f"W_{n}_{layer} @ {h} + b_{n}_{layer}"
        h = f"h_{n}_{layer}"
        if layer < last:
            lines.append(f"{h} = {_activation(net.activation, f'({z})', target)}")
            acts.append(h)
        else:
            lines.append(f"{h} = {z}")
    if vector is None or vector.output is None:
        for k, out in enumerate(net.outputs):
            lines.append(f"n_{out.name} = {net.output_scale[k]!r} * {h}[{at}{k + b}]")
    return lines, acts


def initial_lines(problem: Problem, target: Target, p: str, form: Form = "functional",
                  log: Sequence[bool] | None = None) -> list[str]:  # fmt: skip
    """The body of ``y0(p)``, a state that depends on the parameters
    (:mod:`sciml_bench.problem.initial`): the parameters it reads bound as :func:`bindings`
    binds them (``self.p_k`` in torch's module form; ``exp(p[i])`` where ``log[i]``), then
    the components. NumPy's array takes ``p``'s type (complex-safe, for complex step);
    torch's components are tensors of ``p``'s type (the module's, in its form), so that the
    graph runs from the parameters through ``y0``."""
    b = target.index_base
    used = set().union(*(e.free_symbols for e in problem.initial))
    lines = []
    for i, s in enumerate(problem.param_symbols):
        if s not in used:
            continue
        read = f"{p}[{i + b}]"
        if log is not None and log[i]:
            read = f"{target.module}exp({read})"
        lines.append(f"p_{s.name} = self.p_{s.name}" if form == "module" else f"p_{s.name} = {read}")
    pr = printer(target, names(problem))
    comps = [pr.doprint(e) for e in problem.initial]
    if target.module == "torch.":
        like = "self.p_" + problem.param_symbols[0].name if form == "module" else f"{p}[0]"
        comps = [f"torch.as_tensor({c}, dtype={like}.dtype, device={like}.device)"
                 for c in comps]  # fmt: skip
        return [*lines, f"return torch.stack([{', '.join(comps)}])"]
    if target.module == "np.":
        return [*lines, f"return np.array([{', '.join(comps)}], dtype=np.result_type({p}, float))"]
    if target.pow_op == "^":  # Julia: a literal vector promotes to ForwardDiff's duals
        return [*lines, f"return [{', '.join(comps)}]"]
    return [*lines, f"return {target.stack.format(', '.join(comps))}"]
