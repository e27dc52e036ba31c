"""The worker's clock holds the library's call only: samples are taken back to back, and
every one (warm-ups too) is checked after them, in bounded batches; a failed sample is
reported, never counted. Real SciPy solves of Lotka-Volterra."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sciml_bench.backends.base import CaseOptions, Solution
from sciml_bench.backends.scipy import ScipyCase
from sciml_bench.measure.clock import clock
from sciml_bench.measure.status import SolverFailure, Status
from sciml_bench.problem import reference, spec
from sciml_bench.run import ode, runner, steady
from sciml_bench.run.events import Events

CHECK_S = 0.2


class Logged(ScipyCase):
    """A real SciPy case that logs its timed calls and checks, in order; its check takes
    ``CHECK_S`` and fails on check number ``fail_at``."""

    def __init__(self, *args: Any, fail_at: int | None = None, check_s: float = CHECK_S):
        super().__init__(*args)
        self.log: list[str] = []
        self.fail_at = fail_at
        self.check_s = check_s

    def timed_solve(self, params: Any, y0: Any = None) -> Any:
        self.log.append("call")
        return super().timed_solve(params, y0)

    def check_solve(self, raw: Any) -> Solution:
        self.log.append("check")
        time.sleep(self.check_s)
        if self.log.count("check") == self.fail_at:
            raise SolverFailure(Status.MAX_STEPS, "scipy: injected failure", 1.0)
        return super().check_solve(raw)


def _case(**kw: Any) -> tuple[Logged, Any]:
    problem = spec.load("nonstiff-lotka-volterra")
    # timings only: no reference needed, and the loss's observations are never read
    cp = reference.compile_problem(problem, None, np.zeros((len(problem.t_save), 2)))
    return Logged(cp, CaseOptions("DOP853", "none", cp.rtol, cp.atol, cp.max_steps), **kw), cp


def _steady(
    tmp_path: Path, fail_at: int | None, case: Logged | None = None, **job: Any
) -> tuple[bool, list[dict], Logged]:
    """``ode._steady`` of a SciPy case (no gradient), its events, and the case; ``job``
    adds to the job (a ``budget_s`` and ``t_spawn`` give it a deadline)."""
    if case is None:
        case, _ = _case(fail_at=fail_at)
    log = tmp_path / "events.jsonl"
    job = {"backend": "scipy", "repeats": 5, "warmups": 1, "problem": case.p.to_json(),
           **job}  # fmt: skip
    note = ode._steady(job, case, np.asarray(case.p.theta0), {"solve": 0.01},
                       Events(str(log)))  # fmt: skip
    case.note = note  # type: ignore[attr-defined]
    return note is not None, [json.loads(ln) for ln in log.read_text().splitlines()], case


def test_samples_run_back_to_back_and_every_one_is_checked_after(tmp_path: Path) -> None:
    ok, events, case = _steady(tmp_path, fail_at=None)
    (samples,) = [e["values"] for e in events if e.get("samples") == "solve"]
    assert ok and len(samples) == 5 and case.note == ""  # type: ignore[attr-defined]
    # the warm-up and the five samples, with nothing between them; then six checks
    assert case.log == ["call"] * 6 + ["check"] * 6
    # a timed sample holds the solve (a few ms), never a check's CHECK_S
    assert max(samples) < CHECK_S


def test_a_failed_sample_is_reported_and_never_counted(tmp_path: Path) -> None:
    ok, events, case = _steady(tmp_path, fail_at=3)
    assert not ok
    assert not any("samples" in e for e in events)
    (failure,) = [e for e in events if "status" in e]
    assert failure["status"] == "max_steps"
    assert "injected failure" in failure["reason"] and "steady-state solve" in failure["reason"]


def test_large_outputs_are_checked_in_bounded_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    case, cp = _case(check_s=0.0)
    params = np.asarray(cp.theta0)
    # outputs of half the batch bound: two raw outputs at a time, never more
    monkeypatch.setattr(steady, "CHECK_BATCH_BYTES", 2000)
    plan = steady.Plan(repeats=5, warmups=1, sample_bytes=1000)
    samples = steady.take(case.timed_solve, case.check_solve, params, plan)
    assert len(samples) == 5
    assert case.log == ["call", "call", "check", "check"] * 3


def test_a_slow_case_reports_each_sample_and_starts_none_past_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each sample of a slow call is checked and reported as it ends (a kill keeps them);
    no call starts that the deadline (less the time kept for what follows) cannot hold."""
    case, cp = _case(check_s=0.0)
    call_s = 0.25

    def slow(params: Any) -> Any:
        time.sleep(call_s)  # a slow library call: an ensemble rung of many members
        return case.timed_solve(params)

    monkeypatch.setattr(steady, "CHECK_BATCH_S", 0.1)
    reported: list[list[float]] = []
    deadline = clock() + 1.6
    plan = steady.Plan(repeats=20, warmups=1, min_samples=1, deadline=deadline,
                       reserve_s=0.5, first_s=call_s)  # fmt: skip
    samples = steady.take(slow, case.check_solve, np.asarray(cp.theta0), plan, reported.append)
    assert clock() <= deadline - 0.5 + 0.2  # the reserve is kept (0.2 s for sleep jitter)
    # warm-up (0.25 s) then samples while one more fits in 1.6 - 0.5 s: 3 samples
    assert 2 <= len(samples) <= 3 and case.log.count("call") == len(samples) + 1
    assert reported == [samples[:k] for k in range(1, len(samples) + 1)]
    assert min(samples) >= call_s


