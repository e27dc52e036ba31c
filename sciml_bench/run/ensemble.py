"""The ensemble case as a job kind: one (backend, semantics, size) in one fresh worker.

The worker draws the first ``size`` members (:func:`sciml_bench.problem.ensemble.batch`,
with the observations the runner made once), builds the batched case through the
backend and measures, like the ODE kind:

- TTFG phases ``import``, ``build``, ``first_solve`` and ``first_grad`` (the full batch);
- steady state: raw samples of the timed call alone (``solve_raw`` / ``grad_raw``,
  which return once the result is computed), back to back; statuses and finiteness of
  every sample (and warm-up) are checked after them, outside the timed region, in
  bounded batches, each batch's samples reported as it is checked
  (:mod:`sciml_bench.run.steady`); no call starts that the case's budget cannot hold;
- steps and RHS evaluations per member (min/median/max) where the library reports them;
- peak RSS, and on a GPU the device-memory peaks (NVML over a baseline, the allocator's).

The device: the job's ``device`` (``cpu`` or ``cuda``) pins the worker (the executor's
:func:`~sciml_bench.measure.device.device_env`, as for ODE jobs) and the case is built
there (``options.device``). A CPU-only backend (SciPy) asked for ``cuda`` has a job on
the CPU (:func:`~sciml_bench.run.runner.plan_ensemble`) and its row says so; a backend that can use the GPU but cannot here (a CPU-only torch
build, a JAX without a CUDA backend) is an ``error`` row naming what is missing. Where the
library really put the arrays is read back after build and after the first solve; a
device other than the one the case was built for is an ``error`` naming both.

Accuracy, against the ensemble reference (:mod:`sciml_bench.problem.ensemble_reference`):
the solution error of the first ``min(size, sample)`` members of the timed batch's first
solve, and the gradient of the mean loss over the ``sample`` reference members, computed
after the timings on the timed batch itself (member weights ``1/sample`` on its first
``sample`` members, 0 on the rest: in ``coupled`` mode the shared steps that were timed
are the ones scored); a rung smaller than the sample builds a batch of the ``sample``
members for it, and the row says which (``gradient_batch``). That loss is the one the
reference differentiates, and the row is judged as every ODE row is
(:func:`gradient_columns`: :func:`sciml_bench.run.ode.gradient_scores` against the full
reference gradient, the worst component named, a tier only where the reference's own
error resolves it).
Throughput (member-solves per second) is derived when reading (:func:`summarize`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sciml_bench.run.events import built, report_failure
from sciml_bench.run.jobs import Events, Process
from sciml_bench.run.ode import (
    PHASES,
    cold_phases,
    device_columns,
    load_backend,
    placed,
    sample_columns,
    vram_report,
    vram_start,
    with_device_note,
)

#: failure text that means the worker ran out of memory (XLA, torch, Python)
OOM_MARKERS = ("MemoryError", "RESOURCE_EXHAUSTED", "Out of memory", "out of memory",
               "can't allocate memory")  # fmt: skip


def _options(job: dict[str, Any], device: str) -> Any:
    from sciml_bench.backends.base import CaseOptions

    o = job["options"]
    return CaseOptions(
        solver=o["solver"], gradient_method=o["gradient_method"], rtol=float(o["rtol"]),
        atol=float(o["atol"]), max_steps=int(o["max_steps"]), extra=o.get("extra", {}),
        device=device,
    )  # fmt: skip


def _spread(a: Any) -> dict[str, float] | None:
    import numpy as np

    if a is None:
        return None
    a = np.asarray(a, dtype=float)
    return {"min": float(a.min()), "median": float(np.median(a)), "max": float(a.max())}


def work(job: dict[str, Any], events: Events) -> None:
    where = job.get("device", "cpu")  # the planner put a CPU-only backend on the CPU
    meter = vram_start(where)  # NVML's baseline before the framework starts
    backend = load_backend(job, events)
    if backend is None:
        return
    import numpy as np

    from sciml_bench.backends.base import EnsembleNotOffered
    from sciml_bench.measure.affinity import before_steady
    from sciml_bench.measure.clock import clock, peak_rss_mb
    from sciml_bench.measure.status import Status
    from sciml_bench.problem import ensemble as ens
    from sciml_bench.problem.compiled import CompiledProblem

    name = job["backend"]
    start = clock()
    if where == "cuda":  # inside the build phase: starting CUDA is part of building there
        missing = backend.cuda_missing()
        if missing:
            events.emit(status=Status.ERROR.value, during="build",
                        reason=f"{name}: --device cuda: {missing[0]}. Fix: {missing[1]}")  # fmt: skip
            return
    problem = CompiledProblem.from_json(job["problem"])
    ensemble = ens.from_json(job["ensemble"])
    n, sample = int(job["size"]), ensemble.sample
    obs = ens.load_observations(job.get("observations"), max(n, sample))
    full = ens.batch(ensemble, problem.y0, problem.n_params, max(n, sample), obs)
    options = _options(job, where)
    case = built(lambda: backend.build_ensemble(problem, options, full.head(n), job["semantics"]),
                 EnsembleNotOffered, events)  # fmt: skip
    if case is None:
        return
    events.emit(phase="build", s=clock() - start)
    if not placed(case, where, name, events, "build"):
        return
    if getattr(case, "info", None):
        events.emit(case_info=case.info)
    theta = np.asarray(problem.theta0, dtype=np.float64)
    first = _first_calls(job, case, theta, min(n, sample), events)
    if first is None:
        return
    before_steady(job, events)  # the steady samples on one core (measure.affinity)
    try:
        _steady(job, case, first, events)
    except Exception as e:
        report_failure(events, e, "steady state")
        return
    # the peaks of this case, before the gradient check below may build another one
    vram_report(meter, case, events)
    # a rung's other processes (``cold``) time; its first one's gradient is the one scored
    if case.differentiable and job.get("mode", "full") == "full":
        scored = _check_gradient(backend, case, (problem, options, full, sample), theta, job,
                                 events)  # fmt: skip
        if scored is None:
            return
        events.emit(**scored)
    events.emit(peak_rss_mb=peak_rss_mb(), status="ok", reason="")


def _first_calls(
    job: dict[str, Any], case: Any, theta: Any, k: int, events: Events
) -> dict[str, Any] | None:
    """The first solve and first gradient of the full batch (TTFG phases); the first ``k``
    members' states are reported for the solution error. Returns the prepared
    parameters and what the steady samples need to know, or None after a failure."""
    import numpy as np

    from sciml_bench.measure.clock import clock
    from sciml_bench.measure.status import Status

    name, where = job["backend"], job.get("device", "cpu")
    start = clock()
    try:
        # θ on the device once, as a user holds parameters between calls (as ODE cases)
        params = case.prepare(theta)
        sol = case.check_solve(case.solve_raw(params))
    except Exception as e:
        report_failure(events, e, "first solve")
        return None
    first = {"params": params, "solve_s": clock() - start, "solve_bytes": sol.y.nbytes}
    events.emit(phase="first_solve", s=first["solve_s"])
    if not placed(case, where, name, events, "first solve"):
        return None
    events.emit(y=sol.y[:k], steps=_spread(sol.steps), rhs_evals=_spread(sol.rhs_evals))
    del sol
    if case.differentiable:
        start = clock()
        try:
            loss, g = case.check_grad(case.grad_raw(params))
        except Exception as e:
            report_failure(events, e, "first gradient")
            return None
        first["grad_s"] = clock() - start
        events.emit(phase="first_grad", s=first["grad_s"])
        if not (np.isfinite(loss) and np.all(np.isfinite(g))):
            events.emit(status=Status.NONFINITE.value, during="first gradient",
                        reason=f"{name}: non-finite mean loss or gradient")  # fmt: skip
            return None
    events.emit(ttfg_s=clock() - float(job["t_spawn"]))
    return first


def _steady(job: dict[str, Any], case: Any, first: dict[str, Any], events: Events) -> None:
    """Warm-ups, then timed repeats of the raw call alone on the prepared parameters,
    back to back, within the steady budget (:func:`sciml_bench.run.steady.take`). The raw
    calls return once the device's work is done (synchronised, blocked until ready); every
    output is checked and copied after them, in bounded batches, and each batch's samples
    are reported as it is checked, so a rung killed at its budget keeps them. No call
    starts that the case's budget cannot hold, keeping time for the gradient check."""
    from sciml_bench.run.steady import MIN_SAMPLES, Plan, deadline_of, take

    deadline = deadline_of(job)
    # What must still fit after a kind's samples, from the first calls' durations (their
    # compilation included): after the solves, a gradient sample and the gradient check,
    # each about the last solve times first_grad/first_solve; after the gradients, the
    # check (one more call, or a sample batch to build and compile when the rung is small)
    grad_s = first.get("grad_s", 0.0)
    ratio = max(1.0, grad_s / max(first["solve_s"], 1e-9))
    small = int(job["size"]) < int(job["ensemble"].get("sample", 0))
    kinds = [("solve", case.solve_raw, case.check_solve, first["solve_s"], first["solve_bytes"],
              {"reserve_per_call": 2 * ratio if grad_s else 0.0})]  # fmt: skip
    if case.differentiable:
        kept = {"reserve_s": grad_s} if small else {"reserve_per_call": 1.0}
        kinds.append(("grad", case.grad_raw, case.check_grad, grad_s, 0, kept))
    for kind, run, check, first_s, nbytes, kept in kinds:
        plan = Plan(
            repeats=int(job.get("repeats", 10)), warmups=int(job.get("warmups", 1)),
            budget_s=float(job.get("steady_budget_s", 20.0)), min_samples=MIN_SAMPLES,
            sample_bytes=nbytes, deadline=deadline, first_s=first_s, **kept,
        )  # fmt: skip
        take(run, check, first["params"], plan, _new_samples(events, kind))


