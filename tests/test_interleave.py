"""Interleaved repetitions (``--interleave``, issue 34): the schedule, a real interleaved
run against one case after case, and an interleaved run interrupted between cases."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sciml_bench.cli.main import main
from sciml_bench.problem import reference, spec
from sciml_bench.results import store
from sciml_bench.results.store import ResultsWriter
from sciml_bench.run import runner
from sciml_bench.run.interleave import Unit, schedule

DATA = Path(__file__).parent / "data"


def test_schedule_is_a_seeded_permutation_in_rounds() -> None:
    counts = [3, 1, 3, 2, 3]
    order = schedule(counts, seed=7)
    every = {Unit(c, k) for c, n in enumerate(counts) for k in range(n)}
    assert len(order) == len(every) and set(order) == every  # each unit once, none missing
    assert order == schedule(counts, seed=7)  # reproducible
    assert any(schedule(counts, s) != order for s in range(1, 6))  # the seed matters
    # rounds: every case's process k before any case's process k + 1 (the full one first)
    assert [u.process for u in order] == sorted(u.process for u in order)
    # and each round is shuffled: over seeds, the first round is not always in case order
    firsts = {tuple(u.case for u in schedule(counts, s)[:5]) for s in range(20)}
    assert len(firsts) > 5
    assert schedule([], 1) == []


def _rows(path: Path) -> list[tuple[Any, ...]]:
    recs = store.read(path).records
    return sorted((r["backend"], r["solver"], r["gradient_method"], r["status"],
                   len(r["ttfg_samples"]), len(r["solve_samples"])) for r in recs)  # fmt: skip


@pytest.mark.slow
def test_interleaved_run_records_its_order_and_the_same_rows(tmp_path: Path) -> None:
    """scipy and diffsol on the decay problem, two processes each: interleaved, the
    file holds the seed, the planned order and each row's slots in it; the rows are the
    rows of the same run case after case."""
    args = ["run", "--problem-file", str(DATA / "decay.toml"), "-b", "scipy,diffsol",
            "--quick", "--cold", "2", "--repeats", "2"]  # fmt: skip
    cli = CliRunner()
    r = cli.invoke(main, [*args, "--seed", "11", "--out", str(tmp_path / "on")])
    assert r.exit_code == 0, r.output
    (on,) = (tmp_path / "on").glob("*.h5")
    r = cli.invoke(main, [*args, "--no-interleave", "--out", str(tmp_path / "off")])
    assert r.exit_code == 0, r.output
    (off,) = (tmp_path / "off").glob("*.h5")

    run = store.read(on)
    (sched,) = run.environment["schedules"]
    assert sched["seed"] == 11 and sched["problem"] == "decay"
    expected = schedule([2, 2], 11)
    assert sched["order"] == [[u.case + 1, u.process] for u in expected]
    slots = {rec["case_index"]: rec["schedule_slots"] for rec in run.records}
    executed = sorted((s, i) for i, ss in slots.items() for s in ss)
    assert [[i, Counter(i for _, i in executed[: n + 1])[i] - 1] for n, (_, i) in
            enumerate(executed)] == sched["order"]  # the slots replay the recorded order  # fmt: skip
    assert all(r["status"] == "ok" for r in run.records)
    assert _rows(on) == _rows(off)
    assert "schedules" not in store.read(off).environment


def test_dask_refuses_interleave_and_seed_needs_it() -> None:
    cli = CliRunner()
    r = cli.invoke(main, ["run", "--problem-file", str(DATA / "decay.toml"), "-b", "scipy",
                          "--interleave", "--executor", "dask"])  # fmt: skip
    assert r.exit_code != 0 and "drop --interleave" in r.output
    r = cli.invoke(main, ["run", "--problem-file", str(DATA / "decay.toml"), "-b", "scipy",
                          "--no-interleave", "--seed", "3"])  # fmt: skip
    assert r.exit_code != 0 and "--seed orders the interleaved processes" in r.output


def test_interrupted_interleaved_run_keeps_its_completed_cases(tmp_path: Path, interrupt_at: Any) -> None:
    """Two diffsol cases of two processes, interrupted as the 4th process starts: the
    order is round 0 of both, then round 1, so one case is complete and one has run only
    its first process; the file holds the first whole and the second marked partial."""
    p = spec.load(DATA / "decay.toml")
    ref = reference.get(p)
    problem = reference.compile_problem(p, ref)
    cases = runner.plan(problem, ["diffsol"], rtols=[1e-4, 1e-6])
    settings = runner.Settings(cold=2, repeats=2, budget_s=60, steady_budget_s=2,
                               interleave=True, seed=5)  # fmt: skip
    writer = ResultsWriter(tmp_path / "cut.h5", {}, "test")
    with pytest.raises(runner.Interrupt):
        runner.run(problem, ref, cases, writer, settings, interrupt_at(4), progress=lambda m: None)
    run = store.read(writer.path)
    assert run.meta["status"] == "interrupted"
    whole = [r for r in run.records if not r.get("partial")]
    cut = [r for r in run.records if r.get("partial")]
    assert len(whole) == 1 and len(cut) == 1
    assert len(whole[0]["ttfg_samples"]) == 2 and len(whole[0]["schedule_slots"]) == 2
    assert cut[0]["cold_processes"] == 1 and cut[0]["cold_processes_planned"] == 2
    assert cut[0]["solve_samples"], "the finished full process's samples were dropped"
    # the complete case is the one whose round-1 process ran third
    third = schedule([2, 2], 5)[2]
    assert whole[0]["case_index"] == third.case + 1


def _false_alarms_script() -> Any:
    import importlib.util

    path = Path(__file__).parents[1] / "benchmarks" / "compare_false_alarms.py"
    spec_ = importlib.util.spec_from_file_location("compare_false_alarms", path)
    assert spec_ is not None and spec_.loader is not None
    module = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(module)
    return module


def _runs(n: int, scale: float, sd: float, seed: int) -> list[list[dict[str, Any]]]:
    """``n`` runs of one synthetic case: 5 solve samples each around ``scale`` times a
    run-level draw of log sd ``sd`` (the run-to-run spread the script measures)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    case = {"kind": "ode", "problem": "p", "backend": "b", "solver": "s",
            "gradient_method": "g", "rtol": 1e-6, "device": "cpu", "status": "ok"}  # fmt: skip
    out = []
    for _ in range(n):
        level = scale * np.exp(rng.normal(0.0, sd))
        out.append([{**case, "solve_samples": list(level * np.exp(rng.normal(0, 0.01, 5)))}])
    return out


