"""What a row's timings shared the machine with, in words: this run's own other cases
apart from other runs and other processes.

A row carries three facts (docs/results-schema.md): ``concurrent_cases``, the most
sciml-bench workers seen at once on its host, itself included; ``concurrent_own``, how
many of those were this run's (absent in files written before it existed); and
``others_cpu``, the cores' worth of CPU every process but the row's own worker took
(this run's other cases included). The user causes the first kind of load (``--workers``,
``--per-worker``) and can stop it; the second and third come from elsewhere, and only a
quieter machine (or ``--load-limit``, accepting it) helps. Each sentence names which.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sciml_bench.measure.noise import load_limit as current_load_limit
from sciml_bench.measure.noise import others_load


def _count(r: dict[str, Any], key: str) -> int | None:
    v = r.get(key)
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def own_cases(r: dict[str, Any]) -> int | None:
    """This run's cases seen at once on the row's host, itself included (None: not recorded)."""
    return _count(r, "concurrent_own")


def foreign_workers(r: dict[str, Any]) -> int | None:
    """Other runs' sciml-bench workers seen at once beside the row (None: not recorded)."""
    every, own = _count(r, "concurrent_cases"), own_cases(r)
    if every is None or own is None:
        return None
    return max(0, every - own)


def _label(r: dict[str, Any]) -> str:
    return " ".join(str(x) for x in (r.get("backend"), r.get("solver"), r.get("precision"))
                    if x)  # fmt: skip


def _labels(rows: Sequence[dict[str, Any]]) -> str:
    """The rows' labels, each once (a tolerance sweep's rows share one), in order."""
    return ", ".join(dict.fromkeys(_label(r) for r in rows))


def beside_other_cases(records: Sequence[dict[str, Any]]) -> list[str]:
    """Notes naming the rows timed beside other sciml-bench workers on their host: this
    run's own cases (``concurrent_own`` > 1), other runs' (the rest of ``concurrent_cases``),
    and, in files that do not tell them apart, workers whose run is not recorded."""
    own = [r for r in records if (own_cases(r) or 1) > 1]
    foreign = [r for r in records if (foreign_workers(r) or 0) > 0]
    unknown = [r for r in records if own_cases(r) is None and (_count(r, "concurrent_cases") or 1) > 1]
    out = []
    if own:
        out.append(
            f"{_labels(own)}: ran beside this run's own other cases (up "
            f"to {max(own_cases(r) or 1 for r in own)} of its cases at once), so their timings "
            "shared its cores; a local run, and a Dask LocalCluster without --workers, time "
            "one case at a time")  # fmt: skip
    if foreign:
        out.append(
            f"{_labels(foreign)}: ran while up to "
            f"{max(foreign_workers(r) or 0 for r in foreign)} sciml-bench worker(s) of another "
            "run used the same host, so their timings shared its cores with a load this run "
            "did not cause")  # fmt: skip
    if unknown:
        out.append(
            f"{_labels(unknown)}: ran beside other sciml-bench workers on "
            f"the same host (up to {max(_count(r, 'concurrent_cases') or 1 for r in unknown)} "
            "at once, itself included; whether they were this run's or another's, this file "
            "does not record), so their timings shared its cores")  # fmt: skip
    return out


def beside_busy_processes(records: Sequence[dict[str, Any]]) -> list[str]:
    """A note naming the (non-CNN) rows timed while other processes took more than the
    load limit in force, and where that load came from; a CNN row's reason says it itself."""
    limit = current_load_limit()
    busy = [r for r in records
            if r.get("kind") != "cnn" and (others_load(r) or 0.0) > limit]  # fmt: skip
    if not busy:
        return []
    most = max(others_load(r) or 0.0 for r in busy)
    return [
        f"{_labels(busy)}: timed while other processes took up to "
        f"{most:.2f} cores' worth of CPU (others_cpu; {whose_load(busy)}); their timings "
        f"include waiting for a core; the verdict counts them as loaded (above {limit:g} "
        "cores, --load-limit) and compare does not judge them"
    ]


def load_range(rows: Sequence[dict[str, Any]]) -> str:
    """``1.52 cores`` or ``1.52-1.70 cores``: the others' CPU the rows were timed under."""
    loads = sorted(x for r in rows if (x := others_load(r)) is not None)
    if not loads:
        return "an unmeasured load"
    lo, hi = loads[0], loads[-1]
    return f"{hi:.2f} cores" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f} cores"


def whose_load(rows: Sequence[dict[str, Any]]) -> str:
    """Where the load on ``rows`` came from, as far as they record it: this run's own
    cases, other sciml-bench runs, or other processes only."""
    own = max((own_cases(r) or 1 for r in rows), default=1)
    foreign = max((foreign_workers(r) or 0 for r in rows), default=0)
    if own > 1:
        also = f" and up to {foreign} worker(s) of another sciml-bench run" if foreign else ""
        return (f"this run's own cases, up to {own} at once,{also} are part of it (run this "
                "run's cases one at a time: without --workers)")  # fmt: skip
    if foreign > 0:
        return (f"none of it this run's: up to {foreign} worker(s) of another sciml-bench run "
                "and other processes")  # fmt: skip
    if all(own_cases(r) is not None for r in rows):
        return "none of it this run's: other processes on the machine"
    return "from other processes"


def suggested_limit(rows: Sequence[dict[str, Any]]) -> float:
    """The ``--load-limit`` that would count every one of ``rows`` as quiet: their largest
    others_cpu rounded up to a tenth of a core."""
    most = max((x for r in rows if (x := others_load(r)) is not None), default=0.0)
    return math.ceil(most * 10 - 1e-9) / 10


def under_load(rows: Sequence[dict[str, Any]], limit: float | None = None) -> str:
    """``timed while other processes took 1.52-1.70 cores' worth of CPU (others_cpu; quiet
    is up to 0.5), none of it this run's: ...``, for the rows of a provisional verdict."""
    limit = current_load_limit() if limit is None else limit
    return (f"timed while other processes took {load_range(rows)}' worth of CPU (others_cpu; "
            f"a row counts as quiet up to {limit:g} cores), {whose_load(rows)}")


def firm_command(rows: Sequence[dict[str, Any]]) -> str:
    """What gives a firm verdict for rows timed under load: a quieter machine, or
    accepting their load with ``--load-limit``."""
    return ("for a firm verdict rerun when the machine is quieter, or accept these timings "
            f"with --load-limit {suggested_limit(rows):g} on run, show or report")

