"""Running ``run``'s plan into one results file: the executor, the references, each
kind of problem's cases, and what an interrupted run prints and exits with."""

from __future__ import annotations

import json
import shlex
import signal
import sys
from typing import Any, NoReturn

import click

from sciml_bench.cli.options import UserError, at_size
from sciml_bench.cli.run_plan import RunOptions, RunPlan
from sciml_bench.cli.sizes import ensemble_sizes, ladder_sizes


def _open_executor(o: RunOptions) -> tuple[Any, Any]:
    """The executor of ``--executor`` (None: the runner's local one) and how to close it."""
    if o.executor != "dask":
        return None, lambda: None
    import contextlib

    from sciml_bench.run import dask as rd

    opts = o.dask or rd.DaskOptions(threads=o.threads)
    stack = contextlib.ExitStack()
    try:
        executor = stack.enter_context(rd.connect(opts))
        click.echo(executor.check(), err=True)
    except rd.DaskUnavailable as e:
        stack.close()
        raise UserError(str(e)) from None
    except (OSError, TimeoutError) as e:
        stack.close()
        raise UserError(
            f"cannot reach the Dask scheduler at {opts.scheduler}: {e}; start one with "
            "`dask scheduler`, or leave out --scheduler to start a local cluster"
        ) from None
    return executor, stack.close


def execute(plan: RunPlan, o: RunOptions) -> tuple[list[dict[str, Any]], Any]:
    """Run the plan into one results file; every finished case is on disk as it ends."""
    executor, close_executor = _open_executor(o)  # an engine it cannot reach leaves no file
    try:
        return _execute_on(plan, o, executor)
    finally:
        close_executor()


def _execute_on(plan: RunPlan, o: RunOptions, executor: Any) -> tuple[list[dict[str, Any]], Any]:
    from sciml_bench.run import runner, signals

    writer = _writer(o, plan.label)
    if plan.model_checks:  # each --sbml import's check against its file, on the file
        writer.environment["model_checks"] = plan.model_checks
        writer.flush()
    try:
        with signals.stop_signals():  # SIGTERM and SIGHUP end the run as Ctrl-C does
            records = _measure(plan, o, writer, executor)
    except runner.Interrupt as e:
        _interrupted(writer.records, str(e), e.signum, o.as_json, o.gradient_rtol)
    except KeyboardInterrupt as e:  # outside a case, e.g. while building a reference
        sig = signals.signal_of(e)
        writer.finish("interrupted", interrupted_by=sig.name)
        n = len(writer.records)
        _interrupted(writer.records, f"interrupted by {sig.name}: {n} completed case(s) are "
                     f"saved in {writer.path}", sig, o.as_json, o.gradient_rtol)  # fmt: skip
    except Exception:
        # e.g. a reference that cannot be built: keep what was measured, leave no empty file
        if writer.records:
            writer.finish("failed")
        else:  # the `results:` line named it: say it is gone
            writer.path.unlink(missing_ok=True)
            click.echo(f"results: none written (no case finished; {writer.path} removed)",
                       err=True)  # fmt: skip
        raise
    writer.finish("complete")
    return records, writer.path


def _writer(o: RunOptions, label: str) -> Any:
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
        raise UserError(
            f"cannot write results to {o.out!r}: {e.strerror or e}; choose a writable folder with --out"
        ) from None
    click.echo(f"results: {path}", err=True)
    return writer


