"""``sciml-bench rejudge``: a results file judged again against a replaced reference, on
real HDF5 files written by the store's own writer; and the publish script's refusal of
files older than the code (:func:`sciml_bench.results.rejudge.stale_reasons`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from sciml_bench.cli.main import main
from sciml_bench.problem import reference, spec
from sciml_bench.problem.reference import REFERENCE_VERSION
from sciml_bench.results import rejudge, store
from sciml_bench.run.ode import gradient_scores, judged_space, reference_columns

ROOT = Path(__file__).resolve().parent.parent
#: the replaced reference's gradient is the true one times (1 + SHIFT)
SHIFT = 9.5e-4


def _row(p: Any, ref: Any, backend: str, g: np.ndarray, grad_ms: float,
         with_theta: bool = True) -> dict[str, Any]:  # fmt: skip
    """An ``ok`` ODE row with gradient ``g``, scored as a run scores it against ``ref``."""
    gm = {"diffrax": "RecursiveCheckpointAdjoint", "cvodes": "forward"}[backend]
    r: dict[str, Any] = {
        "kind": "ode", "problem": p.name, "backend": backend, "solver": "BDF",
        "gradient_method": gm, "rtol": 1e-6, "atol": 1e-10, "dtype": "float64",
        "device": "cpu", "status": "ok", "loss": ref.loss,
        "ttfg_samples": [grad_ms / 100], "solve_samples": [grad_ms / 4] * 3,
        "grad_samples": [grad_ms / 1e3] * 3,
        "gradient": dict(zip(p.param_names, g.tolist(), strict=True)),
        **reference_columns(ref, gm),
        **gradient_scores(g, ref.gradient, p, ref.reference_error),
    }  # fmt: skip
    if with_theta:
        r.update(judged_space(g, p.theta0, p.log_params))
    else:  # a file from before gradient_judged and gradient_theta were stored
        r.pop("gradient_error_measure")
    return {k: v for k, v in r.items() if v is not None}


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Two records equal, NaN equal to NaN."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


@pytest.fixture
def robertson(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A results file of stiff-robertson rows scored against the real reference (copied
    into a cache of this test's own), then that cache's reference replaced: its gradient
    shifted by SHIFT, its error estimate 1e-8."""
    p = spec.load("stiff-robertson")
    shared = Path(reference.get(p).cache_path)  # the session's cache: built once
    (tmp_path / "cache").mkdir()
    shutil.copy(shared, tmp_path / "cache" / shared.name)
    monkeypatch.setenv("SCIML_BENCH_CACHE", str(tmp_path / "cache"))
    ref = reference.get(p)  # this test's own copy, replaced below
    r = np.asarray(ref.gradient)
    rows = [
        _row(p, ref, "diffrax", r * (1 + 1e-3), 20.0),  # warn now, pass after
        _row(p, ref, "cvodes", r * (1 - 2e-5), 30.0, with_theta=False),  # pass, then warn
        {"kind": "ode", "problem": p.name, "backend": "scipy", "solver": "LSODA",
         "gradient_method": "none", "rtol": 1e-6, "status": "ok", "solve_samples": [1e-3] * 3,
         "complex_step_agreement": float("nan")},
        {**_row(p, ref, "diffrax", r, 50.0), "problem": "no-such-problem"},
    ]  # fmt: skip
    path = tmp_path / "run.h5"
    writer = store.ResultsWriter(path, {"git_commit": "abc"}, "sciml-bench run stiff-robertson")
    for row in rows:
        writer.add(row)
    writer.finish("complete")
    writer.close()
    shifted = dataclasses.replace(ref, gradient=(r * (1 + SHIFT)).tolist(), reference_error=1e-8)
    reference._write(Path(ref.cache_path), shifted)
    return {"path": path, "rows": rows, "problem": p}


def _hand_error(factor: float) -> float:
    """‖g − r'‖/‖r'‖ of ``g = factor·r`` against ``r' = (1 + SHIFT)·r``, in any space."""
    return abs(factor - (1 + SHIFT)) / (1 + SHIFT)


