"""One BLAS thread for the references' small linear algebra.

A reference of a few dozen states spends its time in LAPACK calls on ``n x n`` matrices
(``getrf``/``getrs`` in every BDF and Radau step, ``gemm`` in the sensitivities) far too
small for a second thread to help, yet OpenBLAS wakes its pool for some of them and its
threads spin after each call: CPU that another process on the machine (a run's workers,
the test suite's other process) needed. Up to :data:`SERIAL_MAX_STATES` states a reference
therefore runs on one BLAS thread; larger ones keep the library's default, which a
many-core machine may use. ``python benchmarks/blas_threads.py`` measures both sides
(``getrf`` per size, a reference build); the figures are in ``docs/measurements.md``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from threadpoolctl import threadpool_limits

#: the largest reference (states) that runs on one BLAS thread
SERIAL_MAX_STATES = 256

F = TypeVar("F", bound=Callable[..., Any])


class _Sized(Protocol):
    n_state: int


def serial_blas_when_small(build: F) -> F:
    """``build(problem, ...)`` on one BLAS thread when ``problem.n_state`` is at most
    :data:`SERIAL_MAX_STATES`, as it is otherwise."""

    @functools.wraps(build)
    def wrapped(problem: _Sized, *args: Any, **kwargs: Any) -> Any:
        if problem.n_state > SERIAL_MAX_STATES:
            return build(problem, *args, **kwargs)
        import scipy.linalg  # noqa: F401  (a library loaded later would escape the limit)

        with threadpool_limits(limits=1, user_api="blas"):
            return build(problem, *args, **kwargs)

    return wrapped  # type: ignore[return-value]