def _measure(plan: RunPlan, o: RunOptions, writer: Any, executor: Any) -> list[dict[str, Any]]:
    """Every problem's cases, then the CNN jobs, each record written as it ends."""
    from sciml_bench.problem import reference
    from sciml_bench.run import runner

    records: list[dict[str, Any]] = []
    for problem in plan.problems:
        if o.train:
            records += _run_training(problem, plan, o, writer, executor)
            continue
        if problem.ensemble is not None:
            records += _run_ensemble(problem, plan, o, writer)
            continue
        if problem.laddered is not None:  # an array problem or a network's width
            records += _run_sized(problem, plan, o, writer, executor)
            continue
        click.echo(f"reference for {problem.name} ...", err=True)
        # a reference that cannot be built leaves rows saying so, not an aborted run
        ref = reference.get_or_missing(problem, refresh=o.refresh_reference)
        click.echo(_reference_line(ref), err=True)
        remember_reference(writer, problem.name, ref)
        compiled = reference.compile_problem(problem, ref, sbml=_amici(plan))
        cases = runner.plan(
            compiled, plan.backend_names, o.solvers, o.gradients, plan.rtols, o.max_steps,
            plan.devices, o.dtype or "float64", o.dt,
        )
        records += runner.run(compiled, ref, cases, writer, plan.settings, executor)
    if plan.cnn_jobs:
        records += runner.run_cnn(plan.cnn_jobs, writer, plan.settings, executor)
    return records


def print_records(
    records: list[dict[str, Any]], as_json: bool, gradient_rtol: float | None = None
) -> None:
    """The records as ``run`` prints them: the table, or JSON with ``--json``; the verdicts
    judged against ``--gradient-rtol``."""
    from sciml_bench.results.table import json_records, table

    if as_json:
        click.echo(json.dumps(json_records(records, gradient_rtol), indent=2, default=str))
    else:
        click.echo(table(records, gradient_rtol))


def _interrupted(records: list[dict[str, Any]], message: str, signum: int, as_json: bool,
                 gradient_rtol: float | None = None) -> NoReturn:  # fmt: skip
    """Print what completed, as a finished run would (table or JSON); exit 128 + signal."""
    from sciml_bench.run.signals import exit_status

    if as_json or records:  # an interrupted run with no rows prints no empty table
        print_records(records, as_json, gradient_rtol)
    click.echo(message, err=True)
    sys.exit(exit_status(signal.Signals(signum)))


def _run_ensemble(problem: Any, plan: RunPlan, o: RunOptions, writer: Any) -> list[dict[str, Any]]:
    """A problem with ``[ensemble]``: its observations and sample reference, then the
    ladders (backend x semantics), rung by rung."""
    from sciml_bench.problem import ensemble as ens
    from sciml_bench.problem import ensemble_reference as er
    from sciml_bench.problem import reference
    from sciml_bench.run import runner

    sizes = ensemble_sizes(problem.ensemble.sizes, plan.sizes, o.quick)
    n_obs = max(max(sizes), problem.ensemble.sample)
    click.echo(f"ensemble reference for {problem.name} ...", err=True)
    try:
        obs_path = er.observations_path(problem, n_obs)
        ref = er.get(problem, refresh=o.refresh_reference)
    except reference.ReferenceError as e:  # rows that say so; the run goes on
        gone = reference.missing(problem, str(e))
        click.echo(_reference_line(gone), err=True)
        remember_reference(writer, problem.name, gone)
        compiled = reference.compile_problem(problem, gone, sbml=_amici(plan))
        ladders = runner.plan_ensemble(
            compiled, problem.ensemble.semantics, sizes, plan.backend_names, o.solvers,
            o.gradients, o.max_steps, plan.devices,
        )  # fmt: skip
        return runner.ensemble_without_reference(compiled, ladders, gone.missing, writer)
    click.echo(_reference_line(ref), err=True)
    remember_reference(writer, problem.name, ref)
    obs0 = er.load_observations(obs_path, 1)
    compiled = reference.compile_problem(problem, None, None if obs0 is None else obs0[0],
                                         sbml=_amici(plan))  # fmt: skip
    ladders = runner.plan_ensemble(
        compiled, problem.ensemble.semantics, sizes, plan.backend_names, o.solvers,
        o.gradients, o.max_steps, plan.devices,
    )  # fmt: skip
    return runner.run_ensemble(
        compiled, ens.to_json(problem.ensemble), None if obs_path is None else str(obs_path),
        ref.to_json(), ladders, writer, plan.settings,
    )  # fmt: skip