def test_rejudge_moves_tiers_and_says_so(robertson: dict[str, Any]) -> None:
    path: Path = robertson["path"]
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    old = store.read(path).records
    assert old[0]["gradient_tier"] == "warn" and math.isclose(old[0]["gradient_error"], 1e-3)
    assert old[1]["gradient_tier"] == "pass" and math.isclose(old[1]["gradient_error"], 2e-5)
    res = CliRunner().invoke(main, ["rejudge", str(path)])
    assert res.exit_code == 0, res.output
    out = path.with_name("run-rejudged.h5")
    new = store.read(out).records
    up, down = _hand_error(1 + 1e-3), _hand_error(1 - 2e-5)  # 4.995e-05, 9.69e-04
    assert new[0]["gradient_tier"] == "pass" and math.isclose(new[0]["gradient_error"], up,
                                                              rel_tol=1e-6)  # fmt: skip
    assert new[1]["gradient_tier"] == "warn" and math.isclose(new[1]["gradient_error"], down,
                                                              rel_tol=1e-6)  # fmt: skip
    # what the re-judge replaced is kept: the old error, tier, method and version
    was = new[0]["rejudged_from"]
    assert was["gradient_tier"] == "warn" and math.isclose(was["gradient_error"], 1e-3)
    assert was["reference_version"] == REFERENCE_VERSION and was["reference_method"]
    assert new[0]["reference_version"] == REFERENCE_VERSION and new[0]["reference_error"] == 1e-8
    assert "θ not recorded" in new[1]["rejudge_note"] and "gradient_theta" in new[1]
    # the table names both moves, old error and tier -> new, and the verdict that moved
    text = res.stdout
    assert "2 row(s) re-judged: 2 tier(s) moved" in text
    assert re.search(rf"diffrax BDF RecursiveCheckpointAdjoint rtol 1e-06\s+1\.00e-03 warn\s+->"
                     rf"\s+{up:.2e} pass", text)  # fmt: skip
    # the older row's error was on the measure of its time: marked, and the mark explained
    assert re.search(rf"cvodes BDF forward rtol 1e-06\s+2\.00e-05 pass †\s+->\s+{down:.2e} warn",
                     text)  # fmt: skip
    assert "† on the measure it was judged with then" in text
    assert "verdicts: 1 of 2 moved" in text  # stiff-robertson's; the unknown problem's kept
    assert "- verdict: cvodes BDF forward is the only row with a passing gradient" in text
    assert "+ verdict: diffrax BDF RecursiveCheckpointAdjoint is the only row with a passing" in text
    # a row without a gradient is carried as it was; an unknown problem's kept, with a warning
    assert _same(new[2], old[2])
    assert "not re-judged: no problem 'no-such-problem'" in new[3]["rejudge_note"]
    assert _same({k: v for k, v in new[3].items() if k != "rejudge_note"}, old[3])
    assert "warning: 1 row(s) kept as they were" in res.stderr and "no-such-problem" in res.stderr
    assert "reference for stiff-robertson (3 states, 3 parameters) ..." in res.stderr
    # the input is unchanged, byte for byte, and never overwritten
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    again = CliRunner().invoke(main, ["rejudge", str(path)])
    assert again.exit_code == 2 and "exists; remove it or pass --out" in again.output
    same = CliRunner().invoke(main, ["rejudge", str(path), "--out", str(path)])
    assert same.exit_code == 2 and "never overwritten" in same.output


