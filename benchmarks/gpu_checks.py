"""Every check that needs a GPU, sized for the device tool: one call per open GPU issue.

On the GPU machine (the device tool's ``run``; benchmarks/README.md, "On the GPU
machine", has the whole plan and the wheels to carry), through ``gpu_session.sh``, which
installs the project there first::

    bash benchmarks/gpu_session.sh --steps ode,tests,fuzz        # the device axis
    bash benchmarks/gpu_session.sh --steps cnn                   # CNN second wave
    bash benchmarks/gpu_session.sh --steps ensembles             # ensembles

Steps, in the order they run:

- ``ode``: ``sciml-bench run stiff-robertson nonstiff-spiral-node --device cpu,cuda
  --quick``, its table as it printed, then every row checked: each names the device it
  ran on; Diffrax, torchdiffeq and torchode ran where they were asked; SciPy and Julia
  ran on the CPU and say so under a ``cuda`` request; the GPU rows carry the GPU's name
  and a device-memory peak; some row ran ok on ``cuda``.
- ``tests``: the GPU-marked tests (``pytest -m gpu``: ODE cases and ensembles on CUDA
  with read-back and memory, the default keeping JAX on the CPU, the CNN variants,
  training on CUDA).
- ``fuzz``: ``tests/test_fuzz.py`` whole (its memory check once failed there).
- ``cnn``: ``cnn_gpu_matrix.py`` (host pipeline x fp32/bf16, ResNet-18), every row
  checked to have run on ``cuda``.
- ``ensembles``: ``sciml-bench run PROBLEM --device cuda -b diffrax -b torchdiffeq -b
  torchode --sizes LADDER --quick --budget B`` per ensemble problem first, then each
  problem on ``--device cpu`` with every backend (a GPU run gets twice a CPU run's share
  of the time left, so the GPU rows come back even when the CPU rungs are cut), every
  row printed with the device asked and reported and checked like the ODE rows (SciPy's
  loop on the CPU under either request), then the crossovers of each problem and the
  spread at the largest size (``ensemble_overhead.spread_lines``). A large CPU rung may
  end ``budget_exceeded`` (the rest of its ladder ``skipped``): an honest row.
- ``train``: ``sciml-bench run nonstiff-spiral-node --train --device cpu,cuda --quick``
  (issue 24), its rows checked like the ODE rows (device read back, GPU name and memory
  peak on ``cuda``) and printed with their curve agreement.
- ``overhead``: ``ensemble_overhead.py --device cuda --skip-spread`` (harness against
  bare scripts on the GPU).
- ``suite``: the whole test suite (``pytest``), GPU tests included: it must pass there
  too. Packages the GPU image lacks (TensorFlow, Julia, dask, tree-sitter) skip with
  their reasons.

``--deadline S`` (default 540, inside the device tool's 600-s call): a step still running
then gets SIGTERM (sciml-bench keeps every completed case in its results file), its
completed rows are checked and it says ``CUT``; steps not started say ``NOT RUN``. So a
call always returns its output and files, and a later call runs what is left.

Results files land under ``--out/<step>/``, everything the commands printed on stderr in
``--out/gpu-checks.log``. Without a visible GPU it prints one line and exits with status
2; exit 1 when a check fails or a step was cut or not run, 0 when every step passed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
STEPS = ("ode", "tests", "fuzz", "cnn", "ensembles", "train", "overhead", "suite")
RUN = ["run", "stiff-robertson", "nonstiff-spiral-node", "--device", "cpu,cuda", "--quick"]
ENSEMBLE_PROBLEMS = ("ensemble-lorenz", "ensemble-spiral-node")
#: backends whose ensembles (and ODE cases) run on the GPU when asked
ON_GPU = ("diffrax", "torchdiffeq", "torchode")
#: rows that never ran a worker: no device was read back, by design
NOT_RUN = ("unavailable", "skipped")
#: after SIGTERM, how long a run gets to save what it completed
GRACE_S = 30.0
#: a step is not started with less time than this left
MIN_STEP_S = 45.0


def row_problems(records: list[dict[str, Any]], kind: str = "ode") -> list[str]:
    """What is wrong with the device of each row of ``kind`` (``ode`` or ``ensemble``);
    empty when every row is honest."""
    bad = []
    for r in records:
        if r.get("kind", "ode") != kind or r.get("status") in NOT_RUN:
            continue
        label = f"{r.get('problem')} {r.get('backend')} (asked {r.get('device_requested')})"
        if kind == "ensemble":
            label = (f"{r.get('problem')} {r.get('backend')} {r.get('semantics')} "
                     f"n={r.get('size')} (asked {r.get('device_requested')})")  # fmt: skip
        dev, asked = r.get("device"), r.get("device_requested")
        if dev not in ("cpu", "cuda"):
            bad.append(f"{label}: no device read back ({r.get('status')}: {r.get('reason')})")
        elif r["backend"] in ON_GPU and dev != asked:
            bad.append(f"{label}: ran on {dev}")
        elif r["backend"] in ("scipy", "julia") and dev != "cpu":
            bad.append(f"{label}: a CPU-only backend reports {dev}")
        elif asked == "cuda" and dev == "cpu" and "runs only on the CPU" not in r.get("reason", ""):
            bad.append(f"{label}: on the CPU without saying so")
        if dev == "cuda" and r.get("status") == "ok":
            if not r.get("device_name"):
                bad.append(f"{label}: no GPU name")
            if r.get("alloc_peak_mb") is None or r.get("vram_max_mb") is None:
                bad.append(f"{label}: no device-memory peak")
    if not any(r.get("kind", "ode") == kind and r.get("device") == "cuda"
               and r.get("status") == "ok" for r in records):  # fmt: skip
        bad.append(f"no {kind} row ran ok on cuda")
    return bad


def cnn_problems(records: list[dict[str, Any]]) -> list[str]:
    """CNN rows that did not run ok on the GPU they were asked for."""
    bad = [
        f"cnn {r.get('backend')} {r.get('model', '')} {r.get('precision', '')} "
        f"{r.get('pipeline', '')}: {r.get('status')} on {r.get('device')} ({r.get('reason', '')})"
        for r in records
        if r.get("kind") == "cnn" and (r.get("status") != "ok" or r.get("device") != "cuda")
    ]
    return bad or ([] if any(r.get("kind") == "cnn" for r in records) else ["no CNN row"])


def ensemble_lines(records: list[dict[str, Any]]) -> list[str]:
    """Each ensemble row with the device it asked for and the one it reports."""

    def ms(key: str) -> str:
        v = r.get(key)
        return f"{v * 1e3:.3g}" if isinstance(v, float) else "-"

    def num(key: str, fmt: str) -> str:
        v = r.get(key)
        return format(v, fmt) if isinstance(v, int | float) else "-"

    head = (f"{'problem':<21} {'backend':<12} {'semantics':<12} {'size':>6} {'asked':<5} "
            f"{'device':<6} {'status':<16} {'solve ms':>9} {'grad ms':>9} {'members/s':>10} "
            f"{'alloc MB':>9} {'VRAM MB':>8}  device name")  # fmt: skip
    out = [head]
    for r in records:
        if r.get("kind") != "ensemble":
            continue
        out.append(
            f"{r.get('problem', ''):<21} {r.get('backend', ''):<12} {r.get('semantics') or '-':<12} "
            f"{num('size', 'd'):>6} {r.get('device_requested') or '-':<5} "
            f"{r.get('device') or '-':<6} {r.get('status', ''):<16} {ms('solve_s'):>9} "
            f"{ms('grad_s'):>9} {num('throughput', '.3g'):>10} {num('alloc_peak_mb', '.0f'):>9} "
            f"{num('vram_max_mb', '.0f'):>8}  {r.get('device_name') or '-'}"
        )
    return out


class Session:
    """The call's clock, its log, and the commands run under the deadline."""

    def __init__(self, out: Path, deadline_s: float) -> None:
        self.out = out
        self.end = time.monotonic() + deadline_s
        self.log: IO[str] = (out / "gpu-checks.log").open("a")
        self.cut = False

    def left(self) -> float:
        return self.end - time.monotonic()

    def sh(self, cmd: list[str], time_s: float | None = None) -> int | None:
        """Run ``cmd`` from the repository root: stdout printed and logged, stderr logged.
        SIGTERM at the deadline (or after ``time_s``); None when it was stopped."""
        limit = min(self.left(), time_s if time_s is not None else float("inf"))
        shown = ["sciml-bench", *cmd[3:]] if cmd[1:3] == ["-m", "sciml_bench.cli.main"] else cmd
        print(f"$ {shlex.join(shown)}", flush=True)
        self.log.write(f"$ {shlex.join(cmd)}\n")
        self.log.flush()
        mark = self.log.tell()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=self.log,
                                text=True, start_new_session=True)  # fmt: skip
        pump = threading.Thread(target=self._pump, args=(proc.stdout,))
        pump.start()
        try:
            rc: int | None = proc.wait(timeout=max(limit, 1.0))
        except subprocess.TimeoutExpired:
            print(f"-- out of time: SIGTERM after {limit:.0f} s; completed cases are kept",
                  flush=True)  # fmt: skip
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            self.cut, rc = True, None
        pump.join()
        if rc != 0:  # why, from what it wrote on stderr (the device returns only the output)
            with (self.out / "gpu-checks.log").open() as f:
                f.seek(mark)
                print("\n".join(f"  | {ln}" for ln in f.read().splitlines()[-8:]), flush=True)
        return rc

    def _pump(self, stream: IO[str] | None) -> None:
        assert stream is not None
        for line in stream:
            sys.stdout.write(line)
            sys.stdout.flush()
            self.log.write(line)
        self.log.flush()


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "sciml_bench.cli.main", *args]


