"""The ``export`` command: results files as JSON or CSV."""

from __future__ import annotations

from pathlib import Path

import click

from sciml_bench.cli.options import BadInput, read_runs


@click.command(name="export")
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--format", "fmt", type=click.Choice(["json", "csv"]), default="csv",
              show_default=True,
              help="json: every field, raw samples included; csv: one flat row per case "
                   "(scalars, medians, IQR bounds, sample counts).")  # fmt: skip
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write to this file instead of standard output.",
)
def export_cmd(files: tuple[str, ...], fmt: str, output: str | None) -> None:
    """Export results FILES as JSON or CSV (one row per case; a run_id column
    tells the files apart).

    \b
    Examples:
      sciml-bench export results/run.h5 --format csv -o run.csv
      sciml-bench export results/run.h5 --format json | jq '.files[0].records[0]'
    """
    from sciml_bench.results import export

    runs = read_runs(files)
    text = export.to_json(runs) if fmt == "json" else export.to_csv(runs)
    if output is None:
        click.echo(text, nl=not text.endswith("\n"))
        return
    try:
        Path(output).write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    except OSError as e:
        raise BadInput(
            f"cannot write {output!r}: {e.strerror or e}; choose another --output"
        ) from None
    click.echo(f"wrote {sum(len(r.records) for r in runs)} case(s) to {output}", err=True)
