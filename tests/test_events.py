"""Events (``[[events]]``, sciml_bench/problem/events.py): the format, the reference across
jumps checked against closed-form solutions (not against itself), the rows of the backends
that run them, and every other backend's refusal by name.

Three models with closed forms: the shipped oral-dosing problem (Bateman's function summed
over the doses, the second dose's time differentiated), a bolus model with a halving event
(an assignment whose ``∂g/∂y`` is not the identity), and the shipped bouncing ball (a root
event: each bounce's time from the quadratic of free fall). The gradients are compared with
complex-step derivatives of the closed-form loss: exact to round-off, so a missing jump
term (the dose time's component) or a wrong assignment Jacobian shows at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sciml_bench.problem import codegen, reference, spec
from sciml_bench.problem.adjoint import AdjointError, adjoint_gradient
from sciml_bench.problem.check import expressible
from sciml_bench.problem.generated import not_expressible
from sciml_bench.problem.loss import loss_arrays

BOLUS = """
name = "bolus"
description = "one compartment: a bolus at tau, another at 6, the amount halved at 8"
stiff = false

[state]
names = ["x"]
initial = [0.0]

[parameters]
k = 0.3
D = 2.0
tau = 1.5

[equations]
x = "-k*x"

[[events]]
at = "tau"
assign = { x = "x + D" }

[[events]]
at = 6.0
assign = { x = "x + D" }

[[events]]
at = 8
assign = { x = "0.5*x" }

[time]
span = [0.0, 10.0]
save = { points = [1.0, 2.0, 3.0, 6.0, 7.0, 8.0, 9.0] }

[loss]
kind = "fit"
truth = { k = 0.25, D = 2.2, tau = 1.7 }
"""


def _bolus_closed(theta: np.ndarray, t: np.ndarray) -> np.ndarray:
    """x(t): 0 before tau, then decays; + D at 6 (x(6) reads the state after); halved at 8."""
    k, D, tau = theta
    x6 = D * np.exp(-k * (6 - tau)) + D
    x8 = 0.5 * x6 * np.exp(-2 * k)
    return np.array([0 * k if ti < tau else D * np.exp(-k * (ti - tau)) if ti < 6
                     else x6 * np.exp(-k * (ti - 6)) if ti < 8 else x8 * np.exp(-k * (ti - 8))
                     for ti in t])[:, None]  # fmt: skip


def _bateman(theta: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The oral-dosing problem's (gut, central): Bateman's function summed over the doses at
    0, t2 and 24 h (each dose D counts from its own time)."""
    ka, ke, D, t2 = theta
    gut, central = 0 * t + 0 * ka, 0 * t + 0 * ka
    for tau in (0 * ka, t2, 24.0 + 0 * ka):
        s = t - tau
        on = np.real(s) >= 0
        gut = gut + np.where(on, D * np.exp(-ka * s), 0)
        central = central + np.where(
            on, D * ka / (ka - ke) * (np.exp(-ke * s) - np.exp(-ka * s)), 0)
    return np.stack([gut, central], axis=1)


