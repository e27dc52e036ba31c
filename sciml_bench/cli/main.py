"""The ``sciml-bench`` command line."""

from __future__ import annotations

import json
import shlex
import signal
import sys
import traceback
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import click

from sciml_bench import __version__
from sciml_bench.backends import REGISTRY

EXIT_BAD_INPUT = 2
#: every backend, for the help texts (the registry imports no library)
BACKEND_NAMES = tuple(REGISTRY)
#: gradient components `reference` prints before summarizing the rest
GRADIENT_LINES = 10
#: Ctrl-C; SIGTERM gives 143 and SIGHUP 129 (128 + the signal's number)
EXIT_INTERRUPTED = 130
#: the default --budget of a --train case (not --quick)
TRAIN_BUDGET_S = 900.0


class UserError(click.ClickException):
    """A one-line error with what to do next; the traceback only with --debug."""

    exit_code = EXIT_BAD_INPUT


class _Group(click.Group):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # --debug is accepted anywhere before a `--`: `sciml-bench run X --debug` too
        end = args.index("--") if "--" in args else len(args)
        if "--debug" in args[:end]:
            args = ["--debug"] + [a for a in args[:end] if a != "--debug"] + args[end:]
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        from sciml_bench.problem.reference import ReferenceError
        from sciml_bench.problem.spec import ProblemError
        from sciml_bench.results.extras import MissingExtra
        from sciml_bench.results.store import ResultsError

        debug = bool(ctx.params.get("debug"))
        try:
            return super().invoke(ctx)
        except (ProblemError, ResultsError, ReferenceError, MissingExtra) as e:
            if debug:
                traceback.print_exc()
            raise UserError(str(e)) from None
        except UserError as e:
            # raised `from None` for a one-line message; --debug still shows the cause
            if debug and e.__context__ is not None:
                traceback.print_exception(e.__context__)
            raise
        except OSError as e:
            if debug:
                traceback.print_exc()
            raise UserError(f"{e.strerror or e}: {e.filename or ''}".rstrip(": ")) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sciml-bench")
@click.option("--debug", is_flag=True,
              help="Show full tracebacks for errors (also accepted after the command).")
def main(debug: bool) -> None:
    """Benchmark solving and differentiating ODEs across torchdiffeq, torchode, Diffrax,
    CVODES (CasADi), diffsol, DifferentialEquations.jl (Julia) and SciPy, fairly and
    reproducibly.

    \b
    Typical use:
      sciml-bench list                       problems and backends, with availability
      sciml-bench run stiff-robertson        every available backend, results to results/
      sciml-bench run stiff-robertson --quick -b diffrax
      sciml-bench show results/FILE.h5       the table again
      sciml-bench codegen stiff-robertson --target jax   the whole program a backend runs
    """
    warnings.simplefilter("default")


def _load_problem(name: str | None, problem_file: str | None) -> Any:
    from sciml_bench.problem import spec

    if problem_file:
        return spec.load(problem_file)
    if not name:
        raise UserError("name a problem (see `sciml-bench list`) or pass --problem-file PATH")
    return spec.load(name)


def _rtols(tolerances: str | None, sweep: bool) -> list[float] | None:
    from sciml_bench.run.runner import SWEEP_RTOLS

    if sweep:
        return list(SWEEP_RTOLS)
    if not tolerances:
        return None
    try:
        vals = [float(x) for x in tolerances.split(",") if x.strip()]
    except ValueError:
        raise UserError(
            f"--tolerances {tolerances!r}: give comma-separated rtols, e.g. 1e-4,1e-6,1e-8"
        ) from None
    if not vals or any(not 0 < v < 1 for v in vals):
        raise UserError("--tolerances: every rtol must lie in (0, 1)")
    return vals


def _comma_list(_ctx: click.Context, _param: click.Parameter, values: Sequence[str]) -> tuple[str, ...]:
    """``-b scipy,diffrax`` as well as ``-b scipy -b diffrax`` (as --tolerances takes commas)."""
    return tuple(v.strip() for value in values for v in value.split(",") if v.strip())


def _dask_options(f: Any) -> Any:
    """``run``'s options for running the cases on Dask (see README "Running on a cluster")."""
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


@main.command()
@click.argument("problems", nargs=-1)
@click.option("--problem-file", "problem_files", multiple=True, type=click.Path(),
              help="Run your own problem file (TOML); repeatable.")
@click.option("-b", "--backend", "backend_names", multiple=True, callback=_comma_list,
              help="Backend(s) to run, repeated or comma-separated (default: all of "
              f"{', '.join(BACKEND_NAMES)}). See `sciml-bench list`.")
@click.option("--solver", "solvers", multiple=True, callback=_comma_list,
              help="Solver name(s), repeated or comma-separated; each applies to the "
              "backends that offer it.")
@click.option("--gradient", "gradients", multiple=True, callback=_comma_list,
              help="Gradient method(s), repeated or comma-separated, e.g. BacksolveAdjoint. "
              "cvodes and diffsol: forward or adjoint; their default is forward up to 64 "
              "parameters and adjoint above (their guides: forward sensitivities for few "
              "parameters, the adjoint for many).")
