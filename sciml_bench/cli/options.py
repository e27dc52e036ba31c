"""What the commands share: the one-line user error, the exit codes, the backend names
for help texts, and the option helpers (comma lists, a problem by name or file, a size)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from sciml_bench.backends import REGISTRY

EXIT_BAD_INPUT = 2
#: every backend, for the help texts (the registry imports no library)
BACKEND_NAMES = tuple(REGISTRY)
#: Ctrl-C; SIGTERM gives 143 and SIGHUP 129 (128 + the signal's number)
EXIT_INTERRUPTED = 130


class UserError(click.ClickException):
    """A one-line error with what to do next; the traceback only with --debug."""

    exit_code = EXIT_BAD_INPUT


class BadInput(click.ClickException):
    """One line, exit code 2, for the reporting commands (no --debug traceback of a cause)."""

    exit_code = EXIT_BAD_INPUT


def read_runs(files: Sequence[str]) -> list[Any]:
    """The results files, or a :class:`BadInput` naming the one that cannot be read."""
    from sciml_bench.results.store import ResultsError
    from sciml_bench.results.store import read as read_results

    try:
        return [read_results(f) for f in files]
    except ResultsError as e:
        raise BadInput(str(e)) from None


def load_problem(name: str | None, problem_file: str | None) -> Any:
    from sciml_bench.problem import spec

    if problem_file:
        return spec.load(problem_file)
    if not name:
        raise UserError("name a problem (see `sciml-bench list`) or pass --problem-file PATH")
    return spec.load(name)


def comma_list(_ctx: click.Context, _param: click.Parameter, values: Sequence[str]) -> tuple[str, ...]:
    """``-b scipy,diffrax`` as well as ``-b scipy -b diffrax`` (as --tolerances takes commas)."""
    return tuple(v.strip() for value in values for v in value.split(",") if v.strip())


def check_offered(names: list[str], solvers: Sequence[str], gradients: Sequence[str]) -> None:
    """Each --solver and --gradient must be offered by at least one chosen backend (the run
    layer's check, :func:`sciml_bench.run.plan_checks.check_offered`, as a one-line error)."""
    from sciml_bench.run.options import RunError
    from sciml_bench.run.plan_checks import check_offered as offered_by

    try:
        offered_by(names, solvers, gradients)
    except RunError as e:
        raise UserError(str(e)) from None


def sized(problem: Any, size: int | None) -> Any:
    """``problem`` at ``--size`` (array problems and networks' widths only)."""
    if size is None:
        return problem
    if problem.laddered is None:
        raise UserError(f"--size applies to problems with [sizes]; {problem.name} has none")
    return at_size(problem, size)


def at_size(problem: Any, size: int) -> Any:
    """``problem`` at ``size``, or a one-line error naming the size (e.g. an offset larger
    than a grid of that size)."""
    from sciml_bench.problem import spec

    try:
        return spec.at_size(problem, size)
    except spec.ProblemError as e:
        raise UserError(f"--sizes {size}: {e}") from None


def sbml_set_option(dest: str = "settings", what: str = "") -> Any:
    """``--set NAME=VALUE`` (repeatable) on every command that imports SBML (``import``,
    ``check``, ``reference``, ``run``): a value set in the SBML document before the import
    (``sciml_bench.problem.sbml.read.apply_settings``). ``what`` begins the help (``run``:
    "--sbml models: ")."""
    return click.option(
        "--set", dest, multiple=True, metavar="NAME=VALUE",
        help=f"{what}Set a parameter's value, a compartment's size or a species' initial value "
             "in the SBML before the import (a stimulus the file leaves at 0 for its PEtab "
             "conditions to set, e.g. --set il13_level=20); repeatable.",
    )


def gradient_rtol_option(f: Any) -> Any:
    """``--gradient-rtol E`` on every command that prints a verdict (``run``, ``show``,
    ``report``): the verdict counts rows whose gradient error is at most E. None (not
    given) is the verdict's default, the *pass* tier (``measure.metrics.PASS_TOL``; not
    imported here, so that ``--help`` loads no NumPy)."""
    return click.option(
        "--gradient-rtol", type=click.FloatRange(0, 1, min_open=True), default=None,
        metavar="E",
        help="The verdict under each table counts rows whose gradient error is at most E "
             "[default: 1e-4, the pass tier]; faster rows above it are named beside the "
             "winner with their errors.",
    )(f)  # fmt: skip


def load_limit_option(f: Any) -> Any:
    """``--load-limit CORES`` on every command that judges timings (``run``, ``show``,
    ``report``, ``compare``): rows timed while other processes took more than CORES cores
    (their ``others_cpu``) count as under load. None (not given) is
    ``measure.noise.LOAD_LIMIT`` (not imported here, so that ``--help`` stays light)."""
    return click.option(
        "--load-limit", type=click.FloatRange(min=0.0), default=None, metavar="CORES",
        help="Rows timed while other processes took more than CORES cores' worth of CPU "
             "(their others_cpu) count as timed under load [0.5]: compare does not judge "
             "their timings, and a verdict whose passing rows all are is provisional (it "
             "names the winner and the load). A larger CORES accepts that load: rows "
             "up to it count as quiet.",
    )(f)  # fmt: skip


def write_output(text: str, output: str | None, option: str = "-o") -> bool:
    """``text`` to the file ``output``, or to standard output when None; True when a file
    was written (the caller says what it wrote). A file that cannot be written is a
    one-line error naming ``option``."""
    if output is None:
        click.echo(text, nl=not text.endswith("\n"))
        return False
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as e:
        raise UserError(f"cannot write {output!r}: {e.strerror or e}; choose another {option}") from None
    return True
