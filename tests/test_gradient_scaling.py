"""Gradients at scale: exponents against P, each library's forward/adjoint crossover, the
fastest qualifying method per rung, and the figure, all by the verdict's rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sciml_bench.results import gradient_scaling as gs
from sciml_bench.results import verdict
from sciml_bench.results.growth import line_key, line_label

#: a gradient error per tier, scored against a reference whose own error is 1e-9
ERRORS = {"pass": 5e-6, "warn": 1e-3, "fail": 3.4e-2}


def _row(backend: str, method: str, p: int, t: float | None, tier: str = "pass",
         **kw: Any) -> dict[str, Any]:  # fmt: skip
    """A ladder row as a run stores it: ``ok``, its steady gradient ``t`` and its gradient
    error scored, one process's samples (``--cold 1``)."""
    return {"kind": "ode", "problem": "stiff-robertson-rates", "backend": backend,
            "solver": "bdf", "gradient_method": method, "jacobian": "sparse", "device": "cpu",
            "n_params": p, "size": p // 3, "n_state": p, "status": "ok", "grad_s": t,
            "rtol": 1e-6, "dtype": "float64", "gradient_error": ERRORS[tier],
            "gradient_tier": tier, "reference_error": 1e-9, "others_cpu": 0.1,
            **kw}  # fmt: skip


def _ladder() -> list[dict[str, Any]]:
    rows = []
    # diffsol: forward 5x ahead at 3; adjoint 2.5x ahead at 30 and 12.5x at 300
    for p, fwd, adj in ((3, 1e-3, 5e-3), (30, 1e-2, 4e-3), (300, 1e-1, 8e-3)):
        rows += [_row("diffsol", "forward", p, fwd), _row("diffsol", "adjoint", p, adj)]
    # cvodes: forward ahead throughout, but its gradient is warn at 300
    for p, fwd, adj, tier in ((3, 1e-3, 5e-3, "pass"), (30, 2e-3, 6e-3, "pass"),
                              (300, 4e-3, 9e-3, "warn")):  # fmt: skip
        rows += [_row("cvodes", "forward", p, fwd, tier), _row("cvodes", "adjoint", p, adj)]
    rows += [_row("diffrax", "RecursiveCheckpointAdjoint", p, 0.05 * p) for p in (3, 30, 300)]
    return rows


def _texts(rows: list[dict[str, Any]], rtol: float | None = None) -> dict[str, str]:
    return {t.split(":")[0]: t for t in gs.crossover_texts(rows, rtol)}


def test_the_exponent_is_fitted_over_the_three_largest_rungs() -> None:
    rows = _ladder() + [_row("diffsol", "forward", 3000, 1.0), _row("diffsol", "adjoint", 3000, 1.0)]
    texts = gs.exponent_texts(rows)
    fwd = next(t for t in texts if t.startswith("diffsol bdf forward"))
    assert "q = 1.00 (P = 30→3000, 3 rungs)" in fwd
    # 4, 8 then 1,000 ms: log-log least squares over 30, 300, 3,000 (not 3's 5 ms)
    adj = next(t for t in texts if t.startswith("diffsol bdf adjoint"))
    assert "q = 1.20 (P = 30→3000, 3 rungs)" in adj
    texts = gs.exponent_texts(_ladder())
    adj = next(t for t in texts if t.startswith("diffsol bdf adjoint"))
    assert "q = 0.10" in adj  # 5, 4, 8 ms over P = 3, 30, 300


def test_an_exponent_is_fitted_on_ok_rows_and_names_the_rungs_that_do_not_qualify() -> None:
    texts = {t.split(":")[0]: t for t in gs.exponent_texts(_ladder())}
    # cvodes forward: 1, 2, 4 ms, the warn row at 300 kept in the fit (a cost is a cost)
    assert texts["cvodes bdf forward sparse"] == (
        "cvodes bdf forward sparse: gradient q = 0.30 (P = 3→300, 3 rungs; the gradient does "
        "not qualify at P = 300)")  # fmt: skip
    # at --gradient-rtol 2e-3 the warn row qualifies: nothing to name
    loose = {t.split(":")[0]: t for t in gs.exponent_texts(_ladder(), 2e-3)}
    assert "does not qualify" not in loose["cvodes bdf forward sparse"]
    failed = _ladder() + [_row("diffsol", "forward", 3000, None, status="max_steps")]
    fwd = next(t for t in gs.exponent_texts(failed) if t.startswith("diffsol bdf forward"))
    assert "P = 3→300" in fwd  # a row that did not finish is no point


