"""The tight reference: published values, gradient cross-checks, the cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from sciml_bench.problem import reference, reference_solvers, spec

ROOT = Path(__file__).resolve().parent.parent


def test_robertson_matches_the_published_ivp_test_set_values() -> None:
    # Hairer & Wanner / the Bari IVP test set (problem ROBER): y(40) and y(1e11).
    data = tomllib.loads((ROOT / "problems" / "stiff-robertson.toml").read_text())
    data["time"] = {"span": [0.0, 1e11], "save": {"points": [40.0, 1e11]}}
    p = spec.from_dict(data)
    solver = reference._Solver(p, "Radau", 1e-12, 1e-20)
    y = solver.solve(np.asarray(p.theta0))
    np.testing.assert_allclose(
        y[0], [0.7158270687193772, 9.185534764557e-06, 0.2841637457458], rtol=1e-9
    )
    np.testing.assert_allclose(
        y[1], [0.2083340149701255e-07, 0.8333360770334713e-13, 0.9999999791665050], rtol=1e-7
    )


@pytest.fixture(scope="module")
def rober_ref() -> reference.Reference:
    return reference.get(spec.load("stiff-robertson"))


def test_fd_gradient_agrees_with_complex_step(rober_ref: reference.Reference) -> None:
    assert rober_ref.complex_step_agreement is not None
    assert rober_ref.complex_step_agreement < 1e-6
    g = np.asarray(rober_ref.gradient)
    assert np.all(np.isfinite(g)) and np.all(g != 0)


def test_gradient_is_not_degenerate_and_loss_positive(rober_ref: reference.Reference) -> None:
    assert rober_ref.loss > 0
    # log-space components are all of a meaningful size (sum(y) would give zeros)
    scaled = np.abs(np.asarray(rober_ref.gradient) * np.asarray([0.04, 3e7, 1e4]))
    assert scaled.min() > 1e-6 * scaled.max()


#: two processes asking for one reference at once: each prints whether it read the cache
_TWO_ASK = """
import sys
from sciml_bench.problem import reference, spec
ref = reference.get(spec.load("stiff-robertson"))
print("cached" if ref.cached else "built", ref.cache_path)
"""


@pytest.mark.slow
def test_two_processes_asking_for_one_reference_build_it_once(tmp_path: Path) -> None:
    """Started together on an empty cache, the second waits on the first's build (the
    entry's lock) and reads it: one 'built', one 'cached' (ROBER's reference takes about 3 s
    here, longer than the processes' starts differ; without the lock both built it)."""
    env = {**os.environ, "SCIML_BENCH_CACHE": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", _TWO_ASK], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]  # fmt: skip
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    said = sorted(out.split()[0] for out, _ in outs)
    assert said == ["built", "cached"], outs
    assert len({out.split()[1] for out, _ in outs}) == 1  # one entry, one path


@pytest.mark.slow
def test_cache_hit_and_corruption_rebuild(tmp_path: Path) -> None:
    p = spec.load("stiff-robertson")
    first = reference.get(p, cache=tmp_path)
    assert not first.cached
    second = reference.get(p, cache=tmp_path)
    assert second.cached and second.gradient == first.gradient
    (entry,) = tmp_path.glob("*.json")
    text = entry.read_text()
    entry.write_text(text[: len(text) // 2])  # truncated
    with pytest.warns(UserWarning, match="corrupt"):
        third = reference.get(p, cache=tmp_path)
    assert not third.cached
    np.testing.assert_allclose(third.gradient, first.gradient, rtol=1e-10)
    doc = json.loads(entry.read_text())
    doc["reference"]["loss"] *= 2  # a bit flip the checksum must catch
    entry.write_text(json.dumps(doc))
    with pytest.warns(UserWarning, match="checksum"):
        assert not reference.get(p, cache=tmp_path).cached


def test_cli_reference_json(rober_ref: reference.Reference) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "reference", "stiff-robertson", "--json"],
        capture_output=True, text=True, timeout=300, check=True,
    )
    doc = json.loads(r.stdout)
    assert set(doc) >= {"t", "y", "loss", "gradient", "method"}
    assert list(doc["gradient"]) == ["k1", "k2", "k3"]
    assert len(doc["t"]) == 40 and len(doc["y"]) == 40 and len(doc["y"][0]) == 3
    assert doc["gradient"]["k1"] == pytest.approx(rober_ref.gradient[0], rel=1e-12)
    assert "BDF" in doc["method"]


# --- what a reference claims (issue 23 D) -------------------------------------------------

SMALL = """
name = "{name}"
stiff = false
[state]
names = ["y"]
initial = [1.0]
[parameters]
{params}
[equations]
y = "{rhs}"
[time]
span = [0.0, 2.0]
save = {{ linspace = [0.5, 2.0, 4] }}
[loss]
kind = "final"
weights = [1.0]
{extra}
"""


def small(name: str, rhs: str, params: str = "k = 0.5", extra: str = "") -> spec.Problem:
    return spec.loads(SMALL.format(name=name, rhs=rhs, params=params, extra=extra), "s.toml")


def test_the_method_string_says_the_cross_check_ran_and_what_it_found(
    rober_ref: reference.Reference,
) -> None:
    assert rober_ref.complex_step_skipped == "" and rober_ref.cross_check == "complex-step"
    assert rober_ref.gradient_method == "forward sensitivities"
    assert "complex-step cross-check: agrees to" in rober_ref.method
    assert f"{rober_ref.complex_step_agreement:.2g}" in rober_ref.method
    # the estimate is the larger of the two tolerances' disagreement and the cross-check's
    assert rober_ref.reference_error == max(rober_ref.tolerance_error,
                                            rober_ref.cross_check_agreement)  # fmt: skip
    assert f"own error estimate {rober_ref.reference_error:.2g}" in rober_ref.method


@pytest.mark.parametrize(
    ("rhs", "params", "why"),
    [
        ("-(" + "+".join(f"k{i}" for i in range(17)) + ")*y",
         "\n".join(f"k{i} = 0.05" for i in range(17)), "17 parameters > 16"),
        ("-k*abs(y)", "k = 0.5", "abs(), which is not analytic"),
    ],
)  # fmt: skip
def test_a_skipped_cross_check_says_why_and_the_method_claims_none(
    rhs: str, params: str, why: str, tmp_path: Path
) -> None:
    loose = "[reference]\nrtol = 1.0e-6"  # 35 solves: what is checked is the claim, not them
    ref = reference.get(small("skip", rhs, params, loose), cache=tmp_path)
    assert ref.complex_step_agreement is None
    assert ref.complex_step_skipped.startswith("not run: ") and why in ref.complex_step_skipped
    # central differences over every component check it instead, and the method says so
    assert ref.cross_check.startswith("central-difference")
    assert ref.complex_step_skipped.endswith(f"checked by {ref.cross_check} instead")
    # a scalar problem: one central difference at h (its truncation only raises the estimate)
    assert "central-difference (h) cross-check: agrees to" in ref.method
    assert "complex-step" not in ref.method
    assert len(ref.gradient) == len(ref.gradient_by_name(small("skip", rhs, params).param_names))


def test_a_cross_check_that_fails_keeps_the_gradient_and_says_why(tmp_path: Path) -> None:
    # y' = k y^2 blows up at t = 1/k: k = 0.48 lives to t = 2, k e^0.1 = 0.53 does not, so
    # central differences at h = 0.1 fail; the sensitivities at θ0 itself do not (abs()
    # keeps complex step out, so that central differences are the cross-check)
    p = small("fd-blowup", "k*y*abs(y)", "k = 0.48", "[reference]\nfd_step = 0.1\nrtol = 1.0e-6")
    ref = reference.get(p, cache=tmp_path)
    assert not ref.missing and len(ref.y) == 4
    np.testing.assert_allclose(np.asarray(ref.y)[-1, 0], 1 / (1 - 0.96), rtol=1e-3)
    # L = y(2) = 1/(1 - 2k): dL/dk = 2/(1 - 2k)^2 = 1250, to what the file's rtol 1e-6
    # gives near the blow-up (measured 5.5e-5 off)
    assert ref.gradient == pytest.approx([2 / (1 - 0.96) ** 2], rel=1e-3)
    assert ref.gradient_missing == "" and ref.cross_check == ""
    assert "central differences not run to the end" in ref.complex_step_skipped
    assert "; no cross-check (" in ref.method


def test_a_reference_that_cannot_be_built_is_missing_with_the_reason(tmp_path: Path) -> None:
    # y' = k y^2 blows up at t = 1 < 2 (tests/data/blowup.toml; a looser rtol fails sooner)
    p = small("blowup", "k*y^2", "k = 1.0", "[reference]\nrtol = 1.0e-6")
    ref = reference.get_or_missing(p, cache=tmp_path)
    assert ref.missing.startswith("reference solver BDF failed for 'blowup'")
    assert "which no other method or tolerance gets past" in ref.missing
    assert ref.y == [] and ref.gradient == [] and np.isnan(ref.loss)
    assert ref.method.startswith("none: ") and not list(tmp_path.glob("*.json"))  # not cached
    # a fit loss whose truth model fails too: the backends' loss says O = 0 stands in
    fit = spec.loads(SMALL.format(name="fit-blowup", rhs="k*y^2", params="k = 1.0",
                                  extra="[reference]\nrtol = 1.0e-6")
                     .replace('kind = "final"\nweights = [1.0]',
                              'kind = "fit"\ntruth = { k = 1.2 }'), "f.toml")  # fmt: skip
    ref = reference.get_or_missing(fit, cache=tmp_path)
    assert "O = 0" in ref.missing and np.asarray(ref.observations).shape == (4, 1)
    compiled = reference.compile_problem(fit, ref)
    assert np.all(compiled.loss_O == 0) and np.all(compiled.loss_W > 0)


def test_the_gradient_pair_takes_its_own_tolerance(tmp_path: Path) -> None:
    """``[reference] gradient_rtol``: the solution stays at the reference's rtol, the gradient
    pair runs at gradient_rtol and 10x (atol in proportion), and its estimate says so.
    L = y(2) = e^(-2k), dL/dk = -2 e^(-2k)."""
    p = small("grad-rtol", "-k*y", extra="[reference]\ngradient_rtol = 1.0e-7")
    cfg = reference._Settings.of(p)
    assert cfg.rtol == 1e-12 and cfg.gradient_factor == pytest.approx(1e5)
    assert all(a.gradient_factor == cfg.gradient_factor for a in reference._attempts(cfg))
    loose = reference.get(p, cache=tmp_path)
    tight = reference.get(small("tight", "-k*y"), cache=tmp_path)
    assert loose.rtol == tight.rtol == 1e-12 and loose.y == tight.y  # the same solution
    assert "at rtol 1e-07, atol" in loose.method and "at rtol 1e-12, atol" in tight.method
    exact = -2 * np.exp(-2 * 0.5)
    off = abs(loose.gradient[0] / exact - 1)
    # the pair's disagreement (1e-6's error) bounds the 1e-7 gradient's, and is far above
    # the default pair's: the key took effect
    assert off <= loose.tolerance_error and loose.tolerance_error > 100 * tight.tolerance_error
    assert abs(tight.gradient[0] / exact - 1) < 1e-9
    with pytest.raises(spec.ProblemError, match=r"\[reference.gradient_rtol\]"):
        small("bad", "-k*y", extra="[reference]\ngradient_rtol = 0.0")


def test_a_cached_reference_says_where_it_lies(tmp_path: Path) -> None:
    p = small("where", "-k*y")
    built = reference.get(p, cache=tmp_path)
    (entry,) = tmp_path.glob("*.json")
    assert not built.cached and built.cache_path == str(entry)
    assert json.loads(entry.read_text())["reference"]["cache_path"] == ""
    again = reference.get(p, cache=tmp_path)
    assert again.cached and again.cache_path == str(entry)


def test_richardson_cancels_the_step_squared_error() -> None:
    """L(θ) = exp(8θ) at θ = 1, h = 0.01 in natural units: central FD is off by about
    h²·8²/6 ≈ 1.1e-3 (relative); extrapolated from h and h/2 the error is O(h⁴), and the
    spread says how much was removed."""
    loss = lambda th: float(np.exp(8 * th[0]))  # noqa: E731
    theta, log, exact = np.array([1.0]), np.array([False]), 8 * np.exp(8.0)
    plain = reference._fd_gradient(loss, theta, log, 0.01)[0]
    g, spread = reference.richardson(loss, theta, log, 0.01)
    assert abs(plain / exact - 1) == pytest.approx(64e-4 / 6, rel=0.01)
    assert abs(g[0] / exact - 1) < 1e-6
    assert spread == pytest.approx(0.75 * 64e-4 / 6, rel=0.02)


@pytest.mark.parametrize(("method", "dtype"), [("BDF", float), ("BDF", complex), ("Radau", float)])
def test_the_lapack_direct_solvers_are_scipys_bit_for_bit(method: str, dtype: type) -> None:
    """The reference's BDF and Radau call LAPACK's getrf/getrs without lu_factor's and
    lu_solve's wrappers: the same steps, evaluations, factorisations and solution, to the
    last bit, on ROBER to t = 40 (complex: the complex-step check's solve); a NaN in the
    Jacobian still raises lu_factor's ValueError."""
    from scipy.integrate import solve_ivp

    data = tomllib.loads((ROOT / "problems" / "stiff-robertson.toml").read_text())
    data["time"] = {"span": [0.0, 40.0], "save": {"points": [1.0, 40.0]}}
    p = spec.from_dict(data)
    s = reference._Solver(p, method, 1e-10, 1e-16)
    theta = np.asarray(p.theta0, dtype=dtype) * (np.exp(1e-30j) if dtype is complex else 1)
    y0 = np.asarray(p.y0, dtype=dtype)

    def solve(m: object, jac: object = None) -> object:
        jac = jac or (lambda t, y: s.jac(t, y, theta))
        # the reference's first step (FIRST_STEP of the span), given to both alike
        return solve_ivp(lambda t, y: s.rhs(t, y, theta), p.t_span, y0, method=m,
                         t_eval=p.t_save, rtol=1e-10, atol=1e-16, jac=jac,
                         first_step=reference_solvers.FIRST_STEP * 40.0)  # fmt: skip

    ours, scipys = solve(reference_solvers.ode_solver(method)), solve(method)
    assert ours.success and (ours.nfev, ours.njev, ours.nlu) == (scipys.nfev, scipys.njev, scipys.nlu)
    assert np.array_equal(ours.y, scipys.y) and ours.y.dtype == np.dtype(dtype)
    assert ours.nlu > 10 and abs(ours.y[0, -1] - 0.7158270687193772) < 1e-8  # y1(40), IVP test set
    with pytest.raises(ValueError, match="infs or NaNs"):
        solve(reference_solvers.ode_solver(method), lambda t, y: np.full((3, 3), np.nan))


@pytest.mark.parametrize("method", ["BDF", "Radau"])
def test_the_sparse_reference_solvers_order_for_fill_and_solve_as_scipys(method: str) -> None:
    """On the 2-D Brusselator at N = 16 (512 states) the reference's sparse LU
    (minimum degree on Mᵀ + M) leaves fewer non-zeros in its factors than SciPy's COLAMD,
    and the solve agrees with SciPy's own to well within its tolerance."""
    import scipy.sparse as sp
    from scipy.integrate import solve_ivp
    from scipy.sparse.linalg import splu

    p = spec.at_size(spec.load("stiff-brusselator-2d"), 16)
    s = reference._Solver(p, method, 1e-8, 1e-12)
    theta = np.asarray(p.theta0, float)

    def solve(m: object) -> object:
        return solve_ivp(lambda t, y: s.rhs(t, y, theta), (0.0, 2.0), p.y0, method=m,
                         t_eval=[1.0, 2.0], rtol=1e-8, atol=1e-12,
                         jac=lambda t, y: s.jac(t, y, theta))  # fmt: skip

    ours, scipys = solve(reference_solvers.ode_solver(method)), solve(method)
    assert ours.success and scipys.success and ours.nlu > 5
    assert np.max(np.abs(ours.y - scipys.y) / (1e-6 + np.abs(scipys.y))) < 1e-6
    jac = s.jac(2.0, np.asarray(p.y0, float), theta)
    m = (sp.identity(jac.shape[0], format="csc") - 1e-3 * jac).tocsc()
    solver = reference_solvers.ode_solver(method)(lambda t, y: y, 0.0, np.ones(512), 1.0,
                                                  jac=lambda t, y: jac)  # fmt: skip
    fill = solver.lu(m)
    assert fill.L.nnz + fill.U.nnz < 0.8 * (splu(m).L.nnz + splu(m).U.nnz)


def test_an_array_problem_reference_is_full_and_agrees_with_complex_step() -> None:
    """The 1-D heat equation at 20 points, its reference at rtol 1e-9."""
    data = tomllib.loads((ROOT / "tests" / "data" / "heat-1d.toml").read_text())
    data["sizes"]["n"]["default"] = 20
    data["reference"] = {"rtol": 1e-9}
    ref = reference.build(spec.from_dict(data))
    assert ref.gradient_method == "forward sensitivities"
    assert "at rtol 1e-09" in ref.method and "checked against 10x both" in ref.method
    assert ref.complex_step_agreement is not None and ref.complex_step_agreement < 1e-6


def _first_step_only(method: str) -> object:
    """SciPy's ``method`` with the reference's first step and nothing else of it."""
    from scipy import integrate

    base = getattr(integrate, method)

    def init(self: object, fun: object, t0: float, y0: object, t_bound: float, **kw: object) -> None:
        kw.setdefault("first_step", reference_solvers.FIRST_STEP * abs(t_bound - t0))
        base.__init__(self, fun, t0, y0, t_bound, **kw)

    return type(method, (base,), {"__init__": init})


def test_a_start_at_rest_with_an_input_switching_on_is_followed() -> None:
    """A pair of states at their steady state (f(t0) is round-off) whose input switches on
    at t0, Fiedler_BMCSystBiol2016's RAF/pRAF in two states: SciPy's BDF at rtol 1e-12,
    choosing its first step from f(t0), takes one step over the whole pulse (4 RHS
    evaluations); the reference's first step (FIRST_STEP of the span) follows it, as
    LSODA does."""
    from scipy.integrate import solve_ivp

    text = """
name = "pulse"
stiff = true
[state]
names = ["a", "b"]
initial = ["k2/(k0 + k2)", "k0/(k0 + k2)"]
[parameters]
k0 = 0.0233
k2 = 1.225
[equations]
a = "-(k0 - 149.6*(exp(-t/0.2517) - 1)*exp(-t/0.02107))*a + k2*b"
b = "(k0 - 149.6*(exp(-t/0.2517) - 1)*exp(-t/0.02107))*a - k2*b"
[time]
span = [0.0, 1.0]
save = [1.0]
[loss]
kind = "final"
weights = [1.0, 0.0]
"""
    p = spec.loads(text)
    th = np.asarray(p.theta0)
    ours = reference.solve_at(p, th, "BDF", 1e-12, 1e-16)[-1, 0]
    s = reference._Solver(p, "BDF", 1e-12, 1e-16)
    kw = {"t_eval": [1.0], "rtol": 1e-12, "atol": 1e-16}
    y0 = np.asarray(p.y0)
    plain = solve_ivp(lambda t, y: s.rhs(t, y, th), (0.0, 1.0), y0, method="BDF",
                      jac=lambda t, y: s.jac(t, y, th), **kw)  # fmt: skip
    lsoda = solve_ivp(lambda t, y: s.rhs(t, y, th), (0.0, 1.0), y0, method="LSODA",
                      jac=lambda t, y: s.jac(t, y, th), **kw).y[0, -1]  # fmt: skip
    assert ours == pytest.approx(lsoda, rel=1e-8) and lsoda < 0.93
    assert plain.nfev < 10 and plain.y[0, -1] > 0.98  # SciPy's own first step: missed


def test_the_reference_checks_its_solution_by_a_second_method() -> None:
    """ROBER's BDF solution against Radau at rtol 1e-10, on the rows' measure."""
    p = spec.load("stiff-robertson")
    y = reference.solve_at(p, np.asarray(p.theta0), "BDF", 1e-12, 1e-16)
    check = reference.solution_check(p, "BDF", 1e-12, 1e-16, y)
    assert check.kind == "Radau at rtol 1e-10" and not check.unjudged
    assert check.agreement is not None and check.agreement < 1e-9


LORENZ = """
name = "lorenz-25"
stiff = true
[state]
names = ["x", "y", "z"]
initial = [1.0, 1.0, 1.0]
[parameters]
sigma = 10.0
rho = 28.0
beta = 2.6666666666666665
[equations]
x = "sigma*(y - x)"
y = "x*(rho - z) - y"
z = "x*y - beta*z"
[time]
span = [0.0, 25.0]
save = { linspace = [0.0, 25.0, 11] }
[loss]
kind = "fit"
truth = { rho = 28.5 }
"""


@pytest.mark.slow
def test_a_reference_that_cannot_tell_solutions_apart_leaves_them_unjudged() -> None:
    """Lorenz to t = 25: BDF at rtol 1e-12 and Radau at 1e-10 part ways (chaos amplifies
    their round-off past 1e-6), so a row's solution error cannot be told from the
    reference's: unjudged, saying so and that no tighter or other setting agrees."""
    from sciml_bench.run.ode import solution_scores

    p = spec.loads(LORENZ)
    y = reference.solve_at(p, np.asarray(p.theta0), "BDF", 1e-12, 1e-14)
    check = reference.solution_check(p, "BDF", 1e-12, 1e-14, y)
    assert check.agreement is not None and check.agreement > reference.SOLUTION_CHECK_BOUND
    assert "cannot tell the rows' solutions apart" in check.unjudged
    assert "chaotic" in check.unjudged
    ref = reference.Reference(
        problem=p.name, content_hash="", method="", rtol=1e-12, atol=1e-14, t=list(p.t_save),
        y=y.tolist(), observations=None, loss=0.0, gradient=[], gradient_method="none",
        fd_step=1e-4, complex_step_agreement=None, build_s=0.0,
        solution_unjudged=check.unjudged)  # fmt: skip
    row = solution_scores(p, ref, y * (1 + 1e-3))
    assert row["solution_unjudged"] == check.unjudged
    assert row["solution_error"] == pytest.approx(1e-3, rel=1e-6)


def test_the_sensitivity_solve_takes_the_reference_lu_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Forward sensitivities (the reference gradient of a small problem) solve with the
    reference's LAPACK-direct Radau, not SciPy's wrapped one: the same loss and gradient to
    the last bit, and the solver class the solve was given is the reference's."""
    from sciml_bench.problem import sensitivity

    data = tomllib.loads((ROOT / "problems" / "stiff-robertson.toml").read_text())
    data["time"] = {"span": [0.0, 40.0], "save": {"points": [1.0, 40.0]}}
    p = spec.from_dict(data)
    n, k = len(p.t_save), p.n_state
    loss = (np.ones((n, k)), np.zeros((n, k)), np.zeros((n, k)))
    used: list[object] = []
    real = sensitivity.ode_solver

    def spy(method: str) -> object:
        used.append(real(method))
        return used[-1]

    monkeypatch.setattr(sensitivity, "ode_solver", spy)
    ours = sensitivity.scalar_gradient(p, loss, 1e-9, 1e-14, "Radau")
    # SciPy's own Radau (its wrapped LU), started from the reference's first step
    monkeypatch.setattr(sensitivity, "ode_solver", lambda m: _first_step_only(m))
    scipys = sensitivity.scalar_gradient(p, loss, 1e-9, 1e-14, "Radau")
    assert used and used[0] is reference_solvers.ode_solver("Radau") and used[0] != "Radau"
    assert used[0].__mro__[1].__name__ == "Radau"
    assert ours[0] == scipys[0] and np.array_equal(ours[1], scipys[1])
    assert np.all(np.isfinite(ours[1])) and np.any(ours[1] != 0)


#: the fields a reference of each version holds (sha256 of their names, in order): a change
#: to what a reference contains must bump REFERENCE_VERSION, or cached references of the old
#: version would be read as if they held the new fields (issue 53: the cross-check above
#: 1,000 states was added without a bump, and publication read references that lacked it)
FIELDS_OF_VERSION = {8: "fbce6797c73d"}


def test_the_reference_version_moves_with_its_fields() -> None:
    import dataclasses
    import hashlib

    names = ",".join(f.name for f in dataclasses.fields(reference.Reference))
    digest = hashlib.sha256(names.encode()).hexdigest()[:12]
    known = FIELDS_OF_VERSION.get(reference.REFERENCE_VERSION)
    assert known == digest, (
        f"the Reference's fields changed (now {digest}) but REFERENCE_VERSION is still "
        f"{reference.REFERENCE_VERSION}: bump it and add {{version: {digest!r}}} here"
        if known else f"add {{{reference.REFERENCE_VERSION}: {digest!r}}} to FIELDS_OF_VERSION")
