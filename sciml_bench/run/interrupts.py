"""Ctrl-C, SIGTERM, SIGHUP or a lost engine mid-run: the file marked interrupted, the
:class:`Interrupt` the CLI turns into an exit status, and the partial record of a case
cut between its processes."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

from sciml_bench.results.store import ResultsWriter
from sciml_bench.run.executor import EngineLost
from sciml_bench.run.jobs import Process, kind_of
from sciml_bench.run.signals import signal_of


class Interrupt(Exception):
    """The run was interrupted (``signum``: SIGINT, SIGTERM or SIGHUP); every
    completed case is already on disk."""

    def __init__(self, message: str, signum: int = signal.SIGINT):
        super().__init__(message)
        self.signum = signum



@contextlib.contextmanager
def saved_on_interrupt(writer: ResultsWriter, done: list[dict[str, Any]]) -> Iterator[None]:
    """Turn Ctrl-C (or SIGTERM/SIGHUP, :mod:`sciml_bench.run.signals`), or the loss of
    the executor's engine, into :class:`Interrupt` once the file is marked interrupted."""
    try:
        yield
    except EngineLost as e:
        writer.finish("interrupted")
        raise Interrupt(f"{e}: {len(done)} completed case(s) are saved in {writer.path}") from None
    except KeyboardInterrupt as e:  # Interrupted and Stopped included
        sig = signal_of(e)
        writer.finish("interrupted", interrupted_by=sig.name)
        raise Interrupt(
            f"interrupted by {sig.name}: {len(done)} completed case(s) are saved in {writer.path}",
            sig,
        ) from None



def partial_record(job: dict[str, Any], processes: list[Process], planned: int, by: str) -> dict[str, Any]:
    """The record of a case interrupted after some of its processes finished."""
    rec = kind_of(job).record(job, processes)
    note = f"partial: interrupted by {by} after {len(processes)} of {planned} cold processes"
    rec["reason"] = f"{rec['reason']}; {note}" if rec.get("reason") else note
    return {**rec, "partial": True, "cold_processes_planned": planned}

