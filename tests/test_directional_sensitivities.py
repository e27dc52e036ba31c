"""The reference's forward sensitivities along directions (many parameters, many states).

Above ``CS_MAX_STATES`` states an array problem's reference gradient is forward
sensitivities; past ``FULL_FD_MAX_PARAMS`` parameters it solves one sensitivity column per
seeded direction instead of one per parameter (8 columns, not 3,000, at P = 3,000). These
pin the derivatives along directions to the full gradient's projection, and the reference
built that way to the directional finite differences it replaces.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sciml_bench.problem import reference, spec
from sciml_bench.problem.loss import loss_arrays
from sciml_bench.problem.sensitivity import array_directional, array_gradient

RATES = "stiff-robertson-rates"


def test_derivatives_along_directions_are_the_full_gradients_projections() -> None:
    p = spec.at_size(spec.load(RATES), 3)  # 9 states, P = 9
    # any observations serve: the identity d_k = g·w_k holds for every loss of the form
    arrays = loss_arrays(p, np.full((len(p.t_save), p.n_state), 0.3))
    theta = np.asarray(p.theta0)
    units = reference._directions(p.n_params, p.content_hash)
    w = reference.natural_directions(theta, units, np.asarray(p.log_params))
    value, g = array_gradient(p, arrays, 1e-9, 1e-13, "BDF")
    value_d, d = array_directional(p, arrays, 1e-9, 1e-13, "BDF", w)
    projected = np.array([g @ wk for wk in w])
    assert value_d == pytest.approx(value, rel=1e-12)
    # the two are one sensitivity system solved at rtol 1e-9 (measured 9e-9 apart): their
    # own accuracy, 1e-6 of the largest projection, is what they must agree to
    accuracy = 1e-6 * np.max(np.abs(projected))
    assert np.max(np.abs(d - projected)) <= accuracy
    # and a wrong gradient does not project onto them: the first three rates scaled by
    # 1.01 move each projection by exactly 0.01 (g[:3] · w_k[:3]), which the directional
    # derivatives resolve to their accuracy, some 3,000 times that accuracy here
    wrong = g.copy()
    wrong[:3] *= 1.01
    shift = np.array([0.01 * g[:3] @ wk[:3] for wk in w])
    assert np.max(np.abs(shift)) > 100 * accuracy
    np.testing.assert_allclose([wrong @ wk for wk in w] - d, shift, rtol=0, atol=accuracy)


@pytest.mark.slow
def test_a_reference_with_many_states_and_parameters_is_full_and_checked_on_directions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the thresholds lowered so that 9 states and P = 9 take the large-problem paths: the
    # adjoint for the full gradient, its projections checked by directional FD and then
    # (above CS_MAX_STATES) by directional forward sensitivities
    from sciml_bench.problem import reference_gradient

    p = spec.at_size(spec.load(RATES), 3)
    monkeypatch.setattr(reference, "FULL_FD_MAX_PARAMS", 4)
    monkeypatch.setattr(reference, "CS_MAX_PARAMS", 4)
    monkeypatch.setattr(reference_gradient, "FORWARD_MAX_UNKNOWNS", 10)
    monkeypatch.setattr(reference_gradient, "FORWARD_MAX_PARAMS", 4)
    monkeypatch.setattr(reference, "FORWARD_MAX_PARAMS", 4)
    # the two builds differ in their cross-check alone: the second is served the first's
    # full gradient (an adjoint pair of about 10 s) instead of solving it again
    served: dict[tuple, Any] = {}
    solve = reference.full_gradient

    def once(problem: Any, arrays: Any, rtol: float, atol: float, method: str) -> Any:
        key = (rtol, atol, method)
        if key not in served:
            served[key] = solve(problem, arrays, rtol, atol, method)
        return served[key]

    monkeypatch.setattr(reference, "full_gradient", once)
    fd = reference.build(p)
    monkeypatch.setattr(reference, "CS_MAX_STATES", 5)
    sens = reference.build(p)
    assert len(served) == 1
    for ref in (fd, sens):  # every component, whatever checks it
        assert ref.gradient_check == "full" and len(ref.gradient) == p.n_params
        assert ref.gradient_method.startswith("adjoint")
    assert fd.cross_check.startswith(f"{reference.N_DIRECTIONS}-direction central")
    assert sens.cross_check.startswith(f"{reference.N_DIRECTIONS}-direction forward")
    assert np.allclose(sens.directions, fd.directions, rtol=0, atol=0)
    d_sens, d_fd = np.asarray(sens.directional_derivatives), np.asarray(fd.directional_derivatives)
    # directional FD at h = 1e-4 and h/2 extrapolated: measured 3e-9 from the sensitivities
    assert np.linalg.norm(d_sens - d_fd) <= 1e-6 * np.linalg.norm(d_sens)
    # the adjoint's projections agree with both to its own accuracy (rtol 1e-12)
    assert fd.cross_check_agreement < 1e-6 and sens.cross_check_agreement < 1e-6
    assert sens.reference_error is not None and sens.reference_error < 1e-6
