"""The ODE case as a job kind: what its worker does, and the record it makes.

Phases of time-to-first-gradient, measured from the parent's spawn instant
(``job["t_spawn"]``, CLOCK_MONOTONIC):

- ``import``:      interpreter start-up and importing the library;
- ``build``:       compiling the problem for the library;
- ``first_solve``: the first solve, including any JIT compilation;
- ``first_grad``:  the first loss+gradient, including any JIT compilation.

A backend without a gradient (SciPy) reports its time to first solve as its TTFG
(``ttfg_kind = "solve"``). A phase that fails is reported with the seconds spent in it
until the failure; a process that fails keeps the phases it completed, marked partial
(:func:`failure_timing`).

Nothing heavy is imported at module level, so the import phase is the
library's own cost, and the Julia worker can import juliacall before anything
else (it must never follow torch: PythonCall #215).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from sciml_bench.run.events import report_failure
from sciml_bench.run.jobs import Events, Process

PHASES = ("import", "build", "first_solve", "first_grad")


def _watch_progress(case: Any, events: Events, stop: threading.Event) -> None:
    last = None
    while not stop.wait(0.5):
        try:
            t = case.progress_t()
        except Exception:  # progress is best effort; never disturb the case
            return
        if t is not None and t != last:
            events.emit(progress_t=t)
            last = t


def placed(case: Any, wanted: str, backend: str, events: Events, after: str) -> bool:
    """Read back where the library put the case's arrays (``case.placement()``, an ODE or
    an ensemble case) and record it; a device other than ``wanted``, the one the worker
    was pinned to, is an ``error`` naming both. Shared by every ODE-like job kind."""
    from sciml_bench.measure.device import mismatch
    from sciml_bench.measure.status import Status

    try:
        device, name = case.placement()
    except Exception as e:
        report_failure(events, e, f"device read-back after {after}")
        return False
    events.emit(device=device, device_name=name)
    if device != wanted:
        events.emit(status=Status.ERROR.value, during=after,
                    reason=mismatch(backend, after, wanted, device, name))  # fmt: skip
        return False
    return True


def vram_start(device: str | None) -> Any:
    """On a GPU (``device == "cuda"``), NVML's baseline, read before the framework starts,
    and a sampler; else None."""
    if device != "cuda":
        return None
    from sciml_bench.measure.memory import VramBaseline

    vram = VramBaseline.open()
    return (vram, vram.sampler()) if vram is not None else None


def vram_report(meter: Any, case: Any, events: Events) -> None:
    """The case's device-memory peak: NVML relative to the baseline, and the allocator's."""
    if meter is None:
        return
    vram, sampler = meter
    sampler.stop()
    events.emit(
        vram_baseline_mb=vram.baseline_mb,
        vram_max_mb=vram.peak_mb(sampler),
        alloc_peak_mb=case.alloc_peak_mb(),
    )


def device_columns(job: dict[str, Any], ev: dict[str, Any]) -> dict[str, Any]:
    """A record's device keys from its job and worker events: what the library reported
    (read back), what was asked, the GPU or CPU model, and the device-memory peaks."""
    return {
        "device": ev.get("device"),
        "device_requested": job.get("device_requested", job.get("device", "cpu")),
        "device_name": ev.get("device_name"),
        "vram_baseline_mb": ev.get("vram_baseline_mb"),
        "vram_max_mb": ev.get("vram_max_mb"),
        "alloc_peak_mb": ev.get("alloc_peak_mb"),
    }


def with_device_note(rec: dict[str, Any], ran: str) -> dict[str, Any]:
    """``rec`` (with :func:`device_columns`), its reason saying so when a CPU-only backend
    ran on the CPU (``ran``, where the worker ran it) although ``cuda`` was asked for."""
    from sciml_bench.measure.device import cpu_only_note

    if rec["device_requested"] != ran:
        note = cpu_only_note(rec["backend"])
        rec["reason"] = f"{rec['reason']}; {note}" if rec.get("reason") else note
    return rec


def with_dtype_note(rec: dict[str, Any], opts: dict[str, Any]) -> dict[str, Any]:
    """``rec`` with its dtype keys from the job's options (``dtype``, what it computed in;
    ``dtype_requested``; ``dt``, a fixed-step solver's step), its reason saying so when a
    float64-only backend ran in float64 although float32 was asked for."""
    rec["dtype"] = opts.get("dtype", "float64")
    rec["dtype_requested"] = opts.get("dtype_requested", rec["dtype"])
    if opts.get("dt") is not None:
        rec["dt"] = float(opts["dt"])
    if rec["dtype_requested"] != rec["dtype"]:
        note = (f"{rec['backend']} computes in {rec['dtype']} only: it ran in {rec['dtype']} "
                f"({rec['dtype_requested']} was asked for)")  # fmt: skip
        rec["reason"] = f"{rec['reason']}; {note}" if rec.get("reason") else note
    return rec


def load_backend(job: dict[str, Any], events: Events) -> Any:
    """The timed *import* phase of a worker: the job's backend, its library imported
    (None, with an ``unavailable`` event, when Julia cannot be found)."""
    t_spawn = float(job["t_spawn"])
    name = job["backend"]
    detail: dict[str, float] = {}
    if name == "julia":
        # juliacall before numpy, torch or anything else (torch first crashes it);
        # julia_env is stdlib-only and configures juliacall so it never downloads Julia.
        from sciml_bench.backends import julia_env

        try:
            julia_env.import_juliacall()
        except julia_env.JuliaNotFound as e:
            events.emit(status="unavailable", reason=str(e), during="import")
            return None
        detail["juliacall_init"] = julia_env.JULIACALL_IMPORT_S or 0.0

    from sciml_bench import backends
    from sciml_bench.measure.clock import clock

    backend = backends.get(name)
    detail.update(backend.load())
    now = clock()
    events.emit(phase="import", s=now - t_spawn, detail=detail)
    if getattr(backend, "load_info", None):
        events.emit(backend_info=backend.load_info)
    return backend


def case_options(job: dict[str, Any]) -> Any:
    """The :class:`~sciml_bench.backends.base.CaseOptions` of an ODE job (also what
    ``sciml-bench codegen`` prints the program of)."""
    from sciml_bench.backends.base import CaseOptions

    opts = job["options"]
    return CaseOptions(
        solver=opts["solver"],
        gradient_method=opts["gradient_method"],
        rtol=float(opts["rtol"]),
        atol=float(opts["atol"]),
        max_steps=int(opts["max_steps"]),
        extra=opts.get("extra", {}),
        device=job.get("device", "cpu"),
        dtype=opts.get("dtype", "float64"),
        dt=None if opts.get("dt") is None else float(opts["dt"]),
    )


def work(job: dict[str, Any], events: Events) -> None:
    t_spawn = float(job["t_spawn"])
    name = job["backend"]
    meter = vram_start(job.get("device"))
    backend = load_backend(job, events)
    if backend is None:
        return
    import numpy as np

    from sciml_bench.measure.affinity import before_steady
    from sciml_bench.measure.clock import clock, peak_rss_mb
    from sciml_bench.measure.environment import blas_libraries
    from sciml_bench.problem.compiled import CompiledProblem

    problem = CompiledProblem.from_json(job["problem"])
    case = _build(backend, problem, job, events)
    if case is None:
        return
    wanted = job.get("device", "cpu")
    if not placed(case, wanted, name, events, "build"):
        return
    if getattr(case, "info", None):
        events.emit(case_info=case.info)
    theta = np.asarray(problem.theta0, dtype=np.float64)

    solved = _first_solve(case, theta, events)
    if solved is None:
        return
    sol, first = solved[0], {"solve": solved[1]}
    if not placed(case, wanted, name, events, "first solve"):
        return
    full = job.get("mode", "full") == "full"
    if full:
        events.emit(y=sol.y, stats=sol.stats)

    probe_s = 0.0  # the memory probe's own time: never part of time to first gradient
    refused = _refused(backend, case)
    differentiable = backend.differentiable and not refused
    if differentiable:
        graded = _first_gradient(name, case, theta, events, full)
        if graded is None:
            return
        first["grad"], probe_s = graded
    # without a gradient (SciPy) the time to first gradient is the time to first solve
    kind = "gradient" if differentiable else "solve"
    events.emit(ttfg_s=clock() - t_spawn - probe_s, ttfg_kind=kind)
    # after the time to first gradient is read and before the steady samples (each timed on
    # its own): the BLAS this process loaded, which the parent cannot see
    events.emit(blas=blas_libraries())
    before_steady(job, events)  # the steady samples on one core (measure.affinity: why)

    note = _steady(job, case, theta, first, events)
    if note is None:
        return
    if refused:
        note = "; ".join(x for x in (note, f"no gradient: {refused}") if x)
    vram_report(meter, case, events)
    events.emit(peak_rss_mb=peak_rss_mb(), status="ok", reason=note)


def _build(backend: Any, problem: Any, job: dict[str, Any], events: Events) -> Any:
    """The case, its build phase timed (a backend's parts of it too: AMICI's import, code
    generation, C++ compile and load); None once a failure is reported."""
    from sciml_bench.backends.program import refuse_events
    from sciml_bench.measure.clock import clock

    start = clock()
    try:
        refuse_events(backend, problem)
        case = backend.build(problem, case_options(job))
    except Exception as e:
        report_failure(events, e, "build", "build", clock() - start)
        return None
    events.emit(phase="build", s=clock() - start, detail=getattr(case, "build_detail", None) or {})
    return case


def _refused(backend: Any, case: Any) -> str:
    """Why this case gives no gradient though its library can ("" when it gives one): a
    case may refuse it for one problem (libRoadRunner's sensitivities where a parameter
    moves an initial assignment), and its row is then a solve row, like SciPy's, saying why
    (``gradient_refused``), never an unavailable one."""
    return str(getattr(case, "gradient_refused", "") or "") if backend.differentiable else ""


def _first_solve(case: Any, theta: Any, events: Events) -> tuple[Any, float] | None:
    """The first solve, watched for progress in t (for a budget kill's row), and its
    seconds; None once a failure is reported."""
    from sciml_bench.measure.clock import clock

    stop = threading.Event()
    watcher = threading.Thread(target=_watch_progress, args=(case, events, stop), daemon=True)
    watcher.start()
    start = clock()
    try:
        sol = case.solve(theta)
    except Exception as e:
        report_failure(events, e, "first solve", "first_solve", clock() - start)
        return None
    finally:
        stop.set()
        watcher.join(timeout=2.0)  # never leave it inside the library while we move on
    seconds = clock() - start
    events.emit(phase="first_solve", s=seconds)
    return sol, seconds


def _first_gradient(
    name: str, case: Any, theta: Any, events: Events, full: bool
) -> tuple[float, float] | None:
    """The first gradient, its seconds and the memory probe's own seconds (kept out of
    time to first gradient); None once a failure (a NaN or Inf included) is reported."""
    from sciml_bench.measure.clock import clock
    from sciml_bench.measure.memory import CallPeak
    from sciml_bench.measure.status import Status

    ram = CallPeak().start()  # what this gradient call needs above the RSS before it
    start = clock()
    try:
        loss, grad = case.loss_and_grad(theta)
    except Exception as e:
        ram.stop()
        report_failure(events, e, "first gradient", "first_grad", clock() - start)
        return None
    seconds = clock() - start
    events.emit(phase="first_grad", s=seconds)
    grad_rss_mb, grad_rss_source = ram.stop()
    events.emit(grad_rss_mb=grad_rss_mb, grad_rss_source=grad_rss_source)
    bad = _nonfinite_grad(name, loss, grad)
    if bad:
        # A NaN gradient from a "successful" solve is a failure, never a score.
        events.emit(status=Status.NONFINITE.value, reason=bad, during="first gradient")
        return None
    if full:
        events.emit(loss=loss, gradient=grad)
    return seconds, ram.own_s


def _nonfinite_grad(name: str, loss: float, grad: Any) -> str | None:
    """Why a loss and gradient cannot be scored (a NaN or Inf in either), or None."""
    import numpy as np

    if np.isfinite(loss) and np.all(np.isfinite(grad)):
        return None
    return (
        f"{name}: non-finite loss or gradient (loss={loss:.6g}, "
        f"{int(np.sum(~np.isfinite(grad)))} non-finite gradient component(s))"
    )


def _steady(
    job: dict[str, Any], case: Any, theta: Any, first: dict[str, float], events: Events
) -> str | None:
    """Warm-ups, then this process's share of the case's timed repeats
    (:func:`sciml_bench.run.steady.share`), each kind bounded by a time budget and by the
    case's deadline (:func:`sciml_bench.run.steady.take`); ``first`` holds the first
    calls' seconds (``solve``, and ``grad`` for a differentiable backend).

    The clock holds the library's call only (``case.timed_*``), taken back to back; the
    checks (``case.check_*``: status, step statistics, finiteness, conversion to NumPy)
    run after the loop on every sample, warm-ups' included, so a failed sample is
    reported, never counted. The solves keep time for one gradient as long as the first
    took. Returns None when a sample failed or a kind got no sample before the deadline
    (its status is reported), else the row's note: what the deadline cut, or "".
    """
    from sciml_bench.measure.status import SolverFailure, Status
    from sciml_bench.run.steady import Plan, deadline_of, share, take, warmups_of

    def check_grad(raw: Any) -> None:
        loss, g = case.check_grad(raw)
        bad = _nonfinite_grad(job["backend"], loss, g)
        if bad:
            raise SolverFailure(Status.NONFINITE, bad)

    p = job.get("problem", {})
    # what a raw output holds, about: the states at the save points, or the gradient
    width = 4 if job.get("options", {}).get("dtype") == "float32" else 8
    sizes = {"solve": width * len(p.get("t_save", ())) * len(p.get("y0", ())),
             "grad": width * (len(p.get("theta0", ())) + 1)}  # fmt: skip
    params = case.prepare(theta)  # once, as a user holds parameters between calls
    kinds = [("solve", case.timed_solve, case.check_solve, first.get("grad", 0.0))]
    if "grad" in first:
        kinds.append(("grad", case.timed_grad, check_grad, 0.0))
    repeats, budget_s, least = share(job)
    cut: list[str] = []
    for kind, timed, check, reserve_s in kinds:
        plan = Plan(repeats=repeats, warmups=warmups_of(job, kind), budget_s=budget_s,
                    min_samples=least, sample_bytes=sizes[kind], deadline=deadline_of(job),
                    reserve_s=reserve_s, first_s=first[kind], at_least_one=False)  # fmt: skip
        try:
            samples = take(timed, check, params, plan)
        except Exception as e:
            report_failure(events, e, f"steady-state {kind}")
            return None
        events.emit(samples=kind, values=samples)
        if not samples:
            events.emit(**_no_time(job, kind, first[kind], reserve_s))
            return None
        if len(samples) < repeats and not plan.fits(samples[-1]):  # the deadline ended it
            cut.append(f"{len(samples)} of {repeats} {_KIND_WORDS[kind]}")
        elif kind == "grad" and plan.fits(2 * samples[-1]):
            _warm_gradient_memory(timed, check, params, events)
    if not cut:
        return ""
    return (f"steady samples cut short by the {float(job['budget_s']):g} s budget: "
            f"{' and '.join(cut)} samples (--budget S gives each case more)")  # fmt: skip


def _warm_gradient_memory(timed: Any, check: Any, params: Any, events: Events) -> None:
    """What one gradient call needs in RAM once compiled (``grad_warm_rss_mb``): an untimed
    call after the steady samples, under :class:`~sciml_bench.measure.memory.CallPeak`.
    The first call's ``grad_rss_mb`` is mostly the JIT compiler's (XLA's, Julia's); this
    one is the method's own: a forward-sensitivity system's ``n_state x P`` states, an
    adjoint's checkpoints, a backprop tape. Not reported if the call fails (the samples
    before it passed, so the row stays ``ok``)."""
    from sciml_bench.measure.memory import CallPeak

    ram = CallPeak().start()
    try:
        raw = timed(params)
    except Exception:
        ram.stop()
        return
    need_mb, source = ram.stop()
    try:
        check(raw)
    except Exception:
        return
    events.emit(grad_warm_rss_mb=need_mb, grad_warm_rss_source=source)


#: a steady kind, as a row's reason names its samples
_KIND_WORDS = {"solve": "solve", "grad": "gradient"}


def _no_time(job: dict[str, Any], kind: str, call_s: float, reserve_s: float) -> dict[str, Any]:
    """The ``budget_exceeded`` event of a worker that stopped before a steady kind: not
    one sample (about as long as the first call) fits before the case's deadline."""
    from sciml_bench.measure.status import Status

    then = f", then a gradient ({reserve_s:.3g} s)" if reserve_s else ""
    return {
        "status": Status.BUDGET_EXCEEDED.value,
        "reason": (
            f"stopped before the steady {_KIND_WORDS[kind]} samples: one ({call_s:.3g} s, as "
            f"the first){then} would end past the {float(job['budget_s']):g} s budget "
            "(--budget S gives each case more)"
        ),
        "during": f"steady-state {kind}",
    }


