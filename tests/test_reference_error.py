"""The reference says its own error, and a tier is given only where it resolves it; the
directional check (8 seeded directions, above 64 parameters) sees what it should."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sciml_bench.measure import metrics
from sciml_bench.problem import reference, spec
from sciml_bench.results import store

P = 300


@pytest.fixture(scope="module")
def smooth() -> tuple[object, np.ndarray, np.ndarray]:
    """A smooth, non-quadratic loss of 300 parameters (central FD has a real h² error),
    its exact gradient and θ₀."""
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0.5, 2, P), rng.uniform(-1, 1, P)
    c, theta = rng.standard_normal(P) / np.sqrt(P), rng.uniform(-1, 1, P)

    def loss(t: np.ndarray) -> float:
        return float(np.sum(a * np.exp(b * t)) + 0.5 * (c @ t) ** 2 + np.sum(np.sin(t)))

    g = a * b * np.exp(b * theta) + c * (c @ theta) + np.cos(theta)
    return loss, theta, g


@pytest.fixture(scope="module")
def directional(smooth) -> tuple[list[np.ndarray], list[float], float]:
    loss, theta, _ = smooth
    units = reference._directions(P, "0123abcd")
    V, d, est = reference.directional_fd(loss, theta, units, reference.DEFAULT_FD_STEP)
    return V, d, est


def _tier(g: np.ndarray, directional) -> str:
    V, d, est = directional
    return metrics.gradient_tier(metrics.directional_error(g, V, d)["rel"], est)


def test_the_exact_gradient_passes_the_directional_check(smooth, directional) -> None:
    _, _, g = smooth
    V, d, est = directional
    assert len(V) == reference.N_DIRECTIONS == 8
    assert 0 < est < 1e-7  # Richardson's h⁴ remainder: far below what pass needs (1e-5)
    assert metrics.directional_error(g, V, d)["rel"] < 1e-7
    assert _tier(g, directional) == "pass"


def test_a_block_scaled_by_one_percent_fails_the_directional_check(smooth, directional) -> None:
    _, _, g = smooth
    rng = np.random.default_rng(1)
    for _ in range(5):  # any block of 10 % of the parameters
        bad = g.copy()
        bad[rng.choice(P, P // 10, replace=False)] *= 1.01
        assert metrics.directional_error(bad, *directional[:2])["rel"] > 1e-3
        assert _tier(bad, directional) != "pass"


def test_one_flipped_sign_fails_the_directional_check(smooth, directional) -> None:
    _, _, g = smooth
    for i in (0, 137, P - 1):
        bad = g.copy()
        bad[i] = -bad[i]
        assert metrics.directional_error(bad, *directional[:2])["rel"] > 1e-3
        assert _tier(bad, directional) != "pass"


def test_an_error_orthogonal_to_every_direction_is_invisible(smooth, directional) -> None:
    """What the check cannot see: P − 8 dimensions of error pass unseen (docs say so)."""
    _, _, g = smooth
    V = np.asarray(directional[0])
    q = np.random.default_rng(2).standard_normal(P)
    q -= V.T @ np.linalg.lstsq(V.T, q, rcond=None)[0]
    bad = g + q / np.linalg.norm(q) * np.linalg.norm(g)  # an error as large as g itself
    assert _tier(bad, directional) == "pass"


def test_a_tier_needs_a_reference_ten_times_better_than_its_bound() -> None:
    assert metrics.gradient_tier(2.8e-3, 2.1e-3) == "unjudged"  # the Brusselator's case
    assert metrics.gradient_tier(2.8e-3, 9e-4) == "warn"
    assert metrics.gradient_tier(5e-5, 2e-5) == "unjudged"
    assert metrics.gradient_tier(5e-5, 1e-5) == "pass"
    assert metrics.gradient_tier(float("nan"), 1.0) == "fail"  # a NaN gradient fails anyway
    assert metrics.gradient_tier(float("nan"), None) == "fail"
    note = metrics.tier_note(2.8e-3, 2.1e-3)
    assert "would be warn" in note and "2.10e-03" in note and "1e-03" in note
    assert metrics.tier_note(2.8e-3, 9e-4) == ""


def test_a_certain_failure_fails_whatever_the_reference_error() -> None:
    """0.5 against a reference good to 2e-3 (or 0.05) is at least 0.45 off: above the warn
    bound whatever the reference's own error, so ``fail``, never ``unjudged``; only where
    the reference's error could bring it under the warn bound is it unjudged."""
    assert metrics.gradient_tier(0.5, 2e-3) == "fail"
    assert metrics.gradient_tier(0.5, 0.05) == "fail"
    assert metrics.tier_note(0.5, 2e-3) == ""
    assert metrics.gradient_tier(0.012, 5e-3) == "unjudged"  # 0.012 − 0.005 ≤ 1e-2
    assert "would be fail" in metrics.tier_note(0.012, 5e-3)
    assert metrics.gradient_tier(0.012, 1e-3) == "fail"  # resolved at the warn bound


