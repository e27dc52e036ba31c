"""DifferentialEquations.jl through juliacall.

The right-hand side is generated Julia source (``problem.source["julia"]``), evaluated
once into its own module by the ``SciMLBenchJL`` package in ``julia/``; solves and
gradients run entirely in Julia (OrdinaryDiffEq solvers, Zygote over SciMLSensitivity), so
nothing calls back into Python per RHS evaluation. Julia must be installed and
``sciml-bench julia setup`` run once; see ``julia/README.md``.

A worker running this backend imports juliacall before anything heavy and never torch or
jax (importing torch first is a known crash, PythonCall #215).

Ensembles (:class:`JuliaEnsembleCase`) solve ``n`` members through one ``EnsembleProblem``:

- ``independent`` on the CPU: ``EnsembleThreads()`` with the case's solver; the gradient is
  Zygote over the ensemble solve with the case's ``sensealg`` per member (SciMLSensitivity's
  data-parallel tutorial);
- ``independent`` on ``cuda``: DiffEqGPU's ``EnsembleGPUKernel`` with ``GPUTsit5``/``GPUVern7``
  on an out-of-place ``SVector`` right-hand side (:func:`static_rhs_source`);
- ``coupled`` on ``cuda``: DiffEqGPU's ``EnsembleGPUArray``, which fuses the members into one
  system under one error norm (one step size for all: coupled, not independent).

GPU gradients are ForwardDiff over the whole ensemble solve (DiffEqGPU's documented AD route);
the GPU code is the package extension ``SciMLBenchJLGPUExt``, loaded in the ``julia/gpu``
environment only.

Parameters in the gradient's scale. A single-trajectory case (:class:`JuliaCase`) runs the
generated model as it is: it reads ``θ_i = exp(p[i])`` for a parameter in log space
(:func:`~sciml_bench.problem.compiled.log_scaled`), so the case's ``p`` is ``u`` (``u_i =
log θ_i`` there, ``θ_i`` elsewhere) and ForwardDiff and SciMLSensitivity differentiate
``L`` with respect to ``u``, their error control seeing ``∂y/∂u_i = θ_i ∂y/∂θ_i`` on one
scale (docs/backends.md, "Parameters in the gradient's scale"). The case maps ``θ`` to
``u`` and ``∂L/∂u`` back to ``∂L/∂θ`` with the compiled backends' own
:func:`~sciml_bench.backends.compiled.model_parameters` and
:func:`~sciml_bench.backends.compiled.natural_gradient`, off the clock. Ensembles and
training keep ``θ``: their members' ``θ .* s .+ a`` and Optimisers.jl's update are in
natural units, so they run the model's ``θ`` form (:func:`theta_source`).
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from sciml_bench.backends import julia_env
from sciml_bench.backends.base import Availability, Backend, Case, CaseOptions, Solution, SolverInfo
from sciml_bench.backends.compiled import (
    checked_model_parameters,
    natural_gradient,
    parameter_scale,
)
from sciml_bench.backends.ensemble import EnsembleCase, EnsembleNotOffered, EnsembleSolution
from sciml_bench.backends.training import TrainingCase
from sciml_bench.measure.status import SolverFailure, Status
from sciml_bench.problem.compiled import CompiledProblem, log_scaled
from sciml_bench.problem.ensemble import Batch
from sciml_bench.problem.training import Adam

SOLVERS: dict[str, SolverInfo] = {
    "Rodas5P": SolverInfo("Rodas5P", True, "Rosenbrock-W, order 5, ForwardDiff Jacobian"),
    "FBDF": SolverInfo("FBDF", True, "fixed-leading-coefficient BDF, orders 1-5"),
    "KenCarp4": SolverInfo("KenCarp4", True, "ESDIRK, order 4, L-stable"),
    "Tsit5": SolverInfo("Tsit5", False, "Tsitouras 5(4) explicit Runge-Kutta"),
    "Vern7": SolverInfo("Vern7", False, "Verner 7(6) explicit Runge-Kutta"),
    "Tsit5-fixed": SolverInfo("Tsit5-fixed", False, "Tsit5 with adaptive=false, dt (--dt)",
                              fixed_step=True),
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


#: cuda ensembles: DiffEqGPU's algorithm per semantics (``cpu_offload = 0.0``: every member
#: on the GPU; EnsembleGPUArray's default would solve 20% of them on the CPU)
GPU_ENSEMBLES: dict[str, str] = {
    "independent": "DiffEqGPU.EnsembleGPUKernel(CUDA.CUDABackend(), 0.0)",
    "coupled": "DiffEqGPU.EnsembleGPUArray(CUDA.CUDABackend(), 0.0)",
}
#: EnsembleGPUKernel's re-implementation of each solver it offers (the kernel cannot run
#: OrdinaryDiffEq's own); keys are the case's solver names
GPU_KERNEL_SOLVERS: dict[str, str] = {"Tsit5": "GPUTsit5", "Vern7": "GPUVern7"}
#: EnsembleGPUArray runs OrdinaryDiffEq's explicit solvers (its stiff ones need analytic
#: Jacobians, which the suite does not hand over)
GPU_ARRAY_SOLVERS: tuple[str, ...] = ("Tsit5", "Vern7")
#: The gradient method of GPU ensembles: ForwardDiff over the ensemble solve
GPU_GRADIENT = "forward_diff"
GPU_GRADIENT_INFO = "ForwardDiff.gradient over solve(EnsembleProblem, ...) (Dual parameters)"

# One line of the generated in-place RHS body: ``name = expression``.
_ASSIGN = re.compile(r"^ {8}(du\[(\d+)\]|[A-Za-z_]\w*) = (.+)$")
# Scalar reads of the state and parameter vectors, the only indexing a kernel RHS may do.
_SCALAR_INDEX = re.compile(r"\b[up]\[\d+\]")
# What allocates or broadcasts: array literals, slices, dotted calls and operators.
_NOT_KERNEL_SAFE = re.compile(r"[\[\]]|\.\(|(?<![0-9])\.[*/+\-^]|\b(?:transpose|reshape)\b")


def static_rhs_source(src: str) -> str | None:
    """The out-of-place ``rhs(u, p, t)`` returning an ``SVector`` that DiffEqGPU's
    ``EnsembleGPUKernel`` needs, derived line by line from the generated in-place ``rhs!``.

    Every body line of the codegen's output (``name = expr`` and ``du[k] = expr``) is kept
    as it is, except that ``du[k] = expr`` becomes ``du_k = expr``; the function returns
    ``SVector{n}(du_1, ..., du_n)`` (``SVector`` is bound by the GPU extension). ``None``
    when the body builds arrays or broadcasts (a neural network's layers), which a GPU
    kernel cannot run, or when ``src`` is not in the codegen's shape.
    """
    lines = src.splitlines()
    try:
        start = lines.index("function rhs!(du, u, p, t)")
    except ValueError:
        return None
    if lines[start + 1 : start + 2] != ["    @inbounds begin"]:
        return None
    if lines[-3:] != ["    end", "    return nothing", "end"]:
        return None
    body, outputs = [], []
    for line in lines[start + 2 : -3]:
        m = _ASSIGN.match(line)
        if m is None or _NOT_KERNEL_SAFE.search(_SCALAR_INDEX.sub("", m[3])):
            return None
        if m[2] is not None:
            k = int(m[2])
            if k != len(outputs) + 1:
                return None  # every du[k], once, in order
            outputs.append(f"du_{k}")
            body.append(f"        du_{k} = {m[3]}")
        else:
            body.append(line)
    if not outputs:
        return None
    ret = f"        SVector{{{len(outputs)}}}({', '.join(outputs)})"
    return "\n".join([
        "# Out-of-place static form of the generated rhs! (sciml-bench), for EnsembleGPUKernel.",
        "function rhs(u, p, t)",
        "    return @inbounds begin",
        *body,
        ret,
        "    end",
        "end",
    ]) + "\n"  # fmt: skip


# A parameter read as the exp of its log in the generated model (codegen's julia target):
# a scalar ``p_k = exp(p[i])``, or a per-element ``p_k = exp.(reshape(view(p, a:b), dims))``.
_EXP_READ = re.compile(r"^( +p_\w+ = )exp\((p\[(\d+)\])\)$", re.M)
_EXP_SLICE = re.compile(r"^( +p_\w+ = )exp\.\((reshape\(view\(p, (\d+):(\d+)\), [\d, ]+\))\)$",
                        re.M)
# The generated header's comment on which parameters p holds as logs (codegen's log_comment).
_LOG_COMMENT = re.compile(r"^# p holds log\(.*\n# so ForwardDiff's .*\n", re.M)


def theta_source(src: str) -> str:
    """The ``θ`` form of a generated model: every parameter read as itself
    (``p_k = p[i]``) where the model reads ``exp`` of its log (:data:`_EXP_READ`), the
    header's comment on logs dropped. What ensembles (members' ``θ .* s .+ a``) and
    training (Optimisers.jl's update of ``θ``) run; the same text as codegen's
    ``julia_source(problem, log=all false)``, which tests/test_julia_static.py checks."""
    src = _EXP_SLICE.sub(r"\1\2", _EXP_READ.sub(r"\1\2", src))
    return _LOG_COMMENT.sub("", src)


def log_read(src: str, n_params: int) -> np.ndarray:
    """``True`` for every entry of ``p`` the generated model reads as ``exp`` of a log:
    the model's own answer to which parameters it takes as ``log θ``, checked against
    :func:`~sciml_bench.problem.compiled.log_scaled` when a case is built."""
    out = np.zeros(n_params, dtype=bool)
    for m in _EXP_READ.finditer(src):
        out[int(m[3]) - 1] = True
    for m in _EXP_SLICE.finditer(src):
        out[int(m[3]) - 1 : int(m[4])] = True
    return out


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


class Prepared(NamedTuple):
    """A single case's parameters as its timed calls take them: ``values``, Julia's
    ``Vector{T}`` of the model's ``u`` (:func:`~sciml_bench.backends.compiled.model_parameters`),
    and ``u`` as NumPy holds it after rounding to ``T`` (the point the gradient's chain rule
    is applied at)."""

    values: Any
    u: np.ndarray


class JuliaCase(Case):
    """A problem built in Julia; holds the Julia ``BenchCase`` and the module's functions.

    Its model takes ``u`` (``log θ_i`` where ``log_scaled[i]``); the public calls take
    ``θ`` and return ``∂L/∂θ`` (module doc, "Parameters in the gradient's scale")."""

    def __init__(
        self,
        jl_case: Any,
        module: Any,
        problem: CompiledProblem,
        options: CaseOptions,
        julia_error: type[BaseException],
        log_scaled: np.ndarray,
    ):
        self._case = jl_case
        self._mod = module
        self._julia_error = julia_error
        #: ``True`` where the model takes ``log θ`` (the model's ``p`` is ``u``)
        self.log_scaled = np.asarray(log_scaled, dtype=bool)
        self._dtype = np.float32 if options.dtype == "float32" else np.float64
        # the module's functions, looked up once: a lookup is a call into Julia
        self._raw = {"solve": module.solve_case_raw, "grad": module.loss_and_grad_case_raw}
        self._shape = (len(problem.t_save), problem.n_state)
        self._t_end = float(problem.t_span[1])
        self._solver = options.solver
        #: what was run, for the result record
        self.info = {
            "solver": f"{options.solver}()",
            "sensealg": GRADIENT_METHODS[options.gradient_method],
            "specialization": "SciMLBase.AutoSpecialize (default)",
            "maxiters": options.max_steps,
            "dtype": options.dtype,
            "parameter_scale": parameter_scale(self.log_scaled),
        }
        if options.dt is not None:
            self.info["fixed_step"] = f"solve(...; adaptive = false, dt = {options.dt!r})"
        if problem.size is not None:
            self.info["linear_solver"] = linear_solver(options)

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        # SciMLBenchJL catches solver and AD exceptions itself; this catches the rest (a
        # bad argument, a bug) so that no Julia exception ends the worker.
        try:
            return fn(*args)
        except self._julia_error as e:
            raise SolverFailure(Status.ERROR, f"Julia error: {e}") from None

    def prepare(self, theta: np.ndarray) -> Prepared:
        # the model's u as a Julia Vector{T} (the case's dtype), converted once: the timed
        # calls take it as is
        u = checked_model_parameters(theta, self.log_scaled)
        values = self._call(self._mod.case_params, self._case, _f64(u))
        return Prepared(values, u.astype(self._dtype).astype(np.float64))

    def timed_solve(self, params: Prepared) -> Any:
        # One call into Julia; it returns the raw solution (a Julia object), checked and
        # copied by check_solve's second call.
        return self._call(self._raw["solve"], self._case, params.values)

    def check_solve(self, raw: Any) -> Solution:
        y, retcode, t, stats, message = self._call(self._mod.check_solve_case, self._case, raw)
        counters = {k: int(v) for k, v in zip(STAT_KEYS, stats, strict=True) if int(v) >= 0}
        if str(retcode) not in SUCCESS_CODES:
            raise failure(str(retcode), float(t), self._t_end, self._solver, str(message))
        return Solution(y=np.array(y, dtype=np.float64).reshape(self._shape), stats=counters)

    def timed_grad(self, params: Prepared) -> Any:
        # Julia's raw (L, ∂L/∂u), and the u it was taken at, for check_grad's chain rule
        return self._call(self._raw["grad"], self._case, params.values), params.u

    def check_grad(self, raw: Any) -> tuple[float, np.ndarray]:
        result, u = raw
        value, grad_u, retcode, t, message = self._call(self._mod.check_grad_case, self._case,
                                                        result)  # fmt: skip
        if str(retcode) not in SUCCESS_CODES:
            raise failure(str(retcode), float(t), self._t_end, self._solver, str(message))
        # the forward solve succeeded, so a non-finite value means the adjoint (backward) did not
        value, grad_u = finite_gradient(value, grad_u, "loss", "a successful forward solve",
                                        "; the adjoint solve most likely failed, see Julia's "
                                        "warnings on stderr")  # fmt: skip
        # ∂L/∂θ_i = (∂L/∂u_i) / θ_i where the model takes log θ_i (P products, off the clock)
        return value, natural_gradient(grad_u, u, self.log_scaled)


def finite_gradient(
    value: Any, grad: Any, loss: str, after: str, hint: str = ""
) -> tuple[float, np.ndarray]:
    """``(L, dL/dθ)`` from Julia as a float and a float64 array, or a ``nonfinite`` failure
    naming the ``loss``, the solves it came ``after`` and how many gradient entries are bad."""
    g = np.array(grad, dtype=np.float64)
    value = float(value)
    if not (np.isfinite(value) and np.all(np.isfinite(g))):
        raise SolverFailure(
            Status.NONFINITE,
            f"non-finite {loss} or gradient after {after} "
            f"(loss={value}, {int(np.sum(~np.isfinite(g)))} bad gradient entries){hint}",
        )
    return value, g


def _counters(values: Any) -> np.ndarray | None:
    """Per-member counters from Julia; ``None`` where the solver reports none (-1)."""
    a = np.array(values, dtype=np.int64)
    return None if a.size == 0 or np.all(a < 0) else a


class JuliaEnsembleCase(EnsembleCase):
    """An ensemble built in Julia (:func:`SciMLBenchJL.build_ensemble_case`).

    The timed calls are one call into Julia each (the ensemble solve, or the loss and
    gradient), returning Julia's raw result; the member loop, the copies out of Julia,
    member statuses, finiteness and the conversion to NumPy are a second call, checked
    here, outside the clock.
    """

    def __init__(
        self,
        jl_case: Any,
        module: Any,
        problem: CompiledProblem,
        n: int,
        semantics: str,
        info: dict[str, Any],
        julia_error: type[BaseException],
        device: str = "cpu",
    ):
        self._case = jl_case
        self._mod = module
        self._julia_error = julia_error
        # the module's functions, looked up once: a lookup is a call into Julia
        self._raw = {"solve": module.solve_ensemble_raw, "grad": module.loss_and_grad_ensemble_raw}
        self.semantics = semantics
        self._n = n
        self._shape = (n, len(problem.t_save), problem.n_state)
        self._t_end = float(problem.t_span[1])
        #: what was run, for the result record
        self.info = info
        self._label = f"{info['ensemble']} {info['solver']}"
        self._device = device

    def placement(self) -> tuple[str, str | None]:
        """``("cuda", GPU model)`` for a DiffEqGPU ensemble (its arrays live on the GPU
        during the solve; DiffEqGPU copies the solutions back to the host before
        returning), else the CPU."""
        if self._device == "cuda":
            return "cuda", str(self._mod.gpu_device_name()) or None
        return super().placement()

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self._julia_error as e:
            raise SolverFailure(Status.ERROR, f"Julia error: {e}") from None

    def _check(self, failed: int, first: int, retcode: str, t: float, message: str) -> None:
        if retcode.startswith("Exception:"):
            raise failure(retcode, t, self._t_end, self._label, message)
        if failed == 0:
            return
        err = failure(retcode, t, self._t_end, self._label, message)
        where = f"{failed} of {self._n} members (first: member {first - 1})"
        raise SolverFailure(err.status, f"{err.reason}; {where}", err.t_reached)

    def prepare(self, theta: np.ndarray, weights: np.ndarray | None = None) -> Any:
        """θ and the member weights (``1/n`` each by default) as Julia vectors, converted
        once, outside the timed calls."""
        w = np.full(self._n, 1.0 / self._n) if weights is None else weights
        return (self._call(self._mod.as_params, _f64(theta)),
                self._call(self._mod.as_params, _f64(w)))  # fmt: skip

    def solve_raw(self, params: Any) -> Any:
        return self._call(self._raw["solve"], self._case, params[0])

    def check_solve(self, raw: Any) -> EnsembleSolution:
        out = self._call(self._mod.check_ensemble_solve, self._case, raw)
        y, failed, first, retcode, t, steps, rhs_evals, message = out
        self._check(int(failed), int(first), str(retcode), float(t), str(message))
        y = np.array(y, dtype=np.float64).reshape(self._shape)
        if not np.all(np.isfinite(y)):
            bad = int(np.sum(~np.all(np.isfinite(y), axis=(1, 2))))
            raise SolverFailure(
                Status.NONFINITE,
                f"Julia {self._label}: non-finite values in {bad} of {self._n} members "
                "(DiffEqGPU's kernel has no instability check)",
            )
        return EnsembleSolution(y, steps=_counters(steps), rhs_evals=_counters(rhs_evals))

    def grad_raw(self, params: Any) -> Any:
        return self._call(self._raw["grad"], self._case, *params)

    def check_grad(self, raw: Any) -> tuple[float, np.ndarray]:
        out = self._call(self._mod.check_ensemble_grad, self._case, raw)
        value, grad, failed, first, retcode, t, message = out
        self._check(int(failed), int(first), str(retcode), float(t), str(message))
        return finite_gradient(value, grad, "mean loss", "successful member solves")


def _pkgimage_facts(jl: Any) -> tuple[dict[str, Any], bool]:
    """The package image files found for the running Julia, and Julia's own answer on
    whether ``SciMLBenchJL``'s cache exists and is valid for this environment (never built
    here: precompiling is a setup step)."""
    version = julia_env.parse_version("julia version " + str(jl.seval("string(VERSION)")))
    files = julia_env.pkgimage_state(version or (0, 0, 0), julia_env.worker_device() == "cuda")
    valid = bool(
        jl.seval(
            f'let id = Base.identify_package("{julia_env.PACKAGE}"); '
            "id !== nothing && Base.isprecompiled(id) end"
        )
    )
    return files, valid


def _load_gpu_packages(jl: Any, julia_error: type[BaseException]) -> str:
    """Load the GPU extension's triggers in a cuda worker (it runs in ``julia/gpu``, where
    they load ``SciMLBenchJLGPUExt``); why that failed, or ``""``. A failure is reported by
    ``build_ensemble`` (``gpu_status``), as an unavailable row."""
    triggers = ", ".join(julia_env.GPU_TRIGGERS)
    try:
        jl.seval(f"using {triggers}")
    except julia_error as e:
        return f"loading {triggers} failed: {e}"
    return ""


def _case_args(
    problem: CompiledProblem, options: CaseOptions, observations: Any
) -> tuple[Any, ...]:
    """The arguments ``build_case`` and ``build_ensemble_case`` share, in their order: the
    span and save times, tolerances, step bound, the loss arrays (``observations`` as
    ``O``), the solver and the gradient method."""
    return (
        float(problem.t_span[0]),
        float(problem.t_span[1]),
        _f64(problem.t_save),
        float(options.rtol),
        float(options.atol),
        int(options.max_steps),
        _f64(problem.loss_W),
        _f64(observations),
        _f64(problem.loss_C),
        options.solver,
        options.gradient_method,
    )


def _f64(a: Any) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64)


def linear_solver(options: CaseOptions) -> str:
    """What an array problem's case factorises, as DifferentialEquations.jl does it."""
    if not SOLVERS[options.solver].stiff:
        return f"none ({options.solver} is explicit)"
    if options.extra.get("jacobian") == "sparse":
        return (
            "sparse jac_prototype (SparseMatrixCSC of the exact pattern): colored ForwardDiff "
            "Jacobian, LinearSolve's default sparse factorisation (KLU or UMFPACK)"
        )
    return "dense ForwardDiff Jacobian, LinearSolve's default dense LU"


