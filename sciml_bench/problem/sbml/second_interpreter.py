"""The reference solution read by a second interpreter of the model: libRoadRunner (the SBML
simulator under Tellurium, its own SBML reader, LLVM-compiled model and CVODE) solves the
problem's SBML at a tight tolerance and the reference's states at the save points are
compared with its (design principle 4b: a reference built from an import can share the
import's mistake with every backend; a second reading of the model, by code that shares
nothing with the suite's importer, code generator or SciPy solver, does not).

Which SBML: the modeller's own file where the problem was imported from one
(``problem.sbml_model``: its states' formulas and parameters' ids), else the suite's
rate-rule export of the problem (:func:`sciml_bench.problem.sbml.write.text`), which then
checks the reference's solver and code generation, not an import. The measure is the rows'
(:func:`~sciml_bench.problem.solution_measures.solution_error`'s ``rel_l2``, each state
scaled by its largest magnitude floored at ``atol / rtol``), and it agrees when that is at
most :data:`~sciml_bench.problem.reference.SOLUTION_CHECK_BOUND`, the bound the reference's
own second-method check uses. roadrunner is imported inside the functions (the
``roadrunner`` extra); without it the check says so and how to install it.
"""

from __future__ import annotations

import importlib.util
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from sciml_bench.problem.reference import SOLUTION_CHECK_BOUND, Reference
from sciml_bench.problem.sbml import roadrunner_model as rm
from sciml_bench.problem.solution_measures import floor_of, solution_error
from sciml_bench.problem.spec import Problem

#: the second interpreter's relative tolerance; its absolute one keeps the reference's ratio
RTOL = 1e-10
#: CVODE's step bound per interval between save points (roadrunner's maximum_num_steps):
#: far above what a tight solve of a stiff problem takes (ROBER: hundreds), so that only a
#: runaway stops it
MAX_STEPS = 500_000
#: what to run to get the interpreter
INSTALL = "pip install -c constraints.txt -e '.[roadrunner]'"


@dataclass
class SecondInterpreterCheck:
    """What ran (``kind``: "libRoadRunner 2.10.0 CVODE at rtol 1e-10"; ``model``: which
    SBML), the disagreement with the reference on the rows' measure and the worst state, or
    why it did not run (``skipped``: roadrunner missing, with the fix; a failure, with its
    message). ``ok``: it ran and agrees within :data:`SOLUTION_CHECK_BOUND`."""

    kind: str = ""
    model: str = ""
    agreement: float | None = None
    worst_state: str = ""
    skipped: str = ""

    @property
    def ok(self) -> bool:
        return self.agreement is not None and self.agreement <= SOLUTION_CHECK_BOUND

    def summary(self) -> str:
        """One line: what ran on which model and how far it is from the reference."""
        if self.agreement is None:
            what = f" ({self.kind})" if self.kind else ""
            return f"second interpreter{what}: not run: {self.skipped}"
        verdict = "agrees" if self.ok else "DISAGREES"
        bound = "<=" if self.ok else ">"
        return (f"second interpreter ({self.kind}, {self.model}): {verdict} with the reference "
                f"to {self.agreement:.2g} (worst state {self.worst_state}) {bound} "
                f"{SOLUTION_CHECK_BOUND:g}")  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def model_plan(problem: Problem) -> rm.ModelPlan:
    """The modeller's own file where the problem has one, else the suite's export (which
    raises :class:`~.refuse.SBMLError` where a problem has no SBML form, a network's)."""
    own = problem.sbml_model
    if own is not None:
        return rm.own_plan(own.text, own.states, own.parameters, own.locals)
    from sciml_bench.problem.sbml import write

    return rm.export_plan(write.text(problem), problem.state_names, problem.param_names)


def simulate(problem: Problem, plan: rm.ModelPlan, atol: float) -> np.ndarray:
    """The states at the save points (``n_save × n_state``) by roadrunner at :data:`RTOL`
    and ``atol`` (per state in its units), BDF, from the problem's parameters ``theta0``
    (set as initial values, initial assignments re-evaluated)."""
    r = rm.load(plan)
    reads = [rm.state_read(r, f) for f in plan.formulas]
    integrator = r.integrator
    integrator.setValue("stiff", True)
    integrator.setValue("relative_tolerance", RTOL)
    integrator.setValue("absolute_tolerance", rm.tolerance_vector(r, atol, plan.formulas))
    integrator.setValue("maximum_num_steps", MAX_STEPS)
    rm.check_parameters(r, plan.parameters, problem.theta0)
    r.timeCourseSelections = [s.selection for s in reads]
    times, drop = rm.output_times(float(problem.t_span[0]), problem.t_save)
    return np.array(r.simulate(times=times), dtype=np.float64)[drop:]


def cross_check(problem: Problem, reference: Reference) -> SecondInterpreterCheck:
    """The reference's solution against libRoadRunner's at :data:`RTOL` (its atol the
    reference's scaled by ``RTOL / reference.rtol``) at the save points, on the rows'
    measure with the problem's ``atol / rtol`` floor, the worst state named."""
    if importlib.util.find_spec("roadrunner") is None:
        return SecondInterpreterCheck(skipped=f"libroadrunner is not installed ({INSTALL})")
    if reference.missing or not reference.y:
        why = reference.missing or "it has no solution"
        return SecondInterpreterCheck(skipped=f"the reference has no solution to check ({why})")
    import roadrunner

    kind = f"libRoadRunner {roadrunner.__version__} CVODE at rtol {RTOL:g}"
    try:
        plan = model_plan(problem)
    except ImportError as e:
        return SecondInterpreterCheck(kind, skipped=f"{e} (pip install -c constraints.txt "
                                      "-e '.[sbml]' for the SBML export)")  # fmt: skip
    except ValueError as e:  # SBMLError: the problem has no SBML form
        return SecondInterpreterCheck(kind, skipped=f"no SBML model: {e}")
    try:
        y = simulate(problem, plan, reference.atol * RTOL / reference.rtol)
    except (RuntimeError, ValueError) as e:
        said = " ".join(str(e).split())[:300]
        return SecondInterpreterCheck(kind, plan.which, skipped=f"roadrunner failed: {said}")
    err = solution_error(y, np.asarray(reference.y), floor_of(problem.atol, problem.rtol))
    worst = problem.state_names[err["worst_state"]] if err["worst_state"] >= 0 else "?"
    return SecondInterpreterCheck(kind, plan.which, float(err["rel_l2"]), worst)