def running_phase(events: Sequence[dict[str, Any]]) -> str:
    """The phase a worker was in when its events stop: the first cold phase it did not
    finish, or ``steady state`` once it reported its time to first gradient (a backend
    without a gradient reports that after its first solve)."""
    if any("ttfg_s" in e for e in events):
        return "steady state"
    done = {e["phase"] for e in events if "phase" in e}
    return next((p for p in PHASES if p not in done), "steady state")


#: a failure's ``during`` (as the worker says it) -> the phase's name
DURING = {"import": "import", "build": "build", "first solve": "first_solve",
          "first gradient": "first_grad"}  # fmt: skip


def failure_timing(proc: Process, row: Any) -> dict[str, Any]:
    """What a process that did not end ``ok`` measured before it failed (``row``: its
    phases, NaN where a phase did not finish): the phases are kept and marked partial
    (``phases_partial``); ``partial_ttfg_s`` is the time from spawn to the end of its last
    completed phase (its time to first gradient where it got there: ``ttfg_reached``);
    ``failed_phase`` is the phase that was running, and ``failed_phase_s`` the seconds
    spent in it: as the worker reported them with its failure, or, for a process killed
    at its budget or crashed, its wall time minus what it had completed
    (``failed_phase_s_estimated``)."""
    import numpy as np

    from sciml_bench.measure.status import Status

    if proc.status == Status.OK.value:
        return {}
    out: dict[str, Any] = {}
    ttfg = next((e["ttfg_s"] for e in proc.events if "ttfg_s" in e), None)
    done = float(np.nansum(row)) if np.isfinite(row).any() else None
    if done is not None:
        out.update(phases_partial=True, ttfg_reached=ttfg is not None,
                   partial_ttfg_s=ttfg if ttfg is not None else done)  # fmt: skip
    reported = [e for e in proc.events if "status" in e]
    if reported:
        last = reported[-1]
        during = str(last.get("during", ""))
        out["failed_phase"] = last.get("failed_phase") or DURING.get(during) or (
            "steady state" if during.startswith("steady-state") else during or None
        )
        if last.get("failed_phase_s") is not None:
            out["failed_phase_s"] = last["failed_phase_s"]
    else:  # killed at the budget, or crashed: the worker could not say
        out["failed_phase"] = running_phase(proc.events)
        if proc.wall_s:
            spent = ttfg if ttfg is not None else (done or 0.0)
            out.update(failed_phase_s=max(proc.wall_s - spent, 0.0),
                       failed_phase_s_estimated=True)  # fmt: skip
    return out


