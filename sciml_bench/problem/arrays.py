"""Array problems: named sizes, states on a grid, equations written once per element.

A problem with a ``[sizes]`` section is an *array problem*. Its states all live on one
grid (``[state] shape = "n"`` or ``["N", "N"]``), every equation is one elementwise
*template*, and a handful of operators reach the neighbours of an element:

==========================  =================================================================
``lap(u, bc)``              the unscaled Laplacian stencil: ``Σ_axes u[i+1] + u[i-1] - 2u[i]``
                            (1-D: 3 points, 2-D: 5 points; divide by ``dx^2`` yourself)
``shift(u, di[, dj], bc)``  ``u`` at the neighbour ``(i+di, j+dj)``
``sum(u[, axis])``          the sum of ``u`` over ``axis`` (all axes without one), broadcast
``mean(u[, axis])``         the same, divided by the number of summed elements
``step(x)``                 Heaviside: 1 where ``x >= 0``, else 0 (its derivative is 0)
==========================  =================================================================

Boundaries ``bc``: ``periodic`` (indices wrap), ``dirichlet`` (outside the grid reads 0) and
``neumann`` (outside the grid reads the nearest boundary value: zero flux, cell-centred).
Inside templates, ``i``, ``j`` (and ``k`` on a 3-D grid) are an element's 0-based indices
along the axes, size names are their integers, and ``[definitions]`` names expressions.

Layout of the flat state vector (every backend and the reference): element by element in
C order, the states of one element adjacent, ``y[e * S + s]`` for element ``e`` of state
``s``. So ROBER's groups sit in 3x3 diagonal blocks (a band of width 2), and a grid's
neighbours sit ``S`` or ``S * N`` apart.

The exact Jacobian is never built per element. Each template ``f_s`` is differentiated once
with respect to the element's own states and to each operator (an operator is linear in its
state, with a known stencil), giving *blocks* (:class:`JacBlock`): output state, input state,
which neighbour, and a coefficient template. Code generation turns blocks into the sparse
pattern and vectorised values (:mod:`sciml_bench.problem.codegen.arrays_python`).

Nothing here imports :mod:`sciml_bench.problem.spec`: ``spec`` calls :func:`read` with its
reader (errors name the file and key), and builds the ``Problem``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import sympy

from sciml_bench.problem import expr, parameter_arrays

#: boundary conditions an operator may name
BOUNDARIES = ("periodic", "dirichlet", "neumann")
#: index names per axis, in order (a 2-D grid reserves i and j)
INDEX_NAMES = ("i", "j", "k")
MAX_NDIM = 3
#: states of one instance (elements x states): beyond this a case cannot be held anyway
MAX_ARRAY_STATES = 5_000_000
#: one size: also what --sizes accepts for an array problem
MAX_SIZE = 10_000_000
OPERATORS = ("lap", "shift", "sum", "mean")


class step(sympy.Function):  # noqa: N801 (the name the problem files use)
    """Heaviside ``step(x) = 1 if x >= 0 else 0``; its derivative is taken as 0 (the
    forcing it switches is piecewise constant)."""

    @classmethod
    def eval(cls, x: sympy.Expr) -> sympy.Expr | None:
        if x.is_Number:
            return sympy.S.One if x >= 0 else sympy.S.Zero
        return None

    def fdiff(self, argindex: int = 1) -> sympy.Expr:
        return sympy.S.Zero


FUNCTIONS: Mapping[str, Any] = {"step": step}


@dataclass(frozen=True)
class Operator:
    """One operator call in a template; ``symbol`` stands for its value at the element."""

    kind: str  # lap, shift, sum, mean
    state: int  # index into the states
    boundary: str | None = None  # lap, shift
    offset: tuple[int, ...] = ()  # shift
    axes: tuple[int, ...] = ()  # sum, mean (C axes, 0-based)
    symbol: sympy.Symbol = field(default=sympy.Symbol("op"), compare=False)

    def stencil(self, ndim: int) -> list[tuple[tuple[int, ...], int]]:
        """``(offset, coefficient)`` of a linear stencil operator (lap, shift)."""
        if self.kind == "shift":
            return [(self.offset, 1)]
        out = [(tuple(0 for _ in range(ndim)), -2 * ndim)]
        for a in range(ndim):
            for k in (1, -1):
                out.append((tuple(k if b == a else 0 for b in range(ndim)), 1))
        return out


@dataclass(frozen=True)
class JacBlock:
    """``∂f_out/∂y_in`` at one neighbour of every element, equal to ``coeff`` there.

    ``offset`` (one int per axis) under ``boundary``, or, for sum/mean, every element
    sharing the element's indices off ``axes`` (``axes`` non-empty)."""

    out: int
    inp: int
    offset: tuple[int, ...]
    boundary: str | None
    axes: tuple[int, ...]
    coeff: sympy.Expr


