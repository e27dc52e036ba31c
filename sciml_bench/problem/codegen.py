"""Code generation: sympy right-hand sides to native source for every target.

One printer serves all targets; a target only chooses its array module, its
power operator and its indexing. For the array targets (torch, jax) a network whose
inputs are one elementwise function of the whole state, and whose outputs are the
whole right-hand side, is written on the state vector (``net(y**3)``), as a user of
those libraries writes it, instead of component by component. The generated text is exactly what a
backend runs (``sciml-bench codegen`` prints it), so fairness can be audited.

Targets and what they define:

- ``numpy``: ``rhs(t, y, p)`` and the exact sympy Jacobian ``jac(t, y, p)``
  (both complex-safe, for the complex-step reference);
- ``torch``: ``class RHS(torch.nn.Module)`` holding the parameters as its parameter
  tensors (``RHS(p)``; ``forward(t, y)`` on 1-D tensors), as a torch user writes an ODE
  function, ``rhs(t, y, p)``, the same on a parameter vector (one-off evaluations), and
  ``rhs_batch(t, Y, P)``, the same on a batch of states ``Y`` of shape ``(n, n_state)``
  with one shared parameter vector or one per member (``P`` of shape ``(n, n_params)``),
  written on columns as a torch user writes a batched vector field (ensembles);
- ``jax``:   ``rhs(t, y, p)`` on 1-D arrays, the parameters passed as Diffrax's ``args``;
- ``julia``: in-place ``rhs!(du, u, p, t)``;
- ``casadi``: ``rhs(t, y, p)`` building CasADi expressions (:mod:`.codegen_casadi`);
- ``diffsl``: the DiffSL model pydiffsol compiles (:mod:`.codegen_diffsl`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import sympy
from sympy.printing.precedence import PRECEDENCE, precedence

from sciml_bench.problem.generated import load_python
from sciml_bench.problem.printing import NamedPrinter
from sciml_bench.problem.spec import Network, Problem

__all__ = ["TARGETS", "targets", "generate", "load_python", "python_source", "julia_source"]

TARGETS = ("numpy", "torch", "jax", "julia", "casadi", "diffsl")


@dataclass(frozen=True)
class _Target:
    module: str  # prefix for functions, "" for Julia's Base
    pow_op: str
    index_base: int
    stack: str  # how a list of components becomes a vector
    header: str


_TARGETS = {
    "numpy": _Target("np.", "**", 0, "np.array([{}])", "import numpy as np"),
    "torch": _Target("torch.", "**", 0, "torch.stack([{}])", "import torch"),
    "jax": _Target("jnp.", "**", 0, "jnp.stack([{}])", "import jax.numpy as jnp"),
    "julia": _Target("", "^", 1, "", ""),
}

_FUNC_NAMES = {"Abs": "abs"}

#: which torch function is written: the module's ``forward``, ``rhs`` or ``rhs_batch``
Form = Literal["module", "functional", "batched"]

#: a dense layer on a batch, emitted into torch sources that have networks
_TORCH_DENSE = '''

def _dense(x, P, ow, rows, cols, ob):
    """x Wᵀ + b for inputs x of shape (n, cols), W and b read from P: one shared
    parameter vector (1-D) or one per member (n, n_params)."""
    if P.dim() == 1:
        W = P[ow:ow + rows * cols].reshape(rows, cols)
        return torch.nn.functional.linear(x, W, P[ob:ob + rows])
    W = P[:, ow:ow + rows * cols].reshape(-1, rows, cols)
    return torch.bmm(W, x.unsqueeze(-1)).squeeze(-1) + P[:, ob:ob + rows]'''


class _Printer(NamedPrinter):
    """Prints sympy expressions as source for one target."""

    def __init__(self, target: _Target, names: dict[sympy.Symbol, str]):
        super().__init__(names)
        self.t = target

    def _print_Exp1(self, expr: Any) -> str:
        return f"{self.t.module}exp(1.0)" if self.t.module else "exp(1.0)"

    def _print_Pi(self, expr: Any) -> str:
        return "pi" if not self.t.module else f"{self.t.module}pi"

    def _print_Function(self, expr: Any) -> str:
        name = type(expr).__name__
        name = _FUNC_NAMES.get(name, name)
        args = ", ".join(self._print(a) for a in expr.args)
        return f"{self.t.module}{name}({args})"

    _print_Abs = _print_Function

    def _print_Pow(self, expr: sympy.Pow, rational: bool = False) -> str:
        base, exp = expr.as_base_exp()
        prec = PRECEDENCE["Pow"]
        if exp == sympy.S.Half:
            return f"{self.t.module}sqrt({self._print(base)})"
        if exp == -sympy.S.Half:
            return f"(1/{self.t.module}sqrt({self._print(base)}))"
        if exp.is_Number and exp < 0:
            inner = base if exp == -1 else sympy.Pow(base, -exp, evaluate=False)
            return f"(1/{self.parenthesize(inner, PRECEDENCE['Mul'], strict=True)})"
        b = self.parenthesize(base, prec, strict=True)
        if precedence(base) <= prec or (base.is_Number and base < 0):
            b = f"({self._print(base)})"
        e = self._print(exp)
        if not (exp.is_Integer and exp >= 0) and not exp.is_Symbol:
            e = f"({e})"
        return f"{b}{self.t.pow_op}{e}"


def _symbol_names(problem: Problem, target: _Target) -> dict[sympy.Symbol, str]:
    names: dict[sympy.Symbol, str] = {sympy.Symbol("t", real=True): "t"}
    for s in problem.state_symbols:
        names[s] = f"s_{s.name}"
    for p in problem.param_symbols:
        names[p] = f"p_{p.name}"
    for net in problem.networks:
        for out in net.outputs:
            names[out] = f"n_{out.name}"
    return names


def _bindings(
    problem: Problem,
    target: _Target,
    y: str,
    p: str,
    vector: _VectorNet | None = None,
    form: Form = "module",
) -> list[str]:
    """Bind states and mechanistic parameters to locals, then evaluate networks.

    torch's module reads each parameter from itself (``self.p_k``), never slicing a
    vector; its ``functional`` twin (``rhs(t, y, p)``) slices ``p`` as NumPy and JAX do;
    the ``batched`` one takes columns (``Y[..., k]``, ``P[..., k]``), so one shared
    ``P`` broadcasts over the members and a per-member one lines up with them.
    """
    b = target.index_base
    torch = target.module == "torch."
    module = torch and form == "module"
    at = "..., " if torch and form == "batched" else ""
    lines = [f"s_{n} = {y}[{at}{i + b}]" for i, n in enumerate(problem.state_names)]
    lines += [
        f"p_{s.name} = self.p_{s.name}" if module else f"p_{s.name} = {p}[{at}{i + b}]"
        for i, s in enumerate(problem.param_symbols)
    ]
    names = _symbol_names(problem, target)
    printer = _Printer(target, names)
    for net in problem.networks:
        lines += _network_forward(net, target, printer, p, vector, form)[0]
    return lines


@dataclass(frozen=True)
class _VectorNet:
    """A network written on the state vector: ``x = input`` (source text on ``y``);
    when ``output`` is set, the right-hand side is ``output`` (the last layer, scaled)."""

    input: str
    output: str | None


def _vector_net(problem: Problem, target: _Target) -> _VectorNet | None:
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
    printer = _Printer(target, {v: "y"})
    x = printer.doprint(forms.pop())
    last = f"h_{net.name}_{len(net.slices())}"
    output = None
    scales = set(net.output_scale)
    if list(problem.rhs) == net.outputs and len(scales) == 1:
        (scale,) = scales
        output = last if scale == 1.0 else f"{scale!r} * {last}"
    return _VectorNet(x, output)


def _drop_unused(lines: list[str]) -> list[str]:
    """Drop state and parameter bindings that no later line reads."""
    out = []
    for i, ln in enumerate(lines):
        name = ln.split(" = ", 1)[0]
        if name.startswith(("s_", "p_")) and not any(
            re.search(rf"\b{re.escape(name)}\b", later) for later in lines[i + 1:]
        ):
            continue
        out.append(ln)
    return out


def _activation(kind: str, z: str, target: _Target) -> str:
    m = target.module
    dot = "." if not m else ""  # Julia broadcasts elementwise functions with a dot
    if kind == "tanh":
        return f"{m}tanh{dot}({z})"
    if kind == "sigmoid":
        return f"1 {dot}/ (1 {dot}+ {m}exp{dot}(-{z}))"
    return z


def _torch_component(
    c: str, e: sympy.Expr, printer: _Printer, like: str, batched: bool,
    whole: sympy.Expr | None = None,
) -> str:
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


def _network_forward(
    net: Network,
    target: _Target,
    printer: _Printer,
    p: str,
    vector: _VectorNet | None = None,
    form: Form = "module",
) -> tuple[list[str], list[str]]:
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
    comps = [printer.doprint(e) for e in net.inputs]
    if vector is not None:
        lines = [f"x_{n} = {vector.input}"]
    elif julia:
        lines = [f"x_{n} = [{', '.join(comps)}]"]
    elif torch:
        comps = [
            _torch_component(c, e, printer, f"y[{at}0]", batched)
            for c, e in zip(comps, net.inputs, strict=True)
        ]
        dim = ", dim=-1" if batched else ""
        lines = [f"x_{n} = torch.stack([{', '.join(comps)}]{dim})"]
    else:
        lines = [f"x_{n} = {target.stack.format(', '.join(comps))}"]
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


def _cse(exprs: Sequence[sympy.Expr]) -> tuple[list[tuple[sympy.Symbol, sympy.Expr]], list]:
    tmp = sympy.numbered_symbols("cse", real=True)
    return sympy.cse(list(exprs), symbols=tmp, order="none")


def _components(
    exprs: Sequence[sympy.Expr], printer: _Printer, target_name: str, like: str,
    batched: bool = False, wholes: Sequence[sympy.Expr] | None = None,
) -> list[str]:
    """Printed components; ``wholes`` are the same expressions before CSE."""
    out = []
    for i, e in enumerate(exprs):
        s = printer.doprint(e)
        if target_name == "torch":  # torch.stack needs tensors of the state's dtype and device
            s = _torch_component(s, e, printer, like, batched, wholes[i] if wholes else None)
        out.append(s)
    return out


def python_source(problem: Problem, target: str) -> str:
    """Source defining ``rhs(t, y, p)`` (and ``jac`` for NumPy, ``RHS`` for torch)."""
    body = _rhs_body(problem, target)
    lines = [
        f"# Generated by sciml-bench from {problem.name!r} for {target}; do not edit.",
        _TARGETS[target].header,
        "",
        "",
    ]
    if target == "torch":
        functional = _rhs_body(problem, target, "functional")
        batched = _rhs_body(problem, target, "batched")
        return "\n".join(lines + _torch_module(problem, body, functional, batched)) + "\n"
    lines += ["def rhs(t, y, p):", *["    " + ln for ln in body]]
    if target == "numpy":
        lines += ["", "", "def jac(t, y, p):", *_numpy_jac(problem)]
    return "\n".join(lines) + "\n"


def _rhs_body(problem: Problem, target: str, form: Form = "module") -> list[str]:
    """The lines of the right-hand side's body, ending in its ``return``."""
    tg = _TARGETS[target]
    batched = target == "torch" and form == "batched"
    if batched:
        tg = _Target(tg.module, tg.pow_op, tg.index_base, "torch.stack([{}], dim=-1)", tg.header)
    names = _symbol_names(problem, tg)
    vector = _vector_net(problem, tg)
    body = _bindings(problem, tg, "y", "p", vector, form)
    if vector is not None and vector.output is not None:
        body.append(f"return {vector.output}")
    else:
        repl, reduced = _cse(problem.rhs)
        for sym, _ in repl:
            names[sym] = sym.name
        printer = _Printer(tg, names)
        body += [f"{names[s]} = {printer.doprint(e)}" for s, e in repl]
        first = "y[..., 0]" if batched else f"s_{problem.state_names[0]}"
        comps = _components(reduced, printer, target, first, batched, problem.rhs)
        body.append("return " + tg.stack.format(", ".join(comps)))
    return _drop_unused(body) if target != "numpy" else body


