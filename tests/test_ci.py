"""The CI that proves what this machine cannot: the hosted Julia job is a valid workflow
that installs Julia, sets the project up and runs the Julia tests unskippably; and
``SCIML_BENCH_REQUIRE_JULIA`` / ``SCIML_BENCH_REQUIRE_GPU`` turn those skips into failures."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"


def _steps(job: dict) -> tuple[dict[str, str], list[str]]:
    uses = {s["uses"].split("@")[0]: s["uses"].split("@")[1] for s in job["steps"] if "uses" in s}
    runs = [s["run"] for s in job["steps"] if "run" in s]
    return uses, runs


def test_the_julia_workflow_is_valid_and_complete() -> None:
    yaml = pytest.importorskip("yaml")
    flow = yaml.safe_load((WORKFLOWS / "julia.yml").read_text())
    # YAML 1.1 reads the key `on` as True
    assert set(flow[True]) >= {"push", "pull_request", "workflow_dispatch"}
    (job,) = flow["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    assert job["env"]["SCIML_BENCH_REQUIRE_JULIA"] == "1"
    uses, runs = _steps(job)
    assert uses == {"actions/checkout": "v7", "actions/setup-python": "v7",
                    "julia-actions/setup-julia": "v3", "julia-actions/cache": "v3"}  # fmt: skip
    with_ = {s["uses"].split("@")[0]: s.get("with", {}) for s in job["steps"] if "uses" in s}
    assert with_["actions/setup-python"]["python-version"] == "3.11"
    assert with_["julia-actions/setup-julia"]["version"] == "1.11"  # a string, never 1.1
    order = [next(i for i, r in enumerate(runs) if key in r) for key in (
        'pip install -c constraints.txt -e ".[julia,test]"', "sciml-bench julia setup",
        "pytest tests/test_julia_runtime.py")]  # fmt: skip
    assert order == sorted(order)


_SKIPS = """
import pytest

@pytest.mark.julia
def test_julia():
    pytest.skip("julia executable not found")

@pytest.mark.gpu
@pytest.mark.skipif(True, reason="no NVIDIA GPU visible")
def test_gpu():
    pass

def test_other():
    pytest.skip("not about Julia or a GPU")
"""


@pytest.mark.parametrize(("env", "failed"), [
    ({}, []),
    ({"SCIML_BENCH_REQUIRE_JULIA": "1"}, ["test_julia"]),
    ({"SCIML_BENCH_REQUIRE_GPU": "1"}, ["test_gpu"]),
])  # fmt: skip
def test_require_variables_turn_julia_and_gpu_skips_into_failures(
    tmp_path: Path, env: dict[str, str], failed: list[str]
) -> None:
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_skips.py").write_text(_SKIPS)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SCIML_BENCH_REQUIRE_")}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-o",
         "markers=gpu: a GPU test", str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
        # no third-party plugins: one of them imports torch (seconds) and none is needed
        env={**clean, **env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )  # fmt: skip
    bad = sorted(ln.split("::")[1].split()[0] for ln in r.stdout.splitlines()
                 if ln.startswith(("FAILED", "ERROR")))  # fmt: skip
    assert bad == failed, r.stdout[-2000:]
    assert r.returncode == (1 if failed else 0)
    if failed:
        var = next(iter(env))
        assert f"{var}=1, but this" in r.stdout and "would skip" in r.stdout