def test_runs_a_side_figure_follows_the_run_to_run_spread() -> None:
    """benchmarks/compare_false_alarms.py's figure (``--ab`` prints it per mode): a quiet
    spread catches 1.3x with few runs a side, a wide one not within the runs measured."""
    cfa = _false_alarms_script()
    quiet_n, line = cfa.runs_a_side(_runs(8, 1.0, 0.005, 1), _runs(8, 1.3, 0.005, 2))
    # 2 a side can miss in a window: Welch's t on 2 vs 2 runs may have ~1 degree of freedom
    assert quiet_n in (2, 3) and f"false alarms at {quiet_n} a side: 0 " in line
    wide_n, line = cfa.runs_a_side(_runs(8, 1.0, 0.6, 3), _runs(8, 1.3, 0.6, 4))
    assert wide_n is None and line.startswith(">8")
    spread = cfa.run_spread(_runs(8, 1.0, 0.3, 5), 1.3)
    sd = float(spread.split()[1])
    assert 0.15 < sd < 0.5 and "n = " in spread  # about the 0.3 drawn


def test_one_process_a_case_runs_in_order(tmp_path: Path) -> None:
    """With one process a case (--cold 1, --quick) there is nothing to spread: asked to
    interleave, the run keeps the cases' order and records no schedule."""
    p = spec.load(DATA / "decay.toml")
    ref = reference.get(p)
    problem = reference.compile_problem(p, ref)
    cases = runner.plan(problem, ["diffsol"], rtols=[1e-4, 1e-5, 1e-6])
    settings = runner.Settings(cold=1, repeats=2, budget_s=60, steady_budget_s=2,
                               interleave=True, seed=1)  # fmt: skip
    writer = ResultsWriter(tmp_path / "one.h5", {}, "test")
    runner.run(problem, ref, cases, writer, settings, progress=lambda m: None)
    run = store.read(writer.path)
    assert [r["case_index"] for r in run.records] == [1, 2, 3]
    assert [r["rtol"] for r in run.records] == [1e-4, 1e-5, 1e-6]
    assert "schedules" not in run.environment and "schedule_slots" not in run.records[0]
