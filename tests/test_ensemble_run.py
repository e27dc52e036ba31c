"""Ensemble cases end to end: the reference and observations, every backend at a small
size in real workers, both semantics, the HDF5 round trip, and the failure statuses
(a diverging member, the case budget) with the rungs after a failure skipped."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from sciml_bench.measure.environment import cpu_model
from sciml_bench.problem import ensemble as ens
from sciml_bench.problem import ensemble_reference as er
from sciml_bench.problem import reference, spec
from sciml_bench.results import store
from sciml_bench.run import runner

# Lotka-Volterra fitted per member: members scale a and shift x0, so both maps and
# per-member observations are exercised.
LV = """
name = "ens-lv"
stiff = false
[state]
names = ["x", "y"]
initial = [1.0, 1.0]
[parameters]
a = 1.5
b = 1.0
[equations]
x = "a*x - b*x*y"
y = "-3*y + x*y"
[time]
span = [0.0, 2.0]
save = { linspace = [0.25, 2.0, 8] }
[tolerances]
rtol = 1.0e-7
atol = 1.0e-9
[loss]
kind = "fit"
truth = { a = 1.3 }
[ensemble]
sizes = [1, 4, 16]
sample = 3
[ensemble.vary]
a = { uniform = [0.8, 1.2], apply = "scale" }
x = { normal = [0.0, 0.1], apply = "shift" }
"""

# y' = a y^2 blows up at t = 1/a: with seed 136 members 0-2 have a < 0.5 (they live to
# t = 2) and members 3-6 do not.
BLOWUP = """
name = "ens-blowup"
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
[solver]
max_steps = 2000
[loss]
kind = "final"
weights = [1.0]
[ensemble]
sizes = [2, 8, 16]
seed = 136
sample = 2
[ensemble.vary]
a = { uniform = [0.1, 1.9], apply = "scale" }
"""

HAVE = {m: importlib.util.find_spec(m) is not None for m in ("jax", "torchdiffeq", "torchode")}


def _prepare(text: str, cache: Path, sizes: list[int]) -> tuple:
    problem = spec.loads(text, "e.toml")
    obs_path = er.observations_path(problem, max(sizes), cache)
    ref = er.get(problem, cache=cache)
    obs0 = er.load_observations(obs_path, 1)
    compiled = reference.compile_problem(problem, None, None if obs0 is None else obs0[0])
    return problem, compiled, obs_path, ref


def _run(problem, compiled, obs_path, ref, ladders, tmp: Path, settings=None) -> list[dict]:
    settings = settings or runner.Settings(cold=1, repeats=2, budget_s=120, steady_budget_s=2)
    writer = store.ResultsWriter(tmp / "e.h5", {}, "test")
    runner.run_ensemble(
        compiled, ens.to_json(problem.ensemble), None if obs_path is None else str(obs_path),
        ref.to_json(), ladders, writer, settings, progress=lambda m: None,
    )  # fmt: skip
    writer.finish("complete")
    return store.read(tmp / "e.h5").records  # what a reader sees: the HDF5 round trip


def test_observations_are_per_member_prefix_stable_and_cached(tmp_path: Path) -> None:
    problem = spec.loads(LV, "e.toml")
    obs = er.make_observations(problem, 5)
    assert obs.shape == (5, 8, 2)
    np.testing.assert_array_equal(er.make_observations(problem, 2), obs[:2])
    # member 1's data: the truth (a = 1.3, scaled by its draw) from its own x0
    b = ens.batch(problem.ensemble, np.asarray(problem.y0), 2, 2)
    truth = np.array([1.3, 1.0]) * b.scale[1] + b.shift[1]
    solo = reference._Solver(problem, "BDF", 1e-12, 1e-14).solve(truth, y0=b.y0[1])
    np.testing.assert_allclose(obs[1], solo, rtol=1e-8, atol=1e-10)
    path = er.observations_path(problem, 3, tmp_path)
    assert er.observations_path(problem, 7, tmp_path) == path  # one whole chunk, reused
    np.testing.assert_array_equal(er.load_observations(path, 5), obs)


def test_reference_gradient_is_that_of_the_mean_sample_loss(tmp_path: Path) -> None:
    problem, compiled, obs_path, ref = _prepare(LV, tmp_path, [4])
    assert np.asarray(ref.y).shape == (3, 8, 2) and ref.sample == 3
    assert ref.complex_step_agreement is not None and ref.complex_step_agreement < 1e-5
    # the full gradient by sensitivities, with its own error estimate (no FD in it)
    assert ref.gradient_check == "full" and 0 < ref.reference_error < 1e-8
    # a hand-rolled central difference of the mean loss over the three members
    obs = er.load_observations(obs_path, 3)
    b = ens.batch(problem.ensemble, np.asarray(problem.y0), 2, 3, obs)
    solver = reference._Solver(problem, "BDF", 1e-12, 1e-14)

    def mean_loss(theta: np.ndarray) -> float:
        P = b.thetas(theta)
        return float(np.mean([compiled.loss_W.ravel() @ ((solver.solve(P[m], y0=b.y0[m])
                                                          - obs[m]) ** 2).ravel()
                              for m in range(3)]))  # fmt: skip

    h = 1e-5
    gb = (mean_loss(np.array([1.5, 1.0 + h])) - mean_loss(np.array([1.5, 1.0 - h]))) / (2 * h)
    assert ref.gradient[1] == pytest.approx(gb, rel=1e-5)
    assert er.get(problem, cache=tmp_path).cached


@pytest.mark.slow
@pytest.mark.skipif(not all(HAVE.values()), reason="needs jax, torchdiffeq and torchode installed")
def test_every_backend_and_semantics_at_a_small_size(tmp_path: Path) -> None:
    problem, compiled, obs_path, ref = _prepare(LV, tmp_path, [4])
    ladders = runner.plan_ensemble(
        compiled, problem.ensemble.semantics, [4], ["diffrax", "torchdiffeq", "torchode", "scipy"]
    )
    got = {(s.backend, s.semantics) for s in ladders}
    assert got == {("diffrax", "independent"), ("diffrax", "coupled"),
                   ("torchdiffeq", "coupled"), ("torchode", "independent"),
                   ("scipy", "independent")}  # fmt: skip
    recs = {(r["backend"], r["semantics"]): r for r in _run(problem, compiled, obs_path, ref,
                                                             ladders, tmp_path)}  # fmt: skip
    for key, r in recs.items():
        assert r["status"] == "ok", (key, r["reason"])
        assert r["size"] == 4 and r["largest_ok_size"] == 4 and r["kind"] == "ensemble"
        # read back from the library's arrays, as ODE rows (no GPU reading on the CPU)
        assert (r["device"], r["device_requested"]) == ("cpu", "cpu"), key
        assert r["device_name"] == cpu_model() and "vram_max_mb" not in r, key
        assert r["solution_error"] < 1e-4, key
        assert r["solution_members_checked"] == 3
        assert r["throughput"] == pytest.approx(4 / r["solve_s"])
        assert len(r["solve_samples"]) == 2  # both checked, reported as a batch
        # members spread over the cores are part of an ensemble's time: never pinned
        assert r["steady_affinity"] == "off (an ensemble spreads its members over every core)"
        if key[0] != "scipy":
            assert r["gradient_tier"] in ("pass", "warn"), (key, r["gradient_error"])
            assert r["gradient_cosine"] > 0.9999
            # judged as an ODE row: the full reference, its own error, the worst component
            assert r["gradient_check"] == "full" and 0 < r["reference_error"] < 1e-8, key
            assert r["reference_error"] == ref.reference_error and r["gradient_worst_at"] in ("a", "b")
            assert set(r["gradient"]) == {"a", "b"} and len(r["gradient_judged"]) == 2
            # scored on the timed batch of 4, its first 3 (the sample) weighted alone
            assert (r["gradient_batch"], r["gradient_members"]) == ("timed", 3), key
    # independent: members take their own steps; coupled: one count for the batch
    ind, cpl = recs[("diffrax", "independent")], recs[("diffrax", "coupled")]
    assert ind["steps_min"] < ind["steps_max"]
    # (the coupled RMS norm averages members, so it may take fewer steps than the hardest)
    assert cpl["steps_min"] == cpl["steps_max"] > ind["steps_min"]
    tode = recs[("torchode", "independent")]
    assert tode["steps_min"] < tode["steps_max"]
    assert "grad_s" not in recs[("scipy", "independent")] or recs[("scipy", "independent")][
        "grad_s"] is None  # fmt: skip


@pytest.mark.slow
@pytest.mark.skipif(not HAVE["jax"], reason="needs jax (diffrax) installed")
def test_a_diverging_member_fails_its_rung_and_larger_rungs_are_skipped(tmp_path: Path) -> None:
    problem, compiled, obs_path, ref = _prepare(BLOWUP, tmp_path, [16])
    ladders = runner.plan_ensemble(compiled, ("independent",), [2, 8, 16], ["diffrax"])
    recs = _run(problem, compiled, obs_path, ref, ladders, tmp_path)
    assert [r["size"] for r in recs] == [2, 8, 16]
    assert recs[0]["status"] == "ok" and recs[0]["largest_ok_size"] == 2
    assert recs[1]["status"] in ("max_steps", "dt_underflow", "nonfinite", "solver_failure")
    assert "of 8 members (first: member 3)" in recs[1]["reason"]
    assert recs[2]["status"] == "skipped" and "size 8" in recs[2]["reason"]
    assert recs[2]["reason"].endswith("the largest size that completed is 2")
    assert recs[1]["largest_ok_size"] == recs[2]["largest_ok_size"] == 2


@pytest.mark.slow
def test_a_rung_over_the_budget_is_a_status_and_the_rest_are_skipped(tmp_path: Path) -> None:
    problem, compiled, obs_path, ref = _prepare(LV, tmp_path, [4])
    ladders = runner.plan_ensemble(compiled, ("independent",), [50_000, 100_000], ["scipy"])
    settings = runner.Settings(cold=1, repeats=1, budget_s=4, steady_budget_s=1)
    recs = _run(problem, compiled, None, ref, ladders, tmp_path, settings)
    assert [r["status"] for r in recs] == ["budget_exceeded", "skipped"]
    assert "4 s budget" in recs[0]["reason"]
    assert recs[1]["largest_ok_size"] is None and recs[1]["reason"].endswith("no size completed")


def test_cli_sizes_are_checked_before_anything_runs() -> None:
    from click.testing import CliRunner

    from sciml_bench.cli.main import main
    from sciml_bench.run.sizes import ensemble_sizes

    bad = CliRunner().invoke(main, ["run", "ensemble-lorenz", "--sizes", "16,4"])
    assert bad.exit_code == 2 and "strictly increasing" in bad.output
    for text, says in (("0", "0 members is outside [1, "), (" ", "give comma-separated")):
        bad = CliRunner().invoke(main, ["run", "ensemble-lorenz", "--sizes", text])
        assert bad.exit_code == 2 and says in bad.output, bad.output
    plain = CliRunner().invoke(main, ["run", "stiff-robertson", "--sizes", "1,4"])
    assert plain.exit_code == 2 and "[ensemble] section" in plain.output
    ladder = (1, 16, 256, 4096, 65536)
    assert ensemble_sizes(ladder, None, quick=True) == [1, 16]
    assert ensemble_sizes(ladder, [2, 3], quick=True) == [2, 3]
    assert ensemble_sizes(ladder, None, quick=False) == list(ladder)


def test_an_option_no_named_target_uses_is_an_error_not_ignored() -> None:
    from click.testing import CliRunner

    from sciml_bench.cli.main import main

    for args, flag, target in (
        (["ensemble-lorenz", "--tolerances", "1e-4"], "--tolerances", "single-trajectory"),
        (["ensemble-lorenz", "--dt", "0.1"], "--dt", "single-trajectory"),
        (["stiff-robertson", "--precision", "bf16"], "--precision", "CNN baselines"),
        (["cnn", "--solver", "Tsit5"], "--solver", "[ensemble] section"),
    ):
        r = CliRunner().invoke(main, ["run", *args])
        assert r.exit_code == 2, r.output
        assert f"Error: {flag} applies to " in r.output and target in r.output
        assert "none is named in this run" in r.output
