"""Regenerate ``results/README.md``: the published report of this machine.

Runs every shipped problem with default settings and the CNN quick baseline,
each into ``results/published/``, then ``sciml-bench report`` into ``results/``
and writes ``results/README.md`` (the hardware, the commands, the report) and
``docs/fairness.md`` (``sciml-bench fairness`` over this machine's published rows).

Results files measured on the GPU machine (``gpu_checks.py`` brings them back from the
device tool's ``$OUT``) go, as they came, into ``results/published-gpu/``: they are kept
across regenerations and reported beside this machine's, each machine's timings apart.

    python benchmarks/publish_results.py                 # every run (see timings.json)
    python benchmarks/publish_results.py --only stiff-brusselator-2d --only sweep
                                                         # those runs again, the rest kept
    python benchmarks/publish_results.py --report-only   # the report again, no runs
    python benchmarks/publish_results.py --report-only --out DIR   # from DIR/published/

A results file older than the code it would be published with is refused (exit status 2,
naming the file and the fix) before anything runs: rows judged with an older reference
version (``REFERENCE_VERSION``), or a run whose recorded commit's ``sciml_bench/`` differs
from HEAD's (``git diff --quiet COMMIT HEAD -- sciml_bench``, less the code that only draws
figures, :data:`DRAWING_ONLY`; a ``-dirty`` commit is taken as its commit).
``--allow-stale`` publishes such files anyway, saying so.

Each published run has a name: ``run`` (every single-trajectory problem at its default
size), ``events`` (those with ``[[events]]``, :func:`event_problems`), a ladder's problem name, ``ensembles``, ``sweep``, ``gradient sweep NAME`` (a
gradient tolerance ladder, :data:`GRADIENT_SWEEPS`), ``cnn`` and ``model NAME`` (a
real SBML model, :data:`MODELS`). ``--only NAME`` replaces that run's files
(``published/files.json`` says which file came from which run) and its time in
``timings.json``, and keeps every other file.

The real models are not shipped (docs/real-models.md): their runs read them from a clone
of the PEtab benchmark collection named by ``SCIML_BENCH_MODELS``, and a run whose model
file is missing stops before anything runs, saying how to fetch it. ``--report-only``
needs no model file.

    git clone https://github.com/Benchmarking-Initiative/Benchmark-Models-PEtab /tmp/petab
    git -C /tmp/petab checkout 4d2085084b289f6215a95475b1ee639fd7d42283
    SCIML_BENCH_MODELS=/tmp/petab python benchmarks/publish_results.py --only "model Boehm_JProteomeRes2014"
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sciml_bench.measure import environment
from sciml_bench.problem import spec

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
RAW = RESULTS / "published"
#: results files measured on the GPU machine, committed as they came back
GPU = RESULTS / "published-gpu"
#: how long each published run took (read again by --report-only)
TIMINGS = RAW / "timings.json"
#: the work-precision ladder shown for ROBER
SWEEP = "1e-4,1e-5,1e-6,1e-7,1e-8"
#: gradient work-precision ladders (issue 53): from which rtol each library's gradient
#: passes. Van der Pol at mu = 1e6: at rtol 1e-6 every gradient failed (2026-11-28: CVODES
#: forward 2.8e3, AMICI 57, diffsol 13.7, Diffrax 0.88 against a reference error of 2.3e-7),
#: and CVODES still gave 7.7e-3 at 1e-10, so the stiff-capable libraries run down to 1e-12,
#: each compiled one by forward sensitivities and its adjoint, Diffrax by its default
#: adjoint; one cold process and 5 repeats a case, a 120 s budget, and a step bound of
#: 400,000 (the problem's 40,000 is sized for 1e-6; a BDF's steps grow ~16x to 1e-12). The
#: explicit two stop at the step bound in their first save interval at 1e-6 already
GRADIENT_SWEEPS = {
    "stiff-vanderpol": ["--tolerances", "1e-6,1e-7,1e-8,1e-9,1e-10,1e-11,1e-12", "-b",
                        "cvodes,diffsol,amici,diffrax", "--gradient",
                        "forward,adjoint,RecursiveCheckpointAdjoint", "--cold", "1",
                        "--repeats", "5", "--budget", "120", "--max-steps", "400000"],
}
#: ensemble sizes a 2-core CPU gets through in minutes (the files' ladders go to 65536)
ENSEMBLE_SIZES = "1,16,256,4096"
#: the held-out accuracy whose time to reach the CNN rows record
CNN_TARGET = "0.9"
#: which results files each run wrote (so that ``--only`` replaces just those)
FILES = RAW / "files.json"
#: size ladders, the arguments after the problem's name; a sized problem not named here
#: runs at its default size with the rest. Each state ladder within 15 min on 2 cores
#: (issue 22); the parameter ladders run every gradient method, to P = 3,000 (rates) and
#: P = 10,002 (the network's width; issue 30)
LADDERS = {
    # to the anchors' sizes (issue 34): 30,000 and 32,768 states, sparse solvers only
    # past the dense rows' forecast and memory limits
    "stiff-robertson-groups": ["--sizes", "1,10,100,1000,10000"],
    "stiff-brusselator-2d": ["--sizes", "8,16,32,64,128"],
    "stiff-robertson-rates": ["--sizes", "1,10,100,1000", "--gradient", "all"],
    # every method at five widths, JIT builds of up to ~50 s (diffsol at w = 1000); a cheap
    # rung of any ladder runs `run`'s default three processes (run/rung_processes.py)
    "nonstiff-node-width": ["--sizes", "10,50,200,1000,2000", "--gradient", "all"],
}

#: a ladder's top rungs run again with a larger budget where its forecast skipped a sparse
#: solver there: at N = 128 (32,768 states) diffsol was forecast at 2,880 s and CVODES at
#: 668 s (2026-12-07), over twice the 300 s budget; one run of their three largest sizes
#: keeps each exponent in one file
TOP_RUNGS = {
    "stiff-brusselator-2d": ["--sizes", "32,64,128", "-b", "diffsol,cvodes", "--jacobian",
                             "sparse", "--budget", "900"],
}

#: real SBML models (issue 41): the PEtab benchmark collection (BSD-3), fetched by the user
#: (docs/real-models.md), never committed here; the clone's folder is named by MODELS_VAR
MODELS_VAR = "SCIML_BENCH_MODELS"
MODELS_URL = "https://github.com/Benchmarking-Initiative/Benchmark-Models-PEtab"
MODELS_COMMIT = "4d2085084b289f6215a95475b1ee639fd7d42283"
#: each model's time span ends at its data's last measurement (the PEtab measurement
#: table's largest time); every gradient method. Budgeted to fit a shared, loaded 2-core
#: machine (docs/real-models.md): Boehm, the first, runs every backend at the defaults (three
#: cold processes, the import's step bound of 100,000), where torchdiffeq's and torchode's
#: dopri5 spend 134-139 s each on the step bound (t = 2.74 of 240) and Diffrax's
#: BacksolveAdjoint the 300 s budget, 12 of its 15.5 minutes; the others run one cold
#: process a case at ROBER's step bound (10,000), Zheng on every backend, the rest without
#: the two explicit-only libraries and with a 180 s budget; Lang (211 parameters) with 3
#: repeats, without Diffrax too (every Diffrax row spent the 180 s budget on Bachmann and
#: SalazarCavazos), at the import's step bound (100,000: at rtol 1e-8 SciPy and AMICI need
#: more than 10,000 steps) and at rtol 1e-6 and 1e-8 (at 1e-6 no gradient passes). Its
#: reference takes 9 min on a quiet machine (`sciml-bench run` builds and caches it
#: first); AMICI compiles it in 30 s. Bachmann (its initial assignments now expressions of
#: the parameters, issue 50), Fiedler (its steady-state start a function of eleven of them)
#: and Raia (with the stimulus its paper's conditions set, il13_level = 20: at 0 the model
#: is at rest) run libRoadRunner too, and so does every model run since; Boehm and Zheng
#: name no backend, so run --sbml leaves out the two explicit-only libraries (it says so)
_MODEL_BUDGET = ["--gradient", "all", "--max-steps", "10000", "--cold", "1"]
_STIFF_ONLY = [*_MODEL_BUDGET, "--budget", "180", "-b"]
_WITH_RR = "scipy,diffrax,cvodes,diffsol,amici,roadrunner,julia"
MODELS = {
    "Boehm_JProteomeRes2014": ["--t-end", "240", "--gradient", "all"],
    "Zheng_PNAS2012": ["--t-end", "25", *_MODEL_BUDGET],
    "Bachmann_MSB2011": ["--t-end", "360", *_STIFF_ONLY, _WITH_RR],
    "SalazarCavazos_MBoC2020": ["--t-end", "300", *_STIFF_ONLY, _WITH_RR],
    "Raia_CancerResearch2011": ["--t-end", "120", "--set", "il13_level=20", *_STIFF_ONLY,
                                _WITH_RR],
    "Fiedler_BMCSystBiol2016": ["--t-end", "10", *_STIFF_ONLY, _WITH_RR],
    "Lang_PLOSComputBiol2024": ["--t-end", "136471.6126", "--gradient", "all", "--cold", "1",
                                "--budget", "180", "-b", "scipy,cvodes,diffsol,amici,roadrunner,julia",
                                "--repeats", "3", "--tolerances", "1e-6,1e-8"],
}


def model_file(name: str, root: str | None = None) -> str:
    """Where model ``name``'s SBML file lies in the clone (``root``: the folder named by
    :data:`MODELS_VAR`; None: the variable itself, as a shell would expand it)."""
    base = f"${MODELS_VAR}" if root is None else root.rstrip("/")
    return f"{base}/Benchmark-Models/{name}/model_{name}.xml"


def model_args(name: str, root: str | None) -> list[str]:
    """``sciml-bench run``'s arguments for model ``name``."""
    return ["--sbml", model_file(name, root), *MODELS[name]]