def reference_columns(ref: Any, gradient_method: str) -> dict[str, Any]:
    """A row's keys about the reference it is scored against: what ran (``method``), its
    cross-check (which, and its agreement; complex step's, NaN when it did not run, and why
    not), whether the cross-check disagrees beyond ``PASS_TOL / 100``
    (``reference_unverified``), its two tolerances' disagreement,
    where the reference came from, and the notes of a row with nothing to score against."""
    from sciml_bench.measure.metrics import PASS_TOL

    agreement = getattr(ref, "cross_check_agreement", None)
    out: dict[str, Any] = {
        "reference_loss": ref.loss,
        "reference_gradient": ref.gradient,
        "reference_directional": ref.directional_derivatives,
        "reference_method": ref.method,
        "complex_step_agreement": (float("nan") if ref.complex_step_agreement is None
                                   else ref.complex_step_agreement),  # fmt: skip
        "complex_step_skipped": ref.complex_step_skipped or None,
        "reference_cross_check": getattr(ref, "cross_check", "") or None,
        "reference_cross_check_agreement": agreement,
        "reference_tolerance_error": getattr(ref, "tolerance_error", None),
        "reference_unverified": agreement is not None and agreement > PASS_TOL / 100,
        "reference_source": "none" if ref.missing else "cache" if ref.cached else "computed",
        "reference_path": ref.cache_path or None,
    }
    if ref.missing:
        out["solution_error_note"] = f"no reference: {ref.missing}"
    if ref.gradient_missing and gradient_method != "none":
        out["gradient_error_note"] = f"unjudged: the reference failed: {ref.gradient_missing}"
    return out


