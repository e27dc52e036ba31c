"""Figures that survive many lines (issue 42, item 3): colour by library, style by method,
a row of panels per library past twelve lines, legends inside the figure, and every point
whose row does not qualify drawn faint with its tier named.

A 28-line ladder is built the way a Lorenz-96 run at two sizes with ``--gradient all``
makes one: four libraries x seven methods, two rungs each, one library's gradients failing.
The published ROBER rates ladder, read twice as two results files, is the real case.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sciml_bench.results import gradient_scaling, growth, plots, styles
from sciml_bench.results.store import read

PUBLISHED = Path(__file__).resolve().parents[1] / "results" / "published"
LIBRARIES = ("diffrax", "torchdiffeq", "diffsol", "cvodes")
METHODS = ("m1", "m2", "m3", "m4", "m5", "m6", "m7")


def _row(backend: str, method: str, n: int, grad_s: float, error: float) -> dict[str, Any]:
    tier = "pass" if error <= 1e-4 else "warn" if error <= 1e-2 else "fail"
    return {"kind": "ode", "problem": "lorenz96", "backend": backend, "solver": "tsit5",
            "gradient_method": method, "jacobian": "none", "size": n, "n_state": n,
            "n_params": n, "rtol": 1e-6, "status": "ok", "solve_s": grad_s / 3,
            "grad_s": grad_s, "gradient_error": error, "gradient_tier": tier,
            "grad_warm_rss_mb": 0.1 * n}  # fmt: skip


def _ladder() -> list[dict[str, Any]]:
    """28 lines at n = 8 and 32; torchdiffeq's gradients fail, and are the fastest."""
    rows = []
    for i, lib in enumerate(LIBRARIES):
        for j, m in enumerate(METHODS):
            err = 0.5 if lib == "torchdiffeq" else 1e-6
            base = 1e-4 if lib == "torchdiffeq" else 1e-3 * (1 + i + j)
            rows += [_row(lib, m, 8, base, err), _row(lib, m, 32, base * 3, err)]
    return rows


def _containers(fig: Any) -> list[tuple[Any, Any]]:
    """(axes, errorbar container) of every line drawn."""
    return [(ax, c) for ax in fig.axes for c in ax.containers]


def _legends_inside(fig: Any) -> None:
    fig.canvas.draw()
    box = fig.bbox
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert legends
    for lg in legends:
        b = lg.get_window_extent()
        assert b.x0 >= box.x0 - 1 and b.x1 <= box.x1 + 1, (b, box)
        assert b.y0 >= box.y0 - 1 and b.y1 <= box.y1 + 1, (b, box)


@pytest.mark.parametrize("figure", [growth.growth_figure, gradient_scaling.gradient_scaling_figure])
def test_28_lines_split_into_a_row_of_panels_per_library(figure: Any) -> None:
    plot = figure(_ladder())
    fig = plot.fig
    assert len(fig.axes) == 2 * len(LIBRARIES)  # solve|time and gradient|memory, per library
    for ax in fig.axes:
        backends = {c.get_label().split()[0] for c in ax.containers}
        assert len(backends) == 1, backends  # one library per row of panels
    for lg in (ax.get_legend() for ax in fig.axes if ax.get_legend() is not None):
        assert len(lg.get_texts()) <= styles.MAX_LINES
    _legends_inside(fig)
    plots._plt().close(fig)


def test_each_library_has_one_colour_and_each_method_its_own_style() -> None:
    fig = growth.growth_figure(_ladder()).fig
    colors: dict[str, set[str]] = {}
    looks: dict[str, set[tuple[Any, ...]]] = {}
    for _, c in _containers(fig):
        line = c.lines[0]
        lib = c.get_label().split()[0]
        colors.setdefault(lib, set()).add(line.get_color())
        looks.setdefault(lib, set()).add((str(line.get_linestyle()), line.get_marker(),
                                          c.get_label()))  # fmt: skip
    assert all(len(v) == 1 for v in colors.values()), colors
    assert len({next(iter(v)) for v in colors.values()}) == len(LIBRARIES)
    for lib, seen in looks.items():  # seven methods, seven distinct line style + marker pairs
        assert len({(ls, m) for ls, m, _ in seen}) == len(METHODS), (lib, seen)
    plots._plt().close(fig)


def test_a_line_that_does_not_qualify_is_faint_and_names_its_tier() -> None:
    plot = gradient_scaling.gradient_scaling_figure(_ladder())
    fig = plot.fig
    time_axes = fig.axes[0::2]
    for ax in time_axes:
        for c in ax.containers:
            alpha = c.lines[0].get_alpha()
            if c.get_label().startswith("torchdiffeq"):
                assert alpha == styles.FAINT
            else:
                assert alpha in (None, 1.0)
    texts = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    failing = [t for t in texts if t.startswith("torchdiffeq")]
    assert len(failing) == len(METHODS) and all(t.endswith("(fail)") for t in failing)
    assert not any("(" in t.split(")")[-1] for t in texts if not t.startswith("torchdiffeq"))
    assert "rtol 1e-06" in fig._suptitle.get_text()
    plots._plt().close(fig)


def test_only_the_rungs_that_miss_are_faint_and_named() -> None:
    rows = [_row("diffsol", "forward", 8, 1e-3, 1e-6), _row("diffsol", "forward", 32, 2e-3, 0.5)]
    fig = growth.growth_figure(rows).fig
    grad_ax = fig.axes[1]
    alphas = sorted(str(c.lines[0].get_alpha()) for c in grad_ax.containers)
    assert alphas == ["0.25", "None"]  # the faint whole, the qualifying stretch over it
    (text,) = [t.get_text() for t in grad_ax.get_legend().get_texts()]
    assert "(fail at n=32)" in text.split("\n")[0]
    plots._plt().close(fig)


def test_a_long_ladder_names_its_misses_as_ranges() -> None:
    """Seven rungs (Van der Pol's gradient ladder) stay one short legend entry: runs of
    one reason as ranges, not one clause per rung."""
    rtols = ["1e-06", "1e-07", "1e-08", "1e-09", "1e-10", "1e-11", "1e-12"]
    tiers = ["fail, under load", "fail", "fail", "fail", "warn", "warn", ""]
    assert styles.tier_note(list(zip(rtols, tiers, strict=True)), "rtol") == (
        " (fail, under load at rtol=1e-06; fail at rtol=1e-07 to 1e-09; warn at rtol=1e-10, "
        "1e-11)")


def test_twelve_lines_stay_in_one_row() -> None:
    rows = [r for r in _ladder() if r["backend"] in ("diffrax", "diffsol")
            and r["gradient_method"] in METHODS[:6]]  # fmt: skip
    fig = growth.growth_figure(rows).fig
    assert len(fig.axes) == 2
    _legends_inside(fig)
    plots._plt().close(fig)


def test_the_published_rates_ladder_twice_keeps_its_legends_inside() -> None:
    """26 real lines (the published ROBER rates ladder read as files #1 and #2)."""
    (name,) = json.loads((PUBLISHED / "files.json").read_text())["ladder stiff-robertson-rates"]
    records = read(PUBLISHED / name).records
    rows = [{**r, "_run": f"#{i}", "_run_file": name} for i in (1, 2) for r in records]
    for figure in (growth.growth_figure, gradient_scaling.gradient_scaling_figure):
        fig = figure(rows).fig
        libraries = {c.get_label().split()[1] for _, c in _containers(fig)}
        assert len(fig.axes) == 2 * len(libraries | {"scipy"} if figure is growth.growth_figure
                                        else libraries)  # fmt: skip
        _legends_inside(fig)
        plots._plt().close(fig)
