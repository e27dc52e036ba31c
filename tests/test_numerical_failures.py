"""Numerical failure in every available backend: NaN or inf in the RHS, an
infinite (singular) Jacobian, and the step bound. Each is a status carrying the
library's own message, from a real worker process, and the gradient of a failed
solve is never scored. A problem whose *reference* fails is a one-line error from
`sciml-bench reference`; `sciml-bench run` runs its backends anyway
(tests/test_row_claims.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sciml_bench import backends
from sciml_bench.measure.status import Status
from sciml_bench.problem import reference, spec
from sciml_bench.run import ode, runner
from sciml_bench.run.executor import LocalExecutor, Outcome

DATA = Path(__file__).parent / "data"
FAST = runner.Settings(cold=1, repeats=1, warmups=0, budget_s=120.0, steady_budget_s=1.0)
#: the library's own words, per backend
MESSAGES = {
    "scipy": ("Required step size is less than spacing between numbers", "non-finite values",
              "the shared max_steps"),
    "diffrax": ("The maximum number of solver steps was reached",),
    "torchdiffeq": ("underflow in dt", "max_num_steps exceeded", "max_steps exceeded"),
}
PROBLEMS = ["nan-log", "blowup", "singular-jacobian", "max-steps"]


def stub_reference(p: spec.Problem) -> reference.Reference:
    """A placeholder reference: these problems fail in the reference solver too
    (that path is tested below), and only the backend's status is under test."""
    n = len(p.t_save)
    return reference.Reference(
        p.name, p.content_hash, "stub", 1e-12, 1e-14, list(p.t_save), [[1.0] * p.n_state] * n,
        None, 1.0, [1.0] * p.n_params, "stub", 1e-4, None, 0.0,
    )


class _Recording(LocalExecutor):
    """Keeps the worker's stderr, to show it if a case ends unexpectedly."""

    tail = ""

    def run(self, job, budget_s, on_event):  # type: ignore[no-untyped-def]
        outcome = super().run(job, budget_s, on_event)
        self.tail = outcome.stderr_tail[-3000:]
        return outcome


@pytest.mark.slow
@pytest.mark.parametrize("backend", list(MESSAGES))
@pytest.mark.parametrize("name", PROBLEMS)
def test_failure_is_a_status_with_the_library_message(name: str, backend: str) -> None:
    if not backends.get(backend).availability().ok:
        pytest.skip(f"{backend} is not installed")
    p = spec.load(DATA / f"{name}.toml")
    ref = stub_reference(p)
    problem = reference.compile_problem(p, ref)
    (case,) = runner.plan(problem, [backend])
    executor = _Recording()
    rec = runner.run_case(case, problem, ref, FAST, executor, progress=lambda m: None)
    assert Status(rec["status"]).is_solver_failure, (rec["status"], rec["reason"], executor.tail)
    assert rec["reason"].startswith(f"{backend}"), rec["reason"]
    assert any(m in rec["reason"] for m in MESSAGES[backend]), rec["reason"]
    if name == "max-steps":
        assert rec["status"] == "max_steps"
    for scored in ("gradient", "gradient_error", "gradient_tier", "gradient_cosine"):
        assert scored not in rec


def test_a_gradient_is_scored_only_for_an_ok_case() -> None:
    """Even if a failing worker had reported a gradient, it is not scored."""
    p = spec.load(DATA / "decay.toml")
    ref = stub_reference(p)
    problem = reference.compile_problem(p, ref)
    (case,) = runner.plan(problem, ["scipy"])
    events = [{"phase": "import", "s": 0.1}, {"loss": 1.0, "gradient": [1.0]},
              {"status": "nonfinite", "reason": "torchdiffeq: non-finite loss or gradient"}]
    job = runner.case_job(case, problem, ref, FAST)
    rec = ode.record(job, [runner.ending(Outcome(events, 0), FAST.budget_s)])
    assert rec["status"] == "nonfinite" and "gradient_error" not in rec and "gradient" not in rec


@pytest.mark.parametrize("name", ["nan-log", "blowup", "singular-jacobian"])
def test_a_failing_reference_is_a_one_line_error(name: str, tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "reference", "--problem-file",
         str(DATA / f"{name}.toml")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("Error:")]
    assert "reference solver" in line and name in line
