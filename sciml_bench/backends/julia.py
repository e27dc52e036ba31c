"""DifferentialEquations.jl through juliacall.

The right-hand side is generated Julia source (``problem.source["julia"]``), evaluated
once into its own module by the ``SciMLBenchJL`` package in ``julia/``; solves and
gradients run entirely in Julia (OrdinaryDiffEq solvers, Zygote over SciMLSensitivity), so
nothing calls back into Python per RHS evaluation. Julia must be installed and
``sciml-bench julia setup`` run once; see ``julia/README.md``.

A worker running this backend imports juliacall before anything heavy and never torch or
jax (importing torch first is a known crash, PythonCall #215).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from sciml_bench.backends import julia_env
from sciml_bench.backends.base import (
    Availability,
    Backend,
    Case,
    CaseOptions,
    Solution,
    SolverInfo,
)
from sciml_bench.measure.status import SolverFailure, Status
from sciml_bench.problem.compiled import CompiledProblem

SOLVERS: dict[str, SolverInfo] = {
    "Rodas5P": SolverInfo("Rodas5P", True, "Rosenbrock-W, order 5, ForwardDiff Jacobian"),
    "FBDF": SolverInfo("FBDF", True, "fixed-leading-coefficient BDF, orders 1-5"),
    "KenCarp4": SolverInfo("KenCarp4", True, "ESDIRK, order 4, L-stable"),
    "Tsit5": SolverInfo("Tsit5", False, "Tsitouras 5(4) explicit Runge-Kutta"),
    "Vern7": SolverInfo("Vern7", False, "Verner 7(6) explicit Runge-Kutta"),
}

GRADIENT_METHODS: dict[str, str] = {
    "forward_diff": "Zygote over solve, sensealg=ForwardDiffSensitivity()",
    "gauss_adjoint": "Zygote over solve, sensealg=GaussAdjoint(autojacvec=EnzymeVJP())",
    "gauss_adjoint_reversediff": (
        "Zygote over solve, sensealg=GaussAdjoint(autojacvec=ReverseDiffVJP(true))"
    ),
    "interpolating_adjoint": (
        "Zygote over solve, sensealg=InterpolatingAdjoint(autojacvec=ReverseDiffVJP(true))"
    ),
    "interpolating_adjoint_checkpointed": (
        "Zygote over solve, sensealg=InterpolatingAdjoint(autojacvec=EnzymeVJP(), "
        "checkpointing=true)"
    ),
    "quadrature_adjoint": (
        "Zygote over solve, sensealg=QuadratureAdjoint(autojacvec=EnzymeVJP(), "
        "abstol=atol, reltol=rtol)"
    ),
}

#: SciMLSensitivity's own default switches to an adjoint above this many states + parameters.
FORWARD_MODE_LIMIT = 100

#: SciMLBase return codes that count as success (``successful_retcode``).
SUCCESS_CODES = frozenset(
    {"Success", "Terminated", "ExactSolutionLeft", "ExactSolutionRight", "FloatingPointLimit"}
)

#: The order of the counters ``SciMLBenchJL`` returns; -1 means not reported.
STAT_KEYS = ("steps", "rejected_steps", "rhs_evals", "jac_evals", "lu_decomps")


def status_for(retcode: str) -> Status:
    """Map a SciMLBase return code (or ``Exception:<type>``) onto the suite's statuses."""
    if retcode == "MaxIters":
        return Status.MAX_STEPS
    if retcode == "DtLessThanMin":
        return Status.DT_UNDERFLOW
    if retcode in ("Unstable", "DtNaN", "Exception:DomainError"):
        # Unstable is the default unstable_check: NaN/Inf in u. A DomainError (log or sqrt
        # of a negative state) is where a NumPy/torch RHS would produce NaN instead.
        return Status.NONFINITE
    if retcode.startswith("Exception:"):
        return Status.ERROR
    return Status.SOLVER_FAILURE


