"""The ``sciml-bench`` command line."""

from __future__ import annotations

import json
import shlex
import sys
import traceback
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click

from sciml_bench import __version__

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


class UserError(click.ClickException):
    """A one-line error with what to do next; the traceback only with --debug."""

    exit_code = EXIT_BAD_INPUT


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        from sciml_bench.problem.reference import ReferenceError
        from sciml_bench.problem.spec import ProblemError
        from sciml_bench.results.store import ResultsError

        debug = "--debug" in sys.argv
        try:
            return super().invoke(ctx)
        except (ProblemError, ResultsError, ReferenceError) as e:
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
@click.option("--debug", is_flag=True, help="Show full tracebacks for errors.")
def main(debug: bool) -> None:
    """Benchmark solving and differentiating ODEs across torchdiffeq, Diffrax,
    DifferentialEquations.jl (Julia) and SciPy, fairly and reproducibly.

    \b
    Typical use:
      sciml-bench list                       problems and backends, with availability
      sciml-bench run stiff-robertson        every available backend, results to results/
      sciml-bench run stiff-robertson --quick -b diffrax
      sciml-bench show results/FILE.h5       the table again
      sciml-bench codegen stiff-robertson --target jax   the exact code a backend runs
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
                     help="Dask LocalCluster workers [one per core]."),
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
@click.option("-b", "--backend", "backend_names", multiple=True,
              help="Backend(s) to run (default: all). See `sciml-bench list`.")
@click.option("--solver", "solvers", multiple=True,
              help="Solver name(s); each applies to the backends that offer it.")
@click.option("--gradient", "gradients", multiple=True,
              help="Gradient method(s), e.g. BacksolveAdjoint or adjoint.")
@click.option("--tolerances", help="Comma-separated rtols; atol keeps the problem's ratio.")
@click.option("--sweep", is_flag=True, help="Work-precision ladder rtol 1e-3 ... 1e-9.")
@click.option("--cold", type=click.IntRange(1, 50), default=None,
              help="Fresh processes per case for time-to-first-gradient [3; quick: 1].")
@click.option("--repeats", type=click.IntRange(1, 10_000), default=None,
              help="Timed steady-state repeats of solve and of gradient [10; quick: 3].")
@click.option("--budget", type=click.FloatRange(1, None), default=None,
              help="Wall-clock seconds per worker process before its group is killed [300].")
@click.option("--max-steps", type=click.IntRange(10, 10**9), default=None,
              help="Override the problem's shared step bound.")
@click.option("--threads", type=click.IntRange(1, 1024), default=None,
              help="Threads for every framework in the workers (OMP/MKL/TF/Julia; XLA when 1). "
              "Default: each library's own choice, recorded.")
@click.option("--quick", is_flag=True, help="CI sizes: 1 cold process, 3 repeats, short budgets.")
@click.option("--out", type=click.Path(file_okay=False), default="results", show_default=True,
              help="Folder for the results file.")
@click.option("--refresh-reference", is_flag=True, help="Rebuild the cached reference.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
              show_default=True, help="CNN baselines: where to train.")
@click.option("--dataset", type=click.Choice(["synthetic", "digits"]), default="synthetic",
              show_default=True, help="CNN baselines: in-memory synthetic data or sklearn digits.")
@click.option("--image-size", type=click.IntRange(4, 4096), help="CNN: image side in pixels.")
@click.option("--channels", type=click.IntRange(1, 64), help="CNN: image channels.")
@click.option("--batch-size", type=click.IntRange(1, 65536), help="CNN: batch size.")
@click.option("--steps", type=click.IntRange(1, 10**6), help="CNN: steps per epoch.")
@click.option("--epochs", type=click.IntRange(1, 1000), help="CNN: measured epochs.")
@click.option("--json", "as_json", is_flag=True, help="Print the case records as JSON on stdout.")
@_dask_options
def run(**options: Any) -> None:
    """Benchmark PROBLEMS (names from `sciml-bench list`) on every available backend.

    The name `cnn` runs the CNN training baselines instead (torch-eager,
    torch-compile, jax, tensorflow; select with -b), each variant in a fresh
    worker, recording time to first step, warm-up and measured epochs,
    throughput, accuracy, RAM and VRAM.

    Each case (backend x solver x gradient method x tolerance) runs in fresh
    worker processes: time-to-first-gradient is split into import, build,
    first solve and first gradient; steady-state solve and gradient times are
    raw samples; every row carries its solution error and its gradient
    agreement with a finite-difference reference. Failures are rows with a
    status and a reason. Results go to one HDF5 file per run in --out.

    \b
    Examples:
      sciml-bench run stiff-robertson
      sciml-bench run stiff-robertson -b diffrax --gradient BacksolveAdjoint
      sciml-bench run --problem-file my.toml --tolerances 1e-4,1e-6,1e-8
      sciml-bench run cnn --quick -b torch-eager -b jax
    """
    opts = RunOptions(**options)
    plan = _plan_run(opts)
    records, path = _execute(plan, opts)
    if opts.as_json:
        from sciml_bench.results.table import json_record

        click.echo(json.dumps([json_record(r) for r in records], indent=2, default=str))
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
    device: str
    dataset: str
    image_size: int | None
    channels: int | None
    batch_size: int | None
    steps: int | None
    epochs: int | None
    as_json: bool
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


def _plan_run(o: RunOptions) -> RunPlan:
    """Check every option against what exists, before anything runs."""
    from sciml_bench import backends

    with_cnn = "cnn" in o.problems
    problems = tuple(p for p in o.problems if p != "cnn")
    if not problems and not o.problem_files and not with_cnn:
        raise UserError("name a problem (see `sciml-bench list`) or pass --problem-file PATH")
    cnn_jobs = _cnn_jobs(
        o.backend_names, o.quick, o.device, o.dataset,
        {"image_size": o.image_size, "channels": o.channels, "batch_size": o.batch_size,
         "steps_per_epoch": o.steps, "epochs": o.epochs},
    ) if with_cnn else []  # fmt: skip
    known = backends.names() + [j["variant"] for j in cnn_jobs]
    for n in o.backend_names:
        if n not in known:
            raise UserError(f"unknown backend {n!r}; choose from {', '.join(known)}")
    names = [n for n in o.backend_names if n in backends.REGISTRY] or backends.names()
    _check_offered(names, o.solvers, o.gradients)
    if o.device == "cuda" and problems + o.problem_files:
        raise UserError("--device cuda applies to the CNN baselines; the ODE backends run on the CPU")
    loaded = [_load_problem(None, f) for f in o.problem_files] + [
        _load_problem(p, None) for p in problems
    ]
    rtols = _rtols(o.tolerances, o.sweep)
    _check_dask(o)
    label = "run" if len(loaded) + with_cnn > 1 else (loaded[0].name if loaded else "cnn")
    return RunPlan(loaded, names, rtols, cnn_jobs, _settings(o, rtols), label)


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
    from sciml_bench.measure import environment
    from sciml_bench.problem import reference
    from sciml_bench.results.store import ResultsWriter, new_path
    from sciml_bench.run import runner

    executor, close_executor = _open_executor(o)  # an engine it cannot reach leaves no file
    path = new_path(o.out, plan.label)
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
    records: list[dict[str, Any]] = []
    try:
        for problem in plan.problems:
            click.echo(f"reference for {problem.name} ...", err=True)
            ref = reference.get(problem, refresh=o.refresh_reference)
            click.echo(_reference_line(ref), err=True)
            compiled = reference.compile_problem(problem, ref)
            cases = runner.plan(
                compiled, plan.backend_names, o.solvers, o.gradients, plan.rtols, o.max_steps
            )
            records += runner.run(compiled, ref, cases, writer, plan.settings, executor)
        if plan.cnn_jobs:
            records += runner.run_cnn(plan.cnn_jobs, writer, plan.settings, executor)
    except runner.Interrupt as e:
        click.echo(str(e), err=True)
        sys.exit(EXIT_INTERRUPTED)
    except KeyboardInterrupt:  # outside a case, e.g. while building a reference
        writer.finish("interrupted")
        click.echo(
            f"interrupted: {len(writer.records)} completed case(s) are saved in {path}", err=True
        )
        sys.exit(EXIT_INTERRUPTED)
    except Exception:
        # e.g. a reference that cannot be built: keep what was measured, leave no empty file
        if writer.records:
            writer.finish("failed")
        else:
            path.unlink(missing_ok=True)
        raise
    finally:
        close_executor()
    writer.finish("complete")
    return records, path


def _reference_line(ref: Any) -> str:
    built = "cached" if ref.cached else f"built in {ref.build_s:.1f} s"
    if ref.complex_step_agreement is None:
        return f"reference: {built}"
    return f"reference: {built}; FD vs complex step agree to {ref.complex_step_agreement:.1e}"


def _cnn_jobs(
    variants: Sequence[str], quick: bool, device: str, dataset: str, sizes: dict[str, Any]
) -> list[dict[str, Any]]:
    from sciml_bench import cnn

    if device == "cuda":
        from sciml_bench.measure.memory import gpu_count

        if not gpu_count():
            raise UserError(
                "--device cuda: no NVIDIA GPU is visible here (NVML finds none); "
                "use --device cpu, or --device auto to use a GPU only when there is one"
            )
    overrides = {k: v for k, v in sizes.items() if v is not None}
    try:
        jobs = cnn.jobs(quick, device, dataset, overrides)
    except ValueError as e:
        raise UserError(f"CNN configuration: {e}") from None
    return [j for j in jobs if not variants or j["variant"] in variants] or jobs


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the case records as JSON.")
def show(files: tuple[str, ...], as_json: bool) -> None:
    """Print the table of one or more results files again."""
    from sciml_bench.results import store as results
    from sciml_bench.results import table as report

    for f in files:
        run = results.read(f)
        if as_json:
            click.echo(json.dumps([report.json_record(r) for r in run.records], indent=2, default=str))
            continue
        env = run.environment
        click.echo(
            f"{f}  [{run.meta.get('status')}]  {run.meta.get('created')}  "
            f"{env.get('cpu_model', '?')} x{env.get('cpu_count', '?')}  "
            f"python {env.get('python', '?')}"
        )
        click.echo(report.table(run.records) if run.records else "(no completed cases)")


@main.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_(as_json: bool) -> None:
    """List problems (size, stiffness, description) and backends (availability)."""
    from sciml_bench import backends
    from sciml_bench.problem import spec

    probs = []
    for name in spec.available_problems():
        try:
            p = spec.load(name)
            probs.append({
                "name": p.name, "states": p.n_state, "parameters": p.n_params,
                "stiff": p.stiff, "description": p.description,
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
            click.echo(
                f"  {p['name']:<28} {p['states']:>3} states {p['parameters']:>4} params  "
                f"{kind:<9}  {p['description']}"
            )
    click.echo("\nBackends:")
    for b in bks:
        state = "available" if b["available"] else f"unavailable: {b['reason']}"
        click.echo(f"  {b['name']:<12} {state}")
        if not b["available"] and b["fix"]:
            click.echo(f"  {'':<12} fix: {b['fix']}")


@main.command()
@click.argument("problem", required=False)
@click.option("--problem-file", type=click.Path(), help="A problem file instead of a name.")
@click.option("--target", type=click.Choice(["numpy", "torch", "jax", "julia"]), default="numpy",
              show_default=True)
def codegen(problem: str | None, problem_file: str | None, target: str) -> None:
    """Print the exact code a backend runs for PROBLEM, to audit fairness."""
    from sciml_bench.problem import codegen as cg

    click.echo(cg.generate(_load_problem(problem, problem_file), target), nl=False)


@main.command(name="reference")
@click.argument("problem", required=False)
@click.option("--problem-file", type=click.Path(), help="A problem file instead of a name.")
@click.option("--refresh", is_flag=True, help="Rebuild instead of reading the cache.")
@click.option("--json", "as_json", is_flag=True, help="Print t, y, loss and gradient as JSON.")
def reference_cmd(problem: str | None, problem_file: str | None, refresh: bool, as_json: bool) -> None:
    """Compute (or read from cache) the tight reference solution and gradient."""
    from sciml_bench.problem import reference

    p = _load_problem(problem, problem_file)
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
        "cached": ref.cached,
        "build_s": ref.build_s,
    }
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(f"{p.name}: {ref.method}")
    click.echo(f"  rtol={ref.rtol:g} atol={ref.atol:g}  loss={ref.loss:.12g}")
    for k, v in doc["gradient"].items():
        click.echo(f"  dL/d{k} = {v:.12g}")
    if ref.complex_step_agreement is not None:
        click.echo(f"  FD vs complex step: max relative difference {ref.complex_step_agreement:.2e}")


def _register_commands() -> None:
    from sciml_bench.cli.julia import julia
    from sciml_bench.cli.report import register

    main.add_command(julia)
    register(main)


_register_commands()


if __name__ == "__main__":
    main()
