"""Array problems end to end: ladders of sizes in real workers, the memory refusal, the
ladder stopping after a failure, the Jacobian kinds SciPy offers, the rows' keys, and the
growth exponents in the table, the report and the figure."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sciml_bench.backends import scipy as scipy_backend
from sciml_bench.backends.base import CaseOptions
from sciml_bench.problem import reference, spec
from sciml_bench.results import growth, store
from sciml_bench.results.table import table
from sciml_bench.run import runner

ROOT = Path(__file__).resolve().parent.parent

#: the 1-D heat equation with decay: a cheap stiff array problem, tridiagonal Jacobian
HEAT = ROOT / "tests" / "data" / "heat-1d.toml"


@pytest.fixture(scope="module")
def heat() -> Path:
    return HEAT


def compiled_at(problem: spec.Problem, size: int) -> reference.CompiledProblem:
    p = spec.at_size(problem, size)
    return reference.compile_problem(p, reference.get(p))


def test_memory_refusal_and_the_ladder_in_real_workers(heat: Path, tmp_path: Path) -> None:
    """With 10 kB 'available', a dense Jacobian of 40 states (38 kB) is refused up front as a
    skipped row giving the estimate; the sparse ladder runs it. Every row names its size,
    states, non-zeros, Jacobian kind and linear solver, and the reference's rtol."""
    problem = spec.load(heat)
    first = compiled_at(problem, 4)
    ladders = runner.plan_sized(first, ["scipy"], [4, 40])
    assert [(lad.case.solver, lad.jacobian) for lad in ladders] == [
        ("BDF", "dense"),
        ("BDF", "sparse"),
    ]
    writer = store.ResultsWriter(tmp_path / "r.h5", {}, "test")
    settings = runner.Settings(cold=1, repeats=3, budget_s=120.0, steady_budget_s=2.0)
    rows = runner.run_sized(problem, ladders, writer, settings, progress=lambda m: None,
                            available=10_000)  # fmt: skip
    got = {(r["jacobian"], r["size"]): r for r in rows}
    refused = got[("dense", 40)]
    assert refused["status"] == "skipped" and refused["n_state"] == 40
    assert "dense Jacobian of 40 states needs about 37.5 KiB" in refused["reason"]
    assert refused["largest_ok_size"] == 4
    for key in (("dense", 4), ("sparse", 4), ("sparse", 40)):
        r = got[key]
        assert r["status"] == "ok", r["reason"]
        assert r["n_state"] == key[1] and r["jac_nnz"] == 3 * key[1] - 2
        assert r["solution_error"] < 1e-4 and r["reference_rtol"] == 1e-12
        assert r["peak_rss_mb"] > 0 and len(r["solve_samples"]) >= 3
        # one process a rung: its steady samples run on every core, and it says why
        from sciml_bench.measure.affinity import RUNG_UNPINNED

        assert r["steady_affinity"] == f"off ({RUNG_UNPINNED})"
    assert "splu" in got[("sparse", 40)]["linear_solver"]
    assert "dense" in got[("dense", 4)]["linear_solver"]
    back = {(r["jacobian"], r["size"]): r for r in store.read(tmp_path / "r.h5").records}
    assert back[("sparse", 40)]["jac_nnz"] == 118 and back[("dense", 40)]["status"] == "skipped"


def test_after_a_failure_larger_sizes_are_skipped(heat: Path, tmp_path: Path) -> None:
    """A budget no worker can meet kills size 4; size 40 is not run and says why."""
    problem = spec.load(heat)
    first = compiled_at(problem, 4)
    ladders = runner.plan_sized(first, ["scipy"], [4, 40], jacobians=["sparse"])
    writer = store.ResultsWriter(tmp_path / "r.h5", {}, "test")
    settings = runner.Settings(cold=1, repeats=3, budget_s=0.2)
    rows = runner.run_sized(problem, ladders, writer, settings, progress=lambda m: None)
    assert [(r["size"], r["status"]) for r in rows] == [(4, "budget_exceeded"), (40, "skipped")]
    assert rows[1]["reason"] == "not run: size 4 already ended budget_exceeded; no size completed"
    assert rows[1]["largest_ok_size"] is None


