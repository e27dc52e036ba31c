"""A model the suite does not ship, judged end to end: the Hodgkin-Huxley neuron.

``tests/data/hodgkin-huxley.toml`` (4 states, 8 parameters, written for these tests) under
a constant current spikes every ~12 ms. Its rows get tiers from a full reference gradient;
and when the reference cannot be built, the rows keep their gradients, say they are
unjudged with the reason and the key to set, and the verdict says "gradients computed but
not judged" (never "no backend computed a gradient").
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sciml_bench.cli.main import main
from sciml_bench.problem import reference

HH = Path(__file__).parent / "data" / "hodgkin-huxley.toml"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("casadi") is None,
                       reason="needs CasADi (pip install -c constraints.txt -e '.[cvodes]')"),
]  # fmt: skip


def _run(tmp_path: Path, *extra: str) -> tuple[list[dict], dict]:
    r = CliRunner().invoke(main, ["run", "--problem-file", str(HH), "-b", "cvodes", "--quick",
                                  "--json", "--out", str(tmp_path / "out"), *extra])  # fmt: skip
    assert r.exit_code == 0, r.output[-3000:]
    doc = json.loads(r.stdout)
    rows = [x for x in doc if x.get("kind") != "verdict"]
    (verdict,) = [x for x in doc if x.get("kind") == "verdict"]
    return rows, verdict


def test_its_rows_get_tiers_from_a_full_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCIML_BENCH_CACHE", str(tmp_path / "cache"))
    rows, verdict = _run(tmp_path)
    (row,) = rows
    assert row["status"] == "ok" and row["gradient_check"] == "full"
    assert 0 < row["reference_error"] < 1e-5  # measured 6e-9: it resolves a pass
    assert row["gradient_tier"] in ("pass", "warn", "fail")
    assert row["gradient_worst_at"] in ("gNa", "gK", "gL", "ENa", "EK", "EL", "I", "Cm")
    assert len(row["gradient_judged"]) == 8 and row["reference_version"] == reference.REFERENCE_VERSION
    assert "not judged" not in str(verdict["reason"])


def test_a_reference_that_fails_leaves_the_rows_unjudged_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no fallback and an rtol below what float64 steps resolve through a spike: the
    # reference solver really fails, the backends (at rtol 1e-6) do not
    monkeypatch.setenv("SCIML_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(reference, "FALLBACK_METHODS", ("BDF",))
    monkeypatch.setattr(reference, "FALLBACK_LOOSEN", (1.0,))
    text = HH.read_text().replace("span = [0.0, 30.0]", "span = [0.0, 100.0]").replace(
        "save = { linspace = [0.5, 30.0, 60] }", "save = { linspace = [1.0, 100.0, 100] }")
    text += '\n[reference]\nmethod = "BDF"\nrtol = 1.0e-13\n'
    failing = tmp_path / "hh-failing.toml"
    failing.write_text(text)
    r = CliRunner().invoke(main, ["run", "--problem-file", str(failing), "-b", "cvodes",
                                  "--quick", "--json", "--out", str(tmp_path / "out")])  # fmt: skip
    assert r.exit_code == 0, r.output[-3000:]
    doc = json.loads(r.stdout)
    (row,) = [x for x in doc if x.get("kind") != "verdict"]
    (verdict,) = [x for x in doc if x.get("kind") == "verdict"]
    assert row["status"] == "ok" and row["gradient_tier"] == "unjudged"
    assert len(row["gradient"]) == 8  # computed, kept
    note = row["gradient_error_note"]
    assert note.startswith("unjudged: the reference failed: ") and "Fix: set [reference]" in note
    assert "gradients computed but not judged" in verdict["reason"]
    assert "no backend computed a gradient" not in verdict["reason"]
