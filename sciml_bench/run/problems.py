"""The problems a run names, loaded before anything runs: shipped ones by name, problem
files, and SBML models imported as ``sciml-bench import`` writes them and checked against
their files where cheap.

A problem that cannot be loaded is the problem layer's :class:`~sciml_bench.problem.spec.ProblemError`
(an SBML refusal is one too): one line, exit code 2 at the command line, before the
results file exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sciml_bench.run.options import RunError, RunOptions

#: where the progress lines of an import's check go (the command line passes stderr)
Say = Callable[[str], None]


def load_all(o: RunOptions, say: Say, checks: dict[str, Any]) -> list[Any]:
    """The run's problems in the order they run: problem files, names, then ``--sbml``
    models (each one's check against its file recorded in ``checks`` by problem name)."""
    from sciml_bench.problem import spec
    from sciml_bench.problem.sbml import read

    names = [p for p in o.problems if p != "cnn"]
    settings = read.parse_settings(o.sbml_settings) if o.sbml_settings else None
    if settings and not o.sbml_files:
        raise RunError("--set applies to --sbml models; none is named in this run")
    return [spec.load(f) for f in o.problem_files] + [spec.load(p) for p in names] + [
        sbml_problem(f, o.sbml_t_end, o.sbml_check, checks, say, settings) for f in o.sbml_files
    ]  # fmt: skip


def sbml_problem(path: str, t_end: float | None, semantic: bool = False,
                 checks: dict[str, Any] | None = None, say: Say | None = None,
                 settings: dict[str, float] | None = None) -> Any:  # fmt: skip
    """An SBML model as the problem ``sciml-bench import [--t-end T] [--set ...]`` writes,
    checked against its file where cheap (``semantic``; the result goes into ``checks``,
    what it does is said through ``say``, with the import's choice of span and any stimulus
    its PEtab conditions set). Its refusals are ProblemErrors: one line, exit 2, before
    anything runs."""
    from sciml_bench.problem.sbml import read
    from sciml_bench.problem.sbml import semantic as sem

    tell = say or (lambda line: None)
    imported = read.read(path, t_end=t_end, settings=settings)
    problem = imported.problem()
    if imported.span_note:
        tell(f"{problem.name}: time span: {imported.span_note}")
    if imported.condition_note:
        tell(f"{problem.name}: note: {imported.condition_note}")
    if semantic:
        result = sem.run_check(imported, problem, tell)
        if checks is not None:
            checks[problem.name] = {"semantic": result.to_json(),
                                    "settings": dict(imported.settings)}  # fmt: skip
    elif checks is not None and imported.settings:
        checks[problem.name] = {"settings": dict(imported.settings)}
    return problem


def at_size(problem: Any, size: int) -> Any:
    """``problem`` at ``size``, or a :class:`RunError` naming the size (e.g. an offset
    larger than a grid of that size)."""
    from sciml_bench.problem import spec

    try:
        return spec.at_size(problem, size)
    except spec.ProblemError as e:
        raise RunError(f"--sizes {size}: {e}") from None