def test_a_backend_without_array_code_is_a_row(heat: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(scipy_backend.ScipyBackend, "array_problems", False)
    problem = spec.load(heat)
    ladders = runner.plan_sized(compiled_at(problem, 4), ["scipy"], [4, 40])
    writer = store.ResultsWriter(tmp_path / "r.h5", {}, "test")
    rows = runner.run_sized(problem, ladders, writer, runner.Settings(), progress=lambda m: None)
    assert len(rows) == 1 and rows[0]["status"] == "unavailable"
    assert "no array code yet" in rows[0]["reason"]


def test_memory_refusal_estimate() -> None:
    reason = runner.memory_refusal("dense", 30_000, 24 * 2**30)
    assert reason and "30000 states needs about 20.1 GiB" in reason and "24 GiB available" in reason
    assert runner.memory_refusal("dense", 3_000, 24 * 2**30) is None
    assert runner.memory_refusal("sparse", 10**6, 1) is None
    assert runner.memory_refusal("none", 10**6, 1) is None


def test_plans_offer_each_library_its_kinds(heat: Path) -> None:
    first = compiled_at(spec.load(heat), 4)
    ladders = runner.plan_sized(
        first, ["scipy", "diffrax", "torchdiffeq", "torchode", "julia"], [4, 40]
    )
    kinds = [(lad.case.backend, lad.case.solver, lad.jacobian) for lad in ladders]
    assert kinds == [
        ("scipy", "BDF", "dense"), ("scipy", "BDF", "sparse"), ("diffrax", "Kvaerno4", "dense"),
        ("torchdiffeq", "dopri5", "none"), ("torchode", "dopri5", "none"),
        ("julia", "Rodas5P", "dense"), ("julia", "Rodas5P", "sparse"),
    ]  # fmt: skip
    only = runner.plan_sized(
        first, ["scipy", "diffrax"], [4], solvers=["LSODA"], jacobians=["sparse"]
    )
    # a kind a library does not offer is an unavailable ladder, not its own kind run in its
    # place (Diffrax: dense only, through lineax)
    assert [(lad.case.solver, lad.jacobian, bool(lad.unavailable)) for lad in only] == [
        ("LSODA", "sparse", False),
        ("Kvaerno4", "sparse", True),
    ]


@pytest.mark.parametrize("solver", ["BDF", "Radau", "LSODA"])
def test_scipy_jacobian_kinds_solve_alike(heat: Path, solver: str) -> None:
    """Dense and sparse (LSODA: banded) Jacobians give the same solution, each named."""
    problem = compiled_at(spec.load(heat), 40)
    ys, names = [], []
    for kind in ("dense", "sparse"):
        opts = CaseOptions(solver, "none", 1e-8, 1e-11, 10**5, extra={"jacobian": kind})
        case = scipy_backend.ScipyBackend().build(problem, opts)
        ys.append(case.solve(problem.theta0).y)
        names.append(case.info["linear_solver"])
    np.testing.assert_allclose(ys[0], ys[1], rtol=1e-6, atol=1e-9)
    assert ("banded" in names[1] and "lband=1, uband=1" in names[1]) if solver == "LSODA" \
        else "splu" in names[1]  # fmt: skip


def record(backend: str, jacobian: str, n: int, solve: float, grad: float | None = None) -> dict:
    return {"kind": "ode", "problem": "p", "backend": backend, "solver": "S",
            "gradient_method": "none" if grad is None else "g", "jacobian": jacobian,
            "size": n, "n_state": 3 * n, "status": "ok", "solve_s": solve, "grad_s": grad,
            "device": "cpu"}  # fmt: skip


def test_exponents_fit_the_three_largest_sizes() -> None:
    """The slope over the three largest sizes, least squares in log-log: the overhead-bound
    smallest rung is left out, a kink inside the three is averaged (dense: 0 then 3 gives
    1.5), and two sizes give the two-point slope."""
    rows = [record("scipy", "sparse", n, t) for n, t in ((1, 5.0), (10, 1e-2), (100, 0.1), (1000, 1.0))]
    rows += [record("scipy", "dense", n, t) for n, t in ((1, 1e-3), (10, 1e-3), (100, 1.0))]
    rows += [record("cvodes", "sparse", n, 1e-3 * n * n) for n in (1, 10)]
    rows += [record("diffrax", "dense", 1, 0.1, 0.2)]
    pts = growth.points(rows, "solve_s")
    sparse = growth.exponent(pts[growth.line_key(rows[0])])
    assert math.isclose(sparse.p, 1.0) and (sparse.n1, sparse.n2, sparse.k) == (30, 3000, 3)
    assert math.isclose(growth.exponent(pts[growth.line_key(rows[4])]).p, 1.5)
    assert math.isclose(growth.exponent(pts[growth.line_key(rows[7])]).p, 2.0)
    assert growth.exponent(pts[growth.line_key(rows[-1])]) is None
    texts = growth.growth_texts(rows)
    assert "scipy S sparse: solve p = 1.00 (30→3000 states, 3 sizes)" in texts
    assert "cvodes S sparse: solve p = 2.00 (3→30 states)" in texts
    assert "diffrax S g dense: solve - (one size); gradient - (one size)" in texts
    assert growth.ratio(rows) == ["scipy S: dense / sparse = 10 at 300 states"]


def test_two_tolerances_on_one_size_ladder_are_two_lines() -> None:
    """``--tolerances`` with ``--sizes``: each rtol is a cost curve of its own (mixed, the
    rtol 1e-8 rows would overwrite 1e-6's and the slope would be neither's)."""
    rows = [{**record("scipy", "sparse", n, 1e-3 * n), "rtol": 1e-6} for n in (1, 10, 100)]
    rows += [{**record("scipy", "sparse", n, 1e-2 * n * n), "rtol": 1e-8} for n in (1, 10, 100)]
    assert growth.growth_texts(rows) == [
        "scipy S sparse rtol 1e-06: solve p = 1.00 (3→300 states, 3 sizes)",
        "scipy S sparse rtol 1e-08: solve p = 2.00 (3→300 states, 3 sizes)",
    ]
    dense = [{**r, "jacobian": "dense", "solve_s": 3 * r["solve_s"]} for r in rows]
    assert growth.ratio(rows + dense) == [
        "scipy S rtol 1e-06: dense / sparse = 3 at 300 states",
        "scipy S rtol 1e-08: dense / sparse = 3 at 300 states",
    ]
    assert growth.growth_texts(rows[:3]) == ["scipy S sparse: solve p = 1.00 (3→300 states, 3 sizes)"]


def test_a_dense_over_sparse_ratio_inside_the_floor_is_a_tie() -> None:
    rows = [record("scipy", "sparse", 100, 1.0), record("scipy", "dense", 100, 1.5)]
    assert growth.ratio(rows) == [
        "scipy S: dense / sparse = 1.5 at 300 states, a tie: inside the 2.1x floor (one "
        "process a side)"]


def test_a_gradient_exponent_names_the_sizes_whose_gradient_does_not_qualify() -> None:
    rows = [{**record("cvodes", "sparse", n, 1e-3, 1e-3 * n), "gradient_error": e,
             "gradient_tier": tier, "reference_error": 1e-9}
            for n, e, tier in ((1, 5e-6, "pass"), (10, 1e-3, "warn"), (100, 3e-2, "fail"))]  # fmt: skip
    (text,) = growth.growth_texts(rows)
    assert text == ("cvodes S g sparse: solve p = 0.00 (3→300 states, 3 sizes); gradient "
                    "p = 1.00 (3→300 states, 3 sizes; the gradient does not qualify at 30, 300)")  # fmt: skip
    assert growth.growth_texts(rows, 2e-3)[0].endswith("does not qualify at 300)")


def test_a_rung_note_names_the_size_as_its_problem_does() -> None:
    rows = [record("scipy", "sparse", 8, 1e-3), record("scipy", "sparse", 64, None)]
    rows[1].update(status="skipped", reason="not run: forecast", solve_s=None)
    rows[0]["size_name"] = rows[1]["size_name"] = "N"
    text = table(rows)
    assert "  scipy S N=64: skipped: not run: forecast" in text and "verdict (N=64)" in text
    del rows[1]["size_name"]  # a file from before the key: n=
    assert "  scipy S n=64: skipped" in table(rows)


@pytest.mark.slow
def test_cli_ladder_json_table_and_report(heat: Path, tmp_path: Path) -> None:
    """`run --problem-file ... --sizes --jacobian` prints rows with the ladder's keys (JSON),
    `show` the table with the exponents, `report` the growth figure. CVODES (where CasADi
    is installed) runs the same ladder on its sparse linear solver, with gradients. Every
    rung is cheap: each runs the default three processes (run/rung_processes.py), one row
    with each process's samples, its first before every rung's others."""
    cvodes = importlib.util.find_spec("casadi") is not None
    out = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "run", "--problem-file", str(heat),
         "-b", "scipy,cvodes" if cvodes else "scipy", "--sizes", "4,40", "--jacobian", "sparse",
         "--repeats", "3",
         "--json", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [r for r in json.loads(out.stdout) if r.get("kind") != "verdict"]  # then the verdicts
    last_first = max(r["schedule_slots"][0] for r in rows)  # the first pass's last process
    assert all(min(r["schedule_slots"][1:]) > last_first for r in rows)
    if cvodes:
        cv = [r for r in rows if r["backend"] == "cvodes"]
        assert [(r["size"], r["n_state"], r["jacobian"], r["status"]) for r in cv] == [
            (4, 4, "sparse", "ok"), (40, 40, "sparse", "ok"),
        ]  # fmt: skip
        assert cv[1]["linear_solver"].startswith("qr") and cv[1]["gradient_error"] < 1e-3
    rows = [r for r in rows if r["backend"] == "scipy"]
    assert [(r["size"], r["n_state"], r["jac_nnz"], r["jacobian"], r["status"]) for r in rows] == [
        (4, 4, 10, "sparse", "ok"), (40, 40, 118, "sparse", "ok"),
    ]  # fmt: skip
    assert rows[1]["largest_ok_size"] == 40 and "splu" in rows[1]["linear_solver"]
    for r in rows:
        assert r["cold_processes"] == 3 == r["rung_processes_planned"], r
        assert len(r["solve_process_medians"]) == 3 and len(r["schedule_slots"]) == 3
    (h5,) = tmp_path.glob("*.h5")
    shown = table(store.read(h5).records)
    assert (
        "jac nnz" in shown and "scipy BDF sparse: solve p = " in shown and "(4→40 states)" in shown
    )
    pytest.importorskip("matplotlib")
    rep = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "report", str(h5), "--out",
         str(tmp_path / "rep")], capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert rep.returncode == 0, rep.stderr[-3000:]
    md = (tmp_path / "rep" / "report.md").read_text()
    assert (
        "Growth (time ∝ states^p, ok rows):" in md
        and (tmp_path / "rep" / "figures" / "heat-1d-growth.png").exists()
    )


