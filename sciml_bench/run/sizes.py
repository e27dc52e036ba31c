"""What ``--sizes`` means for each kind of problem, and its checks.

An ensemble's ``--sizes`` counts members. An array problem's takes the problem's own size
variable (the ``[sizes]`` entry with a ladder: ``N``, a grid's side, or ``n``, a number of
groups), never a state count: a new user typing ``--sizes 2048`` for 2,048 states gets a
grid of 2048 x 2048. So every message names the variable and the states it gives, both
read from the problem's data (``[sizes]``, ``[state] shape`` and ``names``), never from a
table of the shipped problems. A value a problem refuses is a
:class:`~sciml_bench.run.options.RunError` (one line, exit code 2 at the command line);
``sciml-bench list`` prints each ladder through :func:`size_axis` too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sciml_bench.run.options import RunError

#: --quick runs the rungs of an ensemble ladder up to this many members
QUICK_MAX_MEMBERS = 64
_SUPERSCRIPTS = {2: "²", 3: "³"}


@dataclass(frozen=True)
class SizeAxis:
    """An array problem's laddered size: its name, how many axes of the state grid it
    spans (``power``) and the states it gives, ``factor * value ** power``."""

    name: str
    #: axes of ``[state] shape`` the size spans, and the grid's axes
    power: int
    ndim: int
    #: states per element times the other (fixed) sizes of the shape
    factor: int
    per_element: tuple[str, ...]
    ladder: tuple[int, ...]

    def states(self, value: int) -> int:
        return self.factor * value**self.power

    @property
    def formula(self) -> str:
        """``2N²``, ``3n``: the state count as a formula of the size."""
        if self.power == 0:
            return str(self.factor)
        power = "" if self.power == 1 else _SUPERSCRIPTS.get(self.power, f"^{self.power}")
        return f"{'' if self.factor == 1 else self.factor}{self.name}{power}"

    @property
    def groups(self) -> bool:
        """A 1-D shape of several states: each value of the size is one group of them."""
        return self.ndim == 1 and self.power == 1 and len(self.per_element) > 1

    @property
    def meaning(self) -> str:
        """What the size is, from the shape: ``the number of groups of y1, y2, y3``, ``the
        grid side``, ..."""
        if self.power == 0:
            return "a size that sets no axis of the states"
        if self.groups:
            return f"the number of groups of {', '.join(self.per_element)}"
        if self.power == self.ndim == 1:
            return "the number of grid points"
        if self.power == self.ndim:
            return "the grid side"
        return "the size of one axis of the grid"

    def value(self, v: int) -> str:
        """``n = 10 groups``, ``N = 32``: a value of the size, said as the problem means it."""
        return f"{self.name} = {v}" + (f" group{'s' if v != 1 else ''}" if self.groups else "")

    def ladder_text(self, values: Sequence[int] | None = None) -> str:
        """``N = 8 (128 states), 16 (512), 32 (2,048)``."""
        shown = list(self.ladder if values is None else values)
        parts = [f"{v} ({self.states(v):,}{' states' if i == 0 else ''})"
                 for i, v in enumerate(shown)]  # fmt: skip
        return f"{self.name} = {', '.join(parts)}" if parts else ""

    def nearest(self, states: int, limit: int) -> int | None:
        """The ladder value or size whose state count equals or is nearest ``states``
        (a ladder value on a tie), within ``limit`` states; None if there is none."""
        if self.power == 0:
            return None
        root = (states / self.factor) ** (1 / self.power)
        candidates = [*self.ladder, math.floor(root), math.ceil(root)]
        fits = [v for v in candidates if v >= 1 and self.states(v) <= limit]
        if not fits:
            return None
        return min(fits, key=lambda v: (abs(self.states(v) - states), v not in self.ladder))


def size_axis(problem: Any) -> SizeAxis:
    """The laddered size of an array problem, read from its data."""
    model = problem.array
    raw = problem.content.get("state", {}).get("shape", model.ladder_name)
    names = [raw] if isinstance(raw, str) else list(raw)
    sizes = dict(model.sizes)
    others = math.prod(sizes[n] for n in names if n != model.ladder_name)
    return SizeAxis(model.ladder_name, names.count(model.ladder_name), len(names),
                    len(model.states) * others, tuple(model.states), tuple(model.ladder))  # fmt: skip


def parse_sizes(text: str | None, problems: Sequence[Any]) -> list[int] | None:
    """``--sizes 1,16,256`` as a strictly increasing list, each value checked against every
    named problem that takes it: member counts for an ensemble, values of the size
    variable (with the states they give, within the suite's limit) for an array problem,
    widths a network can have for a network's width."""
    if not text:
        return None
    arrays = [size_axis(p) for p in problems if p.ensemble is None and p.array is not None]
    widths = [p.network_width for p in problems if p.network_width is not None]
    if (arrays or widths) and not any(p.ensemble is not None for p in problems):
        a = arrays[0] if arrays else widths[0]
        what = f"values of {a.name} ({a.meaning})"
        example = ",".join(map(str, (a.ladder or (1, 10, 100))[:3]))
    else:
        what, example = "member counts", "1,16,256"
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        vals = []
    if not vals:
        raise RunError(f"--sizes {text!r}: give comma-separated {what}, e.g. {example}")
    if vals != sorted(set(vals)):
        raise RunError(f"--sizes {text}: {what} must be strictly increasing, e.g. {example}")
    if any(p.ensemble is not None for p in problems):
        _check_members(vals)
    for a in arrays:
        for v in vals:
            check_size(a, v)
    for w in widths:  # a network's width: each value must give layers a network can have
        for v in vals:
            why = w.refusal(v) if v >= 1 else (
                f"{w.name} = {v}: a width is at least 1 ({w.name} is {w.meaning})")  # fmt: skip
            if why:
                raise RunError(f"--sizes {v}: {why}")
    return vals


def _check_members(vals: Sequence[int]) -> None:
    from sciml_bench.problem.ensemble import MAX_MEMBERS

    bad = [v for v in vals if not 1 <= v <= MAX_MEMBERS]
    if bad:
        raise RunError(f"--sizes: {bad[0]} members is outside [1, {MAX_MEMBERS}]")


def check_size(a: SizeAxis, v: int) -> None:
    """One value of an array problem's size: within the sizes a file accepts, and giving
    at most the states the suite holds; the error names the variable, the states and,
    when the value looks like a state count, the size that gives that many."""
    from sciml_bench.problem.arrays import MAX_ARRAY_STATES, MAX_SIZE

    outside = (f"--sizes {v}: {a.value(v)} is outside [1, {MAX_SIZE:,}] "
               f"({a.name} is {a.meaning}: {a.formula} states)")  # fmt: skip
    if v < 1:
        raise RunError(outside)
    n = a.states(v)
    if n <= MAX_ARRAY_STATES:
        if v > MAX_SIZE:  # a size that sets no axis of the states
            raise RunError(outside)
        return
    message = (f"--sizes {v}: {a.value(v)} gives {n:,} states, over the "
               f"{MAX_ARRAY_STATES:,} this suite allows ({a.name} is {a.meaning}: "
               f"{a.formula} states)")  # fmt: skip
    guess = a.nearest(v, MAX_ARRAY_STATES)
    if guess is not None:
        message += f"; did you mean {a.name} = {guess} ({a.states(guess):,} states)?"
    raise RunError(message)


def ensemble_sizes(ladder: Sequence[int], override: list[int] | None, quick: bool) -> list[int]:
    """The rungs to run: --sizes, else the ladder (up to QUICK_MAX_MEMBERS with --quick)."""
    if override:
        return override
    if quick:
        return [n for n in ladder if n <= QUICK_MAX_MEMBERS] or [min(ladder)]
    return list(ladder)


def ladder_sizes(model: Any, override: list[int] | None, quick: bool) -> list[int]:
    """An array problem's sizes: --sizes, else its ladder (its first two with --quick), else
    its one size."""
    if override:
        return override
    ladder = list(model.ladder) or [model.size]
    return ladder[:2] if quick else ladder
