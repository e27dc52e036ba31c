"""Per-element parameters drawn at random (``sciml_bench.problem.parameter_arrays``) and
the problem that ladders its parameter count, ``stiff-robertson-rates`` (P = 3n)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from sciml_bench import backends
from sciml_bench.backends.base import CaseOptions
from sciml_bench.measure import metrics
from sciml_bench.problem import codegen, parameter_arrays, reference, spec
from sciml_bench.problem.spec import ProblemError

RATES = "stiff-robertson-rates"
AROUND = {"k1": 0.04, "k2": 3.0e7, "k3": 1.0e4}


def test_the_draw_is_seeded_loguniform_within_20_percent_and_nested() -> None:
    a = parameter_arrays.draw("loguniform", 0.04, 0.2, 1, "k1", 10_000)
    assert np.array_equal(a, parameter_arrays.draw("loguniform", 0.04, 0.2, 1, "k1", 10_000))
    assert np.all((a >= 0.04 * 0.8) & (a <= 0.04 * 1.2))
    assert np.unique(a).size == a.size  # no two groups equal
    # uniform in log space: each tenth of [log 0.8a, log 1.2a] holds about a tenth
    u = (np.log(a) - np.log(0.032)) / (np.log(0.048) - np.log(0.032))
    counts = np.histogram(u, bins=10, range=(0, 1))[0]
    assert np.all(np.abs(counts - 1000) < 130), counts  # 4 sigma of a binomial(10^4, 0.1)
    lin = parameter_arrays.draw("uniform", 0.04, 0.2, 1, "k1", 10_000)
    assert abs(np.mean(lin) - 0.04) < 2e-4 and abs(np.mean(a) - 0.04) > abs(np.mean(lin) - 0.04)
    # a smaller rung holds the first groups of a larger one; another seed or name differs
    assert np.array_equal(parameter_arrays.draw("loguniform", 0.04, 0.2, 1, "k1", 10), a[:10])
    other = parameter_arrays.draw("loguniform", 0.04, 0.2, 2, "k1", 10)
    twin = parameter_arrays.draw("loguniform", 0.04, 0.2, 1, "k2", 10)
    assert not np.allclose(other, a[:10]) and not np.allclose(twin, a[:10])


def test_the_rates_problem_has_three_parameters_per_group() -> None:
    base = spec.load(RATES)
    assert base.array is not None and base.array.ladder == (1, 10, 100, 1000, 10000)
    p = spec.at_size(base, 4)
    assert p.n_params == 12 and p.n_state == 12 and p.array.n_params == 12
    assert p.param_names[:5] == ("k1[0]", "k1[1]", "k1[2]", "k1[3]", "k2[0]")
    theta = np.asarray(p.theta0).reshape(3, 4)
    for row, (name, a) in zip(theta, AROUND.items(), strict=True):
        assert np.array_equal(row, parameter_arrays.draw("loguniform", a, 0.2, 1, name, 4))
    # the same seed for k1, k2, k3, yet independent draws (the name is in the stream)
    rel = theta / np.array(list(AROUND.values()))[:, None]
    assert not np.allclose(rel[0], rel[1]) and not np.allclose(rel[1], rel[2])
    assert all(p.log_params)  # differentiated in log space
    assert p.loss.truth == (0.05,) * 4 + (2.5e7,) * 4 + (1.2e4,) * 4
    # the draw is in the content, so the reference's cache key changes with it
    assert spec.at_size(base, 4).content_hash == p.content_hash
    assert spec.at_size(base, 5).content_hash != p.content_hash


_BAD = [
    ('draw = "normal"', "parameters.k1.draw", "unknown draw 'normal' (use loguniform, uniform)"),
    ("spread = 0.0", "parameters.k1.spread", "in (0, 1), e.g. 0.2 for ±20 %, got 0"),
    ("spread = 1.5", "parameters.k1.spread", "got 1.5"),
    ("around = -0.04", "parameters.k1.around", "expected a positive number"),
    ("seed = -1", "parameters.k1.seed", "expected an integer in [0, 4294967295]"),
    ("sigma = 0.1", "parameters.k1", "unknown key(s) ['sigma'] in a drawn parameter"),
    ('around = "0.04"', "parameters.k1.around", "expected a number, got str"),
]


@pytest.mark.parametrize(("change", "key", "message"), _BAD)
def test_a_bad_draw_is_one_error_naming_the_key(change: str, key: str, message: str) -> None:
    text = (spec.problems_dir() / f"{RATES}.toml").read_text()
    line = 'k1 = { draw = "loguniform", around = 0.04, spread = 0.2, seed = 1 }'
    assert line in text
    field = change.split(" = ")[0]
    if f"{field} = " in line:
        bad = re.sub(rf"{field} = [^,}}]+", change, line)
    else:
        bad = line.replace(" }", f", {change} }}")
    with pytest.raises(ProblemError) as e:
        spec.loads(text.replace(line, bad), "rates.toml")
    assert f"[{key}]" in str(e.value) and message in str(e.value), str(e.value)


def _complex_step(f, x: np.ndarray, scale: np.ndarray) -> np.ndarray:  # noqa: ANN001
    """∂f/∂x by the complex step (exact to rounding: no cancellation, unlike central
    differences on ROBER, whose terms span eleven decades)."""
    cols = []
    for k in range(x.size):
        z = x.astype(complex)
        z[k] += 1e-30j * scale[k]
        cols.append(np.imag(f(z)) / (1e-30 * scale[k]))
    return np.stack(cols, axis=1)


def test_generated_rhs_and_parameter_jacobian_match_differences_at_n3() -> None:
    p = spec.at_size(spec.load(RATES), 3)
    mod = codegen.load_python(codegen.generate(p, "numpy"))
    theta = np.asarray(p.theta0)
    y = np.array([0.9, 3e-5, 0.1, 0.7, 2e-5, 0.3, 0.5, 1e-5, 0.5])
    # the right-hand side, group g with its own rates
    k1, k2, k3 = theta.reshape(3, 3)
    y1, y2, y3 = y.reshape(3, 3).T
    want = np.stack([-k1 * y1 + k3 * y2 * y3, k1 * y1 - k2 * y2**2 - k3 * y2 * y3, k2 * y2**2])
    assert np.allclose(mod["rhs"](0.0, y, theta), want.T.ravel(), rtol=1e-14, atol=0)
    jp = mod["jac_p_sparse"](0.0, y, theta).toarray()
    assert np.allclose(jp, _complex_step(lambda z: mod["rhs"](0.0, y, z), theta, theta),
                       rtol=1e-12, atol=1e-300)  # fmt: skip
    # central differences too (in log space, where the terms are balanced at this y)
    h = 1e-6
    fd = np.stack([(mod["rhs"](0.0, y, theta * np.exp(h * e)) - mod["rhs"](0.0, y, theta * np.exp(-h * e)))
                   / (2 * h * theta[k]) for k, e in enumerate(np.eye(9))], axis=1)  # fmt: skip
    assert np.allclose(jp, fd, rtol=1e-6, atol=1e-9 * np.abs(jp).max())
    # sparse: group g's states depend on group g's rates only, 6 blocks of n entries
    sp = mod["jac_p_sparse"](0.0, y, theta)
    assert sp.shape == (9, 9) and sp.nnz == 18 and np.array_equal(sp.toarray(), jp)
    groups = {(int(r) // 3, int(c) % 3) for r, c in zip(*np.nonzero(jp), strict=True)}
    assert groups == {(g, g) for g in range(3)}


def test_parameter_jacobian_stays_sparse_at_ten_thousand_groups() -> None:
    p = spec.at_size(spec.load(RATES), 10_000)
    mod = codegen.load_python(codegen.generate(p, "numpy"))
    y = np.tile([0.9, 3e-5, 0.1], 10_000)
    sp = mod["jac_p_sparse"](0.0, y, np.asarray(p.theta0))
    assert sp.shape == (30_000, 30_000) and sp.nnz == 6 * 10_000


@pytest.fixture(scope="module")
def rates_at_two() -> tuple[object, reference.Reference]:
    p = spec.at_size(spec.load(RATES), 2)
    ref = reference.get(p)
    return reference.compile_problem(p, ref), ref


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cvodes", "diffsol"])
def test_a_real_run_at_two_groups_agrees_with_the_reference(rates_at_two, name: str) -> None:
    problem, ref = rates_at_two
    b = backends.get(name)
    if not b.availability().ok:
        pytest.skip(f"{name} is not installed")
    options = CaseOptions(b.default_solver(True), b.default_gradient(problem), problem.rtol,
                          problem.atol, problem.max_steps)  # fmt: skip
    case = b.build(problem, options)
    sol = case.solve(problem.theta0)
    assert metrics.solution_error(sol.y, np.asarray(ref.y))["rel_l2"] < 1e-4
    loss, grad = case.loss_and_grad(problem.theta0)
    assert len(grad) == 6 and loss == pytest.approx(ref.loss, rel=1e-3)
    err = metrics.gradient_error(grad, np.asarray(ref.gradient), problem.theta0, problem.log_params)
    assert err["rel"] < 1e-2 and err["cosine"] > 0.9999, err
