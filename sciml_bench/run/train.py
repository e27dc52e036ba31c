"""Training as a job kind: one backend trains one problem in one fresh worker.

The worker builds the backend's training loop (:meth:`Backend.build_training`: the
library's own optimizer, Adam with the problem's ``[training]`` constants, its idiomatic
loop) and runs ``iterations`` iterations from the problem's initial parameters. Phases of
time to first gradient, from the parent's spawn instant as for ODE jobs:

- ``import``: interpreter start-up and importing the library;
- ``build``: the case and its optimizer;
- ``first_iteration``: the first gradient and update, compilation included.

``ttfg_s`` is the spawn-to-end of the first iteration. The time to the target loss is on
one clock for every backend, from the build's start (:data:`sciml_bench.measure.training.CLOCK`):
the build phase plus the timed iterations, so compilation counts wherever the library does
it (diffsol's JIT and CasADi's functions in the build, JAX's in the first iteration). Each iteration is timed alone
(:meth:`TrainingCase.step`) and checked after the clock (:meth:`TrainingCase.check`:
the solve's status, finiteness, the loss ``L(θ_k)``), so a failed solve ends the
training with its status at that iteration instead of training on garbage. The loss
curve's time axis is the sum of the timed iterations (checks and reporting excluded).

Events, flushed as they happen so that a worker killed at its budget keeps its curve:
``{"curve": [k, seconds so far, L_k], "iteration_s": [...]}`` every ``record_every``
iterations, at the first iteration whose loss reaches the target (with
``target_iteration``) and at the last; ``iteration_s`` holds the timed seconds of every
iteration since the previous such event. After the last iteration, outside every clock,
the backend's own ODE case computes its gradient at the reference curve's iterates
(``{"iterate_gradients": [[k, g_k], ...]}``, or ``{"iterate_gradient_note": why}``): the
record holds them to the reference's gradients there, which the loss curve cannot do
under Adam's normalised steps, on the ODE rows' measure and tiers, against the reference's
own error at each iterate (:func:`iterate_columns`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sciml_bench.run.events import built, report_failure
from sciml_bench.run.jobs import Events, Process
from sciml_bench.run.ode import (
    device_columns,
    load_backend,
    placed,
    vram_report,
    vram_start,
    with_device_note,
)

PHASES = ("import", "build", "first_iteration")


def training_job(
    spec: Any, problem: Any, training: Any, reference_curve: dict[str, Any]
) -> dict[str, Any]:
    """The training job of one case (a runner ``CaseSpec``): the problem, the case's
    options, the ``[training]`` section (cut by ``--quick``) and the reference curve."""
    from sciml_bench import backends

    solver = backends.get(spec.backend).solvers().get(spec.solver)
    return {
        "kind": "train",
        "backend": spec.backend,
        "problem": problem.to_json(),
        "options": {"solver": spec.solver, "gradient_method": spec.gradient_method,
                    "rtol": spec.rtol, "atol": spec.atol, "max_steps": spec.max_steps,
                    "extra": spec.extra},  # fmt: skip
        "device": spec.device,
        "device_requested": spec.device_requested,
        "training": training.to_json(),
        "reference_curve": reference_curve,
        # an explicit solver on a stiff problem: its failure says it cannot train at all
        "stiff_mismatch": bool(problem.stiff and solver is not None and not solver.stiff),
    }


def progress_lines(progress: Any, task: Any) -> Any:
    """The progress lines of a training worker: phases, about ten curve points, the
    iteration that reached the target, and a failure."""
    n = int(task.job["training"]["iterations"])
    every = max(1, n // 10)

    def sink(_: int, e: dict[str, Any]) -> None:
        if "phase" in e:
            progress(f"      {e['phase']:<15} {e['s']:8.3f} s")
        elif "curve" in e:
            it, t, loss = e["curve"]
            if it % every == 0 or "target_iteration" in e or it == n - 1:
                mark = "  target reached" if "target_iteration" in e else ""
                progress(f"      iteration {it:>6}/{n}  loss {loss:<11.4g} {t:9.2f} s{mark}")
        elif "status" in e and e["status"] != "ok":
            progress(f"      {e['status']}: {e.get('reason', '')[:100]}")

    return sink


def _options(job: dict[str, Any]) -> Any:
    from sciml_bench.backends.base import CaseOptions

    o = job["options"]
    return CaseOptions(
        solver=o["solver"], gradient_method=o["gradient_method"], rtol=float(o["rtol"]),
        atol=float(o["atol"]), max_steps=int(o["max_steps"]), extra=o.get("extra", {}),
        device=job.get("device", "cpu"),
    )  # fmt: skip


def work(job: dict[str, Any], events: Events) -> None:
    meter = vram_start(job.get("device"))  # NVML's baseline before the framework starts
    backend = load_backend(job, events)
    if backend is None:
        return
    from sciml_bench.backends.base import TrainingNotOffered
    from sciml_bench.measure.clock import clock, peak_rss_mb
    from sciml_bench.problem.compiled import CompiledProblem
    from sciml_bench.problem.training import Training

    name, wanted = job["backend"], job.get("device", "cpu")
    start = clock()
    problem = CompiledProblem.from_json(job["problem"])
    training = Training.from_json(job["training"])
    case = built(lambda: backend.build_training(problem, _options(job), training.adam),
                 TrainingNotOffered, events)  # fmt: skip
    if case is None:
        return
    events.emit(phase="build", s=clock() - start)
    if not placed(case, wanted, name, events, "build"):
        return
    events.emit(case_info=case.info)
    if not _train(case, training, job, events):
        return
    vram_report(meter, case, events)
    rss = peak_rss_mb()  # the training's, before the check's case is built
    # the training is complete: a kill during the check below costs the check, not the row
    events.emit(training_done=True, peak_rss_mb=rss)
    _iterate_gradients(backend, problem, job, events)
    events.emit(peak_rss_mb=rss, status="ok", reason="")


def _iterate_gradients(backend: Any, problem: Any, job: dict[str, Any], events: Events) -> None:
    """The backend's gradient at each of the reference's check iterates ``θ_k``, by its
    own ODE case with the training's options (untimed, after the training). A failure
    is a note on the row, never the training's status."""
    ref = job.get("reference_curve") or {}
    its, thetas = ref.get("check_iterations") or [], ref.get("check_theta") or []
    if not its:
        return
    import numpy as np

    try:
        case = backend.build(problem, _options(job))
        out = [[int(k), [float(x) for x in np.asarray(case.loss_and_grad(np.asarray(t))[1])]]
               for k, t in zip(its, thetas, strict=True)]  # fmt: skip
    except Exception as e:  # the check's own failure: said on the row
        events.emit(iterate_gradient_note=f"{type(e).__name__}: {e}"[:300])
        return
    events.emit(iterate_gradients=out)


