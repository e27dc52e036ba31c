"""A run's plan, made from its parsed options before anything runs: the problems loaded
(``--sbml`` models imported and checked against their files), the backends, devices,
tolerances, sizes and settings, the CNN jobs, and what each problem is compiled with (the
generated sources the planned backends declare they read).

The command line parses the options and prints; :func:`make_plan` decides, and
:mod:`sciml_bench.run.execute` carries the plan out. An option that cannot be honoured is
a :class:`~sciml_bench.run.options.RunError` (one line, exit code 2 at the command line).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sciml_bench.run import options as run_options
from sciml_bench.run import plan_checks
from sciml_bench.run.options import RunError, RunOptions
from sciml_bench.run.problems import load_all
from sciml_bench.run.sizes import parse_sizes

#: the default --budget of a --train case (not --quick)
TRAIN_BUDGET_S = 900.0
#: where the plan's notes and progress lines go (the command line passes stderr)
Say = Callable[[str], None]


@dataclass
class RunPlan:
    """What a run will do: the problems, the backends, the CNN jobs and the settings, and
    what each problem is compiled with."""

    #: the options the plan was made of (what its execution still reads: solvers,
    #: gradients, --quick, --out, the executor, ...)
    options: RunOptions
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
    #: the generated sources the planned backends read (``Backend.sources``; None: every
    #: one): nothing else is generated, AMICI's SBML model only where AMICI is planned
    sources: tuple[str, ...] | None = None

    def compile(self, problem: Any, ref: Any, observations: Any = None) -> Any:
        """``problem`` as its workers receive it, with the sources this run's backends read
        (``reference.compile_problem``)."""
        from sciml_bench.problem import reference

        return reference.compile_problem(problem, ref, observations, sources=self.sources)


def make_plan(o: RunOptions, say: Say) -> RunPlan:
    """Check every option against what exists and plan the run, before anything runs (the
    options' own texts were checked by the command line first)."""
    from sciml_bench.measure import device
    from sciml_bench.run.cases import sources_read

    with_cnn = "cnn" in o.problems
    ode = bool([p for p in o.problems if p != "cnn"] or o.problem_files or o.sbml_files)
    cnn_jobs = [
        j for d in device.parse(o.device, "auto")
        for j in _cnn_jobs(o.backend_names, o.quick, d, o.dataset, _cnn_sizes(o),
                           run_options.precisions(o.precisions))
    ] if with_cnn else []  # fmt: skip
    names = plan_checks.known_backends(o.backend_names, [j["variant"] for j in cnn_jobs])
    names = plan_checks.stiff_capable(o, names, say)
    plan_checks.check_offered(names, o.solvers, o.gradients)
    devices = plan_checks.ode_devices(device.parse(o.device, "cpu"), names, say) if ode else ["cpu"]
    checks: dict[str, Any] = {}
    loaded = load_all(o, say, checks)
    rtols = run_options.rtols(o.tolerances, o.sweep)
    plan_checks.check_applies(o, loaded, with_cnn, say)
    plan_checks.check_steps(o, names)
    sizes_given = parse_sizes(o.sizes, loaded)
    plan_checks.check_first_sizes(loaded, sizes_given)
    label = "run" if len(loaded) + with_cnn > 1 else (loaded[0].name if loaded else "cnn")
    label += "-train" if o.train else ""
    return RunPlan(o, loaded, names, rtols, cnn_jobs, _settings(o, rtols), label, devices,
                   sizes_given, checks, sources_read(names))  # fmt: skip


def _cnn_sizes(o: RunOptions) -> dict[str, Any]:
    """The CNN options that override a configuration's defaults (None: not given)."""
    return {"image_size": o.image_size, "channels": o.channels, "batch_size": o.batch_size,
            "steps_per_epoch": o.steps, "epochs": o.epochs,
            "model": o.cnn_model, "pipeline": o.pipeline, "target_accuracy": o.target_accuracy,
            "eval_every": o.eval_every}  # fmt: skip


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
    settings.interleave, settings.seed = o.interleave, o.seed
    if rtols and len(rtols) > 1 and o.cold is None:
        settings.cold = 1  # a sweep measures steady state per rung
    return settings


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
            raise RunError(
                "--device cuda: no NVIDIA GPU is visible here (NVML finds none); "
                "use --device cpu, or --device auto to use a GPU only when there is one"
            )
    overrides = {k: v for k, v in sizes.items() if v is not None}
    try:
        jobs = cnn.jobs(quick, device, dataset, overrides, list(precisions))
    except ValueError as e:
        raise RunError(f"CNN configuration: {e}") from None
    return [j for j in jobs if not variants or j["variant"] in variants] or jobs