@dataclass(frozen=True)
class ArrayParam:
    """A named parameter: scalar (``per_element`` False) or one value per grid element,
    at ``offset`` in the parameter vector."""

    name: str
    per_element: bool
    offset: int


@dataclass(frozen=True)
class ArrayModel:
    """One instance of an array problem: every size resolved."""

    sizes: tuple[tuple[str, int], ...]
    #: the size ``--sizes`` moves, its ladder (empty without one)
    ladder_name: str
    ladder: tuple[int, ...]
    shape: tuple[int, ...]
    states: tuple[str, ...]
    params: tuple[ArrayParam, ...]
    templates: tuple[sympy.Expr, ...]
    operators: tuple[Operator, ...]
    #: symbols of the states' elements, the parameters, the indices, in that order
    state_symbols: tuple[sympy.Symbol, ...]
    param_symbols: tuple[sympy.Symbol, ...]
    index_symbols: tuple[sympy.Symbol, ...]

    @property
    def size(self) -> int:
        """The value of the laddered size (the first size without a ladder)."""
        return dict(self.sizes)[self.ladder_name]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def n_state(self) -> int:
        return self.n_elements * len(self.states)

    @property
    def n_params(self) -> int:
        return sum(self.n_elements if p.per_element else 1 for p in self.params)

    @property
    def state_layout(self) -> tuple[int, int]:
        """``(S, n)``: the number of states and of grid elements. The flat state is
        ``y[e * S + s]``; a backend that stores it state by state (DiffSL) reorders by it."""
        return len(self.states), self.n_elements

    def blocks(self) -> list[JacBlock]:
        """The exact Jacobian as blocks, merged where two land on the same neighbour."""
        merged: dict[tuple[Any, ...], sympy.Expr] = {}
        zero = tuple(0 for _ in self.shape)
        for s, f in enumerate(self.templates):
            for r, y in enumerate(self.state_symbols):
                d = sympy.diff(f, y)
                if d != 0:
                    key = (s, r, zero, None, ())
                    merged[key] = merged.get(key, 0) + d
            for op in self.operators:
                d = sympy.diff(f, op.symbol)
                if d == 0:
                    continue
                if op.kind in ("sum", "mean"):
                    n = math.prod(self.shape[a] for a in op.axes)
                    key = (s, op.state, zero, None, op.axes)
                    merged[key] = merged.get(key, 0) + (d / n if op.kind == "mean" else d)
                    continue
                for off, c in op.stencil(self.ndim):
                    bc = op.boundary if any(off) else None
                    key = (s, op.state, off, bc, ())
                    merged[key] = merged.get(key, 0) + c * d
        return [JacBlock(*k, coeff=v) for k, v in merged.items() if v != 0]