def test_no_reference_error_means_no_tier() -> None:
    """A reference that gives no estimate of its own error gives no tier: ``unjudged``,
    as ``within`` says at every bound; the note says how to get one."""
    assert metrics.gradient_tier(5e-5, None) == "unjudged"
    assert metrics.within(5e-5, None, metrics.PASS_TOL) is False
    assert metrics.within(5e-5, None, metrics.WARN_TOL) is False
    assert metrics.gradient_tier(0.5, None) == "unjudged"  # not a certain failure: unknown
    note = metrics.tier_note(5e-5, None)
    assert "would be pass" in note and "no estimate of its own error" in note
    assert "Fix: rebuild the reference" in note
    assert metrics.gradient_tier(None, 1e-9) == "" and metrics.tier_note(None, None) == ""


ERRORS = (0.0, 5e-7, 5e-5, 1e-4, 1.01e-4, 5e-3, 1e-2, 0.012, 0.5, float("inf"), float("nan"))
REFERENCE_ERRORS = (None, 0.0, 1e-12, 8e-6, 1e-5, 2e-5, 5e-4, 1e-3, 2e-3, 5e-3, 0.05, 0.6,
                    float("nan"))


@pytest.mark.parametrize("ref_error", REFERENCE_ERRORS)
@pytest.mark.parametrize("error", ERRORS)
def test_the_tier_and_within_are_one_rule(error: float, ref_error: float | None) -> None:
    """Over a grid of errors and reference errors: ``pass`` exactly where ``within`` holds
    at the pass bound; ``pass`` or ``warn`` always within the warn bound and ``fail``
    never; a fail is a certain one or one the reference resolves; no estimate, no tier."""
    tier = metrics.gradient_tier(error, ref_error)
    assert tier in ("pass", "warn", "fail", "unjudged")
    assert (tier == "pass") is metrics.within(error, ref_error, metrics.PASS_TOL)
    if tier in ("pass", "warn"):
        assert metrics.within(error, ref_error, metrics.WARN_TOL)
    if tier == "fail":
        assert not metrics.within(error, ref_error, metrics.WARN_TOL)
        resolved = ref_error is not None and ref_error <= metrics.WARN_TOL / 10
        certain = not math.isfinite(error) or (
            ref_error is not None and error - ref_error > metrics.WARN_TOL)
        assert certain or (resolved and error > metrics.WARN_TOL)
    if ref_error is None and math.isfinite(error):
        assert tier == "unjudged"
    assert (metrics.tier_note(error, ref_error) != "") is (tier == "unjudged")


@pytest.mark.slow
def test_a_loose_reference_says_so_and_leaves_the_row_unjudged() -> None:
    """ROBER at rtol 1e-5: the FD's solver noise (~rtol/h) is seen by the complex-step
    check; the tight (cached) reference's estimate is 1e-8."""
    p = spec.load("stiff-robertson")
    tight = reference.get(p)
    loose = reference.build(dataclasses.replace(p, reference={"rtol": 1e-5}))
    assert tight.gradient_check == loose.gradient_check == "full"
    assert tight.reference_error < 1e-7 < 1e-5 < loose.reference_error
    assert "own error estimate" in loose.method
    e = 5e-5  # a row that would pass against either
    assert metrics.gradient_tier(e, tight.reference_error) == "pass"
    assert metrics.gradient_tier(e, loose.reference_error) == "unjudged"
    # the estimate is honest: the loose gradient is off the tight one by about as much
    off = metrics.gradient_error(np.asarray(loose.gradient), np.asarray(tight.gradient),
                                 np.asarray(p.theta0), np.asarray(p.log_params))["rel"]
    assert loose.reference_error / 100 < off < 100 * loose.reference_error


@pytest.mark.slow
def test_a_real_run_records_the_check_and_the_reference_error(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "run", "stiff-robertson", "--quick",
         "-b", "diffsol", "--json", "--out", str(tmp_path), "--threads", "2"],
        capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (row,) = [x for x in json.loads(r.stdout) if x.get("kind") != "verdict"]
    if row["status"] == "unavailable":
        pytest.skip(row["reason"])
    assert row["gradient_check"] == "full"
    assert 0 < row["reference_error"] < 1e-6
    assert row["gradient_tier"] == metrics.gradient_tier(row["gradient_error"], row["reference_error"])
    (path,) = tmp_path.glob("*.h5")
    stored = store.read(path).records[0]
    assert stored["gradient_check"] == "full" and stored["reference_error"] == row["reference_error"]


@pytest.mark.slow
def test_the_spiral_reference_is_full_and_agrees_with_an_independent_adjoint() -> None:
    """252 weights: the reference is every component (forward sensitivities at two
    tolerances), cross-checked on 8 directions. An independent gradient (the quadrature
    adjoint, DOP853 at 1e-12) agrees within its estimate, and the estimate is small enough
    to judge pass."""
    from sciml_bench.problem.adjoint import adjoint_gradient
    from sciml_bench.problem.loss import loss_arrays

    p = spec.load("nonstiff-spiral-node")
    ref = reference.get(p)
    assert ref.gradient_check == "full" and len(ref.gradient) == p.n_params
    assert ref.gradient_method == "forward sensitivities" and 0 < ref.reference_error < 1e-6
    arrays = loss_arrays(p, np.asarray(ref.observations))
    _, g = adjoint_gradient(p, arrays, 1e-12, 1e-16, "DOP853")
    err = metrics.gradient_error(g, np.asarray(ref.gradient), np.asarray(p.theta0),
                                 np.asarray(p.log_params))["rel"]  # fmt: skip
    assert err < 10 * ref.reference_error
    assert metrics.gradient_tier(err, ref.reference_error) == "pass"


