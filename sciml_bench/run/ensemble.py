"""The ensemble case as a job kind: one (backend, semantics, size) in one fresh worker.

The worker draws the first ``size`` members (:func:`sciml_bench.problem.ensemble.batch`,
with the observations the runner made once), builds the batched case through the
backend and measures, like the ODE kind:

- TTFG phases ``import``, ``build``, ``first_solve`` and ``first_grad`` (the full batch);
- steady state: raw samples of the timed call alone (``solve_raw`` / ``grad_raw``,
  which return once the result is computed); statuses and finiteness are checked on
  the warm-up and on the last sample, outside the timed region;
- steps and RHS evaluations per member (min/median/max) where the library reports them;
- peak RSS.

Accuracy, against the ensemble reference (:mod:`sciml_bench.problem.ensemble_reference`):
the solution error of the first ``min(size, sample)`` members of the full solve, and the
gradient of a batch of exactly the ``sample`` reference members (same backend, semantics
and solver; the full batch itself when ``size == sample``), computed after the timings.
Throughput (member-solves per second) is derived when reading (:func:`summarize`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sciml_bench.run.events import report_failure
from sciml_bench.run.jobs import Events, Process
from sciml_bench.run.ode import PHASES, load_backend

#: failure text that means the worker ran out of memory (XLA, torch, Python)
OOM_MARKERS = ("MemoryError", "RESOURCE_EXHAUSTED", "Out of memory", "out of memory",
               "can't allocate memory")  # fmt: skip


def _options(job: dict[str, Any]) -> Any:
    from sciml_bench.backends.base import CaseOptions

    o = job["options"]
    return CaseOptions(
        solver=o["solver"], gradient_method=o["gradient_method"], rtol=float(o["rtol"]),
        atol=float(o["atol"]), max_steps=int(o["max_steps"]), extra=o.get("extra", {}),
    )  # fmt: skip


def _spread(a: Any) -> dict[str, float] | None:
    import numpy as np

    if a is None:
        return None
    a = np.asarray(a, dtype=float)
    return {"min": float(a.min()), "median": float(np.median(a)), "max": float(a.max())}


def work(job: dict[str, Any], events: Events) -> None:
    backend = load_backend(job, events)
    if backend is None:
        return
    import numpy as np

    from sciml_bench.backends.base import EnsembleNotOffered
    from sciml_bench.measure.clock import clock, peak_rss_mb
    from sciml_bench.measure.status import Status
    from sciml_bench.problem import ensemble as ens
    from sciml_bench.problem.compiled import CompiledProblem
    from sciml_bench.problem.ensemble_reference import load_observations

    t_spawn = float(job["t_spawn"])
    start = clock()
    problem = CompiledProblem.from_json(job["problem"])
    ensemble = ens.from_json(job["ensemble"])
    n, sample = int(job["size"]), ensemble.sample
    semantics, device = job["semantics"], job.get("device", "cpu")
    obs = load_observations(job.get("observations"), max(n, sample))
    full = ens.batch(ensemble, problem.y0, problem.n_params, max(n, sample), obs)
    options = _options(job)
    try:
        case = backend.build_ensemble(problem, options, full.head(n), semantics, device)
    except EnsembleNotOffered as e:
        events.emit(status=Status.UNAVAILABLE.value, reason=str(e), during="build")
        return
    except Exception as e:
        report_failure(events, e, "build")
        return
    events.emit(phase="build", s=clock() - start)
    if getattr(case, "info", None):
        events.emit(case_info=case.info)
    theta = np.asarray(problem.theta0, dtype=np.float64)

    start = clock()
    try:
        sol = case.check_solve(case.solve_raw(theta))
    except Exception as e:
        report_failure(events, e, "first solve")
        return
    events.emit(phase="first_solve", s=clock() - start)
    k = min(n, sample)
    events.emit(y=sol.y[:k], steps=_spread(sol.steps), rhs_evals=_spread(sol.rhs_evals))
    del sol

    grad = case.differentiable
    if grad:
        start = clock()
        try:
            loss, g = case.check_grad(case.grad_raw(theta))
        except Exception as e:
            report_failure(events, e, "first gradient")
            return
        events.emit(phase="first_grad", s=clock() - start)
        if not (np.isfinite(loss) and np.all(np.isfinite(g))):
            events.emit(status=Status.NONFINITE.value, during="first gradient",
                        reason=f"{job['backend']}: non-finite mean loss or gradient")  # fmt: skip
            return
    events.emit(ttfg_s=clock() - t_spawn)

    try:
        _steady(job, case, theta, grad, events)
    except Exception as e:
        report_failure(events, e, "steady state")
        return
    if grad:
        try:
            check = case if n == sample else backend.build_ensemble(
                problem, options, full.head(sample), semantics, device
            )
            loss, g = check.loss_and_grad(theta)
        except Exception as e:
            report_failure(events, e, "sample gradient")
            return
        events.emit(loss=loss, gradient=g)
    events.emit(peak_rss_mb=peak_rss_mb(), status="ok", reason="")


def _steady(job: dict[str, Any], case: Any, theta: Any, grad: bool, events: Events) -> None:
    """Warm-ups, then timed repeats of the raw call alone, within the steady budget."""
    from sciml_bench.measure.clock import perf

    repeats = int(job.get("repeats", 10))
    warmups = int(job.get("warmups", 1))
    budget = float(job.get("steady_budget_s", 20.0))
    kinds = [("solve", case.solve_raw, case.check_solve)]
    if grad:
        kinds.append(("grad", case.grad_raw, case.check_grad))
    for kind, run, check in kinds:
        for _ in range(warmups):
            check(run(theta))
        samples: list[float] = []
        t_begin = perf()
        raw = None
        while len(samples) < repeats:
            start = perf()
            raw = run(theta)
            samples.append(perf() - start)
            if perf() - t_begin > budget and len(samples) >= 3:
                break
        check(raw)
        del raw
        events.emit(samples=kind, values=samples)


def _status(status: str, reason: str) -> str:
    from sciml_bench.measure.status import Status

    if status in (Status.ERROR.value, Status.CRASHED.value) and any(
        m in reason for m in OOM_MARKERS
    ):
        return Status.OUT_OF_MEMORY.value
    return status


def record(job: dict[str, Any], processes: Sequence[Process]) -> dict[str, Any]:
    """One row from the worker's events, scored against the ensemble reference."""
    import numpy as np

    from sciml_bench.measure import metrics
    from sciml_bench.measure.environment import cpu_model
    from sciml_bench.measure.status import Status
    from sciml_bench.problem.compiled import CompiledProblem
    from sciml_bench.results.store import summarize

    problem = CompiledProblem.from_json(job["problem"])
    ref = job["reference"]
    opts = job["options"]
    proc = processes[0]
    status = _status(proc.status, proc.reason)
    ev: dict[str, Any] = {}
    for e in proc.events:
        ev.update(e)
    phases = np.full((1, len(PHASES)), np.nan)
    detail: dict[str, float] = {}
    for e in proc.events:
        if "phase" in e:
            phases[0, PHASES.index(e["phase"])] = e["s"]
            detail.update(e.get("detail") or {})
    samples = {e["samples"]: e["values"] for e in proc.events if "samples" in e}
    on_cpu = job.get("device", "cpu") == "cpu"
    rec: dict[str, Any] = {
        "kind": "ensemble",
        "problem": problem.name,
        "backend": job["backend"],
        "solver": opts["solver"],
        "gradient_method": opts["gradient_method"],
        "semantics": job["semantics"],
        "size": int(job["size"]),
        # ensembles run on the CPU only today: a ``cuda`` request is an ``unavailable`` row
        "device": "cpu" if on_cpu else None,
        "device_requested": job.get("device", "cpu"),
        "device_name": cpu_model() if on_cpu else None,
        "dtype": "float64",
        "rtol": opts["rtol"],
        "atol": opts["atol"],
        "max_steps": opts["max_steps"],
        "backend_info": ev.get("backend_info"),
        "case_info": ev.get("case_info"),
        "status": status,
        "reason": proc.reason,
        "phase_names": list(PHASES),
        "phases": phases,
        "ttfg_detail": detail,
        "ttfg_samples": [ev["ttfg_s"]] if "ttfg_s" in ev and status == Status.OK.value else [],
        "cold_processes": 1,
        "solve_samples": samples.get("solve", []),
        "grad_samples": samples.get("grad", []),
        "peak_rss_mb": ev.get("peak_rss_mb"),
        "worker_wall_s": proc.wall_s,
        "sample": ref["sample"],
        "reference_loss": ref["loss"],
        "reference_method": ref["method"],
    }
    for key in ("steps", "rhs_evals"):
        spread = ev.get(key)
        if spread:
            rec.update({f"{key}_{s}": v for s, v in spread.items()})
    y = ev.get("y")
    if y is not None:
        y = np.asarray(y, dtype=float)
        k = y.shape[0]
        ry = np.asarray(ref["y"], dtype=float)[:k]
        # rel l2 over every checked member's save points; rel_final over their final states
        ns = y.shape[-1]
        err = metrics.solution_error(y.reshape(-1, ns), ry.reshape(-1, ns))
        rec["solution_error"] = err["rel_l2"]
        rec["solution_error_rel_final"] = metrics.solution_error(y[:, -1], ry[:, -1])["rel_l2"]
        rec["solution_members_checked"] = k
    g = ev.get("gradient")
    if g is not None and status == Status.OK.value:
        g = np.asarray(g, dtype=float)
        rec["loss"] = ev.get("loss")
        if ref.get("directions"):
            gerr = metrics.directional_error(g, ref["directions"], ref["directional_derivatives"])
        else:
            gerr = metrics.gradient_error(
                g, np.asarray(ref["gradient"]), problem.theta0, problem.log_params
            )
            rec["gradient"] = dict(zip(problem.param_names, g.tolist(), strict=True))
        rec["gradient_error"] = gerr["max_rel"]
        rec["gradient_cosine"] = gerr["cosine"]
        rec["gradient_tier"] = metrics.gradient_tier(gerr["max_rel"])
    return summarize({k: v for k, v in rec.items() if v is not None})
