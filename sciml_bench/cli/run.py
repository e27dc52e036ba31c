"""The ``run`` command: its options and help, and what it prints.

:mod:`~sciml_bench.cli.run_plan` checks the options and asks the run layer for the plan
(:mod:`sciml_bench.run.plan`); :mod:`sciml_bench.run.execute` carries it out, its progress
lines said here on stderr, and the records come back only to be printed (the table or
JSON, an interrupted run's exit status)."""

from __future__ import annotations

import json
import signal
import sys
from typing import Any, NoReturn

import click

from sciml_bench.cli.options import (
    BACKEND_NAMES,
    UserError,
    comma_list,
    gradient_rtol_option,
    load_limit_option,
    sbml_set_option,
)
from sciml_bench.cli.run_plan import RunOptions, plan_run
from sciml_bench.run.options import RunError
from sciml_bench.run.plan import RunPlan


def _dask_options(f: Any) -> Any:
    """``run``'s options for running the cases on Dask (see docs/clusters.md)."""
    opts = [
        click.option("--executor", type=click.Choice(["local", "dask"]), default="local",
                     show_default=True, help="Run cases here, one by one, or on Dask workers."),
        click.option("--scheduler", metavar="ADDRESS",
                     help="Dask: a running scheduler (tcp://host:8786); default: start one."),
        click.option("--cluster", type=click.Choice(["local", "slurm"]), default="local",
                     show_default=True, help="Dask without --scheduler: a LocalCluster here, "
                     "or Slurm jobs through dask-jobqueue."),
        click.option("--workers", type=click.IntRange(1, 4096),
                     help="Dask LocalCluster workers [1: one case at a time on this "
                     "machine; more time cases side by side on shared cores]."),
        click.option("--per-worker", type=click.IntRange(1, 1024), default=1, show_default=True,
                     help="Dask: cases one worker runs at once (more than 1 shares its cores)."),
        click.option("--retries", type=click.IntRange(0, 100), default=0, show_default=True,
                     help="Dask: re-run a case whose worker died, up to N times (recorded)."),
        click.option("--slurm-jobs", type=click.IntRange(1, 10_000), default=1,
                     show_default=True, help="Slurm: jobs, one Dask worker each."),
        click.option("--slurm-cores", type=click.IntRange(1, 4096), default=4,
                     show_default=True, help="Slurm: cores per job."),
        click.option("--slurm-memory", default="8GB", show_default=True,
                     help="Slurm: memory per job."),
        click.option("--slurm-walltime", default="01:00:00", show_default=True,
                     help="Slurm: walltime per job."),
        click.option("--slurm-gpus", type=click.IntRange(0, 64), default=0, show_default=True,
                     help="Slurm: GPUs per job (--gres=gpu:N)."),
        click.option("--slurm-queue", help="Slurm: partition (-p)."),
        click.option("--slurm-account", help="Slurm: account (-A)."),
    ]  # fmt: skip
    for opt in reversed(opts):
        f = opt(f)
    return f


@click.command()
@click.argument("problems", nargs=-1)
@click.option("--problem-file", "problem_files", multiple=True, type=click.Path(),
              help="Run your own problem file (TOML); repeatable.")
@click.option("--sbml", "sbml_files", multiple=True, type=click.Path(),
              help="Run an SBML model, as `sciml-bench import` would write it; repeatable.")
@click.option("--t-end", "sbml_t_end", type=click.FloatRange(0, None, min_open=True),
              default=None, help="--sbml models: the end of the time span, as `sciml-bench "
              "import --t-end` [the last measurement time of a PEtab problem beside the file, "
              "else 10].")
@sbml_set_option("sbml_settings", "--sbml models: ")
@click.option("--sbml-check/--no-sbml-check", "sbml_check", default=True, show_default=True,
              help="--sbml models: check each import against its file before anything runs "
              "(each differentiated parameter changed in the SBML, re-imported, solved; where "
              "states x parameters <= 1,000); a disagreement refuses the model.")
@click.option("-b", "--backend", "backend_names", multiple=True, callback=comma_list,
              help="Backend(s) to run, repeated or comma-separated (default: all of "
              f"{', '.join(BACKEND_NAMES)}). See `sciml-bench list`.")
@click.option("--solver", "solvers", multiple=True, callback=comma_list,
              help="Solver name(s), repeated or comma-separated; each applies to the "
              "backends that offer it.")