def test_a_verdict_names_the_jacobian_kind_of_an_array_row() -> None:
    from sciml_bench.results import verdict

    row = {"backend": "cvodes", "solver": "BDF", "gradient_method": "forward", "jacobian": "sparse"}
    assert verdict.label(row) == "cvodes BDF forward sparse Jacobian"
    assert verdict.label({**row, "jacobian": "none"}) == "cvodes BDF forward"


def test_diffsol_and_cvodes_run_array_problems() -> None:
    from sciml_bench import backends

    for name in ("diffsol", "cvodes"):  # DiffSL's and CasADi's array forms
        if backends.get(name).availability().ok:
            assert runner._not_runnable(name, {}) is None
            assert backends.get(name).jacobians == ("dense", "sparse")


def test_diffsol_ladder_in_real_workers(heat: Path, tmp_path: Path) -> None:
    """diffsol's array form on the 1-D heat equation (a dirichlet Laplacian) at 4 and 40
    points, dense and sparse, in real workers: every row ok, near the reference, with a
    gradient that passes, and the matrices of its Jacobian kind."""
    pytest.importorskip("pydiffsol", reason="pydiffsol is not installed")
    problem = spec.load(heat)
    ladders = runner.plan_sized(compiled_at(problem, 4), ["diffsol"], [4, 40])
    assert [(lad.case.solver, lad.jacobian) for lad in ladders] == [
        ("bdf", "dense"),
        ("bdf", "sparse"),
    ]
    writer = store.ResultsWriter(tmp_path / "r.h5", {}, "test")
    settings = runner.Settings(cold=1, repeats=3, budget_s=120.0, steady_budget_s=1.0)
    rows = runner.run_sized(problem, ladders, writer, settings, progress=lambda m: None)
    got = {(r["jacobian"], r["size"]): r for r in rows}
    assert sorted(got) == [("dense", 4), ("dense", 40), ("sparse", 4), ("sparse", 40)]
    for (kind, size), r in got.items():
        assert r["status"] == "ok", r["reason"]
        assert r["n_state"] == size and r["solution_error"] < 1e-4
        assert r["gradient_tier"] == "pass", r["gradient_error"]
        want = "faer_sparse" if kind == "sparse" else "nalgebra_dense"
        assert r["case_info"]["matrix_type"] == want


