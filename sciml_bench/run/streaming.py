"""Running cases' processes through an executor and streaming each record to the
results file as its case finishes, with where it ran."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sciml_bench.measure.status import Status
from sciml_bench.results.store import ResultsWriter
from sciml_bench.run.cases import CaseTask, Settings
from sciml_bench.run.endings import ending, with_facts
from sciml_bench.run.executor import Executor, Finished, Sink
from sciml_bench.run.interrupts import partial_record
from sciml_bench.run.jobs import Process, kind_of
from sciml_bench.run.progress import Progress, phase_lines
from sciml_bench.run.signals import signal_of


def case_processes(task: CaseTask, executor: Executor, sink: Sink) -> list[Process]:
    """Run a case's processes in turn, stopping at the first that does not end ``ok``
    (solver failures are deterministic). Runs where the executor is: on a Dask worker
    too, so that a case's cold processes share one machine."""
    processes: list[Process] = []
    for k, mode in enumerate(task.modes):
        job = task.job if mode is None else {**task.job, "mode": mode}
        try:
            outcome = executor.run(job, task.budget_s, lambda e, k=k: sink(k, e))
        except KeyboardInterrupt as e:  # Interrupted, or a signal between two processes
            if processes:  # the finished ones are measurements: keep them, marked partial
                e.partial = partial_record(  # type: ignore[attr-defined]
                    task.job, processes, len(task.modes), signal_of(e).name
                )
            raise
        processes.append(ending(outcome, task.budget_s))
        if processes[-1].status != Status.OK.value:
            break
    return processes


def modes(settings: Settings) -> tuple[str, ...]:
    return tuple("full" if k == 0 else "cold" for k in range(max(1, settings.cold)))




def _lost_record(task: CaseTask, fin: Finished) -> dict[str, Any]:
    """The row of a case whose Dask worker died under it: ``crashed``, and where."""
    host = fin.machine.get("host") or fin.worker or "unknown host"
    lost = Process([], Status.CRASHED.value, f"{fin.lost} (host {host}, worker {fin.worker})")
    return kind_of(task.job).record(task.job, [lost])



def placed(rec: dict[str, Any], fin: Finished) -> dict[str, Any]:
    """``rec`` with where it ran: host, hardware, Dask worker, retries (``--retries``),
    and what it shared the host with (``concurrent_cases``, threads: ``Finished.facts``)."""
    from sciml_bench.measure.environment import hardware_label

    out = {**with_facts(rec, fin.facts), "host": fin.machine.get("host", ""),
           "retries": len(fin.retried)}
    if fin.machine:
        out["hardware"] = hardware_label(fin.machine)
    if fin.worker:
        out["dask_worker"] = fin.worker
    if fin.retried:
        out["retry_reasons"] = list(fin.retried)
    return out


def remember_machine(writer: ResultsWriter, fin: Finished) -> None:
    """The environment block holds each distinct machine a case ran on."""
    if fin.machine:
        machines = writer.environment.setdefault("machines", {})
        machines.setdefault(fin.machine.get("host", "?"), fin.machine)


def stream(
    tasks: Sequence[tuple[int, CaseTask]],
    writer: ResultsWriter,
    executor: Executor,
    announce: Callable[[int, str], None],
    progress: Progress,
    lines: Callable[[Progress, CaseTask], Sink] = phase_lines,
    finish: Callable[[dict[str, Any]], dict[str, Any]] = lambda r: r,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Run ``tasks`` (case number, task) through ``executor.imap`` and write each record
    as its case finishes: the one writer, on this process, whatever the executor.
    ``lines`` turns a case's worker events into progress; ``finish`` completes a record."""

    def start(j: int, where: str) -> Sink:
        announce(tasks[j][0], where)
        return lines(progress, tasks[j][1])

    for fin in executor.imap(case_processes, [t for _, t in tasks], start):
        i, task = tasks[fin.index]
        if fin.lost:
            rec = _lost_record(task, fin)
        else:
            if fin.worker:  # a remote case's events come back with it
                sink = lines(progress, task)
                for k, proc in enumerate(fin.value):
                    for e in proc.events:
                        sink(k, e)
            rec = kind_of(task.job).record(task.job, fin.value)
        rec = placed(finish(rec), fin)
        rec["case_index"] = i  # tables list rows in case order, whatever the finishing order
        remember_machine(writer, fin)
        writer.add(rec)
        yield i, rec

