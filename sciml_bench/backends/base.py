"""What every backend provides: a small abstract base with few methods.

A backend module imports its library only inside ``build`` (and helpers it
calls), never at module import, so that ``sciml-bench list`` stays instant and
the import phase of time-to-first-gradient is measured where it happens.

A backend's single case is a :class:`Case`; its ensembles and training loops are
:mod:`~sciml_bench.backends.ensemble`'s and :mod:`~sciml_bench.backends.training`'s
(``EnsembleNotOffered`` and ``TrainingNotOffered`` are importable from here too).
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sciml_bench.backends.ensemble import EnsembleCase, EnsembleNotOffered
from sciml_bench.backends.training import TrainingCase, TrainingNotOffered
from sciml_bench.measure.status import SolverFailure, Status
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.problem.ensemble import Batch
from sciml_bench.problem.training import Adam, AdamState, adam_update


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run here; when not, why and how to fix it."""

    ok: bool
    reason: str = ""
    fix: str = ""

    @classmethod
    def of_modules(cls, *modules: str, extra: str) -> Availability:
        """Available when every module is importable; found without importing it."""
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
        if not missing:
            return cls(True)
        return cls(
            False,
            reason=f"Python package(s) not installed: {', '.join(missing)}",
            fix=f"pip install -c constraints.txt -e '.[{extra}]'",
        )


@dataclass(frozen=True)
class SolverInfo:
    """A solver a backend offers, as the library names it."""

    name: str
    stiff: bool
    description: str = ""
    #: a fixed-step method: no error control, the step is the case's ``dt`` (``--dt``)
    fixed_step: bool = False


@dataclass(frozen=True)
class CaseOptions:
    """Everything that defines one case besides the problem; recorded with it."""

    solver: str
    gradient_method: str
    rtol: float
    atol: float
    max_steps: int
    dtype: str = "float64"
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: ``cpu`` or ``cuda``: where the case's arrays are created (the worker is pinned too)
    device: str = "cpu"
    #: the step of a fixed-step solver (``--dt``); None for an adaptive one
    dt: float | None = None


@dataclass
class Solution:
    """States at the save times (shape ``(n_save, n_state)``) and solver counters.

    ``stats`` uses the keys ``steps``, ``rejected_steps``, ``rhs_evals``,
    ``jac_evals`` and ``lu_decomps`` where the library reports them.
    """

    y: np.ndarray
    stats: dict[str, int] = field(default_factory=dict)


class Case(ABC):
    """One built case: a problem compiled for one library with fixed options.

    Each operation comes in two parts, so that the worker times the library's own call
    and nothing else:

    - the *timed* part (:meth:`timed_solve`, :meth:`timed_grad`) is what the library's
      recommended usage does: its compiled call, blocked until ready (synchronised), on
      parameters already in the library's own form (:meth:`prepare`). It returns the
      library's raw outputs and checks nothing;
    - the *checked* part (:meth:`check_solve`, :meth:`check_grad`) reads the status and
      step statistics, checks finiteness and converts to NumPy. It raises
      :class:`sciml_bench.measure.status.SolverFailure` when the library reports an
      unsuccessful solve, so garbage is never returned silently.

    The worker runs the checked part on every timed sample, outside the clock, so a
    failed sample is never counted. :meth:`solve` and :meth:`loss_and_grad` do both
    parts, for callers that want a checked result and no timing.
    """

    def prepare(self, theta: np.ndarray) -> Any:
        """Parameters ``theta`` (natural units, declaration order) in the library's own
        form, made once before the timed samples, as a user holds them between calls
        (a device array, a module's parameter tensors). Default: ``theta`` itself."""
        return theta

    @abstractmethod
    def timed_solve(self, params: Any) -> Any:
        """The library's solve at prepared ``params``: its raw outputs, unchecked."""

    @abstractmethod
    def check_solve(self, raw: Any) -> Solution:
        """Status, step statistics, finiteness and NumPy conversion of a solve's output."""

    @abstractmethod
    def timed_grad(self, params: Any) -> Any:
        """The library's loss and gradient at prepared ``params``: raw outputs, unchecked."""

    @abstractmethod
    def check_grad(self, raw: Any) -> tuple[float, np.ndarray]:
        """``L`` and ``dL/dtheta`` (natural units) from :meth:`timed_grad`'s output."""

    def solve(self, theta: np.ndarray) -> Solution:
        """Solve at parameters ``theta`` (natural units, declaration order), checked."""
        return self.check_solve(self.timed_solve(self.prepare(theta)))

    def loss_and_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """Return ``L(theta)`` and ``dL/dtheta`` in natural units, checked."""
        return self.check_grad(self.timed_grad(self.prepare(theta)))

    def progress_t(self) -> float | None:
        """The latest time the integrator reached, if the backend can tell."""
        return None

    def placement(self) -> tuple[str, str | None]:
        """Where the case's arrays are, as the library reports it: ``(device, name)``,
        device ``cpu`` or ``cuda`` (the last solution's arrays once there is one, else
        those made at build), name the GPU or CPU model. Host-only libraries: the CPU."""
        from sciml_bench.measure.environment import cpu_model

        return "cpu", cpu_model()

    def alloc_peak_mb(self) -> float | None:
        """The framework allocator's device-memory peak (MiB), where there is one (GPU)."""
        return None


