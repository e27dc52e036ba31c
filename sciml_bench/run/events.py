"""What a worker process reports: an append-only JSON-lines event log.

Events are flushed one by one, so a worker killed at its budget, or crashing,
still leaves its completed phases and its progress behind. Only the standard
library is imported here: the Julia worker must import juliacall first.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any


class Events:
    """Append-only JSON-lines event log, flushed per event."""

    def __init__(self, path: str):
        self.f = open(path, "a", buffering=1)  # noqa: SIM115 - lives for the process
        self.lock = threading.Lock()

    def emit(self, **event: Any) -> None:
        line = json.dumps(event, default=_jsonable)
        with self.lock:
            self.f.write(line + "\n")
            self.f.flush()


def _jsonable(x: Any) -> Any:
    tolist = getattr(x, "tolist", None)
    if tolist is not None:
        return tolist()
    return str(x)


def report_failure(
    events: Any, exc: BaseException, where: str, phase: str | None = None,
    s: float | None = None,
) -> None:
    """A failure as a status event: a :class:`SolverFailure` keeps its status, anything
    else is an ``error`` whose reason is the exception's first lines. ``phase`` (a cold
    phase's name, e.g. ``first_solve``) and ``s`` (the seconds spent in it until the
    failure) go with it as ``failed_phase`` and ``failed_phase_s``: the time spent
    failing is a measurement too."""
    from sciml_bench.measure.status import SolverFailure, Status

    spent: dict[str, Any] = {} if phase is None else {"failed_phase": phase, "failed_phase_s": s}
    if isinstance(exc, SolverFailure):
        reached = f"; integration reached t={exc.t_reached:.4g}" if exc.t_reached is not None else ""
        reason = f"{exc.reason} (during {where}{reached})"
        events.emit(status=exc.status.value, reason=reason, t_reached=exc.t_reached, during=where,
                    **spent)  # fmt: skip
    else:
        # the first lines say what happened; libraries append notes after them
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        text = f"{type(exc).__name__}: {' '.join(lines[:2])}" if lines else type(exc).__name__
        events.emit(status=Status.ERROR.value, reason=f"{where}: {text[:500]}", during=where,
                    **spent)  # fmt: skip


def built(build: Callable[[], Any], not_offered: type[Exception], events: Any) -> Any | None:
    """The case ``build()`` makes, or None once the failure is reported: ``not_offered``
    (the backend offers no such case) as ``unavailable``, anything else by
    :func:`report_failure`; both during the build phase."""
    try:
        return build()
    except not_offered as e:
        events.emit(status="unavailable", reason=str(e), during="build")
    except Exception as e:
        report_failure(events, e, "build")
    return None
