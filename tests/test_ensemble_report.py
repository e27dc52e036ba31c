"""The report and comparison of ensemble results: the ladder table, the scaling figure,
crossovers, stopped ladders, and ``compare`` pairing rung with rung.

The two results files in ``tests/data`` are real runs, made on the 2-core development
machine (about 85 s and 15 s) with::

    sciml-bench run ensemble-lorenz -b scipy,diffrax,torchdiffeq --sizes 1,4,16 --quick
    sciml-bench run ensemble-lorenz -b torchdiffeq --sizes 1,64,1024,16384 --budget 6 --quick
    sciml-bench run ensemble-lorenz -b julia,torchode --sizes 1,4 --quick

The second ladder stopped: size 16384 ran past the 6 s budget. In the third, Julia is
unavailable (not installed there).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from sciml_bench.cli.main import main
from sciml_bench.results import publish
from sciml_bench.results.scaling import (
    Crossover,
    crossover_text,
    crossovers,
    scaling_texts,
    series,
)
from sciml_bench.results.store import read

DATA = Path(__file__).parent / "data"
MAIN = DATA / "results-ensemble-lorenz.h5"
BUDGET = DATA / "results-ensemble-lorenz-budget.h5"
UNAVAILABLE = DATA / "results-ensemble-lorenz-unavailable.h5"


def _tables(blocks: list[publish.Block]) -> list[publish.Table]:
    return [b for b in blocks if isinstance(b, publish.Table) and "size" in b.header]


def _section(md: str, problem: str) -> str:
    """The Markdown of one problem: its part of the Figures section and of the Results by
    problem section (each up to the next level-2 or level-3 heading), joined."""
    parts = []
    for m in re.finditer(f"^### {re.escape(problem)}\n", md, flags=re.M):
        end = min((i for i in (md.find("\n### ", m.end()), md.find("\n## ", m.end())) if i >= 0),
                  default=len(md))  # fmt: skip
        parts.append(md[m.start() : end])
    assert parts, f"no section for {problem}"
    return "\n".join(parts)


def test_table_has_one_row_per_rung_sorted(tmp_path: Path) -> None:
    run = read(MAIN)
    (table,) = _tables(publish.build([run], tmp_path))
    assert tuple(table.header) == publish.ENSEMBLE_COLUMNS
    col = {h: i for i, h in enumerate(table.header)}
    keys = [(row[col["backend"]], row[col["semantics"]], row[col["size"]]) for row in table.rows]
    expected = [
        (b, s, str(n))
        for b, s in (("diffrax", "coupled"), ("diffrax", "independent"),
                     ("scipy", "independent"), ("torchdiffeq", "coupled"))
        for n in (1, 4, 16)
    ]  # fmt: skip
    assert keys == expected  # one row per (backend, semantics, size), in that order
    by_key = {(r["backend"], r["semantics"], str(r["size"])): r for r in run.records}
    for row, key in zip(table.rows, keys, strict=True):
        rec = by_key[key]
        med = float(np.median(rec["solve_samples"]))  # from the raw samples, not summarize
        assert row[col["members/s"]] == format(int(key[2]) / med, ".3g")
        assert row[col["µs/member"]] == format(med / int(key[2]) * 1e6, ".3g")
        assert row[col["device"]] == "cpu" and row[col["status"]] == "ok"
        steps = row[col["steps min/med/max"]]
        if key[0] == "scipy":  # SciPy reports RHS evaluations, not steps
            assert steps.endswith(" f")
        else:
            lo, mid, hi = (float(x) for x in steps.split("/"))
            assert lo <= mid <= hi
    # diffrax computes a gradient, SciPy does not
    assert all(r[col["grad ms [IQR]"]] == "-" for r in table.rows if r[col["backend"]] == "scipy")
    assert all(r[col["grad err"]].endswith("pass") for r in table.rows if r[0] == "diffrax")


def test_crossover_is_an_interval_between_sizes() -> None:
    # A 3x ahead at 1 and 4; B 4x ahead at 16: somewhere in (4, 16]
    lines = {"A": {1: 1.0, 4: 2.0, 16: 16.0}, "B": {1: 3.0, 4: 6.0, 16: 4.0}}
    found, last = crossovers(lines)
    assert found == [Crossover(16, 4, ("B",), ("A",), True)]
    assert last == ("B",)
    assert crossover_text(lines) == "B overtakes A in (4, 16]"


def test_crossovers_back_and_forth_in_order() -> None:
    lines = {"A": {1: 1.0, 2: 9.0, 4: 1.0}, "B": {1: 3.0, 2: 3.0, 4: 3.0}}
    found, last = crossovers(lines)
    assert [(c.size, c.previous_size, c.leaders, c.overtaken) for c in found] == [
        (2, 1, ("B",), ("A",)),
        (4, 2, ("A",), ("B",)),
    ]
    assert last == ("A",)


def test_no_crossover_names_the_line_fastest_throughout() -> None:
    lines = {"A": {1: 1.0, 4096: 5.0}, "B": {1: 3.0, 16: 3.0, 4096: 15.0}}
    assert crossovers(lines) == ([], ("A",))
    assert crossover_text(lines) == "no crossover over sizes 1–4096: A fastest throughout"
    assert crossover_text({}) == "no timing that counts"
    assert crossovers({}) == ([], ())


def test_a_ratio_inside_the_floor_is_a_tie() -> None:
    """Steady timings of one process a side must differ by the verdict's 2.1x to rank."""
    # B 1.3x and 1.9x ahead at 4 and 16: inside the floor, A keeps the lead it had at 1
    close = {"A": {1: 1.0, 4: 1.3, 16: 1.9}, "B": {1: 3.0, 4: 1.0, 16: 1.0}}
    assert crossovers(close) == ([], ("A",))
    assert crossover_text(close) == ("no crossover over sizes 1–16: A fastest throughout, tied "
                                     "inside the 2.1x floor with B at 4, 16")  # fmt: skip
    # without a floor (1.0), B's 1.3x at 4 would have been called a crossover
    assert crossovers(close, floor=1.0)[0] == [Crossover(4, 1, ("B",), ("A",), True, floor=1.0)]
    # tied from the first size: both lead
    both = {"A": {1: 1.0, 4: 1.5}, "B": {1: 1.2, 4: 1.0}}
    assert crossover_text(both) == (
        "no crossover over sizes 1–4: A and B (tied inside the 2.1x floor) fastest throughout")


