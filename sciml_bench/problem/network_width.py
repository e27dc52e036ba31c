"""A network's width as a size: ``--sizes`` ladders a hidden layer of a scalar problem.

A problem with networks may name a size from ``[sizes]`` in place of a layer's width::

    [sizes]
    width = { default = 50, ladder = [10, 50, 200, 1000, 2000] }

    [networks.nn]
    layers = [2, "width", 2]

Its states stay scalar (no ``[state] shape``: that is what makes ``[sizes]`` an array
problem's, :mod:`sciml_bench.problem.arrays`); what grows is the parameter count. A dense
network of layers ``n_0 … n_L`` has ``P = Σ_l n_l (n_{l-1} + 1)`` weights and biases, so
``[2, w, 2]`` gives ``P = 3w + 2w + 2 = 5w + 2``: 52 at w = 10, 10,002 at w = 2000.

Each value of the size is the same file with the name replaced by the number: the weights
are drawn as for a file that wrote the number (Glorot-uniform from the network's seed,
:class:`~sciml_bench.problem.spec.Network`), so the rung at w = 50 is, weight for weight,
a file that declares ``layers = [2, 50, 2]``. The reference cache is keyed on the content
at that size (``[sizes]`` with the value as its default).

Nothing here imports :mod:`sciml_bench.problem.spec`: ``spec`` calls :func:`read` with its
reader (errors name the file and key), then validates the resolved file as any other.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import sympy

from sciml_bench.problem import arrays

#: the widest layer a network may have (spec's ``[networks]`` check)
MAX_WIDTH = 4096


class Reader(Protocol):
    """What :func:`read` needs of spec's reader: errors that name the key."""

    data: Mapping[str, Any]

    def fail(self, key: str, reason: str) -> Exception: ...
    def get(self, key: str, default: Any = ...) -> Any: ...
    def table(self, key: str, default: Any = ...) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class NetworkWidth:
    """A scalar problem's laddered network width: the sizes' values, the laddered one's name
    and ladder (as :class:`~sciml_bench.problem.arrays.ArrayModel` names them, so that a
    ladder runs either alike), and each network's layers as written (a size's name where a
    width is laddered)."""

    sizes: tuple[tuple[str, int], ...]
    ladder_name: str
    ladder: tuple[int, ...]
    layers: tuple[tuple[str, tuple[int | str, ...]], ...]
    #: named (mechanistic) parameters, which do not grow with the width
    n_named: int = 0

    @property
    def size(self) -> int:
        """The laddered size's value in this instance."""
        return dict(self.sizes)[self.ladder_name]

    @property
    def name(self) -> str:
        """The laddered size's name (as the CLI's size axes name theirs)."""
        return self.ladder_name

    def resolved(self, value: int) -> dict[str, list[int]]:
        """Each network's layers with the laddered size at ``value`` (others at theirs)."""
        values = {**dict(self.sizes), self.ladder_name: value}
        return {net: [values[n] if isinstance(n, str) else n for n in layers]
                for net, layers in self.layers}  # fmt: skip

    def n_params(self, value: int) -> int:
        """``P`` at ``value``: the named parameters plus ``Σ_l n_l (n_{l-1} + 1)`` per network."""
        return self.n_named + sum(_weights(ls) for ls in self.resolved(value).values())

    @property
    def formula(self) -> str:
        """``P`` as a polynomial of the laddered size: ``5·w + 2`` for ``[2, "w", 2]``."""
        w = sympy.Symbol(self.ladder_name)
        values: dict[str, Any] = {**dict(self.sizes), self.ladder_name: w}
        total = self.n_named + sum(
            _weights([values[n] if isinstance(n, str) else n for n in layers])
            for _, layers in self.layers
        )
        return str(sympy.expand(total)).replace("**", "^").replace("*", "·")

    @property
    def meaning(self) -> str:
        """What the size is: ``the hidden width of network nn (P = 5·width + 2 parameters)``."""
        nets = [net for net, layers in self.layers if self.ladder_name in layers]
        return (f"the hidden width of network {', '.join(nets)} "
                f"(P = {self.formula} parameters)")  # fmt: skip

    def ladder_text(self, values: tuple[int, ...] | None = None) -> str:
        """``width = 10 (52 parameters), 50 (252), 200 (1,002)``."""
        shown = self.ladder if values is None else values
        parts = [f"{v} ({self.n_params(v):,}{' parameters' if i == 0 else ''})"
                 for i, v in enumerate(shown)]  # fmt: skip
        return f"{self.ladder_name} = {', '.join(parts)}" if parts else ""

    def refusal(self, value: int) -> str | None:
        """Why ``value`` of the laddered size cannot be built (a layer past
        :data:`MAX_WIDTH`), or None; a parameter count typed as the width gets the width
        that gives it."""
        for net, layers in self.resolved(value).items():
            if all(_fits(n) for n in layers):
                continue
            why = (f"{self.ladder_name} = {value} gives networks.{net} layers {layers}, "
                   f"and a layer has 1 to {MAX_WIDTH} units ({self.ladder_name} is "
                   f"{self.meaning})")  # fmt: skip
            guess = self._width_for(value)
            if guess is not None:
                why += (f"; did you mean {self.ladder_name} = {guess} "
                        f"({self.n_params(guess):,} parameters)?")  # fmt: skip
            return why
        return None

    def _width_for(self, n_params: int) -> int | None:
        """The largest buildable width whose ``P`` is at most ``n_params``, if any."""
        fits = [w for w in range(1, MAX_WIDTH + 1) if self.n_params(w) <= n_params
                and all(_fits(n) for ls in self.resolved(w).values() for n in ls)]  # fmt: skip
        return fits[-1] if fits else None