def test_sparse_asked_of_a_dense_only_library_is_an_unavailable_row(
    heat: Path, tmp_path: Path
) -> None:
    """`--jacobian sparse` on Diffrax (lineax solves dense) gives an ``unavailable`` row that
    says why and what runs sparse, never a dense row in the sparse ladder; SciPy's sparse
    ladder beside it runs. Real run: the CLI, real workers, the results file read back."""
    r = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "run", "--problem-file", str(heat),
         "-b", "diffrax", "-b", "scipy", "--sizes", "4", "--jacobian", "sparse", "--json",
         "--out", str(tmp_path), "--threads", "2"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = tmp_path.glob("*.h5")
    rows = [x for x in store.read(path).records if x.get("kind") == "ode"]
    diffrax = [x for x in rows if x["backend"] == "diffrax"]
    assert [(x["jacobian"], x["status"]) for x in diffrax] == [("sparse", "unavailable")]
    reason = diffrax[0]["reason"]
    assert reason.startswith("diffrax has no sparse Jacobian path: ") and "lineax" in reason
    assert "run --jacobian dense, or choose scipy, cvodes, diffsol, amici, julia" in reason
    scipy_rows = [x for x in rows if x["backend"] == "scipy"]
    assert [(x["jacobian"], x["size"], x["status"]) for x in scipy_rows] == [("sparse", 4, "ok")]


