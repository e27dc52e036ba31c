"""A verdict on an ordinary machine (issue 42, items 1, 5 and 6): under load the winner is
named as provisional, with the load, whose it was and the command for a firm one;
``--load-limit`` on ``run``, ``show`` and ``report``; when nothing passes, the next step;
``unavailable`` rows as one line per library.

Rows are real: the stored Robertson run (``tests/data/results-v1-stiff-robertson.h5``,
written by a real run) with its load fields set, real worker processes for the host
watch, and, in the slow tier, real runs beside two busy processes and of a Lorenz-96-like
problem (``tests/data/lorenz96-small.toml``) whose gradients do not pass at rtol 1e-6.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sciml_bench.cli.main import main
from sciml_bench.measure.noise import LOAD_LIMIT, load_limit, using_load_limit
from sciml_bench.results import next_step, publish, store, table, verdict
from sciml_bench.results.store import ResultsWriter
from sciml_bench.run.executor import HostWatch, _alive

DATA = Path(__file__).resolve().parent / "data"
ROBERTSON = DATA / "results-v1-stiff-robertson.h5"
SCIML = [sys.executable, "-m", "sciml_bench.cli.main"]
#: the stored run's verdict at rtol 1e-8, as a quiet run prints it (test_verdict.py)
FIRM_1E8 = ("verdict (rtol 1e-08): diffrax Kvaerno4 RecursiveCheckpointAdjoint is the only row "
            "with a passing gradient (steady gradient 112 ms, first gradient 9.47 s)")  # fmt: skip


@pytest.fixture(scope="module")
def stored() -> list[dict[str, Any]]:
    """The stored Robertson run's rows, as ``results.read`` gives them (read once)."""
    return store.read(ROBERTSON).records


def with_load(rows: list[dict[str, Any]], others: float, every: int = 1,
              own: int | None = 1) -> list[dict[str, Any]]:  # fmt: skip
    """``rows`` as if timed while other processes took ``others`` cores, ``every``
    sciml-bench workers at once on the host, ``own`` of them this run's."""
    facts = {"others_cpu": others, "concurrent_cases": every}
    if own is not None:
        facts["concurrent_own"] = own
    return [{**r, **facts} if r.get("status") != "unavailable" else dict(r) for r in rows]


def at(rows: list[dict[str, Any]], rtol: float, **kw: Any) -> verdict.Verdict:
    """The verdict of ``rows`` at solver tolerance ``rtol``."""
    return next(v for v in verdict.verdicts(rows, **kw) if v.group.get("rtol") == rtol)


def flat(text: str) -> str:
    return " ".join(text.split())


# --- item 1: provisional under load, firm when quiet ---------------------------------------


def test_a_quiet_run_prints_the_firm_verdict_as_before(stored: list[dict[str, Any]]) -> None:
    quiet = with_load(stored, others=0.1)
    v = at(quiet, 1e-8)
    assert not v.provisional and v.text() == FIRM_1E8
    assert "provisional" not in table.table(quiet)


def test_under_load_the_winner_is_named_as_provisional_with_the_load_and_the_command(
    stored: list[dict[str, Any]],
) -> None:
    """Another run's worker and other processes loaded every row: the answer is still
    given, said to be provisional, with the load it was timed under (the rows' numbers),
    whose it was, and what gives a firm verdict."""
    busy = with_load(stored, others=1.62, every=2, own=1)
    v = at(busy, 1e-8)
    assert v.provisional and v.reason is None and v.qualified == 0
    assert v.picks[0].winner["backend"] == "diffrax"
    assert v.text() == (
        "verdict (rtol 1e-08): provisional, timed under load: diffrax Kvaerno4 "
        "RecursiveCheckpointAdjoint is the only row with a passing gradient (steady gradient "
        "112 ms, first gradient 9.47 s); it was timed while other processes took 1.62 cores' "
        "worth of CPU (others_cpu; a row counts as quiet up to 0.5 cores), none of it this "
        "run's: up to 1 worker(s) of another sciml-bench run and other processes; for a firm "
        "verdict rerun when the machine is quieter, or accept these timings with --load-limit "
        "1.7 on run, show or report")
    rec = v.to_json()
    assert (rec["provisional"], rec["load_limit"], rec["reason"]) == (True, LOAD_LIMIT, None)
    assert rec["steady_gradient"]["winner"]["backend"] == "diffrax"
    assert rec["loaded"] == [{"row": verdict._row_id(v.picks[0].winner), "others_cpu": 1.62}]


