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