def _ttfg_kind(gradient_method: str) -> str:
    """What a row's TTFG measures when its worker never said (it failed before): the
    first solve for a backend without a gradient (``none``), else the first gradient."""
    return "solve" if gradient_method == "none" else "gradient"


def cold_phases(processes: Sequence[Process]) -> tuple[Any, list[float], dict[str, float]]:
    """Phases (processes x PHASES, NaN where one did not finish), the time to first
    gradient of every ``ok`` process, and the first process's import breakdown."""
    import numpy as np

    from sciml_bench.measure.status import Status

    phases = np.full((len(processes), len(PHASES)), np.nan)
    ttfg: list[float] = []
    detail: dict[str, float] = {}
    for i, o in enumerate(processes):
        for e in o.events:
            if "phase" in e:
                phases[i, PHASES.index(e["phase"])] = e["s"]
                if i == 0 and e.get("detail"):
                    detail.update(e["detail"])
            if "ttfg_s" in e and o.status == Status.OK.value:
                ttfg.append(e["ttfg_s"])
    return phases, ttfg, detail


def ttfg_columns(processes: Sequence[Process], ttfg: list[float]) -> dict[str, Any]:
    """``ttfg_samples`` (and ``ttfg_cached_samples``, where some processes loaded a
    cached model: :func:`compiled_ttfg`)."""
    built, cached = compiled_ttfg(processes, ttfg)
    return {"ttfg_samples": built, "ttfg_cached_samples": cached or None}


