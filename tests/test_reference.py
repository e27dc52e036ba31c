"""The tight reference: published values, gradient cross-checks, the cache."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from sciml_bench.problem import reference, spec

ROOT = Path(__file__).resolve().parent.parent


def test_robertson_matches_the_published_ivp_test_set_values() -> None:
    # Hairer & Wanner / the Bari IVP test set (problem ROBER): y(40) and y(1e11).
    data = tomllib.loads((ROOT / "problems" / "stiff-robertson.toml").read_text())
    data["time"] = {"span": [0.0, 1e11], "save": {"points": [40.0, 1e11]}}
    p = spec.from_dict(data)
    solver = reference._Solver(p, "Radau", 1e-12, 1e-20)
    y = solver.solve(np.asarray(p.theta0))
    np.testing.assert_allclose(
        y[0], [0.7158270687193772, 9.185534764557e-06, 0.2841637457458], rtol=1e-9
    )
    np.testing.assert_allclose(
        y[1], [0.2083340149701255e-07, 0.8333360770334713e-13, 0.9999999791665050], rtol=1e-7
    )


@pytest.fixture(scope="module")
def rober_ref() -> reference.Reference:
    return reference.get(spec.load("stiff-robertson"))


def test_fd_gradient_agrees_with_complex_step(rober_ref: reference.Reference) -> None:
    assert rober_ref.complex_step_agreement is not None
    assert rober_ref.complex_step_agreement < 1e-6
    g = np.asarray(rober_ref.gradient)
    assert np.all(np.isfinite(g)) and np.all(g != 0)


def test_gradient_is_not_degenerate_and_loss_positive(rober_ref: reference.Reference) -> None:
    assert rober_ref.loss > 0
    # log-space components are all of a meaningful size (sum(y) would give zeros)
    scaled = np.abs(np.asarray(rober_ref.gradient) * np.asarray([0.04, 3e7, 1e4]))
    assert scaled.min() > 1e-6 * scaled.max()


def test_cache_hit_and_corruption_rebuild(tmp_path: Path) -> None:
    p = spec.load("stiff-robertson")
    first = reference.get(p, cache=tmp_path)
    assert not first.cached
    second = reference.get(p, cache=tmp_path)
    assert second.cached and second.gradient == first.gradient
    (entry,) = tmp_path.glob("*.json")
    text = entry.read_text()
    entry.write_text(text[: len(text) // 2])  # truncated
    with pytest.warns(UserWarning, match="corrupt"):
        third = reference.get(p, cache=tmp_path)
    assert not third.cached
    np.testing.assert_allclose(third.gradient, first.gradient, rtol=1e-10)
    doc = json.loads(entry.read_text())
    doc["reference"]["loss"] *= 2  # a bit flip the checksum must catch
    entry.write_text(json.dumps(doc))
    with pytest.warns(UserWarning, match="checksum"):
        assert not reference.get(p, cache=tmp_path).cached


def test_cli_reference_json(rober_ref: reference.Reference) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "reference", "stiff-robertson", "--json"],
        capture_output=True, text=True, timeout=300, check=True,
    )
    doc = json.loads(r.stdout)
    assert set(doc) >= {"t", "y", "loss", "gradient", "method"}
    assert list(doc["gradient"]) == ["k1", "k2", "k3"]
    assert len(doc["t"]) == 40 and len(doc["y"]) == 40 and len(doc["y"][0]) == 3
    assert doc["gradient"]["k1"] == pytest.approx(rober_ref.gradient[0], rel=1e-12)
    assert "BDF" in doc["method"]
