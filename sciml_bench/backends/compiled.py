"""What the compiled-solver backends share: SUNDIALS CVODES through CasADi
(:mod:`~sciml_bench.backends.cvodes`), diffsol through pydiffsol
(:mod:`~sciml_bench.backends.diffsol`) and CVODES through AMICI
(:mod:`~sciml_bench.backends.amici`, whose model is C++ compiled from SBML and whose
parameter scale is AMICI's own ``ln``; what follows holds for it too unless its module
says otherwise: it runs no array problem yet).

Both compile the problem's generated model once at build (a CasADi graph, DiffSL text
JIT-compiled by LLVM) and solve it in one call into native code, in float64. So both:

- refuse a model their modelling language cannot express (:func:`expressible_source`);
- differentiate with forward sensitivities for few parameters and the adjoint for many
  (:func:`forward_or_adjoint`), as their guides recommend;
- run array problems with a dense or a sparse Jacobian;
- solve one trajectory per call, so offer no ensemble;
- raise their failures as a ``RuntimeError`` whose text is classified into a status
  (:func:`library_failure`);
- count the shared step bound after the solve
  (:func:`~sciml_bench.backends.step_bound.check_steps`): neither bounds the whole solve;
- take each parameter in the scale its gradient is judged in (so does the julia backend's
  single-trajectory case, with these same functions): the generated model reads
  ``u_i = log θ_i`` for a parameter in log space
  (:func:`~sciml_bench.problem.compiled.log_scaled`) and computes ``θ_i = exp(u_i)``
  inside, so the library differentiates ``L`` with respect to ``u``
  (:func:`model_parameters`) and the case returns ``∂L/∂θ_i = (∂L/∂u_i) / θ_i``
  (:func:`natural_gradient`). Their sensitivity error tests weigh every parameter with one
  absolute tolerance: on ``θ`` that tolerance cannot serve rates from 0.04 to 3e7, on
  ``log θ`` it does (docs/backends.md, "Parameters in the gradient's scale"). A case's
  public calls still take ``θ`` and return ``∂L/∂θ`` in natural units.

Each backend module keeps what is its library's own: its settings, its compiled calls and
how it reads its counters and error texts.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np

from sciml_bench.backends.base import Backend, Case, CaseOptions, ProblemNotExpressible
from sciml_bench.backends.ensemble import EnsembleCase, EnsembleNotOffered
from sciml_bench.measure.status import SolverFailure, Status, classify_message
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.problem.ensemble import Batch

#: CVODES' and diffsol's guides: forward sensitivities for few parameters, the adjoint for
#: many. Their default gradient is ``forward`` up to this many parameters, ``adjoint``
#: above (the crossover and robustness measured in docs/backends.md, "CVODES (through
#: CasADi) and diffsol"; the reference gradient switches to directional derivatives
#: above the same count)
FORWARD_SENSITIVITY_LIMIT = 64


def forward_or_adjoint(problem: CompiledProblem) -> str:
    """``forward`` up to :data:`FORWARD_SENSITIVITY_LIMIT` parameters, else ``adjoint``."""
    return "forward" if problem.n_params <= FORWARD_SENSITIVITY_LIMIT else "adjoint"


def expressible_source(library: str, problem: CompiledProblem, target: str) -> str:
    """The problem's generated ``target`` source, or :class:`ProblemNotExpressible` when
    the code generator marked it as beyond the library's modelling language."""
    from sciml_bench.problem.generated import not_expressible

    if target not in problem.source:  # a caller's mistake, said plainly, not a KeyError
        raise RuntimeError(f"{library}: {problem.name} was compiled without its {target} "
                           "source (reference.compile_problem(..., sbml=True) makes SBML)")
    source = problem.source[target]
    why = not_expressible(source)
    if why is not None:
        raise ProblemNotExpressible(f"{library}: {problem.name} is {why}")
    return source


def model_parameters(theta: Any, log_scaled: Any) -> np.ndarray:
    """The model's parameters ``u``: ``u_i = log θ_i`` where ``log_scaled[i]`` (the model
    computes ``θ_i = exp(u_i)``), else ``u_i = θ_i``."""
    theta = np.asarray(theta, dtype=np.float64)
    log = np.asarray(log_scaled, dtype=bool)
    return np.where(log, np.log(np.where(log, theta, 1.0)), theta)