def _train(case: Any, training: Any, job: dict[str, Any], events: Events) -> bool:
    """The iterations, each timed alone and checked after the clock; False when one
    failed (its status is reported) or the device read-back disagreed."""
    from sciml_bench.measure.affinity import before_steady
    from sciml_bench.measure.clock import clock, perf

    n, every, target = training.iterations, training.record_every, training.target_loss
    pending: list[float] = []  # timed seconds not yet reported
    total, reached = 0.0, False
    for k in range(n):
        watch = _first_iteration_watch(case, events) if k == 0 else None
        start = perf()
        try:
            raw = case.step()
            elapsed = perf() - start
            loss = case.check(raw)  # outside the clock; raises on a failed solve
        except Exception as e:
            if pending:  # the iterations that completed keep their times
                events.emit(iteration_s=pending)
            report_failure(events, e, f"training iteration {k} of {n}")
            return False
        finally:
            if watch is not None:
                watch()
        total += elapsed
        pending.append(elapsed)
        if k == 0:
            events.emit(phase="first_iteration", s=elapsed)
            events.emit(ttfg_s=clock() - float(job["t_spawn"]))
            if not placed(case, job.get("device", "cpu"), job["backend"], events,
                          "first iteration"):  # fmt: skip
                return False
            before_steady(job, events)  # the later iterations on one core (measure.affinity)
        first = not reached and loss <= target
        reached = reached or first
        if k % every == 0 or first or k == n - 1:
            events.emit(curve=[k, total, loss], iteration_s=pending,
                        **({"target_iteration": k} if first else {}))  # fmt: skip
            pending = []
    return True