@click.option("--tolerances", help="Comma-separated rtols; atol keeps the problem's ratio.")
@click.option("--sweep", is_flag=True, help="Work-precision ladder rtol 1e-3 ... 1e-9.")
@click.option("--cold", type=click.IntRange(1, 50), default=None,
              help="Fresh processes per case: each gives a time to first gradient and a "
              "share of the steady repeats [3; quick: 1].")
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
              "torchdiffeq, torchode, Diffrax and Julia compute in float32; SciPy, cvodes "
              "and diffsol are float64-only: they run in float64 and their rows say so. "
              "The reference stays float64 and adaptive, so the error columns show what "
              "float32 costs (README: float32 and fixed steps).")
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
              "([sizes]): values of the laddered size (quick: the ladder's first two).")
@click.option("--jacobian", "jacobians", multiple=True, callback=_comma_list,
              help="Array problems: dense and/or sparse (repeated or comma-separated), for "
              "the libraries that offer both [both].")
@click.option("--train", is_flag=True, help="Train each problem's [training] section (Adam, "
              "to its target loss) on every backend instead of timing solve and gradient "
              "(quick: 5 iterations).")
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
    agreement with a finite-difference reference. Failures are rows with a
    status and a reason. Results go to one HDF5 file per run in --out. Under
    each problem's table a verdict names the fastest rows with a passing
    gradient (steady and first gradient), the ratio to the runner-up and
    whether it clears the noise floor (--json: records of kind "verdict").

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
    iteration, time to the target loss (with and without the first iteration's
    compilation), final loss, and the loss curve's agreement with SciPy's reference
    curve over the first iterations; the curve is stored.

    A problem with an [ensemble] section runs one case per backend x semantics
    (independent: per-member steps; coupled: one error norm) x ensemble size,
    each in a fresh worker; after a size fails, larger sizes are skipped.
    An array problem ([sizes]) runs one ladder per backend x solver x Jacobian kind,
    each size in a fresh worker; a size whose dense Jacobian would not fit in memory,
    or whose least time (forecast from the smaller sizes' growth) exceeds --budget, is
    skipped up front, with the estimate.
    """
    opts = RunOptions(**options)
    plan = _plan_run(opts)
    records, path = _execute(plan, opts)
    if opts.as_json:
        from sciml_bench.results.table import json_records

        click.echo(json.dumps(json_records(records), indent=2, default=str))
    else:
        from sciml_bench.results.table import table

        click.echo(table(records))
    click.echo(f"\nsaved {len(records)} case(s) to {path}", err=True)


@dataclass
class RunOptions:
    """``sciml-bench run``'s options, as click parsed them."""

    problems: tuple[str, ...]
    problem_files: tuple[str, ...]
    backend_names: tuple[str, ...]
    solvers: tuple[str, ...]
    gradients: tuple[str, ...]
    tolerances: str | None
    sweep: bool
    cold: int | None
    repeats: int | None
    budget: float | None
    max_steps: int | None
    threads: int | None
    quick: bool
    out: str
    refresh_reference: bool
    device: str | None
    dataset: str
    image_size: int | None
    channels: int | None
    batch_size: int | None
    steps: int | None
    epochs: int | None
    as_json: bool
    cnn_model: str | None = None
    pipeline: str | None = None
    precisions: str | None = None
    target_accuracy: float | None = None
    eval_every: int | None = None
    sizes: str | None = None
    jacobians: tuple[str, ...] = ()
    train: bool = False
    dtype: str | None = None
    dt: float | None = None
    executor: str = "local"
    scheduler: str | None = None
    cluster: str = "local"
    workers: int | None = None
    per_worker: int = 1
    retries: int = 0
    slurm_jobs: int = 1
    slurm_cores: int = 4
    slurm_memory: str = "8GB"
    slurm_walltime: str = "01:00:00"
    slurm_gpus: int = 0
    slurm_queue: str | None = None
    slurm_account: str | None = None


@dataclass
class RunPlan:
    """What a run will do: the problems, the backends, the CNN jobs and the settings."""

    problems: list[Any]
    backend_names: list[str]
    rtols: list[float] | None
    cnn_jobs: list[dict[str, Any]]
    settings: Any
    label: str
    #: concrete devices of the ODE cases (``cpu``, ``cuda``)
    devices: list[str]
    #: ensemble member counts from --sizes (None: each problem's ladder)
    sizes: list[int] | None = None


def _plan_run(o: RunOptions) -> RunPlan:
    """Check every option against what exists, before anything runs."""
    from sciml_bench import backends
    from sciml_bench.measure import device

    with_cnn = "cnn" in o.problems
    problems = tuple(p for p in o.problems if p != "cnn")
    if not problems and not o.problem_files and not with_cnn:
        raise UserError("name a problem (see `sciml-bench list`) or pass --problem-file PATH")
    try:  # one option, two defaults: ODE cases cpu, the CNN baselines auto
        ode_requests = device.parse(o.device, "cpu")
        cnn_requests = device.parse(o.device, "auto")
    except device.DeviceError as e:
        raise UserError(str(e)) from None
    sizes = {"image_size": o.image_size, "channels": o.channels, "batch_size": o.batch_size,
             "steps_per_epoch": o.steps, "epochs": o.epochs,
             "model": o.cnn_model, "pipeline": o.pipeline, "target_accuracy": o.target_accuracy,
             "eval_every": o.eval_every}
    precisions = _precisions(o.precisions)
    cnn_jobs = [
        j for d in cnn_requests
        for j in _cnn_jobs(o.backend_names, o.quick, d, o.dataset, sizes, precisions)
    ] if with_cnn else []  # fmt: skip
    known = backends.names() + [j["variant"] for j in cnn_jobs]
    for n in o.backend_names:
        if n not in known:
            raise UserError(f"unknown backend {n!r}; choose from {', '.join(known)}")
    names = [n for n in o.backend_names if n in backends.REGISTRY] or backends.names()
    _check_offered(names, o.solvers, o.gradients)
    devices = _ode_devices(ode_requests, names) if problems + o.problem_files else ["cpu"]
    loaded = [_load_problem(None, f) for f in o.problem_files] + [
        _load_problem(p, None) for p in problems
    ]
    rtols = _rtols(o.tolerances, o.sweep)
    _check_applies(o, loaded, with_cnn)
    _check_steps(o, names)
    _check_jacobians(o.jacobians)
    _check_dask(o)
    label = "run" if len(loaded) + with_cnn > 1 else (loaded[0].name if loaded else "cnn")
    label += "-train" if o.train else ""
    return RunPlan(
        loaded, names, rtols, cnn_jobs, _settings(o, rtols), label, devices, _sizes(o.sizes)
    )


#: the kinds of target a run can name, as the errors describe them
TARGETS = {
    "single": "single-trajectory problems (e.g. stiff-robertson)",
    "ensemble": "problems with an [ensemble] section (e.g. ensemble-lorenz)",
    "sized": "array problems with [sizes] (e.g. stiff-robertson-groups)",
    "cnn": "the CNN baselines (`cnn`)",
    "train": "training runs (--train)",
}


def _check_applies(o: RunOptions, loaded: list[Any], with_cnn: bool) -> None:
    """An option none of the named targets uses is an error (it would be silently
    ignored); one that only some use gets a note naming the others."""
    kinds: dict[str, list[str]] = {"cnn": ["cnn"] if with_cnn else []}
    for p in loaded:
        kind = "ensemble" if p.ensemble is not None else "sized" if p.array else "single"
        kinds.setdefault(kind, []).append(p.name)
    if o.train:
        _check_trainable(loaded, with_cnn)
        kinds = {"train": [p.name for p in loaded]}
    given = {
        "--tolerances": (o.tolerances, ("single",)),
        "--sweep": (o.sweep, ("single",)),
        "--cold": (o.cold, ("single",)),
        "--sizes": (o.sizes, ("ensemble", "sized")),
        "--jacobian": (o.jacobians, ("sized",)),
        "--repeats": (o.repeats, ("single", "ensemble", "sized", "cnn")),
        "--solver": (o.solvers, ("single", "ensemble", "sized", "train")),
        "--gradient": (o.gradients, ("single", "ensemble", "sized", "train")),
        "--max-steps": (o.max_steps, ("single", "ensemble", "sized", "train")),
        "--dtype": (o.dtype not in (None, "float64"), ("single",)),
        "--dt": (o.dt, ("single",)),
        **{f"--{k.replace('_', '-')}": (getattr(o, attr), ("cnn",)) for k, attr in (
            ("image_size", "image_size"), ("channels", "channels"), ("batch_size", "batch_size"),
            ("steps", "steps"), ("epochs", "epochs"), ("model", "cnn_model"),
            ("pipeline", "pipeline"), ("precision", "precisions"),
            ("target_accuracy", "target_accuracy"), ("eval_every", "eval_every"))},
        "--dataset": (o.dataset != "synthetic", ("cnn",)),
    }  # fmt: skip
    for flag, (value, applies) in given.items():
        if not value:  # not given (every numeric option here is >= 1)
            continue
        if o.train and "train" not in applies:
            raise UserError(f"{flag} does not apply to --train (training runs the problem's "
                            "[training] section at its tolerances, one worker per backend)")
        if not any(kinds.get(k) for k in applies):
            what = " or ".join(TARGETS[k] for k in applies)
            raise UserError(f"{flag} applies to {what}; none is named in this run")
        others = [n for k, names in kinds.items() if k not in applies for n in names]
        if others:
            click.echo(f"note: {flag} applies to {' or '.join(TARGETS[k] for k in applies)}; "
                       f"{', '.join(others)} run(s) without it", err=True)  # fmt: skip


def _check_trainable(loaded: list[Any], with_cnn: bool) -> None:
    """``--train`` needs single-trajectory problems with a ``[training]`` section."""
    from sciml_bench.problem import spec

    if with_cnn:
        raise UserError("--train trains problems' [training] sections; the CNN baselines "
                        "(`cnn`) train with --target-accuracy: run them without --train")
    for p in loaded:
        if p.ensemble is None and p.training is not None:
            continue
        trainable = []
        for name in spec.available_problems():
            try:
                if spec.load(name).training is not None:
                    trainable.append(name)
            except spec.ProblemError:
                continue
        why = "is an ensemble problem" if p.ensemble is not None else "has no [training] section"
        raise UserError(f"--train: {p.name} {why}; train one that has a [training] section "
                        f"({', '.join(trainable) or 'none shipped'}) or add one (README, Training)")


def _ode_devices(requests: list[str], names: list[str]) -> list[str]:
    """Concrete devices for the ODE cases; ``auto``'s choice is printed. ``cuda`` needs a
    GPU and, for every chosen backend that can use one, a CUDA build of its framework
    (probed in a fresh pinned process): otherwise a one-line error with the fix."""
    from sciml_bench import backends
    from sciml_bench.backends.base import probe_cuda
    from sciml_bench.measure import device
    from sciml_bench.measure.memory import gpu_count

    try:
        devices, note = device.resolve(requests, gpu_count() if requests != ["cpu"] else 0)
    except device.DeviceError as e:
        raise UserError(str(e)) from None
    if note:
        click.echo(note, err=True)
    if "cuda" in devices:
        for name in names:
            b = backends.get(name)
            if "cuda" not in b.devices or not b.availability().ok:
                continue  # CPU-only: runs on the CPU and says so; unavailable: its own row
            missing = probe_cuda(name)
            if missing:
                raise UserError(f"--device cuda: {missing[0]}; fix: {missing[1]}")
    return devices


#: --quick runs the rungs of an ensemble ladder up to this many members
QUICK_MAX_MEMBERS = 64


def _sizes(text: str | None) -> list[int] | None:
    """``--sizes 1,16,256`` as a strictly increasing list of member counts."""
    from sciml_bench.problem.ensemble import MAX_MEMBERS

    if not text:
        return None
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--sizes {text!r}: give comma-separated member counts, e.g. 1,16,256") from None
    if not vals:
        raise UserError(f"--sizes {text!r}: give comma-separated member counts, e.g. 1,16,256")
    bad = [v for v in vals if not 1 <= v <= MAX_MEMBERS]
    if bad:
        raise UserError(f"--sizes: {bad[0]} members is outside [1, {MAX_MEMBERS}]")
    if vals != sorted(set(vals)):
        raise UserError(f"--sizes {text}: member counts must be strictly increasing, e.g. 1,16,256")
    return vals


def ensemble_sizes(ladder: Sequence[int], override: list[int] | None, quick: bool) -> list[int]:
    """The rungs to run: --sizes, else the ladder (up to QUICK_MAX_MEMBERS with --quick)."""
    if override:
        return override
    if quick:
        return [n for n in ladder if n <= QUICK_MAX_MEMBERS] or [min(ladder)]
    return list(ladder)


def _check_offered(names: list[str], solvers: Sequence[str], gradients: Sequence[str]) -> None:
    """Each --solver and --gradient must be offered by at least one chosen backend."""
    from sciml_bench import backends

    offered = {n: backends.get(n) for n in names}
    for flag, wanted, pool in (
        ("--solver", solvers, {s for b in offered.values() for s in b.solvers()}),
        ("--gradient", gradients, {g for b in offered.values() for g in b.gradient_methods}),
    ):
        for w in wanted:
            if w not in pool:
                raise UserError(
                    f"{flag} {w!r} is offered by none of {', '.join(names)}; "
                    f"choose from {', '.join(sorted(pool))}"
                )


def _check_steps(o: RunOptions, names: list[str]) -> None:
    """``--dt`` exactly when every chosen solver is a fixed-step one: a fixed-step solver
    without it, or an adaptive one (named, or a backend's default because no --solver
    applies to it) with it, is an error; a fixed step has no tolerances to sweep."""
    from sciml_bench import backends

    for name in names:
        offered = backends.get(name).solvers()
        chosen = [s for s in o.solvers if s in offered]
        for s in chosen:
            if offered[s].fixed_step and o.dt is None:
                raise UserError(f"--solver {s} is a fixed-step solver: give its step with --dt "
                                "(e.g. --dt 0.01)")  # fmt: skip
        if o.dt is None:
            continue
        fixed = [s for s, info in offered.items() if info.fixed_step]
        adaptive = [s for s in chosen if not offered[s].fixed_step]
        if adaptive or not chosen:
            what = (f"{name}'s {adaptive[0]} is adaptive" if adaptive else
                    f"{name} would run its adaptive default (no --solver names one of its solvers)")  # fmt: skip
            hint = (f"pick a fixed-step solver (--solver {', '.join(fixed)})" if fixed
                    else f"leave {name} out (-b): it offers no fixed-step solver")  # fmt: skip
            raise UserError(f"--dt applies to fixed-step solvers; {what}: {hint}")
    if o.dt is not None and (o.tolerances or o.sweep):
        raise UserError("--dt runs fixed steps, which have no error control: drop "
                        f"{'--sweep' if o.sweep else '--tolerances'} (or --dt)")


def _check_dask(o: RunOptions) -> None:
    """The Dask options only with ``--executor dask``, and never contradicting each other."""
    if o.executor != "dask":
        given = [flag for flag, v in (
            ("--scheduler", o.scheduler), ("--cluster slurm", o.cluster == "slurm"),
            ("--workers", o.workers), ("--per-worker", o.per_worker != 1),
            ("--retries", o.retries),
        ) if v]  # fmt: skip
        if given:
            raise UserError(f"{given[0]} applies to --executor dask; add --executor dask")
    if o.scheduler and (o.cluster == "slurm" or o.workers):
        raise UserError(
            "--scheduler connects to running workers: drop --cluster slurm and --workers"
        )


def _open_executor(o: RunOptions) -> tuple[Any, Any]:
    """The executor of ``--executor`` (None: the runner's local one) and how to close it."""
    if o.executor != "dask":
        return None, lambda: None
    import contextlib

    from sciml_bench.run import dask as rd

    opts = rd.DaskOptions(
        o.scheduler, o.cluster, o.workers, o.per_worker, o.retries, o.threads,
        rd.SlurmOptions(o.slurm_jobs, o.slurm_cores, o.slurm_memory, o.slurm_walltime,
                        o.slurm_gpus, o.slurm_queue, o.slurm_account),
    )  # fmt: skip
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
            f"cannot reach the Dask scheduler at {o.scheduler}: {e}; start one with "
            "`dask scheduler`, or leave out --scheduler to start a local cluster"
        ) from None
    return executor, stack.close


