"""The ``codegen`` command: the whole program a backend runs for a case, to audit it."""

from __future__ import annotations

import shlex
from typing import Any

import click

from sciml_bench.cli.options import UserError, check_offered, load_problem, sized


@click.command()
@click.argument("problem", required=False)
@click.option("--problem-file", type=click.Path(), help="A problem file instead of a name.")
@click.option("--target", type=click.Choice(["numpy", "torch", "jax", "julia", "casadi", "diffsl",
                                                "sbml"]),
              default=None, help="The generated code's language [default: numpy, or the "
              "--backend's]")
@click.option("--backend", "backend_name", default=None,
              help="The case's backend [default: the target's: jax diffrax, torch torchdiffeq, "
              "numpy scipy, casadi cvodes, diffsl diffsol, julia julia, sbml amici].")
@click.option("--solver", default=None, help="The case's solver [default: the backend's for "
              "the problem].")
@click.option("--gradient", default=None, help="The case's gradient method [default: the "
              "backend's for the problem].")
@click.option("--rhs-only", is_flag=True, help="The vector field alone (the generated code).")
@click.option("--size", type=click.IntRange(1, None), default=None,
              help="Array problems ([sizes]): the laddered size's value [the file's default].")
@click.option("--jacobian", type=click.Choice(["dense", "sparse"]), default=None,
              help="Array problems: the case's Jacobian kind, as `run --jacobian` gives it, "
              "with run's array solver unless --solver [the backend's own default].")
def codegen(problem: str | None, problem_file: str | None, target: str | None,
            backend_name: str | None, solver: str | None, gradient: str | None,
            rhs_only: bool, size: int | None, jacobian: str | None) -> None:
    """Print the whole program a backend runs for PROBLEM, to audit fairness: the
    generated vector field, the solve call (solver, controller, tolerances, save points,
    step bound, adjoint, dtype), the loss and the gradient call, from the source the
    worker runs. Run it with python: it prints the solution, the loss and the gradient.

    \b
    Examples:
      sciml-bench codegen stiff-robertson --target jax > rober.py && python rober.py
      sciml-bench codegen stiff-robertson --backend diffrax --solver Kvaerno5
      sciml-bench codegen nonstiff-spiral-node --target julia
      sciml-bench codegen --problem-file my.toml --target numpy --rhs-only   (with the Jacobian)
      sciml-bench codegen stiff-robertson-ude --target diffsl --rhs-only   (what diffsol compiles)
      sciml-bench codegen stiff-robertson --backend amici   (SBML, AMICI's import and compile)
      sciml-bench codegen stiff-brusselator-2d --size 64 --rhs-only   (array code, sparse Jacobian)
      sciml-bench codegen stiff-robertson-groups --backend cvodes --jacobian dense   (a dense row)
    """
    from sciml_bench.problem import codegen as cg

    p = sized(load_problem(problem, problem_file), size)
    if jacobian and p.array is None:
        raise UserError(f"--jacobian applies to array problems ([sizes]); {p.name} has none")
    if rhs_only:
        if backend_name or solver or gradient or jacobian:
            raise UserError("--rhs-only prints the vector field alone; drop --backend, "
                            "--solver, --gradient and --jacobian, or drop --rhs-only")  # fmt: skip
        click.echo(cg.generate(p, target or "numpy"), nl=False)
        return
    named = ["--problem-file", problem_file] if problem_file else [p.name]
    named += ["--size", str(size)] if size is not None else []
    click.echo(_case_program(p, named, target, backend_name, solver, gradient, jacobian),
               nl=False)  # fmt: skip


def _case_program(p: Any, named: list[str], target: str | None, backend_name: str | None,
                  solver: str | None, gradient: str | None, jacobian: str | None) -> str:
    """The whole program of the case ``run`` would plan for these names (codegen)."""
    from sciml_bench import backends
    from sciml_bench.backends.program import BACKEND_TARGET, TARGET_BACKEND, program, sources_of
    from sciml_bench.problem import reference
    from sciml_bench.run import runner
    from sciml_bench.run.ode import case_options

    name = backend_name or TARGET_BACKEND[target or "numpy"]
    if name not in backends.REGISTRY:
        raise UserError(f"unknown backend {name!r}; choose from {', '.join(backends.names())}")
    if target and BACKEND_TARGET[name] != target:
        raise UserError(f"--backend {name} runs the {BACKEND_TARGET[name]} target's code; "
                        f"use --target {BACKEND_TARGET[name]} or drop --target")  # fmt: skip
    if p.ensemble is not None:
        raise UserError(f"{p.name} is an ensemble: codegen prints single-trajectory programs; "
                        "add --rhs-only for its vector field")  # fmt: skip
    check_offered([name], [solver] if solver else [], [gradient] if gradient else [])
    # the loss's observations come from the reference, as in `run`
    click.echo(f"reference for {p.name} (the loss's observations) ...", err=True)
    ref = reference.get_or_missing(p)
    # the sources the backend declares it reads, as a run compiles them for it
    compiled = reference.compile_problem(p, ref, sources=sources_of(backends.get(name)))
    spec = runner.plan(compiled, [name], [solver] if solver else (),
                       [gradient] if gradient else ())[0]  # fmt: skip
    if jacobian:
        spec = _with_jacobian(compiled, name, solver, gradient, jacobian)
        named += ["--jacobian", jacobian]
    job = runner.case_job(spec, compiled, ref, runner.Settings())
    command = shlex.join(["sciml-bench", "codegen", *named, "--backend", name, "--solver",
                          spec.solver, "--gradient", spec.gradient_method])  # fmt: skip
    return program(compiled, name, case_options(job), command)


def _with_jacobian(compiled: Any, name: str, solver: str | None, gradient: str | None,
                   jacobian: str) -> Any:
    """The case ``run --jacobian`` plans for one ladder of an array problem (its array
    solver unless --solver, the kind in ``extra``); a solver without that kind is an error."""
    from sciml_bench import backends
    from sciml_bench.run import runner

    ladders = runner.plan_sized(compiled, [name], [compiled.size or 1],
                                [solver] if solver else (), [gradient] if gradient else (),
                                [jacobian])  # fmt: skip
    found = [ladder.case for ladder in ladders if ladder.jacobian == jacobian]
    if not found:
        chosen = ladders[0].case.solver
        kinds = backends.get(name).jacobian_kinds(chosen)
        takes = "no Jacobian (explicit)" if kinds == ("none",) else " or ".join(kinds)
        raise UserError(f"--jacobian {jacobian}: {name}'s {chosen} takes {takes}; pick "
                        "another --solver or drop --jacobian")  # fmt: skip
    return found[0]
