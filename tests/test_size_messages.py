"""What a new user reads about sizes, tolerances and Jacobians of array problems (issue 32):
``--sizes`` names the problem's size variable and the states it gives, a refused size leaves
no results file and no `results:` line, ``--tolerances`` runs ladders, and ``codegen
--jacobian`` prints a dense row's program. No worker starts except in the slow test."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sciml_bench.cli.main import main
from sciml_bench.problem import spec
from sciml_bench.run.sizes import size_axis

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> object:
    return CliRunner().invoke(main, ["run", *args])


def test_a_state_count_typed_as_a_size_names_the_variable_and_suggests_one(tmp_path: Path) -> None:
    r = _run("stiff-brusselator-2d", "-b", "scipy", "--sizes", "2048", "--out", str(tmp_path))
    assert r.exit_code == 2, r.output
    assert "N = 2048 gives 8,388,608 states, over the 5,000,000 this suite allows" in r.output
    assert "did you mean N = 32 (2,048 states)?" in r.output
    assert "N is the grid side: 2N² states" in r.output
    # refused before the results file is made: no `results:` line, no file
    assert "results:" not in r.output and not list(tmp_path.iterdir())


def test_the_suggestion_is_the_size_whose_states_are_nearest() -> None:
    bru = size_axis(spec.load("stiff-brusselator-2d"))
    assert (bru.name, bru.formula, bru.meaning) == ("N", "2N²", "the grid side")
    assert bru.nearest(2048, 5_000_000) == 32  # a ladder value, exactly
    assert bru.nearest(1000, 5_000_000) == 22  # 968 states: nearer than 23's 1,058
    groups = size_axis(spec.load("stiff-robertson-groups"))
    assert (groups.name, groups.formula) == ("n", "3n")
    assert groups.meaning == "the number of groups of y1, y2, y3"


def test_size_zero_on_groups_names_the_groups_not_members(tmp_path: Path) -> None:
    r = _run("stiff-robertson-groups", "-b", "scipy", "--sizes", "0", "--out", str(tmp_path))
    assert r.exit_code == 2, r.output
    assert "n = 0 groups is outside [1, " in r.output and "members" not in r.output
    assert "3n states" in r.output
    assert "results:" not in r.output and not list(tmp_path.iterdir())
    bad = _run("stiff-brusselator-2d", "--sizes", "16,8")
    assert bad.exit_code == 2 and "values of N (the grid side) must be strictly" in bad.output
    # ensembles keep their members
    ens = _run("ensemble-lorenz", "--sizes", "0")
    assert ens.exit_code == 2 and "0 members is outside [1, " in ens.output


def test_list_shows_the_states_of_every_ladder_value() -> None:
    r = CliRunner().invoke(main, ["list"])
    assert r.exit_code == 0, r.output
    assert "--sizes takes N, the grid side (2N² states): N = 8 (128 states), 16 (512), " \
           "32 (2,048), 64 (8,192), 128 (32,768)" in r.output
    assert "--sizes takes n, the number of groups of y1, y2, y3 (3n states): n = 1 (3 states), " \
           "10 (30), 100 (300), 1000 (3,000), 10000 (30,000)" in r.output
    data = json.loads(CliRunner().invoke(main, ["list", "--json"]).output)
    bru = next(p for p in data["problems"] if p["name"] == "stiff-brusselator-2d")
    assert bru["ladder"] == [8, 16, 32, 64, 128]
    assert bru["ladder_states"] == [128, 512, 2048, 8192, 32768]


def test_run_help_says_sizes_are_the_size_variable_not_states() -> None:
    r = CliRunner().invoke(main, ["run", "--help"])
    text = " ".join(r.output.split())
    assert "values of the problem's own size variable, not state counts" in text
    assert "Array problems: one ladder per rtol" in text


def test_tolerances_are_accepted_for_array_problems() -> None:
    from sciml_bench.cli.run_plan import RunOptions, plan_run
    from sciml_bench.problem.reference import compile_problem
    from sciml_bench.run import runner

    base = {f.name: None for f in RunOptions.__dataclass_fields__.values()}
    base.update(problems=("stiff-robertson-groups",), problem_files=(), backend_names=("scipy",),
                solvers=(), gradients=(), tolerances="1e-8,1e-5", sweep=False, quick=True,
                out="results", refresh_reference=False, dataset="synthetic", as_json=False,
                sizes="1", jacobians=(), train=False, executor="local", dask=None,
                sbml_files=())  # fmt: skip
    plan = plan_run(RunOptions(**base))
    assert plan.rtols == [1e-8, 1e-5] and plan.sizes == [1]
    import numpy as np

    p = spec.at_size(spec.load("stiff-robertson-groups"), 1)
    compiled = compile_problem(p, None, np.zeros((len(p.t_save), p.n_state)))
    ladders = runner.plan_sized(compiled, ["scipy"], [1], rtols=plan.rtols)
    ratio = p.atol / p.rtol
    got = sorted({(ld.case.rtol, ld.case.atol) for ld in ladders})
    assert got == sorted({(r, r * ratio) for r in (1e-8, 1e-5)})
    assert {ld.label.split()[-1] for ld in ladders} == {"rtol=1e-08", "rtol=1e-05"}


@pytest.mark.slow
def test_a_ladder_runs_at_the_given_rtol(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "run", "stiff-robertson-groups",
         "-b", "scipy", "--sizes", "1", "--tolerances", "1e-8", "--jacobian", "sparse",
         "--quick", "--json", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [r for r in json.loads(out.stdout) if r.get("kind") != "verdict"]
    assert [(r["size"], r["rtol"], r["status"]) for r in rows] == [(1, 1e-8, "ok")]
    assert "results:" in out.stderr and len(list(tmp_path.glob("*.h5"))) == 1


@pytest.mark.skipif(importlib.util.find_spec("casadi") is None, reason="CasADi not installed")
def test_codegen_jacobian_prints_the_dense_rows_program() -> None:
    args = ["codegen", "stiff-robertson-groups", "--size", "1", "--backend", "cvodes"]
    dense = CliRunner().invoke(main, [*args, "--jacobian", "dense"])
    sparse = CliRunner().invoke(main, [*args, "--jacobian", "sparse"])
    assert dense.exit_code == 0 and sparse.exit_code == 0, dense.output + sparse.output
    assert dense.output != sparse.output
    assert "'linear_solver': 'lapacklu'" in dense.output
    assert "'linear_solver': 'qr'" in sparse.output  # the measured best below 256 states
    assert "--jacobian dense" in dense.output


#: runs a printed program as ``python program.py`` would, with SciPy's LSODA replaced by a
#: subclass that notes the Jacobian and the band it is given, then prints them
_SPY = """
import json, runpy, sys
import scipy.integrate

