"""A network's width as a size (``layers = [2, "width", 2]``, problem/network_width.py):
the parameter count per rung, the w = 50 rung as the spiral weight for weight, one-line
errors for malformed files and --sizes values, the forecast on P, and a tiny ladder of
widths in real workers with gradient tiers."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sciml_bench.problem import codegen, reference, spec
from sciml_bench.results import growth, store
from sciml_bench.run import forecast, runner
from sciml_bench.run.options import RunError
from sciml_bench.run.sizes import parse_sizes

ROOT = Path(__file__).resolve().parent.parent
WIDTH = ROOT / "problems" / "nonstiff-node-width.toml"


def _data() -> dict[str, Any]:
    return tomllib.loads(WIDTH.read_text())


def _error(data: dict[str, Any]) -> spec.ProblemError:
    with pytest.raises(spec.ProblemError) as e:
        spec.from_dict(data, "w.toml")
    return e.value


def test_each_rung_has_5w_plus_2_parameters_and_its_own_cache_key() -> None:
    p = spec.load("nonstiff-node-width")
    w = p.network_width
    assert w is not None and p.laddered is w and p.array is None
    assert (w.size, w.ladder) == (50, (10, 50, 200, 1000, 2000))
    assert w.formula == "5·width + 2" and w.n_params(2000) == 10_002
    assert w.ladder_text((10, 2000)) == "width = 10 (52 parameters), 2000 (10,002)"
    hashes = set()
    for width in (4, 8, 2000):
        at = spec.at_size(p, width)
        assert at.n_params == 5 * width + 2 == w.n_params(width) and at.n_state == 2
        assert at.networks[0].layers == (2, width, 2) and at.network_width.size == width
        assert at.content["sizes"]["width"]["default"] == width
        hashes.add(at.content_hash)
    assert len(hashes) == 3  # each width its own reference


def test_the_width_50_rung_is_the_spiral_weight_for_weight() -> None:
    """Same seeded weights, names, equations and loss; the same generated right-hand side."""
    p, s = spec.load("nonstiff-node-width"), spec.load("nonstiff-spiral-node")
    assert p.theta0 == s.theta0 and p.param_names == s.param_names
    assert p.rhs == s.rhs and p.loss == s.loss and p.t_save == s.t_save
    assert (p.rtol, p.atol, p.stiff) == (s.rtol, s.atol, s.stiff)
    f_p = codegen.load_python(codegen.generate(p, "numpy"))["rhs"]
    f_s = codegen.load_python(codegen.generate(s, "numpy"))["rhs"]
    y, theta = np.array([0.7, -1.1]), np.asarray(s.theta0) * 1.3
    assert np.array_equal(f_p(0.2, y, theta), f_s(0.2, y, theta))
    # a smaller rung draws its own Glorot weights (the bound depends on the width)
    assert spec.at_size(p, 10).theta0[:20] != s.theta0[:20]


@pytest.mark.parametrize(("change", "key", "words"), [
    (lambda d: d["networks"]["nn"].update(layers=[2, "wdith", 2]), "networks.nn.layers[1]",
     "'wdith' is not a size (declared: width)"),
    (lambda d: d["sizes"].update(depth=3), "sizes.depth", "no network's layers use 'depth'"),
    (lambda d: d.pop("sizes"), "networks.nn.layers[1]", "the file has no [sizes]; declare it"),
    (lambda d: d["sizes"].update(width={"default": 5000}), "sizes.width",
     "width = 5000 gives networks.nn layers [2, 5000, 2], and a layer has 1 to 4096 units"),
    (lambda d: d["sizes"].update(width={"default": 50, "ladder": [50, 10]}),
     "sizes.width.ladder", "strictly increasing"),
    (lambda d: d.update(ensemble={"sizes": [1, 2]}), "ensemble", "drop [ensemble]"),
    (lambda d: d["state"].update(shape="width"), "state.shape", "an array problem"),
    (lambda d: (d.pop("sizes"), d["networks"]["nn"].update(layers=[2, 50.5, 2])),
     "networks.nn.layers",
     'or the name of a size in [sizes] (e.g. [2, "width", 2])'),
])  # fmt: skip
def test_a_malformed_width_names_the_key_and_the_fix(change: Any, key: str, words: str) -> None:
    data = _data()
    change(data)
    e = _error(data)
    assert e.key == key and words in e.reason, str(e)
    assert "\n" not in str(e)


def test_sizes_typed_as_parameter_counts_get_the_width_that_gives_them() -> None:
    p = spec.load("nonstiff-node-width")
    assert parse_sizes("4,8", [p]) == [4, 8]
    with pytest.raises(RunError) as e:
        parse_sizes("10,10002", [p])
    assert "--sizes 10002: width = 10002 gives networks.nn layers [2, 10002, 2]" in str(e.value)
    assert "did you mean width = 2000 (10,002 parameters)?" in str(e.value)
    with pytest.raises(RunError) as e:
        parse_sizes("10,5", [p])
    assert "values of width (the hidden width of network nn (P = 5·width + 2" in str(e.value)


def test_the_forecast_of_a_width_grows_with_p_and_says_parameters() -> None:
    rows = [{"status": "ok", "n_params": n, "n_state": 2, "solve_samples": [t], "grad_samples": [t]}
            for n, t in ((52, 0.01), (252, 0.05))]  # fmt: skip
    f = forecast.least_seconds(rows, 10_002, "n_params")
    assert f is not None and f.calls["grad"][1] == pytest.approx(np.log(5) / np.log(252 / 52))
    assert "at 10002 parameters" in f.reason(1.0) and "at 52 and 252 parameters" in f.reason(1.0)
    assert forecast.least_seconds(rows, 2) is None  # on states, no rung is smaller


@pytest.mark.slow
def test_a_ladder_of_widths_runs_in_real_workers(tmp_path: Path) -> None:
    """Widths 13 and 16 on CVODES, forward and adjoint: each rung a row with its size, P and
    a gradient tier against the full reference (forward sensitivities, every component);
    the states do not grow."""
    pytest.importorskip("casadi")
    problem = spec.load("nonstiff-node-width")
    first = spec.at_size(problem, 13)
    compiled = reference.compile_problem(first, None, np.zeros((len(first.t_save), 2)))
    ladders = runner.plan_sized(compiled, ["cvodes"], [13, 16], gradients=["forward", "adjoint"])
    assert [(lad.case.solver, lad.case.gradient_method, lad.jacobian) for lad in ladders] == [
        ("Adams", "forward", "none"), ("Adams", "adjoint", "none")]  # fmt: skip
    writer = store.ResultsWriter(tmp_path / "r.h5", {}, "test")
    settings = runner.Settings(cold=1, repeats=3, budget_s=60.0, steady_budget_s=0.5)
    rows = runner.run_sized(problem, ladders, writer, settings, progress=lambda m: None)
    assert [(r["gradient_method"], r["size"], r["n_params"]) for r in rows] == [
        ("forward", 13, 67), ("forward", 16, 82), ("adjoint", 13, 67), ("adjoint", 16, 82)]
    for r in rows:
        assert r["status"] == "ok", r.get("reason")
        assert r["gradient_check"] == "full" and r["gradient_tier"] in ("pass", "warn")
        assert r["gradient_error"] < 1e-2 and r["n_state"] == 2
    assert growth.grows_states(rows) == []  # the states do not grow: no exponent in n


def test_growth_in_states_leaves_out_a_width_ladder() -> None:
    """A width's rungs share one state count: no 'p in states' line for it (gradient_scaling
    reads it against P); an array ladder beside it keeps its exponent."""
    def row(size: int, n_state: int, jac: str, t: float) -> dict[str, Any]:
        return {"kind": "ode", "status": "ok", "backend": "b", "solver": "S", "jacobian": jac,
                "gradient_method": "g", "size": size, "n_state": n_state, "solve_s": t,
                "device": "cpu"}  # fmt: skip

    width = [row(10, 2, "none", 1e-3), row(50, 2, "none", 2e-3)]
    array = [row(1, 3, "sparse", 1e-3), row(10, 30, "sparse", 1e-2)]
    assert growth.grows_states(width + array) == array
    assert growth.growth_texts(width + array) == ["b S g sparse: solve p = 1.00 (3→30 states)"]


def test_a_network_without_layers_beside_a_width_is_a_one_line_error() -> None:
    """The fuzz once found a KeyError here: a second network with no `layers` in a file
    whose widths are sizes."""
    data = tomllib.loads((ROOT / "problems" / "nonstiff-node-width.toml").read_text())
    data["networks"]["bogus"] = {"activation": "tanh"}
    with pytest.raises(spec.ProblemError, match=r"networks\.bogus\.layers.*needs its layers"):
        spec.from_dict(data)
