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
    nan = {k: v for k, v in metrics.solution_error(bad, ref).items() if k != "worst_state"}
    assert all(np.isnan(v) for v in nan.values())
    assert metrics.solution_error(bad, ref)["worst_state"] == -1
    shape = {k: v for k, v in metrics.solution_error(y[:1], ref).items() if k != "worst_state"}
    assert all(np.isnan(v) for v in shape.values())
    assert metrics.solution_error(ref, ref) == {"rel_l2": 0.0, "rel_final": 0.0, "final": 0.0,
                                                "l2": 0.0, "worst_state": 0}
    assert err["worst_state"] == 1  # the tiny species carries the error


def test_a_state_that_is_round_off_in_the_reference_cannot_dominate() -> None:
    """Isensee_JCB2018's AC_Fsk starts at 0 and stays at round-off (1e-40) in the reference:
    without a floor its scale is 1e-40 and a library's 1e-12 there is an error of 1e10.
    With the problem's atol/rtol as the floor (1e-10 / 1e-6), the error is the other
    states', and the tiny ROBER-like species above the floor still counts in full."""
    ref = np.array([[1.0, 1e-40, 2e-3], [0.5, -3e-41, 3e-3]])
    y = ref.copy()
    y[:, 1] = 1e-12  # round-off of another library, far below atol
    y[:, 2] *= 1 + 1e-6
    bare = metrics.solution_error(y, ref)
    floored = metrics.solution_error(y, ref, floor=1e-10 / 1e-6)
    assert bare["rel_l2"] > 1e9 and bare["worst_state"] == 1
    assert floored["rel_l2"] < 2e-6 and floored["worst_state"] == 2


def test_gradient_error_in_log_space_and_tiers() -> None:
    theta = np.array([0.04, 3e7])
    ref = np.array([-0.4, 5e-10])
    g = ref * np.array([1 + 1e-6, 1 - 2e-6])
    e = metrics.gradient_error(g, ref, theta, np.array([True, True]))
    # judged on θ ⊙ g = (-0.016, 0.015): norm-wise, and the worst component by name
    judged = np.array([-0.016, 0.015])
    expected = np.linalg.norm(judged * [1e-6, 2e-6]) / np.linalg.norm(judged)
    assert e["rel"] == pytest.approx(expected, rel=1e-6)  # 1.55e-6
    assert e["worst"] == pytest.approx(2e-6, rel=1e-6) and e["worst_index"] == 1
    assert e["cosine"] == pytest.approx(1.0)
    exact = 1e-12  # a reference that resolves every tier (no estimate: no tier)
    assert metrics.gradient_tier(e["rel"], exact) == "pass"
    assert metrics.gradient_tier(5e-3, exact) == "warn"
    assert metrics.gradient_tier(0.5, exact) == "fail"
    assert metrics.gradient_tier(float("nan"), exact) == "fail"
    wrong_sign = metrics.gradient_error(-ref, ref, theta, np.array([True, True]))
    assert wrong_sign["rel"] == pytest.approx(2.0) and wrong_sign["cosine"] == pytest.approx(-1)


def test_one_wrong_component_is_named_while_the_norm_passes() -> None:
    # a gradient whose components span 1e-3 to 1 (Lorenz-96's 1.3e-3 to 0.29): a 30 %
    # error on the smallest moves the norm by 3e-4 / 1.15: warn, not fail
    ref = np.array([1.0, -0.5, 0.25, 1e-3])
    g = ref.copy()
    g[3] *= 1.3
    e = metrics.gradient_error(g, ref, np.ones(4), np.zeros(4, bool))
    assert e["rel"] == pytest.approx(3e-4 / np.linalg.norm(ref), rel=1e-9)
    assert metrics.gradient_tier(e["rel"], 1e-12) == "warn"  # 2.6e-4
    small = ref.copy()
    small[3] = 1e-6
    g2 = small.copy()
    g2[3] *= 1.3  # 30 % off on a component at the 1e-3 floor: worst 0.3 x 1e-6 / 1e-3
    e2 = metrics.gradient_error(g2, small, np.ones(4), np.zeros(4, bool))
    assert e2["worst"] == pytest.approx(0.3e-3, rel=1e-6) and e2["worst_index"] == 3
    assert metrics.suspect_note(e2["worst"], "k[3]", e2["rel"]) == ""  # under the floor
    g3 = ref.copy()
    g3[2] *= 1.24  # 24 % off on 0.25: the norm is 5e-2 (fail), so no suspect note either
    e3 = metrics.gradient_error(g3, ref, np.ones(4), np.zeros(4, bool))
    assert e3["worst_index"] == 2 and e3["worst"] == pytest.approx(0.24)
    assert metrics.suspect_note(e3["worst"], "k3[17]", 5e-5) == (
        "suspect component k3[17]: 24 % off while the norm passes")


@pytest.mark.parametrize(("error", "ref_error", "bound", "judged"), [
    (5e-5, 8e-6, 1e-4, True),    # pass: the reference resolves a tenth of 1e-4
    (5e-5, 2e-5, 1e-4, False),   # the reference cannot resolve 1e-4
    (5e-5, 2e-5, 1e-2, True),    # --gradient-rtol 1e-2: a reference at 2e-5 suffices
    (5e-7, 8e-6, 1e-6, False),   # --gradient-rtol 1e-6 with a reference at 8e-6: refused
    (2e-4, 1e-9, 1e-4, False),   # the row itself is above the bound
    (float("nan"), 1e-9, 1e-4, False),
])
def test_a_bound_judges_a_row_only_where_the_reference_resolves_it(
    error: float, ref_error: float, bound: float, judged: bool
) -> None:
    assert metrics.within(error, ref_error, bound) is judged