def _settings(o: RunOptions, rtols: list[float] | None) -> Any:
    from sciml_bench.run import runner

    settings = runner.Settings()
    if o.quick:
        settings = runner.Settings(cold=1, repeats=3, budget_s=120.0, steady_budget_s=5.0)
    elif o.train:  # a whole training run is hundreds of gradients, compilation included
        settings.budget_s = TRAIN_BUDGET_S
    if o.cold:
        settings.cold = o.cold
    if o.repeats:
        settings.repeats = o.repeats
    if o.budget:
        settings.budget_s = o.budget
    settings.threads = o.threads
    if rtols and len(rtols) > 1 and o.cold is None:
        settings.cold = 1  # a sweep measures steady state per rung
    return settings


def _execute(plan: RunPlan, o: RunOptions) -> tuple[list[dict[str, Any]], Any]:
    """Run the plan into one results file; every finished case is on disk as it ends."""
    executor, close_executor = _open_executor(o)  # an engine it cannot reach leaves no file
    try:
        return _execute_on(plan, o, executor)
    finally:
        close_executor()


def _execute_on(plan: RunPlan, o: RunOptions, executor: Any) -> tuple[list[dict[str, Any]], Any]:
    from sciml_bench.run import runner, signals

    writer = _writer(o, plan.label)
    try:
        with signals.stop_signals():  # SIGTERM and SIGHUP end the run as Ctrl-C does
            records = _measure(plan, o, writer, executor)
    except runner.Interrupt as e:
        _interrupted(writer.records, str(e), e.signum, o.as_json)
    except KeyboardInterrupt as e:  # outside a case, e.g. while building a reference
        sig = signals.signal_of(e)
        writer.finish("interrupted", interrupted_by=sig.name)
        n = len(writer.records)
        _interrupted(writer.records, f"interrupted by {sig.name}: {n} completed case(s) are "
                     f"saved in {writer.path}", sig, o.as_json)  # fmt: skip
    except Exception:
        # e.g. a reference that cannot be built: keep what was measured, leave no empty file
        if writer.records:
            writer.finish("failed")
        else:
            writer.path.unlink(missing_ok=True)
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
        if problem.array is not None:
            records += _run_sized(problem, plan, o, writer, executor)
            continue
        click.echo(f"reference for {problem.name} ...", err=True)
        # a reference that cannot be built leaves rows saying so, not an aborted run
        ref = reference.get_or_missing(problem, refresh=o.refresh_reference)
        click.echo(_reference_line(ref), err=True)
        remember_reference(writer, problem.name, ref)
        compiled = reference.compile_problem(problem, ref)
        cases = runner.plan(
            compiled, plan.backend_names, o.solvers, o.gradients, plan.rtols, o.max_steps,
            plan.devices, o.dtype or "float64", o.dt,
        )
        records += runner.run(compiled, ref, cases, writer, plan.settings, executor)
    if plan.cnn_jobs:
        records += runner.run_cnn(plan.cnn_jobs, writer, plan.settings, executor)
    return records


