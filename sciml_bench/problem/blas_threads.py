"""One BLAS thread for the references' small linear algebra.

A reference of a few dozen states spends its time in LAPACK calls on ``n x n`` matrices
(``getrf``/``getrs`` in every BDF and Radau step, ``gemm`` in the sensitivities) far too
small for a second thread to help, yet OpenBLAS wakes its pool for some of them and its
threads spin after each call. Measured on this project's 2-core machine (2026-12-07),
POLLU's reference (20 states, 25 parameters) in one process: 20.3 s of wall and 29.9 s of
CPU with OpenBLAS's default threads, 19.9 s of both with one; beside another busy process
(the test suite's two), 62 s against 22 s. ``getrf`` alone gains nothing from a second
thread up to n = 1024 here and costs up to three times the CPU from n = 256
(``benchmarks/blas_threads.py`` prints the table), so up to :data:`SERIAL_MAX_STATES`
states a reference runs on one BLAS thread; larger ones keep the library's default,
which a many-core machine may use.
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
