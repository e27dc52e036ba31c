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
from sciml_bench.measure.noise import PROCESS_FLOOR
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
    """NEW holds the same real samples as OLD, times three, for one of two cases: beyond
    the floor of one process a side (2.1x)."""
    old = write(tmp_path / "old.h5", [record(timings[:30]), record(timings[30:60], rtol=1e-8)])
    new = write(tmp_path / "new.h5", [record(timings[:30] * 3), record(timings[30:60], rtol=1e-8)])
    res = invoke("compare", str(old), str(new), "--fail-above", "1.10")
    assert res.exit_code == 1, res.output
    assert "SLOWER > 1.1x" in res.output
    assert "geometric mean" in res.output
    data = json.loads(invoke("compare", str(old), str(new), "--json").stdout)
    solve = [t for c in data["cases"] for t in c["timings"] if t["metric"] == "solve"]
    assert solve[0]["verdict"] == cmp.SLOWER and solve[0]["p"] < cmp.ALPHA
    assert solve[0]["ratio"] == pytest.approx(3.0)
    assert solve[1]["verdict"] == cmp.IN_NOISE and solve[1]["ratio"] == 1.0
    assert solve[0]["why"].endswith("beyond 2.1x") and data["noise_floor"] == cmp.NOISE_FLOOR


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


def tight(timings: np.ndarray, n: int = 10) -> np.ndarray:
    """``n`` samples within 2% of the real median: one run's steady samples on a quiet
    machine, tight enough that any shift separates them completely."""
    return float(np.median(timings)) * np.linspace(1.0, 1.02, n)


def test_drift_between_identical_runs_is_not_reported(tmp_path: Path, timings: np.ndarray) -> None:
    """Issue 23: NEW is OLD shifted 5.5% as a whole (another run's drift), its samples
    tight. The test alone calls it significant (p ~ 1e-5; the old verdict was "slower");
    the noise floor does not, and the output says why."""
    base = tight(timings)
    ch = cmp.compare_samples("solve", base, base * 1.055)
    assert ch is not None and ch.p < cmp.ALPHA
    assert ch.verdict == cmp.IN_NOISE and not ch.significant
    assert ch.why == "1.055x within 2.1x" and ch.unit == "samples of one process"
    old = write(tmp_path / "old.h5", [record(base)])
    new = write(tmp_path / "new.h5", [record(base * 1.055)])
    res = invoke("compare", str(old), str(new), "--fail-above", "1.05")
    assert res.exit_code == 0, res.output
    assert "inside noise floor" in res.output and "1.055x within 2.1x" in res.output
    assert "outside the noise floor 1.1x measured between identical runs" in res.output
    assert "--fail-above 1.05 is inside the noise floor" in res.output


def test_a_slowdown_beyond_the_floor_is_reported_and_the_floor_can_be_set(
    tmp_path: Path, timings: np.ndarray
) -> None:
    """Fresh processes (time to first gradient) clear the run-to-run floor (1.1x); the
    samples of one process a side must clear the process floor (2.1x): 1.3x is reported
    on the first, not on the second, and the output says which floor held it."""
    base = tight(timings)
    ttfg = cmp.compare_samples("ttfg", base, base * 1.3)
    assert ttfg is not None and ttfg.verdict == cmp.SLOWER
    assert ttfg.p < 1e-3 and ttfg.why == f"p {ttfg.p:.2g} < 0.01, 1.300x beyond 1.1x"
    assert cmp.compare_samples("ttfg", base, base / 1.3).verdict == cmp.FASTER  # type: ignore[union-attr]
    steady = cmp.compare_samples("solve", base, base * 1.3)
    assert steady is not None and steady.verdict == cmp.IN_NOISE and steady.p < 1e-3
    assert steady.why == "1.300x within 2.1x" and steady.floor == PROCESS_FLOOR
    assert cmp.compare_samples("solve", base, base * 2.5).verdict == cmp.SLOWER  # type: ignore[union-attr]
    wide = cmp.compare_samples("ttfg", base, base * 1.3, floor=1.5)
    assert wide is not None and wide.verdict == cmp.IN_NOISE
    old = write(tmp_path / "old.h5", [record(base)])
    new = write(tmp_path / "new.h5", [record(base * 2.5)])
    assert invoke("compare", str(old), str(new), "--fail-above", "1.1").exit_code == 1
    res = invoke("compare", str(old), str(new), "--fail-above", "1.1", "--noise-floor", "3")
    assert res.exit_code == 0 and "2.500x within 3x" in res.output


