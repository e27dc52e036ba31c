"""Gradients at scale: exponents against P, each library's forward/adjoint crossover, the
fastest qualifying method per rung, and the figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sciml_bench.results import gradient_scaling as gs


def _row(backend: str, method: str, p: int, t: float, tier: str = "pass", **kw: Any) -> dict[str, Any]:
    return {"kind": "ode", "problem": "stiff-robertson-rates", "backend": backend,
            "solver": "bdf", "gradient_method": method, "jacobian": "sparse", "device": "cpu",
            "n_params": p, "size": p // 3, "n_state": p, "status": "ok", "grad_s": t,
            "gradient_tier": tier, **kw}  # fmt: skip


def _ladder() -> list[dict[str, Any]]:
    rows = []
    for p, fwd, adj in ((3, 1e-3, 2e-3), (30, 1e-2, 4e-3), (300, 1e-1, 8e-3)):
        rows += [_row("diffsol", "forward", p, fwd), _row("diffsol", "adjoint", p, adj)]
    for p, fwd, adj in ((3, 1e-3, 5e-3), (30, 2e-3, 6e-3), (300, 4e-3, 9e-3)):
        rows += [_row("cvodes", "forward", p, fwd, tier="warn"),
                 _row("cvodes", "adjoint", p, adj)]  # fmt: skip
    rows += [_row("diffrax", "RecursiveCheckpointAdjoint", p, 0.05 * p) for p in (3, 30, 300)]
    return rows


def test_the_exponent_is_fitted_over_the_three_largest_rungs() -> None:
    rows = _ladder() + [_row("diffsol", "forward", 3000, 1.0), _row("diffsol", "adjoint", 3000, 1.0)]
    texts = gs.exponent_texts(rows)
    fwd = next(t for t in texts if t.startswith("diffsol bdf forward"))
    assert "q = 1.00 (P = 30→3000, 3 rungs)" in fwd
    # 4, 8 then 1,000 ms: log-log least squares over 30, 300, 3,000 (not 3's 2 ms)
    adj = next(t for t in texts if t.startswith("diffsol bdf adjoint"))
    assert "q = 1.20 (P = 30→3000, 3 rungs)" in adj
    texts = gs.exponent_texts(_ladder())
    adj = next(t for t in texts if t.startswith("diffsol bdf adjoint"))
    adj = next(t for t in texts if t.startswith("diffsol bdf adjoint"))
    assert "q = 0.30" in adj


def test_the_crossover_is_the_first_rung_where_reverse_mode_wins() -> None:
    texts = {t.split(":")[0]: t for t in gs.crossover_texts(_ladder())}
    assert "crossover at P = 30, adjoint 2.5x faster than forward there" in texts["diffsol bdf sparse"]
    assert "no crossover up to P = 300 (forward 2.2x faster there)" in texts["cvodes bdf sparse"]
    assert "no forward mode" in texts["diffrax bdf sparse"]
    assert gs.first_crossover({3: 1.0, 30: 2.0}, {"adjoint": {3: 1.5, 30: 1.9}}) == (30, "adjoint",
                                                                                     pytest.approx(2.0 / 1.9))  # fmt: skip


def test_each_rung_names_its_fastest_qualifying_method() -> None:
    lines = gs.rung_winners(_ladder())
    assert lines[0].startswith("P = 3: diffsol bdf forward sparse, 1 ms (2x the next, diffsol bdf adjoint")
    # cvodes forward is faster at P = 300 but its gradient is warn: it never wins
    assert lines[2].startswith("P = 300: diffsol bdf adjoint sparse, 8 ms (1.1x the next")
    assert "a tie under the 2.1x floor" in lines[2]
    none = gs.rung_winners([_row("cvodes", "forward", 3, 1e-3, tier="fail")])
    assert none == ["P = 3: no method's gradient qualifies (1 ran)"]


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
    assert any("crossover at P = 30" in n for n in plot.notes)
    out = tmp_path / "g.png"
    plot.fig.savefig(out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert gs.gradient_scaling_figure([]).fig is None


def test_the_ladder_table_carries_the_notes_only_when_p_grows() -> None:
    from sciml_bench.results.table import table

    text = table(_ladder())
    assert "forward/adjoint crossover per library:" in text
    assert "diffsol bdf sparse: crossover at P = 30" in text
    flat = [r for r in _ladder() if r["n_params"] == 30]
    assert "crossover" not in table(flat)