def check_models(keys: list[str]) -> None:
    """Stop (exit status 2) before anything runs when a model run's file is missing,
    saying how to fetch it."""
    root = os.environ.get(MODELS_VAR)
    for key in keys:
        if not key.startswith("model "):
            continue
        name = key.removeprefix("model ")
        path = Path(model_file(name, root)) if root else None
        if path is None or not path.is_file():
            where = f"{path} does not exist" if path else f"{MODELS_VAR} is not set"
            print(f"publish_results: the run {key!r} needs the SBML file of {name}, and "
                  f"{where}. Fetch the collection (BSD-3; not shipped here): git clone "
                  f"{MODELS_URL} DIR && git -C DIR checkout {MODELS_COMMIT}; then "
                  f"{MODELS_VAR}=DIR (docs/real-models.md). Or leave it out: --only names "
                  "the other runs, and --report-only needs no model file.", file=sys.stderr)
            sys.exit(2)


def sh(*args: str, env: dict[str, str] | None = None) -> float:
    cmd = ["sciml-bench", *args]
    print("$", shlex.join(cmd), file=sys.stderr, flush=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sciml_bench.cli.main", *args], check=True, cwd=ROOT,
                   env=env)  # fmt: skip
    return time.perf_counter() - start


def run_env(key: str, folder: Path) -> dict[str, str] | None:
    """A ladder's (and a gradient sweep's) environment: one AMICI compiled-model cache
    (``folder``, fresh) for the whole ladder, so that AMICI's first ladder compiles each
    rung's model cold (its TTFG has the compile) and its other ladders (the other Jacobian
    kind and sensitivity method: the same C++ model) load it, their rows saying ``cache``,
    instead of four compiles a rung; None (inherit) elsewhere and where the user named a
    cache."""
    if (not key.startswith(("ladder ", "top ", "gradient sweep "))
            or os.environ.get("SCIML_BENCH_AMICI_CACHE")):  # fmt: skip
        return None
    return {**os.environ, "SCIML_BENCH_AMICI_CACHE": str(folder)}