def sparsity_args(problem: CompiledProblem, options: CaseOptions) -> tuple[np.ndarray, ...]:
    """The 1-based rows and columns of the exact Jacobian's pattern, read from the generated
    NumPy module, for a case with a sparse Jacobian (``jac_prototype``); else nothing."""
    if problem.size is None or options.extra.get("jacobian") != "sparse":
        return ()
    if not SOLVERS[options.solver].stiff:
        return ()
    from sciml_bench.problem.generated import load_python

    ns = load_python(problem.source["numpy"])
    return (
        np.ascontiguousarray(ns["JAC_ROWS"] + 1, dtype=np.int64),
        np.ascontiguousarray(ns["JAC_COLS"] + 1, dtype=np.int64),
    )


def julia_source(problem: CompiledProblem, options: CaseOptions) -> str:
    """The problem's generated Julia source, after checking ``options`` without Julia:
    a solver and gradient method the backend offers, float64 or float32."""
    if options.solver not in SOLVERS:
        raise ValueError(f"unknown Julia solver {options.solver!r}; choose from {list(SOLVERS)}")
    if options.gradient_method not in GRADIENT_METHODS:
        raise ValueError(
            f"unknown Julia gradient method {options.gradient_method!r}; "
            f"choose from {list(GRADIENT_METHODS)}"
        )
    if options.dtype not in JuliaBackend.dtypes:
        raise ValueError(f"the Julia backend runs {' or '.join(JuliaBackend.dtypes)}, "
                         f"not {options.dtype}")  # fmt: skip
    src = problem.source.get("julia")
    if not src:
        raise ValueError(f"problem {problem.name!r} has no generated Julia source")
    return src