def checked_model_parameters(theta: Any, log_scaled: Any) -> np.ndarray:
    """:func:`model_parameters`, or an ``error`` :class:`SolverFailure` naming the first
    parameter whose log does not exist (``θ_i ≤ 0`` where ``log_scaled[i]``): a model fed
    NaN would fail somewhere less telling."""
    theta = np.asarray(theta, dtype=np.float64)
    bad = np.asarray(log_scaled, dtype=bool) & ~(theta > 0)
    if np.any(bad):
        i = int(np.argmax(bad))
        raise SolverFailure(Status.ERROR, f"parameter {i} is {float(theta[i])!r}, but the model "
                            "takes its log (it is differentiated in log space)")  # fmt: skip
    return model_parameters(theta, log_scaled)


def natural_gradient(grad_u: Any, u: Any, log_scaled: Any) -> np.ndarray:
    """``∂L/∂θ`` from the model's ``∂L/∂u`` (:func:`model_parameters`): the chain rule
    ``∂L/∂θ_i = (∂L/∂u_i) ∂u_i/∂θ_i = (∂L/∂u_i) / θ_i = (∂L/∂u_i) exp(-u_i)`` where
    ``log_scaled[i]``, else ``∂L/∂u_i`` itself."""
    g = np.asarray(grad_u, dtype=np.float64).ravel()
    u = np.asarray(u, dtype=np.float64).ravel()
    return np.where(np.asarray(log_scaled, dtype=bool), g * np.exp(-u), g)


def parameter_scale(log_scaled: np.ndarray) -> str:
    """What a row records of its model's parameters (``case_info.parameter_scale``)."""
    k, n = int(np.sum(log_scaled)), int(np.size(log_scaled))
    if k == 0:
        return f"θ for all {n} parameters"
    rest = "" if k == n else f", θ for the other {n - k}"
    return f"log θ for {k} of {n} parameters (the model computes exp){rest}"


def library_failure(library: str, message: str, t_reached: float | None = None) -> SolverFailure:
    """A failed library call as a status classified from its message (``library: message``)."""
    return SolverFailure(classify_message(message), f"{library}: {message}", t_reached)


class CompiledCase(Case):
    """A case whose library calls raise ``RuntimeError`` on failure: :meth:`_call` turns
    that into the library's :class:`SolverFailure` (:meth:`failure`). Its model takes the
    parameters ``u`` of :func:`model_parameters` (:meth:`prepare`), and its timed gradient
    comes back as ``(L, ∂L/∂u, u)`` in the library's arrays; :meth:`check_grad` applies
    the chain rule to ``∂L/∂θ`` (``P`` multiplications, off the clock as every
    conversion to NumPy is)."""

    #: ``True`` where the model takes ``log θ`` (:func:`~sciml_bench.problem.compiled.log_scaled`)
    log_scaled: np.ndarray

    @abstractmethod
    def failure(self, e: RuntimeError) -> SolverFailure:
        """The library's error as a status, with how far in t it got where it tells."""

    @abstractmethod
    def library_parameters(self, u: np.ndarray) -> Any:
        """The model's parameters ``u`` in the library's own form (made once)."""

    def prepare(self, theta: np.ndarray) -> Any:
        return self.library_parameters(checked_model_parameters(theta, self.log_scaled))

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except RuntimeError as e:
            raise self.failure(e) from None

    def check_grad(self, raw: Any) -> tuple[float, np.ndarray]:
        value, grad_u, u = raw
        # the worker rejects a non-finite gradient
        return float(value), natural_gradient(grad_u, u, self.log_scaled)


class CompiledBackend(Backend):
    """A compiled-solver library: float64, forward or adjoint sensitivities by parameter
    count, dense or sparse Jacobians of array problems, no ensemble."""

    #: array problems: the library's array model, with a dense or a sparse Jacobian
    array_problems = True
    jacobians = ("dense", "sparse")
    ensemble_semantics = ("independent",)
    #: why the library offers no ensemble (the row's reason)
    no_ensemble: str = ""

    def default_gradient(self, problem: CompiledProblem) -> str:
        return forward_or_adjoint(problem)

    def build_ensemble(
        self, problem: CompiledProblem, options: CaseOptions, batch: Batch, semantics: str
    ) -> EnsembleCase:
        raise EnsembleNotOffered(f"{self.name}: no ensemble: {self.no_ensemble}")