class Reader(Protocol):
    """What :func:`read` needs of spec's reader: typed access that names the key."""

    data: Mapping[str, Any]

    def fail(self, key: str, reason: str) -> Exception: ...
    def get(self, key: str, default: Any = ...) -> Any: ...
    def table(self, key: str, default: Any = ...) -> Mapping[str, Any]: ...
    def string(self, key: str, default: Any = ...) -> str: ...
    def number(self, key: str, default: Any = ..., positive: bool = False) -> float: ...
    def boolean(self, key: str, default: Any = ...) -> bool: ...


@dataclass(frozen=True)
class Sections:
    """What spec needs from an array problem's sections: the model and the flat views."""

    model: ArrayModel
    state_names: tuple[str, ...]
    y0: tuple[float, ...]
    param_names: tuple[str, ...]  # flat: per-element parameters as NAME[i,j]
    theta0: tuple[float, ...]
    log_params: tuple[bool, ...]
    named_params: tuple[str, ...]
    named_theta0: tuple[float, ...]


def _positive_int(r: Reader, key: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_SIZE:
        # repr of a huge int raises (Python's 4300-digit limit): show the type instead
        small = isinstance(v, float | str) or (isinstance(v, int) and abs(v) < 10**39)
        shown = v if small and len(str(v)) < 40 else type(v).__name__
        raise r.fail(key, f"expected a positive integer (at most {MAX_SIZE}), got {shown!r}")
    return v


def read_sizes(
    r: Reader, override: Mapping[str, int] | None = None
) -> tuple[dict[str, int], str, tuple[int, ...]]:
    """``[sizes]``: ``n = 100`` or ``n = { default = 100, ladder = [1, 10, 100] }``; at most
    one size has a ladder. Returns the values (``override`` replacing defaults), the
    laddered size's name (the first size's without a ladder) and the ladder."""
    table = r.table("sizes")
    if not table:
        raise r.fail("sizes", "declare at least one size, e.g. n = 100")
    values: dict[str, int] = {}
    laddered: list[tuple[str, tuple[int, ...]]] = []
    for name, v in table.items():
        key = f"sizes.{name}"
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,31}", name):
            raise r.fail(key, "a size name is a letter, then letters, digits or '_'")
        if name in INDEX_NAMES or name in expr.FUNCTIONS or name == "t":
            raise r.fail(key, f"{name!r} is reserved")
        if isinstance(v, Mapping):
            extra = set(v) - {"default", "ladder"}
            if extra:
                raise r.fail(key, f"unknown key(s) {sorted(extra)}; use default and ladder")
            values[name] = _positive_int(r, f"{key}.default", r.get(f"{key}.default"))
            if "ladder" in v:
                laddered.append((name, _ladder(r, f"{key}.ladder", v["ladder"])))
        else:
            values[name] = _positive_int(r, key, v)
    if len(laddered) > 1:
        raise r.fail("sizes", f"at most one size has a ladder, got {[n for n, _ in laddered]}")
    name, ladder = laddered[0] if laddered else (next(iter(values)), ())
    for k, v in (override or {}).items():
        if k not in values:
            raise r.fail(f"sizes.{k}", f"no such size (declared: {', '.join(values)})")
        values[k] = _positive_int(r, f"sizes.{k}", v)
    return values, name, ladder


def _ladder(r: Reader, key: str, v: Any) -> tuple[int, ...]:
    if not isinstance(v, list) or not v:
        raise r.fail(key, "expected a non-empty array of sizes, e.g. [1, 10, 100]")
    out = tuple(_positive_int(r, f"{key}[{i}]", x) for i, x in enumerate(v))
    if list(out) != sorted(set(out)):
        raise r.fail(key, "sizes must be strictly increasing")
    return out


def _shape(r: Reader, sizes: Mapping[str, int]) -> tuple[int, ...]:
    raw = r.get("state.shape")
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list) or not 1 <= len(names) <= MAX_NDIM:
        raise r.fail("state.shape", f"expected a size name or an array of 1 to {MAX_NDIM} of them")
    shape = []
    for i, n in enumerate(names):
        if not isinstance(n, str) or n not in sizes:
            known = ", ".join(sizes)
            raise r.fail(f"state.shape[{i}]", f"{n!r} is not a size (declared: {known})")
        shape.append(sizes[n])
    return tuple(shape)


