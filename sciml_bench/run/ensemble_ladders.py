"""Ensemble problems: one ladder per backend x semantics x solver x gradient x device,
run rung by rung (member counts), each rung in a fresh worker."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sciml_bench import backends
from sciml_bench.measure.affinity import ENSEMBLE_UNPINNED
from sciml_bench.measure.status import Status
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.results.store import ResultsWriter, summarize
from sciml_bench.run.cases import Settings, gradient_choice
from sciml_bench.run.executor import Executor, LocalExecutor
from sciml_bench.run.interrupts import saved_on_interrupt
from sciml_bench.run.ladder import Ladder
from sciml_bench.run.progress import Progress, to_stderr
from sciml_bench.run.rung_processes import Rounds, Rung, planned, rows_in_order, rung


@dataclass(frozen=True)
class EnsembleSpec:
    """One ladder: a backend and semantics, run at each size in turn."""

    backend: str
    semantics: str
    solver: str
    gradient_method: str
    rtol: float
    atol: float
    max_steps: int
    sizes: tuple[int, ...]
    device: str = "cpu"
    #: what the user asked for: ``cuda`` on a CPU-only backend runs on ``cpu``
    device_requested: str = "cpu"

    @property
    def label(self) -> str:
        return f"{self.backend} {self.semantics} {self.solver} {self.gradient_method}"


def plan_ensemble(
    problem: CompiledProblem,
    semantics: Sequence[str],
    sizes: Sequence[int],
    backend_names: Sequence[str],
    solvers: Sequence[str] = (),
    gradients: Sequence[str] = (),
    max_steps: int | None = None,
    devices: Sequence[str] = ("cpu",),
) -> list[EnsembleSpec]:
    """One ladder per (backend, semantics, solver, gradient) offered and device, by
    :func:`plan`'s device rule (a CPU-only backend runs once, on the CPU, and says what
    was asked for); a backend that offers none of ``semantics`` gets a ladder with no
    semantics (it becomes one status row)."""
    out = []
    for name in backend_names:
        b = backends.get(name)
        offered = b.solvers()
        chosen = [s for s in solvers if s in offered] or [b.ensemble_solver(problem.stiff)]
        grads = gradient_choice(b, problem, gradients)
        runs = [(d, d) for d in devices if b.runs_ensembles_on(d)] or [("cpu", devices[0])]
        for device, requested in runs:
            sems = [s for s in b.ensemble_offer(device) if s in semantics] or [""]
            for sem in sems:
                for s in chosen:
                    for g in grads:
                        out.append(EnsembleSpec(
                            name, sem, s, g, problem.rtol, problem.atol,
                            max_steps or problem.max_steps, tuple(sizes), device, requested,
                        ))  # fmt: skip
    return out


def ensemble_job(
    spec: EnsembleSpec, size: int, problem: CompiledProblem, ensemble: dict[str, Any],
    observations: str | None, ref: dict[str, Any], settings: Settings,
) -> dict[str, Any]:
    """The job of one rung, pinned to ``spec.device``."""
    return {
        "kind": "ensemble",
        "backend": spec.backend,
        "semantics": spec.semantics,
        "size": size,
        "device": spec.device,
        "device_requested": spec.device_requested,
        "problem": problem.to_json(),
        "ensemble": ensemble,
        "observations": observations,
        "options": {
            "solver": spec.solver, "gradient_method": spec.gradient_method, "rtol": spec.rtol,
            "atol": spec.atol, "max_steps": spec.max_steps, "extra": {},
        },
        "repeats": settings.repeats,
        "warmups": settings.warmups,
        "steady_budget_s": settings.steady_budget_s,
        # never pinned: members spread over the cores are part of an ensemble's timing
        "steady_pin": ENSEMBLE_UNPINNED if settings.pin else False,
        # the worker starts no steady call that would end past it (it keeps its samples)
        "budget_s": settings.budget_s,
        "reference": ref,
    }  # fmt: skip


def _ensemble_row(spec: EnsembleSpec, problem: CompiledProblem, size: int | None, status: str,
                  reason: str) -> dict[str, Any]:  # fmt: skip
    return summarize({
        "kind": "ensemble", "problem": problem.name, "backend": spec.backend,
        "solver": spec.solver, "gradient_method": spec.gradient_method,
        "semantics": spec.semantics, "size": size, "device": spec.device,
        "device_requested": spec.device_requested, "status": status, "reason": reason,
    })  # fmt: skip


def ensemble_without_reference(
    problem: CompiledProblem, ladders: Sequence[EnsembleSpec], reason: str,
    writer: ResultsWriter, progress: Progress = to_stderr,
) -> list[dict[str, Any]]:  # fmt: skip
    """An ensemble problem whose reference sample could not be built (``reason``): one
    ``error`` row per ladder saying so, on disk, so that the run goes on. Its backends are
    not run: an ensemble row is scored on the reference sample's members."""
    done = []
    for i, spec in enumerate(ladders, 1):
        note = (f"no reference: {reason}; the ensemble was not run (its rows are scored "
                "against the reference sample)")  # fmt: skip
        rec = _ensemble_row(spec, problem, None, Status.ERROR.value, note)
        rec["reference_source"] = "none"
        progress(f"[ladder {i}/{len(ladders)}] {spec.backend}: not run (no reference)")
        writer.add(rec)
        done.append(rec)
    return done


