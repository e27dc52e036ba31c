"""SBML export of array problems (sciml_bench/problem/sbml/write_arrays.py): one rate rule
per element, the operators written out as the weighted sums of their matrices' rows.

Each problem is exported, imported again with the SBML importer, and the imported scalar
problem's right-hand side (its generated NumPy) is compared with the array problem's at
random states, then both are solved by the reference's solver. The importer keeps the
SBML ids and their order, which is the array layout ``y[e*S + s]``: no reordering."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("libsbml", reason="python-libsbml is not installed "
                    "(pip install -c constraints.txt -e '.[sbml]')")  # fmt: skip

from sciml_bench.problem import codegen, spec  # noqa: E402
from sciml_bench.problem.generated import not_expressible  # noqa: E402
from sciml_bench.problem.reference import _Solver  # noqa: E402
from sciml_bench.problem.sbml import read, refuse, write  # noqa: E402
from sciml_bench.problem.sbml.write_arrays import MAX_SBML_STATES, sbml_id  # noqa: E402


def _round_trip(problem: spec.Problem, tmp_path: Path) -> spec.Problem:
    path = tmp_path / f"{problem.name}.xml"
    path.write_text(write.text(problem))
    return read.load(path, save_points=list(problem.t_save))


def _same_rhs(array: spec.Problem, scalar: spec.Problem, seed: int = 0) -> None:
    """``f_array(t, y, θ) = f_scalar(t, y, θ)`` at random positive states and times."""
    f_a = codegen.load_python(codegen.generate(array, "numpy"))["rhs"]
    f_s = codegen.load_python(codegen.generate(scalar, "numpy"))["rhs"]
    theta = np.asarray(array.theta0)
    rng = np.random.default_rng(seed)
    for t in (0.5, 2.0, 7.0):
        y = rng.uniform(0.1, 2.0, array.n_state)
        np.testing.assert_allclose(f_s(t, y, theta), f_a(t, y, theta), rtol=1e-12, atol=1e-9)


def _same_solution(array: spec.Problem, scalar: spec.Problem, rtol: float) -> None:
    theta = np.asarray(array.theta0)
    want = _Solver(array, "BDF", 1e-9, 1e-12).solve(theta)
    got = _Solver(scalar, "BDF", 1e-9, 1e-12).solve(theta)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-8)


def _check_names(array: spec.Problem, scalar: spec.Problem) -> None:
    assert list(scalar.state_names) == [sbml_id(n) for n in array.state_names]
    assert list(scalar.param_names) == [sbml_id(n) for n in array.param_names]
    # libsbml writes 15 significant digits: values come back to within an ulp or so
    np.testing.assert_allclose(scalar.y0, array.y0, rtol=1e-14)
    np.testing.assert_allclose(scalar.theta0, array.theta0, rtol=1e-14)


def test_robertson_groups_round_trips(tmp_path: Path) -> None:
    groups = spec.at_size(spec.load("stiff-robertson-groups"), 2)
    scalar = _round_trip(groups, tmp_path)
    assert scalar.state_names[:4] == ("y1_0", "y2_0", "y3_0", "y1_1")
    _check_names(groups, scalar)
    _same_rhs(groups, scalar)
    _same_solution(groups, scalar, rtol=1e-5)


def test_per_element_parameters_are_one_parameter_each(tmp_path: Path) -> None:
    rates = spec.at_size(spec.load("stiff-robertson-rates"), 2)
    scalar = _round_trip(rates, tmp_path)
    assert scalar.param_names[:2] == ("k1_0", "k1_1")
    _check_names(rates, scalar)
    _same_rhs(rates, scalar)


def test_brusselator_periodic_laplacian_round_trips(tmp_path: Path) -> None:
    """N = 5: no grid point lies in the forcing's disc, so every ``step`` folds to 0 and
    the importer (which refuses a switch in time) takes the model."""
    bruss = spec.at_size(spec.load("stiff-brusselator-2d"), 5)
    scalar = _round_trip(bruss, tmp_path)
    assert scalar.state_names[:3] == ("u_0_0", "v_0_0", "u_0_1")
    _check_names(bruss, scalar)
    _same_rhs(bruss, scalar)
    _same_solution(bruss, scalar, rtol=1e-4)


def test_a_switch_in_time_is_a_piecewise() -> None:
    """N = 4: the element (1, 2) lies in the disc; its forcing ``5 step(t - 1.1)`` is
    written ``piecewise(1, t - 1.1 >= 0, 0)``, once."""
    text = write.text(spec.at_size(spec.load("stiff-brusselator-2d"), 4))
    assert text.count("<piecewise>") == 1 and text.count("<rateRule") == 32
    assert not_expressible(text) is None


def test_above_the_cap_export_is_refused_in_one_line() -> None:
    big = spec.at_size(spec.load("stiff-robertson-groups"), MAX_SBML_STATES // 3 + 1)
    with pytest.raises(refuse.SBMLError, match=f"at most {MAX_SBML_STATES} states") as e:
        write.text(big)
    assert "\n" not in str(e.value)
    why = not_expressible(codegen.generate(big, "sbml")) or ""
    assert f"at most {MAX_SBML_STATES} states" in why


OPERATORS_TOML = """
name = "operators-mix"
stiff = false
[sizes]
N = 3
M = 4
[state]
names = ["u", "w"]
shape = ["N", "M"]
initial = ["1 + i + 0.5*j", 0.5]
[parameters]
D = 0.3
c = { value = "1 + 0.1*i*j", per_element = true }
[equations]
u = "D*lap(u, neumann) - c*shift(w, 1, -1, dirichlet) + mean(w, 1)"
w = "D*lap(w, dirichlet) + sum(u) / 12 - c*w"
[time]
span = [0.0, 1.0]
save = { points = [0.5, 1.0] }
[loss]
kind = "fit"
truth = { D = 0.4 }
"""


def test_neumann_dirichlet_shift_sum_and_mean_round_trip(tmp_path: Path) -> None:
    """Every boundary and operator but periodic (above), with a per-element parameter on
    a 3 x 4 grid: the rows of the shared operator matrices are the NumPy target's."""
    mix = spec.loads(OPERATORS_TOML, source="operators-mix.toml")
    scalar = _round_trip(mix, tmp_path)
    _check_names(mix, scalar)
    _same_rhs(mix, scalar)