def _new_samples(events: Events, kind: str) -> Any:
    """``take``'s batch callback: reports the samples a batch added (``take`` passes all
    so far), so a process's reports add up to its samples as an ODE worker's do."""
    sent = [0]

    def report(values: list[float]) -> None:
        events.emit(samples=kind, values=values[sent[0]:])
        sent[0] = len(values)

    return report


def _check_gradient(
    backend: Any, case: Any, built: tuple[Any, Any, Any, int], theta: Any,
    job: dict[str, Any], events: Events,
) -> dict[str, Any] | None:
    """The mean loss and gradient over the reference's ``sample`` members, for scoring.

    On the timed batch itself when it holds them: member weights ``1/sample`` on its first
    ``sample`` members and 0 on the others, so the solve that was timed (in ``coupled``
    mode, its shared steps) is the one scored. A batch smaller than the sample cannot
    hold them: a batch of the ``sample`` members is built and scored instead, and the
    record says so (``gradient_batch``)."""
    import numpy as np

    problem, options, full, sample = built  # what the case was built from
    n = int(job["size"])
    try:
        if n >= sample:
            w = np.zeros(n)
            w[:sample] = 1.0 / sample
            loss, g = case.check_grad(case.grad_raw(case.prepare(theta, w)))
            where = "timed"
        else:
            other = backend.build_ensemble(problem, options, full.head(sample), job["semantics"])
            loss, g = other.loss_and_grad(theta)
            where = "sample"
    except Exception as e:
        report_failure(events, e, "sample gradient")
        return None
    return {"loss": loss, "gradient": g, "gradient_batch": where, "gradient_members": sample}