def test_rejudge_json_and_the_new_files_header(robertson: dict[str, Any]) -> None:
    path: Path = robertson["path"]
    out = path.with_name("tight.h5")
    res = CliRunner().invoke(main, ["rejudge", str(path), "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [(r["old_tier"], r["new_tier"], r["moved"]) for r in doc["rows"]] == [
        ("warn", "pass", True), ("pass", "warn", True)]  # fmt: skip
    assert doc["kept"][0]["row"].startswith("no-such-problem")
    assert doc["verdicts_before"] != doc["verdicts_after"]
    run = store.read(out)
    assert run.meta["status"] == "complete" and run.meta["command"].startswith("sciml-bench run")
    assert run.environment["git_commit"] == "abc"  # the run's: the timings' code
    assert run.environment["rejudged"]["reference_version"] == REFERENCE_VERSION
    assert run.environment["rejudged"]["from"] == str(path)


@pytest.mark.slow  # several seconds: two reference builds (docs/testing.md)
def test_a_ladder_gets_one_reference_per_size(tmp_path: Path) -> None:
    """Rows of stiff-robertson-groups at sizes 1 and 2, each rebuilt at its size."""
    base = spec.load("stiff-robertson-groups")
    rows = []
    for size in (1, 2):
        p = spec.at_size(base, size)
        ref = reference.get(p)  # the session's cache: built once for every test
        g = np.asarray(ref.gradient) * (1 + 3e-3)
        rows.append({**_row(p, ref, "cvodes", g, 10.0), "size": size,
                     "size_name": base.laddered.ladder_name, "jacobian": "sparse"})  # fmt: skip
    path = tmp_path / "ladder.h5"
    writer = store.ResultsWriter(path, {}, "sciml-bench run stiff-robertson-groups --sizes 1,2")
    for row in rows:
        writer.add(row)
    writer.close()
    res = CliRunner().invoke(main, ["rejudge", str(path)])
    assert res.exit_code == 0, res.output
    assert "at size 1 (3 states" in res.stderr and "at size 2 (6 states" in res.stderr
    assert "2 row(s) re-judged: 0 tier(s) moved, 2 kept their tier" in res.stdout
    new = store.read(tmp_path / "ladder-rejudged.h5").records
    assert [r["size"] for r in new] == [1, 2]
    assert all(math.isclose(r["gradient_error"], 3e-3, rel_tol=1e-6) for r in new)


#: the judge's LV ensemble (tests/data), its members varying a alone, renamed for this test
ENSEMBLE_LV = ((Path(__file__).parent / "data" / "ensemble-lv.toml").read_text()
               .replace('"ens-lv-judge"', '"ens-lv-rejudge"')
               .replace('x = { normal = [0.0, 0.1], apply = "shift" }\n', ""))


def _ensemble_row(backend: str, semantics: str, **kw: Any) -> dict[str, Any]:
    """An ``ok`` ensemble row of size 4 as the old judge wrote it: a tier, no estimate."""
    return {"kind": "ensemble", "problem": "ens-lv-rejudge", "backend": backend,
            "solver": "dopri5", "gradient_method": "backprop", "semantics": semantics,
            "size": 4, "rtol": 1e-7, "status": "ok", "solve_samples": [1e-3] * 3,
            "grad_samples": [2e-3] * 3, "ttfg_samples": [1.0], "sample": 3,
            "gradient_members": 3, "gradient_batch": "timed", "solution_error": 1e-7,
            "reference_method": "central FD of the mean loss", **kw}  # fmt: skip


def test_rejudge_scores_ensemble_rows_and_withdraws_projection_tiers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ensemble row that stored its gradient is scored against the full ensemble
    reference (its tier moves with it, now with a reference error); one judged on 8
    projections and stored without its gradient loses its tier, saying why."""
    from sciml_bench.problem import ensemble_reference as er

    monkeypatch.setenv("SCIML_BENCH_CACHE", str(tmp_path / "cache"))
    toml = tmp_path / "ens-lv-rejudge.toml"
    toml.write_text(ENSEMBLE_LV)
    p = spec.load(toml)
    r = np.asarray(er.get(p).gradient)
    g = r * (1 + 3e-3)
    rows = [
        _ensemble_row("torchdiffeq", "coupled", gradient_error=1e-6, gradient_tier="pass",
                      gradient_check="full",
                      gradient=dict(zip(p.param_names, g.tolist(), strict=True))),
        _ensemble_row("torchode", "independent", gradient_error=2e-5, gradient_tier="pass",
                      gradient_check="directional 8"),
    ]  # fmt: skip
    path = tmp_path / "ens.h5"
    writer = store.ResultsWriter(path, {}, f"sciml-bench run --problem-file {toml}")
    for row in rows:
        writer.add(row)
    writer.close()
    res = CliRunner().invoke(main, ["rejudge", str(path), "--problem-file", str(toml)])
    assert res.exit_code == 0, res.output
    assert "ensemble reference for ens-lv-rejudge (3 members, 2 parameters)" in res.stderr
    new = store.read(tmp_path / "ens-rejudged.h5").records
    scored, withdrawn = new
    assert scored["gradient_tier"] == "warn"
    assert math.isclose(scored["gradient_error"], 3e-3, rel_tol=1e-6)
    assert 0 < scored["reference_error"] < 1e-8 and scored["gradient_check"] == "full"
    assert scored["rejudged_from"]["gradient_tier"] == "pass"
    assert f"-ensemble-v{er.VERSION}-s3.json" in scored["reference_path"]
    assert scored["solution_error"] == 1e-7  # member states are not stored: kept
    assert withdrawn["gradient_tier"] == "unjudged" and "gradient_error" not in withdrawn
    assert "its tier is withdrawn" in withdrawn["gradient_error_note"]
    assert "8 projections" in withdrawn["gradient_error_note"]
    assert withdrawn["rejudged_from"]["gradient_error"] == 2e-5
    text = res.stdout
    assert "2 row(s) re-judged: 2 tier(s) moved" in text
    assert re.search(r"torchode dopri5 backprop independent rtol 1e-07 n=4\s+2\.00e-05 pass ‡"
                     r"\s+->\s+- unjudged", text), text  # fmt: skip
    assert "‡ on the measure it was judged with then: norm-wise over 8 random projections" in text
    # the re-judged file is not stale for its ensemble rows: they name the new reference
    assert rejudge.stale_reasons(new, {"git_commit": "c"}, REFERENCE_VERSION,
                                 lambda c: False) == []  # fmt: skip


V = f"-v{REFERENCE_VERSION}.json"
OLD = f"-v{REFERENCE_VERSION - 1}.json"


def _ode(path: str, **kw: Any) -> dict[str, Any]:
    return {"kind": "ode", "reference_path": f"/c/stiff-robertson-0123456789abcdef{path}",
            "reference_source": "cache", "gradient_error": 1e-5, **kw}  # fmt: skip


@pytest.mark.parametrize(("records", "env", "changed", "expected"), [
    ([_ode(V)], {"git_commit": "c0ffee-dirty"}, False, []),
    ([_ode(OLD)], {"git_commit": "c0ffee"}, False,
     [f"rows judged with reference version {REFERENCE_VERSION - 1} (now {REFERENCE_VERSION})"]),
    # a re-judged row: its own reference_version wins over its old cache path
    ([_ode(OLD, reference_version=REFERENCE_VERSION)], {"git_commit": "c0ffee"}, False, []),
    ([_ode(V)], {"git_commit": "c0ffee"}, True,
     ["sciml_bench/ changed between its run's commit c0ffee and HEAD"]),
    ([_ode(V)], {"git_commit": "c0ffee"}, None, ["its run's commit c0ffee is not in this repository"]),
    ([_ode(V)], {}, False, ["its run recorded no git commit"]),
    # no cache path on the row: the run's environment.references says it
    ([{"kind": "ensemble", "problem": "e", "solution_error": 1e-6}],
     {"git_commit": "c", "references": {"e": {"path": f"/c/e-0123456789abcdef{OLD[:-5]}-ensemble-s8.json"}}},
     False, [f"rows judged with reference version {REFERENCE_VERSION - 1} (now {REFERENCE_VERSION})"]),
    # a scored ensemble row judged by the finite-difference ensemble reference
    ([{"kind": "ensemble", "problem": "e", "gradient_error": 1e-6,
       "reference_path": f"/c/e-0123456789abcdef{V[:-5]}-ensemble-s8.json"}],
     {"git_commit": "c"}, False,
     ["1 ensemble row(s) judged by an ensemble reference before version 2 (finite "
      "differences, no estimate of its own error)"]),
    ([{"kind": "ode", "gradient_error": 1e-5}], {"git_commit": "c"}, False,
     ["1 row(s) record no reference version (written before it was recorded)"]),
    # rows no reference judged: a CNN row, a row without a reference
    ([{"kind": "cnn"}, {"kind": "ode", "reference_source": "none", "status": "error"}],
     {"git_commit": "c"}, False, []),
])  # fmt: skip
def test_stale_reasons(records: list[dict[str, Any]], env: dict[str, Any], changed: bool | None,
                       expected: list[str]) -> None:  # fmt: skip
    asked: list[str] = []

    def code_changed(commit: str) -> bool | None:
        asked.append(commit)
        return changed

    assert rejudge.stale_reasons(records, env, REFERENCE_VERSION, code_changed) == expected
    assert asked in ([], [str(env.get("git_commit", "")).removesuffix("-dirty")])


def test_publish_refuses_a_stale_file(tmp_path: Path) -> None:
    """publish_results.py stops before the report on a file older than the code, naming
    the file and the fix (exit status 2), and loses nothing: the figures already published
    stay (they were once deleted before the check)."""
    raw = tmp_path / "published"
    raw.mkdir()
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "kept.png").write_bytes(b"\x89PNG")
    shutil.copy(ROOT / "tests" / "data" / "results-v1-stiff-robertson.h5", raw / "run.h5")
    (raw / "timings.json").write_text("{}")
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "publish_results.py"),
                        "--report-only", "--out", str(tmp_path)], capture_output=True, text=True,
                       timeout=300, check=False)  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"{raw / 'run.h5'} is older than the code it would be published with" in r.stderr
    assert "--allow-stale" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "README.md").exists()
    assert (tmp_path / "figures" / "kept.png").read_bytes() == b"\x89PNG"