def _ball(theta: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The bouncing ball's (h, v): free fall from 10 m, each bounce where h reaches 0 going
    down, its time from the quadratic (so it moves with g and e), v -> -e v there."""
    g, e = theta
    tk, hk, vk = 0 * g, 10.0 + 0 * g, 0 * g
    hit = tk + (vk + np.sqrt(vk**2 + 2 * g * hk)) / g
    out = []
    for ti in t:
        while np.real(hit) <= ti:
            tk, hk, vk = hit, 0 * g, -e * (vk - g * (hit - tk))
            hit = tk + (vk + np.sqrt(vk**2 + 2 * g * hk)) / g
        s = ti - tk
        out.append([hk + vk * s - g / 2 * s**2, vk - g * s])
    return np.array(out)


def _closed_loss_gradient(
    p: spec.Problem, ref: reference.Reference, closed
) -> tuple[float, np.ndarray]:
    """The loss and its gradient from the closed form, by complex step (no truncation)."""
    W, O, C = loss_arrays(p, np.asarray(ref.observations))
    t = np.asarray(p.t_save)

    def loss(theta: np.ndarray) -> complex:
        y = closed(theta, t)
        return np.sum(W * (y - O) ** 2) + np.sum(C * y)

    theta0 = np.asarray(p.theta0, float)
    h = 1e-30
    g = [np.imag(loss(theta0 + 1j * h * e)) / h for e in np.eye(theta0.size)]
    return float(np.real(loss(theta0))), np.array(g)


@pytest.fixture(scope="module")
def dosing() -> tuple[spec.Problem, reference.Reference]:
    p = spec.load("nonstiff-pk-dosing")
    return p, reference.build(p)


@pytest.mark.slow  # a reference built, or a framework imported
def test_the_dosing_reference_is_batemans_function_and_its_gradient(dosing) -> None:
    p, ref = dosing
    t = np.asarray(p.t_save)
    want = _bateman(np.asarray(p.theta0), t)
    np.testing.assert_allclose(np.asarray(ref.y), want, rtol=1e-8, atol=1e-9 * want.max())
    loss, g = _closed_loss_gradient(p, ref, _bateman)
    assert ref.loss == pytest.approx(loss, rel=1e-9)
    np.testing.assert_allclose(ref.gradient, g, rtol=1e-7)
    # the second dose's time matters to the loss: its component is the jump term alone
    assert abs(g[3]) > 1e-2 * np.linalg.norm(g)
    assert ref.reference_error is not None and ref.reference_error < 1e-6
    # a time that moves: no complex step (no solver steps to a complex time), differences
    assert "central-difference" in ref.cross_check
    assert "moves with the parameters" in ref.complex_step_skipped


@pytest.mark.slow  # a reference built, or a framework imported
def test_an_assignment_that_scales_the_state_and_a_save_point_at_an_event() -> None:
    p = spec.loads(BOLUS, "bolus.toml")
    ref = reference.build(p)
    t = np.asarray(p.t_save)
    np.testing.assert_allclose(np.asarray(ref.y), np.real(_bolus_closed(np.asarray(p.theta0), t)),
                               rtol=1e-9, atol=1e-12)  # fmt: skip
    # x(6) and x(8) are the states after the events there (right-continuous)
    assert ref.y[3][0] > ref.y[2][0] and ref.y[5][0] < ref.y[4][0]
    _, g = _closed_loss_gradient(p, ref, _bolus_closed)
    np.testing.assert_allclose(ref.gradient, g, rtol=1e-8)


@pytest.fixture(scope="module")
def ball() -> tuple[spec.Problem, reference.Reference]:
    p = spec.load("nonstiff-bouncing-ball")
    return p, reference.build(p)


@pytest.mark.slow  # a reference built, or a framework imported
def test_the_bouncing_balls_reference_follows_its_bounces_and_their_moving_times(ball) -> None:
    """A root event: four bounces by t = 8, each time found by the solve; the sensitivities'
    jump there by the implicit function theorem, ``∂τ/∂θ = −(h_y S + h_θ)/(h_y f + h_t)``."""
    p, ref = ball
    t = np.asarray(p.t_save)
    want = np.real(_ball(np.asarray(p.theta0), t))
    np.testing.assert_allclose(np.asarray(ref.y), want, rtol=1e-8, atol=1e-8)
    _, g = _closed_loss_gradient(p, ref, _ball)
    np.testing.assert_allclose(ref.gradient, g, rtol=1e-8)
    assert ref.reference_error is not None and ref.reference_error < 1e-6
    assert "moves with the parameters" in ref.complex_step_skipped


@pytest.mark.slow  # a reference built, or a framework imported
def test_numpy_jax_and_torch_run_events_and_every_other_target_says_so() -> None:
    p = spec.load("nonstiff-pk-dosing")
    why = expressible(p)
    assert why["numpy"] is None and why["jax"] is None and why["torch"] is None
    assert why["casadi"] is None
    for target in ("julia", "diffsl", "sbml"):
        assert why[target] is not None and "[[events]]" in why[target], target
        assert "issue 51" in not_expressible(codegen.generate(p, target))
    # a root event: NumPy's (SciPy's rows and the reference) and CasADi's so far
    ball = expressible(spec.load("nonstiff-bouncing-ball"))
    assert ball["numpy"] is None and ball["casadi"] is None
    assert all(ball[t] for t in ("jax", "torch", "julia", "diffsl", "sbml"))
    # CasADi 3.8 never fires an event whose indicator reaches zero on an output time
    bolus = expressible(spec.loads(BOLUS, "bolus.toml"))
    assert "t = 6 sits on a save point" in bolus["casadi"], bolus["casadi"]
    with pytest.raises(AdjointError, match="events"):
        ref = reference.build(p)
        W, O, C = loss_arrays(p, np.asarray(ref.observations))
        adjoint_gradient(p, (W, O, C), 1e-8, 1e-10, "DOP853")


@pytest.mark.slow  # a reference built, or a framework imported
def test_a_run_gives_rows_where_events_run_and_refuses_the_others_by_name(
    tmp_path: Path,
) -> None:
    """``sciml-bench run`` on both event problems. Dosing (events at times): SciPy's row
    solves in pieces; Diffrax's solves and differentiates in pieces, its gradient (the
    moving dose time's component included) judged against the reference (torchdiffeq's:
    the next test, in process). The ball (a root event): SciPy's row finds the bounces in
    its own stepping loop; Diffrax's is unavailable, naming the kind, before its library
    loads."""
    r = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "run", "nonstiff-pk-dosing",
         "nonstiff-bouncing-ball", "--quick", "--json", "--out", str(tmp_path),
         "-b", "scipy,diffrax"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    rows = {(rec["problem"], rec["backend"]): rec for rec in json.loads(r.stdout)
            if rec.get("kind") != "verdict"}  # fmt: skip
    for problem in ("nonstiff-pk-dosing", "nonstiff-bouncing-ball"):
        s = rows[problem, "scipy"]
        assert s["status"] == "ok" and s["solution_error"] < 1e-5, (problem, s["reason"])
    d = rows["nonstiff-pk-dosing", "diffrax"]
    assert d["status"] == "ok" and d["solution_error"] < 1e-5, d["reason"]
    assert d["gradient_tier"] == "pass", d["gradient_error"]
    ball = rows["nonstiff-bouncing-ball", "diffrax"]
    assert ball["status"] == "unavailable" and "root function" in ball["reason"]


@pytest.mark.slow  # a reference built, or a framework imported
def test_torchode_reads_the_torch_source_and_is_refused_by_name(dosing) -> None:
    """torchode reads the torch source, which has the events' methods, and would solve
    straight through them: refused by the backend's declared kinds, before a build."""
    from sciml_bench.backends import get
    from sciml_bench.backends.base import ProblemNotExpressible
    from sciml_bench.backends.program import refuse_events

    p, ref = dosing
    cp = reference.compile_problem(p, ref)
    with pytest.raises(ProblemNotExpressible, match=r"torchode: .*\[\[events\]\]\) at set times"):
        refuse_events(get("torchode"), cp)
    refuse_events(get("torchdiffeq"), cp)  # runs them: no refusal


