"""Accuracy metrics and tiers."""

from __future__ import annotations

import numpy as np
import pytest

from sciml_bench.measure import metrics


def test_solution_error_scales_each_state() -> None:
    ref = np.array([[1.0, 1e-5], [0.5, 2e-5]])
    y = ref.copy()
    y[:, 1] *= 1.01  # 1% error in the tiny species must show up
    err = metrics.solution_error(y, ref)
    assert err["rel_l2"] == pytest.approx(0.01 * np.sqrt(0.25 + 1) / np.sqrt(1 + 0.25 + 0.25 + 1))
    assert err["final"] == pytest.approx(0.5 * 2e-7)
    # a non-finite solution has no error to report: every metric is NaN, never a number
    # that could pass for one (nan != x is always true, so test isnan itself)
    bad = y.copy()
    bad[1, 0] = np.nan
    assert all(np.isnan(v) for v in metrics.solution_error(bad, ref).values())
    assert all(np.isnan(v) for v in metrics.solution_error(y[:1], ref).values())  # shape
    assert metrics.solution_error(ref, ref) == {"rel_l2": 0.0, "rel_final": 0.0, "final": 0.0,
                                                "l2": 0.0}


def test_gradient_error_in_log_space_and_tiers() -> None:
    theta = np.array([0.04, 3e7])
    ref = np.array([-0.4, 5e-10])
    g = ref * np.array([1 + 1e-6, 1 - 2e-6])
    e = metrics.gradient_error(g, ref, theta, np.array([True, True]))
    assert e["max_rel"] == pytest.approx(2e-6, rel=1e-6)
    assert e["cosine"] == pytest.approx(1.0)
    assert metrics.gradient_tier(e["max_rel"]) == "pass"
    assert metrics.gradient_tier(5e-3) == "warn"
    assert metrics.gradient_tier(0.5) == "fail"
    assert metrics.gradient_tier(float("nan")) == "fail"
    wrong_sign = metrics.gradient_error(-ref, ref, theta, np.array([True, True]))
    assert wrong_sign["max_rel"] == pytest.approx(2.0) and wrong_sign["cosine"] == pytest.approx(-1)