def _status(status: str, reason: str) -> str:
    from sciml_bench.measure.status import Status

    if status in (Status.ERROR.value, Status.CRASHED.value) and any(
        m in reason for m in OOM_MARKERS
    ):
        return Status.OUT_OF_MEMORY.value
    return status


def record(job: dict[str, Any], processes: Sequence[Process]) -> dict[str, Any]:
    """One row from the worker's events, scored against the ensemble reference."""
    from sciml_bench.measure.status import Status
    from sciml_bench.problem.compiled import CompiledProblem
    from sciml_bench.problem.ensemble_reference import EnsembleReference
    from sciml_bench.problem.reference import REFERENCE_VERSION
    from sciml_bench.results.store import summarize

    problem = CompiledProblem.from_json(job["problem"])
    ref = EnsembleReference(**job["reference"])
    opts = job["options"]
    proc = processes[0]
    status = _status(proc.status, proc.reason)
    ev: dict[str, Any] = {}
    for e in proc.events:
        ev.update(e)
    phases, ttfg, detail = cold_phases(processes)
    rec: dict[str, Any] = {
        "kind": "ensemble",
        "problem": problem.name,
        "backend": job["backend"],
        "solver": opts["solver"],
        "gradient_method": opts["gradient_method"],
        "semantics": job["semantics"],
        "size": int(job["size"]),
        # what the library reported (read back); what was asked; the GPU or CPU model
        **device_columns(job, ev),
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
        "ttfg_samples": ttfg,
        **sample_columns(processes),
        "peak_rss_mb": ev.get("peak_rss_mb"),
        "worker_wall_s": proc.wall_s,
        "sample": ref.sample,
        **_reference_keys(ref, opts["gradient_method"], REFERENCE_VERSION),
    }
    for key in ("steps", "rhs_evals"):
        spread = ev.get(key)
        if spread:
            rec.update({f"{key}_{s}": v for s, v in spread.items()})
    rec.update(_solution_columns(ev.get("y"), ref, problem))
    if ev.get("gradient") is not None and status == Status.OK.value:
        rec.update({k: ev.get(k) for k in ("loss", "gradient_batch", "gradient_members")})
        rec.update(gradient_columns(ev["gradient"], ref, problem))
    rec = with_device_note(rec, job.get("device", "cpu"))
    return summarize({k: v for k, v in rec.items() if v is not None})


