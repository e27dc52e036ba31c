"""A deliberately slowed worker: the proof that ``compare`` still catches a real slowdown.

Test-only. :mod:`sciml_bench.run.executor` starts this module instead of
:mod:`sciml_bench.run.worker` only when ``SCIML_BENCH_TEST_SLOWDOWN`` (a factor ``f``,
e.g. ``1.3``) is set in the environment of ``sciml-bench run``; the run's environment
block then records ``test_slowdown``, and ``benchmarks/compare_false_alarms.py`` is the
one place that sets it.

With factor ``f``, every library call that a cold phase or a steady sample times is made
``f`` times as long, inside the call: after the real call returns, the worker spins for
``(f - 1)`` times the call's own duration. A busy wait rather than ``time.sleep``: a
sleep's timer slack (about 50 µs on Linux) would distort sub-millisecond calls, and the
spin stays on the CPU under the same noise as the call. Slowed: the backend's import
(measured from the process's spawn, as the import phase is), ``build``, the first
``solve`` and ``loss_and_grad``, the steady ``timed_solve`` / ``timed_grad``, and the
ensemble's ``solve_raw`` / ``grad_raw``. Everything else (checks, read-backs) is the
real case's, untouched. CNN jobs do not go through a backend and are not slowed.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

from sciml_bench.measure.clock import clock, perf
from sciml_bench.measure.environment import SLOWDOWN_VAR

#: the case methods a cold phase or a steady sample times
TIMED = ("solve", "loss_and_grad", "timed_solve", "timed_grad", "solve_raw", "grad_raw")
#: the backend methods that return a case
BUILDERS = ("build", "build_ensemble")


def spin(seconds: float) -> None:
    """Busy-wait ``seconds`` on the CPU."""
    end = perf() + seconds
    while perf() < end:
        pass


def slowed(fn: Callable[..., Any], factor: float) -> Callable[..., Any]:
    """``fn`` made ``factor`` times as long: it runs, then the caller spins for
    ``(factor - 1)`` times its duration before getting the result."""

    def call(*args: Any, **kwargs: Any) -> Any:
        start = perf()
        out = fn(*args, **kwargs)
        spin((factor - 1.0) * (perf() - start))
        return out

    return call


class SlowCase:
    """A case whose timed calls take ``factor`` times as long; the rest is the case's."""

    def __init__(self, case: Any, factor: float):
        self._case, self._factor = case, factor

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._case, name)
        return slowed(attr, self._factor) if name in TIMED and callable(attr) else attr


class SlowBackend:
    """A backend whose import and build take ``factor`` times as long, and whose cases
    are :class:`SlowCase`."""

    def __init__(self, backend: Any, factor: float, t_spawn: float):
        self._backend, self._factor, self._t_spawn = backend, factor, t_spawn

    def load(self) -> Any:
        out = self._backend.load()
        # the import phase runs from the spawn: the interpreter's start-up is part of it
        spin((self._factor - 1.0) * (clock() - self._t_spawn))
        return out

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._backend, name)
        if name in BUILDERS and callable(attr):
            build = slowed(attr, self._factor)
            return lambda *a, **k: SlowCase(build(*a, **k), self._factor)
        return attr


def install(factor: float, t_spawn: float) -> None:
    """Make every backend this process gets from the registry a :class:`SlowBackend`."""
    from sciml_bench import backends

    real = backends.get
    backends.get = lambda name: SlowBackend(real(name), factor, t_spawn)  # type: ignore[assignment]


def factor_from_env() -> float:
    """The slowdown factor of :data:`SLOWDOWN_VAR`; a value that is not a number >= 1 is
    an error, never a silent normal run."""
    text = os.environ.get(SLOWDOWN_VAR, "")
    try:
        f = float(text)
    except ValueError:
        f = float("nan")
    if not f >= 1.0:
        raise ValueError(f"{SLOWDOWN_VAR}={text!r}: give a factor >= 1, e.g. 1.3")
    return f


def main(argv: list[str]) -> int:
    """The worker's ``main`` with every backend slowed (same arguments)."""
    from sciml_bench.run import worker

    if len(argv) == 2:
        with open(argv[0]) as f:
            t_spawn = float(json.load(f).get("t_spawn", clock()))
        install(factor_from_env(), t_spawn)
    return worker.main(argv)


if __name__ == "__main__":
    from sciml_bench.run.worker import _exit

    _exit(main(sys.argv[1:]))