def test_a_tie_between_widens_the_interval() -> None:
    # A alone at 1, tied at 4 (A keeps the lead), B 3x ahead at 16: in (1, 16], tied at 4
    through = {"A": {1: 1.0, 4: 2.0, 16: 9.0}, "B": {1: 3.0, 4: 2.0, 16: 3.0}}
    (c,), last = crossovers(through)
    assert c == Crossover(16, 1, ("B",), ("A",), True, tied=(4,))
    assert c.text() == "B overtakes A in (1, 16], tied inside the 2.1x floor at 4"
    assert last == ("B",)
    # tied at 1 and 4, B alone at 16: B was a joint leader all along, nothing crossed
    tied = {"A": {1: 1.0, 4: 2.0, 16: 9.0}, "B": {1: 1.0, 4: 2.0, 16: 3.0}}
    assert crossovers(tied) == ([], ("B",))
    # two lines tied in overtaking a third
    pair = {"A": {1: 1.0, 4: 9.0}, "B": {1: 3.0, 4: 2.0}, "C": {1: 4.0, 4: 3.0}}
    (c,), _ = crossovers(pair)
    assert c.leaders == ("B", "C") and c.text() == "B and C overtake A in (1, 4]"


def test_a_line_that_stops_is_not_said_to_be_overtaken() -> None:
    lines = {"A": {1: 1.0, 4: 1.0}, "B": {1: 3.0, 4: 3.0, 16: 4.0}}
    (c,), last = crossovers(lines)
    assert (c.size, c.previous_size, c.measured, last) == (16, 4, False, ("B",))
    assert c.text() == "B fastest from 16 (A measured only up to 4)"


def test_a_gap_in_the_leading_ladder_gives_no_evidence() -> None:
    # A was not run at 16 (a gap, not a stop): B alone there takes no lead from it
    lines = {"A": {1: 1.0, 4096: 9.0}, "B": {1: 3.0, 16: 3.0, 4096: 3.0}}
    found, last = crossovers(lines)
    assert found == [Crossover(4096, 1, ("B",), ("A",), True, unmeasured=(16,))]
    assert found[0].text() == "B overtakes A in (1, 4096], no evidence at 16 (a side without a point)"
    assert last == ("B",)
    # B never measured behind A: the crossover lies at or below the size B leads at
    late = {"A": {1: 1.0, 16: 9.0}, "B": {16: 3.0}}
    (c,), _ = crossovers(late)
    assert (c.previous_size, c.text()) == (None, "B overtakes A at or below 16 (not measured "
                                                 "behind it before), no evidence at 1 (a side "
                                                 "without a point)")  # fmt: skip