def compiled_ttfg(
    processes: Sequence[Process], ttfg: list[float]
) -> tuple[list[float], list[float]]:
    """``ttfg`` (every ``ok`` process's, in order) split into the processes that built their
    model and those that loaded it from a cache (AMICI's ``model_source``, ``cache``), where
    the row has both: its time to first gradient is the builders' (a cache load is no cold
    start: 1.2 s against a 13.0 s compile at 3 states), the loads kept beside it. Else
    ``(ttfg, [])``: every process compiled, or every one loaded (the row's notes say so)."""
    from sciml_bench.measure.status import Status

    ok = [o for o in processes if o.status == Status.OK.value and
          any("ttfg_s" in e for e in o.events)]  # fmt: skip
    sources = [_model_source(o) for o in ok]
    if len(ok) != len(ttfg) or "cache" not in sources or sources.count("cache") == len(ok):
        return ttfg, []
    built = [t for t, s in zip(ttfg, sources, strict=True) if s != "cache"]
    return built, [t for t, s in zip(ttfg, sources, strict=True) if s == "cache"]


def _model_source(o: Process) -> str | None:
    """Where a process's compiled model came from, where its backend says."""
    return next((e["case_info"].get("model_source") for e in o.events
                 if isinstance(e.get("case_info"), dict)), None)  # fmt: skip


