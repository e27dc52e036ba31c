"""Shared fixtures: an isolated reference cache for the whole test session."""

from __future__ import annotations

import fcntl
import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest
from threadpoolctl import threadpool_limits

from sciml_bench.run.executor import thread_env

ROOT = Path(__file__).resolve().parent.parent

# libroadrunner 2.10 imported after TensorFlow 2.20 in one process segfaults at its import
# (the other order works): a test process may run a TF test (tests/test_cnn.py) before a
# roadrunner one, so every test process imports roadrunner first. The suite's own processes
# never meet both: roadrunner runs in its workers and the main process, TF in CNN workers.
if importlib.util.find_spec("roadrunner") is not None:
    import roadrunner  # noqa: F401


#: Two test processes share the machine's two cores (``-n 2``, pyproject.toml): each of them,
#: and every process it starts, computes on one thread unless a test asks for more
#: (``--threads``), so that no framework's pool spins waiting for a core the other process
#: holds. Set before any framework loads in this process or its children (the variables)
#: and for the BLAS already loaded here (threadpoolctl). Measured: docs/testing.md, "One
#: thread per test process".
SUITE_THREADS = thread_env(1, os.environ.get("XLA_FLAGS", ""))
os.environ.update(SUITE_THREADS)
_ONE_THREAD = threadpool_limits(limits=1)


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """One reference cache and one AMICI compiled-model cache per test session: tests never
    read a user's, worker processes inherit them, and under pytest-xdist every test process
    of the session shares them (a reference is built, and a model compiled, once, not once
    per file or process; both caches' writes are atomic renames). A test that needs a cold
    AMICI compile names a fresh folder of its own (tests/test_amici.py's ``cache``)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, above each xdist process's own
    for var, name in (("SCIML_BENCH_AMICI_CACHE", "amici-cache"),
                      ("SCIML_BENCH_CACHE", "reference-cache")):  # fmt: skip
        (base / name).mkdir(exist_ok=True)
        os.environ[var] = str(base / name)
    if "SCIML_BENCH_TEST_CACHE" in os.environ:
        os.environ["SCIML_BENCH_CACHE"] = os.environ["SCIML_BENCH_TEST_CACHE"]


@pytest.fixture(scope="session")
def amici_robertson(_isolated_cache: None) -> None:
    """stiff-robertson's AMICI model compiled into the session's cache once, by whichever
    test process asks first; the other waits on a file lock rather than compile the same
    model beside it. For the runs whose AMICI row need not be cold (test_dask's two,
    test_robertson_e2e's): three C++ compiles become one. Without AMICI, nothing."""
    if importlib.util.find_spec("amici") is None:
        return
    from sciml_bench import backends
    from sciml_bench.backends.base import CaseOptions
    from sciml_bench.problem import reference, spec

    with open(Path(os.environ["SCIML_BENCH_AMICI_CACHE"]) / "stiff-robertson.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        p = spec.load("stiff-robertson")
        cp = reference.compile_problem(p, reference.get(p), sbml=True)
        options = CaseOptions("BDF", "forward", cp.rtol, cp.atol, cp.max_steps)
        backends.get("amici").build(cp, options)  # compiles, or loads the cached model


#: marker -> the variable that turns its skips into failures, on a machine that has the
#: real thing (CI's Julia job; the GPU machine), so that a missing Julia or GPU there
#: cannot pass as a row of skips
REQUIRE = {"julia": "SCIML_BENCH_REQUIRE_JULIA", "gpu": "SCIML_BENCH_REQUIRE_GPU"}


#: the files that take longest (``--durations``, 2-core machine, 2026-11-27), longest first.
#: ``--dist loadfile`` hands each process a whole file, in collection order
#: (``--no-loadscope-reorder``; xdist's default orders by number of tests, which sent
#: Van der Pol's three tests and their ~1.5-minute reference last): starting the longest
#: first keeps one long file from running alone at the end
LONGEST_FIRST = (
    "test_benchmarks.py", "test_problem_library.py", "test_problem_library_vanderpol.py",
    "test_ensemble_device.py", "test_cnn.py", "test_robertson_e2e.py", "test_dask.py",
    "test_diffsol.py", "test_fuzz.py", "test_ensemble_run.py", "test_amici.py",
)  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Collection order with :data:`LONGEST_FIRST`'s files first (a stable sort: every
    other file, and the tests within each file, keep their order)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "julia: needs Julia and the set-up Julia project; skipped with the reason "
        "elsewhere (SCIML_BENCH_REQUIRE_JULIA=1 makes that skip a failure)",
    )  # fmt: skip


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # noqa: ANN201
    """A skipped test marked ``julia`` (``gpu``) fails when SCIML_BENCH_REQUIRE_JULIA=1
    (SCIML_BENCH_REQUIRE_GPU=1), with the reason it would have skipped for."""
    outcome = yield
    rep = outcome.get_result()
    if not rep.skipped or hasattr(rep, "wasxfail"):
        return
    for marker, var in REQUIRE.items():
        if item.get_closest_marker(marker) is not None and os.environ.get(var) == "1":
            why = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
            rep.outcome = "failed"
            rep.longrepr = f"{var}=1, but this {marker} test would skip: {why}"
            return



@pytest.fixture
def interrupt_at() -> Any:
    """``interrupt_at(n)``: a real local executor whose ``n``-th worker start is a Ctrl-C
    (the signal's effect at a chosen point: between two processes)."""
    from sciml_bench.run.executor import LocalExecutor

    class InterruptAt(LocalExecutor):
        def __init__(self, n: int) -> None:
            super().__init__()
            self.n, self.calls = n, 0

        def run(self, job: dict[str, Any], budget_s: float, on_event: Any) -> Any:
            self.calls += 1
            if self.calls == self.n:
                raise KeyboardInterrupt
            return super().run(job, budget_s, on_event)

    return InterruptAt