def test_a_large_array_problem_uses_forward_sensitivities_at_two_tolerances(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Above CS_MAX_STATES states the reference is forward sensitivities at rtol and 10 rtol
    with no complex-step check, checked instead by the quadrature adjoint at its rtol; its
    estimate the larger of the two disagreements. The 1-D heat equation at 20 points, with
    the threshold lowered to 10 to reach that path cheaply: it agrees with the reference
    that complex step verified, within the estimates, and the estimate is not zero."""
    import tomllib

    data = tomllib.loads((Path(__file__).parent / "data" / "heat-1d.toml").read_text())
    data["sizes"]["n"]["default"] = 20
    data["reference"] = {"rtol": 1e-9}
    p = spec.from_dict(data)
    fd = reference.build(p)
    monkeypatch.setattr(reference, "CS_MAX_STATES", 10)
    sens = reference.build(p)
    assert sens.gradient_method.startswith("forward sensitivities")
    assert "rtol 1e-09" in sens.method and "own error estimate" in sens.method
    assert sens.cross_check == reference.ADJOINT_CHECK and sens.cross_check_agreement < 1e-6
    assert sens.reference_error == max(sens.tolerance_error, sens.cross_check_agreement)
    assert 0 < sens.reference_error < 1e-5 and fd.complex_step_agreement is not None
    err = metrics.gradient_error(np.asarray(sens.gradient), np.asarray(fd.gradient),
                                 np.asarray(p.theta0), np.asarray(p.log_params))["rel"]
    assert err < 10 * max(sens.reference_error, fd.reference_error)


def test_the_directional_step_is_taken_in_log_space_for_positive_parameters() -> None:
    """ROBER's rates span 0.04 to 3e7: a natural-units step scaled by the largest would push
    k1 below zero. In log space every parameter moves by the same factor, and g·w_k
    (w_k = θ ∘ u_k) is still the derivative the row's gradient is scored on."""
    theta = np.array([0.04, 3.0e7, 1.0e4] * 30)
    scale = np.array([3.0, 1e-8, 2e-4] * 30)

    def loss(t: np.ndarray) -> float:
        assert np.all(t > 0), "a parameter was pushed across zero"
        return float(np.sum(np.log(t) ** 2 * scale))

    g = 2 * np.log(theta) * scale / theta
    units = reference._directions(theta.size, "feedbeef")
    V, d, est = reference.directional_fd(loss, theta, units, reference.DEFAULT_FD_STEP,
                                         np.ones(theta.size, bool))  # fmt: skip
    assert np.allclose(V[0], theta * units[0])
    assert metrics.directional_error(g, V, d)["rel"] < 1e-8 and est < 1e-8


@pytest.mark.slow
def test_the_estimate_is_not_below_the_true_error_on_the_node_width_ladder(
    tmp_path: Path,
) -> None:
    """``nonstiff-node-width`` at width 10 (P = 52): the old finite-difference reference
    estimated itself at 1.7e-5 while being 5.8e-5 off on its smallest components (a
    millionth of the largest), so rows that pass against forward sensitivities were
    published ``unjudged``. The reference's estimate must cover its distance from an
    independent tighter gradient (the quadrature adjoint at rtol 1e-13, another method),
    and be small enough to judge a pass."""
    from sciml_bench.problem.adjoint import adjoint_gradient
    from sciml_bench.problem.gradient_measures import judged_scale, norm_error
    from sciml_bench.problem.loss import loss_arrays

    p = spec.at_size(spec.load("nonstiff-node-width"), 10)
    ref = reference.get(p, cache=tmp_path)
    assert ref.gradient_check == "full" and len(ref.gradient) == p.n_params == 52
    arrays = loss_arrays(p, np.asarray(ref.observations))
    _, independent = adjoint_gradient(p, arrays, 1e-13, 1e-17, "DOP853")
    scale = judged_scale(p.theta0, p.log_params)
    true_error = norm_error(np.asarray(ref.gradient) * scale, independent * scale)
    assert true_error <= max(ref.reference_error, 1e-12)
    assert ref.reference_error < metrics.JUDGE_MARGIN * metrics.PASS_TOL
    # a row 5e-5 off (norm-wise) is judged a pass, not unjudged
    off = np.asarray(ref.gradient) * (1 + 5e-5 * np.sign(np.arange(52) % 2 - 0.5))
    e = metrics.gradient_error(off, np.asarray(ref.gradient), np.asarray(p.theta0),
                               np.asarray(p.log_params))["rel"]  # fmt: skip
    assert metrics.gradient_tier(e, ref.reference_error) == "pass"