def read(r: Reader, states: list[str], override: Mapping[str, int] | None = None) -> Sections:
    """Validate the sections of an array problem (``[sizes]``, ``[state]`` with ``shape``,
    ``[definitions]``, ``[parameters]``, ``[equations]``) at the sizes ``override`` sets."""
    sizes, ladder_name, ladder = read_sizes(r, override)
    shape = _shape(r, sizes)
    n_el = math.prod(shape)
    if n_el * len(states) > MAX_ARRAY_STATES:
        raise r.fail("state.shape", f"{n_el * len(states)} states; at most {MAX_ARRAY_STATES}")
    index = tuple(sympy.Symbol(INDEX_NAMES[a], integer=True, nonnegative=True)
                  for a in range(len(shape)))  # fmt: skip
    base: dict[str, sympy.Expr] = {n: sympy.Integer(v) for n, v in sizes.items()}
    base.update({s.name: s for s in index})
    for s in states:
        if s in base:
            raise r.fail("state.names", f"{s!r} is a size or index name")
    state_syms = tuple(sympy.Symbol(s, real=True) for s in states)
    params, theta, log, named, named_theta = _params(r, states, base, shape)
    param_syms = tuple(sympy.Symbol(p.name, real=True) for p in params)
    names: dict[str, sympy.Expr] = {**base, "t": sympy.Symbol("t", real=True)}
    names.update({s.name: s for s in (*state_syms, *param_syms)})
    ops: list[Operator] = []
    handlers = operator_handlers(states, len(shape), ops)
    _definitions(r, names, handlers)
    init = _initial(r, states, names, index, shape)
    templates = []
    eqs = r.table("equations")
    for s in states:
        try:
            templates.append(expr.parse(eqs[s], names, handlers, FUNCTIONS))
        except expr.ExprError as e:
            raise r.fail(f"equations.{s}", str(e)) from None
    for op in ops:
        for a, k in enumerate(op.offset):
            if abs(k) > shape[a]:
                raise r.fail(
                    "equations", f"shift offset {k} along axis {a} exceeds its size {shape[a]}"
                )
    model = ArrayModel(
        tuple(sizes.items()), ladder_name, ladder, shape, tuple(states), tuple(params),
        tuple(templates), tuple(ops), state_syms, param_syms, index,
    )  # fmt: skip
    return Sections(
        model, tuple(flat_names(states, shape)), tuple(interleave(init).tolist()),
        tuple(_flat_param_names(params, shape)), tuple(theta), tuple(log), tuple(named),
        tuple(named_theta),
    )  # fmt: skip


def interleave(per_state: Sequence[np.ndarray]) -> np.ndarray:
    """The flat state vector from one grid array per state: ``y[e * S + s]``."""
    return np.stack([np.asarray(a, float).ravel() for a in per_state], axis=-1).ravel()


def flat_names(states: Sequence[str], shape: tuple[int, ...]) -> list[str]:
    """``u[3,5]``-style names of the flat states, in the layout's order."""
    idx = [",".join(map(str, ix)) for ix in np.ndindex(*shape)]
    return [f"{s}[{ix}]" for ix in idx for s in states]


def _flat_param_names(params: Sequence[ArrayParam], shape: tuple[int, ...]) -> list[str]:
    out = []
    for p in params:
        if p.per_element:
            out += [f"{p.name}[{','.join(map(str, ix))}]" for ix in np.ndindex(*shape)]
        else:
            out.append(p.name)
    return out