def _torch_module(
    problem: Problem, body: list[str], functional: list[str], batched: list[str]
) -> list[str]:
    """``class RHS(torch.nn.Module)``: one parameter tensor per named parameter and per
    layer weight and bias, registered in the order of the parameter vector, so that
    ``torch.nn.utils.vector_to_parameters`` and ``parameters_to_vector`` map onto it."""
    init: list[tuple[int, str]] = [
        (i, f"self.p_{s.name} = torch.nn.Parameter(p[{i}].clone())")
        for i, s in enumerate(problem.param_symbols)
    ]
    for net in problem.networks:
        for layer, (ow, rows, cols, ob) in enumerate(net.slices(), 1):
            w = f"p[{ow}:{ow + rows * cols}].reshape({rows}, {cols})"
            init.append((ow, f"self.W_{net.name}_{layer} = torch.nn.Parameter({w}.clone())"))
            init.append((ob, f"self.b_{net.name}_{layer} = torch.nn.Parameter("
                             f"p[{ob}:{ob + rows}].clone())"))
    init.sort()
    return [
        "class RHS(torch.nn.Module):",
        '    """The right-hand side; its parameter tensors are the problem\'s parameters."""',
        "",
        "    def __init__(self, p):",
        "        super().__init__()",
        *["        " + ln for _, ln in init],
        "",
        "    def forward(self, t, y):",
        *["        " + ln for ln in body],
        "",
        "",
        "def rhs(t, y, p):",
        '    """The same right-hand side as a function of the parameter vector p, for one-off',
        '    evaluations; a single-trajectory solver holds one RHS module instead."""',
        *["    " + ln for ln in functional],
        "",
        "",
        "def rhs_batch(t, y, p):",
        '    """The right-hand side of a batch of members, y of shape (n, n_state): p is one',
        '    shared parameter vector or one per member (n, n_params)."""',
        *["    " + ln for ln in batched],
        *([_TORCH_DENSE] if problem.networks else []),
    ]


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
    printer: _Printer
    body: list[str]
    reduced: Any