def test_several_runs_a_side_make_the_run_the_unit(tmp_path: Path, timings: np.ndarray) -> None:
    """Three runs a side, each run's samples tight and the runs drifting by a few
    percent: against runs of the same code nothing is reported (the one-run test on the
    samples of the most distant pair would say p ~ 1e-5); against runs 1.3x slower,
    Welch's t on the runs' log medians reports it."""
    base = tight(timings)
    drifts_old, drifts_same = (1.0, 1.04, 0.97), (1.02, 0.98, 1.03)
    olds = [[record(base * d)] for d in drifts_old]
    same = [[record(base * d)] for d in drifts_same]
    slow = [[record(base * d * 1.3)] for d in drifts_same]
    (flat,) = cmp.compare(olds[2][0:1], same[2][0:1]).cases
    assert flat.changes[0].p < cmp.ALPHA  # the samples of one run a side: "significant"
    comp = cmp.compare_many(olds, same)
    (ch,) = [c for c in comp.cases[0].changes if c.metric == "solve"]
    assert ch.unit == cmp.RUNS and (ch.n_old, ch.n_new) == (3, 3)
    assert ch.verdict in (cmp.SAME, cmp.IN_NOISE) and ch.p > cmp.ALPHA
    (ch,) = [c for c in cmp.compare_many(olds, slow).cases[0].changes if c.metric == "solve"]
    assert ch.verdict == cmp.SLOWER and ch.p < cmp.ALPHA
    assert ch.ratio == pytest.approx(1.3 * 1.02, rel=1e-9)  # median of run medians
    paths = [write(tmp_path / f"{k}{i}.h5", recs) for k, runs in (("o", olds), ("s", slow))
             for i, recs in enumerate(runs)]  # fmt: skip
    res = invoke("compare", ",".join(map(str, paths[:3])), ",".join(map(str, paths[3:])),
                 "--json", "--fail-above", "1.2")  # fmt: skip
    assert res.exit_code == 1
    data = json.loads(res.stdout)
    assert data["test"] == "welch t on log run medians" and data["runs_old"] == 3
    assert "several runs a side" not in data["rule"]
    twice = invoke("compare", f"{paths[0]},{paths[0]}", str(paths[3]))
    assert twice.exit_code == 2 and "names a file twice" in twice.output


def test_a_row_that_ran_nowhere_is_not_labelled_on_a_question_mark(tmp_path: Path) -> None:
    """`compare` printed `julia on ?` for an unavailable row (which records no device)."""
    gone = {"kind": "ode", "problem": "stiff-robertson", "backend": "julia", "solver": "",
            "gradient_method": "", "status": "unavailable", "reason": "no Julia"}  # fmt: skip
    old = write(tmp_path / "old.h5", [gone])
    new = write(tmp_path / "new.h5", [gone, record([1.0], backend="torchode", solver="dopri5")])
    res = invoke("compare", str(old), str(new))
    assert res.exit_code == 0, res.output
    assert "on ?" not in res.output
    assert "julia (unavailable: not run)" in res.output
    assert "torchode dopri5 rtol=1e-06 (device not recorded)" in res.output


def test_the_slowed_worker_makes_a_call_take_factor_times_its_duration() -> None:
    """``run/slowdown.py``, the deliberate slowdown of benchmarks/compare_false_alarms.py:
    the wrapped call returns the real result after at least ``factor`` times its own
    duration (a busy wait on top of it); a factor below 1 is refused."""
    import os

    from sciml_bench.measure.clock import perf
    from sciml_bench.measure.environment import SLOWDOWN_VAR
    from sciml_bench.run import slowdown

    inner: list[float] = []

    def work() -> int:
        t = perf()
        time.sleep(0.02)
        inner.append(perf() - t)
        return 7

    t = perf()
    assert slowdown.slowed(work, 1.5)() == 7
    assert perf() - t >= 1.5 * inner[0]
    os.environ[SLOWDOWN_VAR] = "0.5"
    try:
        with pytest.raises(ValueError, match="give a factor >= 1"):
            slowdown.factor_from_env()
    finally:
        del os.environ[SLOWDOWN_VAR]


def test_rows_measured_under_load_are_not_judged(tmp_path: Path, timings: np.ndarray) -> None:
    """Under load identical runs differ by far more than the floor (2.6x here at load
    10), so a row whose worker ran while other processes took more than --load-limit
    cores (its others_cpu) gives no verdict, says why, and --fail-above warns."""
    base = tight(timings)
    old = write(tmp_path / "old.h5", [record(base, others_cpu=0.05)])
    new = write(tmp_path / "new.h5", [record(base * 2.5, others_cpu=1.6)])
    res = invoke("compare", str(old), str(new), "--fail-above", "1.1")
    assert res.exit_code == 0, res.output
    assert "not judged: loaded" in res.output and "others used 1.60 cores (NEW)" in res.output
    assert "1 timing(s) not judged: measured while other processes took more than 0.5" in res.output
    assert "WARNING: 1 timing(s) not judged" in res.output
    judged = invoke("compare", str(old), str(new), "--fail-above", "1.1", "--load-limit", "2")
    assert judged.exit_code == 1 and "SLOWER > 1.1x" in judged.output
    data = json.loads(invoke("compare", str(old), str(new), "--json").stdout)
    assert data["not_judged_loaded"] == 1 and data["load_limit"] == 0.5
    # a quick run's TTFG (1 vs 1) stays "n too small": it could not be judged anyway
    assert [t["verdict"] for t in data["cases"][0]["timings"]] == [cmp.LOADED, cmp.TOO_FEW]


def test_runs_not_interleaved_in_time_get_a_note() -> None:
    """Several runs a side made in two sessions also measure the machine's drift between
    them: compare says so, and not for interleaved runs or one run a side."""
    a = ["2026-11-26T10:00:00+00:00", "2026-11-26T10:02:00+00:00"]
    b = ["2026-11-26T10:05:00+00:00", "2026-11-26T10:07:00+00:00"]
    note = cmp.order_note(a, b)
    assert note is not None and "interleave them" in note
    assert cmp.order_note(b, a) == note  # NEW made first: the same drift
    assert cmp.order_note([a[0], b[0]], [a[1], b[1]]) is None  # interleaved
    assert cmp.order_note(a[:1], b) is None  # one run a side: the process floor covers it