def grid_values(e: sympy.Expr, index: Sequence[sympy.Symbol], shape: tuple[int, ...]) -> np.ndarray:
    """A template of the indices (and numbers) evaluated on the whole grid, in NumPy,
    by walking the tree: no code is generated or run."""
    env = {s: np.arange(n, dtype=float).reshape((n,) + (1,) * (len(shape) - 1 - a))
           for a, (s, n) in enumerate(zip(index, shape, strict=True))}  # fmt: skip
    return np.broadcast_to(_evaluate(e, env), shape).astype(float)


_NUMPY_FUNCS: Mapping[type, Callable[..., Any]] = {
    sympy.exp: np.exp, sympy.log: np.log, sympy.sqrt: np.sqrt, sympy.tanh: np.tanh,
    sympy.sinh: np.sinh, sympy.cosh: np.cosh, sympy.sin: np.sin, sympy.cos: np.cos,
    sympy.tan: np.tan, sympy.Abs: np.abs, step: lambda x: np.heaviside(x, 1.0),
}  # fmt: skip


def _evaluate(e: sympy.Expr, env: Mapping[sympy.Symbol, Any]) -> Any:
    if e.is_Number:
        return float(e)
    if e.is_Symbol:
        if e not in env:
            raise ValueError(f"{e} cannot be used here")
        return env[e]
    args = [_evaluate(a, env) for a in e.args]
    if e.is_Add:
        return sum(args[1:], args[0])
    if e.is_Mul:
        out = args[0]
        for a in args[1:]:
            out = out * a
        return out
    if e.is_Pow:
        with np.errstate(all="ignore"):
            return np.power(np.asarray(args[0], float), args[1])
    fn = _NUMPY_FUNCS.get(type(e))
    if fn is None:
        raise ValueError(f"{type(e).__name__} cannot be evaluated here")
    with np.errstate(all="ignore"):
        return fn(*args)


def _initial(
    r: Reader, states: list[str], names: Mapping[str, sympy.Expr],
    index: Sequence[sympy.Symbol], shape: tuple[int, ...],
) -> list[np.ndarray]:  # fmt: skip
    """``[state] initial``: per state, one number (every element) or an expression of the
    sizes, the indices and definitions of them."""
    raw = r.get("state.initial")
    if not isinstance(raw, list) or len(raw) != len(states):
        raise r.fail("state.initial", f"expected {len(states)} values (numbers or expressions)")
    out = []
    for i, v in enumerate(raw):
        key = f"state.initial[{i}]"
        out.append(_grid_value(r, key, v, names, index, shape))
    return out


def _grid_value(
    r: Reader, key: str, v: Any, names: Mapping[str, sympy.Expr], index: Sequence[Any],
    shape: tuple[int, ...],
) -> np.ndarray:  # fmt: skip
    """A number, or an expression of sizes and indices, on every element; finite."""
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise r.fail(key, f"expected a number or an expression, got {type(v).__name__}")
    if isinstance(v, str):
        try:
            e = expr.parse(v, names, None, FUNCTIONS)
            vals = grid_values(e, index, shape)
        except expr.ExprError as err:
            raise r.fail(key, str(err)) from None
        except ValueError:
            raise r.fail(
                key, "may use numbers, sizes, the indices and definitions of them only"
            ) from None
    else:
        try:
            vals = np.full(shape, float(v))
        except OverflowError:  # an int beyond float range
            raise r.fail(key, "not finite on every element") from None
    if not np.all(np.isfinite(vals)):
        raise r.fail(key, "not finite on every element")
    return vals


