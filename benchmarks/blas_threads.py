"""What a second BLAS thread buys the references' linear algebra, side by side in one process.

Prints, per matrix size, LAPACK ``getrf``'s wall and CPU time per call on one BLAS thread
and on the library's default, then a problem's whole reference build (no cache) both ways:
the figures behind :data:`sciml_bench.problem.blas_threads.SERIAL_MAX_STATES` (a reference
of at most that many states runs on one BLAS thread). CPU time counts the threads' spinning,
which another busy process on the machine pays for.

    python benchmarks/blas_threads.py [--sizes 20,64,128,256,512,1024] [--problem stiff-pollution]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable

import numpy as np
from scipy.linalg import lapack
from threadpoolctl import threadpool_info, threadpool_limits


def _timed(fn: Callable[[], object], reps: int) -> tuple[float, float]:
    """Mean wall and CPU seconds per call of ``fn`` over ``reps`` calls."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - wall) / reps, (time.process_time() - cpu) / reps


def _both(fn: Callable[[], object], reps: int, warm: bool = True) -> dict[str, tuple[float, float]]:
    """``fn`` timed on one BLAS thread and on the default, alternating twice (each after a
    warm-up call where ``warm``); the faster of each side's two."""
    out: dict[str, list[tuple[float, float]]] = {"1": [], "default": []}
    for _ in range(2):
        for label, limit in (("1", 1), ("default", None)):
            with threadpool_limits(limits=limit, user_api="blas"):
                if warm:
                    fn()
                out[label].append(_timed(fn, reps))
    return {k: min(v) for k, v in out.items()}


def lu_table(sizes: list[int]) -> None:
    """``getrf`` per size: wall and CPU per call, and the default's ratios to one thread."""
    print(f"{'n':>6}  {'1 thread wall/CPU us':>22}  {'default wall/CPU us':>22}  "
          f"{'wall ratio':>10}  {'CPU ratio':>9}")  # fmt: skip
    rng = np.random.default_rng(0)
    for n in sizes:
        a = rng.random((n, n)) + n * np.eye(n)
        t = _both(lambda a=a: lapack.dgetrf(a), max(3, int(2e7 / n**3)))
        (w1, c1), (wd, cd) = t["1"], t["default"]
        print(f"{n:>6}  {w1 * 1e6:>10.1f} / {c1 * 1e6:<9.1f}  {wd * 1e6:>10.1f} / "
              f"{cd * 1e6:<9.1f}  {wd / w1:>10.2f}  {cd / c1:>9.2f}")  # fmt: skip


def reference_build(name: str) -> None:
    """The problem's reference built from scratch on one BLAS thread and on the default."""
    import os

    os.environ["SCIML_BENCH_CACHE"] = tempfile.mkdtemp(prefix="blas-threads-")
    from sciml_bench.problem import reference, spec

    problem = spec.load(name)
    build = reference.build.__wrapped__  # without the suite's own limit
    t = _both(lambda: build(problem), 1, warm=False)
    (w1, c1), (wd, cd) = t["1"], t["default"]
    states = f"{problem.n_state} state{'s' if problem.n_state != 1 else ''}"
    print(f"\n{problem.name} ({states}): reference build on one BLAS thread {w1:.3g} s wall, "
          f"{c1:.3g} s CPU; on the default {wd:.3g} s wall, {cd:.3g} s CPU "
          f"(default / one: wall {wd / w1:.2f}, CPU {cd / c1:.2f})")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="20,64,128,256,512,1024",
                    help="matrix sizes for getrf [20,64,128,256,512,1024]")  # fmt: skip
    ap.add_argument(
        "--problem",
        default="stiff-pollution",
        help="the problem whose reference is built both ways [stiff-pollution]",
    )
    args = ap.parse_args()
    blas = [(i["internal_api"], i["num_threads"]) for i in threadpool_info()
            if i["user_api"] == "blas"]  # fmt: skip
    print(f"BLAS libraries loaded (API, default threads): {blas}")
    lu_table([int(s) for s in args.sizes.split(",")])
    reference_build(args.problem)


if __name__ == "__main__":
    main()