def _ens(backend: str, size: int, solve: float, grad: float, **kw: Any) -> dict[str, Any]:
    """An ensemble row as a run stores it, its gradient passing against the reference."""
    return {"kind": "ensemble", "problem": "ensemble-lorenz", "backend": backend,
            "solver": "Tsit5", "gradient_method": "backprop", "semantics": "independent",
            "device": "cpu", "size": size, "status": "ok", "rtol": 1e-6, "dtype": "float64",
            "solve_s": solve, "grad_s": grad, "gradient_error": 4e-6, "gradient_tier": "pass",
            "others_cpu": 0.1, **kw}  # fmt: skip


def test_crossovers_count_only_rows_the_verdict_counts() -> None:
    rows = [_ens("a", 1, 1e-3, 1e-3), _ens("a", 16, 1e-2, 1e-2),
            _ens("b", 1, 5e-3, 5e-3), _ens("b", 16, 1e-3, 1e-3)]  # fmt: skip
    assert "b/cpu/independent overtakes a/cpu/independent in (1, 16]" in scaling_texts(rows)[1]
    # b's gradient at 16 is warn: no point on the gradient panel, nothing crossed there
    rows[3].update(gradient_error=1e-3, gradient_tier="warn")
    solve, grad = scaling_texts(rows)
    assert ("rows with a passing gradient; floor 2.10x: one process a side): no crossover over "
            "sizes 1–16: a/cpu/independent") in grad
    assert "overtakes" in solve  # the solve time is no gradient's
    grad = scaling_texts(rows, 2e-3)[1]  # --gradient-rtol 2e-3 counts it again
    assert grad.startswith("Crossovers (gradient time per call, rows with a gradient error ≤ "
                           "2e-03; floor 2.10x: one process a side): b/cpu/independent "
                           "overtakes")  # fmt: skip
    # timed under load: neither panel counts it
    rows[3].update(gradient_error=4e-6, gradient_tier="pass", others_cpu=1.5)
    assert all("overtakes" not in t for t in scaling_texts(rows))


def test_two_tolerances_of_one_ensemble_are_two_lines() -> None:
    rows = [_ens("a", n, 1e-3 * n, 1e-3 * n, rtol=rtol) for n in (1, 16) for rtol in (1e-6, 1e-8)]
    assert sorted(series(rows, "solve_s")) == ["a/cpu/independent rtol 1e-06",
                                               "a/cpu/independent rtol 1e-08"]  # fmt: skip
    assert series(rows, "solve_s")["a/cpu/independent rtol 1e-08"] == {1: 1e-3, 16: 1.6e-2}
    assert list(series(rows[::2], "solve_s")) == ["a/cpu/independent"]  # one rtol: no label


def test_crossovers_of_the_real_run() -> None:
    recs = read(MAIN).records
    solve = series(recs, "solve_s")
    assert set(solve) == {
        "diffrax/cpu/coupled", "diffrax/cpu/independent", "scipy/cpu/independent",
        "torchdiffeq/cpu/coupled",
    }  # fmt: skip
    assert "scipy/cpu/independent" not in series(recs, "grad_s")  # no gradient: no line
    # diffrax independent is fastest alone (0.053 ms vs 0.103 ms coupled); from 4 members
    # the coupled batch (one step sequence) is faster, 0.222 ms vs 0.302 ms and 0.247 ms vs
    # 0.443 ms at 16: 1.36x and 1.79x, inside the 2.1x floor of one process a side, a tie
    assert crossovers(solve) == ([], ("diffrax/cpu/coupled", "diffrax/cpu/independent"))
    assert crossovers(solve, floor=1.0)[0] == [
        Crossover(4, 1, ("diffrax/cpu/coupled",), ("diffrax/cpu/independent",), True, floor=1.0)
    ]


def test_a_stopped_ladder_names_its_largest_completed_size(tmp_path: Path) -> None:
    run = read(BUDGET)
    stop = next(r for r in run.records if r["status"] != "ok")
    assert (stop["size"], stop["status"]) == (16384, "budget_exceeded")
    assert stop["largest_ok_size"] == 1024  # what the runner recorded agrees
    assert publish.ladder_stops(run.records) == [
        "torchdiffeq/cpu/coupled: stopped at size 16384 (budget_exceeded); "
        "largest completed size 1024"
    ]
    assert publish.ladder_stops(read(MAIN).records) == []
    md = publish.to_markdown(publish.build([run], tmp_path), tmp_path)
    assert "largest completed size 1024" in md
    assert "n=16384: budget_exceeded: killed after the 6 s budget" in md