def _param_values(
    r: Reader, key: str, name: str, v: Any, base: Mapping[str, sympy.Expr],
    shape: tuple[int, ...],
) -> tuple[np.ndarray, bool]:  # fmt: skip
    """One ``[parameters]`` entry's values (one, or one per element) and whether they are
    per element: a number, ``{ value, per_element, log }`` or a seeded draw."""
    if parameter_arrays.is_drawn(v):
        return parameter_arrays.read_draw(r, key, name, math.prod(shape)), True
    per_element = False
    if isinstance(v, Mapping):
        extra = set(v) - {"value", "log", "per_element"}
        if extra:
            raise r.fail(
                key, f"unknown key(s) {sorted(extra)}; use value, log and per_element "
                "(or draw, around, spread, seed: a drawn parameter)"
            )  # fmt: skip
        per_element = r.boolean(f"{key}.per_element", False)
        raw = r.get(f"{key}.value")
    else:
        raw = v
    if per_element:
        index = [e for e in base.values() if e.is_Symbol]
        return _grid_value(r, f"{key}.value", raw, base, index, shape).ravel(), True
    if isinstance(raw, str):
        raise r.fail(f"{key}.value", "an expression needs per_element = true")
    return np.array([r.number(f"{key}.value" if isinstance(v, Mapping) else key)]), False


def _params(
    r: Reader, states: list[str], base: Mapping[str, sympy.Expr], shape: tuple[int, ...]
) -> tuple[list[ArrayParam], list[float], list[bool], list[str], list[float]]:
    """``[parameters]``: ``k = 0.04``, ``D = { value = 0.1 | "expr", per_element = true,
    log = ... }`` or a seeded draw per element, ``k = { draw = "loguniform", around = 0.04,
    spread = 0.2, seed = 1 }`` (:mod:`sciml_bench.problem.parameter_arrays`);
    differentiated in log space when positive (as in scalar problems)."""
    table = r.table("parameters", {})
    if not table:
        raise r.fail("parameters", "declare at least one parameter to differentiate")
    params: list[ArrayParam] = []
    theta: list[float] = []
    log: list[bool] = []
    named: list[str] = []
    named_theta: list[float] = []
    offset = 0
    for name, v in table.items():
        key = f"parameters.{name}"
        if name in base or name in states:
            raise r.fail(key, f"{name!r} is a size, index or state name")
        vals, per_element = _param_values(r, key, str(name), v, base, shape)
        positive = bool(np.all(vals > 0))
        lg = r.boolean(f"{key}.log", positive) if isinstance(v, Mapping) else positive
        if lg and not positive:
            raise r.fail(key, "log = true needs positive values")
        params.append(ArrayParam(str(name), per_element, offset))
        offset += vals.size
        theta += vals.tolist()
        log += [lg] * vals.size
        named.append(str(name))
        named_theta.append(float(vals[0]))
    return params, theta, log, named, named_theta


def _definitions(r: Reader, names: dict[str, sympy.Expr], handlers: Mapping[str, Any]) -> None:
    """``[definitions]``: ``x = "i/(N-1)"``, each usable in later definitions and the
    equations (substituted: a definition is a name for an expression, not a state)."""
    for name, text in r.table("definitions", {}).items():
        key = f"definitions.{name}"
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,63}", name):
            raise r.fail(key, "a definition name is a letter, then letters, digits or '_'")
        if name in names or name in expr.FUNCTIONS or name in FUNCTIONS or name in OPERATORS:
            raise r.fail(key, f"{name!r} is already a name")
        try:
            names[name] = expr.parse(text, names, handlers, FUNCTIONS)
        except expr.ExprError as e:
            raise r.fail(key, str(e)) from None


def operator_handlers(
    states: Sequence[str], ndim: int, found: list[Operator]
) -> dict[str, expr.Operator]:
    """The parser's handlers for :data:`OPERATORS` on a grid of ``ndim`` axes; each call
    appends its :class:`Operator` to ``found`` (identical calls share one) and returns its
    symbol."""
    h = _Handlers(list(states), ndim, found)
    return {"lap": h.lap, "shift": h.shift, "sum": h.reduce("sum"), "mean": h.reduce("mean")}