def test_a_build_that_spent_the_budget_skips_the_backends_other_ladders_there(
    heat: Path,
) -> None:
    """AMICI compiles one C++ model for every Jacobian kind and gradient method: once a
    ladder's build was killed at the budget at size n, the backend's later ladders skip n
    and above, saying why, instead of each spending the budget compiling it again; a kill
    after the build, another backend, or a larger size stops nothing. What counts is the
    row's ``failed_phase``, as the run records it, not the words of its reason."""
    from sciml_bench.run import endings
    from sciml_bench.run.executor import Outcome
    from sciml_bench.run.ode import failure_timing
    from sciml_bench.run.sized_ladders import _build_over

    first = compiled_at(spec.load(heat), 4)
    dense, sparse = runner.plan_sized(first, ["scipy"], [4, 40])

    def killed_after(events: list[dict[str, Any]]) -> dict[str, Any]:
        """The row of a rung the budget killed after ``events``, as the run makes it."""
        proc = endings.ending(Outcome(events, None, timed_out=True), 300.0)
        return {"backend": "scipy", "gradient_method": "none", "jacobian": "dense",
                "size": 40, "status": proc.status, "reason": proc.reason,
                **failure_timing(proc, np.full(4, np.nan))}  # fmt: skip

    killed = killed_after([{"phase": "import", "s": 1.0}])  # before its build phase ended
    assert killed["failed_phase"] == "build" and "during build" in killed["reason"]
    why = _build_over([killed], sparse, 40)
    assert why is not None and why.startswith("not run: the scipy none dense ladder's build")
    assert _build_over([killed], sparse, 400) == why
    assert _build_over([killed], sparse, 4) is None
    after_build = killed_after([{"phase": "import", "s": 1.0}, {"phase": "build", "s": 2.0}])
    assert after_build["failed_phase"] == "first_solve"
    assert _build_over([after_build], sparse, 40) is None
    assert _build_over([{**killed, "backend": "diffsol"}], sparse, 40) is None
    # the phase decides, not the reason's words: a reason naming the build (a library's
    # own message) on a row killed in its first solve stops nothing, and a row killed in
    # its build stops the later ladders whatever its reason says
    worded = {**after_build, "reason": "killed after the 300 s budget during build"}
    assert _build_over([worded], sparse, 40) is None
    assert _build_over([{**killed, "reason": "killed after the 300 s budget"}], sparse, 40) == why
    assert _build_over([{**killed, "status": "crashed"}], sparse, 40) is None
