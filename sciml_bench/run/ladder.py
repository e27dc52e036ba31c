"""A ladder of sizes (ensembles and array problems alike): its progress. Its rungs run in
:mod:`~sciml_bench.run.rung_processes`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sciml_bench.measure.status import Status


@dataclass
class Ladder:
    """One ladder's progress, for ensembles and array problems alike: the largest size that
    completed so far, and the first size that failed (after it, larger sizes are skipped)."""

    largest: int | None = None
    failed: dict[str, Any] | None = None
    #: the rows of the sizes that completed, smallest first (:mod:`~sciml_bench.run.forecast`)
    completed: list[dict[str, Any]] = field(default_factory=list)

    def skipped(self) -> str | None:
        """Why the next size is not run (a smaller one failed), or None."""
        if self.failed is None:
            return None
        return f"not run: size {self.failed['size']} already ended {self.failed['status']}" + (
            f"; the largest size that completed is {self.largest}"
            if self.largest
            else "; no size completed"
        )

    def done(self, size: int, rec: dict[str, Any]) -> None:
        """Record how ``size`` ended; every row carries the largest completed size so far.
        A size refused up front (``skipped``) stops nothing: larger ones judge themselves."""
        if rec["status"] == Status.OK.value:
            self.largest = size
            self.completed.append(rec)
        elif rec["status"] != Status.SKIPPED.value and self.failed is None:
            self.failed = rec
        rec["largest_ok_size"] = self.largest
