"""Does writing a case cost the same at the end of a long sweep as at its start?

    python benchmarks/store_growth.py                # 2,000 cases, ~20 s on 2 cores
    python benchmarks/store_growth.py --cases 200    # a smoke test
    python benchmarks/store_growth.py --store /tmp/old_store.py   # another store.py

Writes a synthetic sweep through ``ResultsWriter``: every case a copy of a real record
(the Diffrax ROBER case of ``tests/data/results-v1-stiff-robertson.h5``: raw sample
arrays, the solution, a gradient dict, strings) with its own backend name and samples,
timing each ``add``. Prints the mean wall time of the last 100 adds ÷ the first 100
(goal ≤ 1.5: a store that rewrites the file per case grows linearly), the same ratio of
CPU time (the disk's share left out), the total time and the file's size, and exits 1
when the wall-time ratio is over 1.5. ``SCIML_BENCH_STORE_FSYNC=0`` leaves out the
store's fsyncs, to see what they cost.

``--store FILE`` loads ``ResultsWriter`` from another copy of ``store.py`` (e.g. the one
before issue 34: ``git show REV:sciml_bench/results/store.py > /tmp/old_store.py``)
to measure it the same way.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "tests" / "data" / "results-v1-stiff-robertson.h5"
GOAL = 1.5
WINDOW = 100


def _store(path: str | None) -> ModuleType:
    if path is None:
        from sciml_bench.results import store

        return store
    spec = importlib.util.spec_from_file_location("store_under_test", path)
    assert spec and spec.loader, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def template() -> dict[str, Any]:
    """A real record with a gradient, as the writer was given it (no derived keys)."""
    from sciml_bench.results import store

    records = store.read(TEMPLATE).records
    rec = next((r for r in records if r.get("gradient")), records[0])
    derived = {f"{k[:-2]}_iqr" for k in store.SAMPLE_FIELDS.values()} | set(
        store.SAMPLE_FIELDS.values()
    )
    return {k: v for k, v in rec.items() if k not in derived}


def sweep(store: Any, folder: Path, cases: int) -> tuple[list[float], list[float], Path]:
    """Write ``cases`` records; the seconds each ``add`` took (wall, then this process's
    CPU: the wall time includes waiting for the disk, which other work on a shared
    machine makes noisy), and the file."""
    base = template()
    rng = np.random.default_rng(0)
    writer = store.ResultsWriter(folder / "growth.h5", {"python": sys.version.split()[0]},
                                 "benchmarks/store_growth.py")  # fmt: skip
    times, cpu = [], []
    for i in range(cases):
        rec = {**base, "backend": f"{base['backend']}-{i % 7}", "rtol": 10.0 ** -(i % 9),
               "solve_samples": list(rng.random(len(base.get("solve_samples") or [0] * 10))),
               "gradient": {k: v * (1 + i) for k, v in (base.get("gradient") or {"p": 1.0}).items()}}  # fmt: skip
        t, c = time.perf_counter(), time.process_time()
        writer.add(rec)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    writer.finish("complete")
    return times, cpu, writer.path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--store", help="a store.py to measure in place of sciml_bench's")
    args = ap.parse_args(argv)
    if args.cases < 2 * WINDOW:
        ap.error(f"--cases must be at least {2 * WINDOW}")
    store = _store(args.store)
    with tempfile.TemporaryDirectory(prefix="store-growth-") as tmp:
        t0 = time.perf_counter()
        times, cpu, path = sweep(store, Path(tmp), args.cases)
        total = time.perf_counter() - t0
        size = path.stat().st_size
        from sciml_bench.results.store import read

        assert len(read(path).records) == args.cases
    first, last = statistics.fmean(times[:WINDOW]), statistics.fmean(times[-WINDOW:])
    ratio = last / first
    print(f"store: {args.store or 'sciml_bench.results.store'}; {args.cases} cases, "
          f"{size / 1e6:.1f} MB")  # fmt: skip
    print(f"mean add, first {WINDOW}: {first * 1e3:.2f} ms; last {WINDOW}: {last * 1e3:.2f} ms")
    cpu_ratio = statistics.fmean(cpu[-WINDOW:]) / max(statistics.fmean(cpu[:WINDOW]), 1e-9)
    print(f"CPU time last/first: {cpu_ratio:.2f}")
    print(f"last/first: {ratio:.2f} (goal <= {GOAL}); total {total:.1f} s")
    if ratio > GOAL:
        print(f"FAIL: writing a case grows with the run ({ratio:.2f} > {GOAL})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
