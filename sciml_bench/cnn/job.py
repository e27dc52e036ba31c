"""The CNN variant as a job kind (the interface of :mod:`sciml_bench.run.jobs`).

Its worker trains the variant and emits the whole record as one ``result``
event; a worker that died first leaves a row saying how.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def work(job: dict[str, Any], events: Any) -> None:
    from sciml_bench.cnn import run_variant

    def progress(stage: str, s: float | None = None) -> None:
        events.emit(cnn_stage=stage, s=s)

    events.emit(result=run_variant(job, progress))


def record(job: dict[str, Any], processes: Sequence[Any]) -> dict[str, Any]:
    """The record the worker reported or, if it died first, a row with its ending."""
    from sciml_bench.cnn.train_loop import empty_record

    proc = processes[0]
    results = [e["result"] for e in proc.events if "result" in e]
    if results:
        return dict(results[-1])
    rec = empty_record(job.get("variant", ""), job)
    rec["status"], rec["reason"] = proc.status, proc.reason
    return rec