@click.option("--gradient", "gradients", multiple=True, callback=comma_list,
              help="Gradient method(s), repeated or comma-separated, e.g. BacksolveAdjoint; "
              "'all': every method each backend offers, each its own row. "
              "cvodes, diffsol and amici: forward or adjoint; their default is forward up to 64 "
              "parameters and adjoint above (their guides: forward sensitivities for few "
              "parameters, the adjoint for many).")
@click.option("--tolerances", help="Comma-separated rtols; atol keeps the problem's ratio. "
              "Array problems: one ladder per rtol.")
@click.option("--sweep", is_flag=True, help="Work-precision ladder rtol 1e-3 ... 1e-9.")
@click.option("--cold", type=click.IntRange(1, 50), default=None,
              help="Fresh processes per case: each gives a time to first gradient and a "
              "share of the steady repeats [3; quick: 1]. A ladder's rung (--sizes, "
              "ensembles) runs them where it is cheap (its process expected under 45 s), "
              "else one; a rung's other processes run after every ladder's first pass, "
              "interleaved across the ladders.")
@click.option("--repeats", type=click.IntRange(1, 10_000), default=None,
              help="Timed steady-state repeats of solve and of gradient, shared by the "
              "case's --cold processes [10; quick: 3].")
@click.option("--budget", type=click.FloatRange(1, None), default=None,
              help="Wall-clock seconds per worker process: its steady samples end before "
              "it (the row notes a cut), and a process still running then is killed with "
              "its group [300; --train 900; quick 120].")
@click.option("--max-steps", type=click.IntRange(10, 10**9), default=None,
              help="Override the problem's shared step bound.")
@click.option("--threads", type=click.IntRange(1, 1024), default=None,
              help="Threads for every framework in the workers (OMP/MKL/TF/Julia, and XLA "
              "through PJRT_NPROC); each row records the threads JAX used. Default: each "
              "library's own choice; CNN baselines: the cores free at the start.")
@click.option("--pin/--no-pin", default=True,
              help="After its cold phases, pin every thread of a worker to the core others "
              "use least for its steady samples (one mode instead of a 2.5x split between "
              "processes; docs/measurements.md). --no-pin: every core [pin].")
@click.option("--quick", is_flag=True, help="CI sizes: 1 cold process, 3 repeats, short budgets.")
@click.option("--out", type=click.Path(file_okay=False), default="results", show_default=True,
              help="Folder for the results file.")
@click.option("--refresh-reference", is_flag=True, help="Rebuild the cached reference.")
@click.option("--device", default=None, metavar="cpu|cuda|auto|cpu,cuda",
              help="Where every case runs; a comma list runs each case once per device, "
              "as separate rows. Default: cpu for ODE problems (small systems are "
              "latency-bound, the GPU loses there), auto for the CNN baselines. auto picks "
              "cuda when NVML sees a GPU and says so. cuda never falls back to the CPU: no "
              "GPU or no CUDA build of a framework is an error with the fix. SciPy and "
              "Julia run only on the CPU; under cuda their rows say so.")
@click.option("--dtype", type=click.Choice(["float64", "float32"]), default=None,
              help="Floating-point type of the solve, loss and gradient [float64]. "
              "torchdiffeq, torchode, Diffrax and Julia compute in float32; SciPy, cvodes, "
              "diffsol and amici are float64-only: they run in float64 and their rows say so. "
              "The reference stays float64 and adaptive, so the error columns show what "
              "float32 costs (docs/backends.md: float32 and fixed steps).")
@click.option("--dt", type=click.FloatRange(0, None, min_open=True), default=None,
              help="Step of a fixed-step solver (no error control; `sciml-bench list` marks "
              "them: torchdiffeq euler/rk4, Diffrax Euler/Tsit5-fixed, torchode "
              "euler/tsit5-fixed, Julia Tsit5-fixed), required with one and refused with an "
              "adaptive one; recorded per row. A dt needing more steps than the step bound "
              "(--max-steps) is a max_steps row.")
@click.option("--dataset", type=click.Choice(["synthetic", "digits"]), default="synthetic",
              show_default=True, help="CNN baselines: in-memory synthetic data or sklearn digits.")