def _first_iteration_watch(case: Any, events: Events) -> Any:
    """During the first iteration, report how far in t the solve got where the library
    tells (an explicit solver stuck on a stiff problem is killed at the budget, and its
    row says how far it got); returns the function that stops the watcher."""
    import threading

    from sciml_bench.run.ode import _watch_progress

    stop = threading.Event()
    watcher = threading.Thread(target=_watch_progress, args=(case, events, stop), daemon=True)
    watcher.start()

    def done() -> None:
        stop.set()
        watcher.join(timeout=2.0)

    return done


def record(job: dict[str, Any], processes: Sequence[Process]) -> dict[str, Any]:
    """The training row from its worker's events: timings, curve, time to target and the
    curve's agreement with the reference curve the job carries."""
    import numpy as np

    from sciml_bench.problem.compiled import CompiledProblem
    from sciml_bench.problem.training import Training
    from sciml_bench.results.store import summarize

    problem = CompiledProblem.from_json(job["problem"])
    training = Training.from_json(job["training"])
    proc = processes[0]
    ev: dict[str, Any] = {}
    for e in proc.events:
        ev.update(e)
    phases = np.full((1, len(PHASES)), np.nan)
    detail: dict[str, float] = {}
    for e in proc.events:
        if e.get("phase") in PHASES:
            phases[0, PHASES.index(e["phase"])] = e["s"]
            detail.update(e.get("detail") or {})
    seconds = [s for e in proc.events for s in e.get("iteration_s", [])]
    curve = [e["curve"] for e in proc.events if "curve" in e]
    opts, adam = job["options"], training.adam
    rec: dict[str, Any] = {
        "kind": "train", "problem": problem.name, "backend": job["backend"],
        "solver": opts["solver"], "gradient_method": opts["gradient_method"],
        "dtype": "float64", **device_columns(job, ev), "rtol": opts["rtol"],
        "atol": opts["atol"], "max_steps": opts["max_steps"], "options": opts.get("extra", {}),
        "backend_info": ev.get("backend_info"), "case_info": ev.get("case_info"),
        "status": proc.status, "t_reached": proc.t_reached, "phase_names": list(PHASES),
        "phases": phases, "ttfg_detail": detail,
        "ttfg_samples": [ev["ttfg_s"]] if "ttfg_s" in ev else [], "cold_processes": 1,
        "optimizer": "adam", "learning_rate": adam.learning_rate, "beta1": adam.beta1,
        "beta2": adam.beta2, "eps": adam.eps, "iterations": training.iterations,
        "record_every": training.record_every, "iterations_done": len(seconds),
        "iteration_samples": seconds, "target_loss": training.target_loss,
        "peak_rss_mb": ev.get("peak_rss_mb"), "worker_wall_s": proc.wall_s,
        "steady_affinity": ev.get("steady_affinity"),
    }  # fmt: skip
    build_s = float(phases[0, PHASES.index("build")])
    rec.update(curve_columns(curve, seconds, ev.get("target_iteration"), build_s))
    rec.update(agreement_columns(rec, job))
    rec.update(iterate_columns(ev, job, problem.log_params, problem.param_names))
    rec["reason"] = _reason(proc, rec, job)
    if ev.get("training_done") and proc.status in ("budget_exceeded", "crashed"):
        # killed during the untimed gradient check, after the training had completed
        rec.update(status="ok", reason="", iterate_gradient_note=f"the check did not finish: "
                   f"{proc.reason}")  # fmt: skip
    rec = with_device_note(rec, job.get("device", "cpu")) if rec.get("device") else rec
    return summarize({k: v for k, v in rec.items() if v is not None})


def curve_columns(
    curve: list[list[float]], seconds: list[float], target_iteration: int | None,
    build_s: float = float("nan"),
) -> dict[str, Any]:  # fmt: skip
    """The stored curve, the first and last losses, and the time to the target, on the
    clock from the build's start (a missing build phase counts as 0 s; the curve's time
    axis shares the clock)."""
    import math

    from sciml_bench.measure.training import CLOCK, time_to_target

    build = build_s if math.isfinite(build_s) else 0.0
    hit = time_to_target(target_iteration, seconds, build)
    return {
        "time_to_target_clock": CLOCK,
        "curve_iteration": [int(c[0]) for c in curve],
        "curve_time_s": [build + float(c[1]) for c in curve],
        "curve_loss": [float(c[2]) for c in curve],
        "first_iteration_s": seconds[0] if seconds else None,
        "initial_loss": float(curve[0][2]) if curve and curve[0][0] == 0 else None,
        "final_loss": float(curve[-1][2]) if curve else None,
        "target_reached": hit.iteration is not None if seconds else None,
        "target_iteration": hit.iteration,
        "time_to_target_s": hit.seconds,
        "time_to_target_warm_s": hit.warm_seconds,
    }