def failure(retcode: str, t: float, t_end: float, solver: str, message: str = "") -> SolverFailure:
    """A :class:`SolverFailure` whose reason names Julia's return code and the time reached."""
    t_reached = None if np.isnan(t) else float(t)
    if retcode.startswith("Exception:"):
        reason = f"Julia {retcode.removeprefix('Exception:')} in {solver}: {message}"
    else:
        where = "" if t_reached is None else f" at t={t_reached:.6g} of {t_end:.6g}"
        reason = f"Julia {solver} returned ReturnCode.{retcode}{where}"
        if message:
            reason += f": {message}"
    return SolverFailure(status_for(retcode), reason, t_reached)


class JuliaCase(Case):
    """A problem built in Julia; holds the Julia ``BenchCase`` and the module's functions."""

    def __init__(
        self,
        jl_case: Any,
        module: Any,
        problem: CompiledProblem,
        options: CaseOptions,
        julia_error: type[BaseException],
    ):
        self._case = jl_case
        self._mod = module
        self._julia_error = julia_error
        self._shape = (len(problem.t_save), problem.n_state)
        self._t_end = float(problem.t_span[1])
        self._solver = options.solver
        #: what was run, for the result record
        self.info = {
            "solver": f"{options.solver}()",
            "sensealg": GRADIENT_METHODS[options.gradient_method],
            "specialization": "SciMLBase.AutoSpecialize (default)",
            "maxiters": options.max_steps,
        }

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        # SciMLBenchJL catches solver and AD exceptions itself; this catches the rest (a
        # bad argument, a bug) so that no Julia exception ends the worker.
        try:
            return fn(*args)
        except self._julia_error as e:
            raise SolverFailure(Status.ERROR, f"Julia error: {e}") from None

    def prepare(self, theta: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(theta, dtype=np.float64)

    def timed_solve(self, params: np.ndarray) -> Any:
        # One call into Julia; it returns Julia values, converted in check_solve.
        return self._call(self._mod.solve_case, self._case, params)

    def check_solve(self, raw: Any) -> Solution:
        y, retcode, t, stats, message = raw
        counters = {k: int(v) for k, v in zip(STAT_KEYS, stats, strict=True) if int(v) >= 0}
        if str(retcode) not in SUCCESS_CODES:
            raise failure(str(retcode), float(t), self._t_end, self._solver, str(message))
        return Solution(y=np.array(y, dtype=np.float64).reshape(self._shape), stats=counters)

    def timed_grad(self, params: np.ndarray) -> Any:
        return self._call(self._mod.loss_and_grad_case, self._case, params)

    def check_grad(self, raw: Any) -> tuple[float, np.ndarray]:
        value, grad, retcode, t, message = raw
        if str(retcode) not in SUCCESS_CODES:
            raise failure(str(retcode), float(t), self._t_end, self._solver, str(message))
        g = np.array(grad, dtype=np.float64)
        value = float(value)
        if not (np.isfinite(value) and np.all(np.isfinite(g))):
            # The forward solve succeeded, so the adjoint (backward) solve did not.
            raise SolverFailure(
                Status.NONFINITE,
                f"non-finite loss or gradient after a successful forward solve "
                f"(loss={value}, {int(np.sum(~np.isfinite(g)))} bad gradient entries); "
                "the adjoint solve most likely failed, see Julia's warnings on stderr",
            )
        return value, g


class JuliaBackend(Backend):
    """DifferentialEquations.jl (OrdinaryDiffEq + SciMLSensitivity) via juliacall."""

    name = "julia"
    packages = ("juliacall", "juliapkg")
    extra = "julia"
    gradient_methods = GRADIENT_METHODS
    modules = ("juliacall",)

    def __init__(self) -> None:
        self._module: Any = None
        self._julia_error: type[BaseException] | None = None
        #: facts about the load, for the result record: where Julia came from, whether
        #: package images were present before loading (warm) and the library versions
        self.load_info: dict[str, Any] = {}

    def availability(self) -> Availability:
        found = julia_env.cached_probe()
        return Availability(found.ok, found.reason, found.fix)

    def solvers(self) -> Mapping[str, SolverInfo]:
        return SOLVERS

    def default_solver(self, stiff: bool) -> str:
        return "Rodas5P" if stiff else "Tsit5"

    def default_gradient(self, problem: CompiledProblem) -> str:
        # SciMLSensitivity's own choice for an ODE: forward mode while it is small.
        small = problem.n_state + problem.n_params <= FORWARD_MODE_LIMIT
        return "forward_diff" if small else "gauss_adjoint"

    def load(self) -> dict[str, float]:
        """Start Julia (juliacall) and load ``SciMLBenchJL`` from its package image.

        Sub-phases: ``julia_probe`` (finding Julia, ``julia --version``), ``juliacall_init``
        (starting Julia and PythonCall; absent when the caller imported juliacall itself),
        ``precompile_check`` (whether package images exist and are valid; recorded in
        :attr:`load_info`, never built here) and ``package_load`` (``using SciMLBenchJL``).
        """
        if self._module is not None:
            return {}
        phases: dict[str, float] = {}
        t0 = time.perf_counter()
        if "juliacall" not in sys.modules:
            # Only before juliacall starts does it matter which Julia and project it gets.
            julia_env.configure_juliacall(julia_env.cached_probe())
            phases["julia_probe"] = time.perf_counter() - t0
        juliacall = julia_env.import_juliacall()
        if julia_env.JULIACALL_IMPORT_S is not None:
            phases["juliacall_init"] = julia_env.JULIACALL_IMPORT_S
        jl = juliacall.Main
        self._julia_error = juliacall.JuliaError

        t1 = time.perf_counter()
        version = julia_env.parse_version("julia version " + str(jl.seval("string(VERSION)")))
        files = julia_env.pkgimage_state(version or (0, 0, 0))
        # Julia's own answer: a cache that exists and is valid for this environment.
        valid = bool(
            jl.seval(
                f'let id = Base.identify_package("{julia_env.PACKAGE}"); '
                "id !== nothing && Base.isprecompiled(id) end"
            )
        )
        t2 = time.perf_counter()
        try:
            jl.seval(f"using {julia_env.PACKAGE}")
        except juliacall.JuliaError as e:
            raise RuntimeError(
                f"loading {julia_env.PACKAGE} failed: {e}. {julia_env.SETUP_FIX}"
            ) from None
        t3 = time.perf_counter()
        phases["precompile_check"] = t2 - t1
        phases["package_load"] = t3 - t2
        self._module = getattr(jl, julia_env.PACKAGE)
        self.load_info = {
            "julia_bindir": str(jl.seval("Sys.BINDIR")),
            "julia_project": str(jl.seval("Base.active_project()")),
            "juliacall_env": {k: v for k, v in os.environ.items() if "JULIACALL" in k},
            "pkgimage_files": files,
            "pkgimage_valid": valid,
            "versions": dict(self._module.versions()),
        }
        return phases

    def build(self, problem: CompiledProblem, options: CaseOptions) -> Case:
        src = problem.source.get("julia")
        if not src:
            raise ValueError(f"problem {problem.name!r} has no generated Julia source")
        if options.solver not in SOLVERS:
            raise ValueError(
                f"unknown Julia solver {options.solver!r}; choose from {list(SOLVERS)}"
            )
        if options.gradient_method not in GRADIENT_METHODS:
            raise ValueError(
                f"unknown Julia gradient method {options.gradient_method!r}; "
                f"choose from {list(GRADIENT_METHODS)}"
            )
        if options.dtype != "float64":
            raise ValueError("the Julia backend runs float64 only")
        self.load()
        assert self._julia_error is not None

        def f64(a: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(a, dtype=np.float64)

        try:
            jl_case = self._module.build_case(
                src,
                f64(problem.y0),
                f64(problem.theta0),
                float(problem.t_span[0]),
                float(problem.t_span[1]),
                f64(problem.t_save),
                float(options.rtol),
                float(options.atol),
                int(options.max_steps),
                f64(problem.loss_W),
                f64(problem.loss_O),
                f64(problem.loss_C),
                options.solver,
                options.gradient_method,
            )
        except self._julia_error as e:
            raise RuntimeError(f"building the Julia case failed: {e}") from None
        return JuliaCase(jl_case, self._module, problem, options, self._julia_error)