def _derivative_terms(problem: Problem, wrt: Sequence[sympy.Symbol]) -> _Derivatives:
    """What the NumPy Jacobians ``∂f/∂y`` and ``∂f/∂θ`` share: sympy's derivatives of the
    equations with respect to ``wrt`` and to the networks' outputs, and of the networks'
    inputs with respect to ``wrt``, with one CSE over all of them."""
    tg = _TARGETS["numpy"]
    names = _symbol_names(problem, tg)
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
    repl, reduced = _cse([e for *_, e in main] + [e for *_, e in net] + [e for *_, e in inputs])
    for sym, _ in repl:
        names[sym] = sym.name
    printer = _Printer(tg, names)
    body = _bindings(problem, tg, "y", "p")
    body += [f"{names[s]} = {printer.doprint(e)}" for s, e in repl]
    body.append("dt = np.result_type(y, p, float)")
    return _Derivatives(outs, main, net, inputs, printer, body, iter(reduced))


def _numpy_jac(problem: Problem) -> list[str]:
    """The exact Jacobian ∂f/∂y; through networks by the chain rule,

        ∂f/∂y = ∂f/∂y|_n + ∂f/∂n · s ⊙ W_L D_{L-1} W_{L-1} … D_1 W_1 ∂x/∂y,

    with ``D_l = diag(σ'(z_l))`` evaluated numerically.
    """
    tg = _TARGETS["numpy"]
    d = _derivative_terms(problem, problem.state_symbols)
    n, outs, entries, n_entries, x_entries = problem.n_state, d.outs, d.main, d.net, d.inputs
    printer, body, it = d.printer, d.body, d.reduced
    body.append(f"J = np.zeros(({n}, {n}), dtype=dt)")
    for (i, j, _), e in zip(entries, it, strict=False):
        body.append(f"J[{i}, {j}] = {printer.doprint(e)}")
    if outs:
        body.append(f"JN = np.zeros(({n}, {len(outs)}), dtype=dt)")
        for (i, k, _), e in zip(n_entries, it, strict=False):
            body.append(f"JN[{i}, {k}] = {printer.doprint(e)}")
        for net in problem.networks:
            body.append(f"D_{net.name} = np.zeros(({len(net.inputs)}, {n}), dtype=dt)")
        for (m, a, j, _), e in zip(x_entries, it, strict=False):
            body.append(f"D_{problem.networks[m].name}[{a}, {j}] = {printer.doprint(e)}")
        col = 0
        for net in problem.networks:
            _, acts = _network_forward(net, tg, printer, "p")
            d = f"D_{net.name}"
            for layer, _slice in enumerate(net.slices(), 1):
                body.append(f"{d} = W_{net.name}_{layer} @ {d}")
                if layer <= len(acts) and net.activation != "identity":
                    a = acts[layer - 1]
                    deriv = f"(1 - {a}**2)" if net.activation == "tanh" else f"({a} * (1 - {a}))"
                    body.append(f"{d} = {deriv}[:, None] * {d}")
            scale = f"np.array({list(net.output_scale)!r})"
            body.append(f"J = J + JN[:, {col}:{col + len(net.outputs)}] @ ({scale}[:, None] * {d})")
            col += len(net.outputs)
    body.append("return J")
    return ["    " + ln for ln in body]


