"""A ladder rung's steady samples hold no warm-up (issue 32, item 2).

Diffrax's first solve runs one compiled program (states, result code, step counts), its
steady samples another (the states alone); a rung took no warm-up call, so that program's
compilation (1.3-2.2 s) was the first steady solve sample, against 4-30 ms for the rest.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from sciml_bench.problem import reference, spec
from sciml_bench.results import store
from sciml_bench.run import runner
from sciml_bench.run.sized_ladders import RUNG_WARMUPS
from sciml_bench.run.steady import warmups_of

ROOT = Path(__file__).resolve().parent.parent
#: the 1-D heat equation with decay: a cheap stiff array problem
HEAT = ROOT / "tests" / "data" / "heat-1d.toml"
#: a steady sample may be this many times its row's median at most (a compilation is 50-450x)
SPREAD = 10.0
#: ... unless it is shorter than any compilation (1.3-2.2 s measured): a first sample a few
#: ms long (diffrax solve 4.6 ms against 0.4, diffsol gradient 4.3 ms against 0.12, both
#: seen 2026-11-28 in full runs) is a cache or allocator effect, not a warm-up timed
COMPILE_S = 0.25


def test_warmups_of_reads_one_count_or_one_per_kind() -> None:
    assert warmups_of({}, "solve") == 1 and warmups_of({"warmups": 0}, "grad") == 0
    assert warmups_of({"warmups": 3}, "solve") == 3
    job = {"warmups": RUNG_WARMUPS}
    assert (warmups_of(job, "solve"), warmups_of(job, "grad")) == (1, 0)


@pytest.mark.slow
def test_no_steady_sample_of_a_ladder_rung_holds_a_warm_up(tmp_path: Path) -> None:
    """A real ladder (Diffrax and diffsol, dense, the smallest size, fresh workers): every
    steady solve and gradient sample is within 10x its row's median, and the rows are ok
    with at least three samples of each kind, read back from the results file."""
    pytest.importorskip("diffrax")
    pytest.importorskip("pydiffsol")
    problem = spec.load(HEAT)
    first = spec.at_size(problem, 4)
    compiled = reference.compile_problem(first, reference.get(first))
    ladders = runner.plan_sized(compiled, ["diffrax", "diffsol"], [4], jacobians=["dense"])
    assert sorted(lad.case.backend for lad in ladders) == ["diffrax", "diffsol"]
    writer = store.ResultsWriter(tmp_path / "r.h5", {}, "test")
    settings = runner.Settings(cold=1, repeats=3, budget_s=120.0, steady_budget_s=2.0)
    runner.run_sized(problem, ladders, writer, settings, progress=lambda m: None)
    writer.close()
    rows = store.read(tmp_path / "r.h5").records
    assert sorted(r["backend"] for r in rows) == ["diffrax", "diffsol"]
    for r in rows:
        assert r["status"] == "ok", r["reason"]
        for kind in ("solve", "grad"):
            samples = r[f"{kind}_samples"]
            assert len(samples) >= 3, (r["backend"], kind, samples)
            worst = max(samples) / statistics.median(samples)
            assert worst <= SPREAD or max(samples) < COMPILE_S, (f"{r['backend']} {kind}: a steady sample is {worst:.0f}x "
                                     f"the median (a warm-up timed?): {samples}")  # fmt: skip


def _rung(size: int, n_state: int, **claims: object) -> dict[str, object]:
    """A ladder row as a results file holds it (only the keys the table reads)."""
    return {"kind": "ode", "problem": "ladder-notes", "backend": "diffsol", "solver": "bdf",
            "gradient_method": "forward", "jacobian": "sparse", "size": size,
            "n_state": n_state, "status": "ok", "rtol": 1e-6, "solve_samples": [0.01] * 3,
            "grad_samples": [0.02] * 3, "solution_error": 1e-6, "gradient_error": 3e-5,
            "gradient_tier": "pass", **claims}  # fmt: skip


LADDER = [
    _rung(8, 128, reference_unverified=True, complex_step_agreement=2.8e-5),
    _rung(16, 512, reference_unverified=False, complex_step_agreement=5.8e-7),
    _rung(32, 2048, reference_unverified=False, complex_step_agreement=float("nan"),
          complex_step_skipped="not run: 2048 states > 1000 (three complex BDF solves at "
          "this size cost too much)"),
]  # fmt: skip


def _claims(text: str) -> tuple[str, str]:
    """The ``*`` and ``†`` notes in ``text`` (whitespace and wrapping folded), each up to
    the next note, or '' for one that is missing."""
    flat = " ".join(text.split())
    star = flat.partition("* scored against an unverified")[2][:120]
    dagger = flat.partition("† size")[2][:200]
    return star, dagger


def test_a_ladder_table_explains_pass_star_and_marks_unchecked_rungs(tmp_path: Path) -> None:
    """`pass*` (an unverified reference) is explained under a ladder's terminal table and
    in report.md; the rung above 1,000 states, whose reference was never cross-checked,
    says so (`pass†` and a note naming its size and why), and the checked one says nothing."""
    from sciml_bench.results import publish
    from sciml_bench.results.table import table

    text = table(LADDER)
    rows = {ln.split()[4]: ln for ln in text.splitlines() if ln.startswith("diffsol")}
    assert "3.00e-05 pass* " in rows["8"] and "3.00e-05 pass† " in rows["32"]
    assert "3.00e-05 pass " in rows["16"]
    star, dagger = _claims(text)
    assert "cross-check disagrees by 2.8e-05 > 1e-06" in star
    assert dagger.startswith(" 32: the reference gradient was not cross-checked")
    assert "2048 states > 1000" in dagger and "16" not in dagger.partition(":")[0]
    writer = store.ResultsWriter(tmp_path / "r.h5", {}, "test")
    for rec in LADDER:
        writer.add(dict(rec))
    writer.finish("complete")
    paths = publish.write([store.read(tmp_path / "r.h5")], tmp_path / "report")
    md = paths["markdown"].read_text(encoding="utf-8")
    assert "pass* |" in md and "pass† |" in md
    assert all(_claims(md)), "report.md's ladder notes miss the * or † line"
