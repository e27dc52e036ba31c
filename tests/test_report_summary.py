"""The report opens with the answer (issue 42, item 2): a summary table, one line per
problem and comparison, then the figures, then the per-problem tables, and the runs and
environment last, in report.md and report.html alike.

The report is written once per module from two committed results files of this project's
published run (``results/published/files.json`` names them): ROBER's tolerance sweep and
the ROBER rates ladder, whose P grows, so its summary carries a forward/adjoint crossover.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from sciml_bench.results import gradient_scaling, publish, summary, verdict
from sciml_bench.results.store import read

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "results" / "published"
#: the published runs read here (their files listed in files.json)
RUNS = ("sweep", "ladder stiff-robertson-rates")
SECTIONS = ("Summary", "Figures", "Results by problem", "Runs and environment")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    files = json.loads((PUBLISHED / "files.json").read_text())
    runs = [read(PUBLISHED / name) for run in RUNS for name in files[run]]
    out = tmp_path_factory.mktemp("report")
    paths = publish.write(runs, out)
    return {"runs": runs, "md": paths["markdown"].read_text(),
            "html": paths["html"].read_text()}  # fmt: skip


def _positions(text: str, marks: list[str]) -> list[int]:
    found = [text.find(m) for m in marks]
    assert -1 not in found, [m for m, i in zip(marks, found, strict=True) if i < 0]
    return found


def test_markdown_sections_come_answer_first(report: dict[str, Any]) -> None:
    md = report["md"]
    heads = [line[3:] for line in md.splitlines() if line.startswith("## ")]
    assert heads == list(SECTIONS)
    # the first table of the document is the summary's
    first_table = next(line for line in md.splitlines() if line.startswith("| "))
    assert first_table.startswith("| problem | comparison | verdict | winner |")
    figures, tables = _positions(md, ["## Figures", "## Results by problem"])
    images = [m.start() for m in re.finditer(r"!\[", md)]
    assert images and all(figures < i < tables for i in images)
    # every case table (backend, solver, ... columns) sits under "Results by problem"
    runs_at = md.find("## Runs and environment")
    assert all(tables < m.start() < runs_at for m in re.finditer(r"\| backend \| solver", md))


def test_html_sections_come_answer_first(report: dict[str, Any]) -> None:
    page = report["html"]
    heads = re.findall(r"<h2>(.*?)</h2>", page)
    assert heads == list(SECTIONS)
    summ, figures, tables, runs_at = _positions(page, [f"<h2>{s}</h2>" for s in SECTIONS])
    assert page.find("<table>") > summ
    assert page.find("<th>problem</th><th>comparison</th><th>verdict</th>") < figures
    imgs = [m.start() for m in re.finditer("<figure>", page)]
    assert imgs and all(figures < i < tables for i in imgs)
    # the environment's rows (python, platform) only after every result
    assert page.find("<td>python</td>") > runs_at


def test_each_summary_line_is_a_verdicts_pick(report: dict[str, Any]) -> None:
    # as the report reads them: each row marked with its results file
    records = [{**r, "_run": f"#{i}"} for i, run in enumerate(report["runs"], 1)
               for r in run.records]  # fmt: skip
    md = report["md"]
    rows = [line for line in md.split("## Figures")[0].splitlines() if line.startswith("| ")][1:]
    found = [v for name in ("stiff-robertson", "stiff-robertson-rates")
             for v in verdict.verdicts([r for r in records if r.get("problem") == name])]  # fmt: skip
    assert len(rows) == len(found)
    for row, v in zip(rows, found, strict=True):
        if v.picks:
            assert verdict.label(v.picks[0].winner) in row
            ratio = v.picks[0].ratio
            assert ratio is None or f"{ratio:.2f}x" in row
        else:
            assert "none qualifies" in row


def test_the_rates_ladder_names_its_crossover(report: dict[str, Any]) -> None:
    records = [r for run in report["runs"] for r in run.records
               if r.get("problem") == "stiff-robertson-rates"]  # fmt: skip
    spans = {c.interval for _, c in gradient_scaling.library_crossovers(records)
             if isinstance(c, gradient_scaling.Crossover) and c.interval}  # fmt: skip
    assert spans, "the published rates ladder has a forward/adjoint crossover"
    head = report["md"].split("## Figures")[0]
    for lo, hi in spans:
        where = f"({lo}, {hi}]" if lo is not None else f"≤ {hi}"
        assert f"overtakes forward at P in {where}" in head


def _row(backend: str, size: int, grad_s: float) -> dict[str, Any]:
    return {"kind": "ode", "problem": "ladder", "backend": backend, "solver": "bdf",
            "gradient_method": "adjoint", "status": "ok", "size": size, "rtol": 1e-6,
            "grad_s": grad_s, "ttfg_s": 1.0, "gradient_error": 1e-6,
            "gradient_tier": "pass", "grad_samples": [grad_s] * 5}  # fmt: skip


def test_a_ladders_winner_change_is_an_interval_between_rungs() -> None:
    """A wins at 1 (5x), a tie at 10 widens nothing it cannot bound, B wins at 100: the
    change lies in (1, 100] and is written on rung 100's line."""
    rows = [_row("a", 1, 1e-3), _row("b", 1, 5e-3), _row("a", 10, 1e-2), _row("b", 10, 1.2e-2),
            _row("a", 100, 1.0), _row("b", 100, 0.1)]  # fmt: skip
    lines = summary.lines(rows)
    assert [line.comparison for line in lines] == ["n=1", "n=10", "n=100"]
    one = "(floor 2.10x: one process a side)"
    assert [line.verdict for line in lines] == [f"faster {one}", f"tie {one}", f"faster {one}"]
    assert [line.crossover for line in lines] == ["", "", "a bdf adjoint → b bdf adjoint in (1, 100]"]
    assert lines[2].ratio == "10.00x" and lines[2].error == "1.00e-06 pass"


def test_a_comparison_nothing_qualifies_in_says_why() -> None:
    bad = {**_row("a", 1, 1e-3), "gradient_error": 0.5, "gradient_tier": "fail"}
    (line,) = summary.lines([bad])
    assert line.verdict == "none qualifies" and line.winner.startswith("no backend produced")


def test_a_provisional_verdict_says_so_and_makes_no_crossover() -> None:
    """Rows timed under load give a winner, named as provisional, and never a crossover
    (which needs rows not timed under load); the same rows quiet give a firm line."""
    quiet = [_row("cvodes", 1, 5e-3), _row("diffsol", 1, 1e-3), _row("cvodes", 100, 1e-3),
             _row("diffsol", 100, 2e-2)]  # fmt: skip
    busy = [dict(r, others_cpu=1.6) for r in quiet]
    firm = [summary.line(v).cells()[2] for v in verdict.verdicts(quiet)]
    loaded = [summary.line(v).cells()[2] for v in verdict.verdicts(busy)]
    assert not any(w.startswith("provisional") for w in firm)
    assert loaded and all(w.startswith("provisional, timed under load") for w in loaded)
    assert summary.winner_changes(verdict.verdicts(quiet))
    assert not summary.winner_changes(verdict.verdicts(busy))
