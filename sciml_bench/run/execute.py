"""Carrying a run's plan out into one results file: the executor, the results file, each
problem's references (and an ensemble's observations, a training run's reference curve),
its compiled program and cases by kind, and what an interrupted run leaves.

What happens is said through ``say`` (the command line passes stderr); the records and the
file's path come back to be printed. A run stopped by a signal raises :class:`Interrupted`
(the file already marked), an engine it cannot reach or an --out it cannot write a
:class:`~sciml_bench.run.options.RunError`.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from typing import Any

from sciml_bench.run.options import RunError, RunOptions
from sciml_bench.run.plan import RunPlan
from sciml_bench.run.problems import at_size
from sciml_bench.run.sizes import ensemble_sizes, ladder_sizes

#: where the progress lines go (the command line passes stderr)
Say = Callable[[str], None]


class Interrupted(Exception):
    """The run was stopped by a signal (``signum``): every completed case is on disk and
    the file is marked; ``records`` are those cases, ``message`` what to say last."""

    def __init__(self, records: list[dict[str, Any]], message: str, signum: int):
        super().__init__(message)
        self.records = records
        self.message = message
        self.signum = signum


def execute(plan: RunPlan, say: Say) -> tuple[list[dict[str, Any]], Any]:
    """Run the plan into one results file; every finished case is on disk as it ends."""
    executor, close_executor = _open_executor(plan.options, say)  # unreachable: no file
    try:
        return _execute_on(plan, executor, say)
    finally:
        close_executor()


def _open_executor(o: RunOptions, say: Say) -> tuple[Any, Any]:
    """The executor of ``--executor`` (None: the runner's local one) and how to close it."""
    if o.executor != "dask":
        return None, lambda: None
    import contextlib

    from sciml_bench.run import dask as rd

    opts = o.dask or rd.DaskOptions(threads=o.threads)
    stack = contextlib.ExitStack()
    try:
        executor = stack.enter_context(rd.connect(opts))
        say(executor.check())
    except rd.DaskUnavailable as e:
        stack.close()
        raise RunError(str(e)) from None
    except (OSError, TimeoutError) as e:
        stack.close()
        raise RunError(
            f"cannot reach the Dask scheduler at {opts.scheduler}: {e}; start one with "
            "`dask scheduler`, or leave out --scheduler to start a local cluster"
        ) from None
    return executor, stack.close


def _execute_on(plan: RunPlan, executor: Any, say: Say) -> tuple[list[dict[str, Any]], Any]:
    from sciml_bench.run import runner, signals

    writer = _writer(plan.options, plan.label, say)
    if plan.model_checks:  # each --sbml import's check against its file, on the file
        writer.environment["model_checks"] = plan.model_checks
        writer.flush()
    try:
        with signals.stop_signals():  # SIGTERM and SIGHUP end the run as Ctrl-C does
            records = _measure(plan, writer, executor, say)
    except runner.Interrupt as e:
        raise Interrupted(writer.records, str(e), e.signum) from None
    except KeyboardInterrupt as e:  # outside a case, e.g. while building a reference
        sig = signals.signal_of(e)
        writer.finish("interrupted", interrupted_by=sig.name)
        n = len(writer.records)
        raise Interrupted(writer.records, f"interrupted by {sig.name}: {n} completed case(s) "
                          f"are saved in {writer.path}", sig) from None  # fmt: skip
    except Exception:
        # e.g. a reference that cannot be built: keep what was measured, leave no empty file
        if writer.records:
            writer.finish("failed")
        else:  # the `results:` line named it: say it is gone
            writer.path.unlink(missing_ok=True)
            say(f"results: none written (no case finished; {writer.path} removed)")
        raise
    writer.finish("complete")
    return records, writer.path


def _writer(o: RunOptions, label: str, say: Say) -> Any:
    """The run's results file, created now so that a bad --out fails before any work."""
    from sciml_bench.measure import environment
    from sciml_bench.results.store import ResultsWriter, new_path

    path = new_path(o.out, label)
    try:
        writer = ResultsWriter(
            path,
            environment.capture({"worker_threads": o.threads}),
            "sciml-bench " + shlex.join(sys.argv[1:]),
        )
    except OSError as e:
        raise RunError(
            f"cannot write results to {o.out!r}: {e.strerror or e}; choose a writable folder with --out"
        ) from None
    say(f"results: {path}")
    return writer


def _measure(plan: RunPlan, writer: Any, executor: Any, say: Say) -> list[dict[str, Any]]:
    """Every problem's cases, then the CNN jobs, each record written as it ends."""
    from sciml_bench.problem import reference
    from sciml_bench.run import runner

    o = plan.options
    records: list[dict[str, Any]] = []
    for problem in plan.problems:
        if o.train:
            records += _run_training(problem, plan, writer, executor, say)
            continue
        if problem.ensemble is not None:
            records += _run_ensemble(problem, plan, writer, say)
            continue
        if problem.laddered is not None:  # an array problem or a network's width
            records += _run_sized(problem, plan, writer, executor)
            continue
        say(f"reference for {problem.name} ...")
        # a reference that cannot be built leaves rows saying so, not an aborted run
        ref = reference.get_or_missing(problem, refresh=o.refresh_reference)
        say(reference_line(ref))
        remember_reference(writer, problem.name, ref)
        ref = second_reading(problem, ref, writer, say)
        compiled = plan.compile(problem, ref)
        cases = runner.plan(
            compiled, plan.backend_names, o.solvers, o.gradients, plan.rtols, o.max_steps,
            plan.devices, o.dtype or "float64", o.dt,
        )
        records += runner.run(compiled, ref, cases, writer, plan.settings, executor)
    if plan.cnn_jobs:
        records += runner.run_cnn(plan.cnn_jobs, writer, plan.settings, executor)
    return records


def second_reading(problem: Any, ref: Any, writer: Any, say: Say) -> Any:
    """An imported model's reference solution against libRoadRunner's reading of the
    modeller's own file (:mod:`~sciml_bench.problem.sbml.second_interpreter`), said and
    recorded on the file (``environment.model_checks``); where the two disagree the rows'
    solution errors are unjudged, with the reason (the reference is returned so marked). A
    problem file is not checked here (its export's check is the suite's own code twice)."""
    import dataclasses

    if problem.sbml_model is None or ref.missing:
        return ref
    from sciml_bench.problem.sbml import second_interpreter

    check = second_interpreter.cross_check(problem, ref)
    say(f"{problem.name}: {check.summary()}")
    checks = writer.environment.setdefault("model_checks", {})
    checks.setdefault(problem.name, {})["second_interpreter"] = check.to_json()
    writer.flush()
    if check.agreement is None or check.ok or ref.solution_unjudged:
        return ref
    why = (f"the reference solution and libRoadRunner's reading of the SBML file disagree "
           f"({check.summary()}); the import or the reference is wrong, and the rows cannot "
           "be judged against it: `sciml-bench check --sbml FILE` shows both")  # fmt: skip
    return dataclasses.replace(ref, solution_unjudged=why)


def _run_ensemble(problem: Any, plan: RunPlan, writer: Any, say: Say) -> list[dict[str, Any]]:
    """A problem with ``[ensemble]``: its observations and sample reference, then the
    ladders (backend x semantics), rung by rung."""
    from sciml_bench.problem import ensemble as ens
    from sciml_bench.problem import ensemble_reference as er
    from sciml_bench.problem import reference
    from sciml_bench.run import runner

    o = plan.options
    sizes = ensemble_sizes(problem.ensemble.sizes, plan.sizes, o.quick)
    n_obs = max(max(sizes), problem.ensemble.sample)
    say(f"ensemble reference for {problem.name} ...")
    try:
        obs_path = er.observations_path(problem, n_obs)
        ref = er.get(problem, refresh=o.refresh_reference)
    except reference.ReferenceError as e:  # rows that say so; the run goes on
        gone = reference.missing(problem, str(e))
        say(reference_line(gone))
        remember_reference(writer, problem.name, gone)
        compiled = plan.compile(problem, gone)
        ladders = runner.plan_ensemble(
            compiled, problem.ensemble.semantics, sizes, plan.backend_names, o.solvers,
            o.gradients, o.max_steps, plan.devices,
        )  # fmt: skip
        return runner.ensemble_without_reference(compiled, ladders, gone.missing, writer)
    say(reference_line(ref))
    remember_reference(writer, problem.name, ref)
    obs0 = er.load_observations(obs_path, 1)
    compiled = plan.compile(problem, None, None if obs0 is None else obs0[0])
    ladders = runner.plan_ensemble(
        compiled, problem.ensemble.semantics, sizes, plan.backend_names, o.solvers,
        o.gradients, o.max_steps, plan.devices,
    )  # fmt: skip
    return runner.run_ensemble(
        compiled, ens.to_json(problem.ensemble), None if obs_path is None else str(obs_path),
        ref.to_json(), ladders, writer, plan.settings,
    )  # fmt: skip


def _run_sized(problem: Any, plan: RunPlan, writer: Any, executor: Any) -> list[dict[str, Any]]:
    """An array problem: one ladder per backend x solver x Jacobian kind, each size with its
    own reference (cached by the content at that size)."""
    import numpy as np

    from sciml_bench.run import runner

    o = plan.options
    sizes = ladder_sizes(problem.laddered, plan.sizes, o.quick)
    first = problem if problem.laddered.size == sizes[0] else at_size(problem, sizes[0])
    # Planned once, on the first size (no reference needed: observations are placeholders):
    # a ladder keeps one solver, gradient method and Jacobian kind at every size.
    blank = np.zeros((len(first.t_save), first.n_state))
    compiled = plan.compile(first, None, blank)
    ladders = runner.plan_sized(
        compiled, plan.backend_names, sizes, o.solvers, o.gradients, o.jacobians, o.max_steps,
        plan.devices, plan.rtols,
    )  # fmt: skip
    return runner.run_sized(
        problem, ladders, writer, plan.settings, executor, refresh=o.refresh_reference
    )


def _run_training(
    problem: Any, plan: RunPlan, writer: Any, executor: Any, say: Say
) -> list[dict[str, Any]]:
    """A problem's ``[training]`` section (cut by --quick) on every backend: its reference,
    the reference curve (SciPy's gradient in the same Adam loop, cached), then one
    training worker per case."""
    from sciml_bench.problem import reference, training_reference
    from sciml_bench.run import runner

    o = plan.options
    say(f"reference for {problem.name} ...")
    ref = reference.get(problem, refresh=o.refresh_reference)
    say(reference_line(ref))
    training = problem.training.quick(o.quick)
    say(f"training reference for {problem.name}: {training.compared} iterations of Adam "
        "around SciPy's forward-sensitivity gradient ...")  # fmt: skip
    curve = training_reference.get(problem, ref, training, refresh=o.refresh_reference)
    built = "cached" if curve.cached else f"built in {curve.build_s:.1f} s"
    say(f"training reference: {built}" + (f"; {curve.stopped}" if curve.stopped else ""))
    compiled = plan.compile(problem, ref)
    cases = runner.plan(compiled, plan.backend_names, o.solvers, o.gradients, None, o.max_steps,
                        plan.devices)  # fmt: skip
    return runner.run_training(compiled, training, curve.to_json(), cases, writer, plan.settings,
                               executor)  # fmt: skip


def reference_line(ref: Any) -> str:
    """The progress line of a run's reference: built, read from the (shared) cache, or
    missing; its gradient's own error estimate and the cross-check that ran; its solution's
    own check (a second method)."""
    if getattr(ref, "missing", ""):
        return f"reference: none ({ref.missing}); the backends run without one"  # ensembles: rows
    if ref.cached:
        built = (f"read from the cache {ref.cache_path} (shared by every checkout and "
                 "environment of this user; --refresh-reference rebuilds it)")  # fmt: skip
    else:
        built = f"built in {ref.build_s:.1f} s"
    parts = [f"reference: {built}"]
    error, check = getattr(ref, "reference_error", None), getattr(ref, "cross_check", "")
    agreement = getattr(ref, "cross_check_agreement", None)
    if error is not None:
        parts.append(f"its gradient's own error estimate {error:.1e}"
                     + (f" ({check} cross-check: {agreement:.1e})" if check and agreement is not None
                        else ""))  # fmt: skip
    elif ref.complex_step_agreement is None:
        parts.append(f"complex-step cross-check {ref.complex_step_skipped or 'not run'}")
    solution = getattr(ref, "solution_check", "")
    if getattr(ref, "solution_unjudged", ""):
        parts.append(f"its solution UNJUDGED: {ref.solution_unjudged}")
    elif solution and getattr(ref, "solution_check_agreement", None) is not None:
        parts.append(f"its solution checked by {solution} to {ref.solution_check_agreement:.1e}")
    return "; ".join(parts)


def remember_reference(writer: Any, name: str, ref: Any) -> None:
    """The run's environment says, per problem, whether its reference was computed or
    read from the cache, and where (``environment.references``)."""
    refs = writer.environment.setdefault("references", {})
    source = "none" if getattr(ref, "missing", "") else "cache" if ref.cached else "computed"
    refs[name] = {
        "source": source,
        "path": getattr(ref, "cache_path", "") or None,
        "build_s": None if ref.cached else ref.build_s,
        "method": ref.method,
        "complex_step_agreement": ref.complex_step_agreement,
    }
    writer.flush()
