"""The worker's clock holds the library's call only: checks run after it, on every sample,
and a failed sample is reported, never counted. Real SciPy solves of Lotka-Volterra."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from sciml_bench.backends.base import CaseOptions, Solution
from sciml_bench.backends.scipy import ScipyCase
from sciml_bench.measure.status import SolverFailure, Status
from sciml_bench.problem import reference, spec
from sciml_bench.run import ode
from sciml_bench.run.events import Events

CHECK_S = 0.2


class SlowCheck(ScipyCase):
    """A real SciPy case whose check takes ``CHECK_S`` and fails on call ``fail_at``."""

    def __init__(self, *args: Any, fail_at: int | None = None):
        super().__init__(*args)
        self.checks = 0
        self.fail_at = fail_at

    def check_solve(self, raw: Any) -> Solution:
        self.checks += 1
        time.sleep(CHECK_S)
        if self.checks == self.fail_at:
            raise SolverFailure(Status.MAX_STEPS, "scipy: injected failure", 1.0)
        return super().check_solve(raw)


def _steady(tmp_path: Path, fail_at: int | None) -> tuple[bool, list[dict], SlowCheck]:
    problem = spec.load("nonstiff-lotka-volterra")
    cp = reference.compile_problem(problem, reference.get(problem))
    case = SlowCheck(cp, CaseOptions("DOP853", "none", cp.rtol, cp.atol, cp.max_steps),
                     fail_at=fail_at)
    log = tmp_path / "events.jsonl"
    job = {"backend": "scipy", "repeats": 5, "warmups": 1}
    ok = ode._steady(job, case, np.asarray(cp.theta0), False, Events(str(log)))
    return ok, [json.loads(ln) for ln in log.read_text().splitlines()], case


def test_checks_run_on_every_sample_outside_the_clock(tmp_path: Path) -> None:
    ok, events, case = _steady(tmp_path, fail_at=None)
    (samples,) = [e["values"] for e in events if e.get("samples") == "solve"]
    assert ok and len(samples) == 5
    assert case.checks == 1 + 5  # the warm-up and every sample
    # a timed sample holds the solve (a few ms), never the check's CHECK_S
    assert max(samples) < CHECK_S


def test_a_failed_sample_is_reported_and_never_counted(tmp_path: Path) -> None:
    ok, events, case = _steady(tmp_path, fail_at=3)
    assert not ok
    assert not any("samples" in e for e in events)
    (failure,) = [e for e in events if "status" in e]
    assert failure["status"] == "max_steps"
    assert "injected failure" in failure["reason"] and "steady-state solve" in failure["reason"]
