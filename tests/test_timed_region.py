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
from sciml_bench.run import ode, steady
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


def _steady(tmp_path: Path, fail_at: int | None) -> tuple[bool, list[dict], Logged]:
    case, cp = _case(fail_at=fail_at)
    log = tmp_path / "events.jsonl"
    job = {"backend": "scipy", "repeats": 5, "warmups": 1, "problem": cp.to_json()}
    ok = ode._steady(job, case, np.asarray(cp.theta0), False, Events(str(log)))
    return ok, [json.loads(ln) for ln in log.read_text().splitlines()], case


def test_samples_run_back_to_back_and_every_one_is_checked_after(tmp_path: Path) -> None:
    ok, events, case = _steady(tmp_path, fail_at=None)
    (samples,) = [e["values"] for e in events if e.get("samples") == "solve"]
    assert ok and len(samples) == 5
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
