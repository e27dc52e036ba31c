"""``run``'s options as parsed, and the plan made of them: every option checked against
what exists and what the named problems use, before anything runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from sciml_bench.cli.options import UserError, at_size, check_offered, load_problem
from sciml_bench.cli.sizes import ensemble_sizes as ensemble_sizes  # re-exported
from sciml_bench.cli.sizes import ladder_sizes as ladder_sizes
from sciml_bench.cli.sizes import parse_sizes

if TYPE_CHECKING:
    from sciml_bench.run.dask import DaskOptions

#: the default --budget of a --train case (not --quick)
TRAIN_BUDGET_S = 900.0
#: ``run``'s options that are fields of :class:`~sciml_bench.run.dask.DaskOptions`
_DASK = ("scheduler", "cluster", "workers", "per_worker", "retries")


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
    #: --sbml: SBML models, each imported with the defaults of `sciml-bench import`
    sbml_files: tuple[str, ...] = ()
    #: --sbml-check/--no-sbml-check: check each --sbml import against its file where cheap
    sbml_check: bool = True
    #: --t-end: the --sbml models' time span's end (None: import's default)
    sbml_t_end: float | None = None
    dtype: str | None = None
    dt: float | None = None
    executor: str = "local"
    #: --gradient-rtol: the accuracy the verdict judges against (None: the pass tier)
    gradient_rtol: float | None = None
    #: --load-limit: others' cores up to which a row counts as quiet (None: LOAD_LIMIT)
    load_limit: float | None = None
    #: --scheduler, --cluster, --workers, --per-worker, --retries and the --slurm-* options
    #: (None: DaskOptions' defaults)
    dask: DaskOptions | None = None
    #: --pin/--no-pin: each worker's threads on one core for its steady samples
    pin: bool = True

    @classmethod
    def from_click(cls, options: dict[str, Any]) -> RunOptions:
        """The options as click passes them, the Dask ones gathered into the
        :class:`~sciml_bench.run.dask.DaskOptions` they configure (--threads too)."""
        from sciml_bench.run.dask import DaskOptions, SlurmOptions

        rest = {k: v for k, v in options.items() if not k.startswith("slurm_") and k not in _DASK}
        slurm = {k.removeprefix("slurm_"): v for k, v in options.items() if k.startswith("slurm_")}
        dask = DaskOptions(**{k: options[k] for k in _DASK}, threads=options["threads"],
                           slurm=SlurmOptions(**slurm))  # fmt: skip
        return cls(**rest, dask=dask)


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
    #: --sizes: ensemble member counts, array problems' size values (None: each ladder)
    sizes: list[int] | None = None
    #: per --sbml model (by problem name), its import's semantic check against the file
    model_checks: dict[str, Any] = field(default_factory=dict)


def _sbml_problem(path: str, t_end: float | None, semantic: bool = False,
                  checks: dict[str, Any] | None = None) -> Any:  # fmt: skip
    """An SBML model as the problem ``sciml-bench import [--t-end T]`` writes, checked
    against its file where cheap (``semantic``; the result goes into ``checks``). Its
    refusals are ProblemErrors: one line, exit 2, before anything runs."""
    from sciml_bench.problem.sbml import read
    from sciml_bench.problem.sbml import semantic as sem

    imported = read.read(path) if t_end is None else read.read(path, t_end=t_end)
    problem = imported.problem()
    if semantic:
        result = sem.run_check(imported, problem, lambda line: click.echo(line, err=True))
        if checks is not None:
            checks[problem.name] = result.to_json()
    return problem


def plan_run(o: RunOptions) -> RunPlan:
    """Check every option against what exists, before anything runs."""
    from sciml_bench import backends
    from sciml_bench.measure import device

    with_cnn = "cnn" in o.problems
    problems = tuple(p for p in o.problems if p != "cnn")
    if not problems and not o.problem_files and not o.sbml_files and not with_cnn:
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
    check_offered(names, o.solvers, o.gradients)
    devices = (_ode_devices(ode_requests, names) if problems + o.problem_files + o.sbml_files
               else ["cpu"])  # fmt: skip
    checks: dict[str, Any] = {}
    loaded = [load_problem(None, f) for f in o.problem_files] + [
        load_problem(p, None) for p in problems
    ] + [_sbml_problem(f, o.sbml_t_end, o.sbml_check, checks) for f in o.sbml_files]
    rtols = _rtols(o.tolerances, o.sweep)
    _check_applies(o, loaded, with_cnn)
    if o.sbml_t_end is not None and not o.sbml_files:
        raise UserError("--t-end applies to --sbml models; none is named in this run "
                        "(a problem file states its own [time] span)")
    _check_steps(o, names)
    _check_jacobians(o.jacobians)
    _check_dask(o)
    sizes_given = parse_sizes(o.sizes, loaded)
    _check_first_sizes(loaded, sizes_given)
    label = "run" if len(loaded) + with_cnn > 1 else (loaded[0].name if loaded else "cnn")
    label += "-train" if o.train else ""
    return RunPlan(
        loaded, names, rtols, cnn_jobs, _settings(o, rtols), label, devices, sizes_given, checks
    )


def _check_first_sizes(loaded: list[Any], sizes: list[int] | None) -> None:
    """Each array problem's file at the first --sizes value, before the results file is
    made (a size the file refuses, e.g. a shift longer than the grid, leaves no empty
    file); a later size that fails is a row of its ladder."""
    for p in loaded:
        if sizes and p.ensemble is None and p.laddered is not None and p.laddered.size != sizes[0]:
            at_size(p, sizes[0])


def _rtols(tolerances: str | None, sweep: bool) -> list[float] | None:
    from sciml_bench.run.cases import SWEEP_RTOLS

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
        kind = "ensemble" if p.ensemble is not None else "sized" if p.laddered else "single"
        kinds.setdefault(kind, []).append(p.name)
    if o.train:
        _check_trainable(loaded, with_cnn)
        kinds = {"train": [p.name for p in loaded]}
    given = {
        "--tolerances": (o.tolerances, ("single", "sized")),
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
                        f"({', '.join(trainable) or 'none shipped'}) or add one (docs/training.md)")


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
    settings.pin = o.pin
    if rtols and len(rtols) > 1 and o.cold is None:
        settings.cold = 1  # a sweep measures steady state per rung
    return settings


def _check_jacobians(kinds: Sequence[str]) -> None:
    for k in kinds:
        if k not in ("dense", "sparse"):
            raise UserError(f"--jacobian {k!r}: choose dense or sparse (comma-separated)")


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
