"""The reference's forward sensitivities along directions (many parameters, many states).

Above ``CS_MAX_STATES`` states an array problem's reference gradient is forward
sensitivities; past ``FULL_FD_MAX_PARAMS`` parameters it solves one sensitivity column per
seeded direction instead of one per parameter (8 columns, not 3,000, at P = 3,000). These
pin the derivatives along directions to the full gradient's projection, and the reference
built that way to the directional finite differences it replaces.
"""

from __future__ import annotations

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
    assert np.max(np.abs(d - projected)) <= 1e-6 * np.max(np.abs(projected))
    # and a wrong gradient does not project onto them: every group's k1 scaled by 1.01
    wrong = g.copy()
    wrong[:3] *= 1.01
    assert np.max(np.abs(d - [wrong @ wk for wk in w])) > 1e-5 * np.max(np.abs(projected))


@pytest.mark.slow
def test_a_reference_with_many_states_and_parameters_checks_directions(monkeypatch) -> None:
    # the thresholds lowered so that 9 states and P = 9 take the large-problem paths
    p = spec.at_size(spec.load(RATES), 3)
    monkeypatch.setattr(reference, "FULL_FD_MAX_PARAMS", 4)
    fd = reference.build(p)  # directional central differences (<= CS_MAX_STATES states)
    monkeypatch.setattr(reference, "CS_MAX_STATES", 5)
    sens = reference.build(p)
    assert sens.gradient_check == fd.gradient_check == f"directional {reference.N_DIRECTIONS}"
    assert sens.gradient_method.startswith("forward sensitivities along")
    assert np.allclose(sens.directions, fd.directions, rtol=0, atol=0)
    d_sens, d_fd = np.asarray(sens.directional_derivatives), np.asarray(fd.directional_derivatives)
    assert np.max(np.abs(d_sens - d_fd)) <= 1e-4 * np.max(np.abs(d_sens))
    assert sens.reference_error is not None and sens.reference_error < 1e-5