def _model_sources(processes: Sequence[Process]) -> dict[str, Any]:
    """``model_sources``: where each cold process's compiled model came from, where the
    backend says (AMICI's ``case_info.model_source``: ``compiled`` or ``cache``), so a time
    to first gradient that loaded a cached model is never read as a compile; nothing for a
    backend that does not say."""
    found = [_model_source(o) for o in processes]
    return {"model_sources": found} if any(found) else {}


def _samples(processes: Sequence[Process]) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
    """Every process's steady samples per kind (``solve``, ``grad``), in process order, and
    beside them the index of the process that took each (the unit ``compare`` averages
    over within a run)."""
    values: dict[str, list[float]] = {}
    takers: dict[str, list[int]] = {}
    for k, proc in enumerate(processes):
        for e in proc.events:
            if "samples" in e:
                values.setdefault(e["samples"], []).extend(e["values"])
                takers.setdefault(e["samples"], []).extend([k] * len(e["values"]))
    return values, takers


def _scores(problem: Any, ref: Any, ev: dict[str, Any], ok: bool) -> dict[str, Any]:
    """The solution and, for an ``ok`` case, the gradient, scored against the reference
    (nothing scored where it has no solution or no gradient)."""
    import numpy as np


    out: dict[str, Any] = {}
    y = ev.get("y")
    if y is not None:
        out["y"] = y
        if not ref.missing:
            out.update(solution_scores(problem, ref, np.asarray(y)))
    grad = ev.get("gradient")
    if grad is None or not ok:
        return out
    g = np.asarray(grad, dtype=float)
    out["loss"] = ev.get("loss")
    out["gradient"] = dict(zip(problem.param_names, g.tolist(), strict=True))
    out.update(judged_space(g, problem.theta0, problem.log_params))
    if ref.gradient_missing:  # computed, not judged: reference_columns' note says why
        out["gradient_tier"] = "unjudged"
        return out
    out.update(gradient_scores(g, ref.gradient, problem, ref.reference_error))
    return out


