"""Code generation: a problem's right-hand side as the source each target runs.

The generated text is exactly what a backend runs (``sciml-bench codegen`` prints it), so
fairness can be audited. One module per target, each over scalar and array problems
(:mod:`sciml_bench.problem.arrays`):

- ``numpy``, ``torch``, ``jax``: :mod:`.python` (scalar problems; NumPy's exact Jacobians
  in :mod:`.jacobian`) and :mod:`.arrays_python` (array problems);
- ``julia``: :mod:`.julia`, the in-place ``rhs!(du, u, p, t)``;
- ``casadi``: :mod:`.casadi`, ``rhs(t, y, p)`` building CasADi expressions;
- ``diffsl``: :mod:`.diffsl` (and :mod:`.diffsl_arrays`), the model pydiffsol compiles;
- ``sbml``: :mod:`.sbml`, the SBML model AMICI imports and compiles (scalar problems);
- a problem's events: :mod:`.events` (NumPy's, JAX's and torch's functions; every other
  target's refusal).

What they share: :mod:`.printing` (the printers' base, symbol names, CSE, dead
bindings), :mod:`.native` and :mod:`.grid` (the NumPy/torch/JAX/Julia pieces of a scalar
and an array problem) and :mod:`.operators` (an array operator as sparse matrix entries).
Workers load the generated Python with :mod:`sciml_bench.problem.generated`, which
imports no sympy.
"""

from __future__ import annotations

import sciml_bench.problem.codegen.arrays_python as arrays_python
from sciml_bench.problem.codegen.casadi import casadi_source
from sciml_bench.problem.codegen.diffsl import diffsl_source
from sciml_bench.problem.codegen.events import event_targets
from sciml_bench.problem.codegen.events import refusal as event_refusal
from sciml_bench.problem.codegen.jacobian import param_jacobian_source
from sciml_bench.problem.codegen.julia import julia_source
from sciml_bench.problem.codegen.python import python_source
from sciml_bench.problem.codegen.sbml import sbml_source
from sciml_bench.problem.generated import load_python
from sciml_bench.problem.spec import Problem

__all__ = ["TARGETS", "targets", "generate", "load_python", "python_source", "julia_source",
           "param_jacobian_source", "state_layout"]  # fmt: skip

TARGETS = ("numpy", "torch", "jax", "julia", "casadi", "diffsl", "sbml")


def targets(problem: Problem) -> tuple[str, ...]:
    """The targets ``problem`` has source for: every one of :data:`TARGETS` (an array
    problem's as array code; its ``sbml`` source says why it has no model)."""
    if problem.array is None:
        return TARGETS
    return (*arrays_python.TARGETS, "julia", "casadi", "diffsl", "sbml")


def generate(problem: Problem, target: str) -> str:
    """The exact source a backend runs for ``target`` (one of :data:`TARGETS`). A problem
    with events has NumPy's, JAX's and torch's alone so far; every other target's is the
    refusal that says so (:func:`.events.refusal`), which the run, ``check`` and ``codegen`` all read."""
    if problem.events and target not in event_targets(problem) and target in TARGETS:
        return event_refusal(problem, target)
    if target == "casadi":
        return casadi_source(problem)
    if target == "diffsl":
        return diffsl_source(problem)
    if target == "sbml":
        return sbml_source(problem)
    if target == "julia":
        return julia_source(problem)
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    if problem.array is not None:
        return arrays_python.python_source(problem, target)
    return python_source(problem, target)


def state_layout(problem: Problem) -> tuple[int, int] | None:
    """``(S, n)`` of an array problem (states, grid elements), which the DiffSL model
    stores state by state; None for a scalar problem (stored in the suite's layout)."""
    return None if problem.array is None else problem.array.state_layout