def test_an_unavailable_backend_is_a_note_not_a_row(tmp_path: Path) -> None:
    """Issue 42: a library that is not installed is one line under the table (why, the
    install command), not a table row."""
    blocks = publish.build([read(UNAVAILABLE)], tmp_path)
    (table,) = _tables(blocks)
    col = {h: i for i, h in enumerate(table.header)}
    assert not [r for r in table.rows if r[col["backend"]] == "julia"]
    assert [r[col["size"]] for r in table.rows if r[col["backend"]] == "torchode"] == ["1", "4"]
    md = publish.to_markdown(blocks, tmp_path)
    assert "- julia: unavailable, no rows: julia executable not found" in md
    assert "juliaup add 1.11" in md
    assert "- julia/cpu: no line (unavailable)" in md
    assert "Ladders that stopped" not in md  # a backend that never started stopped nothing
    assert "no crossover over sizes 1–4: torchode/cpu/independent fastest throughout" in md


def test_report_cli_draws_the_scaling_figure_only(tmp_path: Path) -> None:
    out = tmp_path / "d"
    res = CliRunner().invoke(main, ["report", str(MAIN), "--out", str(out)])
    assert res.exit_code == 0, res.output
    figures = sorted(p.name for p in (out / "figures").iterdir())
    # no work-precision, TTFG, steady or gradient figures for an ensemble problem
    assert figures == ["ensemble-lorenz-scaling.png", "ensemble-lorenz-scaling.svg"]
    png = (out / "figures" / "ensemble-lorenz-scaling.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    section = _section((out / "report.md").read_text(encoding="utf-8"), "ensemble-lorenz")
    assert "](figures/ensemble-lorenz-scaling.png)" in section
    assert "not drawn" not in section
    assert (
        "Crossovers (solve time per call, ok rows not timed under load; floor 2.10x: one "
        "process a side): no crossover over "
        "sizes 1–16: diffrax/cpu/coupled and diffrax/cpu/independent (tied inside the 2.1x "
        "floor) fastest throughout." in section
    )
    # the gradient: 1.33 ms against 2.85 ms at 16 (2.14x) after ties at 1 and 4
    assert (
        "Crossovers (gradient time per call, rows with a passing gradient; floor 2.10x: one "
        "process a side): no crossover over "
        "sizes 1–16: diffrax/cpu/coupled fastest throughout, tied inside the 2.1x floor with "
        "diffrax/cpu/independent at 1, 4." in section
    )
    assert section.count("| ok |") == 12
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.count("data:image/png;base64,") == 1


def test_two_files_in_one_report(tmp_path: Path) -> None:
    runs = [read(MAIN), read(BUDGET)]
    blocks = publish.build(runs, tmp_path)
    (table,) = _tables(blocks)
    assert table.header[0] == "run"
    assert len(table.rows) == 12 + 4
    # rows of one size from the two files sit together: torchdiffeq coupled n=1 (#1, #2)
    tde = [(r[0], r[6]) for r in table.rows if r[1] == "torchdiffeq"]
    assert tde[:2] == [("#1", "1"), ("#2", "1")]
    md = publish.to_markdown(blocks, tmp_path)
    assert "#2 torchdiffeq/cpu/coupled: stopped at size 16384" in md


@pytest.mark.parametrize("other", [MAIN, BUDGET])
def test_compare_pairs_rung_with_rung(other: Path) -> None:
    res = CliRunner().invoke(main, ["compare", str(MAIN), str(other), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output[res.output.index("{") :])
    pairs = sorted((c["backend"], c["semantics"], c["size"]) for c in data["cases"])
    if other == MAIN:  # every rung pairs with itself, and only with itself
        assert len(pairs) == 12 == len(set(pairs))
        assert not data["only_old"] and not data["only_new"]
        assert all(t["ratio"] == 1.0 for c in data["cases"] for t in c["timings"])
    else:  # the only rung in both files: torchdiffeq coupled with 1 member
        assert pairs == [("torchdiffeq", "coupled", 1)]
        assert len(data["only_old"]) == 11 and len(data["only_new"]) == 3