def shipped_groups() -> tuple[list[str], list[str], list[str]]:
    """The shipped problems as the published runs group them: single-trajectory problems
    (the main run), ensembles, and the ladders of :data:`LADDERS`."""
    names = spec.available_problems()
    ensembles = [n for n in names if spec.load(n).ensemble is not None]
    ladders = [n for n in names if n in LADDERS]
    return [n for n in names if n not in ensembles and n not in ladders], ensembles, ladders


def planned_runs(problems: list[str], ensembles: list[str], ladders: list[str],
                 models_root: str | None = None) -> dict[str, list[str]]:
    """Every published run: its name and the arguments of its ``sciml-bench run``
    (a model's file under ``models_root``, or ``$SCIML_BENCH_MODELS`` unexpanded)."""
    with_events = event_problems(problems)
    return {
        "run": [n for n in problems if n not in with_events],
        "events": with_events,
        **{f"ladder {n}": [n, *LADDERS[n]] for n in ladders},
        **{f"top {n}": [n, *TOP_RUNGS[n]] for n in ladders if n in TOP_RUNGS},
        "ensembles": [*ensembles, "--sizes", ENSEMBLE_SIZES],
        "sweep": ["stiff-robertson", "--tolerances", SWEEP],
        **{f"gradient sweep {n}": [n, *args] for n, args in GRADIENT_SWEEPS.items()},
        "cnn": ["cnn", "--quick", "--target-accuracy", CNN_TARGET, "--eval-every", "10"],
        **{f"model {n}": model_args(n, models_root) for n in MODELS},
    }