def records_in(folder: Path) -> list[dict[str, Any]]:
    from sciml_bench.results import store

    return [r for p in sorted(folder.rglob("*.h5")) for r in store.read(p).records]


def verdict(name: str, rc: int | None, bad: list[str]) -> bool:
    for b in bad:
        print(f"FAIL: {b}")
    state = "CUT" if rc is None else "PASS" if rc == 0 and not bad else "FAIL"
    print(f"== {name}: {state}" + (f" (exit status {rc})" if rc not in (0, None) else ""))
    return state == "PASS"


def step_ode(s: Session, a: argparse.Namespace) -> bool:
    folder = s.out / "ode"
    rc = s.sh(cli(*RUN, "--out", str(folder)))
    records = records_in(folder)
    seen = sorted({(r["backend"], r.get("device"), r["status"]) for r in records
                   if r.get("kind", "ode") == "ode"})  # fmt: skip
    print("rows (backend, device, status):", seen)
    return verdict("ode", rc, row_problems(records) if records else ["no results file"])


def step_tests(s: Session, a: argparse.Namespace) -> bool:
    files = ["tests/test_device.py", "tests/test_ensemble_device.py", "tests/test_cnn.py",
             "tests/test_training.py"]
    rc = s.sh([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
               "-m", "gpu", *files])  # fmt: skip
    return verdict("tests", rc, [])


