"""The HDF5 results file: round trip, atomic rewrites, foreign files."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from sciml_bench.results import store as results


def _record(i: int) -> dict:
    return {
        "kind": "ode", "problem": "p", "backend": f"b{i}", "solver": "s", "gradient_method": "g",
        "status": "ok", "reason": "", "rtol": 1e-6, "steps": 12,
        "solve_samples": [0.1, 0.2, 0.3], "grad_samples": [], "ttfg_samples": [1.0],
        "phases": np.ones((1, 4)), "gradient": {"k1": 1.5, "k2": -2.0}, "options": {},
    }


def test_round_trip(tmp_path: Path) -> None:
    path = results.new_path(tmp_path, "p")
    w = results.ResultsWriter(path, {"python": "3.11", "packages": {"numpy": "2"}}, "cmd")
    w.add(_record(0))
    assert results.read(path).meta["status"] == "running"
    w.add(_record(1))
    w.finish("complete")
    run = results.read(path)
    assert run.meta["status"] == "complete" and run.meta["command"] == "cmd"
    assert run.environment["packages"] == {"numpy": "2"}
    r = run.records[1]
    assert r["backend"] == "b1" and r["steps"] == 12 and r["gradient"] == {"k1": 1.5, "k2": -2.0}
    assert r["solve_samples"] == [0.1, 0.2, 0.3]
    assert r["solve_s"] == pytest.approx(0.2)
    assert r["solve_iqr"] == pytest.approx((0.15, 0.25))
    assert r["grad_s"] is None
    assert not list(tmp_path.glob(".*.tmp"))


def test_unique_names(tmp_path: Path) -> None:
    assert len({results.new_path(tmp_path, "x") for _ in range(50)}) == 50


def test_foreign_and_malformed_files(tmp_path: Path) -> None:
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"\x00garbage" * 100)
    with pytest.raises(results.ResultsError, match="not an HDF5 file"):
        results.read(junk)
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = [1, 2, 3]
    with pytest.raises(results.ResultsError, match="not a sciml-bench results file"):
        results.read(foreign)
    with pytest.raises(results.ResultsError, match="no such file"):
        results.read(tmp_path / "missing.h5")