#: the floating-point types a case can compute in (``--dtype``)
DTYPES = ("float64", "float32")


def fixed_step_count(t_span: tuple[float, float], dt: float) -> int:
    """Steps of size ``dt`` that cover ``[t0, t1]``, the last one shortened to end at t1:
    ``ceil((t1 - t0) / dt)``, less a relative 1e-9 so that a step dividing the span
    exactly (1.5 / 0.05) is not counted once more for its rounding."""
    import math

    t0, t1 = t_span
    return max(1, math.ceil((t1 - t0) / dt * (1 - 1e-9)))


def fixed_step_plan(
    problem: CompiledProblem, options: CaseOptions, info: SolverInfo
) -> float | None:
    """The step of a fixed-step case (None for an adaptive solver), checked before the
    library runs: a fixed-step solver needs ``options.dt``, an adaptive one must not have
    one, and the steps ``dt`` needs over the span (:func:`fixed_step_count`) must fit the
    shared step bound ``max_steps``: otherwise a ``max_steps`` failure saying so, at once,
    where the library would take ``max_steps`` steps first (torchdiffeq's fixed grid
    would allocate the whole grid)."""
    if not info.fixed_step:
        if options.dt is not None:
            raise ValueError(f"{info.name} is adaptive: a step dt={options.dt:g} applies to "
                             "fixed-step solvers only")  # fmt: skip
        return None
    if options.dt is None or not options.dt > 0:
        raise ValueError(f"{info.name} is a fixed-step solver: it needs a step dt > 0 (--dt)")
    n = fixed_step_count(problem.t_span, options.dt)
    if n > options.max_steps:
        raise SolverFailure(
            Status.MAX_STEPS,
            f"fixed step dt={options.dt:g} needs {n} steps over t in "
            f"[{problem.t_span[0]:g}, {problem.t_span[1]:g}] > the shared max_steps = "
            f"{options.max_steps} (raise --max-steps, or a larger --dt)",
        )
    return float(options.dt)


class ProblemNotExpressible(SolverFailure):
    """Raised by ``build``: the library's modelling language cannot express the problem
    (the reason names what is missing). The case is an ``unavailable`` row, not an error."""

    def __init__(self, reason: str):
        super().__init__(Status.UNAVAILABLE, reason)


