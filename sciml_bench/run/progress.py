"""The progress lines a run prints on stderr while its cases run."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from sciml_bench.run.cases import CaseTask
from sciml_bench.run.executor import Sink

Progress = Callable[[str], None]


def to_stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)



def phase_lines(progress: Progress, task: CaseTask | None = None) -> Sink:
    """The progress lines of a case's worker events."""

    def sink(k: int, e: dict[str, Any]) -> None:
        if "phase" in e:
            progress(f"      process {k + 1}: {e['phase']:<11} {e['s']:8.3f} s")
        elif "status" in e and e["status"] != "ok":
            progress(f"      process {k + 1}: {e['status']}: {e.get('reason', '')[:100]}")

    return sink



def status_line(rec: dict[str, Any]) -> str:
    """The line under a case's progress saying how it ended."""
    return f"      -> {rec['status']}" + (f": {rec['reason']}" if rec["reason"] else "")