def solution_scores(problem: Any, ref: Any, y: Any) -> dict[str, Any]:
    """A solution scored against the reference's on the one measure (each state's scale at
    least the problem's ``atol / rtol``), its worst state named; unjudged, with the
    reason, where the reference's own cross-check could not tell (``solution_unjudged``)."""
    import numpy as np

    from sciml_bench.measure import metrics
    from sciml_bench.problem.solution_measures import floor_of

    floor = floor_of(problem.atol, problem.rtol)
    err = metrics.solution_error(np.asarray(y), np.asarray(ref.y), floor)
    out: dict[str, Any] = {"solution_error": err["rel_l2"], "solution_error_floor": floor}
    out.update({f"solution_error_{k}": v for k, v in err.items()
                if k not in ("rel_l2", "worst_state")})  # fmt: skip
    if err["worst_state"] >= 0:
        out["solution_error_worst_state"] = problem.state_names[err["worst_state"]]
    if getattr(ref, "solution_unjudged", ""):
        out["solution_unjudged"] = ref.solution_unjudged
    return out


def judged_space(g: Any, theta: Any, log_params: Any) -> dict[str, Any]:
    """The gradient as it is judged (``θ_i ∂L/∂θ_i`` for a log-space parameter), the θ it
    was taken at and the factor between the two: what a later re-judge needs."""
    import numpy as np

    from sciml_bench.problem.gradient_measures import judged_scale

    scale = judged_scale(theta, log_params)
    return {"gradient_judged": (np.asarray(g, float) * scale).tolist(),
            "gradient_theta": np.asarray(theta, float).tolist(),
            "gradient_judged_scale": scale.tolist()}  # fmt: skip


def gradient_scores(
    g: Any, reference_gradient: Any, problem: Any, reference_error: float | None
) -> dict[str, Any]:
    """A gradient's scores against a full reference gradient (natural units): the norm-wise
    error and its tier, the worst component by name, the cosine, and the notes."""
    import numpy as np

    from sciml_bench.measure import metrics

    gerr = metrics.gradient_error(np.asarray(g, float), np.asarray(reference_gradient, float),
                                  problem.theta0, problem.log_params)  # fmt: skip
    names = list(problem.param_names)
    worst_name = names[gerr["worst_index"]] if gerr["worst_index"] >= 0 else None
    out: dict[str, Any] = {
        "gradient_error": gerr["rel"],
        "gradient_error_measure": "norm",
        "gradient_worst": gerr["worst"],
        "gradient_worst_at": worst_name,
        "gradient_cosine": gerr["cosine"],
        "gradient_check": "full",
        "reference_error": reference_error,
        "gradient_tier": metrics.gradient_tier(gerr["rel"], reference_error),
    }
    if note := metrics.tier_note(gerr["rel"], reference_error):
        out["gradient_tier_note"] = note
    if note := metrics.suspect_note(gerr["worst"], worst_name or "?", gerr["rel"]):
        out["gradient_suspect_note"] = note
    return out