@pytest.mark.slow  # a reference built, or a framework imported
def test_a_restart_that_takes_the_dose_time_as_a_constant_fails_the_judge(dosing) -> None:
    """torchdiffeq's case with the events' times cut from the graph (``detach``): the solve
    is the same, the restart is what a user who hands the solver a number writes, and the
    dose time's component of the gradient is then 0, which the judge fails; with the times
    in the graph it passes."""
    pytest.importorskip("torchdiffeq")
    from sciml_bench.backends import get
    from sciml_bench.backends.base import CaseOptions
    from sciml_bench.measure.metrics import gradient_tier
    from sciml_bench.problem.gradient_measures import judged_scale, norm_error

    p, ref = dosing
    case = get("torchdiffeq").build(
        reference.compile_problem(p, ref),
        CaseOptions(solver="dopri5", gradient_method="backprop", rtol=1e-8, atol=1e-8,
                    max_steps=10_000))  # fmt: skip
    s = judged_scale(p.theta0, p.log_params)

    def error() -> tuple[float, np.ndarray]:
        _, g = case.check_grad(case.timed_grad(case.prepare(np.asarray(p.theta0))))
        return norm_error(np.asarray(g) * s, np.asarray(ref.gradient) * s), g

    right, g = error()
    assert gradient_tier(right, ref.reference_error) == "pass", right
    times = case.module.event_times
    case.module.event_times = lambda y: times(y).detach()
    naive, g = error()
    assert g[3] == 0.0 and gradient_tier(naive, ref.reference_error) == "fail", naive