def test_the_crossover_is_an_interval_between_rungs() -> None:
    texts = _texts(_ladder())
    assert texts["diffsol bdf sparse"] == (
        "diffsol bdf sparse: forward is faster up to P = 3 (5.00x), the adjoint from P = 30 "
        "(2.50x): the crossover lies in (3, 30]")  # fmt: skip
    assert "no forward mode" in texts["diffrax bdf sparse"]
    (lib, c), *_ = gs.library_crossovers(_ladder())
    assert lib[1] == "diffsol" and isinstance(c, gs.Crossover) and c.interval == (3, 30)


def test_a_ratio_inside_the_floor_is_a_tie_and_widens_the_interval() -> None:
    rows = _ladder()
    # diffsol at P = 30: forward 5.2 ms, adjoint 4 ms, 1.3x: inside the 2.1x floor
    next(r for r in rows if (r["backend"], r["gradient_method"], r["n_params"])
         == ("diffsol", "forward", 30))["grad_s"] = 5.2e-3  # fmt: skip
    text = _texts(rows)["diffsol bdf sparse"]
    assert "the adjoint from P = 300 (12.5x): the crossover lies in (3, 300]" in text
    assert ("a tie at P = 30 (adjoint against forward: 1.30x, inside the 2.1x floor: one "
            "process a side)") in text
    # and a ladder that stops at the tie claims no crossover at all
    two = [r for r in rows if r["backend"] == "diffsol" and r["n_params"] <= 30]
    text = _texts(two)["diffsol bdf sparse"]
    assert text == ("diffsol bdf sparse: no crossover up to P = 30: forward is faster up to "
                    "P = 3 (5.00x there); a tie at P = 30 (adjoint against forward: 1.30x, "
                    "inside the 2.1x floor: one process a side)")  # fmt: skip
    rung = gs.evidence({"forward": {30: two[2]}}, {"adjoint": {30: two[3]}}, 1e-4)
    assert [(r.lead, r.floor) for r in rung] == [(gs.TIE, 2.1)]


def test_a_failing_forward_row_is_no_evidence_of_a_crossover() -> None:
    rows = [r for r in _ladder() if r["backend"] == "cvodes"]
    # cvodes forward at 300 is 4 ms, adjoint 9 ms, but its gradient is warn: no evidence
    text = _texts(rows)["cvodes bdf sparse"]
    assert text == ("cvodes bdf sparse: no crossover up to P = 30: forward is faster up to "
                    "P = 30 (3.00x there); P = 300 gives no evidence (forward's gradient "
                    "error 1.00e-03, warn)")  # fmt: skip
    # forward fails outright at 300 and is slower there: still no crossover from it
    at300 = next(r for r in rows if r["gradient_method"] == "forward" and r["n_params"] == 300)
    at300.update(grad_s=0.9, gradient_tier="fail", gradient_error=ERRORS["fail"])
    assert "no crossover up to P = 30" in _texts(rows)["cvodes bdf sparse"]
    assert "forward's gradient error 3.40e-02, fail" in _texts(rows)["cvodes bdf sparse"]
    # a forward row that did not finish (max_steps) says so
    at300.update(status="max_steps", grad_s=None, gradient_error=None, gradient_tier=None)
    assert "P = 300 gives no evidence (forward max_steps)" in _texts(rows)["cvodes bdf sparse"]
    # at --gradient-rtol 2e-3 the warn row counts: forward 2.25x ahead at 300
    at300.update(status="ok", grad_s=4e-3, gradient_tier="warn", gradient_error=ERRORS["warn"])
    assert _texts(rows, 2e-3)["cvodes bdf sparse"].endswith(
        "no crossover up to P = 300: forward is faster up to P = 300 (2.25x there)")