def _fits(n: Any) -> bool:
    """Whether a resolved layer is within the widths a network may have; a layer that is
    not an integer is spec's to refuse (its ``[networks]`` check names the key)."""
    return not isinstance(n, int) or isinstance(n, bool) or 1 <= n <= MAX_WIDTH


def _weights(layers: list[Any]) -> Any:
    """``Σ_l n_l (n_{l-1} + 1)``: the weights and biases of dense layers ``n_0 … n_L``."""
    return sum(o * (i + 1) for i, o in zip(layers, layers[1:], strict=False))


def widens(data: Mapping[str, Any]) -> bool:
    """Whether a file ladders a network's width: a layer named by a string, or ``[sizes]``
    beside networks in a problem whose states have no ``shape`` (not an array problem)."""
    nets = data.get("networks")
    if not isinstance(nets, Mapping):
        return False
    named = any(isinstance(n, str) for spec in nets.values() if isinstance(spec, Mapping)
                for n in (spec.get("layers") if isinstance(spec.get("layers"), list) else ()))  # fmt: skip
    state = data.get("state")
    shaped = isinstance(state, Mapping) and "shape" in state
    return named or ("sizes" in data and not shaped)


def read(
    r: Reader, override: Mapping[str, int] | None = None
) -> tuple[dict[str, Any], NetworkWidth]:
    """Validate ``[sizes]`` and the size names in ``[networks.*] layers``; return the file
    with every name replaced by its value (``override`` replacing defaults), to be validated
    as a plain scalar problem, and the width's description."""
    if "sizes" not in r.data:
        net, i, name = _named_layers(r)[0]
        raise r.fail(f"networks.{net}.layers[{i}]",
                     f"{name!r} names a size, but the file has no [sizes]; declare it, e.g. "
                     f"[sizes] {name} = {{ default = 50, ladder = [10, 50, 200] }}")  # fmt: skip
    if "ensemble" in r.data:
        raise r.fail("ensemble", "a laddered network width runs one trajectory per size; "
                     "drop [ensemble] or give the layers as integers")  # fmt: skip
    if r.get("state.shape", None) is not None:
        raise r.fail("state.shape", "a network's width is a size of a scalar problem; an array "
                     "problem ([state] shape) has no networks")  # fmt: skip
    sizes, ladder_name, ladder = arrays.read_sizes(r, override)
    used = {name for _, _, name in _named_layers(r)}
    for net, i, name in _named_layers(r):
        if name not in sizes:
            raise r.fail(f"networks.{net}.layers[{i}]",
                         f"{name!r} is not a size (declared: {', '.join(sizes)}); a layer is "
                         "an integer or the name of a size in [sizes]")  # fmt: skip
    for name in sizes:
        if name not in used:
            raise r.fail(f"sizes.{name}",
                         f"no network's layers use {name!r}: write it as a width, e.g. "
                         f'layers = [2, "{name}", 2] (an array problem gives [state] shape)')  # fmt: skip
    for net, spec in r.table("networks").items():  # each network's own checks come later
        if not isinstance(spec, Mapping) or not isinstance(spec.get("layers"), list):
            raise r.fail(f"networks.{net}.layers", "missing: a network needs its layers, "
                         'e.g. layers = [2, "width", 2]')  # fmt: skip
    layers = tuple((str(net), tuple(spec["layers"]))
                   for net, spec in r.table("networks").items())  # fmt: skip
    named = r.table("parameters", {})
    width = NetworkWidth(tuple(sizes.items()), ladder_name, ladder, layers, len(named))
    for name, value in sizes.items():
        why = NetworkWidth(width.sizes, name, (), layers, width.n_named).refusal(value)
        if why is not None:
            raise r.fail(f"sizes.{name}", why)
    return _resolved(r.data, width), width


def _named_layers(r: Reader) -> list[tuple[str, int, str]]:
    """``(network, index, name)`` of every layer given as a string."""
    out = []
    for net, spec in r.table("networks").items():
        layers = spec.get("layers") if isinstance(spec, Mapping) else None
        for i, n in enumerate(layers if isinstance(layers, list) else ()):
            if isinstance(n, str):
                out.append((str(net), i, n))
    return out


def _resolved(data: Mapping[str, Any], width: NetworkWidth) -> dict[str, Any]:
    """The file as a plain scalar problem at this width: names replaced, ``[sizes]`` gone."""
    out = copy.deepcopy(dict(data))
    out.pop("sizes")
    for net, layers in width.resolved(width.size).items():
        out["networks"][net]["layers"] = layers
    return out