def julia_source(problem: Problem) -> str:
    """Julia source defining the in-place ``rhs!(du, u, p, t)``."""
    tg = _TARGETS["julia"]
    names = _symbol_names(problem, tg)
    repl, reduced = _cse(problem.rhs)
    for sym, _ in repl:
        names[sym] = sym.name
    printer = _Printer(tg, names)
    body = _bindings(problem, tg, "u", "p")
    body += [f"{names[s]} = {printer.doprint(e)}" for s, e in repl]
    body += [f"du[{i + 1}] = {printer.doprint(e)}" for i, e in enumerate(reduced)]
    lines = [
        f"# Generated by sciml-bench from {problem.name!r} for julia; do not edit.",
        "function rhs!(du, u, p, t)",
        "    @inbounds begin",
        *["        " + ln for ln in body],
        "    end",
        "    return nothing",
        "end",
    ]
    return "\n".join(lines) + "\n"


def targets(problem: Problem) -> tuple[str, ...]:
    """The targets ``problem`` has source for: every one of :data:`TARGETS` for a scalar
    problem, those of :mod:`sciml_bench.problem.codegen_arrays` for an array problem."""
    if problem.array is None:
        return TARGETS
    from sciml_bench.problem import codegen_arrays

    return (*codegen_arrays.TARGETS, "casadi", "diffsl")