def event_problems(problems: list[str]) -> list[str]:
    """The single-trajectory problems with ``[[events]]``: their own published run, so that
    an event problem added later is published without the main run again."""
    return [n for n in problems if spec.load(n).events]


def run_key(name: str, runs: dict[str, list[str]]) -> str:
    """The run ``--only NAME`` means: a run's name (``top PROBLEM``: a ladder's top rungs),
    or a ladder's problem."""
    key = name if name in runs else f"ladder {name}"
    if key not in runs:
        choices = ", ".join(k.removeprefix("ladder ") for k in runs)
        raise SystemExit(f"publish_results: no published run is called {name!r}; choose from "
                         f"{choices}")
    return key


def files_of(key: str, files: dict[str, list[str]]) -> list[Path]:
    """The files run ``key`` wrote last time; for a ladder published before ``files.json``
    existed, its problem's files (``NAME-YYYYMMDD-…``; the sweep's start ``run-`` or
    ``stiff-robertson-2``, which a ladder's pattern never matches)."""
    if key in files:
        return [RAW / f for f in files[key]]
    if key.startswith("ladder "):
        pattern = re.compile(re.escape(key.removeprefix("ladder ")) + r"-\d{8}-")
        return [p for p in RAW.glob("*.h5") if pattern.match(p.name)]
    return []


#: what only draws figures from a file's records: the report is remade from the files with
#: HEAD's code at every publication, so a change here (a figure's axis label) leaves every
#: published file as it was
DRAWING_ONLY = ("sciml_bench/results/plots.py",)


def code_changed(commit: str) -> bool | None:
    """Whether ``sciml_bench/``, less :data:`DRAWING_ONLY`, differs between ``commit`` and
    HEAD; None when git cannot tell (no git, or a commit this repository does not have)."""
    drawing = [f":(exclude){p}" for p in DRAWING_ONLY]
    try:
        r = subprocess.run(["git", "-C", str(ROOT), "diff", "--quiet", commit, "HEAD", "--",
                            "sciml_bench", *drawing], capture_output=True, check=False)  # fmt: skip
    except OSError:
        return None
    return {0: False, 1: True}.get(r.returncode)


def kept_files(report_only: bool, only: list[str]) -> list[Path]:
    """The published files this invocation keeps rather than makes: every one for
    ``--report-only``, those of the runs not named for ``--only``, and the GPU machine's."""
    gpu = sorted(GPU.rglob("*.h5"))
    if report_only:
        return sorted(RAW.glob("*.h5")) + gpu
    if not only:
        return gpu
    files = json.loads(FILES.read_text()) if FILES.exists() else {}
    replaced = {p.name for key in only for p in files_of(key, files)}
    return [p for p in sorted(RAW.glob("*.h5")) if p.name not in replaced] + gpu


def check_fresh(paths: list[Path], allow_stale: bool) -> None:
    """Refuse (exit status 2) to publish a results file older than the code it would be
    published with (:func:`sciml_bench.results.rejudge.stale_reasons`), one line per file
    with the fix; ``allow_stale`` publishes them anyway, saying so."""
    from sciml_bench.problem.reference import REFERENCE_VERSION
    from sciml_bench.results import rejudge, store

    files = json.loads(FILES.read_text()) if FILES.exists() else {}
    runs = {name: key.removeprefix("ladder ") for key, names in files.items() for name in names}
    stale = []
    for path in paths:
        run = store.read(path)
        why = rejudge.stale_reasons(run.records, run.environment, REFERENCE_VERSION, code_changed)
        if why:
            again = (f"--only {shlex.quote(runs[path.name])}" if path.name in runs
                     else "benchmarks/gpu_checks.py on the GPU machine" if GPU in path.parents
                     else "its sciml-bench run")  # fmt: skip
            stale.append(f"{path} is older than the code it would be published with "
                         f"({'; '.join(why)}); fix: run it again ({again})")  # fmt: skip
    for line in stale:
        print(f"publish_results: {'published anyway (--allow-stale): ' if allow_stale else ''}"
              f"{line}{'' if allow_stale else ', or pass --allow-stale to publish it as it is'}",
              file=sys.stderr)  # fmt: skip
    if stale and not allow_stale:
        sys.exit(2)