def test_the_users_own_load_is_told_from_other_processes(stored: list[dict[str, Any]]) -> None:
    """This run's own cases at once (--workers) are named as the user's, with the fix; rows
    that ran beside nobody's workers name other processes; older rows say neither."""
    own = flat(at(with_load(stored, 1.2, every=3, own=3), 1e-8).text())
    assert "this run's own cases, up to 3 at once, are part of it (run this run's cases one " \
           "at a time: without --workers)" in own  # fmt: skip
    alone = flat(at(with_load(stored, 1.2, every=1, own=1), 1e-8).text())
    assert "none of it this run's: other processes on the machine" in alone
    old = flat(at(with_load(stored, 1.2, every=2, own=None), 1e-8).text())
    assert "this run's" not in old and "from other processes" in old
    notes = flat(table.table(with_load(stored, 1.2, every=3, own=2)))
    assert "ran beside this run's own other cases (up to 2 of its cases at once)" in notes
    assert "ran while up to 1 sciml-bench worker(s) of another run used the same host" in notes
    assert "timed while other processes took up to 1.20 cores' worth of CPU (others_cpu; " \
           "this run's own cases, up to 2 at once, and up to 1 worker(s) of another " \
           "sciml-bench run are part of it" in notes  # fmt: skip
    assert "scipy LSODA, diffrax Kvaerno4, torchdiffeq dopri5: ran beside" in notes  # each once


def test_load_limit_counts_rows_below_it_as_quiet(stored: list[dict[str, Any]]) -> None:
    """The limit as a keyword and as the one in force (what --load-limit sets) agree; rows
    at or below it are quiet, and the firm verdict is the quiet run's."""
    busy = with_load(stored, others=1.62)
    assert at(busy, 1e-8, load_limit=1.7).text() == FIRM_1E8
    assert at(busy, 1e-8, load_limit=1.62).text() == FIRM_1E8  # at the limit: quiet
    with using_load_limit(1.7):
        assert load_limit() == 1.7 and at(busy, 1e-8).text() == FIRM_1E8
        assert "provisional" not in table.table(busy)
    assert load_limit() == LOAD_LIMIT and at(busy, 1e-8).provisional
    with pytest.raises(ValueError, match="cores"):
        verdict.verdicts(busy, load_limit=-1.0)


def test_show_and_report_take_load_limit_and_compare_shares_the_option(
    stored: list[dict[str, Any]], tmp_path: Path,
) -> None:  # fmt: skip
    writer = ResultsWriter(tmp_path / "busy.h5", {}, "test")
    for r in with_load(stored, others=1.62):
        writer.add(r)
    writer.finish("complete")
    path = str(writer.path)
    busy = flat(CliRunner().invoke(main, ["show", path]).output)
    assert "verdict (rtol 1e-08): provisional, timed under load: diffrax Kvaerno4" in busy
    firm = CliRunner().invoke(main, ["show", path, "--load-limit", "1.7"])
    assert firm.exit_code == 0 and flat(FIRM_1E8) in flat(firm.output)
    assert "provisional" not in firm.output
    out = CliRunner().invoke(main, ["show", path, "--json", "--load-limit", "1.7"]).output
    verdicts = [r for r in json.loads(out) if r["kind"] == "verdict"]
    assert {v["load_limit"] for v in verdicts} == {1.7} and not any(v["provisional"] for v in verdicts)
    bad = CliRunner().invoke(main, ["show", path, "--load-limit", "-1"])
    assert bad.exit_code == 2 and "--load-limit" in bad.output
    # report: its verdict blocks under the limit `report --load-limit` sets
    with using_load_limit(1.7):
        notes = publish.verdict_blocks(with_load(stored, others=1.62))[1]
    assert not any("provisional" in n for n in notes.items)
    for cmd in ("run", "show", "report", "compare"):
        text = flat(CliRunner().invoke(main, [cmd, "--help"]).output)
        assert "--load-limit CORES Rows timed while other processes took more than CORES" in text, cmd