def agreement_columns(rec: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    """The curve held to the reference curve over its first K iterations."""
    from sciml_bench.measure.training import curve_agreement

    ref = job.get("reference_curve") or {}
    losses = ref.get("loss") or []
    k = int(ref.get("iterations", len(losses)))
    a = curve_agreement(rec["curve_iteration"], rec["curve_loss"], losses, k)
    return {
        "reference_curve_loss": losses or None,
        "reference_training_method": ref.get("method"),
        "agreement_iterations": k,
        "curve_compared": a.compared,
        "curve_deviation": a.deviation if a.compared else None,
        "curve_departed_at": a.departed_at,
        "curve_tier": a.tier or None,
    }


def iterate_columns(
    ev: dict[str, Any], job: dict[str, Any], log_params: Any, param_names: Sequence[str] = ()
) -> dict[str, Any]:
    """The backend's gradients at the reference iterates held to the reference's on the ODE
    rows' measure and rule (:func:`~sciml_bench.measure.training.iterate_gradient_check`):
    every iterate's norm-wise error and the reference's own error there, the worst, where,
    its worst component (by name where ``param_names`` are given), and the tier against
    the largest reference error, with the note of an ``unjudged`` one."""
    from sciml_bench.measure.training import iterate_gradient_check

    ref = job.get("reference_curve") or {}
    got = dict((int(k), g) for k, g in ev.get("iterate_gradients") or [])
    its = [k for k in ref.get("check_iterations") or [] if k in got]
    pick = [ref["check_iterations"].index(k) for k in its]
    own = ref.get("check_error") or []
    check = iterate_gradient_check(its, [ref["check_theta"][j] for j in pick],
                                   [ref["check_grad"][j] for j in pick],
                                   [got[k] for k in its], log_params,
                                   [own[j] if j < len(own) else None for j in pick])  # fmt: skip
    worst = check.worst_component
    names = list(param_names)
    return {
        "iterate_gradient_iterations": list(check.iterations) or None,
        "iterate_gradient_errors": list(check.errors) or None,
        "iterate_reference_errors": list(check.reference_errors) or None,
        "iterate_gradient_error": check.worst,
        "iterate_gradient_worst_at": check.worst_at,
        "iterate_reference_error": check.reference_error,
        "iterate_gradient_tier": check.tier or None,
        "iterate_gradient_tier_note": check.tier_note or None,
        "iterate_gradient_worst": None if worst is None else worst[0],
        "iterate_gradient_worst_component": (names[worst[1]] if worst is not None
                                             and 0 <= worst[1] < len(names) else None),  # fmt: skip
        "iterate_gradient_check": "full" if its else None,
        "iterate_reference_method": ref.get("check_method") if its else None,
        "iterate_gradient_note": ev.get("iterate_gradient_note"),
    }


def _reason(proc: Process, rec: dict[str, Any], job: dict[str, Any]) -> str:
    """The worker's reason, saying how far training got when it stopped early and that a
    backend whose first iteration failed cannot train this problem at all."""
    done, n = rec["iterations_done"], rec["iterations"]
    stiff = " (an explicit solver on a stiff problem)" if job.get("stiff_mismatch") else ""
    cannot = f"cannot train: {job['options']['solver']}{stiff}"
    if proc.status in ("budget_exceeded", "crashed"):
        how = proc.reason.split(" during ")[0].split(" (--budget")[0]
        where = ", before the first iteration ended (compilation included)"
        if proc.t_reached is not None:
            where += f"; its solve had reached t={proc.t_reached:g}"
        if done:
            where = f", with {done} of {n} iterations done"
            if rec["curve_iteration"]:
                where += f"; the curve up to iteration {rec['curve_iteration'][-1]} is kept"
        more = " (--budget S gives each case more)" if proc.status == "budget_exceeded" else ""
        prefix = f"{cannot}: " if stiff and not done else ""
        return f"{prefix}{how}{where}{more}"
    if proc.status not in ("ok", "unavailable", "error") and done == 0:
        return f"{cannot} failed the first iteration: {proc.reason}"
    return proc.reason
