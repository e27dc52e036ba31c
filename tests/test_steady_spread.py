"""Steady samples spread over a case's fresh processes (pyperf's way), each sample tagged
with the process that took it, and compare's run value averaging those processes."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from sciml_bench.measure import affinity
from sciml_bench.problem import reference, spec
from sciml_bench.results import compare as cmp
from sciml_bench.results import store
from sciml_bench.run import runner
from sciml_bench.run.steady import share


def test_each_process_takes_its_share_of_repeats_budget_and_minimum() -> None:
    job = {"repeats": 10, "steady_budget_s": 20.0, "steady_processes": 3}
    assert share(job) == (4, pytest.approx(20 / 3), 1)
    assert share({**job, "steady_processes": 1}) == (10, 20.0, 3)
    assert share({"repeats": 3}) == (3, 20.0, 3)  # a job from before the spread: one process


def test_a_case_of_three_processes_takes_samples_in_each(tmp_path: Path) -> None:
    """SciPy on ROBER with --cold 3 --repeats 6: two samples from each process, in process
    order, tagged 0, 0, 1, 1, 2, 2, and so read back from the HDF5 file."""
    p = spec.load("stiff-robertson")
    ref = reference.get(p)
    problem = reference.compile_problem(p, ref)
    cases = runner.plan(problem, ["scipy"])
    writer = store.ResultsWriter(tmp_path / "r.h5", {}, "test")
    settings = runner.Settings(cold=3, repeats=6, budget_s=120.0, steady_budget_s=6.0)
    (rec,) = runner.run(problem, ref, cases, writer, settings, progress=lambda m: None)
    writer.finish("complete")
    assert rec["status"] == "ok" and rec["cold_processes"] == 3
    assert rec["solve_sample_process"] == [0, 0, 1, 1, 2, 2]
    assert len(rec["solve_samples"]) == 6 and min(rec["solve_samples"]) > 0
    assert "grad_sample_process" not in rec  # SciPy has no gradient
    (back,) = store.read(tmp_path / "r.h5").records
    assert back["solve_sample_process"] == [0, 0, 1, 1, 2, 2]
    # each process's median, beside the raw samples, as the file is read back (issue 43)
    s = rec["solve_samples"]
    assert back["solve_process_medians"] == pytest.approx([(s[0] + s[1]) / 2,
                                                           (s[2] + s[3]) / 2, (s[4] + s[5]) / 2])
    # every process pinned its steady samples to one core it may use
    allowed = {f"cpu {c}" for c in os.sched_getaffinity(0)} if hasattr(os, "sched_getaffinity") else set()
    said = [part.split(": ", 1)[-1] for part in back["steady_affinity"].split("; ")]
    cores = [s.split(" (")[0] for s in said]
    assert cores and set(cores) <= allowed, back["steady_affinity"]
    # and one thread in each BLAS and OpenMP pool on that one core
    assert all(s.endswith(f"({affinity.ONE_THREAD})") for s in said), said


def test_a_run_value_is_the_geometric_mean_of_its_process_medians() -> None:
    samples = [1.0, 1.2, 0.8, 4.0, 4.4, 3.6]  # process 0: median 1; process 1: median 4
    assert cmp.run_center(samples, [0, 0, 0, 1, 1, 1]) == pytest.approx(2.0)
    assert cmp.run_center(samples) == pytest.approx(2.4)  # untagged: the samples' median
    assert math.isnan(cmp.run_center([0.0, 1.0], [0, 1]))


def test_several_runs_a_side_compare_their_process_averaged_values() -> None:
    """Three runs a side of two processes each: OLD's runs are 1 and 4 ms processes (value
    2 ms), NEW's the same 1.3x slower; the run values, not pooled medians, are compared."""
    old = [[1e-3 * (1 - 0.01 * i), 1e-3, 4e-3, 4e-3] for i in range(3)]
    new = [[1.3e-3 * (1 + 0.01 * i), 1.3e-3, 5.2e-3, 5.2e-3] for i in range(3)]
    takers = [[0, 0, 1, 1]] * 3
    ch = cmp.compare_runs("solve", old, new, old_takers=takers, new_takers=takers)
    assert ch is not None and ch.unit == cmp.RUNS
    assert ch.old_median == pytest.approx(2e-3, rel=0.01)
    assert ch.ratio == pytest.approx(1.3, rel=0.01)
    assert ch.verdict == cmp.SLOWER


def test_one_run_a_side_of_several_processes_keeps_the_process_floor() -> None:
    a = [1.0e-3, 1.01e-3, 1.02e-3, 1.03e-3, 1.04e-3, 1.05e-3] * 2
    b = [1.3 * x for x in a]
    who = [0] * 4 + [1] * 4 + [2] * 4
    ch = cmp.compare_runs("solve", [a], [b], old_takers=[who], new_takers=[who])
    assert ch is not None and ch.unit == "samples of 3 vs 3 processes (one run on a side)"
    assert ch.floor == pytest.approx(2.1) and ch.verdict == cmp.IN_NOISE


def test_no_pin_leaves_every_core_and_the_row_says_so(tmp_path: Path) -> None:
    p = spec.load("stiff-robertson")
    ref = reference.get(p)
    problem = reference.compile_problem(p, ref)
    writer = store.ResultsWriter(tmp_path / "r.h5", {}, "test")
    settings = runner.Settings(cold=1, repeats=3, budget_s=120.0, steady_budget_s=3.0, pin=False)
    (rec,) = runner.run(problem, ref, runner.plan(problem, ["scipy"]), writer, settings,
                        progress=lambda m: None)  # fmt: skip
    writer.finish("complete")
    assert rec["status"] == "ok" and rec["steady_affinity"] == "off (--no-pin)"
    assert len(rec["solve_process_medians"]) == 1
