"""The quadrature-adjoint cross-check of a large array problem's reference gradient.

Above ``CS_MAX_STATES`` states no difference quotient checks an array problem's reference,
which is forward sensitivities at any size for P ≤ 16; the suite's own quadrature adjoint
at the reference's rtol does (about two solves, whatever P), and its disagreement counts
in the reference's error estimate. Real solves, the threshold lowered so that the
large-problem path runs: the 1-D heat equation at 20 points (a reference in seconds) in
the fast tier, ROBER's groups at 4 groups (12 states, the ladder the check was built for)
in the slow one.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from sciml_bench.problem import reference, reference_gradient, spec

HEAT = Path(__file__).parent / "data" / "heat-1d.toml"
GROUPS = "stiff-robertson-groups"


def heat_text() -> str:
    """heat-1d at 20 points with its reference at rtol 1e-9, as a problem file."""
    text = HEAT.read_text().replace("default = 4,", "default = 20,")
    return text + "\n[reference]\nrtol = 1.0e-9\n"


@pytest.fixture
def large(monkeypatch: pytest.MonkeyPatch) -> spec.Problem:
    """heat-1d at 20 states, above a lowered ``CS_MAX_STATES`` (the complex-step and
    finite-difference checks' bound): the path a 30,000-state reference takes."""
    monkeypatch.setattr(reference, "CS_MAX_STATES", 10)
    p = spec.from_dict(tomllib.loads(heat_text()))
    assert p.n_state == 20 > reference.CS_MAX_STATES and p.n_params == 2
    return p


def biased_forward(problem: spec.Problem, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference's forward sensitivities with their largest judged component 0.1 %
    too large at both tolerances: a bias both solves share, made through the reference's
    own call of them (``reference_gradient.array_gradient``)."""
    real = reference_gradient.array_gradient

    def biased(*args: object, **kwargs: object) -> tuple[float, np.ndarray]:
        value, g = real(*args, **kwargs)
        g = np.array(g, dtype=float)
        g[int(np.argmax(np.abs(g * np.asarray(problem.theta0))))] *= 1.001
        return value, g

    monkeypatch.setattr(reference_gradient, "array_gradient", biased)


def test_a_correct_reference_agrees_with_the_adjoint(large: spec.Problem) -> None:
    ref = reference.build(large)
    assert ref.gradient_method == "forward sensitivities"
    assert ref.cross_check == reference.ADJOINT_CHECK
    # measured 5e-9 (rtol 1e-9; the tolerance pair 3e-7): the two methods' own accuracy
    assert ref.cross_check_agreement is not None and ref.cross_check_agreement < 1e-7
    assert ref.reference_error == max(ref.tolerance_error, ref.cross_check_agreement)
    assert f"; {reference.ADJOINT_CHECK} cross-check: agrees to" in ref.method
    assert "checked by quadrature-adjoint" in ref.complex_step_skipped


def test_a_bias_both_tolerances_share_is_caught_by_the_adjoint_alone(
    large: spec.Problem, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tolerance pair cannot see a bias both solves share (biased_forward); the
    adjoint does, and the estimate is its disagreement."""
    biased_forward(large, monkeypatch)
    ref = reference.build(large)
    assert ref.gradient_method == "forward sensitivities"
    assert ref.tolerance_error is not None and ref.tolerance_error < 1e-6
    # at least 1e-3 / sqrt(2) of the norm: one of two components 0.1 % off
    assert ref.cross_check_agreement is not None and ref.cross_check_agreement > 5e-4
    assert ref.reference_error == ref.cross_check_agreement


def test_no_adjoint_check_of_an_adjoint_reference(
    large: spec.Problem, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where forward sensitivities fail and the adjoint is the reference, the adjoint would
    check itself: the reference says there is no cross-check, and why."""
    from sciml_bench.problem.sensitivity import SensitivityError

    def fails(*args: object, **kwargs: object) -> None:
        raise SensitivityError("forward sensitivities refused (test)")

    monkeypatch.setattr(reference_gradient, "array_gradient", fails)
    ref = reference.build(large)
    assert ref.gradient_method == "adjoint" and ref.cross_check == ""
    assert "no cross-check above 10 states of a reference made by adjoint" in (
        ref.complex_step_skipped)
    assert ref.reference_error == ref.tolerance_error


def test_the_reference_command_prints_the_adjoint_check(
    large: spec.Problem, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sciml_bench.cli.main import main

    monkeypatch.setenv("SCIML_BENCH_CACHE", str(tmp_path / "cache"))
    (tmp_path / "heat.toml").write_text(heat_text())
    out = CliRunner().invoke(main, ["reference", "--problem-file", str(tmp_path / "heat.toml")])
    assert out.exit_code == 0, out.output
    line = next(ln for ln in out.output.splitlines() if ln.startswith("  quadrature"))
    assert line.startswith(f"  {reference.ADJOINT_CHECK} cross-check: agrees to ")
    assert "counted in the error estimate; its two tolerances agree to " in line


@pytest.mark.slow
def test_rober_groups_reference_is_checked_by_the_adjoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ROBER's groups (stiff, rates 0.04 to 3e7) at 4 groups: the correct reference agrees
    with the adjoint far inside its estimate, the biased one is caught."""
    monkeypatch.setattr(reference, "CS_MAX_STATES", 10)
    p = spec.at_size(spec.load(GROUPS), 4)
    ref = reference.build(p)
    assert ref.gradient_method == "forward sensitivities"
    assert ref.cross_check == reference.ADJOINT_CHECK
    assert ref.cross_check_agreement is not None and ref.cross_check_agreement < 1e-7
    assert ref.reference_error == max(ref.tolerance_error, ref.cross_check_agreement)
    biased_forward(p, monkeypatch)
    bad = reference.build(p)
    assert bad.tolerance_error is not None and bad.tolerance_error < 1e-7
    assert bad.cross_check_agreement is not None and bad.cross_check_agreement > 5e-4
    assert bad.reference_error == bad.cross_check_agreement