def run_all(runs: dict[str, list[str]], only: list[str]) -> dict[str, float]:
    """The runs named (all of them when ``only`` is empty) into ``results/published/``,
    replacing their earlier files; seconds per run, kept for the others."""
    if not only:
        shutil.rmtree(RAW, ignore_errors=True)
    RAW.mkdir(parents=True, exist_ok=True)
    t = json.loads(TIMINGS.read_text()) if only and TIMINGS.exists() else {}
    files = json.loads(FILES.read_text()) if only and FILES.exists() else {}
    for key in only or list(runs):
        before = set(RAW.glob("*.h5"))
        with tempfile.TemporaryDirectory(prefix="amici-cache-") as cache:
            t[key] = sh("run", *runs[key], "--out", str(RAW), env=run_env(key, Path(cache)))
        # only now, the run complete: one that fails or is interrupted keeps the old files
        new = set(RAW.glob("*.h5")) - before
        for old in set(files_of(key, files)) - new:
            old.unlink(missing_ok=True)
        files[key] = sorted(p.name for p in new)
        TIMINGS.write_text(json.dumps(t, indent=1) + "\n")
        FILES.write_text(json.dumps(files, indent=1) + "\n")
    return t


def ladder_lines(ladders: list[str]) -> str:
    return "".join(f"sciml-bench run {n} {shlex.join(args)} --out results/published\n"
                   for n in ladders
                   for args in (LADDERS[n], TOP_RUNGS.get(n)) if args)  # fmt: skip


def ladder_times(t: dict[str, float]) -> str:
    """`` the size ladder of NAME x min,`` per ladder timed (none in older timings), and
    `` its top rungs again y min,`` where they ran again."""
    return "".join(f" the size ladder of {k.split(' ', 1)[1]} {v / 60:.1f} min,"
                   + (f" its top rungs again {t[top] / 60:.1f} min," if top in t else "")
                   for k, v in t.items() if k.startswith("ladder ")
                   for top in [f"top {k.split(' ', 1)[1]}"])  # fmt: skip


def event_time(t: dict[str, float]) -> str:
    """`` the problems with events x min,`` where that run was timed (not in older timings)."""
    return f" the problems with events {t['events'] / 60:.1f} min," if "events" in t else ""


def gradient_sweep_lines() -> str:
    return "".join(f"sciml-bench run {n} {shlex.join(args)} --out results/published\n"
                   for n, args in GRADIENT_SWEEPS.items())  # fmt: skip


def gradient_sweep_times(t: dict[str, float]) -> str:
    """`` the gradient tolerance ladder of NAME x min,`` per such run timed."""
    return "".join(f" the gradient tolerance ladder of {k.removeprefix('gradient sweep ')} "
                   f"{v / 60:.1f} min," for k, v in t.items() if k.startswith("gradient sweep "))


def model_lines(t: dict[str, float]) -> str:
    """The real models' runs published (timed in ``t``), each file under
    ``$SCIML_BENCH_MODELS`` (docs/real-models.md)."""
    return "".join(f'sciml-bench run --sbml "{model_file(n)}" {shlex.join(MODELS[n])} '
                   "--out results/published\n" for n in MODELS if f"model {n}" in t)  # fmt: skip


def model_times(t: dict[str, float]) -> str:
    """`` The real SBML models (docs/real-models.md; the files from a clone of ...): A x
    min, ...`` for the models timed (none in older timings)."""
    timed = [(k.removeprefix("model "), v) for k, v in t.items() if k.startswith("model ")]
    if not timed:
        return ""
    each = ", ".join(f"{n} {v / 60:.1f} min" for n, v in timed)
    return (f"\nThe real SBML models (`$SCIML_BENCH_MODELS`: a clone of {MODELS_URL} at "
            f"{MODELS_COMMIT[:12]}, docs/real-models.md) took: {each}.")


