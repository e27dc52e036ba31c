"""The ``Problem`` model: loading and validating problem files (TOML, data only).

A problem file declares states with initial values, parameters (the
quantities differentiated), one expression string per state, the time span
and save points, tolerances and the loss. Expressions go through the
whitelist parser in :mod:`sciml_bench.problem.expr`; nothing in a file is executed.

Every validation failure is a :class:`ProblemError` naming the file, the key
and the reason.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import sympy

from sciml_bench.problem import arrays, expr, hints, initial, network_width
from sciml_bench.problem import events as ev
from sciml_bench.problem.compiled import Dimensions
from sciml_bench.problem.ensemble import (
    APPLY,
    DISTRIBUTIONS,
    MAX_MEMBERS,
    SEMANTICS,
    Ensemble,
    Variation,
)
from sciml_bench.problem.training import (
    DEFAULT_AGREEMENT_ITERATIONS,
    MAX_ITERATIONS,
    OPTIMIZERS,
    OPTIONAL_KEYS,
    REQUIRED_KEYS,
    Adam,
    Training,
)

NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
#: names the generated code or the grammar itself uses
RESERVED = frozenset({"t", *expr.FUNCTIONS})
MAX_STATES = 1000
MAX_SAVE = 100_000


_SECTION_KEYS = {
    "state": ("names", "initial", "shape"),
    "time": ("span", "save"),
    "tolerances": ("rtol", "atol"),
    "solver": ("max_steps",),
    "loss": ("kind", "weights", "truth", "weighting", "truth_equations"),
    "reference": ("rtol", "atol", "method", "fd_step", "gradient_rtol"),
    "ensemble": ("sizes", "seed", "sample", "semantics", "vary"),
    "training": (*REQUIRED_KEYS, *OPTIONAL_KEYS),
}


class ProblemError(ValueError):
    """A problem file that does not validate: ``file: [key]: reason``."""

    def __init__(self, source: str, key: str, reason: str):
        self.source = source
        self.key = key
        self.reason = reason
        super().__init__(f"{source}: [{key}]: {reason}")


ACTIVATIONS = ("tanh", "sigmoid", "identity")
MAX_NETWORK_PARAMS = 100_000


@dataclass(frozen=True)
class Loss:
    """``fit``: least squares against observations made at ``truth`` (by
    ``truth_rhs`` when given, else by the problem's own equations), weighted
    per state (``weighting = "scaled"``) or plain (``"sum"``);
    ``final``: ``Σ_j w_j y_j(t_end)``."""

    kind: str
    weights: tuple[float, ...] = ()
    truth: tuple[float, ...] = ()
    weighting: str = "scaled"
    truth_rhs: tuple[sympy.Expr, ...] = ()


@dataclass(frozen=True)
class Network:
    """A dense network ``n(x) = s ⊙ (W_L σ(… σ(W_1 x + b_1) …) + b_L)``.

    ``x`` are the input expressions of the state, ``σ`` the activation on
    hidden layers (the last layer is linear) and ``s`` the output scale. Its
    outputs are the symbols ``{name}1 … {name}K`` in the equations. Weights are
    Glorot-uniform and biases zero, drawn once from ``seed``; they are
    parameters, stored after the mechanistic ones, each layer as ``W``
    (row-major, ``out × in``) then ``b``.
    """

    name: str
    layers: tuple[int, ...]
    activation: str
    inputs: tuple[sympy.Expr, ...]
    output_scale: tuple[float, ...]
    seed: int
    offset: int

    @property
    def n_params(self) -> int:
        return sum(o * i + o for i, o in zip(self.layers, self.layers[1:], strict=False))

    @property
    def outputs(self) -> list[sympy.Symbol]:
        return [sympy.Symbol(f"{self.name}{k + 1}", real=True) for k in range(self.layers[-1])]

    def slices(self) -> list[tuple[int, int, int, int]]:
        """Per layer: (offset of W, rows, cols, offset of b) into the parameter vector."""
        out, o = [], self.offset
        for i, r in zip(self.layers, self.layers[1:], strict=False):
            out.append((o, r, i, o + r * i))
            o += r * i + r
        return out

    def initial_weights(self) -> tuple[list[float], list[str]]:
        rng = np.random.default_rng(self.seed)
        values: list[float] = []
        names: list[str] = []
        for layer, (i, r) in enumerate(zip(self.layers, self.layers[1:], strict=False), 1):
            bound = math.sqrt(6.0 / (i + r))
            values += rng.uniform(-bound, bound, size=r * i).tolist()
            names += [f"{self.name}.W{layer}[{a},{b}]" for a in range(r) for b in range(i)]
            values += [0.0] * r
            names += [f"{self.name}.b{layer}[{a}]" for a in range(r)]
        return values, names


@dataclass(frozen=True)
class SBMLModel:
    """The SBML file a problem was imported from, for the backends that run SBML itself
    (AMICI, libRoadRunner) as modellers do, instead of the suite's rate-rule export: its
    text, and per problem state the SBML formula of its value (a species', compartment's or
    parameter's id; ``X * C`` for an amount held where the id means a concentration), per
    problem parameter its SBML id (a reaction's local parameter: ``(reaction, local id)``
    in ``locals``). Not part of the problem's content: the import is checked against the
    same file (:mod:`sciml_bench.problem.sbml.semantic`)."""

    path: str
    text: str
    states: tuple[str, ...]
    parameters: tuple[str, ...]
    locals: tuple[tuple[str, str] | None, ...]

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "states": list(self.states),
                "parameters": list(self.parameters),
                "locals": [list(x) if x else None for x in self.locals]}  # fmt: skip


@dataclass(frozen=True)
class Problem(Dimensions):
    name: str
    description: str
    stiff: bool
    state_names: tuple[str, ...]
    y0: tuple[float, ...]
    param_names: tuple[str, ...]
    theta0: tuple[float, ...]
    log_params: tuple[bool, ...]
    rhs: tuple[sympy.Expr, ...]
    t_span: tuple[float, float]
    t_save: tuple[float, ...]
    rtol: float
    atol: float
    max_steps: int
    loss: Loss
    reference: Mapping[str, Any] = field(default_factory=dict)
    networks: tuple[Network, ...] = ()
    #: parameters that appear by name in expressions; network weights follow them
    n_mech_params: int = -1
    source: str = "<memory>"
    #: the parsed file, canonicalised: the content the reference cache is keyed on
    content: Mapping[str, Any] = field(default_factory=dict, repr=False)
    #: how the members of an ensemble differ (``[ensemble]``), if the file declares one
    ensemble: Ensemble | None = None
    #: an array problem (``[sizes]``) at one size: grid, templates, operators; its
    #: ``state_names``/``y0``/``param_names`` are the flat views and ``rhs`` is empty
    array: arrays.ArrayModel | None = None
    #: how it is trained (``[training]``, ``sciml-bench run NAME --train``), if declared
    training: Training | None = None
    #: a scalar problem whose network width is a size (``layers = [2, "width", 2]``), at one
    #: value of it (:mod:`sciml_bench.problem.network_width`)
    network_width: network_width.NetworkWidth | None = None
    #: every initial value as an expression of the mechanistic parameters, when any depends
    #: on them (``y0`` holds their values at ``theta0``); ``()`` when all are numbers
    #: (:mod:`sciml_bench.problem.initial`)
    initial: tuple[sympy.Expr, ...] = ()
    #: derived parameters (``k2 = "2*k"``) as expressions of the differentiated ones, already
    #: substituted into ``rhs`` and ``initial``: kept to be shown and exported
    derived: tuple[tuple[str, sympy.Expr], ...] = ()
    #: the modeller's own SBML file a ``run --sbml`` problem was imported from, and how its
    #: states and parameters read there (:class:`SBMLModel`); None for a problem file
    sbml_model: SBMLModel | None = None
    #: ``[[events]]``: state assignments at fixed or parameter-dependent times, in file
    #: order (:mod:`sciml_bench.problem.events`); ``()`` for a smooth problem
    events: tuple[ev.Event, ...] = ()

    @property
    def laddered(self) -> arrays.ArrayModel | network_width.NetworkWidth | None:
        """What ``--sizes`` moves: an array problem's model or a network's width (both
        give ``ladder_name``, ``ladder``, ``size`` and ``sizes``), None for one size."""
        return self.array if self.array is not None else self.network_width

    @property
    def state_symbols(self) -> list[sympy.Symbol]:
        return [sympy.Symbol(n, real=True) for n in self.state_names]

    @property
    def param_symbols(self) -> list[sympy.Symbol]:
        """Symbols of the mechanistic parameters (network weights have none)."""
        n = self.n_params if self.n_mech_params < 0 else self.n_mech_params
        return [sympy.Symbol(name, real=True) for name in self.param_names[:n]]

    @property
    def content_hash(self) -> str:
        blob = json.dumps(self.content, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def problems_dir() -> Path:
    """Where shipped problems live (``$SCIML_BENCH_PROBLEMS`` overrides)."""
    env = os.environ.get("SCIML_BENCH_PROBLEMS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "problems"


def available_problems() -> list[str]:
    return sorted(p.stem for p in problems_dir().glob("*.toml"))


def load(name_or_path: str | os.PathLike[str]) -> Problem:
    """Load a shipped problem by name, or any problem file by path."""
    path = Path(name_or_path)
    if path.suffix != ".toml" or not path.exists():
        candidate = problems_dir() / f"{name_or_path}.toml"
        if not candidate.exists():
            shipped = available_problems()
            name = str(name_or_path)
            # a typo, or a part of exactly one name ("lotka")
            part = [p for p in shipped if name.lower() in p]
            close = difflib.get_close_matches(name, shipped, n=1, cutoff=0.6) or part[:len(part) == 1]
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ProblemError(
                str(name_or_path),
                "name",
                f"no such problem{hint} (shipped problems: {', '.join(shipped) or 'none'}); "
                "use --problem-file PATH for your own file",
            )
        path = candidate
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ProblemError(str(path), "file", f"cannot read: {e}") from e
    return loads(text, source=str(path))


def loads(text: str, source: str = "<memory>") -> Problem:
    """Parse and validate problem TOML text."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ProblemError(source, "toml", f"not valid TOML: {e}") from e
    except RecursionError as e:
        raise ProblemError(source, "toml", "nested too deeply") from e
    except ValueError as e:  # e.g. an integer beyond Python's 4300-digit conversion limit
        raise ProblemError(source, "toml", f"not valid TOML: {e}") from e
    return from_dict(data, source)


class _Reader:
    """Typed access to the parsed TOML with errors that name the key."""

    def __init__(self, data: Mapping[str, Any], source: str):
        self.data = data
        self.source = source

    def fail(self, key: str, reason: str) -> ProblemError:
        return ProblemError(self.source, key, reason)

    def get(self, key: str, default: Any = ...) -> Any:
        node: Any = self.data
        for part in key.split("."):
            if not isinstance(node, Mapping):
                raise self.fail(key, f"expected a table at {part!r}")
            if part not in node:
                if default is ...:
                    raise self.fail(key, hints.missing(key))
                return default
            node = node[part]
        return node

    def only(self, key: str, allowed: tuple[str, ...]) -> None:
        """Reject keys of table ``key`` outside ``allowed`` (a typo must not pass silently)."""
        for k in self.table(key, {}):
            if k not in allowed:
                raise self.fail(f"{key}.{k}", f"unknown key (allowed: {', '.join(allowed)})"
                                + hints.did_you_mean(str(k), allowed))

    def table(self, key: str, default: Any = ...) -> Mapping[str, Any]:
        v = self.get(key, default)
        if not isinstance(v, Mapping):
            raise self.fail(key, f"expected a table, got {type(v).__name__}")
        return v

    def string(self, key: str, default: Any = ...) -> str:
        v = self.get(key, default)
        if not isinstance(v, str):
            raise self.fail(key, f"expected a string, got {type(v).__name__}")
        return v

    def boolean(self, key: str, default: Any = ...) -> bool:
        v = self.get(key, default)
        if not isinstance(v, bool):
            raise self.fail(key, f"expected true or false, got {type(v).__name__}")
        return v

    def number(self, key: str, default: Any = ..., positive: bool = False) -> float:
        return self.as_number(key, self.get(key, default), positive)

    def as_number(self, key: str, v: Any, positive: bool = False) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.fail(key, f"expected a number, got {type(v).__name__}" + _unquote(v))
        try:
            f = float(v)
        except OverflowError:  # an integer literal beyond float64
            raise self.fail(key, "expected a finite number, got an integer beyond float64") from None
        if not math.isfinite(f):
            raise self.fail(key, f"expected a finite number, got {v}; TOML's nan and inf are "
                            "no value to compute with: write a finite number")  # fmt: skip
        if positive and f <= 0:
            leaf = key.rpartition(".")[2]
            fix = f"; did you mean {leaf} = {-f:g}?" if f < 0 else "; set a positive value"
            raise self.fail(key, f"expected a positive number, got {v}{fix}")
        return f

    def numbers(self, key: str, length: int | None = None, default: Any = ...) -> list[float]:
        v = self.get(key, default)
        if not isinstance(v, list):
            raise self.fail(key, f"expected an array of numbers, got {type(v).__name__}")
        if length is not None and len(v) != length:
            raise self.fail(key, f"expected {length} values, got {len(v)}")
        return [self.as_number(f"{key}[{i}]", x) for i, x in enumerate(v)]

    def integer(self, key: str, default: Any = ..., lo: int = 1, hi: int = 10**9) -> int:
        v = self.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(key, f"expected an integer, got {type(v).__name__}")
        if not lo <= v <= hi:
            # str() of a huge int raises ValueError (4300-digit limit): say its size instead
            shown = v if abs(v) < 10**30 else f"an integer of {v.bit_length()} bits"
            raise self.fail(key, f"expected an integer in [{lo}, {hi}], got {shown}")
        return v


def _unquote(v: Any) -> str:
    """The fix for a number written as a string (``"1e-6"``): drop the quotes."""
    if isinstance(v, str):
        try:
            if math.isfinite(float(v)):
                return f"; write it without quotes: {v.strip()}"
        except ValueError:
            pass
    return ""


def _short_repr(v: Any, limit: int = 60) -> str:
    """repr for an error message: bounded, and safe for ints past the 4300-digit limit."""
    try:
        text = repr(v)
    except ValueError:
        text = f"<{type(v).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _names(r: _Reader, key: str, values: list[Any]) -> list[str]:
    seen: set[str] = set()
    for i, n in enumerate(values):
        if not isinstance(n, str) or not NAME_RE.fullmatch(n):
            raise r.fail(
                f"{key}[{i}]",
                f"{_short_repr(n)} is not a valid name (a letter, then letters, digits or '_')",
            )
        if n in RESERVED or n.startswith("__"):
            what = "time" if n == "t" else "a function" if n in expr.FUNCTIONS else "internal"
            raise r.fail(f"{key}[{i}]", f"{n!r} is reserved ({what}); rename it, e.g. {n.strip('_')}_")
        if n in seen:
            raise r.fail(f"{key}[{i}]", f"duplicate name {n!r}")
        seen.add(n)
    return list(values)


def _save_points(r: _Reader, t0: float, t1: float) -> list[float]:
    save = r.get("time.save")
    if isinstance(save, list):
        pts = r.numbers("time.save")
    elif isinstance(save, Mapping):
        if len(save) != 1:
            raise r.fail("time.save", "give exactly one of points, linspace, logspace")
        (kind, spec), = save.items()
        key = f"time.save.{kind}"
        if kind == "points":
            pts = r.numbers(key)
        elif kind in ("linspace", "logspace"):
            a, b, n = r.numbers(key, length=3)
            if n != int(n) or not 1 <= n <= MAX_SAVE:
                raise r.fail(key, f"the count must be an integer in [1, {MAX_SAVE}]")
            fn = np.linspace if kind == "linspace" else np.logspace
            pts = [float(x) for x in fn(a, b, int(n))]
        else:
            raise r.fail(key, "unknown kind; use points, linspace or logspace"
                         + hints.did_you_mean(str(kind), ("points", "linspace", "logspace")))
    else:
        raise r.fail("time.save", "expected an array of times or a table")
    if not pts:
        raise r.fail("time.save", "no save points")
    if len(pts) > MAX_SAVE:
        raise r.fail("time.save", f"more than {MAX_SAVE} save points")
    arr = np.asarray(pts)
    if not np.all(np.isfinite(arr)):
        raise r.fail("time.save", "save points must be finite")
    if np.any(np.diff(arr) <= 0):
        raise r.fail("time.save", "save points must be strictly increasing")
    if arr[0] < t0 or arr[-1] > t1 * (1 + 1e-12) + 1e-300:
        raise r.fail("time.save", f"save points must lie in the span [{t0}, {t1}]")
    # The final-time metrics and the `final` loss need y(t_end).
    if not math.isclose(pts[-1], t1, rel_tol=1e-12, abs_tol=0.0):
        pts.append(t1)
    else:
        pts[-1] = t1
    return pts


def from_dict(
    data: Mapping[str, Any], source: str = "<memory>", sizes: Mapping[str, int] | None = None
) -> Problem:
    """Validate an already-parsed problem table, one section at a time (in file order,
    so the first error reported is the first one a reader meets). ``sizes`` sets named
    sizes (``[sizes]``) of an array problem or of a network's width, replacing their
    defaults."""
    r = _Reader(data, source)
    _check_keys(r, data)
    ev.refuse_with(r, data)
    name, description, stiff = _header(r)
    if network_width.widens(data):
        resolved, width = network_width.read(r, sizes)
        at = from_dict(resolved, source)  # a plain scalar problem at this width
        return replace(at, network_width=width,
                       content=_canonical(arrays.at_sizes(data, dict(width.sizes))))  # fmt: skip
    if "sizes" in data or sizes:
        return _array_problem(r, data, (name, description, stiff), sizes)
    states = _state_names(r)
    for key in ("state.shape", "definitions"):
        if r.get(key, None) is not None:
            raise r.fail(key, "only array problems have this; declare their sizes in [sizes]")
    params, theta0, log_params = _parameters(r, data, states)
    derived, y0, initial_exprs = _starts(r, data, states, params, theta0)
    eqs = _equation_table(r, states)
    symbols = expr.symbols([*states, *params, *(n for n, _ in derived), "t"])
    networks = _attach_networks(r, symbols, params, theta0, log_params)
    n_mech = len(params) - sum(n.n_params for n in networks)
    rhs = [e.xreplace(initial.substitution(derived)) for e in _equations(r, eqs, states, symbols)]
    t_span, t_save = _time(r)
    events = _events(r, data, states, params, derived, theta0, (t_span, t_save))
    rtol, atol, max_steps = _solver_settings(r)
    loss = _loss(r, states, params, theta0, symbols, n_mech)
    return Problem(
        name=name,
        description=description,
        stiff=stiff,
        state_names=tuple(states),
        y0=tuple(y0),
        param_names=tuple(params),
        theta0=tuple(theta0),
        log_params=tuple(log_params),
        rhs=tuple(rhs),
        t_span=t_span,
        t_save=tuple(t_save),
        rtol=rtol,
        atol=atol,
        max_steps=max_steps,
        loss=loss,
        reference=_reference(r),
        networks=tuple(networks),
        ensemble=_ensemble(r, states, y0, params[:n_mech], theta0, log_params),
        n_mech_params=n_mech,
        source=source,
        content=_canonical(data),
        training=_training(r),
        initial=initial_exprs,
        derived=tuple(derived),
        events=events,
    )


_TOP_KEYS = (
    "name", "description", "stiff", "state", "parameters", "equations",
    "time", "tolerances", "solver", "loss", "reference", "networks", "ensemble",
    "training", "sizes", "definitions", "events",
)  # fmt: skip


def at_size(problem: Problem, value: int) -> Problem:
    """An array problem, or a network's width, at another value of its laddered size (its
    file, re-validated)."""
    if problem.laddered is None:
        raise ValueError(f"{problem.name} has no [sizes]: it has one size")
    return from_dict(problem.content, problem.source, {problem.laddered.ladder_name: value})


def _array_problem(
    r: _Reader, data: Mapping[str, Any], header: tuple[str, str, bool],
    sizes: Mapping[str, int] | None,
) -> Problem:  # fmt: skip
    """A problem with ``[sizes]``: states on a grid, elementwise equations
    (:mod:`sciml_bench.problem.arrays`); the scalar sections keep their meaning."""
    for key in ("networks", "ensemble", "loss.truth_equations"):
        if r.get(key, None) is not None:
            raise r.fail(key, "not supported in an array problem ([sizes])")
    if "sizes" not in data:
        raise r.fail("sizes", "this problem has no [sizes] to set")
    if r.get("state.shape", None) is None:
        raise r.fail("state.shape", 'an array problem gives its states\' shape, e.g. shape = "n"')
    names = r.get("state.names")
    if not isinstance(names, list) or not names:
        raise r.fail("state.names", "expected a non-empty array of names")
    states = _names(r, "state.names", names)
    _equation_table(r, states)
    sec = arrays.read(r, states, sizes)
    model = sec.model
    t_span, t_save = _time(r)
    rtol, atol, max_steps = _solver_settings(r)
    named = list(sec.named_params)
    loss = _loss(r, states, named, list(sec.named_theta0), {}, len(named))
    truth_table = r.table("loss.truth", {}) if loss.kind == "fit" else {}
    truth: list[float] = []
    for p, value in zip(model.params, loss.truth or sec.named_theta0, strict=True):
        width = model.n_elements if p.per_element else 1
        given = p.name in truth_table
        truth += [value] * width if given else list(sec.theta0[p.offset:p.offset + width])
    name, description, stiff = header
    return Problem(
        name=name, description=description, stiff=stiff, state_names=sec.state_names,
        y0=sec.y0, param_names=sec.param_names, theta0=sec.theta0, log_params=sec.log_params,
        rhs=(), t_span=t_span, t_save=tuple(t_save), rtol=rtol, atol=atol,
        max_steps=max_steps,
        loss=Loss(loss.kind, tuple(loss.weights) * model.n_elements,
                  tuple(truth) if loss.kind == "fit" else (), loss.weighting),
        reference=_reference(r), n_mech_params=len(sec.param_names), source=r.source,
        content=_canonical(arrays.at_sizes(data, dict(model.sizes))), array=model,
    )  # fmt: skip


def _check_keys(r: _Reader, data: Any) -> None:
    """No unknown top-level key or section key: a typo must not pass silently."""
    if not isinstance(data, Mapping):
        raise r.fail("toml", "expected a table at the top level")
    for k in data:
        if k not in _TOP_KEYS:
            raise r.fail(str(k), f"unknown key (allowed: {', '.join(sorted(_TOP_KEYS))})"
                         + _misplaced(str(k)))
    for section, allowed in _SECTION_KEYS.items():
        r.only(section, allowed)


def _misplaced(key: str) -> str:
    """The fix for an unknown top-level key: the section it belongs under (``rtol`` written
    above every section belongs under ``[tolerances]``), else the nearest top-level key."""
    homes = [s for s, allowed in _SECTION_KEYS.items() if key in allowed]
    if homes:
        return f"; it belongs in a section: write it under [{homes[0]}]"
    return hints.did_you_mean(key, _TOP_KEYS)


def _header(r: _Reader) -> tuple[str, str, bool]:
    name = r.string("name")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", name):
        raise r.fail("name", f"{name!r}: use letters, digits, '-', '_' or '.'")
    return name, r.string("description", ""), r.boolean("stiff")


def _state_names(r: _Reader) -> list[str]:
    state_list = r.get("state.names")
    if not isinstance(state_list, list) or not state_list:
        raise r.fail("state.names", "expected a non-empty array of names")
    if len(state_list) > MAX_STATES:
        raise r.fail("state.names", f"more than {MAX_STATES} states")
    return _names(r, "state.names", state_list)


def _starts(
    r: _Reader, data: Mapping[str, Any], states: list[str], params: list[str],
    theta0: list[float],
) -> tuple[list[tuple[str, sympy.Expr]], list[float], tuple[sympy.Expr, ...]]:  # fmt: skip
    """The derived parameters, the initial values at ``theta0`` and, where any depends on
    the parameters, their expressions (:mod:`sciml_bench.problem.initial`)."""
    derived = initial.derived_parameters(r, r.table("parameters", {}), params, states)
    y0, initial_exprs = _initial_values(r, states, params, derived, theta0)
    _refuse_moving_start(r, initial_exprs, data)
    return derived, y0, initial_exprs


def _initial_values(
    r: _Reader, states: list[str], params: list[str], derived: list[tuple[str, sympy.Expr]],
    theta0: list[float],
) -> tuple[list[float], tuple[sympy.Expr, ...]]:  # fmt: skip
    """``[state] initial``: numbers, or expressions of the parameters
    (:mod:`sciml_bench.problem.initial`); the values at ``theta0`` and the expressions."""
    raw = r.get("state.initial")
    if isinstance(raw, list) and any(isinstance(v, str) for v in raw):
        return initial.initial_values(r, raw, states, params, derived, theta0)
    if isinstance(raw, list) and len(raw) == len(states):
        for i, (name, v) in enumerate(zip(states, raw, strict=True)):
            if isinstance(v, float) and not math.isfinite(v):
                raise r.fail(f"state.initial[{i}]",
                             f"the initial value of state {name!r} is {v}, not a finite number; "
                             f"write the value {name} starts from at t0, e.g. 0.0")  # fmt: skip
    return r.numbers("state.initial", length=len(states)), ()


def _refuse_moving_start(r: _Reader, initial_exprs: tuple[sympy.Expr, ...],
                         data: Mapping[str, Any]) -> None:  # fmt: skip
    """An ensemble or a training run with a start that moves with the parameters: not
    supported (their members and trained weights assume a fixed start), refused by name."""
    if not initial_exprs:
        return
    for section in ("ensemble", "training"):
        if section in data:
            raise r.fail(section, f"a [{section}] section needs initial values that are "
                         "numbers; this problem's depend on the parameters (state.initial)")  # fmt: skip


def _parameters(
    r: _Reader, data: Mapping[str, Any], states: list[str]
) -> tuple[list[str], list[float], list[bool]]:
    """Named parameters, their values and whether they are differentiated in log space. A
    string is a derived parameter (:func:`~sciml_bench.problem.initial.derived_parameters`
    reads those), unless it is a number in quotes, which is refused with the fix."""
    params_table = r.table("parameters", {})
    names = _names(r, "parameters", list(params_table))
    params = [p for p in names
              if not initial.is_derived(params_table[p]) or _unquote(params_table[p])]  # fmt: skip
    if not params and "networks" not in data:
        raise r.fail("parameters", "declare at least one parameter to differentiate"
                     + (" (a number: the strings here are derived parameters, expressions of "
                        "the differentiated ones)" if names else ""))  # fmt: skip
    theta0: list[float] = []
    log_params: list[bool] = []
    for p in params:
        v = params_table[p]
        key = f"parameters.{p}"
        if isinstance(v, Mapping):
            extra = set(v) - {"value", "log"}
            if extra:
                raise r.fail(key, f"unknown key(s) {sorted(extra)}; use value and log")
            value = r.number(f"{key}.value")
            log = r.boolean(f"{key}.log", value > 0)
        else:
            value = r.as_number(key, v)
            log = value > 0
        if log and value <= 0:
            raise r.fail(key, "log = true needs a positive value")
        theta0.append(value)
        log_params.append(log)
    clash = set(states) & set(names)
    if clash:
        raise r.fail("parameters", f"names used for both states and parameters: {sorted(clash)}; "
                     "rename the parameter (a name means one thing in the equations)")
    return params, theta0, log_params


def _attach_networks(
    r: _Reader,
    symbols: dict[str, Any],
    params: list[str],
    theta0: list[float],
    log_params: list[bool],
) -> list[Network]:
    """Parse ``[networks.*]``; their outputs become symbols and their weights parameters
    (appended after the named ones, in natural space)."""
    networks = _networks(r, symbols, offset=len(params))
    for net in networks:
        for out in net.outputs:
            if out.name in symbols:
                raise r.fail(f"networks.{net.name}", f"output {out.name!r} clashes with a name")
            symbols[out.name] = out
        values, names = net.initial_weights()
        theta0 += values
        log_params += [False] * len(values)
        params += names
    return networks


def _equation_table(r: _Reader, states: list[str]) -> Mapping[str, Any]:
    """``[equations]``: exactly one expression per declared state. A stray key beside a
    missing state is named with the state it was probably meant to be."""
    eqs = r.table("equations")
    missing = [s for s in states if s not in eqs]
    stray = [str(k) for k in eqs if k not in states]
    pairs = hints.pair_strays(missing, stray)
    if pairs:
        key, state = pairs[0]
        raise r.fail(f"equations.{key}",
                     f"no equation for state {state!r}; the file has an equation for {key!r}, "
                     f"which is not a state — did you mean {state!r}?")  # fmt: skip
    if missing:
        s = "s" if len(missing) > 1 else ""
        raise r.fail("equations", f"no equation for state{s} {hints.quoted(missing)}; add "
                     f"{missing[0]} = \"...\" under [equations], one expression per state")
    if stray:
        s, are = ("s", "are not states") if len(stray) > 1 else ("", "is not a state")
        raise r.fail(f"equations.{stray[0]}",
                     f"equation{s} for {hints.quoted(stray)}, which {are} (states: "
                     f"{', '.join(states)}); add it to [state] names, with an initial value, "
                     "or remove the equation")  # fmt: skip
    return eqs


def _equations(
    r: _Reader, eqs: Mapping[str, Any], states: list[str], symbols: Mapping[str, Any]
) -> list[sympy.Expr]:
    rhs: list[sympy.Expr] = []
    for s in states:
        try:
            rhs.append(expr.parse(eqs[s], symbols))
        except expr.ExprError as e:
            raise r.fail(f"equations.{s}", str(e) + _declare(e)) from None
    return rhs


def _declare(e: expr.ExprError) -> str:
    """The fix for an undeclared name in an equation: where to declare it (appended after
    the nearest known name, when there is one: the name may be a typo or a new parameter)."""
    if e.unknown is None:
        return ""
    n = e.unknown
    if "did you mean" in str(e):
        return f" (if {n!r} is a new parameter, declare it under [parameters]: {n} = VALUE)"
    return (f"; declare it: under [parameters] ({n} = VALUE) if it is a parameter, in "
            "[state] names (with an initial value and an equation) if it is a state")


def _solver_settings(r: _Reader) -> tuple[float, float, int]:
    """``[tolerances]`` rtol and atol, ``[solver]`` max_steps, with their defaults."""
    return (r.number("tolerances.rtol", 1e-6, positive=True),
            r.number("tolerances.atol", 1e-10, positive=True),
            r.integer("solver.max_steps", 100_000, lo=10, hi=10**8))  # fmt: skip


def _events(
    r: _Reader, data: Mapping[str, Any], states: list[str], params: list[str],
    derived: list[tuple[str, sympy.Expr]], theta0: list[float],
    time: tuple[tuple[float, float], list[float]],
) -> tuple[ev.Event, ...]:  # fmt: skip
    """``[[events]]`` (:mod:`sciml_bench.problem.events`), read against the time span and
    the save points."""
    events = ev.read(r, data.get("events"), states, params, initial.substitution(derived),
                     theta0, time[0])  # fmt: skip
    ev.refuse_moving_time_at_a_save_point(r, events, time[1])
    return events


def _time(r: _Reader) -> tuple[tuple[float, float], list[float]]:
    t0, t1 = r.numbers("time.span", length=2)
    if not t1 > t0:
        raise r.fail("time.span", "the end must be after the start")
    return (t0, t1), _save_points(r, t0, t1)


def _loss(
    r: _Reader,
    states: list[str],
    params: list[str],
    theta0: list[float],
    symbols: Mapping[str, Any],
    n_mech: int,
) -> Loss:
    """``final`` (L = Σ w_j y_j(t_end)) or ``fit`` (least squares against a truth)."""
    kind = r.string("loss.kind")
    if kind == "final":
        weights = r.numbers("loss.weights", length=len(states))
        if not any(weights):
            raise r.fail("loss.weights", "all weights are zero: the loss would be constant")
        return Loss("final", weights=tuple(weights))
    if kind != "fit":
        raise r.fail("loss.kind", f"unknown kind {kind!r}; use 'fit' or 'final'"
                     + hints.did_you_mean(kind, ("fit", "final")))
    truth_table = r.table("loss.truth", {})
    unknown = [k for k in truth_table if k not in params[:n_mech]]
    if unknown:
        raise r.fail("loss.truth", f"unknown parameter(s) {unknown} (parameters: "
                     f"{', '.join(params[:n_mech])})" + hints.did_you_mean(unknown[0], params[:n_mech]))
    truth = [
        r.number(f"loss.truth.{p}") if p in truth_table else theta0[i]
        for i, p in enumerate(params)
    ]
    weighting = r.string("loss.weighting", "scaled")
    if weighting not in ("scaled", "sum"):
        raise r.fail("loss.weighting", "use 'scaled' (per-state) or 'sum' (plain squares)")
    truth_rhs: list[sympy.Expr] = []
    if "truth_equations" in r.table("loss"):
        teqs = r.table("loss.truth_equations")
        if sorted(teqs) != sorted(states):
            raise r.fail("loss.truth_equations", f"give one equation per state {states}")
        plain = {k: v for k, v in symbols.items() if k in (*states, *params[:n_mech], "t")}
        for st in states:
            try:
                truth_rhs.append(expr.parse(teqs[st], plain))
            except expr.ExprError as e:
                raise r.fail(f"loss.truth_equations.{st}", str(e)) from None
    elif truth == theta0:
        raise r.fail(
            "loss.truth",
            "the truth equals the initial parameters, so the fit loss and its "
            "gradient are zero there; perturb at least one parameter",
        )
    return Loss("fit", truth=tuple(truth), weighting=weighting, truth_rhs=tuple(truth_rhs))


def _reference(r: _Reader) -> dict[str, Any]:
    reference = dict(r.table("reference", {}))
    if "method" in reference and reference["method"] not in ("Radau", "BDF"):
        raise r.fail("reference.method", "use 'Radau' or 'BDF'"
                     + hints.did_you_mean(str(reference["method"]), ("Radau", "BDF")))
    for k in ("rtol", "atol", "fd_step", "gradient_rtol"):
        if k in reference:
            r.number(f"reference.{k}", positive=True)
    return reference


def _networks(r: _Reader, symbols: Mapping[str, sympy.Symbol], offset: int) -> list[Network]:
    table = r.table("networks", {})
    nets: list[Network] = []
    inputs_allowed = dict(symbols)
    for name in table:
        key = f"networks.{name}"
        if not re.fullmatch(r"[A-Za-z][A-Za-z_]{0,31}", str(name)) or name in symbols:
            raise r.fail(key, "a network name is letters and '_' (no digits), unused elsewhere")
        spec = r.table(key)
        extra = set(spec) - {"layers", "activation", "inputs", "output_scale", "seed"}
        if extra:
            raise r.fail(key, f"unknown key(s) {sorted(extra)}")
        layers = r.get(f"{key}.layers")
        if (
            not isinstance(layers, list)
            or len(layers) < 2
            or not all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 4096 for n in layers)
        ):
            raise r.fail(f"{key}.layers", "expected at least two layer sizes, integers in "
                         '[1, 4096] or the name of a size in [sizes] (e.g. [2, "width", 2])')
        activation = r.string(f"{key}.activation", "tanh")
        if activation not in ACTIVATIONS:
            raise r.fail(f"{key}.activation", f"use one of {', '.join(ACTIVATIONS)}"
                         + hints.did_you_mean(activation, ACTIVATIONS))
        raw_inputs = r.get(f"{key}.inputs")
        if not isinstance(raw_inputs, list) or len(raw_inputs) != layers[0]:
            raise r.fail(f"{key}.inputs", f"expected {layers[0]} input expressions (layers[0])")
        inputs = []
        for i, text in enumerate(raw_inputs):
            try:
                inputs.append(expr.parse(text, inputs_allowed))
            except expr.ExprError as e:
                raise r.fail(f"{key}.inputs[{i}]", str(e)) from None
        scale = r.get(f"{key}.output_scale", 1.0)
        if isinstance(scale, list):
            scales = r.numbers(f"{key}.output_scale", length=layers[-1])
        else:
            scales = [r.number(f"{key}.output_scale")] * layers[-1]
        seed = r.integer(f"{key}.seed", 0, lo=0, hi=2**63 - 1)
        net = Network(name, tuple(layers), activation, tuple(inputs), tuple(scales), seed, offset)
        if net.n_params > MAX_NETWORK_PARAMS:
            raise r.fail(f"{key}.layers", f"more than {MAX_NETWORK_PARAMS} weights")
        offset += net.n_params
        nets.append(net)
    return nets


def _ensemble(
    r: _Reader, states: list[str], y0: list[float], named: list[str], theta0: list[float],
    log: list[bool],
) -> Ensemble | None:
    """``[ensemble]``: the ladder of member counts and how members vary."""
    if "ensemble" not in r.data:
        return None
    sizes_raw = r.get("ensemble.sizes")
    if not isinstance(sizes_raw, list) or not sizes_raw:
        raise r.fail("ensemble.sizes", "expected a non-empty array of member counts")
    for i, n in enumerate(sizes_raw):
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_MEMBERS:
            raise r.fail(
                f"ensemble.sizes[{i}]",
                f"expected an integer in [1, {MAX_MEMBERS}], got {_short_repr(n)}",
            )
    sizes = list(sizes_raw)
    if sizes != sorted(set(sizes)):
        raise r.fail("ensemble.sizes", "member counts must be strictly increasing")
    sem = r.get("ensemble.semantics", list(SEMANTICS))
    if not isinstance(sem, list) or not sem or any(x not in SEMANTICS for x in sem):
        raise r.fail("ensemble.semantics", f"expected a non-empty array of {', '.join(SEMANTICS)}")
    vary = r.table("ensemble.vary")
    if not vary:
        raise r.fail("ensemble.vary", "declare at least one state or named parameter to vary")
    variations = [_variation(r, str(k), states, y0, named, theta0, log) for k in vary]
    return Ensemble(
        sizes=tuple(sizes),
        variations=tuple(variations),
        seed=r.integer("ensemble.seed", 0, lo=0, hi=2**63 - 1),
        sample=r.integer("ensemble.sample", 8, lo=1, hi=1000),
        semantics=tuple(dict.fromkeys(sem)),
    )


def _variation(
    r: _Reader, name: str, states: list[str], y0: list[float], named: list[str],
    theta0: list[float], log: list[bool],
) -> Variation:
    """One ``[ensemble.vary]`` entry: ``NAME = { normal = [mean, std] | uniform = [lo, hi],
    apply = "scale" | "shift" }``."""
    key = f"ensemble.vary.{name}"
    if name in states:
        target, index = "state", states.index(name)
    elif name in named:
        target, index = "parameter", named.index(name)
    else:
        raise r.fail(key, f"not a state or named parameter (known: {', '.join(states + named)})"
                     + hints.did_you_mean(name, states + named))
    entry = r.table(key)
    extra = set(entry) - {*DISTRIBUTIONS, "apply"}
    if extra:
        raise r.fail(key, f"unknown key(s) {sorted(extra)}; use normal or uniform, and apply")
    given = [d for d in DISTRIBUTIONS if d in entry]
    if len(given) != 1:
        raise r.fail(key, "give exactly one distribution: normal = [mean, std] or uniform = [lo, hi]")
    dist = given[0]
    a, b = r.numbers(f"{key}.{dist}", length=2)
    if dist == "normal" and b < 0:
        raise r.fail(f"{key}.normal", f"the standard deviation must be >= 0, got {b}")
    if dist == "uniform" and not a < b:
        raise r.fail(f"{key}.uniform", f"expected low < high, got [{a}, {b}]")
    apply = r.string(f"{key}.apply", "scale")
    if apply not in APPLY:
        raise r.fail(f"{key}.apply", f"use one of {', '.join(APPLY)}")
    nominal = y0[index] if target == "state" else theta0[index]
    if apply == "scale" and nominal == 0:
        raise r.fail(
            f"{key}.apply",
            f"{name} is 0, so scaling it gives every member the same value: "
            'use apply = "shift" (members at 0 + the draw)',
        )
    if target == "parameter" and log[index] and apply == "scale" and (dist == "normal" or a < 0):
        raise r.fail(
            key,
            f"{name} is differentiated in log space, so its members must stay positive: "
            "scale it by a uniform draw on a positive range",
        )
    return Variation(name, target, index, dist, (a, b), apply)


def _canonical(data: Any) -> Any:
    """JSON-able copy of the parsed TOML (dates become strings)."""
    if isinstance(data, Mapping):
        return {str(k): _canonical(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_canonical(v) for v in data]
    if isinstance(data, str | int | float | bool) or data is None:
        return data
    return str(data)


def _training(r: _Reader) -> Training | None:
    """``[training]``: Adam with every constant explicit, the iterations, the loss to reach
    and how often the curve is recorded (:mod:`sciml_bench.problem.training`)."""
    if "training" not in r.data:
        return None
    t = r.table("training")
    missing = [k for k in REQUIRED_KEYS if k not in t]
    if missing:
        raise r.fail(f"training.{missing[0]}",
                     f"missing; a [training] section declares {', '.join(REQUIRED_KEYS)}")  # fmt: skip
    if r.string("training.optimizer") not in OPTIMIZERS:
        raise r.fail("training.optimizer", f"unknown optimizer; use one of {', '.join(OPTIMIZERS)}")
    adam = Adam(
        learning_rate=r.number("training.learning_rate", positive=True),
        beta1=_unit(r, "training.beta1"),
        beta2=_unit(r, "training.beta2"),
        eps=r.number("training.eps", positive=True),
    )
    iterations = r.integer("training.iterations", lo=1, hi=MAX_ITERATIONS)
    return Training(
        adam=adam,
        iterations=iterations,
        target_loss=r.number("training.target_loss"),
        record_every=r.integer("training.record_every", 1, lo=1, hi=iterations),
        agreement_iterations=r.integer("training.agreement_iterations",
                                       DEFAULT_AGREEMENT_ITERATIONS, lo=1, hi=MAX_ITERATIONS),
    )


def _unit(r: _Reader, key: str) -> float:
    """A number in [0, 1), as Adam's decay rates must be."""
    v = r.number(key)
    if not 0 <= v < 1:
        raise r.fail(key, f"expected a number in [0, 1), got {v}")
    return v
