"""The verdict under every table, ``list``'s solvers and gradients, the progress counter,
and what a gradient call needs in memory (issue 25)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from sciml_bench import backends
from sciml_bench.measure.noise import NOISE_FLOOR, PROCESS_FLOOR
from sciml_bench.results import store, table, verdict

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
SCIML = [sys.executable, "-m", "sciml_bench.cli.main"]


def row(backend: str, grad_s: float | None, ttfg_s: float | None, tier: str | None = "pass",
        status: str = "ok", **extra: object) -> dict:  # fmt: skip
    err = {"pass": 1e-6, "warn": 1e-3, "fail": 0.5, None: None}[tier]
    return {"kind": "ode", "problem": "p", "backend": backend, "solver": "S",
            "gradient_method": "G", "status": status, "gradient_tier": tier,
            "gradient_error": err, "grad_s": grad_s, "ttfg_s": ttfg_s, "rtol": 1e-6,
            "device": "cpu", **extra}  # fmt: skip


def test_the_fastest_passing_row_wins_each_criterion_with_its_ratio() -> None:
    rows = [row("a", 0.010, 5.0), row("b", 0.030, 2.0), row("c", 0.001, 1.0, tier="warn"),
            row("d", None, None, tier=None, status="max_steps")]  # fmt: skip
    (v,) = verdict.verdicts(rows)
    assert v.qualified == 2 and v.reason is None
    steady, first = v.picks
    assert (steady.winner["backend"], steady.runner_up["backend"]) == ("a", "b")
    assert steady.ratio == pytest.approx(3.0) and steady.clears_noise
    assert (first.winner["backend"], first.ratio) == ("b", pytest.approx(2.5))
    assert v.text() == (
        "verdict: steady gradient: a S G (10 ms, gradient error 1.00e-06), 3.00x faster than "
        "b S G (30 ms), floor 2.10x: one process a side; first gradient: b S G (2 s, gradient "
        "error 1.00e-06), 2.50x faster than a S G (5 s), floor 1.10x: between runs, fresh "
        "processes a side; faster but left out: "
        "c S G (steady gradient 1 ms, 10x faster; first gradient 1 s, 2.00x faster): "
        "gradient error 1.00e-03, warn"
    )  # c is faster but its gradient only warns: never the answer, never hidden


def test_a_ratio_inside_the_noise_floor_is_a_tie() -> None:
    """The steady gradient (one process per row) must clear the process floor; the
    first gradient (fresh processes) the run-to-run floor: 1.5x is a tie on the first,
    a win on the second."""
    (v,) = verdict.verdicts([row("a", 0.010, 1.0), row("b", 0.015, 1.5)])
    steady, first = v.picks
    assert (steady.floor, first.floor) == (PROCESS_FLOOR, NOISE_FLOOR)
    assert steady.clears_noise is False and first.clears_noise is True
    assert f"tie at 1.50x, floor {PROCESS_FLOOR:.2f}x: one process a side" in v.text()
    assert "first gradient: a S G (1 s), 1.50x faster than b S G (1.5 s)" in v.text()
    (w,) = verdict.verdicts([row("a", 0.010, 1.0), row("b", 0.010 * PROCESS_FLOOR, 1.0)])
    assert w.picks[0].clears_noise is True and w.picks[1].clears_noise is False


@pytest.mark.parametrize(("rows", "says"), [
    ([row("a", None, None, tier=None, status="max_steps"), row("b", None, None, None, "crashed")],
     "no row finished (max_steps 1, crashed 1)"),
    ([row("scipy", None, 0.5, tier=None)],
     "no backend computed a gradient (the rows that finished: scipy S G)"),
    ([row("a", 0.01, 1.0, tier="warn"), row("b", 0.01, 1.0, tier="fail")],
     "no backend produced a passing gradient (the best: a S G, gradient error 1.00e-03, warn)"),
])  # fmt: skip
def test_when_nothing_qualifies_one_line_says_why(rows: list[dict], says: str) -> None:
    (v,) = verdict.verdicts(rows)
    assert v.picks == () and v.text().startswith(f"verdict: {says}")
    assert v.to_json()["reason"] == says and v.to_json()["qualified"] == 0
    # a next step only where a row was scored (tests/test_verdict_load.py for its words)
    assert (v.next_step is not None) == ("best" in says)


def test_one_verdict_per_size_and_tolerance_and_unavailable_rows_join_each() -> None:
    ens = [row(b, t, 1.0, kind="ensemble", size=n, semantics="coupled")
           for n in (1, 16) for b, t in (("x", 0.001 * n), ("y", 0.002))]  # fmt: skip
    ens.append({"kind": "ensemble", "problem": "p", "backend": "julia", "status": "unavailable"})
    v1, v16 = verdict.verdicts(ens)
    assert (v1.group, v16.group) == ({"size": 1}, {"size": 16})
    assert v1.picks[0].winner["backend"] == "x" and v16.picks[0].winner["backend"] == "y"
    assert v16.text().startswith("verdict (n=16): steady gradient: y S G coupled (2 ms), 8.00x")
    sweep = [row("a", 0.01, 1.0, rtol=r) for r in (1e-4, 1e-6)]
    assert [v.group for v in verdict.verdicts(sweep)] == [{"rtol": 1e-4}, {"rtol": 1e-6}]
    alone = verdict.verdicts([{"kind": "ensemble", "problem": "p", "status": "unavailable"}])
    assert alone[0].text() == "verdict: no row finished (unavailable 1)"


def test_a_ladder_verdict_names_the_size_as_its_problem_does() -> None:
    """A network's width reads ``width=200``, a grid side ``N=32``; the JSON keeps ``size``."""
    rows = [row(b, t, 1.0, size=w, size_name="width") for w in (10, 200)
            for b, t in (("x", 0.001), ("y", 0.002))]  # fmt: skip
    v10, v200 = verdict.verdicts(rows)
    assert v200.text().startswith("verdict (width=200): steady gradient: x S G (1 ms)")
    assert v200.to_json()["size"] == 200 and "_size_name" not in v200.to_json()
    assert "size_name" not in v10.to_json()


