"""The CNN baselines' run: one fresh worker per variant, its progress lines, and the
rows of variants that cannot run here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sciml_bench.results.store import ResultsWriter
from sciml_bench.run.cases import CaseTask, Settings
from sciml_bench.run.executor import Executor, LocalExecutor, Sink
from sciml_bench.run.interrupts import saved_on_interrupt
from sciml_bench.run.progress import Progress, to_stderr
from sciml_bench.run.streaming import stream


def cnn_progress(e: dict[str, Any], variant: str) -> str | None:
    """The progress line of one CNN worker event, or None: stages as they end, the
    first step as it starts (it holds the compilation, the longest stage of torch-compile
    on a CPU: ``benchmarks/README.md``, paragraph "CNN quick size on the CPU"), and the
    result."""
    stage, s = e.get("cnn_stage"), e.get("s")
    if stage == "first_step":
        compiled = "" if variant == "torch-eager" else ", compiling"
        return f"      first step{compiled} ..."
    if stage:
        return f"      {stage:<10} {s:8.2f} s" if isinstance(s, int | float) else None
    if "result" not in e:
        return None
    r = e["result"]

    def num(key: str, fmt: str) -> str:
        v = r.get(key)
        return format(v, fmt) if isinstance(v, int | float) and not isinstance(v, bool) else "-"

    return (
        f"      {r.get('status')}: first step {num('time_to_first_step_s', '.2f')} s, train "
        f"{num('train_s', '.3g')} s ({num('throughput_ips', '.0f')} img/s), "
        f"accuracy {num('accuracy', '.3f')}"
    )



def run_cnn(
    jobs: Sequence[dict[str, Any]],
    writer: ResultsWriter,
    settings: Settings,
    executor: Executor | None = None,
    progress: Progress = to_stderr,
) -> list[dict[str, Any]]:
    """CNN baselines: one fresh worker per variant, whose worker returns the record.

    A variant that cannot run here becomes its ``unavailable`` row without a process;
    a worker that crashes or exceeds the budget still leaves a row saying so.
    """
    from sciml_bench import cnn

    executor = executor or LocalExecutor(threads=settings.threads)
    done: list[dict[str, Any]] = []
    available = cnn.variants()

    def title(i: int) -> str:
        return _title(jobs, i)

    def unavailable_before(i: int) -> None:
        for j, job in enumerate(jobs[: i - 1], 1):
            if not available[job["variant"]].available and j not in written:
                written.add(j)
                progress(title(j))
                rec = {**cnn.run_variant(job), "kind": "cnn", "case_index": j}  # unavailable
                progress(f"      -> {rec.get('status')}: {rec.get('reason', '')}")
                writer.add(rec)
                done.append(rec)

    def announce(i: int, where: str) -> None:
        unavailable_before(i)
        progress(title(i) + (f"  on {where}" if where else ""))

    written: set[int] = set()
    tasks = [
        (i, CaseTask(job, (None,), settings.budget_s))
        for i, job in enumerate(jobs, 1)
        if available[job["variant"]].available
    ]
    with saved_on_interrupt(writer, done):
        for _, rec in stream(
            tasks, writer, executor, announce, progress, _lines,
            lambda r: cnn.compare_precision({**r, "kind": "cnn"}, done),
        ):  # fmt: skip
            if rec.get("status") != "ok" or rec.get("reason"):
                progress(f"      -> {rec.get('status')}: {rec.get('reason', '')}")
            done.append(rec)
        unavailable_before(len(jobs) + 1)
    return sorted(done, key=lambda r: r.get("case_index", 0))  # case order, not finishing order


def _title(jobs: Sequence[dict[str, Any]], i: int) -> str:
    """The progress line that starts the ``i``-th variant (from 1)."""
    job = jobs[i - 1]
    cfg = job.get("config") or {}
    what = " ".join(str(cfg[k]) for k in ("model", "precision", "pipeline") if cfg.get(k))
    return (f"[{i}/{len(jobs)}] cnn: {job['variant']} {what} ({job['preset']}, "
            f"device {job['device']})")  # fmt: skip


def _lines(progress: Progress, task: CaseTask | None = None) -> Sink:
    """The progress lines of a CNN worker's events (:func:`cnn_progress`)."""
    variant = task.job.get("variant", "") if task is not None else ""

    def sink(k: int, e: dict[str, Any]) -> None:
        line = cnn_progress(e, variant)
        if line:
            progress(line)

    return sink
