"""``sciml-bench compare F1 ... Fn``: change points over a series of results files.

The files are real results files written with the store API; their samples are seeded
draws with run-to-run drift (±5 % per file) and bimodal samples within a file (15 % of
them preempted, at 1.6x), as the project's machine shows; then one file in about 130
has half its samples slow, and its median is off by 1.3-1.6x.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from sciml_bench.cli.main import main
from sciml_bench.cli.report import register
from sciml_bench.results import series as ser
from sciml_bench.results.series import Timing, fit, potts_l1
from sciml_bench.results.store import ResultsWriter

register(main)

N_FILES = 8
BASE = 0.012  # seconds


def record(solve: np.ndarray, **kw: Any) -> dict[str, Any]:
    """A record with the keys :func:`sciml_bench.run.runner.assemble` writes."""
    rec = {
        "kind": "ode", "problem": "stiff-robertson", "backend": "scipy", "solver": "LSODA",
        "gradient_method": "none", "rtol": 1e-6, "atol": 1e-10, "status": "ok", "reason": "",
        "solve_samples": list(map(float, solve)), "grad_samples": [], "ttfg_samples": [],
        "phase_names": ["import", "build", "first_solve", "first_grad"],
        "phases": [[0.5, 0.2, 0.01, float("nan")]], "solution_error": 1e-6,
        "hardware": "test-cpu", "device": "cpu",
    }  # fmt: skip
    rec.update(kw)
    return rec


def samples(rng: np.random.Generator, level: float, n: int = 12) -> np.ndarray:
    """One file's samples: the run's level drifts ±5 %, samples ±2 % around it, 15 % of
    them preempted at 1.6x (bimodal)."""
    run = level * rng.uniform(0.95, 1.05)
    x = run * rng.uniform(0.98, 1.02, n)
    slow = rng.random(n) < 0.15
    x[slow] *= 1.6
    return x


def levels(steps: dict[int, float]) -> list[float]:
    """The true level of each file (1-based): ``steps[k]`` multiplies files k onwards."""
    out, level = [], BASE
    for i in range(1, N_FILES + 1):
        level *= steps.get(i, 1.0)
        out.append(level)
    return out


def write_series(tmp_path: Path, seed: int = 7) -> list[str]:
    """Eight files; rtol 1e-6 steps 1.3x at file 4, rtol 1e-8 is flat, rtol 1e-4 steps
    1.35x slower at file 3 and 1.4x faster at file 7."""
    rng = np.random.default_rng(seed)
    cases = {1e-6: levels({4: 1.3}), 1e-8: levels({}), 1e-4: levels({3: 1.35, 7: 1 / 1.4})}
    paths = []
    for i in range(N_FILES):
        w = ResultsWriter(tmp_path / f"f{i + 1}.h5", {"python": "test"}, "test")
        for rtol, lv in cases.items():
            w.add(record(samples(rng, lv[i]), rtol=rtol))
        w.finish("complete")
        paths.append(str(tmp_path / f"f{i + 1}.h5"))
    return paths


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_series(tmp_path_factory.mktemp("series"))


def by_rtol(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["case"][4]: t for t in doc["timings"] if t["metric"] == "solve"}


def test_the_exact_fit_finds_a_clean_step_and_only_it() -> None:
    """The DP is exact: a noiseless step is its own segment whatever a small γ is."""
    y = [0.0, 0.0, 0.0, 0.3, 0.3, 0.3, 0.3]
    assert potts_l1(y, 0.1) == [0, 3]
    assert potts_l1(y, 10.0) == [0]  # a penalty above the gain: one segment


def test_one_step_flat_and_two_steps_from_results_files(files: list[str]) -> None:
    res = CliRunner().invoke(main, ["compare", *files, "--json"])
    assert res.exit_code == 0, res.output
    t = by_rtol(json.loads(res.stdout))
    one = t["1e-06"]["change_points"]
    assert [(c["before"], c["after"]) for c in one] == [(3, 4)]
    assert one[0]["ratio"] == pytest.approx(1.3, rel=0.08)
    assert t["1e-08"]["change_points"] == []
    two = t["0.0001"]["change_points"]
    assert [(c["before"], c["after"]) for c in two] == [(2, 3), (6, 7)]
    assert two[0]["ratio"] > 1.2 and two[1]["ratio"] < 1 / 1.25


def test_the_report_names_the_step_and_fail_above_exits_1(files: list[str]) -> None:
    res = CliRunner().invoke(main, ["compare", *files, "--fail-above", "1.2"])
    assert res.exit_code == 1, res.output
    assert re.search(r"between file 3 and 4: 1\.[23]\dx slower \(median 1[12]\.\d ms -> "
                     r"1[56]\.\d ms\)", res.output), res.output
    assert "No change point (1 timing(s))" in res.output
    ok = CliRunner().invoke(main, ["compare", *files, "--fail-above", "1.6"])
    assert ok.exit_code == 0, ok.output


@pytest.mark.slow  # matplotlib's import: about 3 s on the shared machine
def test_plot_is_a_png(files: list[str], tmp_path: Path) -> None:
    out = tmp_path / "steps.png"
    res = CliRunner().invoke(main, ["compare", *files, "--plot", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_two_files_still_compare_pairwise_and_refuse_plot(files: list[str]) -> None:
    res = CliRunner().invoke(main, ["compare", files[0], files[-1]])
    assert res.exit_code == 0 and "geometric mean" in res.output
    bad = CliRunner().invoke(main, ["compare", files[0], files[1], "--plot", "x.png"])
    assert bad.exit_code == 2 and "three or more" in bad.output


def test_seeded_noise_without_a_step_finds_none() -> None:
    """20 seeded flat series of 8 files with ±5 % run drift: no change point in any."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        vals = [float(np.median(samples(rng, BASE))) for _ in range(N_FILES)]
        t = fit(Timing(("p",) * 9, "solve", list(range(1, N_FILES + 1)), vals))  # type: ignore[arg-type]
        assert t.steps == [], [s.sentence() for s in t.steps]


def test_a_step_inside_the_floor_is_never_reported() -> None:
    """A clean 1.05x step (no noise at all) is inside the 1.10x floor."""
    t = fit(Timing(("p",) * 9, "solve", list(range(1, 9)), [1.0] * 4 + [1.05] * 4))  # type: ignore[arg-type]
    assert t.steps == []
    assert ser.fit(Timing(("p",) * 9, "solve", list(range(1, 9)),  # type: ignore[arg-type]
                          [1.0] * 4 + [1.15] * 4)).steps[0].after == 5


def test_one_file_out_and_back_is_an_outlier_not_two_steps() -> None:
    """File 5 alone at 1.6x (half its samples slow), its neighbours flat: set aside."""
    vals = [1.0, 1.02, 0.98, 1.01, 1.6, 0.99, 1.03, 1.0]
    t = fit(Timing(("p",) * 9, "solve", list(range(1, 9)), vals))  # type: ignore[arg-type]
    assert t.steps == [] and [f for f, _, _ in t.outliers] == [5]
    assert t.outliers[0][2] == pytest.approx(1.6, rel=0.03)
    end = fit(Timing(("p",) * 9, "solve", list(range(1, 9)), [*vals[:4], 0.99, *vals[5:7], 1.6]))  # type: ignore[arg-type]
    assert [(s.before, s.after, s.one_file) for s in end.steps] == [(7, 8, True)]
