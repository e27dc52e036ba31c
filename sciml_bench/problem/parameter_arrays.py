"""Per-element parameters drawn at random: one value per grid element, seeded.

An array problem's per-element parameter may be *drawn* instead of written as an
expression of the indices (:mod:`sciml_bench.problem.arrays`)::

    [parameters]
    k1 = { draw = "loguniform", around = 0.04, spread = 0.2, seed = 1 }

gives every grid element ``e`` its own ``k1[e]``, so that the parameter count grows with the
grid (P = 3n for three drawn rates on n groups). The draws:

- ``loguniform``: ``log k[e] ~ U(log(a(1 - s)), log(a(1 + s)))``, ``a`` = ``around``,
  ``s`` = ``spread`` (``0 < s < 1``): within ±100·s % of ``a``, uniform in log space.
- ``uniform``: ``k[e] ~ U(a(1 - s), a(1 + s))``.

The stream is NumPy's ``Generator(PCG64)`` seeded with ``[seed, crc32(name)]``: the same in
every process and on every machine (no ``hash()``, which Python salts per process), and
independent between two parameters that share a seed. Element ``e`` takes the ``e``-th draw in
C order, so a smaller rung of a ladder holds the first values of a larger one's draw. Two
equal values on one grid (which a continuous draw makes with probability 0) are refused:
the point of a draw is that no two elements are the same.

The values become part of θ₀ like any per-element parameter: every target receives them
in the parameter vector and indexes them per element, and they are differentiated in log
space (they are positive) unless ``log = false``.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

#: the draws a file may name
DRAWS = ("loguniform", "uniform")
#: the keys of a drawn parameter's table
KEYS = ("draw", "around", "spread", "seed", "log")


class Reader(Protocol):
    """What :func:`read_draw` needs of spec's reader: errors that name the key."""

    def fail(self, key: str, reason: str) -> Exception: ...
    def get(self, key: str, default: Any = ...) -> Any: ...
    def number(self, key: str, default: Any = ..., positive: bool = False) -> float: ...
    def integer(self, key: str, default: Any = ..., lo: int = 1, hi: int = 10**9) -> int: ...


def is_drawn(table: Any) -> bool:
    """Whether a ``[parameters]`` entry is a drawn per-element parameter."""
    return isinstance(table, Mapping) and "draw" in table


def draw(kind: str, around: float, spread: float, seed: int, name: str, n: int) -> np.ndarray:
    """``n`` values of parameter ``name`` around ``around`` within ``±spread`` (relative),
    uniform (``kind = "uniform"``) or uniform in log space (``"loguniform"``)."""
    rng = np.random.Generator(np.random.PCG64([seed, zlib.crc32(name.encode())]))
    lo, hi = around * (1 - spread), around * (1 + spread)
    if kind == "loguniform":
        return np.exp(rng.uniform(np.log(lo), np.log(hi), n))
    return rng.uniform(lo, hi, n)


def read_draw(r: Reader, key: str, name: str, n_elements: int) -> np.ndarray:
    """Validate the table at ``key`` (``draw``, ``around``, ``spread``, ``seed``; ``log`` is
    the caller's) and return its ``n_elements`` values in C order of the grid."""
    table = r.get(key)
    extra = set(table) - set(KEYS)
    if extra:
        raise r.fail(key, f"unknown key(s) {sorted(extra)} in a drawn parameter; "
                     f"use {', '.join(KEYS)}")  # fmt: skip
    kind = r.get(f"{key}.draw")
    if kind not in DRAWS:
        raise r.fail(f"{key}.draw", f"unknown draw {kind!r} (use {', '.join(DRAWS)})")
    around = r.number(f"{key}.around", positive=True)
    spread = r.number(f"{key}.spread")
    if not 0 < spread < 1:
        raise r.fail(
            f"{key}.spread",
            f"expected a relative spread in (0, 1), e.g. 0.2 for ±20 %, got {spread:g}",
        )
    seed = r.integer(f"{key}.seed", 0, lo=0, hi=2**32 - 1)
    values = draw(str(kind), around, spread, seed, name, n_elements)
    if not np.all(np.isfinite(values)):
        raise r.fail(key, "the draw is not finite; choose a smaller around or spread")
    if np.unique(values).size != values.size:
        raise r.fail(key, "two elements drew the same value; change the seed")
    return values