def _reference_keys(ref: Any, gradient_method: str, version: int) -> dict[str, Any]:
    """A row's keys about its reference, as an ODE row's
    (:func:`~sciml_bench.run.ode.reference_columns`: what ran, its cross-check, its
    tolerance pair, where it came from), and ``version``, the reference version in its
    cache key (passed in: this module's workers never import the reference)."""
    from sciml_bench.run.ode import reference_columns

    return {**reference_columns(ref, gradient_method), "reference_version": version}


def _solution_columns(y: Any, ref: Any, problem: Any) -> dict[str, Any]:
    """The solution error of the checked members against the reference sample's, each
    state's scale at least the problem's ``atol / rtol`` (the ODE rows' measure)."""
    import numpy as np

    from sciml_bench.measure import metrics

    if y is None:
        return {}
    y = np.asarray(y, dtype=float)
    k = y.shape[0]
    ry = np.asarray(ref.y, dtype=float)[:k]
    # rel l2 over every checked member's save points; rel_final over their final states
    ns = y.shape[-1]
    floor = float(problem.atol) / float(problem.rtol)  # the rows' per-state floor, as ODE rows
    err = metrics.solution_error(y.reshape(-1, ns), ry.reshape(-1, ns), floor)
    return {
        "solution_error": err["rel_l2"],
        "solution_error_rel_final": metrics.solution_error(y[:, -1], ry[:, -1], floor)["rel_l2"],
        "solution_members_checked": k, "solution_error_floor": floor,
    }


def gradient_columns(g: Any, ref: Any, problem: Any) -> dict[str, Any]:
    """The mean sample loss's gradient ``g`` (natural units) judged as an ODE row's is:
    stored by name and in the judged space (:func:`~sciml_bench.run.ode.judged_space`, what
    a re-judge needs), scored against the ensemble reference's full gradient by
    :func:`~sciml_bench.run.ode.gradient_scores` (norm-wise error, its tier against the
    reference's own error, the worst component by name, the notes); ``unjudged`` where the
    reference has no gradient (``reference_columns``' ``gradient_error_note`` says why).
    ``problem`` gives ``param_names``, ``theta0`` and ``log_params`` (compiled or not)."""
    import numpy as np

    from sciml_bench.run.ode import gradient_scores, judged_space

    g = np.asarray(g, dtype=float)
    out: dict[str, Any] = {
        "gradient": dict(zip(problem.param_names, g.tolist(), strict=True)),
        **judged_space(g, problem.theta0, problem.log_params),
    }
    if ref.gradient_missing or not ref.gradient:
        out["gradient_tier"] = "unjudged"
        return out
    out.update(gradient_scores(g, ref.gradient, problem, ref.reference_error))
    return out
