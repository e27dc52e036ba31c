"""How a worker process ended (status, reason, t reached), and the records made
without a full case: a backend that is unavailable, a job run in one process."""

from __future__ import annotations

from typing import Any

from sciml_bench.measure.status import Status
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.results.store import summarize
from sciml_bench.run.executor import Outcome
from sciml_bench.run.jobs import Process, kind_of
from sciml_bench.run.ode import running_phase

#: a CNN worker's stage (``cnn_stage`` events) -> what runs after it
CNN_NEXT = {"import": "setup", "setup": "the first step", "first_step": "training or evaluation"}


def ending(o: Outcome, budget_s: float) -> Process:
    """How one worker process ended: its status, reason and t reached."""
    status, reason, t = _ending(o, budget_s)
    return Process(o.events, status, reason, t, o.wall_s)


def _ending(o: Outcome, budget_s: float) -> tuple[str, str, float | None]:
    status_events = [e for e in o.events if "status" in e]
    progress = [e["progress_t"] for e in o.events if "progress_t" in e]
    t_reached = progress[-1] if progress else None
    running = running_phase(o.events)  # past TTFG (a first solve without gradient): steady
    stages = [e["cnn_stage"] for e in o.events if "cnn_stage" in e]
    if stages:  # a CNN worker: the stage after the last one it announced
        running = CNN_NEXT.get(stages[-1], running)
    if o.timed_out:
        where = ""
        if t_reached is not None:
            where = f"; integration had reached t={t_reached:g}"
        elif running not in ("import", "build", *CNN_NEXT.values()):
            where = "; how far in t it got is unknown (the library reports no progress mid-solve)"
        return (
            Status.BUDGET_EXCEEDED.value,
            f"killed after the {budget_s:g} s budget during {running.replace('_', ' ')}{where}"
            " (--budget S gives each case more)",
            t_reached,
        )
    if o.signal_name and o.facts.get("oom_killed"):
        return Status.OUT_OF_MEMORY.value, _oom_reason(o, running), t_reached
    if o.signal_name:
        return Status.CRASHED.value, f"worker killed by {o.signal_name} during {running}", t_reached
    if status_events:
        last = status_events[-1]
        t = last.get("t_reached", t_reached)
        return last["status"], last.get("reason", ""), t
    tail = o.stderr_tail.strip().splitlines()
    detail = tail[-1] if tail else "no output"
    return Status.CRASHED.value, f"worker exited with code {o.returncode}: {detail}", t_reached


def _oom_reason(o: Outcome, running: str) -> str:
    """Why a worker the kernel killed for memory ended, with the RSS seen and the machine's
    memory: the fix is a machine with more, or a smaller size."""
    import psutil

    total = psutil.virtual_memory().total / 2**20
    seen = o.facts.get("worker_rss_seen_mb")
    rss = f"; its RSS was last seen at {seen:,} MB" if seen else ""
    return (f"out of memory during {running.replace('_', ' ')}: the kernel's OOM killer "
            f"ended the worker (SIGKILL){rss}, of the machine's {total:,.0f} MB; a machine "
            "with more memory, or a smaller size, runs it")  # fmt: skip


def unavailable_record(
    problem: CompiledProblem, name: str, reason: str, fix: str, kind: str = "ode"
) -> dict[str, Any]:
    return summarize({
        "kind": kind,
        "problem": problem.name,
        "backend": name,
        "solver": "",
        "gradient_method": "",
        "status": Status.UNAVAILABLE.value,
        "reason": f"{reason}. Fix: {fix}" if fix else reason,
    })



def with_facts(rec: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any]:
    """``rec`` with the executor's facts about its processes (``concurrent_cases``,
    threads, CPU shares); a value the worker recorded itself wins (a CNN worker measures
    its own load), unless it is None."""
    return {**facts, **{k: v for k, v in rec.items() if v is not None or k not in facts}}



def one_process_record(job: dict[str, Any], outcome: Outcome, budget_s: float) -> dict[str, Any]:
    """The record of a job that ran in one worker process, with the executor's facts."""
    return with_facts(kind_of(job).record(job, [ending(outcome, budget_s)]), outcome.facts)