def run_ensemble(
    problem: CompiledProblem,
    ensemble: dict[str, Any],
    observations: str | None,
    ref: dict[str, Any],
    ladders: Sequence[EnsembleSpec],
    writer: ResultsWriter,
    settings: Settings,
    executor: Executor | None = None,
    progress: Progress = to_stderr,
) -> list[dict[str, Any]]:
    """Each ladder rung by rung, each rung's first process in a fresh worker where its
    ladder reaches it, each row on disk as it ends; a cheap rung runs the run's ``--cold``
    processes, its others after every ladder's first pass, interleaved across the ladders
    (:mod:`~sciml_bench.run.rung_processes`). After a rung fails (budget, memory, a
    failing member, ...) the larger rungs of that ladder are ``skipped``, saying why. Every
    row carries ``largest_ok_size``, the largest rung of its ladder that completed so far.
    Returns the rows in the ladders' order (``case_index``)."""
    executor = executor or LocalExecutor(threads=settings.threads)
    done: list[dict[str, Any]] = []
    availability: dict[str, Any] = {}
    rounds = Rounds(writer, problem.name, settings.seed)

    with saved_on_interrupt(writer, done), rounds.written_on_interrupt():
        for i, spec in enumerate(ladders, 1):
            if spec.backend not in availability:
                availability[spec.backend] = backends.get(spec.backend).availability()
            why = _why_not_run(spec, availability[spec.backend], ensemble)
            if why is not None:
                if not any(r["backend"] == spec.backend for r in done):
                    progress(f"[ladder {i}/{len(ladders)}] {spec.backend}: unavailable ({why})")
                    rounds.place(done, _ensemble_row(spec, problem, None,
                                                     Status.UNAVAILABLE.value, why))
                continue
            ladder = Ladder()
            for size in spec.sizes:
                skip = ladder.skipped()
                waits = None
                if skip is not None:
                    rec = _ensemble_row(spec, problem, size, Status.SKIPPED.value, skip)
                else:
                    title = f"[ladder {i}/{len(ladders)}] {problem.name}: {spec.label} n={size}"
                    job = ensemble_job(spec, size, problem, ensemble, observations, ref, settings)
                    r = _rung(job, planned(settings.cold, ladder.completed, size, "size"), title,
                              progress)  # fmt: skip
                    rec = rounds.first(r, executor, settings.budget_s, progress)
                    waits = r if r.waiting else None
                ladder.done(size, rec)
                rounds.place(done, rec, waits)
        final = rounds.run(executor, settings.budget_s, progress)
    return rows_in_order(done, final)


def _rung(job: dict[str, Any], processes: int, title: str, progress: Progress) -> Rung:
    """A rung of ``processes`` processes, announced."""
    progress(title + (f" ({processes} processes)" if processes > 1 else ""))
    return rung(job, processes, title)


def _why_not_run(spec: EnsembleSpec, av: Any, ensemble: dict[str, Any]) -> str | None:
    """Why a ladder's backend runs no rung here (``av``: its availability): unavailable, or
    none of the problem's semantics offered; None when it runs."""
    if not av.ok:
        return f"{av.reason}. Fix: {av.fix}" if av.fix else av.reason
    if not spec.semantics:
        return (f"{spec.backend} offers no ensemble with the semantics "
                f"{', '.join(ensemble['semantics'])}")  # fmt: skip
    return None

