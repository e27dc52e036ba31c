"""The ``sciml-bench`` command line: the click group, its error handling, and the
registration of the commands (one module each under :mod:`sciml_bench.cli`)."""

from __future__ import annotations

import traceback
import warnings
from typing import Any

import click

from sciml_bench import __version__
from sciml_bench.cli.options import EXIT_BAD_INPUT, UserError

__all__ = ["EXIT_BAD_INPUT", "UserError", "main"]


class _Group(click.Group):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # --debug is accepted anywhere before a `--`: `sciml-bench run X --debug` too
        end = args.index("--") if "--" in args else len(args)
        if "--debug" in args[:end]:
            args = ["--debug"] + [a for a in args[:end] if a != "--debug"] + args[end:]
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        from sciml_bench.problem.reference import ReferenceError
        from sciml_bench.problem.spec import ProblemError
        from sciml_bench.results.extras import MissingExtra
        from sciml_bench.results.store import ResultsError

        debug = bool(ctx.params.get("debug"))
        try:
            return super().invoke(ctx)
        except (ProblemError, ResultsError, ReferenceError, MissingExtra) as e:
            if debug:
                traceback.print_exc()
            raise UserError(str(e)) from None
        except UserError as e:
            # raised `from None` for a one-line message; --debug still shows the cause
            if debug and e.__context__ is not None:
                traceback.print_exception(e.__context__)
            raise
        except OSError as e:
            if debug:
                traceback.print_exc()
            raise UserError(f"{e.strerror or e}: {e.filename or ''}".rstrip(": ")) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sciml-bench")
@click.option("--debug", is_flag=True,
              help="Show full tracebacks for errors (also accepted after the command).")
def main(debug: bool) -> None:
    """Benchmark solving and differentiating ODEs across torchdiffeq, torchode, Diffrax,
    CVODES (CasADi), diffsol, AMICI (CVODES), DifferentialEquations.jl (Julia) and SciPy, fairly and
    reproducibly.

    \b
    Typical use:
      sciml-bench list                       problems and backends, with availability
      sciml-bench check --problem-file my.toml   your own model: valid? who runs it?
      sciml-bench import model.xml -o my.toml    an SBML model as a problem file
      sciml-bench run stiff-robertson        every available backend, results to results/
      sciml-bench run stiff-robertson --quick -b diffrax
      sciml-bench show results/FILE.h5       the table again
      sciml-bench rejudge results/FILE.h5    its gradients against today's reference
      sciml-bench codegen stiff-robertson --target jax   the whole program a backend runs
    """
    warnings.simplefilter("default")


def _register_commands() -> None:
    from sciml_bench.cli.catalogue import list_
    from sciml_bench.cli.check import check_cmd
    from sciml_bench.cli.codegen import codegen
    from sciml_bench.cli.fairness import fairness_cmd
    from sciml_bench.cli.julia import julia
    from sciml_bench.cli.reference import reference_cmd
    from sciml_bench.cli.rejudge import rejudge_cmd
    from sciml_bench.cli.report import register
    from sciml_bench.cli.run import run
    from sciml_bench.cli.sbml import export_sbml_cmd, import_cmd
    from sciml_bench.cli.show import show

    for command in (run, show, list_, check_cmd, codegen, reference_cmd, rejudge_cmd, julia,
                    fairness_cmd, import_cmd, export_sbml_cmd):
        main.add_command(command)
    register(main)


_register_commands()


if __name__ == "__main__":
    main()
