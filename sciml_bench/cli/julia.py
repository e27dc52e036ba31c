"""``sciml-bench julia ...``: set up and inspect the Julia backend.

Registered by the main CLI with ``cli.add_command(julia)``.
"""

from __future__ import annotations

import json
import time

import click

from sciml_bench.backends import julia_env

#: as every sciml-bench error that says what to do (cli.main.EXIT_BAD_INPUT)
EXIT_NOT_USABLE = 2


class JuliaError(click.ClickException):
    """A one-line error with the fix; exit status 2, like the rest of the CLI."""

    exit_code = EXIT_NOT_USABLE


@click.group("julia")
def julia() -> None:
    """The Julia backend (DifferentialEquations.jl through juliacall).

    \b
    Examples:
      sciml-bench julia status
      sciml-bench julia setup
      sciml-bench julia setup --julia ~/.juliaup/bin/julia
    """


@julia.command("setup")
@click.option(
    "--julia",
    "exe",
    metavar="PATH",
    help="Julia executable [default: PYTHON_JULIACALL_EXE, else julia on PATH].",
)
@click.option(
    "--project",
    type=click.Path(file_okay=False, exists=True),
    help="Julia project [default: the julia/ folder of this checkout].",
)
def setup(exe: str | None, project: str | None) -> None:
    """Install and precompile the Julia packages (minutes, once per Julia version).

    Precompilation is a setup step: afterwards cold starts load package images, and the
    results record whether they were present.

    \b
    Examples:
      sciml-bench julia setup
      sciml-bench julia setup --julia /opt/julia-1.11/bin/julia --project julia/
    """
    path, source = julia_env.find_julia(exe)
    if path is None:
        raise JuliaError(f"{source}. Fix: {julia_env.INSTALL_FIX}")
    try:
        version = julia_env.julia_version(path, timeout=30)
    except julia_env.JuliaNotFound as e:
        raise JuliaError(str(e)) from None
    dotted = ".".join(map(str, version))
    if version < julia_env.MIN_JULIA:
        raise JuliaError(
            f"Julia {dotted} is older than 1.10.3, juliacall's minimum. Fix: {julia_env.INSTALL_FIX}"
        )
    conflict = julia_env.openssl_conflict(version)
    if conflict:
        click.secho(
            f"warning: {conflict}; the backend will report itself unavailable.",
            fg="yellow",
            err=True,
        )
    proj = julia_env.project_dir(project)
    click.echo(f"Julia {dotted} ({path}, from {source}); project {proj}")
    click.echo("Instantiating and precompiling; the first run takes several minutes.")
    t0 = time.perf_counter()
    code = julia_env.setup(click.echo, exe=path, project=proj)
    if code != 0:
        raise JuliaError(f"Julia exited with code {code}; see its output above.")
    images = julia_env.pkgimage_state(version)
    click.echo(
        f"Done in {time.perf_counter() - t0:.0f} s; package images in "
        f"{images['compiled_dir']}: {'ok' if images['warm'] else 'incomplete'}."
    )


@julia.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
def status(as_json: bool) -> None:
    """Where Julia was found, whether the backend is usable, and why not (exit status 2
    when it is not, as every sciml-bench error that says what to do).

    \b
    Examples:
      sciml-bench julia status
      sciml-bench julia status --json
    """
    found = julia_env.probe()
    report = {
        "available": found.ok,
        "reason": found.reason,
        "fix": found.fix,
        "julia": found.exe,
        "found_via": found.source,
        "version": ".".join(map(str, found.version)) if found.version else None,
        "project": str(found.project),
        "juliacall": julia_env.juliacall_installed()[1] or julia_env.JULIACALL_VERSION,
        **found.details,
    }
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
    else:
        for key, value in report.items():
            if value not in (None, "", {}):
                click.echo(f"{key:>10}: {value}")
    click.get_current_context().exit(0 if found.ok else EXIT_NOT_USABLE)