def test_a_row_timed_under_load_or_unjudged_is_no_evidence() -> None:
    rows = [r for r in _ladder() if r["backend"] == "diffsol"]
    fwd3 = next(r for r in rows if r["gradient_method"] == "forward" and r["n_params"] == 3)
    fwd3["others_cpu"] = 1.5
    text = _texts(rows)["diffsol bdf sparse"]
    assert "P = 3 gives no evidence (forward timed under load (others_cpu 1.50))" in text
    assert "crossover lies at or below P = 30" in text
    # within 2e-3, but the reference's own error (5e-4) is above a tenth of it: unjudged
    fwd3.update(others_cpu=0.1, reference_error=5e-4, gradient_error=1e-3)
    assert "forward's gradient error 1.00e-03 not judged at 2e-03" in _texts(rows, 2e-3)[
        "diffsol bdf sparse"]  # fmt: skip


def test_two_tolerances_on_one_ladder_are_two_lines() -> None:
    rows = []
    for p in (3, 30, 300):  # rtol 1e-6: forward ahead 5x at every rung, forward ∝ P
        rows += [_row("diffsol", "forward", p, 1e-3 * p / 3), _row("diffsol", "adjoint", p, 5e-3 * p / 3)]
    for p in (3, 30, 300):  # rtol 1e-8: forward flat at 10 ms, the adjoint 3x ahead from 30
        rows += [_row("diffsol", "forward", p, 1e-2, rtol=1e-8),
                 _row("diffsol", "adjoint", p, 5e-2 if p == 3 else 3.3e-3, rtol=1e-8)]  # fmt: skip
    exps = gs.exponent_texts(rows)
    assert "diffsol bdf forward sparse rtol 1e-06: gradient q = 1.00 (P = 3→300, 3 rungs)" in exps
    assert "diffsol bdf forward sparse rtol 1e-08: gradient q = 0.00 (P = 3→300, 3 rungs)" in exps
    texts = _texts(rows)
    assert texts["diffsol bdf sparse rtol 1e-06"].endswith(
        "no crossover up to P = 300: forward is faster up to P = 300 (5.00x there)")
    assert "the crossover lies in (3, 30]" in texts["diffsol bdf sparse rtol 1e-08"]
    winners = gs.rung_winners(rows)
    assert len(winners) == 6  # three rungs at each tolerance, never mixed
    assert any(w.startswith("P = 30, rtol 1e-08: diffsol bdf adjoint sparse, 3.3 ms") for w in winners)
    assert any(w.startswith("P = 30, rtol 1e-06: diffsol bdf forward sparse, 10 ms") for w in winners)
    # one tolerance: no rtol in the labels
    assert all("rtol" not in t for t in gs.exponent_texts(_ladder()))


def _verdict_winner(rows: list[dict[str, Any]], rtol: float | None, p: int) -> str:
    """The verdict's steady-gradient winner at rung ``p``, labelled as the ladder labels one."""
    for v in verdict.verdicts(rows, rtol):
        pick = next((x for x in v.picks if x.key == "grad_s"), None)
        if pick and pick.winner["n_params"] == p:
            return line_label(line_key(pick.winner))
    return "none"


@pytest.mark.parametrize("rtol", [None, 2e-3])
def test_each_rungs_winner_is_the_verdicts(rtol: float | None) -> None:
    rows = _ladder()
    # at P = 30 a row 10x faster than all, but timed under load: neither names it
    rows.append(_row("diffsol", "forward_diff", 30, 2e-4, others_cpu=1.5))
    lines = gs.rung_winners(rows, rtol)
    assert len(lines) == 3
    for line, p in zip(lines, (3, 30, 300), strict=True):
        assert line.startswith(f"P = {p}: {_verdict_winner(rows, rtol, p)}, ")
    # the cvodes forward warn row (4 ms) wins at 300 only where the rtol admits it
    win300 = "cvodes bdf forward sparse" if rtol else "diffsol bdf adjoint sparse"
    assert lines[2].startswith(f"P = 300: {win300}")
    assert "forward_diff" not in "".join(lines)


