"""Loading generated Python source, without sympy.

Workers receive generated source in the :class:`~sciml_bench.problem.compiled.CompiledProblem`
bundle and load it here: importing :mod:`sciml_bench.problem.codegen` would import sympy,
whose import time would land in a backend's build phase and tilt time to first gradient
(measured: docs/measurements.md, "How it measures (and why you can trust it)", "Every
measurement in a fresh process").
"""

from __future__ import annotations

from typing import Any


def load_python(source: str) -> dict[str, Any]:
    """Execute generated (never user-written) source and return its namespace.

    The text comes from :mod:`sciml_bench.problem.codegen`, whose every token is produced
    by its printer from a whitelisted expression tree.
    """
    namespace: dict[str, Any] = {}
    exec(compile(source, "<sciml-bench generated>", "exec"), namespace)  # noqa: S102
    return namespace


#: what a generator writes, in a comment, instead of code for a problem its target's
#: language cannot express; the reason follows it
NOT_EXPRESSIBLE = "sciml-bench: not expressible"


class NotExpressible(ValueError):
    """Raised inside a code generator: the target cannot express the problem (the message
    names what is missing). The generator writes it as a :data:`NOT_EXPRESSIBLE` comment."""


def not_expressible(source: str) -> str | None:
    """Why generated ``source`` holds no code, else None: ``"not expressible in DiffSL:
    <what is missing>"``, the marker's line from ``not expressible`` on."""
    for line in source.splitlines():
        if NOT_EXPRESSIBLE in line:
            return line[line.index(NOT_EXPRESSIBLE) + len("sciml-bench: "):]
    return None
