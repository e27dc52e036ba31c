"""What every backend provides: a small abstract base with few methods.

A backend module imports its library only inside ``build`` (and helpers it
calls), never at module import, so that ``sciml-bench list`` stays instant and
the import phase of time-to-first-gradient is measured where it happens.
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

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


@dataclass
class EnsembleSolution:
    """States of every member at the save times, shape ``(n, n_save, n_state)``, and the
    counters the library reports: per member (length ``n``) for independent semantics,
    one batch-wide value repeated for coupled ones, ``None`` where not reported."""

    y: np.ndarray
    steps: np.ndarray | None = None
    rhs_evals: np.ndarray | None = None


#: CVODES' and diffsol's guides: forward sensitivities for few parameters, the adjoint for
#: many. Their default gradient is ``forward`` up to this many parameters, ``adjoint``
#: above (the crossover and robustness measured in README's "cvodes and diffsol" section;
#: the reference gradient switches to directional derivatives above the same count)
FORWARD_SENSITIVITY_LIMIT = 64


def forward_or_adjoint(problem: CompiledProblem) -> str:
    """``forward`` up to :data:`FORWARD_SENSITIVITY_LIMIT` parameters, else ``adjoint``."""
    return "forward" if problem.n_params <= FORWARD_SENSITIVITY_LIMIT else "adjoint"


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


class EnsembleNotOffered(NotImplementedError):
    """The backend has no ensemble of these semantics."""


class ProblemNotExpressible(SolverFailure):
    """Raised by ``build``: the library's modelling language cannot express the problem
    (the reason names what is missing). The case is an ``unavailable`` row, not an error."""

    def __init__(self, reason: str):
        super().__init__(Status.UNAVAILABLE, reason)


class EnsembleCase(ABC):
    """``n`` members solved together, with one semantics:

    - ``independent``: each member has its own adaptive steps;
    - ``coupled``: the batch is one system under one error norm (one step size).

    The worker times :meth:`solve_raw` and :meth:`grad_raw` alone, on parameters made
    once by :meth:`prepare` (on the case's device, as for :class:`Case`). They return
    when the result is computed on the device (JAX: ``block_until_ready``; torch on
    CUDA: ``torch.cuda.synchronize``), and the worker checks statuses and finiteness and
    copies to the host outside the timed region with :meth:`check_solve` /
    :meth:`check_grad`, which raise :class:`~sciml_bench.measure.status.SolverFailure`.
    The loss is ``L̄ = Σ_m w_m L_m``, the members' losses
    (:class:`~sciml_bench.problem.ensemble.Batch`) weighted by ``w`` (:meth:`prepare`:
    ``1/n`` each by default, the mean), differentiated w.r.t. the nominal ``theta``; the
    gradient check weighs the first ``sample`` members alone, on the timed batch. The device is ``options.device`` (``cpu`` or ``cuda``); the worker reads
    back where the library put the arrays with :meth:`placement`.
    """

    semantics: str = ""
    #: whether :meth:`grad_raw` exists (SciPy: solve only)
    differentiable: bool = True

    def prepare(self, theta: np.ndarray, weights: np.ndarray | None = None) -> Any:
        """The nominal ``theta`` and the member weights ``weights`` (length ``n``; None:
        ``1/n`` each) in the library's own form on the case's device, made once before the
        timed calls (default: ``theta`` itself, for a backend with no gradient)."""
        return theta

    @abstractmethod
    def solve_raw(self, params: Any) -> Any:
        """Solve every member at prepared ``params``; returns the library's raw result."""

    @abstractmethod
    def check_solve(self, raw: Any) -> EnsembleSolution:
        """The raw solve as arrays; raises ``SolverFailure`` if any member failed."""

    def grad_raw(self, params: Any) -> Any:
        raise EnsembleNotOffered("this ensemble case has no gradient")

    def check_grad(self, raw: Any) -> tuple[float, np.ndarray]:
        """``(L̄, ∂L̄/∂θ)``; raises ``SolverFailure`` if a member's solve failed."""
        raise EnsembleNotOffered("this ensemble case has no gradient")

    def solve(self, theta: np.ndarray) -> EnsembleSolution:
        return self.check_solve(self.solve_raw(self.prepare(theta)))

    def loss_and_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        return self.check_grad(self.grad_raw(self.prepare(theta)))

    def placement(self) -> tuple[str, str | None]:
        """``(device, name)`` as the library reports it, read back from the last result's
        arrays (before any, from those made at build); as :meth:`Case.placement`."""
        from sciml_bench.measure.environment import cpu_model

        return "cpu", cpu_model()

    def alloc_peak_mb(self) -> float | None:
        """The framework allocator's device-memory peak (MiB) since the build, on a GPU."""
        return None


def failed_members(ok: np.ndarray) -> str:
    """``"3 of 16 members (first: member 5)"`` for a per-member success mask."""
    bad = np.flatnonzero(~np.asarray(ok, bool))
    return f"{bad.size} of {np.size(ok)} members (first: member {int(bad[0])})"


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

    #: whether array problems (``[sizes]``: vector states, array code) run here; a backend
    #: without array code says so in its row (status ``unavailable``), never crashes
    array_problems: bool = False
    #: why not, when a backend can say more than "no array code yet" (its row's reason)
    array_missing: str = ""
    #: Jacobian kinds it offers an array problem's implicit solvers (``dense``, ``sparse``)
    jacobians: tuple[str, ...] = ("dense",)

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

    @abstractmethod
    def availability(self) -> Availability:
        """Cheap: never imports the library, never downloads, never hangs."""

    @abstractmethod
    def solvers(self) -> Mapping[str, SolverInfo]:
        """Solvers offered, keyed by the name used on the command line."""

    @abstractmethod
    def default_solver(self, stiff: bool) -> str:
        """The best configuration we found for this problem class."""

    @abstractmethod
    def default_gradient(self, problem: CompiledProblem) -> str:
        """The library's recommended gradient method for this problem."""

    @abstractmethod
    def build(self, problem: CompiledProblem, options: CaseOptions) -> Case:
        """Import the library, compile the problem and return a ready case."""

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


class TrainingNotOffered(NotImplementedError):
    """The backend has no training loop; the message says why."""


class TrainingCase(ABC):
    """A problem trained in one library, with that library's optimizer and its idiomatic
    loop, from the problem's initial parameters θ_0 with the declared Adam constants.

    The worker times :meth:`step` alone: iteration ``k``, the loss and gradient at θ_k and
    the optimizer's update to θ_{k+1}, returning once the device's work is complete (JAX
    blocks, torch synchronises). :meth:`check` runs after the clock on every iteration:
    the solve's status and finiteness, and ``L(θ_k)`` as a float; it raises
    :class:`~sciml_bench.measure.status.SolverFailure`, so training never goes on from a
    failed solve. :meth:`parameters` reads θ back (untimed: tests and checks).
    """

    #: what runs (optimizer, loop), for the result record
    info: dict[str, Any] = {}

    @abstractmethod
    def step(self) -> Any:
        """One iteration: loss and gradient at θ_k, then the update; raw outputs."""

    @abstractmethod
    def check(self, raw: Any) -> float:
        """``L(θ_k)`` from :meth:`step`'s output, after checking the solve succeeded."""

    @abstractmethod
    def parameters(self) -> np.ndarray:
        """θ now (natural units, declaration order), as a NumPy copy."""

    def progress_t(self) -> float | None:
        """The latest time the current solve reached, if the library tells (as
        :meth:`Case.progress_t`)."""
        return None

    def placement(self) -> tuple[str, str | None]:
        """Where the training's arrays are (as :meth:`Case.placement`)."""
        from sciml_bench.measure.environment import cpu_model

        return "cpu", cpu_model()

    def alloc_peak_mb(self) -> float | None:
        return None


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
        from sciml_bench.measure.status import SolverFailure, Status

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