def test_the_json_record_and_the_cnn_verdict() -> None:
    rows = [row("a", 0.010, 5.0, device="cuda"), row("b", 0.020, 2.0)]
    (rec,) = table.json_records(rows)[2:]
    assert rec["kind"] == "verdict" and rec["problem"] == "p" and rec["noise_floor"] == NOISE_FLOOR
    assert rec["steady_gradient"]["winner"] == {"backend": "a", "solver": "S",
                                                "gradient_method": "G", "device": "cuda",
                                                "rtol": 1e-6}  # fmt: skip
    assert rec["steady_gradient"]["ratio"] == pytest.approx(2.0)
    assert rec["first_gradient"]["clears_noise"] is True and "a S G on cuda" in rec["text"]
    cnn = [{"kind": "cnn", "problem": "cnn", "backend": v, "status": "ok", "train_s": t,
            "time_to_first_step_s": f, "model": "small", "precision": "tf32", **x}
           for v, t, f, x in (("jax", 1.0, 3.0, {}), ("torch-eager", 1.5, 0.1, {}),
                              ("tensorflow", 0.1, 0.1, {"trained_to_chance": True}))]  # fmt: skip
    (v,) = verdict.verdicts(cnn)
    assert v.qualified == 2 and [p.winner["backend"] for p in v.picks] == ["jax", "torch-eager"]


def test_show_and_show_json_end_with_the_verdict() -> None:
    path = str(DATA / "results-v1-stiff-robertson.h5")
    text = subprocess.run([*SCIML, "show", path], capture_output=True, text=True, check=True).stdout
    last = " ".join(text.rsplit("\nverdict", 1)[1].split("\ngradient passes")[0].split())
    assert last == ("(rtol 1e-08): diffrax Kvaerno4 RecursiveCheckpointAdjoint is the only row "
                    "with a passing gradient (steady gradient 112 ms, first gradient 9.47 s)")
    assert "verdict (rtol 1e-04): no backend produced a passing gradient" in text
    res = CliRunner().invoke(__import__("sciml_bench.cli.main", fromlist=["main"]).main,
                             ["show", path, "--json"])  # fmt: skip
    records = json.loads(res.output)
    verdicts = [r for r in records if r.get("kind") == "verdict"]
    (ladder,) = [r for r in records if r.get("kind") == "tolerance_ladder"]
    assert len(records) - len(verdicts) - 1 == len(store.read(path).records)
    # five tolerances: Diffrax passes from 1e-5 on (3.0e-4 at 1e-4), torchdiffeq nowhere
    assert {x["label"]: x["passes_from"] for x in ladder["ladders"]} == {
        "diffrax Kvaerno4 RecursiveCheckpointAdjoint": 1e-5, "torchdiffeq dopri5 backprop": None}
    assert "RecursiveCheckpointAdjoint from rtol 1e-05 (1e-05: 3.0e-05; 1e-04: 3.0e-04)" in (
        " ".join(text.split()))
    assert [v["rtol"] for v in verdicts] == [1e-4, 1e-5, 1e-6, 1e-7, 1e-8]
    assert verdicts[2]["steady_gradient"]["winner"]["backend"] == "diffrax"