def test_a_rungs_winner_states_its_ratio_and_a_tie() -> None:
    lines = gs.rung_winners(_ladder())
    # 1 ms twice at P = 3 (diffsol and cvodes forward): a tie
    assert lines[0].startswith("P = 3: ") and "(1.00x the next, " in lines[0]
    assert lines[0].endswith("a tie: floor 2.10x: one process a side)")
    # 2 ms against 4 ms at P = 30: 2.00x, still inside the one-process floor
    assert lines[1] == ("P = 30: cvodes bdf forward sparse, 2 ms (2.00x the next, diffsol bdf "
                        "adjoint sparse, a tie: floor 2.10x: one process a side)")  # fmt: skip
    none = gs.rung_winners([_row("cvodes", "forward", 3, 1e-3, tier="fail"),
                            _row("cvodes", "adjoint", 30, 1e-3, tier="fail")])  # fmt: skip
    assert none == ["P = 3: no method's gradient qualifies (1 ran)",
                    "P = 30: no method's gradient qualifies (1 ran)"]  # fmt: skip
    none = gs.rung_winners([_row("cvodes", "forward", 3, 1e-3, tier="fail"),
                            _row("cvodes", "adjoint", 30, 1e-3, tier="fail")], 3e-4)  # fmt: skip
    assert none[0] == "P = 3: no method's gradient qualifies at gradient error ≤ 3e-04 (1 ran)"


def test_rows_without_a_parameter_count_or_a_gradient_are_left_out() -> None:
    rows = [_row("diffsol", "forward", 3, 1e-3)]
    rows[0].pop("n_params")
    rows.append({**_row("scipy", "none", 3, 1e-3)})
    assert gs.param_points(rows) == {}


def test_the_figure_draws_time_and_memory_with_the_crossover(tmp_path: Path) -> None:
    rows = _ladder()
    for r in rows:
        r["grad_warm_rss_mb"] = 0.01 * r["n_params"] if r["gradient_method"] == "forward" else 1.0
    plot = gs.gradient_scaling_figure(rows)
    assert plot.fig is not None and len(plot.fig.axes) == 2
    assert any("the crossover lies in (3, 30]" in n for n in plot.notes)
    marks = [t.get_text() for t in plot.fig.axes[0].texts]
    assert marks == ["crossover in (3, 30]: diffsol"]
    out = tmp_path / "g.png"
    plot.fig.savefig(out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert gs.gradient_scaling_figure([]).fig is None


def test_the_ladder_table_carries_the_notes_only_when_p_grows() -> None:
    from sciml_bench.results.table import table

    text = table(_ladder())
    assert ("forward/adjoint crossover per library (qualifying rows, ratios beyond each pair's "
            "floor):") in text
    assert "diffsol bdf sparse: forward is faster up to P = 3 (5.00x), the adjoint from P = 30" in text
    flat = [r for r in _ladder() if r["n_params"] == 30]
    assert "crossover" not in table(flat)


def test_show_and_report_judge_the_ladder_at_the_gradient_rtol(tmp_path: Path) -> None:
    """``--gradient-rtol`` reaches the ladder's notes in the terminal table and the report:
    at 2e-3 the cvodes forward warn row counts, so P = 300 is evidence and the rung's winner."""
    from sciml_bench.results import publish
    from sciml_bench.results.store import Run
    from sciml_bench.results.table import table

    def flat(text: str) -> str:  # the table wraps its notes at 100 characters
        return " ".join(text.split())

    for text in (table(_ladder(), 2e-3),
                 publish.to_markdown(publish.build([Run(tmp_path / "r.h5", {}, {}, _ladder())],
                                                   tmp_path, gradient_rtol=2e-3), tmp_path)):  # fmt: skip
        text = flat(text)
        assert "no crossover up to P = 300: forward is faster up to P = 300 (2.25x there)" in text
        assert "P = 300: cvodes bdf forward sparse, 4 ms" in text
    for text in (table(_ladder()),
                 publish.to_markdown(publish.build([Run(tmp_path / "r.h5", {}, {}, _ladder())],
                                                   tmp_path), tmp_path)):  # fmt: skip
        text = flat(text)
        assert "P = 300 gives no evidence (forward's gradient error 1.00e-03, warn)" in text
        assert "P = 300: diffsol bdf adjoint sparse, 8 ms" in text