def _interrupted(records: list[dict[str, Any]], message: str, signum: int, as_json: bool) -> NoReturn:
    """Print what completed, as a finished run would (table or JSON); exit 128 + signal."""
    from sciml_bench.results.table import json_records, table
    from sciml_bench.run.signals import exit_status

    if as_json:
        click.echo(json.dumps(json_records(records), indent=2, default=str))
    elif records:
        click.echo(table(records))
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
        compiled = reference.compile_problem(problem, gone)
        ladders = runner.plan_ensemble(
            compiled, problem.ensemble.semantics, sizes, plan.backend_names, o.solvers,
            o.gradients, o.max_steps, plan.devices,
        )  # fmt: skip
        return runner.ensemble_without_reference(compiled, ladders, gone.missing, writer)
    click.echo(_reference_line(ref), err=True)
    remember_reference(writer, problem.name, ref)
    obs0 = er.load_observations(obs_path, 1)
    compiled = reference.compile_problem(problem, None, None if obs0 is None else obs0[0])
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

    sizes = ladder_sizes(problem.array, plan.sizes, o.quick)
    first = problem if problem.array.size == sizes[0] else _at_size(problem, sizes[0])
    # Planned once, on the first size (no reference needed: observations are placeholders):
    # a ladder keeps one solver, gradient method and Jacobian kind at every size.
    blank = np.zeros((len(first.t_save), first.n_state))
    compiled = reference.compile_problem(first, None, blank)
    ladders = runner.plan_sized(
        compiled, plan.backend_names, sizes, o.solvers, o.gradients, o.jacobians, o.max_steps,
        plan.devices,
    )  # fmt: skip
    return runner.run_sized(
        problem, ladders, writer, plan.settings, executor, refresh=o.refresh_reference
    )


