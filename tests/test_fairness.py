"""The fairness page: its stated defaults are the code's, it is regenerated from its sources,
and its "what ran" table reads real results files."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from sciml_bench import backends
from sciml_bench.cli.main import main
from sciml_bench.results import fairness
from sciml_bench.results.store import read

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = sorted((ROOT / "results" / "published").glob("*.h5"))


def test_every_backend_has_an_entry_and_every_setting_a_reason() -> None:
    choices = fairness.load_choices()
    assert set(backends.names()) <= set(choices)
    for name, entry in choices.items():
        assert entry.get("setting"), f"{name} states no setting"
        for s in entry["setting"]:
            assert s["name"] and s["ours"] and s["why"], (name, s)


def test_the_stated_defaults_are_the_codes() -> None:
    assert fairness.disagreements(fairness.load_choices()) == []


def test_a_stated_default_the_code_does_not_use_is_named() -> None:
    choices = fairness.load_choices()
    choices["diffrax"]["defaults"]["stiff"] = "Kvaerno5"
    del choices["torchode"]
    wrong = fairness.disagreements(choices)
    assert len(wrong) == 2
    assert any("'Kvaerno5'" in w and "'Kvaerno4'" in w for w in wrong)
    assert any(w.startswith("torchode: no entry") for w in wrong)


def test_the_page_in_docs_is_regenerated_from_its_sources() -> None:
    records = [r for f in PUBLISHED for r in read(f).records]
    text = fairness.page(fairness.load_choices(), records, [f.name for f in PUBLISHED])
    assert (ROOT / "docs" / "fairness.md").read_text() == text, (
        "docs/fairness.md is stale: run `sciml-bench fairness results/published/*.h5 "
        "-o docs/fairness.md`")


def test_what_ran_is_read_from_the_rows() -> None:
    brus = next(f for f in PUBLISHED if f.name.startswith("stiff-brusselator-2d"))
    records = read(brus).records
    ran = fairness.ran_settings(records)
    sparse = ran[("cvodes", "stiff, array (sparse Jacobian)")]
    solver, _, linear, rtol = sparse[:4]
    expected = {r["linear_solver"] for r in records if r["backend"] == "cvodes"
                and r.get("jacobian") == "sparse" and r["status"] != "unavailable"}  # fmt: skip
    assert linear == expected and solver == {"BDF"} and rtol == {"1e-06"}
    # a never-run row (unavailable) adds no settings
    julia = [r for r in records if r["backend"] == "julia"]
    assert julia and all(r["status"] == "unavailable" for r in julia)
    assert not any(b == "julia" for b, _ in ran)


def test_the_command_writes_the_page(tmp_path: Path) -> None:
    out = tmp_path / "fairness.md"
    res = CliRunner().invoke(main, ["fairness", str(PUBLISHED[0]), "-o", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert "## What the published rows ran with" in text and PUBLISHED[0].name in text
    bad = CliRunner().invoke(main, ["fairness", str(tmp_path / "missing.h5")])
    assert bad.exit_code == 2 and "missing.h5" in bad.output