def model_scale(problem: CompiledProblem, src: str) -> np.ndarray:
    """Which parameters the generated model ``src`` takes as logs (:func:`log_read`), or a
    ``ValueError`` where that is not :func:`~sciml_bench.problem.compiled.log_scaled`'s
    answer: the chain rule back to ``∂L/∂θ`` must be applied exactly where the model
    computes ``exp`` (a problem compiled from another source would otherwise be given a
    silently wrong gradient)."""
    read, want = log_read(src, problem.n_params), log_scaled(problem)
    if not np.array_equal(read, want):
        raise ValueError(
            f"{problem.name}: the generated Julia model takes log θ for parameters "
            f"{np.flatnonzero(read).tolist()[:8]}, but the problem's log_params say "
            f"{np.flatnonzero(want).tolist()[:8]}; regenerate the source (compile_problem)"
        )
    return read


def theta_form(problem: CompiledProblem, src: str) -> str:
    """:func:`theta_source` of ``src``, checked to read no parameter as ``exp`` of a log."""
    out = theta_source(src)
    if np.any(log_read(out, problem.n_params)):
        raise ValueError(f"{problem.name}: the θ form of the Julia model still reads logs")
    return out


def ensemble_plan(
    problem: CompiledProblem, options: CaseOptions, n: int, semantics: str, device: str
) -> dict[str, Any]:
    """What an ensemble of ``n`` members runs, or :class:`EnsembleNotOffered` saying why
    not; decided without Julia. Returns the record's description and, for the GPU kernel,
    the static RHS source (``static_src``) of the model's ``θ`` form (members' parameters
    are ``θ .* s .+ a``, natural units: :func:`theta_source`)."""
    src = theta_form(problem, julia_source(problem, options))
    if options.dtype != "float64" or SOLVERS[options.solver].fixed_step:
        raise EnsembleNotOffered("julia: ensembles run float64 and adaptive steps only")
    if device == "cpu":
        if semantics != "independent":
            raise EnsembleNotOffered(
                f"julia: no {semantics} ensemble on the CPU; its coupled ensemble is "
                "DiffEqGPU's EnsembleGPUArray (one fused system, one step size), on cuda only"
            )
        return {
            "ensemble": "SciMLBase.EnsembleThreads()",
            "solver": f"{options.solver}()",
            "sensealg": GRADIENT_METHODS[options.gradient_method],
            "static_src": "",
        }
    if device != "cuda" or semantics not in GPU_ENSEMBLES:
        raise EnsembleNotOffered(f"julia: no {semantics} ensemble on {device}")
    if semantics == "independent" and options.solver not in GPU_KERNEL_SOLVERS:
        raise EnsembleNotOffered(
            f"julia: EnsembleGPUKernel runs {', '.join(GPU_KERNEL_SOLVERS)} "
            f"({', '.join(GPU_KERNEL_SOLVERS.values())}), not {options.solver}"
        )
    if semantics == "coupled" and options.solver not in GPU_ARRAY_SOLVERS:
        raise EnsembleNotOffered(
            f"julia: EnsembleGPUArray is offered with {', '.join(GPU_ARRAY_SOLVERS)}, "
            f"not {options.solver} (its stiff solvers need analytic Jacobians)"
        )
    if options.gradient_method != GPU_GRADIENT:
        raise EnsembleNotOffered(
            f"julia: GPU ensembles are differentiated with ForwardDiff ({GPU_GRADIENT}) only, "
            f"not {options.gradient_method}"
        )
    static = static_rhs_source(src)
    if static is None:
        raise EnsembleNotOffered(
            f"julia: {problem.name}'s right-hand side builds arrays (a network layer), "
            "which cannot run inside a GPU kernel (DiffEqGPU: no allocation, broadcast or BLAS)"
        )
    if n < 2:
        raise EnsembleNotOffered(
            "julia: DiffEqGPU solves a one-member ensemble with EnsembleSerial on the CPU, "
            "so a cuda row of size 1 would be a CPU run"
        )
    solver = options.solver
    if semantics == "independent":
        solver = GPU_KERNEL_SOLVERS[solver]
    return {
        "ensemble": GPU_ENSEMBLES[semantics],
        "solver": f"{solver}()",
        "sensealg": GPU_GRADIENT_INFO,
        "static_src": static if semantics == "independent" else "",
    }