def _at_size(problem: Any, size: int) -> Any:
    """``problem`` at ``size``, or a one-line error naming the size (e.g. an offset larger
    than a grid of that size)."""
    from sciml_bench.problem import spec

    try:
        return spec.at_size(problem, size)
    except spec.ProblemError as e:
        raise UserError(f"--sizes {size}: {e}") from None


def ladder_sizes(model: Any, override: list[int] | None, quick: bool) -> list[int]:
    """An array problem's sizes: --sizes, else its ladder (its first two with --quick), else
    its one size."""
    if override:
        return override
    ladder = list(model.ladder) or [model.size]
    return ladder[:2] if quick else ladder


def _check_jacobians(kinds: Sequence[str]) -> None:
    for k in kinds:
        if k not in ("dense", "sparse"):
            raise UserError(f"--jacobian {k!r}: choose dense or sparse (comma-separated)")


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
    compiled = reference.compile_problem(problem, ref)
    cases = runner.plan(compiled, plan.backend_names, o.solvers, o.gradients, None, o.max_steps,
                        plan.devices)  # fmt: skip
    return runner.run_training(compiled, training, curve.to_json(), cases, writer, plan.settings,
                               executor)  # fmt: skip


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


def _precisions(text: str | None) -> list[str]:
    """``--precision fp32,bf16`` as a list; a name not offered is a UserError."""
    names = [p.strip() for p in (text or "").split(",") if p.strip()]
    for p in names:
        if p not in ("fp32", "tf32", "bf16"):
            raise UserError(f"--precision {p!r}: choose from fp32, tf32, bf16 (comma-separated)")
    return names