# --- item 5: the next step when nothing passes ---------------------------------------------


@pytest.mark.parametrize(("error", "rtol", "bound", "k"), [
    (1.5e-4, 1e-6, 1e-4, -7),  # needs 6.7e-7: the decade below
    (1e-3, 1e-6, 1e-4, -8),  # needs exactly 1e-7, which lands on the bound: one tighter
    (2.99e-4, 1e-4, 1e-4, -5),
    (5e-3, 1e-6, 1e-5, -9),
])  # fmt: skip
def test_the_suggested_tolerance_brings_the_best_error_under_the_bound(
    error: float, rtol: float, bound: float, k: int
) -> None:
    assert next_step.suggested_exponent(error, rtol, bound) == k
    assert error * 10.0**k / rtol < bound  # proportional: under the bound, not on it


def test_the_next_step_from_the_stored_run_is_the_tolerance_that_passed(
    stored: list[dict[str, Any]],
) -> None:
    """At rtol 1e-4 Diffrax warns at 2.99e-4; the suggestion, 1e-5, is the tolerance at
    which the same run's Diffrax row passes (3.01e-5)."""
    v = at(stored, 1e-4)
    assert v.next_step == ("the best row reaches a gradient error of 2.99e-04 at rtol 1e-04; "
                           "if the error shrinks in proportion to rtol, a row would likely "
                           "pass at rtol 1e-5: rerun with `--tolerances 1e-5`")  # fmt: skip
    assert v.text().endswith(f"; next step: {v.next_step}")
    assert v.to_json()["next_step"] == v.next_step
    assert at(stored, 1e-5).qualified == 1  # where it said: the row passes
    # against --gradient-rtol, the bound asked
    assert "would likely reach 1e-05 at rtol 1e-6" in at(stored, 1e-4, gradient_rtol=1e-5).text()


def test_the_next_step_never_suggests_past_1e_12_and_names_a_reference_limit() -> None:
    row = {"kind": "ode", "problem": "p", "backend": "b", "solver": "s", "gradient_method": "g",
           "status": "ok", "rtol": 1e-10, "gradient_error": 0.5, "gradient_tier": "fail",
           "grad_s": 0.01, "ttfg_s": 1.0}  # fmt: skip
    far = next_step.suggest([row])
    assert far is not None and "tighter than 1e-12: a tighter tolerance alone will likely " \
        "not do; try another solver or gradient method" in far and "--tolerances" not in far  # fmt: skip
    judged = {**row, "gradient_error": 5e-5, "reference_error": 1e-4, "gradient_tier": "unjudged"}
    said = next_step.suggest([judged])
    assert said is not None and "set a tighter `rtol` under `[reference]`" in said
    assert next_step.suggest([{**row, "status": "max_steps", "gradient_error": None}]) is None


# --- item 6: unavailable rows collapsed ----------------------------------------------------


def test_unavailable_rows_are_one_line_per_library_under_the_table(
    stored: list[dict[str, Any]],
) -> None:
    julia = next(r for r in stored if r["status"] == "unavailable")
    rows = [*stored, {**julia, "solver": "Rodas5P"}]  # two cases, one library
    text = table.table(rows)
    assert not any(line.startswith("julia ") for line in text.splitlines())  # no table row
    lines = [ln for ln in flat(text).split("  ") if "julia:" in ln]
    said = flat(text)
    assert said.count("julia: unavailable, no rows:") == 1, lines
    assert "julia executable not found on PATH" in said and "juliaup add 1.11" in said
    # the report: no table row, one note per library among the failures
    assert publish.failure_notes(rows).count(table.unavailable_notes(rows)[0]) == 1
    assert not any(r[0] == "julia" for r in publish._table(rows, ["backend"],
                                                             lambda r: [r["backend"]], False).rows)


