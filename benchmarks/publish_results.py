"""Regenerate ``results/README.md``: the published report of this machine.

Runs every shipped problem with default settings and the CNN quick baseline,
each into ``results/published/``, then ``sciml-bench report`` into ``results/``
and writes ``results/README.md`` (the hardware, the commands, the report).

    python benchmarks/publish_results.py            # ~20-30 min on 2 cores
"""

from __future__ import annotations

import platform
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from sciml_bench.measure import environment
from sciml_bench.problem import spec

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
RAW = RESULTS / "published"
#: the work-precision ladder shown for ROBER
SWEEP = "1e-4,1e-5,1e-6,1e-7,1e-8"
#: ensemble sizes a 2-core CPU gets through in minutes (the files' ladders go to 65536)
ENSEMBLE_SIZES = "1,16,256,4096"
#: the held-out accuracy whose time to reach the CNN rows record
CNN_TARGET = "0.9"


def sh(*args: str) -> float:
    cmd = ["sciml-bench", *args]
    print("$", shlex.join(cmd), file=sys.stderr, flush=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sciml_bench.cli.main", *args], check=True, cwd=ROOT)
    return time.perf_counter() - start


def main() -> None:
    shutil.rmtree(RAW, ignore_errors=True)
    shutil.rmtree(RESULTS / "figures", ignore_errors=True)
    names = spec.available_problems()
    ensembles = [n for n in names if spec.load(n).ensemble is not None]
    problems = [n for n in names if n not in ensembles]
    run_s = sh("run", *problems, "--out", str(RAW.relative_to(ROOT)))
    ens_s = sh("run", *ensembles, "--sizes", ENSEMBLE_SIZES, "--out", str(RAW.relative_to(ROOT)))
    sweep_s = sh("run", "stiff-robertson", "--tolerances", SWEEP, "--out", str(RAW.relative_to(ROOT)))
    cnn_s = sh("run", "cnn", "--quick", "--target-accuracy", CNN_TARGET, "--eval-every", "10",
               "--out", str(RAW.relative_to(ROOT)))
    files = sorted(str(p.relative_to(ROOT)) for p in RAW.glob("*.h5"))
    sh("report", *files, "--out", str(RESULTS.relative_to(ROOT)))
    report = (RESULTS / "report.md").read_text()
    env = environment.capture()
    header = f"""# Published results

Measured by sciml-bench on the project's own machine: **{env['cpu_model']}, {env['cpu_count']}
cores, no GPU**, {platform.system()} {platform.machine()}, Python {env['python']}, with the
versions pinned in `constraints.txt`. This is a shared 2-core virtual machine: absolute times
drift between runs, ratios measured side by side hold better. No Julia is installed here,
so the Julia rows say `unavailable`; no GPU, so the CNN rows ran on the CPU.

Regenerate everything below with one command, `python benchmarks/publish_results.py`, which runs:

```bash
sciml-bench run {' '.join(problems)} --out results/published
sciml-bench run {' '.join(ensembles)} --sizes {ENSEMBLE_SIZES} --out results/published
sciml-bench run stiff-robertson --tolerances {SWEEP} --out results/published
sciml-bench run cnn --quick --target-accuracy {CNN_TARGET} --eval-every 10 --out results/published
sciml-bench report results/published/*.h5 --out results
```

The default run of every single-trajectory problem took {run_s / 60:.1f} min, the ensembles
{ens_s / 60:.1f} min, the ROBER work-precision sweep
{sweep_s / 60:.1f} min and the CNN quick baseline {cnn_s / 60:.1f} min.
The raw HDF5 files are in `results/published/`; `report.html` is the same report as one
self-contained page.

"""
    (RESULTS / "README.md").write_text(header + report)
    print(f"wrote {RESULTS / 'README.md'}", file=sys.stderr)


if __name__ == "__main__":
    main()
