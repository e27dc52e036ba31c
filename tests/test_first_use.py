"""What a new user hits first (issue 15): comma lists, ``--debug`` after the command,
results files others can read, a hint for a misspelled problem, one line on
comparisons that cannot be significant, and one rtol format everywhere.

Commands run as real subprocesses; the results file is a real HDF5 file.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sciml_bench.problem import spec
from sciml_bench.results import compare as cmp
from sciml_bench.results.store import ResultsWriter, read
from sciml_bench.run.runner import CaseSpec

DATA = Path(__file__).parent / "data"
SCIML = [sys.executable, "-m", "sciml_bench.cli.main"]
DECAY = str(DATA / "decay.toml")


def sciml(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SCIML, *args], capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_comma_lists_choose_the_same_cases_as_repeats(tmp_path: Path) -> None:
    r = sciml("run", "--problem-file", DECAY, "-b", "scipy,", "--solver", "LSODA,BDF",
              "--quick", "--json", "--out", str(tmp_path))  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert [(c["backend"], c["solver"]) for c in json.loads(r.stdout)
            if c.get("kind") != "verdict"] == [
        ("scipy", "LSODA"), ("scipy", "BDF"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("-b", "scipy,diffrax,nope", "unknown backend 'nope'; choose from"),
        ("--solver", "LSODA,Nope", "--solver 'Nope' is offered by none of scipy"),
        ("--gradient", "none,Nope", "--gradient 'Nope' is offered by none of scipy"),
    ],
)
def test_each_item_of_a_comma_list_is_checked(flag: str, value: str, message: str) -> None:
    extra = [] if flag == "-b" else ["-b", "scipy"]
    r = sciml("run", "--problem-file", DECAY, *extra, flag, value)
    assert r.returncode == 2 and message in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_is_accepted_before_and_after_the_command(tmp_path: Path, where: str) -> None:
    args = ["show", str(tmp_path / "missing.h5")]
    r = sciml("--debug", *args) if where == "before" else sciml(*args, "--debug")
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" in r.stderr and "missing.h5: no such file" in r.stderr
    assert "No such option" not in r.stderr
    quiet = sciml(*args)
    assert quiet.returncode == 2 and "Traceback" not in quiet.stderr


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_results_files_respect_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    old = os.umask(umask)
    try:
        w = ResultsWriter(tmp_path / "run.h5", {"python": "3"}, "test")
        w.add({"kind": "ode", "problem": "p", "backend": "scipy", "status": "ok", "reason": ""})
        w.finish("complete")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "run.h5").stat().st_mode) == mode
    assert len(read(tmp_path / "run.h5").records) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["run.h5"], "a temporary file was left"


def test_a_misspelled_problem_gets_a_did_you_mean() -> None:
    with pytest.raises(spec.ProblemError, match="did you mean 'stiff-robertson'"):
        spec.load("stiff-robertsn")
    with pytest.raises(spec.ProblemError, match="did you mean 'nonstiff-lotka-volterra'"):
        spec.load("lotka")
    with pytest.raises(spec.ProblemError) as e:
        spec.load("zzzz")
    assert "did you mean" not in str(e.value) and "shipped problems:" in str(e.value)


def _timed(backend: str, solve: list[float], ttfg: list[float]) -> dict[str, object]:
    return {"problem": "p", "backend": backend, "solver": "s", "gradient_method": "none",
            "rtol": 1e-6, "status": "ok", "solve_samples": solve, "ttfg_samples": ttfg}  # fmt: skip


def test_compare_of_quick_runs_says_once_that_nothing_can_be_significant() -> None:
    quick = [_timed("a", [1.0, 1.1, 1.2], [3.0]), _timed("b", [2.0, 2.1, 2.2], [4.0])]
    slower = [_timed("a", [2.0, 2.1, 2.2], [6.0]), _timed("b", [4.0, 4.1, 4.2], [8.0])]
    text = cmp.render(cmp.compare(quick, slower))
    head = text.splitlines()[1]
    assert head.startswith("No timing here can be significant")
    assert "smallest possible p is 0.1" in head and "--repeats 10 (at least 5)" in head
    assert "--cold 5" in head
    assert text.count("min p") == 0 and text.count("n too small") == 4  # said once, up front
    # with enough samples the note goes away and the rows speak for themselves
    many = [_timed("a", [1.0 + i / 100 for i in range(8)], [3.0])]
    more = [_timed("a", [2.0 + i / 100 for i in range(8)], [6.0])]
    text = cmp.render(cmp.compare(many, more))
    assert "No timing here" not in text and "slower" in text and "min p 1" in text
    assert cmp.needed_samples(0.01) == 5 and cmp.min_p(5, 5) < 0.01 <= cmp.min_p(4, 4)


def test_progress_lines_print_rtol_as_the_table_does() -> None:
    from sciml_bench.results.table import fmt_rtol, ode_row

    assert "rtol=1e-04 on cpu" in CaseSpec("scipy", "LSODA", "none", 1e-4, 1e-8, 100).label
    assert "rtol=2.5e-05 " in CaseSpec("scipy", "LSODA", "none", 2.5e-5, 1e-9, 100).label
    assert ode_row({"rtol": 1e-4})[4] == fmt_rtol(1e-4) == "1e-04"  # after the device column


def test_cnn_progress_lines_are_formatted_and_announce_the_first_step() -> None:
    from sciml_bench.run.runner import cnn_progress

    assert cnn_progress({"cnn_stage": "first_step", "s": None}, "torch-compile") == (
        "      first step, compiling ..."
    )
    assert cnn_progress({"cnn_stage": "import", "s": 2.6123}, "jax") == "      import         2.61 s"
    line = cnn_progress({"result": {"status": "ok", "time_to_first_step_s": 20.04,
                                    "train_s": 0.024776868000117247, "throughput_ips": 2117.3,
                                    "accuracy": 0.9137}}, "torch-compile")  # fmt: skip
    assert line == "      ok: first step 20.04 s, train 0.0248 s (2117 img/s), accuracy 0.914"
    assert cnn_progress({"pid": 1, "started": True}, "jax") is None