def generate(problem: Problem, target: str) -> str:
    """The exact source a backend runs for ``target`` (one of :data:`TARGETS`); an array
    problem's is array code (:mod:`sciml_bench.problem.codegen_arrays`)."""
    if target == "casadi":  # its array form included
        from sciml_bench.problem.codegen_casadi import casadi_source

        return casadi_source(problem)
    if target == "diffsl":
        from sciml_bench.problem.codegen_diffsl import diffsl_source

        return diffsl_source(problem)
    if problem.array is not None:
        from sciml_bench.problem import codegen_arrays

        return codegen_arrays.generate(problem, target)
    if target not in _TARGETS:
        raise ValueError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    return julia_source(problem) if target == "julia" else python_source(problem, target)


def param_jacobian_source(problem: Problem) -> str:
    """NumPy source defining ``jac_p(t, y, p)``, the exact ``∂f/∂θ`` (``n_state × n_params``)
    that forward sensitivities need (:mod:`sciml_bench.problem.sensitivity`); complex-safe.

    Named parameters by sympy; a network's weights by backpropagation through its layers.
    With ``G_l = ∂n/∂z_l`` (``G_L = diag(s)``, the output scale), ``∂n/∂b_l = G_l``,
    ``∂n/∂W_l[a, b] = G_l[:, a] h_{l-1}[b]`` and ``G_{l-1} = (G_l W_l) ⊙ σ'(z_{l-1})``;
    then ``∂f/∂w = ∂f/∂n · ∂n/∂w``, and named parameters read by a network's inputs add
    ``∂f/∂n · G_1 W_1 ∂x/∂p``. Not one of :data:`TARGETS`: only the reference runs it.
    """
    tg = _TARGETS["numpy"]
    params = problem.param_symbols
    d = _derivative_terms(problem, params)
    n, outs, p_entries, n_entries, x_entries = problem.n_state, d.outs, d.main, d.net, d.inputs
    printer, body, it = d.printer, d.body, d.reduced
    body.append(f"F = np.zeros(({n}, {problem.n_params}), dtype=dt)")
    for (i, j, _), e in zip(p_entries, it, strict=False):
        body.append(f"F[{i}, {j}] = {printer.doprint(e)}")
    if outs:
        body.append(f"JN = np.zeros(({n}, {len(outs)}), dtype=dt)")
        for (i, k, _), e in zip(n_entries, it, strict=False):
            body.append(f"JN[{i}, {k}] = {printer.doprint(e)}")
        reads = set()  # networks whose inputs read named parameters
        for m, net in enumerate(problem.networks):
            mine = [x for x in x_entries if x[0] == m]
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
        tg.header, "", "", "def jac_p(t, y, p):", *["    " + ln for ln in body],
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def _param_backprop(net: Network, printer: _Printer, col: int, n_named: int) -> list[str]:
    """Lines adding network ``net``'s columns of ``F = ∂f/∂θ`` (see
    :func:`param_jacobian_source`); its forward pass is already bound by ``_bindings``."""
    name, acts = net.name, _network_forward(net, _TARGETS["numpy"], printer, "p")[1]
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
