"""Cases on Dask distributed: a LocalCluster, a running scheduler, or Slurm jobs.

The Dask task only launches: on its worker it drives a
:class:`~sciml_bench.run.executor.LocalExecutor`, so each case is still its own
fresh worker subprocess, with the same budget, process-group kill and event
file as a local run. Outcomes come back as cases finish, and the one
:class:`~sciml_bench.results.store.ResultsWriter` on the client writes them.

Isolation: cases that share a machine's cores are not timed side by side unless the
user asks. A LocalCluster has one worker unless ``--workers N`` (one case at a time on
this machine); every worker advertises a resource ``bench`` (``--per-worker``, 1 by
default) and every case asks for one unit of it. Each row records how many cases ran at
once on its host (``concurrent_cases``, :class:`~sciml_bench.run.executor.HostWatch`).

Faults: no automatic retry. The clusters started here run their scheduler with
``allowed-failures`` 0, so a worker that dies mid-case fails that case at once
(a ``crashed`` row, "Dask worker lost", with the host) instead of Dask quietly
running it again elsewhere; ``--retries N`` re-runs such a case, recorded per
row. The case's subprocess dies with its Dask worker (``PR_SET_PDEATHSIG``).

``dask`` and ``distributed`` (and ``dask_jobqueue``) are imported inside the
functions: ``pip install 'sciml-bench[dask]'``.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sciml_bench.run.executor import (
    Announce,
    EngineLost,
    Finished,
    Interrupted,
    LocalExecutor,
    Outcome,
    TaskFn,
)

#: the worker resource one case holds while it runs
RESOURCE = "bench"
WORKER_LOST = "Dask worker lost"
#: distributed's defaults set OMP/MKL/OpenBLAS to 1 thread in every worker; cases
#: must see the environment a local run sees, so clusters started here set none
NO_PRE_SPAWN_ENV = {"distributed.nanny.pre-spawn-environ": {}}
#: run ids whose cases a Ctrl-C on the client has cancelled (in each worker process)
_CANCELLED: set[str] = set()


class DaskUnavailable(RuntimeError):
    """The Dask extra is not installed, or the cluster cannot be used."""


class SchedulerLost(EngineLost):
    """The scheduler went away mid-run; finished cases are saved."""


@dataclass
class SlurmOptions:
    """One Slurm job per Dask worker (``dask_jobqueue.SLURMCluster``)."""

    jobs: int = 1
    cores: int = 4
    memory: str = "8GB"
    walltime: str = "01:00:00"
    gpus: int = 0
    queue: str | None = None
    account: str | None = None
    extra_directives: list[str] = field(default_factory=list)


@dataclass
class DaskOptions:
    """``--executor dask`` and its options."""

    scheduler: str | None = None
    cluster: str = "local"
    #: LocalCluster workers (default 1: one case at a time on this machine)
    workers: int | None = None
    per_worker: int = 1
    retries: int = 0
    threads: int | None = None
    slurm: SlurmOptions = field(default_factory=SlurmOptions)


def _imports() -> Any:
    try:
        import dask  # noqa: F401
        import distributed
    except ImportError:
        raise DaskUnavailable(
            "--executor dask needs dask and distributed: pip install 'sciml-bench[dask]'"
        ) from None
    return distributed


def slurm_cluster(s: SlurmOptions, per_worker: int = 1) -> Any:
    """A ``SLURMCluster`` whose every job is one Dask worker offering ``per_worker``
    case slots on ``cores`` cores, ``memory`` and ``walltime``, with ``--gres=gpu:N``
    when ``gpus``. Nothing is submitted until it is scaled."""
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        raise DaskUnavailable(
            "--cluster slurm needs dask-jobqueue: pip install 'sciml-bench[dask]'"
        ) from None
    directives = [f"--gres=gpu:{s.gpus}"] if s.gpus else []
    return SLURMCluster(
        cores=s.cores,
        processes=1,
        memory=s.memory,
        walltime=s.walltime,
        queue=s.queue,
        account=s.account,
        job_extra_directives=directives + list(s.extra_directives),
        worker_extra_args=["--resources", f"{RESOURCE}={per_worker}", "--nthreads",
                           str(per_worker)],  # fmt: skip
        # the nanny on the node reads its config from the environment
        job_script_prologue=["export DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON='{}'"],
        scheduler_options={"allowed_failures": 0, "dashboard_address": ":0"},
    )


@contextlib.contextmanager
def connect(o: DaskOptions) -> Iterator[DaskExecutor]:
    """A :class:`DaskExecutor` on the engine ``o`` names; what it started, it closes.
    Without the Dask extra: :class:`DaskUnavailable`, before anything starts."""
    distributed = _imports()
    import dask

    config = {**NO_PRE_SPAWN_ENV, "distributed.scheduler.allowed-failures": 0}
    with dask.config.set(config), contextlib.ExitStack() as stack:
        if o.scheduler:
            client = stack.enter_context(distributed.Client(o.scheduler, timeout="20s"))
        elif o.cluster == "slurm":
            cluster = stack.enter_context(slurm_cluster(o.slurm, o.per_worker))
            cluster.scale(jobs=o.slurm.jobs)
            client = stack.enter_context(distributed.Client(cluster))
        else:
            cluster = stack.enter_context(distributed.LocalCluster(
                n_workers=o.workers or 1, threads_per_worker=o.per_worker, processes=True,
                resources={RESOURCE: o.per_worker}, memory_limit=None,
                dashboard_address=":0", silence_logs=logging.ERROR,
            ))  # fmt: skip
            client = stack.enter_context(distributed.Client(cluster))
        yield DaskExecutor(client, o.threads, o.retries)


class DaskExecutor:
    """Runs cases as Dask tasks, each a fresh local subprocess on its Dask worker."""

    def __init__(self, client: Any, threads: int | None = None, retries: int = 0):
        self.client = client
        self.threads = threads
        self.retries = retries
        #: worker address -> its machine (host, hardware), learnt from its tasks
        self.machines: dict[str, dict[str, Any]] = {}

    def check(self, wait_s: float = 60.0) -> str:
        """Wait for a worker offering the ``bench`` resource; say what the run is on."""
        import time

        deadline = time.monotonic() + wait_s
        while True:
            workers = self.client.scheduler_info(n_workers=-1)["workers"]
            slots = sum(w.get("resources", {}).get(RESOURCE, 0) for w in workers.values())
            if slots or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if not slots:
            raise DaskUnavailable(
                f"no Dask worker offers the resource {RESOURCE!r}: start workers with "
                f"`dask worker ADDRESS --resources {RESOURCE}=1`"
            )
        self.machines.update(self.client.run(_fingerprint))
        return f"dask: {len(workers)} worker(s), {slots:g} case slot(s)"

    def run(self, job: dict[str, Any], budget_s: float, on_event: Any) -> Outcome:
        """One job on a Dask worker (its events are replayed when it ends)."""
        (fin,) = self.imap(_one_job, [(job, budget_s)], lambda i, w: lambda k, e: None)
        if fin.lost:
            return Outcome([], None, stderr_tail=f"{fin.lost} ({fin.worker})")
        for e in fin.value.events:
            on_event(e)
        return fin.value  # type: ignore[no-any-return]

    def imap(self, fn: TaskFn, items: Sequence[Any], announce: Announce) -> Iterator[Finished]:
        """Submit every item at once; yield each as it finishes. A lost worker's case
        is a ``lost`` item (or runs again, up to ``retries`` times). Leaving early
        (Ctrl-C, an error) cancels what is still pending and stops running cases."""
        distributed = _imports()
        run_id = uuid.uuid4().hex
        pending: dict[Any, tuple[int, list[str]]] = {}
        tries = iter(range(10**9))

        def submit(i: int, retried: list[str]) -> Any:
            f = self.client.submit(
                _on_worker, fn, items[i], i, self.threads, run_id, pure=False,
                key=f"sciml-bench-{run_id[:8]}-{i}-{next(tries)}", resources={RESOURCE: 1},
            )  # fmt: skip
            pending[f] = (i, retried)
            return f

        done = distributed.as_completed([submit(i, []) for i in range(len(items))])
        try:
            for f in done:
                i, retried = pending.pop(f)
                fin = self._finished(f, i, retried)
                if fin.lost == WORKER_LOST and i not in self._started(run_id):
                    done.add(submit(i, retried))  # it was only queued there: not a retry
                    continue
                if fin.lost and len(retried) < self.retries:
                    done.add(submit(i, [*retried, self._where(fin)]))
                    continue
                announce(i, self._where(fin))
                yield fin
        finally:
            if pending:
                self._cancel(run_id, list(pending))

    def _finished(self, f: Any, i: int, retried: list[str]) -> Finished:
        if f.status == "finished":
            value, machine, worker, facts = f.result()
            self.machines[worker] = machine
            return Finished(i, value, worker, machine, retried=retried, facts=facts)
        if f.status == "cancelled":  # not by us: the client lost its scheduler
            raise SchedulerLost("the Dask scheduler went away")
        exc = f.exception()
        last = getattr(exc, "last_worker", None)
        if type(exc).__name__ == "KilledWorker" and last is not None:
            worker = str(getattr(last, "address", last))
            return Finished(i, None, worker, self.machines.get(worker, {}), WORKER_LOST, retried)
        why = f"Dask task failed: {type(exc).__name__}: {exc}"[:300]
        return Finished(i, None, "", {}, why, retried)

    def _started(self, run_id: str) -> set[int]:
        """The items whose case began on some worker (each task logs its start to the
        scheduler): a dying worker also fails the cases merely queued on it."""
        return {msg["index"] for _, msg in self.client.get_events(_topic(run_id))}

    def _where(self, fin: Finished) -> str:
        host = fin.machine.get("host")
        return f"{fin.worker} ({host})" if host else fin.worker

    def _cancel(self, run_id: str, futures: list[Any]) -> None:
        """Cancel pending cases and stop those running (a running Dask task is not
        interrupted by ``cancel``; its case subprocess is killed by the stop flag)."""
        with contextlib.suppress(Exception):
            self.client.cancel(futures, force=True)
        with contextlib.suppress(Exception):
            self.client.run(_stop, run_id)


def _fingerprint() -> dict[str, Any]:
    from sciml_bench.measure.environment import fingerprint

    return fingerprint()


def _stop(run_id: str) -> None:
    _CANCELLED.add(run_id)


def _topic(run_id: str) -> str:
    return f"sciml-bench-started-{run_id}"


def _on_worker(fn: TaskFn, item: Any, index: int, threads: int | None, run_id: str) -> Any:
    """The Dask task: run ``fn`` with a LocalExecutor on this worker; return its value,
    this machine, this worker's address and what its processes shared the host with."""
    from distributed import get_worker

    get_worker().log_event(_topic(run_id), {"index": index})
    ex = LocalExecutor(threads=threads)
    ex.die_with_parent = True
    ex.run_id = run_id  # this run's workers on one host count as its own, not others' load
    ex.stop = lambda: run_id in _CANCELLED
    try:
        value = fn(item, ex, lambda k, e: None)
    except Interrupted:
        value = None
    return value, _fingerprint(), get_worker().address, ex.take_facts()


def _one_job(item: tuple[dict[str, Any], float], ex: LocalExecutor, sink: Any) -> Outcome:
    job, budget_s = item
    return ex.run(job, budget_s, lambda e: sink(0, e))