seen = {}

class Spy(scipy.integrate.LSODA):
    def __init__(self, *args, **kw):
        jac = kw.get("jac")
        seen.update(jac=getattr(getattr(jac, "func", jac), "__name__", None),
                    lband=kw.get("lband"), uband=kw.get("uband"))
        super().__init__(*args, **kw)

scipy.integrate.LSODA = Spy
ns = runpy.run_path(sys.argv[1], run_name="__main__")
print("seen " + json.dumps({**seen, "bands": list(ns["JAC_BANDS"])}))
"""


@pytest.mark.slow
def test_scipys_printed_program_runs_the_rows_jacobian(tmp_path: Path) -> None:
    """SciPy's program solves with the Jacobian of the row's kind, as the case does: run as
    a script, LSODA with the sparse kind is given the banded Jacobian and the generated
    bands (``lband``, ``uband``), with the dense kind the dense Jacobian and no band. What
    the program passes is asserted, never the last digits of its answer (on a quiet
    machine the two kinds printed the same digits)."""
    args = ["codegen", "stiff-robertson-groups", "--size", "2", "--backend", "scipy",
            "--solver", "LSODA"]  # fmt: skip
    (tmp_path / "spy.py").write_text(_SPY)
    seen = {}
    for kind in ("dense", "sparse"):
        r = CliRunner().invoke(main, [*args, "--jacobian", kind])
        assert r.exit_code == 0, r.output
        assert f"'jacobian': '{kind}'" in r.output
        program = tmp_path / f"{kind}.py"
        program.write_text(r.stdout)
        run = subprocess.run([sys.executable, str(tmp_path / "spy.py"), str(program)],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout.startswith("scipy: finished"), run.stdout[:500]
        assert "solution (t, then the state) at each save point:" in run.stdout
        seen[kind] = json.loads(run.stdout.splitlines()[-1].removeprefix("seen "))
    assert seen["dense"] == {"jac": "jac", "lband": None, "uband": None,
                             "bands": seen["dense"]["bands"]}  # fmt: skip
    lower, upper = seen["sparse"]["bands"]
    assert seen["sparse"] == {"jac": "jac_banded", "lband": lower, "uband": upper,
                              "bands": [lower, upper]}  # fmt: skip


def test_codegen_jacobian_is_refused_where_it_means_nothing() -> None:
    r = CliRunner().invoke(main, ["codegen", "stiff-robertson", "--jacobian", "dense"])
    assert r.exit_code == 2 and "--jacobian applies to array problems" in r.output