class JuliaBackend(Backend):
    """DifferentialEquations.jl (OrdinaryDiffEq + SciMLSensitivity) via juliacall."""

    name = "julia"
    packages = ("juliacall", "juliapkg")
    extra = "julia"
    gradient_methods = GRADIENT_METHODS
    solver_table = SOLVERS
    stiff_solver, nonstiff_solver = "Rodas5P", "Tsit5"
    modules = ("juliacall",)
    #: Float32 arrays throughout (``SciMLBenchJL.build_case``'s ``dtype``)
    dtypes = ("float64", "float32")
    #: array problems: broadcasting rhs! on views; a sparse Jacobian is a jac_prototype
    array_problems = True
    jacobians = ("dense", "sparse")

    def __init__(self) -> None:
        self._module: Any = None
        self._julia_error: type[BaseException] | None = None
        #: facts about the load, for the result record: where Julia came from, whether
        #: package images were present before loading (warm) and the library versions
        self.load_info: dict[str, Any] = {}
        #: why loading the GPU packages failed in a cuda worker ("" if it did not)
        self.gpu_load_error = ""

    def availability(self) -> Availability:
        found = julia_env.cached_probe()
        return Availability(found.ok, found.reason, found.fix)

    #: independent: EnsembleThreads (CPU) or EnsembleGPUKernel (cuda); coupled:
    #: EnsembleGPUArray (cuda only), whose fused system has one step size for every member
    ensemble_semantics = ("independent", "coupled")
    #: single trajectories run on the CPU only; ensembles also on cuda (DiffEqGPU)
    ensemble_devices = ("cpu", "cuda")

    def ensemble_offer(self, device: str) -> tuple[str, ...]:
        # the coupled ensemble is EnsembleGPUArray: no CPU worker is spawned to refuse it
        return self.ensemble_semantics if device == "cuda" else ("independent",)

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
        juliacall = self._start_julia(phases)
        jl = juliacall.Main
        t1 = time.perf_counter()
        files, valid = _pkgimage_facts(jl)
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
        if julia_env.worker_device() == "cuda":
            t4 = time.perf_counter()
            self.gpu_load_error = _load_gpu_packages(jl, juliacall.JuliaError)
            phases["gpu_package_load"] = time.perf_counter() - t4
        self.load_info = {
            "julia_bindir": str(jl.seval("Sys.BINDIR")),
            "julia_project": str(jl.seval("Base.active_project()")),
            "juliacall_env": {k: v for k, v in os.environ.items() if "JULIACALL" in k},
            "pkgimage_files": files,
            "pkgimage_valid": valid,
            "versions": dict(self._module.versions()),
            "threads": int(jl.seval("Threads.nthreads()")),
        }
        return phases

    def _start_julia(self, phases: dict[str, float]) -> Any:
        """Import juliacall (starting Julia), timing ``julia_probe`` and ``juliacall_init``
        into ``phases`` where they happen here; returns the juliacall module."""
        t0 = time.perf_counter()
        if "juliacall" not in sys.modules:
            # Only before juliacall starts does it matter which Julia and project it gets.
            julia_env.configure_juliacall(julia_env.cached_probe())
            phases["julia_probe"] = time.perf_counter() - t0
        juliacall = julia_env.import_juliacall()
        if julia_env.JULIACALL_IMPORT_S is not None:
            phases["juliacall_init"] = julia_env.JULIACALL_IMPORT_S
        self._julia_error = juliacall.JuliaError
        return juliacall

    def build(self, problem: CompiledProblem, options: CaseOptions) -> Case:
        """The case runs the generated model as it is: its ``p`` is ``u``, ``log θ`` for
        the parameters in log space (module doc)."""
        return self._build(problem, options, theta=False)

    def _build(self, problem: CompiledProblem, options: CaseOptions, theta: bool) -> JuliaCase:
        """A single case of the generated model, or (``theta``, for training) of its
        ``θ`` form; built from ``p0 = u0``, the model's parameters at ``θ0``."""
        from sciml_bench.backends.base import fixed_step_plan

        src = julia_source(problem, options)
        log = model_scale(problem, src)  # before Julia, as every check here
        if theta:
            src, log = theta_form(problem, src), np.zeros_like(log)
        step = fixed_step_plan(problem, options, SOLVERS[options.solver])
        self.load()
        assert self._julia_error is not None

        try:
            jl_case = self._module.build_case(
                src,
                _f64(problem.y0),
                _f64(checked_model_parameters(problem.theta0, log)),
                *_case_args(problem, options, problem.loss_O),
                options.dtype,
                float(step or 0.0),  # 0: adaptive
                *sparsity_args(problem, options),
                # the generated y0(p): a start that moves with the parameters
                **({"moving_start": True} if problem.y0_depends else {}),
            )
        except self._julia_error as e:
            raise RuntimeError(f"building the Julia case failed: {e}") from None
        return JuliaCase(jl_case, self._module, problem, options, self._julia_error, log)

    def build_ensemble(
        self,
        problem: CompiledProblem,
        options: CaseOptions,
        batch: Batch,
        semantics: str,
    ) -> EnsembleCase:
        device = options.device
        plan = ensemble_plan(problem, options, batch.n, semantics, device)
        self.load()
        assert self._julia_error is not None
        if device == "cuda":
            why = self.gpu_load_error or str(self._module.gpu_status())
            if why:
                raise EnsembleNotOffered(f"julia: {why}. Fix: {julia_env.GPU_SETUP_FIX}")
        obs = batch.observations
        if obs is None:  # every member shares the problem's O: one block, broadcast in Julia
            obs = problem.loss_O[None]
        try:
            jl_case = self._module.build_ensemble_case(
                theta_form(problem, julia_source(problem, options)),
                plan["static_src"],
                _f64(batch.y0),
                _f64(batch.scale),
                _f64(batch.shift),
                _f64(problem.theta0),
                *_case_args(problem, options, obs),
                device,
                semantics,
            )
        except self._julia_error as e:
            raise RuntimeError(f"building the Julia ensemble failed: {e}") from None
        info = {
            "semantics": semantics,
            "members": batch.n,
            "shared_theta": not batch.varies_parameters,
            "ensemble": plan["ensemble"],
            "solver": plan["solver"],
            "sensealg": plan["sensealg"],
            "maxiters": options.max_steps,
            "threads": self.load_info.get("threads"),
        }
        if plan["static_src"]:
            info["rhs"] = "out-of-place rhs(u, p, t) -> SVector (static_rhs_source)"
            info["initial_dt"] = "(t1 - t0) / 1000; the kernel has no step bound (maxiters)"
        return JuliaEnsembleCase(
            jl_case, self._module, problem, batch.n, semantics, info, self._julia_error, device
        )

    def build_training(
        self, problem: CompiledProblem, options: CaseOptions, adam: Adam
    ) -> TrainingCase:
        """The case's problem under Optimisers.jl's Adam (``julia/src/training.jl``), in
        ``θ``: Adam's update is on natural units, so the case runs the model's ``θ`` form."""
        case = self._build(problem, options, theta=True)
        assert isinstance(case, JuliaCase) and self._julia_error is not None
        constants = (adam.learning_rate, adam.beta1, adam.beta2, adam.eps)
        try:
            state = self._module.build_training(case._case, *map(float, constants))
        except self._julia_error as e:
            raise RuntimeError(f"building the Julia training loop failed: {e}") from None
        return JuliaTrainingCase(state, self._module, case, adam)