class Slow(Logged):
    """A real SciPy case whose timed call takes ``call_s`` more: a large problem's solve."""

    call_s = 0.5

    def timed_solve(self, params: Any, y0: Any = None) -> Any:
        time.sleep(self.call_s)
        return super().timed_solve(params, y0)


def test_a_case_near_its_budget_ends_with_the_samples_that_fit_and_says_so(
    tmp_path: Path,
) -> None:
    """A worker's steady samples end before its case budget (less 2 %, at least 1 s), with
    a note on the row, instead of a kill that loses them."""
    case, _ = _case(check_s=0.0)
    slow = Slow(case.p, case.o, check_s=0.0)
    # the deadline 1.3 s from now: the warm-up (0.5 s) and one sample (0.5 s) fit, not two
    ok, events, slow = _steady(tmp_path, None, slow, budget_s=10.0, t_spawn=clock() - 7.7)
    (samples,) = [e["values"] for e in events if e.get("samples") == "solve"]
    assert ok and len(samples) == 1 and slow.log.count("call") == 2
    assert slow.note == (  # type: ignore[attr-defined]
        "steady samples cut short by the 10 s budget: 1 of 5 solve samples (--budget S gives "
        "each case more)"
    )


def test_a_case_with_no_time_for_one_sample_stops_and_says_why(tmp_path: Path) -> None:
    case, _ = _case(check_s=0.0)
    slow = Slow(case.p, case.o, check_s=0.0)
    ok, events, slow = _steady(tmp_path, None, slow, budget_s=10.0, t_spawn=clock() - 9.5)
    assert not ok and "call" not in slow.log  # nothing started that could not end in time
    (stop,) = [e for e in events if "status" in e]
    assert stop["status"] == "budget_exceeded" and stop["during"] == "steady-state solve"
    assert stop["reason"].startswith("stopped before the steady solve samples: one (0.01 s, as")


def test_a_worker_out_of_time_keeps_its_first_calls_in_the_row() -> None:
    """Through a real worker: a budget the first solve uses up (the job's ``budget_s`` is
    what the worker sees; the executor's kill is far later) gives a ``budget_exceeded``
    row that stopped in the steady state, its phases and solution kept."""
    problem = spec.load("nonstiff-lotka-volterra")
    ref = reference.get(problem)
    cp = reference.compile_problem(problem, ref)
    (case,) = runner.plan(cp, ["scipy"])
    job = {**runner.case_job(case, cp, ref, runner.Settings(cold=1)), "budget_s": 0.5}
    rec = runner.run_job_once(job, budget_s=120.0)
    assert rec["status"] == "budget_exceeded", rec["reason"]
    assert rec["failed_phase"] == "steady state" and rec["ttfg_reached"]
    assert np.isfinite(rec["phases"][0]).sum() == 3 and rec["solution_error"] < 1e-3
    assert rec["worker_wall_s"] < 60


def test_torchdiffeq_reads_its_progress_in_the_first_calls_only() -> None:
    """Reading the integrator's time is a host sync on a GPU: the first solve (which the
    worker's progress thread watches) does it, a steady sample does not."""
    pytest.importorskip("torchdiffeq")
    from sciml_bench.backends.torchdiffeq import TorchdiffeqCase

    problem = spec.load("nonstiff-lotka-volterra")
    cp = reference.compile_problem(problem, None, np.zeros((len(problem.t_save), 2)))
    case = TorchdiffeqCase(cp, CaseOptions("dopri5", "backprop", cp.rtol, cp.atol, cp.max_steps))
    theta = np.asarray(cp.theta0)
    first = case.solve(theta)
    assert case.steps.t_seen is not None and first.stats["steps"] > 16
    case.steps.t_seen = None
    raw = case.timed_solve(case.prepare(theta))
    assert case.steps.t_seen is None
    assert case.check_solve(raw).stats == first.stats  # the sample's own counts
