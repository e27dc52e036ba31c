"""CasADi source: the right-hand side as CasADi symbolic expressions, for CVODES.

The generated Python defines ``rhs(t, y, p)``, which builds ``dy/dt`` as a CasADi column
from symbols ``y`` (the state, ``n_state × 1``), ``p`` (the parameters, ``n_params × 1``)
and ``t``, all of one symbol type: ``SX`` (scalar expression graphs, what CasADi
recommends for scalar-heavy functions) or ``MX`` (matrix-valued nodes). The cvodes backend
calls it once on symbols to build the integrator; CasADi differentiates the expression
graph for CVODES' Jacobians and sensitivities, so no Python runs per RHS evaluation.

The *scalar form* writes one expression per state (common subexpressions bound first).
A network ``n(x) = s ⊙ (W_L σ(… σ(W_1 x + b_1) …) + b_L)`` is matrix algebra:
``W_l = reshape(p[a:b], cols, rows).T`` (the parameter vector stores ``W`` row-major,
CasADi reshapes column-major) and ``ca.mtimes(W_l, h) + b_l``, so that on ``MX`` symbols
a 252-parameter layer stays a few matrix nodes instead of thousands of scalar ones.
(An *array form*, for vector-state problems, can be added beside :func:`_scalar_body`.)
"""

from __future__ import annotations

from typing import Any

import sympy
from sympy.printing.str import StrPrinter

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


class _Printer(StrPrinter):
    """sympy to Python on CasADi symbols: ``**`` for powers, ``ca.`` functions."""

    def __init__(self, names: dict[sympy.Symbol, str]):
        super().__init__({"full_prec": True})
        self.names = names

    def emptyPrinter(self, expr: Any) -> str:  # noqa: N802 (sympy's name)
        raise NotExpressible(f"{type(expr).__name__} ({expr}) has no CasADi form")

    def _print_Symbol(self, expr: sympy.Symbol) -> str:
        return self.names[expr]

    def _print_Float(self, expr: sympy.Float) -> str:
        return repr(float(expr))

    def _print_Integer(self, expr: sympy.Integer) -> str:
        return str(int(expr))

    def _print_Rational(self, expr: sympy.Rational) -> str:
        return f"({int(expr.p)}/{int(expr.q)})"

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
    names: dict[sympy.Symbol, str] = {sympy.Symbol("t", real=True): "t"}
    names.update({s: f"s_{s.name}" for s in problem.state_symbols})
    names.update({s: f"p_{s.name}" for s in problem.param_symbols})
    for net in problem.networks:
        names.update({o: f"n_{o.name}" for o in net.outputs})
    return names


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


def _scalar_body(problem: Problem) -> list[str]:
    """The body of ``rhs``: bindings, networks, subexpressions, then ``return``."""
    names = _names(problem)
    printer = _Printer(names)
    lines = [f"s_{n} = y[{i}]" for i, n in enumerate(problem.state_names)]
    lines += [f"p_{s.name} = p[{i}]" for i, s in enumerate(problem.param_symbols)]
    for net in problem.networks:
        lines += _network(net, printer)
    repl, reduced = sympy.cse(
        list(problem.rhs), symbols=sympy.numbered_symbols("cse", real=True), order="none"
    )
    for sym, _ in repl:
        names[sym] = sym.name
    lines += [f"{names[s]} = {printer.doprint(e)}" for s, e in repl]
    # a constant component must still be a symbol of y's type, so that vertcat stacks it
    comps = [printer.doprint(e) if e.free_symbols else f"{printer.doprint(e)} + 0 * y[0]"
             for e in reduced]  # fmt: skip
    lines.append(f"return ca.vertcat({', '.join(comps)})")
    return lines


def casadi_source(problem: Problem) -> str:
    """Python defining ``rhs(t, y, p)`` on CasADi symbols (or, when CasADi cannot express
    the problem, a comment saying why; see
    :func:`~sciml_bench.problem.generated.not_expressible`)."""
    head = [f"# Generated by sciml-bench from {problem.name!r} for casadi; do not edit."]
    try:
        body = _scalar_body(problem)
    except NotExpressible as e:
        return "\n".join([*head, f"# {NOT_EXPRESSIBLE} in CasADi: {e}"]) + "\n"
    return "\n".join([
        *head,
        "import casadi as ca",
        "",
        "",
        "def rhs(t, y, p):",
        '    """dy/dt as a CasADi column from symbols y (state), p (parameters) and t."""',
        *["    " + ln for ln in body],
    ]) + "\n"
