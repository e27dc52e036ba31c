"""Ladder rungs in several processes a side (sciml_bench/run/rung_processes.py): which rungs
get them, their other processes interleaved after the ladders' first pass, one row each
with every process's samples, partial rows on Ctrl-C, and the summary's count of the ties
the one-process floor decided."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sciml_bench.problem import reference, spec
from sciml_bench.results import store, summary
from sciml_bench.run import runner
from sciml_bench.run.interrupts import Interrupt
from sciml_bench.run.rung_processes import CHEAP_S, expected_s, planned

ROOT = Path(__file__).resolve().parent.parent
HEAT = ROOT / "tests" / "data" / "heat-1d.toml"
#: an ensemble ladder of one process a rung, written for the tests
ENSEMBLE = ROOT / "tests" / "data" / "results-ensemble-lorenz.h5"


def _row(wall: float, n: int, timed: float = 3.0) -> dict[str, Any]:
    """A completed rung's row: a process of ``wall`` seconds, ``timed`` of them in its
    steady samples (half solves, half gradients)."""
    return {"worker_wall_s": wall, "n_state": n,
            "solve_samples": [timed / 4] * 2, "grad_samples": [timed / 4] * 2}


def test_a_rung_runs_cold_processes_where_its_expected_process_is_cheap() -> None:
    assert planned(3, [], 10, "n_state") == 3  # a ladder's first rung
    assert planned(1, [], 10, "n_state") == 1  # --cold 1 / --quick
    # 1 s of the rest + 3 s of samples at 10 states: 31 s expected at 100 states ...
    assert expected_s(_row(4.0, 10), 100, "n_state") == pytest.approx(31.0)
    assert planned(3, [_row(4.0, 10)], 100, "n_state") == 3
    # ... and 1 + 3 * 100 = 301 s at 1,000: one process
    assert expected_s(_row(4.0, 10), 1000, "n_state") == pytest.approx(301.0)
    assert 31.0 < CHEAP_S < 301.0
    assert planned(3, [_row(4.0, 10)], 1000, "n_state") == 1
    # compilation and the gradient check do not grow with the size (Diffrax: 10 s of
    # process, 10 ms of samples at 1 member; 16 members); a smaller size never shrinks it
    assert expected_s(_row(10.0, 1, timed=0.01), 16, "n_state") == pytest.approx(10.15)
    assert expected_s(_row(4.0, 10), 5, "n_state") == pytest.approx(4.0)
    # no wall time to go by (an older row): one process
    assert planned(3, [{"n_state": 10}], 100, "n_state") == 1


def test_a_rung_whose_first_process_proves_dear_runs_no_more() -> None:
    from sciml_bench.run.jobs import Process
    from sciml_bench.run.rung_processes import DEAR_S, Rung

    cheap, dear = (Rung({}, 3, "t", processes=[Process([], "ok", "", wall_s=w)])
                   for w in (DEAR_S - 1, DEAR_S + 1))  # fmt: skip
    for r in (cheap, dear):
        r.stop_if_dear()
    assert cheap.waiting and not cheap.note
    assert not dear.waiting and dear.note.startswith("one process of 3: its first took 91 s")


def _heat_ladders(backends: list[str]) -> tuple[Any, list[Any]]:
    problem = spec.load(HEAT)
    first = spec.at_size(problem, 4)
    compiled = reference.compile_problem(first, reference.get(first))
    ladders = runner.plan_sized(compiled, backends, [4], jacobians=["sparse"])
    return problem, ladders


@pytest.mark.slow
def test_ctrl_c_between_rung_processes_writes_each_waiting_rung_as_partial(
    tmp_path: Path, interrupt_at: Any
) -> None:
    """Two one-rung ladders of three processes: the first pass runs both first
    processes, the rounds one more of one rung, then Ctrl-C. Both rungs are on disk as
    partial rows with the processes they had, and the file says it was interrupted."""
    pytest.importorskip("casadi")
    problem, ladders = _heat_ladders(["scipy", "cvodes"])
    writer = store.ResultsWriter(tmp_path / "r.h5", {}, "test")
    settings = runner.Settings(cold=3, repeats=3, budget_s=120.0, steady_budget_s=1.0, seed=7)
    with pytest.raises(Interrupt):
        runner.run_sized(problem, ladders, writer, settings, executor=interrupt_at(4),
                         progress=lambda m: None)  # fmt: skip
    run = store.read(tmp_path / "r.h5")
    assert run.meta["status"] == "interrupted"
    rows = sorted(run.records, key=lambda r: r["cold_processes"])
    assert sorted(r["backend"] for r in rows) == ["cvodes", "scipy"]
    assert [r["cold_processes"] for r in rows] == [1, 2]
    for r in rows:
        assert r["partial"] and r["cold_processes_planned"] == 3
        assert f"after {r['cold_processes']} of 3 cold processes" in r["reason"]
        assert len(r["ttfg_samples"]) == r["cold_processes"]


@pytest.mark.slow
def test_an_ensemble_rung_of_two_processes_is_one_row_with_both(tmp_path: Path) -> None:
    """ensemble-lorenz, torchdiffeq's coupled ladder at 1 and 2 members, ``--cold 2``:
    each rung's row holds two processes (two first-gradient times, samples from both,
    taken in the order the rounds ran) and is scored once, and the file records the
    rounds' seeded order."""
    pytest.importorskip("torchdiffeq")
    from click.testing import CliRunner

    from sciml_bench.cli.main import main

    r = CliRunner().invoke(main, [
        "run", "ensemble-lorenz", "-b", "torchdiffeq", "--sizes", "1,2", "--cold", "2",
        "--repeats", "4", "--out", str(tmp_path)])  # fmt: skip
    assert r.exit_code == 0, r.output
    (h5,) = tmp_path.glob("*.h5")
    run = store.read(h5)
    rows = [x for x in run.records if x.get("status") == "ok"]
    assert sorted(x["size"] for x in rows) == [1, 2]
    for x in rows:
        assert x["cold_processes"] == 2 == x["rung_processes_planned"]
        assert len(x["ttfg_samples"]) == 2 and set(x["grad_sample_process"]) == {0, 1}
        assert len(x["grad_samples"]) == len(x["grad_sample_process"]) >= 2
        assert x["gradient_tier"] == "pass"
        first, second = x["schedule_slots"]
        assert second > first
    # the second processes ran after both first ones (the first pass), in the rounds
    firsts = {x["schedule_slots"][0] for x in rows}
    assert all(x["schedule_slots"][1] > max(firsts) for x in rows)
    (entry,) = [s for s in run.environment["schedules"] if s.get("kind") == "ladder rungs"]
    assert sorted(p[1] for p in entry["order"]) == [1, 1] and isinstance(entry["seed"], int)
    assert "[rung process 2/2]" in r.output


def test_the_summary_counts_the_ties_the_one_process_floor_decided() -> None:
    """An ensemble ladder of one process a rung (tests/data): two of its three summary lines
    are ties at the one-process floor (1.30x and 1.10x), the third cleared it (2.14x) and
    is not counted; a tie at that floor with a lead of 1.5x or more is counted apart."""
    rows = store.read(ENSEMBLE).records
    found = summary.lines(rows)
    ties = sorted(round(x.floor_tie, 2) for x in found if x.floor_tie is not None)
    assert len(found) == 3 and ties == [1.10, 1.30]
    assert summary.floor_ties(found).startswith(
        "2 of the 2 ties are the one-process floor's (0 with a lead of 1.5x or more)")
    lead = summary.Line("p", "n=16", "tie (floor 2.10x: one process a side)", "w", "1 ms",
                        "1.80x", "1e-6", floor_tie=1.8)  # fmt: skip
    assert summary.floor_ties([*found, lead]).startswith(
        "3 of the 3 ties are the one-process floor's (1 with a lead of 1.5x or more)")
    cleared = summary.Line("p", "c", "faster (floor 1.20x)", "w", "1 ms", "1.50x", "1e-6")
    assert summary.floor_ties([cleared]) == ""
