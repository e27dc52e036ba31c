"""The ``[ensemble]`` section: validation with one-line errors, and members drawn
once, deterministically and prefix-stably."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sciml_bench.problem import spec

DATA = Path(__file__).parent / "data"
BASE = """
name = "e"
stiff = false
[state]
names = ["x", "y"]
initial = [1.0, 2.0]
[parameters]
a = 1.5
s = { value = -0.5, log = false }
[equations]
x = "a*x"
y = "s*y"
[time]
span = [0.0, 1.0]
save = { linspace = [0.5, 1.0, 2] }
[loss]
kind = "final"
weights = [1.0, 1.0]
"""


def _load(section: str) -> spec.Problem:
    return spec.loads(BASE + section, "e.toml")


def test_the_lorenz_ensemble_draws_as_declared() -> None:
    p = spec.load("ensemble-lorenz")
    ens = p.ensemble
    assert ens is not None and ens.sizes == (1, 16, 256, 4096, 65536)
    Y0, TH = ens.members(np.asarray(p.y0), np.asarray(p.theta0), 4096)
    assert np.all(Y0 == [1.0, 0.0, 0.0])  # only parameters vary
    ratio = TH / np.asarray(p.theta0)
    assert np.all((ratio >= 0) & (ratio < 1))
    assert abs(ratio.mean() - 0.5) < 0.02  # U(0, 1)
    # the three parameters draw from independent streams
    assert abs(np.corrcoef(ratio.T)[0, 1]) < 0.1


def test_members_are_prefix_stable_and_seeded() -> None:
    p = _load('[ensemble]\nsizes = [2, 64]\nseed = 3\n[ensemble.vary]\n'
              'x = { normal = [0.0, 0.1], apply = "shift" }\na = { uniform = [0.5, 2.0] }\n')
    ens = p.ensemble
    assert ens is not None
    y_small, t_small = ens.members(np.asarray(p.y0), np.asarray(p.theta0), 5)
    y_big, t_big = ens.members(np.asarray(p.y0), np.asarray(p.theta0), 64)
    np.testing.assert_array_equal(y_small, y_big[:5])
    np.testing.assert_array_equal(t_small, t_big[:5])
    assert np.all(y_big[:, 1] == 2.0) and np.all(t_big[:, 1] == -0.5)  # undeclared: nominal
    assert np.std(y_big[:, 0] - 1.0) == pytest.approx(0.1, rel=0.35)  # shift by N(0, 0.1)
    assert np.all((t_big[:, 0] >= 0.75) & (t_big[:, 0] < 3.0))  # 1.5 × U(0.5, 2)
    other = spec.loads(
        BASE + '[ensemble]\nsizes = [2]\nseed = 4\n[ensemble.vary]\na = { uniform = [0.5, 2.0] }\n'
    ).ensemble
    assert other is not None
    assert not np.array_equal(other.draws(5), ens.draws(5)[:, 1:])


@pytest.mark.parametrize(
    ("section", "key", "message"),
    [
        ("[ensemble]\nsizes = []\n[ensemble.vary]\nx = { normal = [0, 1], apply = 'shift' }",
         "ensemble.sizes", "non-empty"),
        ("[ensemble]\nsizes = [16, 4]\n[ensemble.vary]\nx = { normal = [0, 1], apply = 'shift' }",
         "ensemble.sizes", "strictly increasing"),
        ("[ensemble]\nsizes = [0]\n[ensemble.vary]\nx = { normal = [0, 1], apply = 'shift' }",
         "ensemble.sizes[0]", "expected an integer in"),
        ("[ensemble]\nsizes = [4]\n[ensemble.vary]\nq = { normal = [0, 1] }",
         "ensemble.vary.q", "not a state or named parameter"),
        ("[ensemble]\nsizes = [4]\n[ensemble.vary]\nx = { gamma = [1, 1] }",
         "ensemble.vary.x", "unknown key(s) ['gamma']"),
        ("[ensemble]\nsizes = [4]\n[ensemble.vary]\nx = { apply = 'shift' }",
         "ensemble.vary.x", "exactly one distribution"),
        ("[ensemble]\nsizes = [4]\n[ensemble.vary]\nx = { uniform = [1.0] }",
         "ensemble.vary.x.uniform", "expected 2 values, got 1"),
        ("[ensemble]\nsizes = [4]\n[ensemble.vary]\nx = { uniform = [2.0, 1.0] }",
         "ensemble.vary.x.uniform", "low < high"),
        ("[ensemble]\nsizes = [4]\n[ensemble.vary]\nx = { normal = [0.0, -1.0] }",
         "ensemble.vary.x.normal", ">= 0"),
        ("[ensemble]\nsizes = [4]\n[ensemble.vary]\nx = { normal = [0, 1], apply = 'add' }",
         "ensemble.vary.x.apply", "use one of scale, shift"),
        ("[ensemble]\nsizes = [4]\n[ensemble.vary]\na = { normal = [1.0, 0.1] }",
         "ensemble.vary.a", "log space"),
        ("[ensemble]\nsizes = [4]\nsemantics = ['vmap']\n[ensemble.vary]\nx = { normal = [0, 1] }",
         "ensemble.semantics", "independent, coupled"),
        ("[ensemble]\nsizes = [4]\nsize = 3\n[ensemble.vary]\nx = { normal = [0, 1] }",
         "ensemble.size", "unknown key"),
        ("[ensemble]\nsizes = [4]\n", "ensemble.vary", "missing"),
    ],
)
def test_a_bad_ensemble_is_a_one_line_error_naming_the_key(
    section: str, key: str, message: str
) -> None:
    with pytest.raises(spec.ProblemError) as err:
        _load(section)
    assert err.value.key == key, str(err.value)
    assert message in err.value.reason, str(err.value)
    assert "\n" not in str(err.value)


def test_scaling_a_value_of_zero_is_refused() -> None:
    # 0 · ξ is 0 for every member: an ensemble of identical members, silently
    text = BASE.replace("initial = [1.0, 2.0]", "initial = [0.0, 2.0]")
    section = "[ensemble]\nsizes = [4]\n[ensemble.vary]\nx = { uniform = [0.5, 1.5] }"
    with pytest.raises(spec.ProblemError) as err:
        spec.loads(text + section)
    assert err.value.key == "ensemble.vary.x.apply" and 'apply = "shift"' in err.value.reason
    shifted = spec.loads(text + section.replace("1.5] }", "1.5], apply = 'shift' }")).ensemble
    assert shifted is not None and shifted.variations[0].apply == "shift"


def test_a_problem_without_an_ensemble_has_none() -> None:
    assert _load("").ensemble is None
    assert spec.load("stiff-robertson").ensemble is None
