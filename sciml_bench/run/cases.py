"""The case matrix: what one case is (:class:`CaseSpec`), the run's sizes
(:class:`Settings`), the matrix :func:`plan` makes of the options, the generated sources
its backends read (:func:`sources_read`), and the job and task of one case."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sciml_bench import backends
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.problem.reference import Reference
from sciml_bench.results.table import fmt_rtol

#: the work-precision ladder of ``--sweep`` (DiffEqDevTools style)
SWEEP_RTOLS = (1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9)


@dataclass(frozen=True)
class CaseSpec:
    backend: str
    solver: str
    gradient_method: str
    rtol: float
    atol: float
    max_steps: int
    extra: dict[str, Any] = field(default_factory=dict)
    #: where it runs (``cpu``/``cuda``), and the device asked for (a CPU-only backend
    #: asked for ``cuda`` runs on ``cpu`` and its row says so)
    device: str = "cpu"
    device_requested: str = "cpu"
    #: the floating-point type it computes in, and the one asked for (``--dtype``: a
    #: float64-only backend asked for float32 runs in float64 and its row says so)
    dtype: str = "float64"
    dtype_requested: str = "float64"
    #: a fixed-step solver's step (``--dt``); None for an adaptive one
    dt: float | None = None

    @property
    def label(self) -> str:
        control = f"dt={self.dt:g}" if self.dt is not None else f"rtol={fmt_rtol(self.rtol)}"
        dtype = f" {self.dtype}" if self.dtype != "float64" else ""
        return (f"{self.backend} {self.solver} {self.gradient_method} "
                f"{control}{dtype} on {self.device}")


@dataclass
class Settings:
    cold: int = 3
    repeats: int = 10
    warmups: int = 1
    budget_s: float = 300.0
    steady_budget_s: float = 20.0
    #: thread count for every worker's frameworks (None: each library's default)
    threads: int | None = None
    #: run the cases' processes in a seeded random order across cases (``run.interleave``)
    interleave: bool = False
    #: that order's seed (None: a fresh one, recorded in the file)
    seed: int | None = None
    #: pin each worker's threads to one core for its steady samples (``--no-pin``: off;
    #: measure.affinity)
    pin: bool = True



def tolerances(problem: CompiledProblem, rtols: Sequence[float] | None) -> list[tuple[float, float]]:
    """(rtol, atol) pairs; atol keeps the problem's atol/rtol ratio."""
    if not rtols:
        return [(problem.rtol, problem.atol)]
    ratio = problem.atol / problem.rtol
    return [(r, r * ratio) for r in rtols]


#: ``--gradient all``: every gradient method a backend offers, each its own row
ALL_GRADIENTS = "all"


def gradient_choice(backend: Any, problem: CompiledProblem, gradients: Sequence[str]) -> list[str]:
    """The gradient methods ``backend`` runs: those named that it offers, every one it offers
    for ``all``, its default when it offers none of them."""
    if ALL_GRADIENTS in gradients:
        return list(backend.gradient_methods)
    return [g for g in gradients if g in backend.gradient_methods] or [
        backend.default_gradient(problem)]


def plan(
    problem: CompiledProblem,
    backend_names: Sequence[str],
    solvers: Sequence[str] = (),
    gradients: Sequence[str] = (),
    rtols: Sequence[float] | None = None,
    max_steps: int | None = None,
    devices: Sequence[str] = ("cpu",),
    dtype: str = "float64",
    dt: float | None = None,
) -> list[CaseSpec]:
    """The case matrix. A solver or gradient name applies to backends offering it.

    Each case runs once per device in ``devices`` (concrete: ``cpu``, ``cuda``), a
    backend's devices next to each other. A backend that runs only on the CPU runs there
    once: for a ``cuda``-only request its row is on ``cpu`` and says it was asked for
    ``cuda``; beside a ``cpu`` request it is that row alone. ``dtype`` follows the same
    rule: a backend that computes in float64 only runs in float64 and says what was asked.
    ``dt`` is the step of the fixed-step solvers (``SolverInfo.fixed_step``); the CLI
    checks that it is given exactly when a chosen solver is one.
    """
    cases = []
    for name in backend_names:
        b = backends.get(name)
        offered = b.solvers()
        chosen = [s for s in solvers if s in offered] or [b.default_solver(problem.stiff)]
        grads = gradient_choice(b, problem, gradients)
        runs = [(d, d) for d in devices if d in b.devices]
        if not runs:  # CPU-only under a GPU-only request: on the CPU, and the row says so
            runs = [("cpu", devices[0])]
        ran = dtype if dtype in b.dtypes else "float64"  # float64-only: float64, said so
        for device, requested in runs:
            for rtol, atol in tolerances(problem, rtols):
                for s in chosen:
                    step = dt if offered[s].fixed_step else None
                    for g in grads:
                        cases.append(CaseSpec(
                            name, s, g, rtol, atol, max_steps or problem.max_steps,
                            device=device, device_requested=requested,
                            dtype=ran, dtype_requested=dtype, dt=step,
                        ))  # fmt: skip
    return cases



def sources_read(backend_names: Iterable[str]) -> tuple[str, ...] | None:
    """The generated sources the cases of these backends read: each one's declaration
    (:func:`~sciml_bench.backends.program.sources_of`), together; None where one declares
    none (every source). What a run compiles its problems with
    (``reference.compile_problem(..., sources=...)``), so that a target none of its
    backends reads, such as AMICI's SBML model, is never generated."""
    from sciml_bench.backends.program import sources_of

    read: dict[str, None] = {}
    for name in dict.fromkeys(backend_names):
        declared = sources_of(backends.get(name))
        if declared is None:
            return None
        read.update(dict.fromkeys(declared))
    return tuple(read)


def case_job(
    spec: CaseSpec, problem: CompiledProblem, ref: Reference, settings: Settings
) -> dict[str, Any]:
    """The ODE job of one case; it carries the reference its record is scored against."""
    return {
        "kind": "ode",
        "backend": spec.backend,
        "problem": problem.to_json(),
        "options": {
            "solver": spec.solver,
            "gradient_method": spec.gradient_method,
            "rtol": spec.rtol,
            "atol": spec.atol,
            "max_steps": spec.max_steps,
            "extra": spec.extra,
            "dtype": spec.dtype,
            "dtype_requested": spec.dtype_requested,
            "dt": spec.dt,
        },
        "device": spec.device,
        "device_requested": spec.device_requested,
        "repeats": settings.repeats,
        "warmups": settings.warmups,
        "steady_budget_s": settings.steady_budget_s,
        # the steady samples are spread over the case's processes (run.steady.share)
        "steady_processes": max(1, settings.cold),
        # every thread on one core after the cold phases (measure.affinity)
        "steady_pin": settings.pin,
        # each process's steady samples end before it (run.steady.deadline_of)
        "budget_s": settings.budget_s,
        "reference": ref.to_json(),
    }


@dataclass(frozen=True)
class CaseTask:
    """What one case's processes need, wherever they run: the job, the mode of each
    process (``None``: a job without modes, e.g. a CNN variant) and the budget."""

    job: dict[str, Any]
    modes: tuple[str | None, ...]
    budget_s: float

