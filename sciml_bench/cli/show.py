"""The ``show`` command: a results file's table again."""

from __future__ import annotations

import json

import click

from sciml_bench.cli.options import gradient_rtol_option


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the case records as JSON.")
@gradient_rtol_option
def show(files: tuple[str, ...], as_json: bool, gradient_rtol: float | None) -> None:
    """Print the table of one or more results files again.

    The header line gives the run's status (complete, interrupted by a signal,
    failed, or running while it runs), when it started and where; each table
    ends with its verdict (--json: records of kind "verdict" after the cases),
    judged against --gradient-rtol: the accuracy your use needs, default the pass tier.

    \b
    Examples:
      sciml-bench show results/stiff-robertson-*.h5
      sciml-bench show results/run.h5 --gradient-rtol 1e-3
      sciml-bench show results/run.h5 --json | jq '.[] | select(.kind != "verdict") | {backend, status, ttfg_s}'
    """
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
