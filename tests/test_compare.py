"""``sciml-bench compare``: matching, the Mann–Whitney verdicts, exit codes.

Timings come from a real measured distribution: a SciPy solve of the
Robertson problem timed in this process (about half a second in all).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from sciml_bench.cli.main import main
from sciml_bench.cli.report import register
from sciml_bench.results import compare as cmp
from sciml_bench.results.store import ResultsWriter

register(main)


@pytest.fixture(scope="module")
def timings() -> np.ndarray:
    """120 real wall-clock samples of one small stiff solve (seconds).

    On a loaded machine the distribution can be bimodal: a third of the calls
    preempted, at four times the median. A 2x shift then reverses up to a quarter
    of the old/new pairs, so the slowdown test uses 30 samples a side (p ~ 1e-3
    even then).
    """
    from scipy.integrate import solve_ivp

    def rhs(t: float, y: np.ndarray) -> list[float]:
        return [
            -0.04 * y[0] + 1e4 * y[1] * y[2],
            0.04 * y[0] - 1e4 * y[1] * y[2] - 3e7 * y[1] ** 2,
            3e7 * y[1] ** 2,
        ]

    out = []
    for _ in range(120):
        t0 = time.perf_counter()
        solve_ivp(rhs, (0.0, 40.0), [1.0, 0.0, 0.0], method="LSODA", rtol=1e-6, atol=1e-10)
        out.append(time.perf_counter() - t0)
    return np.asarray(out)


def record(solve: Any, grad: Any = (), **kw: Any) -> dict[str, Any]:
    """A record with the keys :func:`sciml_bench.run.runner.assemble` writes."""
    rec = {
        "kind": "ode", "problem": "stiff-robertson", "backend": "scipy", "solver": "LSODA",
        "gradient_method": "none", "rtol": 1e-6, "atol": 1e-10, "status": "ok", "reason": "",
        "solve_samples": list(map(float, solve)), "grad_samples": list(map(float, grad)),
        "ttfg_samples": [0.7], "phase_names": ["import", "build", "first_solve", "first_grad"],
        "phases": [[0.5, 0.2, 0.01, float("nan")]], "solution_error": 1e-6,
    }  # fmt: skip
    rec.update(kw)
    return rec


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    w = ResultsWriter(path, {"python": "test"}, "test")
    for r in records:
        w.add(r)
    w.finish("complete")
    return path


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def test_min_p_matches_the_exact_test() -> None:
    from scipy.stats import mannwhitneyu

    assert cmp.min_p(3, 3) == pytest.approx(0.1)
    # the exact test reaches min_p with fully separated samples
    p = mannwhitneyu([4, 5, 6, 7, 8], [1, 2, 3, 3.5, 3.7], method="exact").pvalue
    assert p == pytest.approx(cmp.min_p(5, 5))


def test_three_vs_three_is_n_too_small_even_for_2x(timings: np.ndarray) -> None:
    ch = cmp.compare_samples("solve", timings[:3], timings[:3] * 2)
    assert ch is not None and ch.verdict == cmp.TOO_FEW and not ch.significant
    assert ch.ratio == pytest.approx(2.0)


def test_injected_2x_slowdown_is_significant_and_fails_ci(
    tmp_path: Path, timings: np.ndarray
) -> None:
    """NEW holds the same real samples as OLD, times two, for one of two cases."""
    old = write(tmp_path / "old.h5", [record(timings[:30]), record(timings[30:60], rtol=1e-8)])
    new = write(tmp_path / "new.h5", [record(timings[:30] * 2), record(timings[30:60], rtol=1e-8)])
    res = invoke("compare", str(old), str(new), "--fail-above", "1.10")
    assert res.exit_code == 1, res.output
    assert "SLOWER > 1.1x" in res.output
    assert "geometric mean" in res.output
    data = json.loads(invoke("compare", str(old), str(new), "--json").stdout)
    solve = [t for c in data["cases"] for t in c["timings"] if t["metric"] == "solve"]
    assert solve[0]["verdict"] == cmp.SLOWER and solve[0]["p"] < cmp.ALPHA
    assert solve[0]["ratio"] == pytest.approx(2.0)
    assert solve[1]["verdict"] == cmp.SAME and solve[1]["ratio"] == 1.0


def test_identical_timings_pass_ci(tmp_path: Path, timings: np.ndarray) -> None:
    old = write(tmp_path / "a.h5", [record(timings[:20])])
    new = write(tmp_path / "b.h5", [record(timings[:20])])
    res = invoke("compare", str(old), str(new), "--fail-above", "1.10")
    assert res.exit_code == 0, res.output


def test_false_positive_rate_on_one_distribution(timings: np.ndarray) -> None:
    """Two "runs of the same code": 10 vs 10 draws from one real timing distribution,
    200 times. Stated rate: at most alpha + 0.03 flagged (with alpha = 0.01 the
    binomial standard deviation over 200 trials is 0.007, so the margin is > 4 sd).
    The seed is fixed, so the test is deterministic."""
    rng = np.random.default_rng(2024)
    trials = 200
    flagged = 0
    for _ in range(trials):
        ch = cmp.compare_samples("solve", rng.choice(timings, 10), rng.choice(timings, 10))
        assert ch is not None and ch.verdict != cmp.TOO_FEW
        flagged += ch.significant
    assert flagged / trials <= cmp.ALPHA + 0.03, f"{flagged}/{trials} flagged"


def test_status_changes_are_reported_and_fail_ci(tmp_path: Path, timings: np.ndarray) -> None:
    grad = timings[:10] * 3
    old = write(tmp_path / "old.h5", [
        record(timings[:10]),
        record(timings[:10], grad, backend="diffrax", solver="Kvaerno5",
               gradient_method="RecursiveCheckpointAdjoint", gradient_tier="pass",
               gradient_error=1e-6),
    ])  # fmt: skip
    new = write(tmp_path / "new.h5", [
        record([], status="max_steps", reason="hit max_steps=10000 at t=3.2"),
        record(timings[:10], grad, backend="diffrax", solver="Kvaerno5",
               gradient_method="RecursiveCheckpointAdjoint", gradient_tier="warn",
               gradient_error=3e-3),
        record(timings[:10], backend="julia", solver="Rodas5P"),
    ])  # fmt: skip
    res = invoke("compare", str(old), str(new))
    assert res.exit_code == 0  # reported, but only --fail-above turns it into an exit code
    assert "status ok → max_steps: hit max_steps=10000" in res.output
    assert "gradient pass → warn" in res.output
    assert "only in NEW" in res.output and "julia" in res.output
    assert invoke("compare", str(old), str(new), "--fail-above", "1.5").exit_code == 1


def test_rtol_matching_tolerates_float_noise() -> None:
    a = cmp.case_key(record([1.0], rtol=1e-6))
    b = cmp.case_key(record([1.0], rtol=1e-6 * (1 + 1e-12)))
    assert a == b
    assert a != cmp.case_key(record([1.0], rtol=1e-7))


def test_cnn_rows_pair_only_with_the_same_model_precision_and_pipeline() -> None:
    """A first-wave CNN file (no model, precision or pipeline recorded: it meant small,
    tf32, device) pairs with today's tf32 rows, never with bf16 or host-pipeline rows."""
    from sciml_bench.results.store import read

    data = Path(__file__).resolve().parent / "data"
    old = read(data / "results-cnn-first-wave.h5").records
    assert {(r["model"], r["precision"], r["pipeline"]) for r in old} == {("small", "tf32", "device")}
    new = [{**r, "precision": p, "pipeline": q} for r in old for p in ("tf32", "bf16")
           for q in ("device", "host")]  # fmt: skip
    comp = cmp.compare(old, new)
    assert len(comp.cases) == len(old) and not comp.only_old
    assert all(cc.new["precision"] == "tf32" and cc.new["pipeline"] == "device" for cc in comp.cases)
    assert len(comp.only_new) == 3 * len(old)
    assert "torch-eager small/tf32/device/synthetic on cpu" in cmp.render(comp)