# -- training (sciml-bench run NAME --train) -------------------------------------------------


class JuliaTrainingCase(TrainingCase):
    """Optimisers.jl's loop (``julia/src/training.jl``): per iteration, one call into Julia
    that takes ``Zygote.withgradient`` of the loss (the case's ``sensealg``) and applies
    ``Optimisers.update!`` with ``Optimisers.Adam(η, (β1, β2), ϵ)``. The rule's constants
    are read back from Julia when it is built: a rule holding anything but the declared
    constants is an error, never a silent default."""

    def __init__(self, state: Any, module: Any, case: JuliaCase, adam: Adam):
        self._state = state
        self._mod = module
        self._case = case
        declared = (adam.learning_rate, adam.beta1, adam.beta2, adam.eps)
        held = tuple(float(x) for x in self._mod.training_rule(state))
        if held != declared:
            raise RuntimeError(f"Optimisers.Adam holds (eta, beta1, beta2, epsilon) = {held}, "
                               f"not the declared {declared}")  # fmt: skip
        self.info = {**case.info, "loop": "Zygote.withgradient; Optimisers.update!",
                     "optimizer": f"Optimisers.Adam({held[0]!r}, ({held[1]!r}, {held[2]!r}), "
                                  f"{held[3]!r})"}  # fmt: skip

    def step(self) -> Any:
        return self._case._call(self._mod.train_step_case, self._state)

    def check(self, raw: Any) -> float:
        value, retcode, t, message = raw
        c = self._case
        if str(retcode) not in SUCCESS_CODES:
            raise failure(str(retcode), float(t), c._t_end, c._solver, str(message))
        value = float(value)
        if not np.isfinite(value):
            raise SolverFailure(Status.NONFINITE, f"Julia {c._solver}: non-finite loss ({value})")
        return value

    def parameters(self) -> np.ndarray:
        return np.array(self._mod.training_parameters(self._state), dtype=np.float64)
