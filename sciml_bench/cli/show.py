"""The ``show`` command: a results file's table again."""

from __future__ import annotations

import json

import click

from sciml_bench.cli.options import gradient_rtol_option, load_limit_option


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the case records as JSON.")
@gradient_rtol_option
@load_limit_option
def show(files: tuple[str, ...], as_json: bool, gradient_rtol: float | None,
         load_limit: float | None = None) -> None:  # fmt: skip
    """Print the table of one or more results files again.

    The header line gives the run's status (complete, interrupted by a signal,
    failed, or running while it runs), when it started and where; each table
    ends with its verdict (--json: records of kind "verdict" after the cases),
    judged against --gradient-rtol: the accuracy your use needs, default the pass tier;
    rows run at several tolerances (--tolerances) add from which rtol each library's
    gradient passes (--json: kind "tolerance_ladder"; case records have no kind).
    Where every passing row was timed under load (others' CPU above --load-limit
    cores), the verdict names its winner as provisional, with the load it was
    timed under; --load-limit CORES accepts that load and makes it firm.

    \b
    Examples:
      sciml-bench show results/stiff-robertson-*.h5
      sciml-bench show results/run.h5 --gradient-rtol 1e-3
      sciml-bench show results/run.h5 --load-limit 1.7
      sciml-bench show results/run.h5 --json | jq '.[] | select(.kind == null) | {backend, status, ttfg_s}'
    """
    from sciml_bench.measure.noise import using_load_limit

    with using_load_limit(load_limit):
        _show(files, as_json, gradient_rtol)


def _show(files: tuple[str, ...], as_json: bool, gradient_rtol: float | None) -> None:
    """Each file's header line and table (or JSON records), under the load limit in force."""
    from sciml_bench.results import store as results
    from sciml_bench.results import table as report

    for f in files:
        run = results.read(f)
        if as_json:
            click.echo(json.dumps(report.json_records(run.records, gradient_rtol), indent=2, default=str))
            continue
        env = run.environment
        status = run.meta.get("status")
        if run.meta.get("interrupted_by"):  # absent in files written before it existed
            status = f"{status} by {run.meta['interrupted_by']}"
        click.echo(
            f"{f}  [{status}]  {run.meta.get('created')}  "
            f"{env.get('cpu_model', '?')} x{env.get('cpu_count', '?')}  "
            f"python {env.get('python', '?')}"
        )
        click.echo(report.table(run.records, gradient_rtol) if run.records else "(no completed cases)")
