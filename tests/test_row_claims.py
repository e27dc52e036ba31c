"""What a row claims about its numbers (issue 23 D, issue 25 item 6), with real workers.

- a reference that cannot be built leaves the run going: the backends run, their rows say
  "no reference: <reason>", and the file is kept;
- a case killed at its budget keeps the phases it completed, marked partial, and the
  time it spent in the phase it was killed in;
- a row scored against a reference whose FD and complex-step gradients disagree is
  marked as scored against an unverified reference;
- where the reference came from (computed or the shared cache) is recorded per run;
- SciPy's TTFG column is its time to first solve, and says so.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sciml_bench.problem import reference, spec
from sciml_bench.results import compare, export, publish, store
from sciml_bench.results.table import reference_notes, table, ttfg_cell
from sciml_bench.run import ode, runner
from sciml_bench.run.executor import LocalExecutor

DATA = Path(__file__).parent / "data"
SCIML = [sys.executable, "-m", "sciml_bench.cli.main"]


@pytest.mark.slow
def test_a_failing_reference_keeps_the_run_its_rows_and_the_next_problem(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    decay = spec.load(DATA / "decay.toml")
    cached = reference.get(decay, cache=cache)  # a "fresh" run that finds the shared cache
    out = tmp_path / "out"
    r = subprocess.run(
        [*SCIML, "run", "--problem-file", str(DATA / "blowup.toml"), "--problem-file",
         str(DATA / "decay.toml"), "-b", "scipy", "--quick", "--out", str(out), "--json"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "SCIML_BENCH_CACHE": str(cache)},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "reference: none (BDF at rtol 1e-12: reference solver BDF failed for 'blowup'" in r.stderr
    assert f"read from the cache {cached.cache_path}" in r.stderr
    blowup, ok = (x for x in json.loads(r.stdout) if x.get("kind") != "verdict")
    assert blowup["status"] == "dt_underflow" and blowup["reference_source"] == "none"
    assert blowup["solution_error_note"].startswith(
        "no reference: BDF at rtol 1e-12: reference solver BDF failed")
    assert "which no other method or tolerance gets past" in blowup["solution_error_note"]
    assert blowup["solution_error"] is None and blowup["complex_step_agreement"] is None
    # the worker said how long it spent failing, in the phase it failed in
    assert blowup["failed_phase"] == "first_solve" and blowup["failed_phase_s"] > 0
    assert not blowup["failed_phase_s_estimated"] and blowup["phases_partial"]
    assert ok["status"] == "ok" and ok["reference_source"] == "cache"
    assert ok["reference_path"] == cached.cache_path and ok["solution_error"] < 1e-5
    assert ok["ttfg_kind"] == "solve" and ok["ttfg_s"] > 0  # SciPy: no gradient

    (path,) = out.glob("*.h5")
    run = store.read(path)
    assert run.meta["status"] == "complete" and len(run.records) == 2
    refs = run.environment["references"]
    assert refs["blowup"]["source"] == "none" and refs["decay"]["source"] == "cache"
    assert refs["decay"]["path"] == cached.cache_path
    shown = subprocess.run([*SCIML, "show", str(path)], capture_output=True, text=True,
                           timeout=120, check=True).stdout  # fmt: skip
    assert "no ref" in shown and "no reference: BDF at rtol 1e-12: reference solver BDF failed" in shown
    assert f"{ok['ttfg_s']:.2f} (solve)" in shown and "TTFG (solve): scipy" in shown
    # export and compare take such rows as they are (no reference, no timings)
    doc = json.loads(export.to_json([run]))  # strict JSON: NaN became null
    assert doc["files"][0]["records"][0]["complex_step_agreement"] is None
    assert "no reference: BDF at rtol 1e-12: reference solver" in export.to_csv([run])
    assert compare.compare(run.records, run.records).cases[0].status_changes == []
    # the report's table row and environment (the figures are drawn in test_report.py)
    assert publish.case_row(run.records[0], "solution_error")[-3:] == ["no ref", "-", "-"]  # SciPy
    (sources,) = [row[1] for b in publish.environment_blocks([run])
                  if isinstance(b, publish.Table) for row in b.rows if row[0] == "references"]
    assert sources == (f"blowup: none (the reference solver failed); "
                       f"decay: read from the cache ({cached.cache_path})")  # fmt: skip


def _killed(problem_file: str, settings: runner.Settings, deadline: bool = True) -> dict:
    """SciPy's row of a problem; without ``deadline`` the worker does not know its budget
    and runs until the kill (as a steady call longer than its estimate does)."""
    p = spec.load(DATA / problem_file)
    ref = reference.get(p)
    problem = reference.compile_problem(p, ref)
    (case,) = runner.plan(problem, ["scipy"])
    job = runner.case_job(case, problem, ref, settings)
    if not deadline:
        job["budget_s"] = None
    task = runner.CaseTask(job, ("full",), settings.budget_s)
    return ode.record(job, runner.case_processes(task, LocalExecutor(), lambda k, e: None))


@pytest.mark.slow
def test_a_budget_kill_keeps_the_phases_it_completed_and_the_time_it_spent() -> None:
    endless = runner.Settings(cold=1, repeats=10**6, warmups=0, budget_s=5.0,
                              steady_budget_s=1e6)  # fmt: skip
    # the worker ends its samples before the budget: an ok row that says they were cut
    cut = _killed("decay.toml", endless)
    assert cut["status"] == "ok" and len(cut["solve_samples"]) > 100, cut["reason"]
    assert cut["reason"].startswith("steady samples cut short by the 5 s budget")
    # killed in the steady state (10^6 repeats, no steady budget): TTFG was reached
    steady = _killed("decay.toml", endless, deadline=False)
    assert steady["status"] == "budget_exceeded", steady["reason"]
    assert steady["phases_partial"] and steady["ttfg_reached"] and "ttfg_s" in steady
    assert steady["ttfg_samples"] == []  # a killed process's TTFG is not a sample
    done = np.asarray(steady["phases"][0])
    assert np.isfinite(done[:3]).all() and np.isnan(done[3])  # SciPy: no first gradient
    assert steady["partial_ttfg_s"] >= done[:3].sum()
    assert steady["failed_phase"] == "steady state" and steady["failed_phase_s_estimated"]
    assert steady["failed_phase_s"] == pytest.approx(
        steady["worker_wall_s"] - steady["partial_ttfg_s"], abs=1e-9
    )
    assert ttfg_cell(steady) == f"{steady['partial_ttfg_s']:.2f} partial"

    # killed in its first solve (explicit DOP853 on a stiff relaxation: ~1e5 steps)
    solve = _killed("slow-stiff.toml", runner.Settings(cold=1, repeats=1, warmups=0,
                                                       budget_s=5.0))  # fmt: skip
    assert solve["status"] == "budget_exceeded", solve["reason"]
    assert solve["failed_phase"] == "first_solve" and not solve["ttfg_reached"]
    first = np.asarray(solve["phases"][0])
    assert np.isfinite(first[:2]).all() and np.isnan(first[2:]).all()
    assert solve["partial_ttfg_s"] == pytest.approx(first[:2].sum())
    assert 0 < solve["failed_phase_s"] <= 5.0
    assert ttfg_cell(solve) == f"({solve['partial_ttfg_s']:.2f}) partial"
    assert any(n.startswith("TTFG partial") for n in reference_notes([steady, solve]))

    pytest.importorskip("matplotlib")
    from sciml_bench.results import plots

    plot = plots.ttfg_figure([steady, solve])
    hatched = [b for b in plot.fig.axes[0].patches if b.get_hatch()]
    assert [round(b.get_width(), 6) for b in hatched if b.get_width() > 0] == [
        round(solve["failed_phase_s"], 6)
    ]  # the first-solve kill draws its time spent failing; the steady-state one has none
    assert any("in first solve" in n and "estimated from the wall time" in n for n in plot.notes)
    assert any("(to first solve)" in t.get_text() for t in plot.fig.axes[0].get_yticklabels())


#: abs() keeps complex step out, so that the cross-check is central differences, at a step
#: of 0.3 in log k: O(h^2) ~ 1e-2 off the sensitivities, far beyond PASS_TOL/100
UNVERIFIED = ((DATA / "decay.toml").read_text().replace('y = "-k*y"', 'y = "-k*abs(y)"')
              + "\n[reference]\nfd_step = 0.3\n")  # fmt: skip


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torchdiffeq") is None,
                    reason="needs torchdiffeq (pip install -c constraints.txt -e '.[torch]')")  # fmt: skip
def test_a_row_scored_against_an_unverified_reference_says_so(tmp_path: Path) -> None:
    p = spec.loads(UNVERIFIED.replace('name = "decay"', 'name = "decay-coarse-fd"'), "u.toml")
    ref = reference.get(p, cache=tmp_path)
    # one central difference at h = 0.3: its h² term puts it far above PASS_TOL/100 = 1e-6
    assert ref.cross_check.startswith("central-difference") and ref.cross_check_agreement > 1e-6
    problem = reference.compile_problem(p, ref)
    (case,) = runner.plan(problem, ["torchdiffeq"])
    writer = store.ResultsWriter(tmp_path / "u.h5", {}, "test")
    fast = runner.Settings(cold=1, repeats=2, warmups=0, budget_s=120.0, steady_budget_s=1.0)
    runner.run(problem, ref, [case], writer, fast, progress=lambda m: None)
    writer.finish("complete")
    (rec,) = store.read(writer.path).records  # through the HDF5 file, as a reader sees it
    assert rec["status"] == "ok", rec["reason"]
    assert rec["reference_unverified"] is True and rec["reference_source"] == "computed"
    assert rec["reference_cross_check_agreement"] == pytest.approx(ref.cross_check_agreement)
    assert "cross-check: agrees to" in rec["reference_method"]
    text = table([rec])
    assert f"{rec['gradient_error']:.2e} {rec['gradient_tier']}*" in text
    assert "* scored against an unverified reference" in text


ENSEMBLE_BLOWUP = """
name = "ens-all-blow-up"
stiff = false
[state]
names = ["y"]
initial = [1.0]
[parameters]
a = 1.0
[equations]
y = "a*y^2"
[time]
span = [0.0, 2.0]
save = { linspace = [0.5, 2.0, 4] }
[loss]
kind = "final"
weights = [1.0]
[reference]
rtol = 1.0e-6
[ensemble]
sizes = [2, 4]
sample = 2
[ensemble.vary]
a = { uniform = [0.9, 1.1], apply = "scale" }
"""


def test_an_ensemble_without_a_reference_is_rows_that_say_so(tmp_path: Path) -> None:
    """Every member blows up before t = 2: the reference sample cannot be made. The run
    goes on with one row per ladder saying why (an ensemble row is scored on the sample)."""
    toml = tmp_path / "e.toml"
    toml.write_text(ENSEMBLE_BLOWUP)
    r = subprocess.run(
        [*SCIML, "run", "--problem-file", str(toml), "-b", "scipy", "--out", str(tmp_path),
         "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    (row,) = (x for x in json.loads(r.stdout) if x.get("kind") != "verdict")
    assert row["status"] == "error" and row["reason"].startswith("no reference: reference solver")
    (path,) = tmp_path.glob("*.h5")
    run = store.read(path)
    assert run.meta["status"] == "complete" and run.records[0]["reference_source"] == "none"
    assert run.environment["references"]["ens-all-blow-up"]["source"] == "none"
