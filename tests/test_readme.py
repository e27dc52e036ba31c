"""The README's quick start is exactly two commands, and CI runs the second."""

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