# --- whose workers: the host watch tells this run's from others' ----------------------------


@pytest.fixture
def hanging_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Three real worker processes whose job hangs, markers in a private folder."""
    monkeypatch.setenv("SCIML_BENCH_ACTIVE_DIR", str(tmp_path / "active"))
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"kind": "ode", "_fault": "hang"}))
    procs = [subprocess.Popen([*SCIML[:1], "-m", "sciml_bench.run.worker", str(job),
                               str(tmp_path / f"events{i}.jsonl")]) for i in range(3)]  # fmt: skip
    # a marker counts once /proc shows the worker's own command line: until the child has
    # exec'd (late on a loaded machine) it shows pytest's, and the watch rightly skips it
    deadline = time.monotonic() + 30
    while not all(_alive(p.pid) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def test_the_watch_counts_this_runs_workers_apart_from_another_runs(
    hanging_workers: list[Any],
) -> None:
    a, b, other = hanging_workers
    watches = [HostWatch(a.pid, "run-A"), HostWatch(b.pid, "run-A"), HostWatch(other.pid, "run-B")]
    try:
        watches[0].sample()
        facts = watches[0].facts()
        assert (facts["concurrent_cases"], facts["concurrent_own"]) == (3, 2)
        watches[2].sample()
        assert (watches[2].concurrent, watches[2].concurrent_own) == (3, 1)
    finally:
        for w in watches:
            w.close()


# --- real runs (slow tier) -----------------------------------------------------------------

BUSY = "while True: pass"


@pytest.mark.slow
def test_a_run_beside_two_busy_processes_prints_a_provisional_verdict(tmp_path: Path) -> None:
    """``sciml-bench run`` of Robertson (diffsol, --quick) while two processes spin on this
    machine's cores: the verdict names the winner as provisional, with the load it was
    timed under and ``--load-limit``; ``show`` with that limit gives the firm verdict."""
    pytest.importorskip("pydiffsol")
    spinners = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)]
    try:
        r = subprocess.run([*SCIML, "run", "stiff-robertson", "-b", "diffsol", "--quick",
                            "--out", str(tmp_path)], capture_output=True, text=True,
                           timeout=300, env={**os.environ, "COLUMNS": "100"})  # fmt: skip
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    assert r.returncode == 0, r.stderr[-2000:]
    said = flat(r.stdout.split("\nverdict", 1)[1])
    assert said.startswith(": provisional, timed under load: diffsol bdf forward is the only "
                           "row with a passing gradient"), said
    assert "cores' worth of CPU (others_cpu; a row counts as quiet up to 0.5 cores)" in said
    (path,) = tmp_path.glob("*.h5")
    (row,) = store.read(path).records
    assert row["others_cpu"] > LOAD_LIMIT and row["concurrent_own"] == 1
    limit = float(said.split("--load-limit ")[1].split()[0])
    assert limit >= row["others_cpu"]
    firm = flat(CliRunner().invoke(main, ["show", str(path), "--load-limit", str(limit)]).output)
    assert "verdict: diffsol bdf forward is the only row with a passing gradient" in firm


@pytest.mark.slow
def test_a_lorenz96_run_where_nothing_passes_prints_the_next_step(tmp_path: Path) -> None:
    """A Lorenz-96 ring at rtol 1e-6 (CVODES, --quick): the gradient warns, no row passes,
    and the verdict says which tolerance would likely make it pass."""
    pytest.importorskip("casadi")
    r = subprocess.run([*SCIML, "run", "--problem-file", str(DATA / "lorenz96-small.toml"), "-b",
                        "cvodes", "--quick", "--tolerances", "1e-6", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    said = flat(r.stdout.split("\nverdict", 1)[1])
    assert said.startswith(": no backend produced a passing gradient"), said
    assert "; next step: the best row reaches a gradient error of " in said
    assert "at rtol 1e-06; if the error shrinks in proportion to rtol, a row would likely " \
           "pass at rtol 1e-" in said and "rerun with `--tolerances 1e-" in said  # fmt: skip
