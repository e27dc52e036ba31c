"""The case matrix, budgets, progress and the assembly of one record per case.

A case is problem × backend × solver × gradient method × tolerance. Each runs
in fresh worker processes through an :class:`~sciml_bench.executor.Executor`:
one *full* process (cold phases, then steady state) and ``cold - 1`` further
cold-only processes for the spread of time-to-first-gradient. A case whose
first process fails is not repeated: solver failures are deterministic.
Every case ends as a record, whatever happened, and is on disk before the
next case starts.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sciml_bench import backends, metrics
from sciml_bench.compiled import CompiledProblem
from sciml_bench.executor import Executor, Interrupted, LocalExecutor, Outcome
from sciml_bench.reference import Reference
from sciml_bench.results import ResultsWriter, summarize
from sciml_bench.status import Status
from sciml_bench.worker import PHASES

#: the work-precision ladder of ``--sweep`` (DiffEqDevTools style)
SWEEP_RTOLS = (1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9)


@dataclass(frozen=True)
class CaseSpec:
    backend: str
    solver: str
    gradient_method: str
    rtol: float
    atol: float
    max_steps: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.backend} {self.solver} {self.gradient_method} rtol={self.rtol:g}"


@dataclass
class Settings:
    cold: int = 3
    repeats: int = 10
    warmups: int = 1
    budget_s: float = 300.0
    steady_budget_s: float = 20.0
    #: thread count for every worker's frameworks (None: each library's default)
    threads: int | None = None


class Interrupt(Exception):
    """The run was interrupted; every completed case is already on disk."""


def tolerances(problem: CompiledProblem, rtols: Sequence[float] | None) -> list[tuple[float, float]]:
    """(rtol, atol) pairs; atol keeps the problem's atol/rtol ratio."""
    if not rtols:
        return [(problem.rtol, problem.atol)]
    ratio = problem.atol / problem.rtol
    return [(r, r * ratio) for r in rtols]


def plan(
    problem: CompiledProblem,
    backend_names: Sequence[str],
    solvers: Sequence[str] = (),
    gradients: Sequence[str] = (),
    rtols: Sequence[float] | None = None,
    max_steps: int | None = None,
) -> list[CaseSpec]:
    """The case matrix. A solver or gradient name applies to backends offering it."""
    cases = []
    for name in backend_names:
        b = backends.get(name)
        offered = b.solvers()
        chosen = [s for s in solvers if s in offered] or [b.default_solver(problem.stiff)]
        grads = [g for g in gradients if g in b.gradient_methods] or [b.default_gradient(problem)]
        for rtol, atol in tolerances(problem, rtols):
            for s in chosen:
                for g in grads:
                    cases.append(
                        CaseSpec(name, s, g, rtol, atol, max_steps or problem.max_steps)
                    )
    return cases


def _outcome_status(o: Outcome, budget_s: float) -> tuple[str, str, float | None]:
    """Status, reason and t reached of one worker process."""
    status_events = [e for e in o.events if "status" in e]
    progress = [e["progress_t"] for e in o.events if "progress_t" in e]
    t_reached = progress[-1] if progress else None
    phases_done = [e["phase"] for e in o.events if "phase" in e]
    running = next((p for p in PHASES if p not in phases_done), "steady state")
    if o.timed_out:
        where = f"; integration had reached t={t_reached:g}" if t_reached is not None else ""
        return (
            Status.BUDGET_EXCEEDED.value,
            f"killed after the {budget_s:g} s budget during {running.replace('_', ' ')}{where}",
            t_reached,
        )
    if o.signal_name:
        return Status.CRASHED.value, f"worker killed by {o.signal_name} during {running}", t_reached
    if status_events:
        last = status_events[-1]
        t = last.get("t_reached", t_reached)
        return last["status"], last.get("reason", ""), t
    tail = o.stderr_tail.strip().splitlines()
    detail = tail[-1] if tail else "no output"
    return Status.CRASHED.value, f"worker exited with code {o.returncode}: {detail}", t_reached