def _cnn_jobs(
    variants: Sequence[str],
    quick: bool,
    device: str,
    dataset: str,
    sizes: dict[str, Any],
    precisions: Sequence[str] = (),
) -> list[dict[str, Any]]:
    from sciml_bench import cnn

    if dataset == "digits":
        from sciml_bench.results.extras import check

        check("sklearn", "digits", "--dataset digits")
    if device == "cuda":
        from sciml_bench.measure.memory import gpu_count

        if not gpu_count():
            raise UserError(
                "--device cuda: no NVIDIA GPU is visible here (NVML finds none); "
                "use --device cpu, or --device auto to use a GPU only when there is one"
            )
    overrides = {k: v for k, v in sizes.items() if v is not None}
    try:
        jobs = cnn.jobs(quick, device, dataset, overrides, list(precisions))
    except ValueError as e:
        raise UserError(f"CNN configuration: {e}") from None
    return [j for j in jobs if not variants or j["variant"] in variants] or jobs


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the case records as JSON.")
def show(files: tuple[str, ...], as_json: bool) -> None:
    """Print the table of one or more results files again.

    The header line gives the run's status (complete, interrupted by a signal,
    failed, or running while it runs), when it started and where; each table
    ends with its verdict (--json: records of kind "verdict" after the cases).

    \b
    Examples:
      sciml-bench show results/stiff-robertson-*.h5
      sciml-bench show results/run.h5 --json | jq '.[] | select(.kind != "verdict") | {backend, status, ttfg_s}'
    """
    from sciml_bench.results import store as results
    from sciml_bench.results import table as report

    for f in files:
        run = results.read(f)
        if as_json:
            click.echo(json.dumps(report.json_records(run.records), indent=2, default=str))
            continue
        env = run.environment
        status = run.meta.get("status")
        if run.meta.get("interrupted_by"):  # absent in files written before it existed
            status = f"{status} by {run.meta['interrupted_by']}"
        click.echo(
            f"{f}  [{status}]  {run.meta.get('created')}  "
            f"{env.get('cpu_model', '?')} x{env.get('cpu_count', '?')}  "
            f"python {env.get('python', '?')}"
        )
        click.echo(report.table(run.records) if run.records else "(no completed cases)")


@main.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_(as_json: bool) -> None:
    """List problems (size, stiffness, description) and backends (availability, the
    solvers with the stiff ones marked, the gradient methods, and the defaults).

    \b
    Examples:
      sciml-bench list
      sciml-bench list --json | jq '.backends[] | select(.available) | .name'
    """
    from sciml_bench import backends
    from sciml_bench.problem import spec

    probs = []
    loaded = []
    for name in spec.available_problems():
        try:
            p = spec.load(name)
            loaded.append(p)
            probs.append({
                "name": p.name, "states": p.n_state, "parameters": p.n_params,
                "stiff": p.stiff, "description": p.description,
                **({"size": p.array.ladder_name, "ladder": list(p.array.ladder)} if p.array else {}),
            })
        except spec.ProblemError as e:
            probs.append({"name": name, "error": str(e)})
    bks = []
    for name in backends.names():
        b = backends.get(name)
        av = b.availability()
        bks.append({
            "name": name, "available": av.ok, "reason": av.reason, "fix": av.fix,
            "solvers": list(b.solvers()), "gradient_methods": list(b.gradient_methods),
            "devices": list(b.devices), "dtypes": list(b.dtypes),
            **_backend_defaults(b, loaded),
        })
    if as_json:
        click.echo(json.dumps({"problems": probs, "backends": bks}, indent=2))
        return
    click.echo("Problems:")
    for p in probs:
        if "error" in p:
            click.echo(f"  {p['name']:<28} INVALID: {p['error']}")
        else:
            kind = "stiff" if p["stiff"] else "non-stiff"
            ladder = f" [{p['size']} = {', '.join(map(str, p['ladder']))}]" if p.get("ladder") else ""
            click.echo(
                f"  {p['name']:<28} {p['states']:>3} states {p['parameters']:>4} params  "
                f"{kind:<9}  {p['description']}{ladder}"
            )
    click.echo("\nBackends (solvers and gradient methods as --solver and --gradient take them):")
    for b in bks:
        state = "available" if b["available"] else f"unavailable: {b['reason']}"
        click.echo(f"  {b['name']:<12} {state}")
        if not b["available"] and b["fix"]:
            click.echo(f"  {'':<12} fix: {b['fix']}")
        for line in _backend_lines(b):
            click.echo(line)