@pytest.mark.slow  # a reference built, or a framework imported
@pytest.mark.parametrize("method", ["forward", "adjoint"])
def test_cvodes_runs_both_kinds_through_casadis_own_events(dosing, ball, method: str) -> None:
    """CVODES through CasADi's events (the DAE's ``zero``, option ``transition``): the
    dosing schedule (a dose time that moves with θ) and the ball (each bounce's time found
    and moving), forward sensitivities and the adjoint, each gradient against the closed
    form's and judged against the reference."""
    pytest.importorskip("casadi")
    from sciml_bench.backends import get
    from sciml_bench.backends.base import CaseOptions
    from sciml_bench.measure.metrics import gradient_tier
    from sciml_bench.problem.gradient_measures import judged_scale, norm_error

    for (p, ref), closed in ((dosing, _bateman), (ball, _ball)):
        case = get("cvodes").build(
            reference.compile_problem(p, ref),
            CaseOptions(solver="Adams", gradient_method=method, rtol=1e-8, atol=1e-8,
                        max_steps=10_000))  # fmt: skip
        theta0 = np.asarray(p.theta0)
        y = case.check_solve(case.timed_solve(case.prepare(theta0))).y
        want = np.real(closed(theta0, np.asarray(p.t_save)))
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
        _, g = case.check_grad(case.timed_grad(case.prepare(theta0)))
        s = judged_scale(p.theta0, p.log_params)
        exact = _closed_loss_gradient(p, ref, closed)[1]
        assert norm_error(np.asarray(g) * s, exact * s) < 1e-5, (p.name, g, exact)
        err = norm_error(np.asarray(g) * s, np.asarray(ref.gradient) * s)
        assert gradient_tier(err, ref.reference_error) == "pass", (p.name, err)


BAD = [
    ("at = 0.0", "inside the time span", "events[0].at"),
    ("at = 60.0", "inside the time span", "events[0].at"),
    ("at = \"central\"", "write when =", "events[0].at"),
    ("at = \"t\"", "write when =", "events[0].at"),
    ("when = \"central - 1\"", "expected \"down\"", "events[0].direction"),
    ("when = \"central - 1\"\ndirection = \"either\"", "two events", "events[0].direction"),
    ("when = \"ka - 1\"\ndirection = \"up\"", "never", "events[0].when"),
    ("at = 3.0\nwhen = \"central - 1\"\ndirection = \"up\"", "not both", "events[0].when"),
    ("trigger = \"central\"", "'when'", "events[0].trigger"),
    ("at = \"ka + 12\"\nassign = { blood = \"1\" }", "is not a state", "events[0].assign.blood"),
    ("at = \"t2 - 11\"", "sits on the save point", "events[0].at"),
]


@pytest.mark.parametrize(("table", "says", "key"), BAD)
def test_a_bad_event_is_refused_naming_the_key_and_the_fix(table: str, says: str,
                                                           key: str) -> None:  # fmt: skip
    text = (spec.problems_dir() / "nonstiff-pk-dosing.toml").read_text()
    head, _, _ = text.partition("[[events]]")
    table = table if "assign" in table else table + "\nassign = { gut = \"gut + dose\" }"
    bad = head + "[[events]]\n" + table + "\n" + text[text.index("[time]"):]
    with pytest.raises(spec.ProblemError) as e:
        spec.loads(bad, "dosing.toml")
    assert says in str(e.value) and f"[{key}]" in str(e.value)


def test_events_on_an_ensemble_are_refused() -> None:
    text = (spec.problems_dir() / "ensemble-lorenz.toml").read_text()
    with pytest.raises(spec.ProblemError, match="ensemble"):
        spec.loads(text + "\n[[events]]\nat = 1.0\nassign = { x = \"0\" }\n", "lorenz.toml")
