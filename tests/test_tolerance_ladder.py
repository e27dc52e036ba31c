"""From which rtol each library's gradient passes, on rows run at several tolerances
(``sciml_bench.results.tolerance_ladder``; issue 53, item 5)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from sciml_bench.cli.main import main
from sciml_bench.results import store, table, tolerance_ladder


def row(backend: str, rtol: float, error: float | None, status: str = "ok",
        reference_error: float = 1e-9, **extra: object) -> dict:  # fmt: skip
    return {"kind": "ode", "problem": "vdp", "backend": backend, "solver": "BDF",
            "gradient_method": "forward", "status": status, "gradient_error": error,
            "reference_error": reference_error, "rtol": rtol, "grad_s": 0.01,
            "ttfg_s": 1.0, "device": "cpu", **extra}  # fmt: skip


def test_a_library_passes_from_the_loosest_rtol_whose_tighter_rungs_all_pass() -> None:
    rows = [row("a", 1e-6, 2.8e3), row("a", 1e-8, 3e-5), row("a", 1e-7, 4e-3),
            row("a", 1e-10, 2e-6)]  # fmt: skip
    (found,) = tolerance_ladder.ladders(rows)
    (a,) = found.ladders
    assert [r.rtol for r in a.rungs] == [1e-6, 1e-7, 1e-8, 1e-10]  # loosest first
    assert a.passes_from == 1e-8
    assert a.text() == (
        "a BDF forward from rtol 1e-08 (1e-08: 3.0e-05; 1e-07: 4.0e-03)")


def test_passing_at_a_loose_rtol_and_failing_tighter_has_no_start() -> None:
    """A gradient that passes at 1e-8 by luck and fails at 1e-10 is not "from 1e-8"."""
    (found,) = tolerance_ladder.ladders([row("b", 1e-6, 0.5), row("b", 1e-8, 5e-5),
                                         row("b", 1e-10, 3e-3)])  # fmt: skip
    (b,) = found.ladders
    assert b.passes_from is None
    assert b.text() == ("b BDF forward at 1e-08 only, not at 1e-10: 3.0e-03 "
                        "(no tighter rtol run passes again)")  # fmt: skip


def test_a_failed_row_or_an_unjudgeable_reference_is_no_pass() -> None:
    rows = [row("c", 1e-6, 1e-2), row("c", 1e-9, None, status="max_steps"),
            # within 1e-4, but the reference's own error (5e-5) is above a tenth of it
            row("d", 1e-6, 0.9), row("d", 1e-9, 2e-5, reference_error=5e-5)]
    (found,) = tolerance_ladder.ladders(rows)
    c, d = found.ladders
    assert (c.passes_from, d.passes_from) == (None, None)
    assert c.text() == "c BDF forward at no rtol run (the smallest error 1.0e-02 at rtol 1e-06)"
    assert c.rungs[1].text() == "1e-09: max_steps"
    (same,) = tolerance_ladder.ladders([row("g", 1e-6, None, status="max_steps"),
                                        row("g", 1e-9, None, status="max_steps")])
    assert same.ladders[0].text() == "g BDF forward at no rtol run (max_steps at every one)"
    # a looser bound (--gradient-rtol) judges d at 1e-9, where the reference can; c's
    # 1e-2 at 1e-6 is within it, but its failed 1e-9 row still stops it being "from 1e-6"
    (loose,) = tolerance_ladder.ladders(rows, gradient_rtol=2e-2)
    assert [x.passes_from for x in loose.ladders] == [None, 1e-9]
    assert loose.ladders[0].text().startswith("c BDF forward at 1e-06 only, not at 1e-09: ")


def test_every_rung_passing_says_so_and_one_rtol_is_no_ladder() -> None:
    (found,) = tolerance_ladder.ladders([row("e", 1e-4, 5e-5), row("e", 1e-6, 1e-7),
                                         row("f", 1e-6, 1e-7)])  # fmt: skip
    assert [x.label for x in found.ladders] == ["e BDF forward"]  # f ran at one rtol
    assert found.ladders[0].text().startswith("e BDF forward at every rtol run (1e-04: 5.0e-05)")
    assert tolerance_ladder.ladders([row("f", 1e-6, 1e-7)]) == []
    # a solve-only row (SciPy's) is not a gradient ladder
    assert tolerance_ladder.ladders([row("s", 1e-6, None, gradient_method="none"),
                                     row("s", 1e-8, None, gradient_method="none")]) == []


def test_show_prints_the_ladder_and_json_gives_its_record(tmp_path) -> None:
    """A real results file, written and read back: ``show`` ends with the ladder line and
    ``--json`` gives a ``tolerance_ladder`` record with every rung."""
    rows = [row("a", 1e-6, 2.8e3), row("a", 1e-8, 3e-5), row("a", 1e-10, 2e-6)]
    path = tmp_path / "vdp.h5"
    writer = store.ResultsWriter(path, {}, "test")
    for r in rows:
        writer.add(r)
    writer.finish("complete")
    out = CliRunner().invoke(main, ["show", str(path)])
    assert out.exit_code == 0, out.output
    said = " ".join(out.output.split())
    assert ("gradient passes (error ≤ 1e-04) by rtol (vdp): a BDF forward from rtol 1e-08 "
            "(1e-08: 3.0e-05; 1e-06: 2.8e+03)") in said
    recs = json.loads(CliRunner().invoke(main, ["show", str(path), "--json"]).output)
    (lad,) = [r for r in recs if r.get("kind") == "tolerance_ladder"]
    assert lad["ladders"][0]["passes_from"] == 1e-8
    assert [r["passes"] for r in lad["ladders"][0]["rungs"]] == [False, True, True]
    assert len([r for r in recs if r.get("kind") not in ("verdict", "tolerance_ladder")]) == 3
    assert table.verdict_lines(rows)[-1].startswith("gradient passes")


def test_the_summary_names_who_passes_from_which_rtol_on_that_rtols_line() -> None:
    """The report's opening table carries the ladder's answer: on the line of the rtol from
    which a library passes (and only there), its name."""
    from sciml_bench.results import summary

    rows = [row("a", 1e-6, 2.8e3), row("a", 1e-8, 3e-5), row("a", 1e-10, 2e-6),
            row("b", 1e-6, 0.5), row("b", 1e-8, 4e-3), row("b", 1e-10, 5e-5)]  # fmt: skip
    cells = {line.comparison: line.crossover for line in summary.lines(rows)}
    assert cells == {"rtol 1e-06": "", "rtol 1e-08": "gradient passes from this rtol on: a BDF forward",
                     "rtol 1e-10": "gradient passes from this rtol on: b BDF forward"}  # fmt: skip