def assemble(
    spec: CaseSpec,
    problem: CompiledProblem,
    ref: Reference,
    outcomes: Sequence[Outcome],
    settings: Settings,
) -> dict[str, Any]:
    """One record from the raw events of a case's worker processes."""
    full = outcomes[0]
    status, reason, t_reached = _outcome_status(full, settings.budget_s)
    ev: dict[str, Any] = {}
    for e in full.events:
        ev.update(e)
    phases = np.full((len(outcomes), len(PHASES)), np.nan)
    ttfg: list[float] = []
    detail: dict[str, float] = {}
    for i, o in enumerate(outcomes):
        for e in o.events:
            if "phase" in e:
                phases[i, PHASES.index(e["phase"])] = e["s"]
                if i == 0 and e.get("detail"):
                    detail.update(e["detail"])
            if "ttfg_s" in e and _outcome_status(o, settings.budget_s)[0] == "ok":
                ttfg.append(e["ttfg_s"])
    samples = {e["samples"]: e["values"] for e in full.events if "samples" in e}
    stats = ev.get("stats", {})
    rec: dict[str, Any] = {
        "kind": "ode",
        "problem": problem.name,
        "backend": spec.backend,
        "solver": spec.solver,
        "gradient_method": spec.gradient_method,
        "dtype": "float64",
        "rtol": spec.rtol,
        "atol": spec.atol,
        "max_steps": spec.max_steps,
        "options": spec.extra,
        "backend_info": ev.get("backend_info"),
        "case_info": ev.get("case_info"),
        "status": status,
        "reason": reason,
        "t_reached": t_reached,
        "t_end": problem.t_span[1],
        "phase_names": list(PHASES),
        "phases": phases,
        "ttfg_detail": detail,
        "ttfg_samples": ttfg,
        "cold_processes": len(outcomes),
        "solve_samples": samples.get("solve", []),
        "grad_samples": samples.get("grad", []),
        "steps": stats.get("steps"),
        "rejected_steps": stats.get("rejected_steps"),
        "rhs_evals": stats.get("rhs_evals"),
        "jac_evals": stats.get("jac_evals"),
        "lu_decomps": stats.get("lu_decomps"),
        "peak_rss_mb": ev.get("peak_rss_mb"),
        "worker_wall_s": full.wall_s,
        "reference_loss": ref.loss,
        "reference_gradient": ref.gradient,
        "reference_directional": ref.directional_derivatives,
        "reference_method": ref.method,
    }
    y = ev.get("y")
    if y is not None:
        rec["y"] = y
        err = metrics.solution_error(np.asarray(y), np.asarray(ref.y))
        rec["solution_error"] = err["rel_l2"]
        rec.update({f"solution_error_{k}": v for k, v in err.items() if k != "rel_l2"})
    grad = ev.get("gradient")
    if grad is not None and status == Status.OK.value:
        g = np.asarray(grad, dtype=float)
        rec["loss"] = ev.get("loss")
        rec["gradient"] = dict(zip(problem.param_names, g.tolist(), strict=True))
        if ref.directions:
            gerr = metrics.directional_error(g, ref.directions, ref.directional_derivatives)
        else:
            gerr = metrics.gradient_error(
                g, np.asarray(ref.gradient), problem.theta0, problem.log_params
            )
        rec["gradient_error"] = gerr["max_rel"]
        rec["gradient_cosine"] = gerr["cosine"]
        rec["gradient_tier"] = metrics.gradient_tier(gerr["max_rel"])
    return summarize({k: v for k, v in rec.items() if v is not None})


def unavailable_record(problem: CompiledProblem, name: str, reason: str, fix: str) -> dict[str, Any]:
    return summarize({
        "kind": "ode",
        "problem": problem.name,
        "backend": name,
        "solver": "",
        "gradient_method": "",
        "status": Status.UNAVAILABLE.value,
        "reason": f"{reason}. Fix: {fix}" if fix else reason,
    })


Progress = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_case(
    spec: CaseSpec,
    problem: CompiledProblem,
    ref: Reference,
    settings: Settings,
    executor: Executor,
    progress: Progress = _stderr,
) -> dict[str, Any]:
    base_job = {
        "kind": "ode",
        "backend": spec.backend,
        "problem": problem.to_json(),
        "options": {
            "solver": spec.solver,
            "gradient_method": spec.gradient_method,
            "rtol": spec.rtol,
            "atol": spec.atol,
            "max_steps": spec.max_steps,
            "extra": spec.extra,
        },
        "repeats": settings.repeats,
        "warmups": settings.warmups,
        "steady_budget_s": settings.steady_budget_s,
    }
    outcomes: list[Outcome] = []
    for k in range(max(1, settings.cold)):
        mode = "full" if k == 0 else "cold"

        def on_event(e: dict[str, Any], k: int = k) -> None:
            if "phase" in e:
                progress(f"      process {k + 1}: {e['phase']:<11} {e['s']:8.3f} s")
            elif "status" in e and e["status"] != "ok":
                progress(f"      process {k + 1}: {e['status']}: {e.get('reason', '')[:100]}")

        outcome = executor.run({**base_job, "mode": mode}, settings.budget_s, on_event)
        outcomes.append(outcome)
        if _outcome_status(outcome, settings.budget_s)[0] != Status.OK.value:
            break
    return assemble(spec, problem, ref, outcomes, settings)