class Backend(ABC):
    """A differential-equation library under test."""

    name: str
    #: distribution names whose versions are recorded with each result
    packages: tuple[str, ...] = ()
    #: the pyproject extra that installs it
    extra: str = ""
    #: human-readable gradient methods, by the name used on the command line
    gradient_methods: Mapping[str, str] = {}
    #: whether the backend can differentiate at all (scipy: reference only)
    differentiable: bool = True
    #: modules imported in the timed import phase, in this order
    modules: tuple[str, ...] = ()
    #: devices it can run on; a ``cuda`` request runs a CPU-only backend on the CPU
    devices: tuple[str, ...] = ("cpu",)
    #: floating-point types it computes in (:data:`DTYPES`); a ``float32`` request runs a
    #: float64-only backend in float64, and its row says so (as ``devices`` does)
    dtypes: tuple[str, ...] = ("float64",)
    #: the generated sources its cases read from ``CompiledProblem.source`` (codegen
    #: targets; ``sbml`` brings the modeller's own SBML text, ``sbml_model``, with it). A
    #: run generates only what its planned backends declare, so that a target nobody reads
    #: (the SBML model: seconds at 20,000 states) is not written at every run's start.
    #: Empty: the one target :data:`~sciml_bench.backends.program.BACKEND_TARGET` names for
    #: it (:func:`~sciml_bench.backends.program.sources_of`)
    sources: tuple[str, ...] = ()

    #: whether array problems (``[sizes]``: vector states, array code) run here; a backend
    #: without array code says so in its row (status ``unavailable``), never crashes
    array_problems: bool = False
    #: the kinds of ``[[events]]`` it runs (sciml_bench/problem/events.py): ``time`` (at set
    #: times), ``state`` (where a root function crosses zero); a problem with another kind
    #: is refused by name before its library loads
    #: (:func:`~sciml_bench.backends.program.refuse_events`)
    events: tuple[str, ...] = ()
    #: why not, when a backend can say more than "no array code yet" (its row's reason)
    array_missing: str = ""
    #: Jacobian kinds it offers an array problem's implicit solvers (``dense``, ``sparse``)
    jacobians: tuple[str, ...] = ("dense",)
    #: why an implicit solver here has no sparse Jacobian path (the ``unavailable`` row a
    #: ``--jacobian sparse`` ladder gets, never a dense row standing in for it)
    sparse_missing: str = ""

    def jacobian_kinds(self, solver: str) -> tuple[str, ...]:
        """The Jacobian kinds ``solver`` can use on an array problem: :attr:`jacobians` for
        an implicit solver, ``("none",)`` for an explicit one (it needs no Jacobian)."""
        info = self.solvers().get(solver)
        return self.jacobians if info is not None and info.stiff else ("none",)

    def array_solver(self, stiff: bool) -> str:
        """The solver an array problem uses by default (the single-trajectory default unless
        a backend's best choice for large sparse systems differs)."""
        return self.default_solver(stiff)

    def cuda_missing(self) -> tuple[str, str] | None:
        """Inside a worker pinned to ``cuda``: ``(what is missing, fix)`` when the library
        cannot use the GPU here, else ``None``. Imports the library: call it only in a
        fresh process (:func:`probe_cuda`)."""
        return None

    def load(self) -> dict[str, float]:
        """Import the library: the timed *import* phase of time-to-first-gradient.

        Returns optional sub-phase durations in seconds (e.g. Julia's
        ``juliacall_init`` and ``package_load``), recorded beside the phases.
        """
        import importlib

        for m in self.modules:
            importlib.import_module(m)
        return {}

    def availability(self) -> Availability:
        """Cheap: never imports the library, never downloads, never hangs. By default,
        whether the top-level packages of :attr:`modules` are installed (found without
        importing them), with :attr:`extra` as the fix."""
        packages = dict.fromkeys(m.partition(".")[0] for m in self.modules)
        return Availability.of_modules(*packages, extra=self.extra)

    #: the solvers offered, keyed by the name used on the command line
    solver_table: Mapping[str, SolverInfo] = {}
    #: the case :meth:`build` makes, ``case_type(problem, options)``
    case_type: type[Case]

    def solvers(self) -> Mapping[str, SolverInfo]:
        """Solvers offered, keyed by the name used on the command line."""
        return self.solver_table

    #: the default solver of stiff problems and of non-stiff ones: the best configuration
    #: we found for each class
    stiff_solver: str = ""
    nonstiff_solver: str = ""

    def default_solver(self, stiff: bool) -> str:
        """The best configuration we found for this problem class."""
        return self.stiff_solver if stiff else self.nonstiff_solver

    def default_gradient(self, problem: CompiledProblem) -> str:
        """The library's recommended gradient method for this problem: by default the
        first of :attr:`gradient_methods` (each backend lists its recommendation first)."""
        return next(iter(self.gradient_methods))

    def build(self, problem: CompiledProblem, options: CaseOptions) -> Case:
        """Import the library, compile the problem and return a ready case (by default a
        :attr:`case_type`, whose constructor does all three)."""
        return self.case_type(problem, options)  # type: ignore[call-arg]

    #: ensemble semantics offered, in display order (none by default)
    ensemble_semantics: tuple[str, ...] = ()
    #: devices its ensembles run on (:attr:`devices` unless a backend says otherwise)
    ensemble_devices: tuple[str, ...] | None = None

    def ensemble_offer(self, device: str) -> tuple[str, ...]:
        """The ensemble semantics offered on ``device`` (all of them by default)."""
        return self.ensemble_semantics

    def runs_ensembles_on(self, device: str) -> bool:
        return device in (self.ensemble_devices or self.devices)

    def ensemble_solver(self, stiff: bool) -> str:
        """The solver an ensemble uses (the single-trajectory default unless overridden)."""
        return self.default_solver(stiff)

    def build_ensemble(
        self, problem: CompiledProblem, options: CaseOptions, batch: Batch, semantics: str
    ) -> EnsembleCase:
        """Import the library and return ``batch`` as one ready ensemble case on
        ``options.device`` (one of :attr:`devices`; the worker runs a CPU-only backend
        asked for ``cuda`` on the CPU). Semantics not offered: :class:`EnsembleNotOffered`.
        """
        raise EnsembleNotOffered(f"{self.name}: ensembles not offered")

    def build_training(
        self, problem: CompiledProblem, options: CaseOptions, adam: Adam
    ) -> TrainingCase:
        """Import the library and return the problem's training loop, from ``problem.theta0``
        with Adam's constants ``adam``: by default the shared NumPy Adam around the case's
        gradient (:class:`NumpyAdamTraining`, for a library without an optimizer of its
        own); a library with one overrides this with its idiomatic loop. A backend that
        cannot train raises :class:`TrainingNotOffered` saying why."""
        if not self.differentiable:
            raise TrainingNotOffered(
                f"{self.name}: no training loop: it computes no gradient of its own (SciPy's "
                "forward-sensitivity gradient drives the reference curve instead)"
            )
        return NumpyAdamTraining(self.build(problem, options), problem.theta0, adam)