class _Handlers:
    """Validates operator calls (the state, the boundary, offsets and axes against the
    grid's dimensions) with the positions the parser gives, and collects them."""

    def __init__(self, states: list[str], ndim: int, found: list[Operator]):
        self.states, self.ndim, self.found = states, ndim, found

    def state_of(self, name: str, args: list[expr.OpArg], pos: int) -> int:
        if not args or args[0][0] != "name":
            raise expr.ExprError(f"{name}() takes a state name first, at position {pos}")
        s = str(args[0][1])
        if s not in self.states:
            raise expr.ExprError(
                f"{name}() applies to a state; {s!r} at position {args[0][2]} is not one "
                f"(states: {', '.join(self.states)})"
            )
        return self.states.index(s)

    @staticmethod
    def boundary(name: str, arg: expr.OpArg) -> str:
        if arg[0] != "name" or arg[1] not in BOUNDARIES:
            raise expr.ExprError(
                f"unknown boundary {arg[1]!r} at position {arg[2]} in {name}() "
                f"(use {', '.join(BOUNDARIES)})"
            )
        return str(arg[1])

    def add(self, op: Operator) -> sympy.Symbol:
        for known in self.found:
            if known == op:
                return known.symbol
        sym = sympy.Symbol(f"op{len(self.found)}", real=True)
        self.found.append(Operator(op.kind, op.state, op.boundary, op.offset, op.axes, sym))
        return sym

    def lap(self, args: list[expr.OpArg], pos: int) -> sympy.Expr:
        s = self.state_of("lap", args, pos)
        if len(args) != 2:
            raise expr.ExprError(
                f"lap() takes a state and a boundary, e.g. lap(u, periodic), at position {pos}"
            )
        return self.add(Operator("lap", s, self.boundary("lap", args[1])))

    def shift(self, args: list[expr.OpArg], pos: int) -> sympy.Expr:
        s = self.state_of("shift", args, pos)
        offs = args[1:-1]
        if len(args) < 3 or len(offs) != self.ndim or any(a[0] != "int" for a in offs):
            example = ", ".join(["1", "0", "0"][: self.ndim])
            raise expr.ExprError(
                f"shift() on a {self.ndim}-D state takes {self.ndim} integer offset(s) and a "
                f"boundary, e.g. shift({self.states[s]}, {example}, periodic); got "
                f"{max(len(args) - 2, 0)} offset(s) at position {pos}"
            )
        off = tuple(int(a[1]) for a in offs)
        if not any(off):
            return sympy.Symbol(self.states[s], real=True)
        return self.add(Operator("shift", s, self.boundary("shift", args[-1]), off))

    def reduce(self, kind: str) -> expr.Operator:
        def handler(args: list[expr.OpArg], pos: int) -> sympy.Expr:
            s = self.state_of(kind, args, pos)
            if len(args) > 2 or (len(args) == 2 and args[1][0] != "int"):
                raise expr.ExprError(
                    f"{kind}() takes a state and an optional axis, at position {pos}"
                )
            axes = tuple(range(self.ndim))
            if len(args) == 2:
                a = int(args[1][1])
                if not 0 <= a < self.ndim:
                    raise expr.ExprError(
                        f"{kind}() axis {a} at position {args[1][2]} is out of range for a "
                        f"{self.ndim}-D state (0 to {self.ndim - 1})"
                    )
                axes = (a,)
            return self.add(Operator(kind, s, axes=axes))

        return handler


def at_sizes(data: Mapping[str, Any], sizes: Mapping[str, int]) -> dict[str, Any]:
    """The problem table with the defaults of ``sizes`` replaced: the same file at another
    size (its content, and so its reference's cache key, says which)."""
    out = dict(data)
    table = dict(out.get("sizes") or {})
    for name, value in sizes.items():
        old = table.get(name)
        table[name] = {**old, "default": value} if isinstance(old, Mapping) else value
    out["sizes"] = table
    return out


def dense_jacobian_bytes(n_state: int, copies: int = 3) -> int:
    """Memory a dense Jacobian solver needs: ``copies`` n x n float64 matrices (the
    Jacobian, the iteration matrix ``I - γJ`` and its LU factors)."""
    return copies * n_state * n_state * 8
