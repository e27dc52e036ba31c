"""What ``sciml-bench run`` was asked, as parsed: :class:`RunOptions`, the option texts a
run reads as values (``--tolerances``, ``--precision``), and :class:`RunError`, how the run
layer refuses an option.

The command line parses and checks the options (:mod:`sciml_bench.cli.run_plan`, which
calls the parsers here so that a bad value is refused before anything is loaded); the
run's plan (:mod:`sciml_bench.run.plan`) reads the same values through the same parsers.
Plain data and the standard library only: no click here, so the run layer never depends
on the command line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sciml_bench.run.dask import DaskOptions

#: ``run``'s options that are fields of :class:`~sciml_bench.run.dask.DaskOptions`
_DASK = ("scheduler", "cluster", "workers", "per_worker", "retries")
#: the precisions ``--precision`` offers the CNN baselines
PRECISIONS = ("fp32", "tf32", "bf16")


class RunError(ValueError):
    """A run refused before it measures anything: an option that cannot be read, or that
    what exists here cannot honour (a backend, a problem's kind, a size, a device, the Dask
    engine, the --out folder). Its message is one line with the fix; the command line shows
    it as its error, exit code 2 (the run layer imports no click)."""


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
    #: --set NAME=VALUE: values set in the --sbml models' documents before the import
    sbml_settings: tuple[str, ...] = ()
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
    #: --interleave/--no-interleave as decided (on by default, off on Dask), and --seed
    interleave: bool = False
    seed: int | None = None

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


def rtols(tolerances: str | None, sweep: bool) -> list[float] | None:
    """The rtols of ``--tolerances`` (or ``--sweep``'s ladder); None: each problem's own.
    A text that is not a comma list of rtols in (0, 1) is a :class:`RunError`."""
    from sciml_bench.run.cases import SWEEP_RTOLS

    if sweep:
        return list(SWEEP_RTOLS)
    if not tolerances:
        return None
    try:
        vals = [float(x) for x in tolerances.split(",") if x.strip()]
    except ValueError:
        raise RunError(
            f"--tolerances {tolerances!r}: give comma-separated rtols, e.g. 1e-4,1e-6,1e-8"
        ) from None
    if not vals or any(not 0 < v < 1 for v in vals):
        raise RunError("--tolerances: every rtol must lie in (0, 1)")
    return vals


def precisions(text: str | None) -> list[str]:
    """``--precision fp32,bf16`` as a list; a name not offered is a :class:`RunError`."""
    names = [p.strip() for p in (text or "").split(",") if p.strip()]
    for p in names:
        if p not in PRECISIONS:
            raise RunError(f"--precision {p!r}: choose from fp32, tf32, bf16 (comma-separated)")
    return names
