"""``benchmarks/gpu_checks.py`` on the CPU: its row checks, its deadline, its refusal.

A GPU session has 30 device minutes and 10-minute calls; these pin down what it relies
on: a step cut at the deadline returns its output (``CUT``, not a hang), and the checks
catch a row that ran somewhere other than where it says.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from sciml_bench.measure.memory import gpu_count
from sciml_bench.results import store

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_checks  # noqa: E402

ENSEMBLE = ROOT / "tests" / "data" / "results-ensemble-lorenz.h5"


@pytest.fixture()
def rows() -> list[dict]:
    return [dict(r) for r in store.read(ENSEMBLE).records]


def test_a_cpu_ladder_is_honest_but_not_a_gpu_pass(rows: list[dict]) -> None:
    assert gpu_checks.row_problems(rows, "ensemble") == ["no ensemble row ran ok on cuda"]


def test_rows_that_ran_elsewhere_or_lack_gpu_memory_are_named(rows: list[dict]) -> None:
    diffrax = next(r for r in rows if r["backend"] == "diffrax" and r["status"] == "ok")
    diffrax["device_requested"] = "cuda"  # asked for the GPU, read back the CPU
    scipy = next(r for r in rows if r["backend"] == "scipy")
    scipy.update(device_requested="cuda", reason="")  # on the CPU without saying so
    torch = next(r for r in rows if r["backend"] == "torchdiffeq" and r["status"] == "ok")
    torch.update(device="cuda", device_requested="cuda", device_name="NVIDIA H100",
                 alloc_peak_mb=None)  # fmt: skip
    bad = gpu_checks.row_problems(rows, "ensemble")
    assert any(b.startswith("ensemble-lorenz diffrax") and b.endswith("ran on cpu") for b in bad)
    assert any("scipy" in b and "without saying so" in b for b in bad)
    assert any("torchdiffeq" in b and "no device-memory peak" in b for b in bad)
    assert "no ensemble row ran ok on cuda" not in bad


def test_the_spread_is_read_from_a_results_file(rows: list[dict]) -> None:
    from ensemble_overhead import spread_lines

    (line,) = spread_lines(rows, "cpu")
    n = max(r["size"] for r in rows if r["status"] == "ok")
    assert line.startswith(f"ensemble-lorenz: at n={n} on cpu, slowest ")
    assert spread_lines(rows, "cuda") == ["ensemble-lorenz: no size where every row completed"]


def test_a_step_past_its_time_is_stopped_and_returns_its_output(tmp_path: Path) -> None:
    s = gpu_checks.Session(tmp_path, deadline_s=300)
    start = time.monotonic()
    rc = s.sh([sys.executable, "-c", "import time; print('first row', flush=True); "
               "time.sleep(120)"], time_s=3)  # fmt: skip
    assert rc is None and s.cut
    assert time.monotonic() - start < 60
    assert "first row" in (tmp_path / "gpu-checks.log").read_text()
    assert s.sh([sys.executable, "-c", "raise SystemExit(3)"]) == 3


@pytest.mark.skipif(gpu_count() > 0, reason="an NVIDIA GPU is visible: gpu_checks would run")
def test_without_a_gpu_it_says_so_in_one_line() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_checks.py"),
                        "--steps", "ode"], capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "gpu_checks: no NVIDIA GPU visible (NVML sees none); run this on the GPU machine"
    ]


def test_unknown_steps_are_refused_with_the_choices() -> None:
    with pytest.raises(SystemExit) as e:
        gpu_checks.main(["--steps", "ode,gpu"])
    assert e.value.code == 2


def test_steps_run_in_the_order_given() -> None:
    # the first step named gets the deadline's time first; a repeat is run once
    assert gpu_checks.steps_arg("train,ode,tests,train") == ["train", "ode", "tests"]


def test_the_ensemble_step_runs_the_gpu_rows_before_the_cpu_rungs(tmp_path: Path) -> None:
    # 2026-11-28: one cpu,cuda run per problem spent the step on SciPy's CPU loop
    cmds = gpu_checks.ensemble_commands(["ensemble-lorenz", "ensemble-spiral-node"],
                                        "1,256", 60.0, tmp_path)  # fmt: skip
    devices = [c[c.index("--device") + 1] for c in cmds]
    assert devices == ["cuda", "cuda", "cpu", "cpu"]
    first = cmds[0]
    named = [first[i + 1] for i, x in enumerate(first) if x == "-b"]
    assert named == list(gpu_checks.ON_GPU) and "scipy" not in named
    assert "-b" not in cmds[2]  # every backend on the CPU, SciPy's reference loop included