@pytest.mark.slow
def test_a_run_counts_rows_and_ends_with_its_verdict(tmp_path: Path) -> None:
    """Two tolerances, torchdiffeq missing: 2 SciPy rows and 1 unavailable row, counted
    [1/3] .. [3/3] (not over the 4 planned cases), then one verdict per tolerance."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['torchdiffeq'] = None\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([*SCIML, "run", "--problem-file", str(DATA / "decay.toml"), "-b",
                        "scipy,torchdiffeq", "--tolerances", "1e-4,1e-6", "--quick", "--out",
                        str(tmp_path / "out")], capture_output=True, text=True, env=env,
                       timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    counters = [ln.split("]")[0] + "]" for ln in r.stderr.splitlines() if ln.startswith("[")]
    assert counters == ["[1/3]", "[2/3]", "[3/3]"], r.stderr
    tail = " ".join(r.stdout.split("\nverdict", 1)[1].split())
    assert tail == ("(rtol 1e-04): no backend computed a gradient (the rows that finished: scipy "
                    "DOP853 none) verdict (rtol 1e-06): no backend computed a gradient (the rows "
                    "that finished: scipy DOP853 none)")


def test_list_shows_solvers_stiff_marked_gradients_and_defaults() -> None:
    from sciml_bench.cli.main import main

    out = CliRunner().invoke(main, ["list"]).output
    text = " ".join(out.split())  # unwrapped
    assert ("solvers: LSODA (stiff; default for stiff problems), BDF (stiff), Radau (stiff), "
            "RK45, DOP853 (default for non-stiff problems)") in text  # fmt: skip
    assert "gradients: RecursiveCheckpointAdjoint (default), BacksolveAdjoint, DirectAdjoint" in text
    assert ("forward_diff (default, except for ensemble-spiral-node, nonstiff-node-width, nonstiff-spiral-node, "
            "stiff-brusselator-2d)") in text  # 128 states + 3 parameters > 100: the adjoint
    for name in backends.names():
        b = backends.get(name)
        for solver in b.solvers():
            assert solver in text, (name, solver)
        for grad in b.gradient_methods:
            assert grad in text, (name, grad)
    data = json.loads(CliRunner().invoke(main, ["list", "--json"]).output)
    diffrax = next(b for b in data["backends"] if b["name"] == "diffrax")
    assert diffrax["default_solver"] == {"stiff": "Kvaerno4", "nonstiff": "Tsit5"}
    assert diffrax["stiff_solvers"] == ["Kvaerno5", "Kvaerno4", "Kvaerno3"]


def test_run_help_names_every_backend() -> None:
    from sciml_bench.cli.main import main

    for args in (["run", "--help"], ["--help"]):
        text = " ".join(CliRunner().invoke(main, args).output.split())
        assert "torchode" in text, args
    text = " ".join(CliRunner().invoke(main, ["run", "--help"]).output.split())
    assert all(name in text for name in backends.names())


# --- what a gradient call needs in memory (measure.memory.CallPeak) ----------------------

_PEAK = textwrap.dedent("""
    import json, time
    import numpy as np
    from sciml_bench.measure.memory import CallPeak

    def call(mib):  # touch every page, hold it past a few sampling intervals, free it
        a = np.ones(mib * 2**20 // 8)
        time.sleep(0.1)
        del a

    out = []
    for mib in (120, 40):  # the second stays below the first's high-water mark
        peak = CallPeak().start()
        call(mib)
        out.append(peak.stop())
    print(json.dumps(out))
""")


def test_call_peak_measures_what_the_call_needs_above_its_start() -> None:
    """A new process peak is read from the kernel's high-water mark; a smaller call after
    it, whose peak the mark cannot show, from the sampled RSS."""
    r = subprocess.run([sys.executable, "-c", _PEAK], capture_output=True, text=True, check=True)
    (big, big_src), (small, small_src) = json.loads(r.stdout)
    assert big_src == "high_water" and 115 <= big <= 135
    assert small_src == "sampled" and 35 <= small <= 50