def probe_cuda(name: str, timeout_s: float = 300.0) -> tuple[str, str] | None:
    """``(what is missing, fix)`` when backend ``name`` cannot run on the GPU here, else
    ``None``; found in a fresh process pinned as a ``cuda`` worker is (never this one: a
    framework imported here could not be pinned again)."""
    import json
    import os
    import subprocess
    import sys

    from sciml_bench.measure.device import device_env

    code = (
        "import json, sys\n"
        "from sciml_bench import backends\n"
        f"print(json.dumps(backends.get({name!r}).cuda_missing()))\n"
    )
    env = {**os.environ, **device_env("cuda")}
    try:
        r = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return f"{name}: importing its library took over {timeout_s:g} s", "check the install"
    last = r.stdout.strip().splitlines()[-1:] if r.stdout.strip() else []
    if r.returncode != 0 or not last:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return f"{name}: its library failed to start pinned to CUDA ({tail})", "check the install"
    found = json.loads(last[0])
    return None if found is None else (str(found[0]), str(found[1]))


class NumpyAdamTraining(TrainingCase):
    """The loop of a library without an optimizer of its own, as its users write it: the
    case's checked loss and gradient (:meth:`Case.loss_and_grad`: the library call and
    its conversion to NumPy, which the update needs), then Adam in NumPy
    (:func:`~sciml_bench.problem.training.adam_update`), all inside the timed step."""

    def __init__(self, case: Case, theta0: np.ndarray, adam: Adam):
        self.case = case
        self.theta = np.array(theta0, dtype=np.float64)
        self.adam = adam
        self.state = AdamState.zeros(self.theta.size)
        self.info = {"optimizer": "Adam in NumPy (sciml_bench.problem.training.adam_update) "
                                  "around the case's loss_and_grad",
                     "loop": "numpy-adam"}  # fmt: skip

    def step(self) -> Any:
        loss, g = self.case.loss_and_grad(self.theta)
        if not np.all(np.isfinite(g)):  # never step from a NaN gradient
            raise SolverFailure(Status.NONFINITE, "non-finite gradient")
        self.theta = adam_update(self.theta, g, self.state, self.adam)
        return loss

    def check(self, raw: Any) -> float:
        return float(raw)

    def parameters(self) -> np.ndarray:
        return self.theta.copy()

    def placement(self) -> tuple[str, str | None]:
        return self.case.placement()

    def alloc_peak_mb(self) -> float | None:
        return self.case.alloc_peak_mb()
