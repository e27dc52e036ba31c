"""The README's quick start is exactly two commands, and CI runs the second; the README
stays short and its links, and the docs pages', point to files that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", section, re.S)]


def test_two_commands_one_runs_robertson_one_runs_the_tests() -> None:
    cmds = _quick_start_commands()
    assert len(cmds) == 2
    assert all("\n" not in c for c in cmds)
    assert cmds[0].endswith("sciml-bench run stiff-robertson")
    assert "pytest" in cmds[1]
    assert all("-c constraints.txt" in c for c in cmds)


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert _quick_start_commands()[1] in ci.splitlines()


def test_constraints_pin_the_cpu_torch() -> None:
    pins = (ROOT / "constraints.txt").read_text().splitlines()
    assert "torch==2.13.0" in pins
    assert all("==" in p for p in pins if p and not p.startswith("#"))


def test_the_readme_is_short() -> None:
    """The README is what a newcomer reads to the end; the manual lives in docs/."""
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= 300, f"README.md has {n} lines; move detail to a page in docs/"


def test_every_relative_link_in_the_readme_and_docs_points_to_a_file() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = target.split("#", 1)[0]
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, f"links to missing files: {broken}"


def test_the_readmes_reference_claim_at_30000_states_is_the_published_files() -> None:
    """The README says how the 30,000-state ROBER rung's reference was made; the published
    file's rows say it too (``reference_method``): the rtol and whether a cross-check ran
    must be the file's (issue 53: the README claimed a cross-check the file did not have)."""
    import re

    from sciml_bench.results import store

    text = (ROOT / "README.md").read_text()
    claim = text[text.index("- **Gradients.** At 30,000 ROBER states"):][:400]
    files = sorted((ROOT / "results" / "published").glob("stiff-robertson-groups-*.h5"))
    assert files, "results/published holds no ROBER-groups ladder (it ships with the repository)"
    methods = {r["reference_method"] for f in files for r in store.read(f).records
               if r.get("kind", "ode") == "ode" and r.get("size") == 10_000
               and r.get("reference_method")}  # fmt: skip
    assert methods, "the published ladder has no row at 10,000 groups"
    method = methods.pop()
    rtol = re.search(r"at rtol ([0-9.e+-]+),", method[method.index("gradient:"):]).group(1)
    said = re.search(r"at\s+rtol\s+([0-9.e+-]+)", claim).group(1)
    assert float(said) == float(rtol), (rtol, claim)
    checked = "no cross-check" not in method
    assert ("no cross-check" not in claim) == checked, (method, claim)
