"""The versions of what ran: a CVODES/diffsol-only run names casadi's and pydiffsol's
versions in its environment, and each row names the BLAS its worker had loaded."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from sciml_bench.results import store as results


@pytest.mark.slow
def test_a_compiled_only_run_records_its_library_versions_and_blas(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "run", "stiff-robertson", "--quick",
         "-b", "cvodes", "-b", "diffsol", "--json", "--out", str(tmp_path), "--threads", "2"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = tmp_path.glob("*.h5")
    run = results.read(path)
    packages = run.environment["packages"]
    assert packages["casadi"] == metadata.version("casadi")
    assert packages["pydiffsol"] == metadata.version("pydiffsol")
    rows = [x for x in run.records if x.get("kind") == "ode"]
    assert sorted(x["backend"] for x in rows) == ["cvodes", "diffsol"]
    for row in rows:
        assert row["status"] == "ok", row["reason"]
        blas = row["blas"]
        # the worker loaded NumPy, hence its BLAS (OpenBLAS in the wheels): listed by API
        assert "error" not in blas, blas["error"]
        assert blas["threadpoolctl"] == metadata.version("threadpoolctl")
        apis = {lib["user_api"] for lib in blas["libraries"]}
        assert "blas" in apis, blas
        assert all(lib["num_threads"] >= 1 for lib in blas["libraries"])
