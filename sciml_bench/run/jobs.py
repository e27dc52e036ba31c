"""The one interface every kind of job implements, and how the worker finds it.

A *job* is a JSON-able dict with a ``kind`` (``"ode"``, ``"cnn"``, ``"ensemble"``,
``"train"``). Its kind supplies two functions:

- ``work(job, events)`` runs inside the fresh worker process and reports
  through ``events.emit(**event)`` (JSON-lines, flushed per event);
- ``record(job, processes)`` turns the raw events of the job's worker
  processes (the first one full, any others cold-only) into one record.

A kind is a module that defines both; ``KINDS`` names it by import path, so
``cnn/`` implements the interface without importing ``run/``.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

#: job kind -> module defining ``work`` and ``record``
KINDS: dict[str, str] = {
    "ode": "sciml_bench.run.ode",
    "cnn": "sciml_bench.cnn.job",
    "ensemble": "sciml_bench.run.ensemble",
    "train": "sciml_bench.run.train",
}


class Events(Protocol):
    def emit(self, **event: Any) -> None: ...


@dataclass
class Process:
    """One worker process of a job, as the runner saw it end."""

    events: list[dict[str, Any]]
    #: ``ok`` or why not (budget, crash, or the status the worker reported)
    status: str
    reason: str
    t_reached: float | None = None
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


class JobKind(Protocol):
    def work(self, job: dict[str, Any], events: Events) -> None: ...

    def record(self, job: dict[str, Any], processes: Sequence[Process]) -> dict[str, Any]: ...


class UnknownJobKind(ValueError):
    pass


def kind_of(job: dict[str, Any]) -> JobKind:
    """The module that implements ``job``'s kind (``ode`` when unnamed)."""
    name = job.get("kind", "ode")
    if name not in KINDS:
        raise UnknownJobKind(f"unknown job kind {name!r}; known: {', '.join(KINDS)}")
    module: Any = importlib.import_module(KINDS[name])
    return module  # type: ignore[no-any-return]