def run(
    problem: CompiledProblem,
    ref: Reference,
    cases: Sequence[CaseSpec],
    writer: ResultsWriter,
    settings: Settings,
    executor: Executor | None = None,
    progress: Progress = _stderr,
) -> list[dict[str, Any]]:
    """Run every case, writing each record as soon as it exists.

    Raises :class:`Interrupt` on Ctrl-C after marking the file interrupted.
    """
    executor = executor or LocalExecutor(threads=settings.threads)
    done: list[dict[str, Any]] = []
    availability: dict[str, Any] = {}
    with _saved_on_interrupt(writer, done):
        for i, spec in enumerate(cases, 1):
            if spec.backend not in availability:
                availability[spec.backend] = backends.get(spec.backend).availability()
            av = availability[spec.backend]
            if not av.ok:
                if any(r["backend"] == spec.backend for r in done):
                    continue  # one unavailable row per backend is enough
                rec = unavailable_record(problem, spec.backend, av.reason, av.fix)
                progress(f"[{i}/{len(cases)}] {spec.backend}: unavailable ({av.reason})")
            else:
                progress(f"[{i}/{len(cases)}] {problem.name}: {spec.label}")
                rec = run_case(spec, problem, ref, settings, executor, progress)
                progress(f"      -> {rec['status']}" + (f": {rec['reason']}" if rec["reason"] else ""))
            writer.add(rec)
            done.append(rec)
    return done


@contextlib.contextmanager
def _saved_on_interrupt(writer: ResultsWriter, done: list[dict[str, Any]]) -> Iterator[None]:
    """Turn Ctrl-C into :class:`Interrupt` once the file is marked interrupted."""
    try:
        yield
    except (KeyboardInterrupt, Interrupted):
        writer.finish("interrupted")
        raise Interrupt(
            f"interrupted: {len(done)} completed case(s) are saved in {writer.path}"
        ) from None


def cnn_record(job: dict[str, Any], outcome: Outcome, budget_s: float) -> dict[str, Any]:
    """The record a CNN worker reported or, if it died first, a row saying how."""
    from sciml_bench.cnn.train_loop import empty_record

    results = [e["result"] for e in outcome.events if "result" in e]
    if results:
        return results[-1]
    rec = empty_record(job.get("variant", ""), job)
    rec["status"], rec["reason"], _ = _outcome_status(outcome, budget_s)
    return rec


def run_cnn(
    jobs: Sequence[dict[str, Any]],
    writer: ResultsWriter,
    settings: Settings,
    executor: Executor | None = None,
    progress: Progress = _stderr,
) -> list[dict[str, Any]]:
    """CNN baselines: one fresh worker per variant, whose worker returns the record.

    A variant that cannot run here becomes its ``unavailable`` row without a process;
    a worker that crashes or exceeds the budget still leaves a row saying so.
    """
    from sciml_bench import cnn

    executor = executor or LocalExecutor(threads=settings.threads)
    done: list[dict[str, Any]] = []
    available = cnn.variants()
    with _saved_on_interrupt(writer, done):
        for i, job in enumerate(jobs, 1):
            name = job["variant"]
            progress(f"[{i}/{len(jobs)}] cnn: {name} ({job['preset']}, device {job['device']})")
            if not available[name].available:
                rec = cnn.run_variant(job)  # returns the unavailable row, imports nothing
            else:

                def on_event(e: dict[str, Any]) -> None:
                    if "result" in e:
                        r = e["result"]
                        progress(f"      {r.get('status')}: train {r.get('train_s')} s, "
                                 f"accuracy {r.get('accuracy')}")

                outcome = executor.run(job, settings.budget_s, on_event)
                rec = cnn_record(job, outcome, settings.budget_s)
            rec = {**rec, "kind": "cnn"}
            if rec.get("status") != "ok" or rec.get("reason"):
                progress(f"      -> {rec.get('status')}: {rec.get('reason', '')}")
            writer.add(rec)
            done.append(rec)
    return done