def _backend_defaults(b: Any, problems: Sequence[Any]) -> dict[str, Any]:
    """A backend's stiff solvers and defaults, for ``list``: the default solver per
    problem class and the default gradient method per shipped problem (some backends,
    Julia's, pick it by the problem's size)."""
    gradients: dict[str, list[str]] = {}
    for p in problems:
        try:
            gradients.setdefault(b.default_gradient(p), []).append(p.name)
        except Exception:  # a backend that needs the compiled problem to decide
            continue
    return {
        "stiff_solvers": [n for n, info in b.solvers().items() if info.stiff],
        # no error control: the step is --dt
        "fixed_step_solvers": [n for n, info in b.solvers().items() if info.fixed_step],
        "default_solver": {"stiff": b.default_solver(True), "nonstiff": b.default_solver(False)},
        "default_gradient": gradients,
    }


def _backend_lines(b: dict[str, Any]) -> list[str]:
    """``list``'s lines of one backend: its solvers and gradient methods, stiff solvers
    and the defaults marked, wrapped between items."""
    stiff, default = set(b["stiff_solvers"]), b["default_solver"]
    fixed = set(b.get("fixed_step_solvers", ()))
    solvers = []
    for name in b["solvers"]:
        notes = ["stiff"] if name in stiff else []
        if name in fixed:
            notes.append("fixed step, --dt")
        if name == default["stiff"] == default["nonstiff"]:
            notes.append("default")
        elif name in (default["stiff"], default["nonstiff"]):
            kind = "stiff" if name == default["stiff"] else "non-stiff"
            notes.append(f"default for {kind} problems")
        solvers.append(name + (f" ({'; '.join(notes)})" if notes else ""))
    by_default = b["default_gradient"]
    usual = max(by_default, key=lambda g: len(by_default[g]), default=None)
    others = sorted(p for g, ps in by_default.items() if g != usual for p in ps)
    grads = []
    for name in b["gradient_methods"]:
        if name == usual:
            grads.append(f"{name} (default{', except for ' + ', '.join(others) if others else ''})")
        elif name in by_default:
            grads.append(f"{name} (default for {', '.join(by_default[name])})")
        else:
            grads.append(name)
    lines = _wrap_items("solvers", solvers) + _wrap_items("gradients", grads)
    return lines + _wrap_items("dtypes", b["dtypes"]) if b.get("dtypes") else lines


def _wrap_items(label: str, items: Sequence[str], width: int = 100) -> list[str]:
    """``label: a, b, c`` indented under a backend's name, broken between items only."""
    lines = [f"{'':<15}{label}:"]
    for i, item in enumerate(items):
        piece = f" {item}" + ("," if i < len(items) - 1 else "")
        if len(lines[-1]) + len(piece) > width and lines[-1].strip() != f"{label}:":
            lines.append(f"{'':<17}")
        lines[-1] += piece
    return lines


@main.command()
@click.argument("problem", required=False)
@click.option("--problem-file", type=click.Path(), help="A problem file instead of a name.")
@click.option("--target", type=click.Choice(["numpy", "torch", "jax", "julia", "casadi", "diffsl"]),
              default=None, help="The generated code's language [default: numpy, or the "
              "--backend's]")
@click.option("--backend", "backend_name", default=None,
              help="The case's backend [default: the target's: jax diffrax, torch torchdiffeq, "
              "numpy scipy, casadi cvodes, diffsl diffsol, julia julia].")
@click.option("--solver", default=None, help="The case's solver [default: the backend's for "
              "the problem].")
@click.option("--gradient", default=None, help="The case's gradient method [default: the "
              "backend's for the problem].")
@click.option("--rhs-only", is_flag=True, help="The vector field alone (the generated code).")
@click.option("--size", type=click.IntRange(1, None), default=None,
              help="Array problems ([sizes]): the laddered size's value [the file's default].")
def codegen(problem: str | None, problem_file: str | None, target: str | None,
            backend_name: str | None, solver: str | None, gradient: str | None,
            rhs_only: bool, size: int | None) -> None:
    """Print the whole program a backend runs for PROBLEM, to audit fairness: the
    generated vector field, the solve call (solver, controller, tolerances, save points,
    step bound, adjoint, dtype), the loss and the gradient call, from the source the
    worker runs. Run it with python: it prints the solution, the loss and the gradient.

    \b
    Examples:
      sciml-bench codegen stiff-robertson --target jax > rober.py && python rober.py
      sciml-bench codegen stiff-robertson --backend diffrax --solver Kvaerno5
      sciml-bench codegen nonstiff-spiral-node --target julia
      sciml-bench codegen --problem-file my.toml --target numpy --rhs-only   (with the Jacobian)
      sciml-bench codegen stiff-robertson-ude --target diffsl --rhs-only   (what diffsol compiles)
      sciml-bench codegen stiff-brusselator-2d --size 64 --rhs-only   (array code, sparse Jacobian)
    """
    from sciml_bench.problem import codegen as cg

    p = _sized(_load_problem(problem, problem_file), size)
    if rhs_only:
        if backend_name or solver or gradient:
            raise UserError("--rhs-only prints the vector field alone; drop --backend, "
                            "--solver and --gradient, or drop --rhs-only")  # fmt: skip
        click.echo(cg.generate(p, target or "numpy"), nl=False)
        return
    named = ["--problem-file", problem_file] if problem_file else [p.name]
    named += ["--size", str(size)] if size is not None else []
    click.echo(_case_program(p, named, target, backend_name, solver, gradient), nl=False)