def sample_columns(processes: Sequence[Process]) -> dict[str, Any]:
    """The steady samples of a case's processes, which process took each kind, and the
    core each process's samples ran on."""
    from sciml_bench.measure.affinity import row_value

    samples, takers = _samples(processes)
    return {
        "cold_processes": len(processes),
        "solve_samples": samples.get("solve", []),
        "grad_samples": samples.get("grad", []),
        "solve_sample_process": takers.get("solve"),
        "grad_sample_process": takers.get("grad"),
        # where each process's steady samples ran (measure.affinity)
        "steady_affinity": row_value([next((e["steady_affinity"] for e in p.events
                                            if "steady_affinity" in e), None)
                                      for p in processes]),
    }


def _work_columns(ev: dict[str, Any]) -> dict[str, Any]:
    """The first solve's step statistics and the full process's memory."""
    stats = ev.get("stats", {})
    return {
        "steps": stats.get("steps"),
        "rejected_steps": stats.get("rejected_steps"),
        "rhs_evals": stats.get("rhs_evals"),
        "jac_evals": stats.get("jac_evals"),
        "lu_decomps": stats.get("lu_decomps"),
        "peak_rss_mb": ev.get("peak_rss_mb"),
        # the first gradient's RAM above the process's RSS before it (measure.memory.CallPeak)
        "grad_rss_mb": ev.get("grad_rss_mb"),
        "grad_rss_source": ev.get("grad_rss_source"),
        # one compiled gradient call's RAM, after the steady samples (_warm_gradient_memory)
        "grad_warm_rss_mb": ev.get("grad_warm_rss_mb"),
        "grad_warm_rss_source": ev.get("grad_warm_rss_source"),
    }


def record(job: dict[str, Any], processes: Sequence[Process]) -> dict[str, Any]:
    """One record from the raw events of a case's worker processes (the first is the
    full one), scored against the reference the job carries."""
    from sciml_bench.measure.status import Status
    from sciml_bench.problem.compiled import CompiledProblem
    from sciml_bench.problem.reference import REFERENCE_VERSION, Reference
    from sciml_bench.results.store import summarize

    problem = CompiledProblem.from_json(job["problem"])
    ref = Reference(**job["reference"])
    opts = job["options"]
    full = processes[0]
    status, reason, t_reached = full.status, full.reason, full.t_reached
    ev: dict[str, Any] = {}
    for e in full.events:
        ev.update(e)
    phases, ttfg, detail = cold_phases(processes)
    rec: dict[str, Any] = {
        "kind": "ode",
        "problem": problem.name,
        "backend": job["backend"],
        "solver": opts["solver"],
        "gradient_method": opts["gradient_method"],
        # the problem's size as the gradient sees it: states, and parameters differentiated
        "n_state": problem.n_state,
        "n_params": problem.n_params,
        "dtype": opts.get("dtype", "float64"),
        # what the library reported (read back); what was asked; the GPU or CPU model
        **device_columns(job, ev),
        "rtol": opts["rtol"],
        "atol": opts["atol"],
        "max_steps": opts["max_steps"],
        "options": opts.get("extra", {}),
        # an array problem's Jacobian kind (dense, sparse, none) and what the library does
        "jacobian": opts.get("extra", {}).get("jacobian"),
        "linear_solver": (ev.get("case_info") or {}).get("linear_solver"),
        "backend_info": ev.get("backend_info"),
        "case_info": ev.get("case_info"),
        # the BLAS/LAPACK libraries the worker had loaded and their threads (threadpoolctl)
        "blas": ev.get("blas"),
        "status": status,
        "reason": reason,
        "t_reached": t_reached,
        "t_end": problem.t_span[1],
        "phase_names": list(PHASES),
        "phases": phases,
        "ttfg_detail": detail,
        **ttfg_columns(processes, ttfg),
        # what the TTFG column measures: a backend without a gradient reports first solve
        "ttfg_kind": ev.get("ttfg_kind") or _ttfg_kind(opts["gradient_method"]),
        **failure_timing(full, phases[0]),
        **sample_columns(processes), **_model_sources(processes),
        **_work_columns(ev),
        "worker_wall_s": full.wall_s,
        **reference_columns(ref, opts["gradient_method"]),
        "reference_version": REFERENCE_VERSION,
        **_scores(problem, ref, ev, status == Status.OK.value),
    }
    rec = with_dtype_note(with_device_note(rec, job.get("device", "cpu")), opts)
    return summarize({k: v for k, v in rec.items() if v is not None})
