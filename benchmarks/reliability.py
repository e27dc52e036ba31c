"""Reliability figures: inject every fault of issue 7 for real, count what survived.

    python benchmarks/reliability.py            # ~3 minutes on 2 cores
    python benchmarks/reliability.py interrupts # only the named guarantees
    python benchmarks/reliability.py caches --writes 20   # a smoke test

Prints one line per guarantee: what was tried, how many survived, how many
completed records were lost (must be 0). It drives the same mechanisms as the
tests (tests/test_faults.py, test_fuzz.py, test_numerical_failures.py,
test_environment_errors.py): the worker's ``_fault`` test hook, real SIGINT,
SIGTERM and SIGHUP to a real ``sciml-bench run``, simultaneous processes,
hypothesis fuzzing.
Exits 1 if any guarantee did not hold.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("SCIML_BENCH_CACHE", tempfile.mkdtemp(prefix="sciml-bench-rel-cache-"))

import psutil  # noqa: E402

from sciml_bench import backends, results  # noqa: E402
from sciml_bench.measure.status import Status  # noqa: E402
from sciml_bench.problem import reference, spec  # noqa: E402
from sciml_bench.results.store import ResultsWriter  # noqa: E402
from sciml_bench.run import runner  # noqa: E402
from sciml_bench.run.executor import LocalExecutor  # noqa: E402

DATA = ROOT / "tests" / "data"
SCIML = [sys.executable, "-m", "sciml_bench.cli.main"]
FAST = runner.Settings(cold=1, repeats=1, warmups=0, budget_s=60.0, steady_budget_s=1.0)
LINES: list[tuple[str, bool]] = []


def report(guarantee: str, tried: str, survived: int, total: int, lost: int) -> None:
    ok = survived == total and lost == 0
    LINES.append((f"{guarantee:<13} tried {tried}; survived {survived}/{total}; "
                  f"records lost {lost}", ok))
    print(LINES[-1][0], flush=True)


def show_ok(path: Path) -> bool:
    r = subprocess.run([*SCIML, "show", str(path)], capture_output=True, timeout=60)
    return r.returncode == 0


def crashes(tmp: Path) -> None:
    from test_faults import FaultyExecutor, compiled

    problem, ref = compiled("decay")
    cases = runner.plan(problem, ["scipy"], rtols=[1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8])
    faults = {2: "sigsegv", 3: "sigkill", 5: "sigsegv", 6: "sigkill"}
    writer = ResultsWriter(tmp / "crash.h5", {}, "reliability")
    runner.run(problem, ref, cases, writer, FAST, FaultyExecutor(faults), progress=lambda m: None)
    writer.finish("complete")
    recs = results.read(writer.path).records
    crashed = [r for r in recs if r["status"] == "crashed" and "SIG" in r["reason"]]
    report("1 crash", f"{len(faults)} SIGSEGV/SIGKILL worker kills in {len(cases)} cases",
           len(crashed) + sum(r["status"] == "ok" for r in recs) if show_ok(writer.path) else 0,
           len(cases), len(cases) - len(recs))


def hangs(tmp: Path) -> None:
    from test_faults import FaultyExecutor, compiled, gone

    problem, ref = compiled("decay")
    (case,) = runner.plan(problem, ["scipy"])
    settings = runner.Settings(cold=1, repeats=1, budget_s=2.0)
    faults = ["hang", "spawn_grandchild_and_hang", "spawn_grandchild_and_hang"]
    survived, pids = 0, []
    writer = ResultsWriter(tmp / "hang.h5", {}, "reliability")
    for fault in faults:
        ex = FaultyExecutor({1: fault})
        rec = runner.run_case(case, problem, ref, settings, ex, progress=lambda m: None)
        writer.add(rec)
        pids += [e[k] for e in ex.seen for k in ("pid", "grandchild_pid") if k in e]
        survived += rec["status"] == Status.BUDGET_EXCEEDED.value
    time.sleep(0.5)
    orphans = [p for p in pids if not gone(p)]
    n = len(results.read(writer.path).records)
    report("2 hang", f"{len(faults)} hung workers ({len(pids)} processes incl. grandchildren), "
           f"2 s budget; orphans left {len(orphans)}",
           survived if not orphans else 0, len(faults), len(faults) - n)


def interrupts(tmp: Path, runs: int = 2) -> None:
    """Ctrl-C, and SIGTERM (how Slurm, CI runners and `timeout` end a job) and SIGHUP."""
    from test_faults import _ours, _wait_for_cases, gone

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        survived = lost = 0
        for k in range(runs):
            out, scratch = tmp / f"{sig.name}-{k}", tmp / f"{sig.name}-{k}-tmp"
            scratch.mkdir(parents=True)
            proc = subprocess.Popen(
                [*SCIML, "run", "--problem-file", str(DATA / "slow-stiff.toml"), "-b", "scipy",
                 "--solver", "LSODA", "--solver", "DOP853", "--cold", "1", "--repeats", "1",
                 "--out", str(out)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env={**os.environ, "TMPDIR": str(scratch)},
            )
            path = _wait_for_cases(out, 1, proc, timeout=120)
            time.sleep(0.5)
            workers = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
            proc.send_signal(sig)
            rc = proc.wait(timeout=30)
            time.sleep(0.2)
            run = results.read(path)
            lost += 1 - len(run.records)
            survived += (rc == 128 + sig and run.meta["status"] == "interrupted"
                         and run.meta.get("interrupted_by") == sig.name and show_ok(path)
                         and bool(workers) and all(gone(p) for p in workers)
                         and not _ours(scratch) and not list(scratch.iterdir()))
        report(f"3 {sig.name}", f"{runs} to `sciml-bench run` mid-case (exit {128 + sig}, file "
               f"interrupted by {sig.name}, workers gone, temp folders removed, `show` reads it)",
               survived, runs, lost)


def concurrency(tmp: Path, rounds: int = 2) -> None:
    survived = lost = 0
    for k in range(rounds):
        env = {**os.environ, "SCIML_BENCH_CACHE": str(tmp / f"cache-{k}")}
        out = tmp / f"concurrent-{k}"
        cmd = [*SCIML, "run", "--problem-file", str(DATA / "decay.toml"), "-b", "scipy",
               "--quick", "--repeats", "1", "--out", str(out)]
        procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL) for _ in range(2)]
        rcs = [p.wait(timeout=120) for p in procs]
        files = sorted(out.glob("*.h5"))
        done = [results.read(f) for f in files]
        lost += 2 - sum(len(r.records) for r in done)
        survived += sum(rc == 0 for rc in rcs) if len(files) == 2 else 0
    report("4 concurrency", f"{rounds} pairs of runs started together into one folder",
           survived, 2 * rounds, lost)


#: atomic cache writes per racing process in ``caches`` (``--writes``; small in a smoke test)
WRITES = 300


def caches(tmp: Path) -> None:
    from test_faults import _WRITER

    path, writes = tmp / "entry.json", WRITES
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(DATA / "decay.toml"), str(path),
                               str(1000 * (k + 1)), str(writes)]) for k in range(3)]
    reads = torn = 0
    while any(p.poll() is None for p in procs):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ok = reference._read(path) is not None
        torn += bool(caught)
        reads += ok
    p = spec.load(DATA / "decay.toml")
    reference.get(p, cache=tmp / "c")
    (entry,) = (tmp / "c").glob("*.json")
    corruptions = 0
    for mangle in (lambda t: t[: len(t) // 2], lambda t: t.replace('"loss": ', '"loss": 1')):
        entry.write_text(mangle(entry.read_text()))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rebuilt = not reference.get(p, cache=tmp / "c").cached
        corruptions += rebuilt and any("corrupt" in str(w.message) for w in caught)
    report("5 caches", f"3 processes x {writes} atomic cache writes racing {reads + torn} reads "
           f"(torn {torn}); 2 corrupted entries detected and rebuilt ({corruptions})",
           reads + corruptions, reads + torn + 2, 0)


def fuzz() -> None:
    import test_fuzz as tf

    tests: list[Callable[[], None]] = [
        tf.test_fuzz_expression_grammar, tf.test_fuzz_expression_arbitrary_text,
        tf.test_fuzz_problem_tables, tf.test_fuzz_problem_files, tf.test_fuzz_problem_text,
    ]
    failed = 0
    for t in tests:
        try:
            t()
        except Exception as e:  # a hypothesis failure: an input that escaped the guarantees
            failed += 1
            last = str(e).strip().splitlines()[-1:] or [""]
            print(f"  fuzz failure in {t.__name__}: {type(e).__name__}: {last[0][:300]}")
    total = sum(tf.RUN.values())
    valid = sum(v for k, v in tf.OUTCOME.items() if k.endswith(":valid"))
    report("6 hostile", f"{total} fuzzed problem files/tables and expressions ({valid} valid, "
           f"{total - valid} rejected), no eval/exec/import reached, <=1 s each",
           total if not failed else 0, total, 0)


def numerical() -> None:
    from test_numerical_failures import MESSAGES, PROBLEMS, stub_reference

    tried = survived = 0
    for name in PROBLEMS:
        p = spec.load(DATA / f"{name}.toml")
        ref = stub_reference(p)
        problem = reference.compile_problem(p, ref)
        for b in MESSAGES:
            if not backends.get(b).availability().ok or (name == "max-steps" and b == "scipy"):
                continue
            (case,) = runner.plan(problem, [b])
            rec = runner.run_case(case, problem, ref, FAST, LocalExecutor(), lambda m: None)
            tried += 1
            survived += (Status(rec["status"]).is_solver_failure
                         and any(m in rec["reason"] for m in MESSAGES[b])
                         and "gradient_error" not in rec)
    report("7 numerical", f"{tried} NaN/blow-up/singular-Jacobian/max-steps solves across "
           f"{', '.join(MESSAGES)} (status + library message, gradient unscored)",
           survived, tried, 0)


def environment(tmp: Path) -> None:
    from test_environment_errors import _hiding, _hiding_torch

    decay = str(DATA / "decay.toml")
    checks: list[bool] = []

    def sciml(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*SCIML, *args], capture_output=True, text=True, timeout=180,
                              env={**os.environ, **(env or {})})

    r = sciml("run", "--problem-file", decay, "-b", "torchdiffeq", "--quick", "--out",
              str(tmp / "env"), env=_hiding_torch(tmp))
    recs = [x for f in (tmp / "env").glob("*.h5") for x in results.read(f).records]
    checks.append(r.returncode == 0 and [x["status"] for x in recs] == ["unavailable"]
                  and "Fix:" in recs[0]["reason"])
    for out in ("/dev/null/results", str(Path(decay) / "results")):
        r = sciml("run", "--problem-file", decay, "-b", "scipy", "--out", out)
        errs = [ln for ln in r.stderr.splitlines() if ln.startswith("Error:")]
        checks.append(r.returncode == 2 and "Traceback" not in r.stderr and len(errs) == 1
                      and "--out" in errs[0])
        r = sciml("--debug", "run", "--problem-file", decay, "-b", "scipy", "--out", out)
        checks.append(r.returncode == 2 and "Traceback" in r.stderr)
    # the first quick-start install has no matplotlib or pandas: one line naming the extra
    hidden = _hiding(tmp, "matplotlib", "pandas")
    (done,) = (tmp / "env").glob("*.h5")
    r = sciml("report", str(done), "--out", str(tmp / "report"), env=hidden)
    checks.append(r.returncode == 2 and "Traceback" not in r.stderr and "'.[report]'" in r.stderr)
    if "--device" in sciml("run", "--help").stdout:
        r = sciml("run", "cnn", "--quick", "--device", "cuda", "--out", str(tmp / "gpu"))
        checks.append(r.returncode == 2 and "Traceback" not in r.stderr and "--device" in r.stderr)
    report("8 environment", f"{len(checks)} checks: torch missing, unwritable --out (x2, with and "
           "without --debug), report without matplotlib, --device cuda without a GPU",
           sum(checks), len(checks), 0)


def main() -> int:
    global WRITES
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("steps", nargs="*", help="only these guarantees (crashes, hangs, "
                    "interrupts, concurrency, caches, fuzz, numerical, environment)")
    ap.add_argument("--writes", type=int, default=WRITES, help="cache writes per process")
    args = ap.parse_args()
    WRITES = args.writes
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sciml-bench-rel-") as d:
        tmp = Path(d)
        only = set(args.steps)
        for step in (crashes, hangs, interrupts, concurrency, caches):
            if not only or step.__name__ in only:
                sub = tmp / step.__name__
                sub.mkdir()
                step(sub)
        for step in (fuzz, numerical):
            if not only or step.__name__ in only:
                step()
        if not only or "environment" in only:
            environment(tmp)
    print(f"reliability: {sum(ok for _, ok in LINES)}/{len(LINES)} guarantees held "
          f"in {time.monotonic() - start:.0f} s")
    return 0 if all(ok for _, ok in LINES) else 1


if __name__ == "__main__":
    sys.exit(main())
