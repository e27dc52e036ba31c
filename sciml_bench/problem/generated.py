"""Loading generated Python source, without sympy.

Workers receive generated source in the :class:`~sciml_bench.problem.compiled.CompiledProblem`
bundle and load it here: importing :mod:`sciml_bench.problem.codegen` would import sympy
(about 0.5 s), which would land in a backend's build phase and tilt time to first gradient.
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
