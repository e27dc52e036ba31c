"""Where a problem ran at several tolerances (``--tolerances``): from which rtol each
library's gradient passes.

The verdict answers one tolerance at a time (:mod:`~sciml_bench.results.verdict`); a
work-precision ladder asks the question across them: *how tight must I set this library
before its gradient is right?* For each row label (backend, solver, gradient method; one
problem, one results file, one size and dtype) the rows are taken from the loosest rtol
to the tightest, and the label **passes from** ``r`` when its rows at ``r`` and at every
tighter rtol it ran are within the bound (the verdict's own test,
:func:`~sciml_bench.results.verdict.accurate`: gradient error ≤ bound against a reference
able to judge it there, the reference's own error at most a tenth of the bound). Timing and
load play no part: this is about the gradient being right, not fast. A row that failed (a
status other than ``ok``) does not pass at its rtol. A label that passes at some rtol but
not at a tighter one has no "from": the line lists where it passed. Computed when read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sciml_bench.results import verdict

#: keys that split a problem's rows into separate ladders (besides the label)
LADDER_KEYS = ("problem", "_run", "size", "dtype")


@dataclass(frozen=True)
class Rung:
    """One label's row at one rtol: its gradient error, or why it has none."""

    rtol: float
    passes: bool
    error: float | None
    status: str

    def text(self) -> str:
        """``1e-08: 3.2e-03`` or ``1e-10: max_steps``."""
        what = f"{self.error:.1e}" if self.error is not None else self.status
        return f"{verdict._sci(self.rtol)}: {what}"


@dataclass(frozen=True)
class Ladder:
    """One label's rungs, loosest rtol first."""

    label: str
    rungs: tuple[Rung, ...]

    @property
    def passes_from(self) -> float | None:
        """The loosest rtol from which every tighter rung passes (None: the tightest fails)."""
        out = None
        for rung in reversed(self.rungs):  # tightest first
            if not rung.passes:
                break
            out = rung.rtol
        return out

    def text(self) -> str:
        """``cvodes BDF forward from rtol 1e-9 (1e-9: 2.1e-05; 1e-8: 3.2e-03)``: the first
        passing rung and the one looser than it, or why it never passes."""
        start = self.passes_from
        if start is not None:
            i = next(k for k, r in enumerate(self.rungs) if r.rtol == start)
            shown = self.rungs[max(i - 1, 0): i + 1][::-1]
            where = "at every rtol run" if i == 0 else f"from rtol {verdict._sci(start)}"
            return f"{self.label} {where} ({'; '.join(r.text() for r in shown)})"
        passing = [r for r in self.rungs if r.passes]
        if passing:
            at = ", ".join(verdict._sci(r.rtol) for r in passing)
            return (f"{self.label} at {at} only, not at {self.rungs[-1].text()} "
                    "(no tighter rtol run passes again)")  # fmt: skip
        return f"{self.label} at no rtol run ({self._best()})"

    def _best(self) -> str:
        scored = [r for r in self.rungs if r.error is not None and math.isfinite(r.error)]
        if not scored:
            statuses = {r.status for r in self.rungs}
            if len(statuses) == 1:  # one reason at every rung: said once
                return f"{statuses.pop()} at every one"
            return "; ".join(r.text() for r in self.rungs)
        best = min(scored, key=lambda r: r.error or 0.0)
        return f"the smallest error {best.error:.1e} at rtol {verdict._sci(best.rtol)}"

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "passes_from": self.passes_from,
                "rungs": [{"rtol": r.rtol, "passes": r.passes, "gradient_error": r.error,
                           "status": r.status} for r in self.rungs]}  # fmt: skip


@dataclass(frozen=True)
class ToleranceLadder:
    """Every label's ladder on one problem's rows of one results file (one size, dtype)."""

    problem: str
    group: dict[str, Any]
    bound: float
    ladders: tuple[Ladder, ...]

    @property
    def where(self) -> str:
        """``, run #2, size 300``: what sets this ladder apart from others of its problem."""
        return "".join(f", {k.lstrip('_')} {v}" for k, v in self.group.items())

    def body(self) -> str:
        """Every label's :meth:`Ladder.text`, joined."""
        return "; ".join(x.text() for x in self.ladders)

    def text(self) -> str:
        return (f"gradient passes (error ≤ {verdict._sci(self.bound)}) by rtol "
                f"({self.problem}{self.where}): {self.body()}")

    def to_json(self) -> dict[str, Any]:
        return {"kind": "tolerance_ladder", "problem": self.problem, "bound": self.bound,
                **{k.lstrip("_"): v for k, v in self.group.items()},
                "ladders": [x.to_json() for x in self.ladders]}  # fmt: skip


def _rung(r: dict[str, Any], bound: float) -> Rung:
    e = r.get("gradient_error")
    e = float(e) if isinstance(e, int | float) and not isinstance(e, bool) else None
    ok = r.get("status") == "ok"
    return Rung(float(r["rtol"]), ok and verdict.accurate(r, bound), e if ok else None,
                str(r.get("status", "?")))


def _gradient_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """ODE and ensemble rows at a known rtol that are, or tried to be, gradient rows."""
    return [r for r in records
            if verdict._kind(r) in ("ode", "ensemble") and r.get("gradient_method") != "none"
            and isinstance(r.get("rtol"), int | float) and r.get("status") != "unavailable"]  # fmt: skip


def ladders(records: Sequence[dict[str, Any]], gradient_rtol: float | None = None,
            ) -> list[ToleranceLadder]:  # fmt: skip
    """One :class:`ToleranceLadder` per problem, results file, size and dtype whose
    gradient rows ran at two or more tolerances; labels with a single rtol are left out."""
    bound = verdict.DEFAULT_GRADIENT_RTOL if gradient_rtol is None else float(gradient_rtol)
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for r in _gradient_rows(records):
        groups.setdefault(tuple(repr(r.get(k)) for k in LADDER_KEYS), []).append(r)
    out = []
    for rows in groups.values():
        by_label: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            by_label.setdefault(verdict.label({**r, "_run": None}), []).append(r)
        found = tuple(
            Ladder(name, tuple(_rung(r, bound) for r in sorted(rs, key=lambda r: -r["rtol"])))
            for name, rs in by_label.items() if len({r["rtol"] for r in rs}) > 1
        )  # fmt: skip
        if found:
            first = rows[0]
            group = {k: first.get(k) for k in LADDER_KEYS[1:]
                     if first.get(k) is not None and first.get(k) != "float64"}  # fmt: skip
            out.append(ToleranceLadder(str(first.get("problem", "?")), group, bound, found))
    return out


def lines(records: Sequence[dict[str, Any]], gradient_rtol: float | None = None) -> list[str]:
    """The ladders' lines, for the terminal and the report."""
    return [x.text() for x in ladders(records, gradient_rtol)]