def _run_sized(
    problem: Any, plan: RunPlan, o: RunOptions, writer: Any, executor: Any
) -> list[dict[str, Any]]:
    """An array problem: one ladder per backend x solver x Jacobian kind, each size with its
    own reference (cached by the content at that size)."""
    import numpy as np

    from sciml_bench.problem import reference
    from sciml_bench.run import runner

    sizes = ladder_sizes(problem.laddered, plan.sizes, o.quick)
    first = problem if problem.laddered.size == sizes[0] else at_size(problem, sizes[0])
    # Planned once, on the first size (no reference needed: observations are placeholders):
    # a ladder keeps one solver, gradient method and Jacobian kind at every size.
    blank = np.zeros((len(first.t_save), first.n_state))
    compiled = reference.compile_problem(first, None, blank, sbml=_amici(plan))
    ladders = runner.plan_sized(
        compiled, plan.backend_names, sizes, o.solvers, o.gradients, o.jacobians, o.max_steps,
        plan.devices, plan.rtols,
    )  # fmt: skip
    return runner.run_sized(
        problem, ladders, writer, plan.settings, executor, refresh=o.refresh_reference
    )


def _run_training(
    problem: Any, plan: RunPlan, o: RunOptions, writer: Any, executor: Any
) -> list[dict[str, Any]]:
    """A problem's ``[training]`` section (cut by --quick) on every backend: its reference,
    the reference curve (SciPy's gradient in the same Adam loop, cached), then one
    training worker per case."""
    from sciml_bench.problem import reference, training_reference
    from sciml_bench.run import runner

    click.echo(f"reference for {problem.name} ...", err=True)
    ref = reference.get(problem, refresh=o.refresh_reference)
    click.echo(_reference_line(ref), err=True)
    training = problem.training.quick(o.quick)
    click.echo(f"training reference for {problem.name}: {training.compared} iterations of Adam "
               "around SciPy's forward-sensitivity gradient ...", err=True)  # fmt: skip
    curve = training_reference.get(problem, ref, training, refresh=o.refresh_reference)
    built = "cached" if curve.cached else f"built in {curve.build_s:.1f} s"
    click.echo(f"training reference: {built}" + (f"; {curve.stopped}" if curve.stopped else ""),
               err=True)  # fmt: skip
    compiled = reference.compile_problem(problem, ref, sbml=_amici(plan))
    cases = runner.plan(compiled, plan.backend_names, o.solvers, o.gradients, None, o.max_steps,
                        plan.devices)  # fmt: skip
    return runner.run_training(compiled, training, curve.to_json(), cases, writer, plan.settings,
                               executor)  # fmt: skip


def _amici(plan: RunPlan) -> bool:
    """Whether the run's problems need their SBML model: only AMICI runs it, and at 20,000
    states writing it costs seconds (:func:`.reference.source_targets`)."""
    return "amici" in plan.backend_names


def _reference_line(ref: Any) -> str:
    """The progress line of a run's reference: built, read from the (shared) cache, or
    missing; and what its complex-step cross-check found."""
    if getattr(ref, "missing", ""):
        return f"reference: none ({ref.missing}); the backends run without one"  # ensembles: rows
    if ref.cached:
        built = (f"read from the cache {ref.cache_path} (shared by every checkout and "
                 "environment of this user; --refresh-reference rebuilds it)")  # fmt: skip
    else:
        built = f"built in {ref.build_s:.1f} s"
    if ref.complex_step_agreement is None:
        skipped = getattr(ref, "complex_step_skipped", "") or "not run"
        return f"reference: {built}; complex-step cross-check {skipped}"
    return f"reference: {built}; FD vs complex step agree to {ref.complex_step_agreement:.1e}"


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