def _case_program(p: Any, named: list[str], target: str | None, backend_name: str | None,
                  solver: str | None, gradient: str | None) -> str:
    """The whole program of the case ``run`` would plan for these names (codegen)."""
    from sciml_bench import backends
    from sciml_bench.backends.program import BACKEND_TARGET, TARGET_BACKEND, program
    from sciml_bench.problem import reference
    from sciml_bench.run import runner
    from sciml_bench.run.ode import case_options

    name = backend_name or TARGET_BACKEND[target or "numpy"]
    if name not in backends.REGISTRY:
        raise UserError(f"unknown backend {name!r}; choose from {', '.join(backends.names())}")
    if target and BACKEND_TARGET[name] != target:
        raise UserError(f"--backend {name} runs the {BACKEND_TARGET[name]} target's code; "
                        f"use --target {BACKEND_TARGET[name]} or drop --target")  # fmt: skip
    if p.ensemble is not None:
        raise UserError(f"{p.name} is an ensemble: codegen prints single-trajectory programs; "
                        "add --rhs-only for its vector field")  # fmt: skip
    _check_offered([name], [solver] if solver else [], [gradient] if gradient else [])
    # the loss's observations come from the reference, as in `run`
    click.echo(f"reference for {p.name} (the loss's observations) ...", err=True)
    ref = reference.get_or_missing(p)
    compiled = reference.compile_problem(p, ref)
    spec = runner.plan(compiled, [name], [solver] if solver else (),
                       [gradient] if gradient else ())[0]  # fmt: skip
    job = runner.case_job(spec, compiled, ref, runner.Settings())
    command = shlex.join(["sciml-bench", "codegen", *named, "--backend", name, "--solver",
                          spec.solver, "--gradient", spec.gradient_method])  # fmt: skip
    return program(compiled, name, case_options(job), command)


def _sized(problem: Any, size: int | None) -> Any:
    """``problem`` at ``--size`` (array problems only)."""
    if size is None:
        return problem
    if problem.array is None:
        raise UserError(f"--size applies to array problems ([sizes]); {problem.name} has none")
    return _at_size(problem, size)


@main.command(name="reference")
@click.argument("problem", required=False)
@click.option("--problem-file", type=click.Path(), help="A problem file instead of a name.")
@click.option("--refresh", is_flag=True, help="Rebuild instead of reading the cache.")
@click.option("--json", "as_json", is_flag=True, help="Print t, y, loss and gradient as JSON.")
@click.option("--size", type=click.IntRange(1, None), default=None,
              help="Array problems ([sizes]): the laddered size's value [the file's default].")
def reference_cmd(
    problem: str | None, problem_file: str | None, refresh: bool, as_json: bool,
    size: int | None = None,
) -> None:  # fmt: skip
    """Compute (or read from cache) the tight reference solution and gradient.

    Past a dozen parameters the gradient is summarized; --json prints every component.

    \b
    Examples:
      sciml-bench reference stiff-robertson
      sciml-bench reference stiff-robertson-ude --json | jq .gradient
      sciml-bench reference --problem-file my.toml --refresh
    """
    import numpy as np

    from sciml_bench.problem import reference

    p = _sized(_load_problem(problem, problem_file), size)
    ref = reference.get(p, refresh=refresh)
    doc = {
        "problem": p.name,
        "t": ref.t,
        "y": ref.y,
        "loss": ref.loss,
        "gradient": ref.gradient_by_name(p.param_names),
        "method": ref.method,
        "rtol": ref.rtol,
        "atol": ref.atol,
        "complex_step_agreement": ref.complex_step_agreement,
        "complex_step_skipped": ref.complex_step_skipped or None,
        "gradient_missing": ref.gradient_missing or None,
        "cached": ref.cached,
        "cache_path": ref.cache_path or None,
        "build_s": ref.build_s,
    }
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(f"{p.name}: {ref.method}")
    click.echo(f"  rtol={ref.rtol:g} atol={ref.atol:g}  loss={ref.loss:.12g}")
    grad = list(doc["gradient"].items())
    shown = grad if len(grad) <= GRADIENT_LINES + 2 else grad[:GRADIENT_LINES]
    for k, v in shown:
        click.echo(f"  dL/d{k} = {v:.12g}")
    if len(shown) < len(grad):
        rest = np.abs([v for _, v in grad[len(shown):]])
        click.echo(
            f"  ... {len(rest)} more components (|dL/dθ| from {rest.min():.3g} to "
            f"{rest.max():.3g}); --json prints every one"
        )
    if ref.gradient_missing:
        click.echo(f"  no reference gradient: {ref.gradient_missing}")
    if ref.complex_step_agreement is not None:
        click.echo(f"  FD vs complex step: max relative difference {ref.complex_step_agreement:.2e}")
    else:
        click.echo(f"  complex-step cross-check {ref.complex_step_skipped or 'not run'}")
    if ref.tolerance_note:
        click.echo(f"  note: {ref.tolerance_note}")
    click.echo(f"  {'read from' if ref.cached else 'cached at'} {ref.cache_path or '(not cached)'}")


def _register_commands() -> None:
    from sciml_bench.cli.julia import julia
    from sciml_bench.cli.report import register

    main.add_command(julia)
    register(main)


_register_commands()


if __name__ == "__main__":
    main()