@click.option("--image-size", type=click.IntRange(4, 4096), help="CNN: image side in pixels.")
@click.option("--channels", type=click.IntRange(1, 64), help="CNN: image channels.")
@click.option("--batch-size", type=click.IntRange(1, 65536), help="CNN: batch size.")
@click.option("--steps", type=click.IntRange(1, 10**6), help="CNN: steps per epoch.")
@click.option("--epochs", type=click.IntRange(1, 1000), help="CNN: measured epochs.")
@click.option("--model", "cnn_model", type=click.Choice(["small", "resnet18"]), default=None,
              help="CNN: architecture [small]; resnet18 is CIFAR-style, at 32x32 unless "
              "--image-size (--quick keeps its 16x16x1, --dataset digits 8x8x1).")
@click.option("--pipeline", type=click.Choice(["device", "host"]), default=None,
              help="CNN: batches on the device before timing, or each framework's loader "
              "from host memory [device].")
@click.option("--precision", "precisions",
              help="CNN: comma list of fp32, tf32, bf16; each runs [tf32: TF32 as on GPUs].")
@click.option("--target-accuracy", type=click.FloatRange(0, 1, min_open=True),
              help="CNN: held-out accuracy whose training time to reach is recorded.")
@click.option("--eval-every", type=click.IntRange(1, 10**6),
              help="CNN: evaluate every N steps for the accuracy curve [each epoch's end].")
@click.option("--json", "as_json", is_flag=True, help="Print the case records as JSON on stdout.")
@click.option("--sizes", help="Ensembles: comma-separated member counts, overriding the "
              "problem's [ensemble] sizes (quick: its sizes up to 64). Array problems "
              "([sizes]): values of the problem's own size variable, not state counts (e.g. "
              "N, the side of a 2-D grid of 2 states: 2N² states; n groups of 3 states: 3n); "
              "`sciml-bench list` shows each ladder value with its states (quick: the "
              "ladder's first two).")
@click.option("--jacobian", "jacobians", multiple=True, callback=comma_list,
              help="Array problems: dense and/or sparse (repeated or comma-separated), for "
              "the libraries that offer both [both].")
@click.option("--train", is_flag=True, help="Train each problem's [training] section (Adam, "
              "to its target loss) on every backend instead of timing solve and gradient "
              "(quick: 5 iterations).")
@click.option("--interleave/--no-interleave", default=None,
              help="Run the cases' fresh processes in a seeded random order across the "
              "cases, in rounds (every case's process 1, shuffled; then every case's "
              "process 2, ...), instead of case after case: each case's cold processes "
              "and their shares of the steady samples are spread over the whole run, so "
              "the machine's drift over minutes falls on every case alike. Nothing a row "
              "measures changes (every process is as fresh as before); each row is saved "
              "once its last process ran, and the order is recorded in the file "
              "(environment `schedules`, each row's `schedule_slots`). Default: on, except "
              "with --executor dask (a case's processes must share a machine: refused "
              "there). With one case, or one process a case (--cold 1, --quick, --sweep), "
              "there is nothing to spread: the cases run in order. A ladder's (--sizes, "
              "ensembles) rungs run their first processes in order (its next size depends on "
              "the last), a cheap rung's others in seeded rounds after them (--seed too); "
              "--train and CNN jobs run in order.")
@click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=None,
              help="Seed of the --interleave order, to replay one [a fresh seed per run, "
              "printed and recorded].")
