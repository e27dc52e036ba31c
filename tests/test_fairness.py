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
    """The page's "what ran" line for CVODES' sparse Brusselator ladder, from the published
    rows: CVODES picks its sparse linear solver by size, qr at N = 8 (128 states) and MUMPS
    from N = 16 (512 states, the periodic stencil's wide bands), so the line names both."""
    brus = next(f for f in PUBLISHED if f.name.startswith("stiff-brusselator-2d"))
    records = read(brus).records
    lines = fairness.ran_section(records, ["cvodes", "diffsol", "scipy"])
    qr = "qr (CasADi's default, sparse QR) on CasADi's exact Jacobian"
    mumps = "mumps (MUMPS sparse multifrontal LU, serial) on CasADi's exact Jacobian"
    sparse = next(ln for ln in lines if ln.startswith("| cvodes | stiff, array (sparse Jacobian) |"))
    assert sparse.startswith(
        f"| cvodes | stiff, array (sparse Jacobian) | BDF | forward | {mumps}; {qr} | 1e-06 | "
        "10000 | float64 |")
    dense = next(ln for ln in lines if ln.startswith("| cvodes | stiff, array (dense Jacobian) |"))
    # the N = 8 rung alone ran qr only; from N = 16 on, MUMPS only
    at = {n: fairness.ran_settings([r for r in records if r.get("size") == n])
          for n in (8, 16)}  # fmt: skip
    assert at[8][("cvodes", "stiff, array (sparse Jacobian)")][2] == {qr}
    assert at[16][("cvodes", "stiff, array (sparse Jacobian)")][2] == {mumps}
    # a never-run row (unavailable, or a skipped rung) adds no settings: no julia line,
    # and CVODES' dense ladder, skipped at N = 64 and 128, still names LAPACK LU alone
    julia = [r for r in records if r["backend"] == "julia"]
    assert julia and all(r["status"] == "unavailable" for r in julia)
    assert not any(ln.startswith("| julia |") for ln in lines)
    assert dense.split(" | ")[4] == "lapacklu (LAPACK dense LU) on CasADi's exact Jacobian"


def test_the_command_writes_the_page(tmp_path: Path) -> None:
    out = tmp_path / "fairness.md"
    res = CliRunner().invoke(main, ["fairness", str(PUBLISHED[0]), "-o", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert "## What the published rows ran with" in text and PUBLISHED[0].name in text
    bad = CliRunner().invoke(main, ["fairness", str(tmp_path / "missing.h5")])
    assert bad.exit_code == 2 and "missing.h5" in bad.output
