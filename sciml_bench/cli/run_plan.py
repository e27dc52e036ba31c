"""``run``'s options checked on their own (texts that cannot be read, options that
contradict each other) before anything is loaded, then the plan asked of the run layer
(:func:`sciml_bench.run.plan.make_plan`), its refusals shown as one-line errors."""

from __future__ import annotations

from collections.abc import Sequence

import click

from sciml_bench.cli.options import UserError
from sciml_bench.run import options as run_options
from sciml_bench.run.options import RunError, RunOptions
from sciml_bench.run.plan import RunPlan, make_plan

__all__ = ["RunOptions", "RunPlan", "check_options", "plan_run"]


def plan_run(o: RunOptions) -> RunPlan:
    """Check every option, on its own here and against what exists in the run layer,
    before anything runs; what the planning says (notes, an import's check) goes to
    stderr."""
    check_options(o)
    try:
        return make_plan(o, lambda line: click.echo(line, err=True))
    except RunError as e:
        raise UserError(str(e)) from None


def check_options(o: RunOptions) -> None:
    """The options that need nothing loaded: a problem named, ``--device``,
    ``--precision`` and ``--tolerances`` readable (by the run layer's own parsers),
    ``--t-end`` only with ``--sbml``, ``--jacobian``'s kinds, the Dask options."""
    from sciml_bench.measure import device

    with_cnn = "cnn" in o.problems
    problems = tuple(p for p in o.problems if p != "cnn")
    if not problems and not o.problem_files and not o.sbml_files and not with_cnn:
        raise UserError("name a problem (see `sciml-bench list`) or pass --problem-file PATH")
    try:  # one option, two defaults: ODE cases cpu, the CNN baselines auto
        device.parse(o.device, "cpu")
        device.parse(o.device, "auto")
        run_options.precisions(o.precisions)
        run_options.rtols(o.tolerances, o.sweep)
    except (device.DeviceError, RunError) as e:
        raise UserError(str(e)) from None
    if o.sbml_t_end is not None and not o.sbml_files:
        raise UserError("--t-end applies to --sbml models; none is named in this run "
                        "(a problem file states its own [time] span)")
    _check_jacobians(o.jacobians)
    _check_dask(o)


def _check_dask(o: RunOptions) -> None:
    """The Dask options only with ``--executor dask``, and never contradicting each other."""
    d = o.dask
    if d is None:
        return
    if o.executor != "dask":
        given = [flag for flag, v in (
            ("--scheduler", d.scheduler), ("--cluster slurm", d.cluster == "slurm"),
            ("--workers", d.workers), ("--per-worker", d.per_worker != 1),
            ("--retries", d.retries),
        ) if v]  # fmt: skip
        if given:
            raise UserError(f"{given[0]} applies to --executor dask; add --executor dask")
    if d.scheduler and (d.cluster == "slurm" or d.workers):
        raise UserError(
            "--scheduler connects to running workers: drop --cluster slurm and --workers"
        )


def _check_jacobians(kinds: Sequence[str]) -> None:
    for k in kinds:
        if k not in ("dense", "sparse"):
            raise UserError(f"--jacobian {k!r}: choose dense or sparse (comma-separated)")
