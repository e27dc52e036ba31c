"""The work-precision and growth figures (issue 32, item 7): the gradient panel plots the
gradient's time against the gradient error, and the growth figure's legend hides no point."""

from __future__ import annotations

import numpy as np

from sciml_bench.results import growth, plots


def _case(rtol: float, sol: float, grad_err: float, solve: float, grad: float) -> dict:
    """One rung of a single-trajectory case, with the keys the figure reads."""
    return {"kind": "ode", "problem": "wp", "backend": "diffsol", "solver": "bdf",
            "gradient_method": "forward", "status": "ok", "rtol": rtol,
            "solution_error": sol, "gradient_error": grad_err, "solve_s": solve,
            "grad_s": grad}  # fmt: skip


def test_the_gradient_panel_plots_gradient_time_against_the_gradient_error() -> None:
    rungs = [_case(1e-4, 3e-4, 2e-3, 1e-3, 4e-3), _case(1e-6, 2e-6, 5e-5, 2e-3, 9e-3),
             _case(1e-8, 1e-8, 0.0, 4e-3, 2e-2)]  # fmt: skip
    plot = plots.work_precision_figure(rungs)
    solve_ax, grad_ax = plot.fig.axes[:2]
    assert np.allclose(solve_ax.lines[0].get_xdata(), [1e-8, 2e-6, 3e-4])  # by rtol
    assert np.allclose(solve_ax.lines[0].get_ydata(), [4e-3, 2e-3, 1e-3])
    # a zero gradient error has no place on a log axis: left out, and said so
    assert np.allclose(grad_ax.lines[0].get_xdata(), [5e-5, 2e-3])
    assert np.allclose(grad_ax.lines[0].get_ydata(), [9e-3, 4e-3])
    assert "gradient error" in grad_ax.get_xlabel() and "rel_l2" in solve_ax.get_xlabel()
    assert any("not in the gradient panel" in n and "rtol=1e-08" in n for n in plot.notes)
    plots._plt().close(plot.fig)


def _rung(backend: str, jac: str, n: int, solve: float, grad: float | None) -> dict:
    """One size of a ladder (a SciPy rung has no gradient)."""
    return {"kind": "ode", "problem": "sized", "backend": backend, "solver": "bdf",
            "gradient_method": "none" if grad is None else "forward", "jacobian": jac,
            "size": n, "n_state": n, "status": "ok", "solve_s": solve,
            "grad_s": grad}  # fmt: skip


def test_the_growth_legend_is_outside_the_axes_with_each_ladders_exponents() -> None:
    """The Brusselator's published ladders put a point (Diffrax's gradient at 128 states) in
    the upper left, under the legend; now one legend sits right of both panels, one entry per
    ladder, its exponent in each panel it has a line in."""
    rows = [_rung("diffrax", "dense", 128, 0.5, 0.304), _rung("diffrax", "dense", 512, 11, 58),
            _rung("diffsol", "sparse", 128, 0.026, 0.059),
            _rung("diffsol", "sparse", 512, 0.33, 0.52),
            _rung("scipy", "sparse", 128, 0.2, None), _rung("scipy", "sparse", 512, 0.65, None)]
    plot = growth.growth_figure(rows)
    fig = plot.fig
    fig.canvas.draw()
    axes = fig.axes[:2]
    legends = [ax.get_legend() for ax in axes if ax.get_legend() is not None]
    assert len(legends) == 1
    box = legends[0].get_window_extent()
    for ax in axes:
        assert not box.overlaps(ax.get_window_extent()), "the legend covers an axes"
    texts = [t.get_text() for t in legends[0].get_texts()]
    assert len(texts) == 3
    by = {t.split()[0]: t for t in texts}
    p_solve = np.log(11 / 0.5) / np.log(4)
    p_grad = np.log(58 / 0.304) / np.log(4)
    assert f"p = {p_solve:.2f} solve, {p_grad:.2f} gradient" in by["diffrax"]
    assert by["scipy"].endswith("solve") and "gradient" not in by["scipy"].split("\n")[1]
    plots._plt().close(fig)