def step_fuzz(s: Session, a: argparse.Namespace) -> bool:
    rc = s.sh([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
               "tests/test_fuzz.py"])  # fmt: skip
    return verdict("fuzz", rc, [])


def step_suite(s: Session, a: argparse.Namespace) -> bool:
    rc = s.sh([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"])
    return verdict("suite", rc, [])


def step_cnn(s: Session, a: argparse.Namespace) -> bool:
    folder = s.out / "cnn"
    rc = s.sh([sys.executable, str(HERE / "cnn_gpu_matrix.py"), "--out", str(folder)])
    return verdict("cnn", rc, cnn_problems(records_in(folder)))


def ensemble_commands(problems: list[str], sizes: str, budget: float,
                      folder: Path) -> list[list[str]]:  # fmt: skip
    """The ensemble runs in the order they get the step's time: every problem's GPU
    backends on ``cuda`` first, then every backend on the CPU. On 2026-11-28 one
    ``--device cpu,cuda`` run per problem spent its whole share on SciPy's CPU loop (4,096
    members took 6 s a solve; 65,536 ran into its budget) and no row reached the GPU."""
    gpu = [x for name in ON_GPU for x in ("-b", name)]
    common = ["--sizes", sizes, "--quick", "--budget", str(budget), "--out", str(folder)]
    return ([cli("run", p, "--device", "cuda", *gpu, *common) for p in problems]
            + [cli("run", p, "--device", "cpu", *common) for p in problems])  # fmt: skip


def step_ensembles(s: Session, a: argparse.Namespace) -> bool:
    from ensemble_overhead import spread_lines

    from sciml_bench.results.scaling import scaling_texts

    folder = s.out / "ensembles"
    commands = ensemble_commands(a.ensemble_problems, a.sizes, a.budget, folder)
    rcs: list[int | None] = []
    for i, cmd in enumerate(commands):
        # the GPU runs get twice a CPU run's share of what is left
        weights = [2.0 if "cuda" in c else 1.0 for c in commands[i:]]
        rcs.append(s.sh(cmd, time_s=s.left() * weights[0] / sum(weights)))
    records = records_in(folder)
    print("\n".join(ensemble_lines(records)))
    for problem in a.ensemble_problems:
        rows = [r for r in records if r.get("problem") == problem]
        for text in scaling_texts(rows):
            print(f"{problem}: {text}")
    print("\n".join(spread_lines(records, "cuda")))
    rc = None if None in rcs else max(rcs, default=0)
    return verdict("ensembles", rc, row_problems(records, "ensemble") if records
                   else ["no results file"])  # fmt: skip


def step_train(s: Session, a: argparse.Namespace) -> bool:
    """The spiral trained (--train --quick) on cpu and cuda: every row's device read back."""
    folder = s.out / "train"
    rc = s.sh(cli("run", "nonstiff-spiral-node", "--train", "--device", "cpu,cuda", "--quick",
                  "--out", str(folder)))  # fmt: skip
    records = records_in(folder)
    seen = sorted({(r["backend"], r.get("device"), r["status"], r.get("curve_tier"))
                   for r in records})  # fmt: skip
    print("rows (backend, device, status, curve vs reference):", seen)
    return verdict("train", rc, row_problems(records, "train") if records else ["no results file"])


def step_overhead(s: Session, a: argparse.Namespace) -> bool:
    rc = s.sh([sys.executable, str(HERE / "ensemble_overhead.py"), "--device", "cuda",
               "--skip-spread", "--rounds", str(a.rounds)])  # fmt: skip
    return verdict("overhead", rc, [])


RUNNERS: dict[str, Callable[[Session, argparse.Namespace], bool]] = {
    "ode": step_ode, "tests": step_tests, "fuzz": step_fuzz, "cnn": step_cnn,
    "ensembles": step_ensembles, "train": step_train, "overhead": step_overhead,
    "suite": step_suite,
}  # fmt: skip


def steps_arg(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [n for n in names if n not in STEPS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown step(s) {', '.join(unknown) or '(none)'}; choose from {','.join(STEPS)}"
        )
    # in the order given: the first step gets the deadline's time first (a call named
    # `train,ode,tests` once ran ode first and never reached train)
    return list(dict.fromkeys(names))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=steps_arg, default=list(STEPS),
                    help=f"comma list of {','.join(STEPS)}, run in the order given "
                         "(default: all, in that order)")
    ap.add_argument("--deadline", type=float, default=540.0,
                    help="seconds the whole call may take (default 540)")
    ap.add_argument("--out", type=Path, help="folder for results files and the log "
                    "(default: temporary; on the device: $OUT)")
    ap.add_argument("--sizes", default="1,256,4096,65536", help="the ensemble ladder")
    ap.add_argument("--budget", type=float, default=60.0,
                    help="seconds per ensemble case before its ladder stops (default 60)")
    ap.add_argument("--ensemble-problems", type=lambda t: t.split(","),
                    default=list(ENSEMBLE_PROBLEMS))
    ap.add_argument("--rounds", type=int, default=2, help="rounds of the overhead step")
    a = ap.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(HERE)]
    from sciml_bench.measure.environment import gpus

    found = gpus()
    if not found:
        print("gpu_checks: no NVIDIA GPU visible (NVML sees none); run this on the GPU machine",
              file=sys.stderr)  # fmt: skip
        return 2
    out = a.out or Path(tempfile.mkdtemp(prefix="gpu-checks-"))
    out.mkdir(parents=True, exist_ok=True)
    s = Session(out, a.deadline)
    print(f"GPU: {found[0]['name']}, driver {found[0]['driver']}; steps {','.join(a.steps)}; "
          f"deadline {a.deadline:.0f} s; results in {out}", flush=True)  # fmt: skip
    passed: dict[str, bool] = {}
    for name in a.steps:
        if s.left() < MIN_STEP_S:
            print(f"== {name}: NOT RUN ({s.left():.0f} s left; run it in another call)")
            passed[name] = False
            continue
        start = time.monotonic()
        passed[name] = RUNNERS[name](s, a)
        print(f"   ({time.monotonic() - start:.0f} s)\n", flush=True)
    summary = ", ".join(f"{n} {'ok' if ok else 'NOT OK'}" for n, ok in passed.items())
    print(("ALL GPU CHECKS PASSED: " if all(passed.values()) else "GPU CHECKS NOT ALL PASSED: ")
          + summary)  # fmt: skip
    return 0 if all(passed.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