def gpu_note(files: list[Path]) -> str:
    """Where the GPU machine's files are and what they were measured on."""
    if not files:
        return ""
    from sciml_bench.results import store

    machines = sorted({
        f"{', '.join(g.get('name', '?') for g in run.environment.get('gpus') or []) or 'no GPU'}"
        f" with {run.environment.get('cpu_model', '?')} x{run.environment.get('cpu_count', '?')}"
        for run in map(store.read, files)
    })  # fmt: skip
    return (
        f"\nThe {len(files)} results file(s) in `results/published-gpu/` were measured on the "
        f"GPU machine lent to this project ({'; '.join(machines)}) by "
        "`benchmarks/gpu_checks.py` and are reported beside this machine's: each problem's "
        "table is split by the machine its rows ran on, and the Runs section names each "
        "file's environment.\n"
    )


def main(argv: list[str] | None = None) -> None:
    global RESULTS, RAW, GPU, TIMINGS, FILES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report-only", action="store_true",
                    help="regenerate the report from the files already there; run nothing")
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help="run only NAME again (repeatable): run, events, ensembles, sweep, cnn, a "
                    "ladder's problem, 'top PROBLEM' (a ladder's top rungs run again), 'gradient sweep "
                    "PROBLEM' or 'model NAME'; every other "
                    "published file is kept")
    ap.add_argument("--out", type=Path, default=RESULTS,
                    help="where README.md and the report go, with published/ and "
                    "published-gpu/ inside unless given (a smoke test: a temporary folder)")
    ap.add_argument("--allow-stale", action="store_true",
                    help="publish results files older than the code (an older reference "
                    "version, or sciml_bench/ changed since their run's commit), saying so; "
                    "by default they are refused")
    a = ap.parse_args(argv)
    if a.out.resolve() != RESULTS.resolve():
        RESULTS, RAW, GPU = a.out.resolve(), a.out.resolve() / "published", a.out.resolve() / "published-gpu"
        TIMINGS, FILES = RAW / "timings.json", RAW / "files.json"
    problems, ensembles, ladders = shipped_groups()
    runs = planned_runs(problems, ensembles, ladders, os.environ.get(MODELS_VAR) or None)
    only = [run_key(n, runs) for n in a.only]
    if not a.report_only:
        check_models(only or list(runs))
    check_fresh(kept_files(a.report_only, only), a.allow_stale)
    # only now: a refused publish (stale files) leaves the published figures as they were
    shutil.rmtree(RESULTS / "figures", ignore_errors=True)
    t = json.loads(TIMINGS.read_text()) if a.report_only else run_all(runs, only)
    gpu_files = sorted(GPU.rglob("*.h5"))
    files = sorted(str(p) for p in [*RAW.glob("*.h5"), *gpu_files])
    sh("report", *files, "--out", str(RESULTS))
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
sciml-bench run {' '.join(runs["run"])} --out results/published
sciml-bench run {' '.join(runs["events"])} --out results/published
{ladder_lines(ladders)}sciml-bench run {' '.join(ensembles)} --sizes {ENSEMBLE_SIZES} --out results/published
sciml-bench run stiff-robertson --tolerances {SWEEP} --out results/published
{gradient_sweep_lines()}sciml-bench run cnn --quick --target-accuracy {CNN_TARGET} --eval-every 10 --out results/published
{model_lines(t)}sciml-bench report results/published/*.h5{" $(find results/published-gpu -name '*.h5')" if gpu_files else ""} --out results
```

The default run of every single-trajectory problem took {t["run"] / 60:.1f} min,{event_time(t)}{ladder_times(t)} the ensembles
{t["ensembles"] / 60:.1f} min, the ROBER work-precision sweep
{t["sweep"] / 60:.1f} min,{gradient_sweep_times(t)} and the CNN quick baseline {t["cnn"] / 60:.1f} min.{model_times(t)}
The raw HDF5 files are in `results/published/`; `report.html` is the same report as one
self-contained page.
{gpu_note(gpu_files)}
"""
    (RESULTS / "README.md").write_text(header + report)
    print(f"wrote {RESULTS / 'README.md'}", file=sys.stderr)
    # the fairness page reads this machine's rows (GPU rows are another machine's threads)
    page = ROOT / "docs" / "fairness.md" if RESULTS == ROOT / "results" else RESULTS / "fairness.md"
    sh("fairness", *sorted(str(p) for p in RAW.glob("*.h5")), "-o", str(page))


if __name__ == "__main__":
    main()
