"""The forecast that skips a ladder rung up front: its bound on a known cost law, on the
published ladders (where it must never exceed what a completed rung really took), and in a
real ladder whose dense rows grow too fast for the budget."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from sciml_bench.problem import spec
from sciml_bench.results import store
from sciml_bench.run import forecast, runner

ROOT = Path(__file__).resolve().parent.parent


def row(n: int, solve: float, grad: float | None = None) -> dict:
    r = {"status": "ok", "n_state": n, "solve_samples": [solve * 1.2, solve, solve * 1.1]}
    if grad is not None:
        r["grad_samples"] = [grad, grad * 1.3]
    return r


def test_the_bound_grows_the_last_size_by_the_last_slope() -> None:
    """t = 1e-3 + 1e-9 n³: from n = 100 and 1000 the slope is log(t₂/t₁)/log 10, and the
    bound at 10⁴ is 4 calls of t(1000)·10^p, below the true 4·t(10⁴)."""

    def t(n: int) -> float:
        return 1e-3 + 1e-9 * n**3

    f = forecast.least_seconds([row(100, t(100)), row(1000, t(1000))], 10_000)
    assert f is not None
    p = math.log(t(1000) / t(100)) / math.log(10)
    assert f.calls["solve"][1] == pytest.approx(p)
    assert f.seconds == pytest.approx(4 * t(1000) * 10**p)
    assert f.seconds < 4 * t(10_000)
    assert f.sizes == (100, 1000) and "grad" not in f.calls


def test_one_size_gives_slope_zero_and_a_shrinking_cost_is_not_extrapolated_down() -> None:
    one = forecast.least_seconds([row(10, 0.5, 2.0)], 1000)
    assert one is not None and one.seconds == pytest.approx(4 * (0.5 + 2.0))
    down = forecast.least_seconds([row(10, 0.5), row(100, 0.4)], 1000)
    assert down is not None and down.calls["solve"][1] == 0.0
    assert down.seconds == pytest.approx(4 * 0.4)


def test_nothing_to_go_on_is_no_forecast() -> None:
    assert forecast.least_seconds([], 100) is None
    assert forecast.least_seconds([row(100, 1.0)], 100) is None  # not a smaller size
    assert forecast.least_seconds([{"status": "ok", "n_state": 10}], 100) is None


def test_the_reason_says_the_bound_the_budget_and_the_way_round() -> None:
    f = forecast.least_seconds([row(30, 0.01, 0.1), row(300, 1.0, 10.0)], 3000)
    assert f is not None
    why = f.reason(300.0)
    assert why.startswith(f"not run: forecast to need at least {f.seconds:.3g} s at 3000 states")
    assert f"over {forecast.MARGIN:g} x the 300 s budget" in why and "--budget S runs it" in why
    assert f.beyond(f.seconds / (forecast.MARGIN + 0.1))
    assert not f.beyond(f.seconds / (forecast.MARGIN - 0.1))
    assert "at 30 and 300 states" in why


def test_a_build_that_grows_counts_once_by_its_own_slope() -> None:
    """AMICI's C++ compile grows with the model: the fastest process's build phase at the
    last size grows by the build's own slope and is added once (not per call), and the
    reason names it; a row with no build phase adds nothing."""

    def built(n: int, solve: float, builds: list[float]) -> dict:
        r = row(n, solve)
        r["phase_names"] = ["import", "build", "first_solve", "first_grad"]
        r["phases"] = np.array([[1.0, b, 0.1, 0.2] for b in builds])  # as a worker's row
        return r

    f = forecast.least_seconds([built(30, 0.01, [30.0]), built(300, 0.1, [130.0, 120.0])], 3000)
    assert f is not None
    p = math.log(120.0 / 30.0) / math.log(10)  # the fastest process at 300: 120 s
    assert f.calls["build"] == pytest.approx((120.0, p, 120.0 * 10**p))
    assert f.seconds == pytest.approx(forecast.CALLS * 1.0 + 120.0 * 10**p)
    assert f"a build ≥ {120.0 * 10**p:.3g} s (slope {p:.2f}), then 4 calls each of solve" in \
        f.reason(300.0)
    plain = forecast.least_seconds([row(30, 0.01), row(300, 0.1)], 3000)
    assert plain is not None and "build" not in plain.calls and "build" not in plain.reason(1.0)


@pytest.mark.parametrize("problem", ["stiff-robertson-groups", "stiff-brusselator-2d"])
def test_on_the_published_ladders_the_bound_never_exceeds_a_completed_rung(problem: str) -> None:
    """Replayed on the measured ladders: no rung that completed was forecast past MARGIN
    times its own wall time (so none could have been skipped at a budget it met; the model
    is a lower bound where cost is a sum of powers of the size, and the margin covers the
    libraries that are not), and some dense rung is forecast past the 300 s budget."""
    published = ROOT / "results" / "published"
    # the ladder's own run (publish_results' files.json), not its top rungs run again
    (name,) = json.loads((published / "files.json").read_text())[f"ladder {problem}"]
    ladders: dict[tuple, list[dict]] = {}
    for r in store.read(published / name).records:
        if r.get("size") is not None:
            ladders.setdefault((r["backend"], r["solver"], r["jacobian"]), []).append(r)
    checked, over = 0, []
    for key, rows in ladders.items():
        done: list[dict] = []
        for r in sorted(rows, key=lambda r: r["size"]):
            n = r.get("n_state")
            f = forecast.least_seconds(done, n) if n else None
            if r["status"] == "ok":
                if f is not None:
                    assert f.seconds < forecast.MARGIN * r["worker_wall_s"], (key, n, f.seconds)
                    checked += 1
                done.append(r)
            elif f is not None and f.beyond(300):
                over.append(key)
    assert checked >= 8
    assert any(k[2] == "dense" for k in over), "no dense rung was forecast past the budget"


@pytest.mark.slow
def test_a_rung_forecast_past_the_budget_is_skipped_before_its_reference(
    tmp_path: Path,
) -> None:
    """diffsol's dense LU on ROBER groups: 30 and 300 states run; 30,000 states is forecast
    far past MARGIN x a 60 s budget, so it is a skipped row with the bound, and no reference is made
    for it (only two are)."""
    pytest.importorskip("pydiffsol", reason="pydiffsol is not installed: pip install '.[diffsol]'")
    problem = spec.load("stiff-robertson-groups")
    rungs_made: list[int] = []
    messages: list[str] = []

    def progress(m: str) -> None:
        messages.append(m)
        if m.startswith("reference for"):
            rungs_made.append(int(m.split("at size ")[1].split()[0]))

    first = runner.Rungs(problem, progress=lambda m: None).get(10)[0]
    ladders = runner.plan_sized(first, ["diffsol"], [10, 100, 10_000], jacobians=["dense"])
    writer = store.ResultsWriter(tmp_path / "r.h5", {}, "test")
    settings = runner.Settings(cold=1, repeats=3, budget_s=60.0, steady_budget_s=1.0)
    rows = runner.run_sized(problem, ladders, writer, settings, progress=progress,
                            available=10**13)  # fmt: skip
    assert [(r["size"], r["status"]) for r in rows] == [
        (10, "ok"), (100, "ok"), (10_000, "skipped")
    ], [r["reason"] for r in rows]
    last = rows[-1]
    assert last["n_state"] == 30_000 and last["forecast_least_s"] > forecast.MARGIN * 60
    assert last["reason"].startswith("not run: forecast to need at least")
    assert last["largest_ok_size"] == 100
    assert rungs_made == [10, 100]
    back = store.read(tmp_path / "r.h5").records[-1]
    assert back["forecast_least_s"] == pytest.approx(last["forecast_least_s"])
