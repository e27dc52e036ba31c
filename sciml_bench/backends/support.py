"""Which backends can run a problem, and why not: its code target can express it, the
library is installed here, and the backend offers what the problem asks for (a stiff
solver, ensembles, training, a gradient).

What ``sciml-bench check`` prints before a long run. Every answer comes from what a run
itself consults, so the two cannot disagree: the backend's generated-code target
(:data:`~sciml_bench.backends.program.BACKEND_TARGET`), the generator's own verdict on that
target (passed in, from :func:`sciml_bench.problem.check.expressible`), the backend's cheap
:meth:`~sciml_bench.backends.base.Backend.availability` (never imports the library) and its
declared offers. Nothing here imports a library under test.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sciml_bench import backends
from sciml_bench.backends.base import Backend
from sciml_bench.backends.program import BACKEND_TARGET
from sciml_bench.problem.spec import Problem


@dataclass(frozen=True)
class Support:
    """One backend against one problem."""

    backend: str
    #: the generated code it runs (``jax``, ``torch``, ``numpy``, ``casadi``, ``diffsl``, ``julia``)
    target: str
    #: why the target cannot express the problem, or "" when it can
    not_expressible: str
    #: why the library cannot run here and the fix, or "" when it can
    unavailable: str
    fix: str
    #: the solver a run uses by default for this problem
    solver: str
    #: what the row will show beyond the defaults (no stiff solver, solve only, ...)
    notes: tuple[str, ...]

    @property
    def runs(self) -> bool:
        """Whether ``run`` would measure it here (a row with timings, not ``unavailable``)."""
        return not self.not_expressible and not self.unavailable and not self.refused

    @property
    def refused(self) -> bool:
        return any(n.startswith("not offered") for n in self.notes)


def support(problem: Problem, why_not: Mapping[str, str | None]) -> list[Support]:
    """Every registered backend against ``problem``, in display order. ``why_not`` maps each
    code target to why it cannot express the problem (None: it can)."""
    out = []
    for name in backends.names():
        b = backends.get(name)
        target = BACKEND_TARGET[name]
        av = b.availability()
        out.append(Support(
            backend=name, target=target, not_expressible=why_not.get(target) or "",
            unavailable="" if av.ok else av.reason, fix="" if av.ok else av.fix,
            solver=_solver(b, problem), notes=tuple(_notes(b, problem)),
        ))  # fmt: skip
    return out


def _solver(b: Backend, problem: Problem) -> str:
    if problem.ensemble is not None:
        return b.ensemble_solver(problem.stiff)
    if problem.array is not None:
        return b.array_solver(problem.stiff)
    return b.default_solver(problem.stiff)


def _notes(b: Backend, problem: Problem) -> list[str]:
    """What a row of ``b`` on ``problem`` will show beyond the defaults."""
    notes = []
    info = b.solvers().get(_solver(b, problem))
    if problem.stiff and info is not None and not info.stiff:
        notes.append(f"no stiff solver: runs {info.name}, which may hit max_steps")
    if problem.array is not None and not b.array_problems:
        notes.append("not offered: " + (b.array_missing or "no array code"))
    if problem.ensemble is not None and not b.ensemble_semantics:
        notes.append("not offered: no ensembles")
    if any(e.kind not in b.events for e in problem.events):
        notes.append("not offered: does not run these events ([[events]]) yet (issue 51)")
    if not b.differentiable:
        notes.append("solves only (no gradient row)")
    return notes
