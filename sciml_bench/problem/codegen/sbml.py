"""SBML for AMICI: the problem as the model ``amici.SbmlImporter`` reads.

The model is :func:`sciml_bench.problem.sbml.write.text`'s (``sciml-bench export-sbml``):
SBML Level 3 Version 2, each state a non-constant parameter with a rate rule
``dy/dt = f(y, θ, t)``, each named parameter a constant parameter (AMICI's free
parameters, in declaration order), built node by node from the sympy expressions. What
SBML has no place for (save points, tolerances, the loss as observables and noise, the
parameter scale) the AMICI backend sets on the compiled model
(:mod:`sciml_bench.backends.amici`).

An array problem is written one rate rule per element (state ``u[1,2]`` as the parameter
``u_1_2``: :mod:`sciml_bench.problem.sbml.write_arrays`). A problem the writer refuses (a
network, an array problem above its size cap, a sympy node without an SBML counterpart)
gives no model: the source is an XML comment holding
:data:`~sciml_bench.problem.generated.NOT_EXPRESSIBLE` and the writer's reason, which the
AMICI backend turns into an ``unavailable`` row. Without python-libsbml (the ``sbml``
extra, which AMICI itself requires) the comment says so.
"""

from __future__ import annotations

from sciml_bench.problem.generated import NOT_EXPRESSIBLE
from sciml_bench.problem.spec import Problem


def _refusal(reason: str) -> str:
    # "--" may not appear inside an XML comment; the reason has a line of its own, so that
    # not_expressible() reads it without the comment's markers
    return f"<!--\n{NOT_EXPRESSIBLE} in SBML: {reason.replace('--', '- -')}\n-->\n"


def sbml_source(problem: Problem) -> str:
    """``problem`` as SBML text, or an XML comment saying why it cannot be written."""
    from sciml_bench.problem.sbml.refuse import SBMLError

    try:
        from sciml_bench.problem.sbml.write import text

        return text(problem)
    except SBMLError as e:
        return _refusal(e.reason)
    except ImportError:
        return _refusal("python-libsbml is not installed: pip install -c constraints.txt "
                        "-e '.[sbml]'")  # fmt: skip