@gradient_rtol_option
@load_limit_option
@_dask_options
def run(**options: Any) -> None:
    """Benchmark PROBLEMS (names from `sciml-bench list`) on every available backend
    (torchdiffeq, torchode, Diffrax, Julia, SciPy, ...: -b picks; `sciml-bench list`
    shows each one's solvers and gradient methods).

    The name `cnn` runs the CNN training baselines instead (torch-eager,
    torch-compile, jax, tensorflow; select with -b), each variant in a fresh
    worker, recording time to first step, warm-up and measured epochs,
    throughput, accuracy, RAM and VRAM, the accuracy curve and, on the trained
    weights, batch-1 inference latency (p50/p99) and large-batch throughput.
    Without --precision the CNN rows use tf32 (TF32 allowed on GPUs); on a
    CPU tf32 computes as fp32.

    Each case (backend x solver x gradient method x tolerance) runs in fresh
    worker processes: time-to-first-gradient is split into import, build,
    first solve and first gradient; steady-state solve and gradient times are
    raw samples; every row carries its solution error and its gradient
    error against a full reference gradient of our own. Failures are rows with a
    status and a reason. Results go to one HDF5 file per run in --out. Under
    each problem's table a verdict names the fastest rows with a passing
    gradient (steady and first gradient), the ratio to the runner-up and
    whether it clears the noise floor (--json: records of kind "verdict"), and
    names faster rows left out with their gradient errors; --gradient-rtol E
    counts rows whose gradient error is at most E instead of the pass tier.
    Under load (others' CPU above --load-limit cores) the winner is provisional,
    with the load and whose it was; when no row passes, the next step is said.
    With several --tolerances a last line says from which rtol each gradient passes.

    \b
    Examples:
      sciml-bench run stiff-robertson
      sciml-bench run stiff-robertson -b diffrax --gradient BacksolveAdjoint
      sciml-bench run stiff-robertson -b scipy,diffrax --quick
      sciml-bench run --problem-file my.toml --tolerances 1e-4,1e-6,1e-8
      sciml-bench run cnn --quick -b torch-eager -b jax
      sciml-bench run cnn --quick --pipeline host --precision fp32,bf16 --target-accuracy 0.9
      sciml-bench run nonstiff-spiral-node --device cpu,cuda   CPU and GPU rows side by side
      sciml-bench run nonstiff-spiral-node --dtype float32 -b torchdiffeq --solver rk4 --dt 0.05
      sciml-bench run ensemble-lorenz --sizes 1,16,256
      sciml-bench run stiff-robertson-groups --sizes 1,10,100,1000 --jacobian dense,sparse
      sciml-bench run nonstiff-spiral-node --train -b diffrax,torchdiffeq

    With --train, each backend trains the problem's [training] section in one fresh
    worker: Adam with the declared constants in the library's own loop, from the
    problem's initial parameters. Rows: time to first gradient, median time per
    iteration, time to the target loss (one clock for every library: from the start of
    the build, so JIT compilation counts wherever the library does it; in parentheses,
    without the first iteration's extra cost), final loss, the loss curve's agreement
    with SciPy's reference curve, and the gradient's error at recorded iterates; the
    curve is stored.

    A problem with an [ensemble] section runs one case per backend x semantics
    (independent: per-member steps; coupled: one error norm) x ensemble size,
    each in a fresh worker; after a size fails, larger sizes are skipped.
    An array problem ([sizes]) runs one ladder per backend x solver x Jacobian kind
    (x rtol with --tolerances), each size in a fresh worker; a size whose dense Jacobian would not fit in memory,
    or whose least time (forecast from the smaller sizes' growth) exceeds --budget, is
    skipped up front, with the estimate.
    """
    _execute_and_print(*_planned(options))


def _execute_and_print(opts: RunOptions, plan: RunPlan) -> None:
    """Run the plan, print its table and verdicts (an interrupted run's too) under
    ``--load-limit``, and say where the rows were saved."""
    from sciml_bench.measure.noise import using_load_limit
    from sciml_bench.run.execute import Interrupted, execute

    with using_load_limit(opts.load_limit):
        try:
            records, path = execute(plan, lambda line: click.echo(line, err=True))
        except Interrupted as e:
            _interrupted(e.records, e.message, e.signum, opts.as_json, opts.gradient_rtol)
        except RunError as e:  # an engine it cannot reach, an --out it cannot write
            raise UserError(str(e)) from None
        print_records(records, opts.as_json, opts.gradient_rtol)
    click.echo(f"\nsaved {len(records)} case(s) to {path}", err=True)


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


def _planned(options: dict[str, Any]) -> tuple[RunOptions, RunPlan]:
    """The options parsed and planned, ``--interleave`` and ``--seed`` decided first (on
    by default, off on Dask) and handed down with the rest."""
    interleave, seed = options.pop("interleave"), options.pop("seed")
    opts = RunOptions.from_click(options)
    opts.interleave, opts.seed = _interleaving(interleave, seed, opts.executor)
    return opts, plan_run(opts)


def _interleaving(asked: bool | None, seed: int | None, executor: str) -> tuple[bool, int | None]:
    """``--interleave`` and ``--seed`` checked: on by default here, off on Dask, where the
    processes of one case must share a machine (asking for it there is refused)."""
    if asked and executor == "dask":
        raise UserError("--interleave runs a case's processes apart in time, on this machine; "
                        "on Dask they must share one worker's machine: drop --interleave")
    on = executor != "dask" if asked is None else asked
    if seed is not None and not on:
        raise UserError("--seed orders the interleaved processes: drop --seed, or --no-interleave")
    return on, seed
