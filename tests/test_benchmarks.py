"""Every script in ``benchmarks/`` runs, at a tiny size, as its docstring says.

The figures themselves are measured on a quiet machine (benchmarks/README.md); here each
script runs end to end on the smallest problem and sizes it accepts, and its printed
lines are checked for the figure they promise. A script that needs a GPU is checked for
its refusal where there is none. ``test_every_script_has_a_smoke_test`` keeps the list
complete: a new script without a smoke test fails it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sciml_bench.measure.memory import gpu_count

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
DATA = ROOT / "tests" / "data"
DECAY = str(DATA / "decay.toml")
NO_GPU = gpu_count() == 0

#: each script in benchmarks/ -> the test below that runs it (the bare twins run inside
#: the scripts that compare against them)
COVERED = {
    "gradient_memory.py": "test_gradient_memory_prints_each_methods_growth",
    "ensemble_overhead.py": "test_ensemble_overhead_spread_and_its_ladder_run",
    "harness_overhead.py": "test_harness_overhead_against_the_bare_twin",
    "_bare_torchdiffeq.py": "test_harness_overhead_against_the_bare_twin",
    "_bare_pin.py": "test_process_split_prints_each_variants_modes",
    "_bare_diffrax.py": "test_bare_twins_run_on_their_config",
    "_bare_ensemble_diffrax.py": "test_bare_twins_run_on_their_config",
    "_bare_ensemble_torchdiffeq.py": "test_bare_twins_run_on_their_config",
    "run_length.py": "test_run_length_cold_then_warm_cache",
    "spiral_ratio.py": "test_spiral_ratio",
    "dask_speedup.py": "test_dask_speedup_rows_identical",
    "best_config.py": "test_best_config_scipy_rows",
    "cnn_ratios.py": "test_cnn_ratios_quick",
    "reliability.py": "test_reliability_one_guarantee",
    "publish_results.py": "test_publish_results_report_only_elsewhere",
    "readme_tables.py": "test_readme_tables_print_the_published_ladder",
    "gpu_checks.py": "test_gpu_scripts_refuse_without_a_gpu",
    "cnn_gpu_matrix.py": "test_gpu_scripts_refuse_without_a_gpu",
    "gpu_session.sh": "test_gpu_scripts_refuse_without_a_gpu",
    "compare_false_alarms.py": "test_false_alarm_benchmark_runs_and_the_slowed_run_says_so",
    "steady_ab.py": "test_steady_ab_three_loops",
    "training.py": "test_training_ratios_quick",
    "_bare_train_torchdiffeq.py": "test_training_ratios_quick",
    "_bare_train_diffrax.py": "test_training_ratios_quick",
    "_bare_cvodes.py": "test_harness_overhead_compiled_backends",
    "_bare_diffsol.py": "test_harness_overhead_compiled_backends",
    "diffsol_bare_ladder.py": "test_diffsol_bare_ladder_tiny",
    "_bare_diffsol_groups.py": "test_diffsol_bare_ladder_tiny",
    "scaling.py": "test_scaling_exponents_and_dense_over_sparse",
    "sbml_conformance.py": "test_sbml_conformance_on_cases_written_here",
    "noise_floor.py": "test_noise_floor_identical_rows_and_their_false_winners",
    "process_split.py": "test_process_split_prints_each_variants_modes",
    "cvodes_proxy.py": "test_cvodes_proxy_pairs_casadi_and_amici_rows",
    "blas_threads.py": "test_blas_threads_prints_both_sides",
}


def _need(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (not installed)")


def bench(name: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``benchmarks/NAME`` as its docstring does, from the repository root."""
    cmd = ["bash"] if name.endswith(".sh") else [sys.executable]
    r = subprocess.run([*cmd, str(BENCH / name), *args], capture_output=True, text=True,
                       timeout=timeout, cwd=ROOT)  # fmt: skip
    return r


def _ok(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 0, (r.returncode, r.stdout[-2000:], r.stderr[-3000:])
    return r.stdout


def bench_module(name: str) -> ModuleType:
    """A script of benchmarks/ imported as a module (its own imports resolve there)."""
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


def test_every_script_has_a_smoke_test() -> None:
    scripts = {p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh")}
    assert scripts == set(COVERED), "give each script in benchmarks/ a smoke test here"
    assert set(COVERED.values()) <= set(globals()), "COVERED names a test that is not here"


@pytest.mark.slow
def test_gradient_memory_prints_each_methods_growth() -> None:
    _need("torch", "torchdiffeq")
    out = _ok(bench("gradient_memory.py", "--scales", "1,2", "--methods", "torchdiffeq:backprop"))
    (line,) = [ln for ln in out.splitlines() if ln.startswith("torchdiffeq backprop")]
    m = re.search(r"([\d.]+)[~ ]\s+([\d.]+)[~ ]\s+([\d.]+)x\s+steps (\d+)/(\d+)", line)
    assert m, line
    x1, x2, growth, s1, s2 = (float(g) for g in m.groups())
    # the cells are printed to 0.1 MiB and the growth from the unrounded values: it must
    # lie between the extreme ratios the rounded cells allow (and its own rounding)
    assert x1 > 0 and x2 > 0
    assert (x2 - 0.05) / (x1 + 0.05) - 0.005 <= growth <= (x2 + 0.05) / (x1 - 0.05) + 0.005
    assert s2 > s1  # twice the horizon takes more steps


@pytest.mark.slow
def test_ensemble_overhead_spread_and_its_ladder_run(tmp_path: Path) -> None:
    # the spread from a results file: the figure line, slowest over fastest
    out = _ok(bench("ensemble_overhead.py", "--skip-overhead", "--results",
                    str(DATA / "results-ensemble-lorenz.h5")))  # fmt: skip
    m = re.search(r"ensemble-lorenz: at n=16 on cpu, slowest (\S+) .* = ([\d.]+)x", out)
    assert m and m.group(1).startswith("torchdiffeq/coupled") and float(m.group(2)) > 1, out
    # the ladder it runs itself (an ensemble run, `run`'s default processes a rung)
    tiny = tmp_path / "ens-decay.toml"
    tiny.write_text(Path(DECAY).read_text().replace('name = "decay"', 'name = "ens-decay"')
                    + '\n[ensemble]\nsizes = [1, 2]\nsample = 2\n'
                    '[ensemble.vary]\nk = { uniform = [0.8, 1.2], apply = "scale" }\n')  # fmt: skip
    out = _ok(bench("ensemble_overhead.py", "--skip-overhead", "--ladder", "1,2", "--repeats",
                    "1", "--problems", str(tiny), "--backends", "scipy"))  # fmt: skip
    assert out.strip() == "ens-decay: no size where every row completed"  # SciPy: no gradient


@pytest.mark.slow
def test_harness_overhead_against_the_bare_twin() -> None:
    _need("torch", "torchdiffeq")
    # the spiral: its reference is cheap and shared with other tests (LV's costs ~15 s)
    out = _ok(bench("harness_overhead.py", "--rounds", "1", "--repeats", "2", "--problems",
                    "nonstiff-spiral-node", "--backends", "torchdiffeq"))  # fmt: skip
    rows = re.findall(r"torchdiffeq +nonstiff-spiral-node +(solve|grad) .*= ([\d.]+)", out)
    assert sorted(k for k, _ in rows) == ["grad", "solve"] and all(float(x) > 0 for _, x in rows)
    assert re.search(r"^worst overhead = [\d.]+  95% CI \[[\d.]+, [\d.]+\]  \(torchdiffeq ",
                     out, re.M), out


@pytest.mark.slow
def test_bare_twins_run_on_their_config(tmp_path: Path) -> None:
    """The bare scripts the overhead figures divide by, on the configs their parents
    write (two repeats each): one JSON line of raw solve and grad samples."""
    _need("jax", "diffrax", "torch", "torchdiffeq")
    import json

    from sciml_bench.problem import spec

    ensemble_overhead = bench_module("ensemble_overhead")
    harness_overhead = bench_module("harness_overhead")
    spiral = harness_overhead.bare_config(spec.load("nonstiff-spiral-node"), "spiral",
                                          "diffrax", tmp_path)  # fmt: skip
    ens = ensemble_overhead.bare_config(2, "Tsit5", tmp_path)
    ens_torch = ensemble_overhead.bare_config(2, "dopri5", tmp_path)
    for script, args in (("_bare_diffrax.py", [spiral, "2"]),
                         ("_bare_ensemble_diffrax.py", [ens, "coupled", "2"]),
                         ("_bare_ensemble_torchdiffeq.py", [ens_torch, "cpu", "2"])):  # fmt: skip
        env = {**os.environ, "JAX_PLATFORMS": "cpu"}
        r = subprocess.run([sys.executable, str(BENCH / script), *map(str, args)],
                           capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
        got = json.loads(_ok(r).strip().splitlines()[-1])
        assert len(got["solve"]) == len(got["grad"]) == 2 and min(got["grad"]) > 0, script


def test_blas_threads_prints_both_sides() -> None:
    """One size and the smallest reference (the one-state decay's)."""
    out = _ok(bench("blas_threads.py", "--sizes", "32", "--problem", DECAY))
    row = next(ln.split() for ln in out.splitlines() if ln.strip().startswith("32 "))
    assert all(float(x) > 0 for x in row[1:] if x != "/"), row
    m = re.search(r"decay \(1 state\): reference build on one BLAS "
                  r"thread ([\d.]+) s wall, ([\d.]+) s CPU; on the default ([\d.]+) s wall", out)
    assert m and all(float(g) > 0 for g in m.groups()), out


@pytest.mark.slow
def test_run_length_cold_then_warm_cache() -> None:
    out = _ok(bench("run_length.py", "--problem", DECAY, "-b", "scipy"))
    cold, warm = (ln for ln in out.splitlines() if "reference cache" in ln)
    assert cold.startswith("decay: cold reference cache:") and "0/1 references read" in cold
    assert warm.startswith("decay: warm reference cache:") and "1/1 references read" in warm
    assert "statuses: decay/scipy=ok" in out


@pytest.mark.slow
def test_spiral_ratio() -> None:
    _need("torch", "torchdiffeq", "jax", "diffrax")
    out = _ok(bench("spiral_ratio.py", "--tolerances", "1e-5", "--repeats", "2"))
    m = re.search(r"spiral rtol=1e-05: torchdiffeq .* = ([\d.]+)x \(steady loss\+grad", out)
    assert m and float(m.group(1)) > 0, out


@pytest.mark.slow
def test_dask_speedup_rows_identical() -> None:
    _need("dask", "distributed")
    out = _ok(bench("dask_speedup.py", DECAY, "--tolerances", "1e-5", "--quick",
                    "--workers", "1"))  # fmt: skip
    assert re.search(r"1 case\(s\) \(scipy\).* = [\d.]+x speed-up \(rows identical", out), out


@pytest.mark.slow
def test_best_config_scipy_rows() -> None:
    out = _ok(bench("best_config.py", "--problem", DECAY, "--solvers", "", "--repeats", "1"))
    solvers = [ln.split()[1] for ln in out.splitlines() if ln.startswith("scipy ")]
    assert solvers == ["LSODA", "BDF", "Radau"], out


@pytest.mark.slow
def test_cnn_ratios_quick() -> None:
    _need("torch")
    out = _ok(bench("cnn_ratios.py", "--quick", "--device", "cpu", "--variants", "torch-eager",
                    "--set", "steps_per_epoch=2", "--set", "epochs=1", "--set",
                    "inference_calls=0", "--threads", "1"))  # fmt: skip
    (row,) = [ln for ln in out.splitlines() if ln.startswith("torch-eager")]
    assert row.split()[1] == "ok" and "1.00" in row.split(), out


@pytest.mark.slow
def test_reliability_one_guarantee() -> None:
    out = _ok(bench("reliability.py", "caches", "--writes", "20"))
    assert "records lost 0" in out and "reliability: 1/1 guarantees held" in out


@pytest.mark.slow
def test_publish_results_report_only_elsewhere(tmp_path: Path) -> None:
    """The README of a results folder, from its files, written where asked (never into
    the repository's results/)."""
    _need("matplotlib")
    raw = tmp_path / "published"
    raw.mkdir()
    shutil.copy(DATA / "results-v1-stiff-robertson.h5", raw / "run.h5")
    (raw / "timings.json").write_text('{"run": 60, "events": 30, "ensembles": 60, "sweep": 60, '
                                      '"cnn": 60, "ladder stiff-brusselator-2d": 120, '
                                      '"top stiff-brusselator-2d": 30}')
    before = (ROOT / "results" / "README.md").stat().st_mtime
    # the v1 file is older than the code (no reference version, another commit): allowed
    _ok(bench("publish_results.py", "--report-only", "--allow-stale", "--out", str(tmp_path)))
    text = (tmp_path / "README.md").read_text()
    assert text.startswith("# Published results") and "## stiff-robertson" in text
    assert "**Verdict**" in text and "diffrax Kvaerno4 RecursiveCheckpointAdjoint" in text
    assert "the size ladder of stiff-brusselator-2d 2.0 min, its top rungs again 0.5 min," in text
    assert ("sciml-bench run stiff-brusselator-2d --sizes 32,64,128 -b diffsol,cvodes --jacobian "
            "sparse --budget 900 --out results/published") in text
    # the problems with events: their own run, out of the main one
    assert "the problems with events 0.5 min," in text
    assert "sciml-bench run nonstiff-bouncing-ball nonstiff-pk-dosing --out results" in text
    main = next(ln for ln in text.splitlines() if "stiff-robertson stiff-robertson-ude" in ln)
    assert "pk-dosing" not in main
    assert (ROOT / "results" / "README.md").stat().st_mtime == before


def test_publish_results_a_missing_model_stops_before_anything_runs(tmp_path: Path) -> None:
    """A real model's run (``model NAME``) without its SBML file stops at once (exit 2),
    saying how to fetch the collection; nothing is written or deleted. The README's
    header names each model's command with its file under ``$SCIML_BENCH_MODELS``."""
    raw = tmp_path / "published"
    raw.mkdir()
    (raw / "kept.h5").write_bytes(b"")
    env = {k: v for k, v in os.environ.items() if k != "SCIML_BENCH_MODELS"}
    for extra in ({}, {"SCIML_BENCH_MODELS": str(tmp_path / "no-clone")}):
        r = subprocess.run([sys.executable, str(BENCH / "publish_results.py"), "--only",
                            "model Boehm_JProteomeRes2014", "--out", str(tmp_path)],
                           capture_output=True, text=True, timeout=120, cwd=ROOT,
                           env={**env, **extra})  # fmt: skip
        assert r.returncode == 2, r.stderr[-2000:]
        (line,) = r.stderr.strip().splitlines()
        assert "git clone https://github.com/Benchmarking-Initiative/Benchmark-Models-PEtab" in line
        assert ("is not set" if not extra else "no-clone/Benchmark-Models/Boehm_JProteomeRes2014/"
                "model_Boehm_JProteomeRes2014.xml does not exist") in line
    assert [p.name for p in raw.iterdir()] == ["kept.h5"]
    publish_results = bench_module("publish_results")
    assert ('sciml-bench run --sbml "$SCIML_BENCH_MODELS/Benchmark-Models/Boehm_JProteomeRes2014/'
            'model_Boehm_JProteomeRes2014.xml" --t-end 240 --gradient all') in publish_results.model_lines(
        {"model Boehm_JProteomeRes2014": 60.0})
    assert publish_results.model_lines({}) == ""


def test_publish_results_every_run_it_names_is_one_run_accepts() -> None:
    """Each published run's arguments (but the models', which need their files) as
    ``sciml-bench run`` parses and plans them: an option ``run`` refuses (a ladder's
    ``--cold``, once) would stop a publication after it began, not here."""
    from sciml_bench.cli.run import run as run_command
    from sciml_bench.cli.run_plan import RunOptions, plan_run

    publish_results = bench_module("publish_results")
    runs = publish_results.planned_runs(*publish_results.shipped_groups())
    assert {f"ladder {n}" for n in publish_results.LADDERS} <= set(runs)
    for key, args in runs.items():
        if key.startswith("model "):
            continue
        params = dict(run_command.make_context("run", list(args)).params)
        params.pop("interleave"), params.pop("seed")
        plan_run(RunOptions.from_click(params))  # a refused option raises UserError


def test_publish_results_a_change_to_drawing_code_alone_leaves_files_fresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A figure's label changed leaves every published file as it was; any other change
    under ``sciml_bench/`` (a worker's, a runner's) makes the files older than the code."""
    publish_results = bench_module("publish_results")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    drawing, measuring = (tmp_path / p for p in (publish_results.DRAWING_ONLY[0],
                                                  "sciml_bench/run/ode.py"))  # fmt: skip
    for f in (drawing, measuring):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("x = 1\n")
    subprocess.run([*git, "init", "-q"], check=True)

    def commit() -> str:
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", "c"], check=True)
        return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True,
                              text=True).stdout.strip()  # fmt: skip

    first = commit()
    monkeypatch.setattr(publish_results, "ROOT", tmp_path)
    drawing.write_text("x = 2\n")
    commit()
    assert publish_results.code_changed(first) is False
    measuring.write_text("x = 2\n")
    commit()
    assert publish_results.code_changed(first) is True
    assert publish_results.code_changed("0" * 40) is None  # a commit git does not have


@pytest.mark.skipif(not NO_GPU, reason="an NVIDIA GPU is visible: these scripts would run")
@pytest.mark.parametrize(("script", "args"), [
    ("gpu_checks.py", ["--steps", "ode"]),
    ("cnn_gpu_matrix.py", ["--quick"]),
    ("gpu_session.sh", ["--steps", "ode"]),
])  # fmt: skip
def test_gpu_scripts_refuse_without_a_gpu(script: str, args: list[str]) -> None:
    r = bench(script, *args, timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    (line,) = r.stderr.strip().splitlines()
    assert "no NVIDIA GPU" in line and "Traceback" not in r.stderr


@pytest.mark.slow
def test_false_alarm_benchmark_runs_and_the_slowed_run_says_so(tmp_path: Path) -> None:
    """benchmarks/compare_false_alarms.py at a tiny size: two identical SciPy runs and
    one deliberately slowed; its figures printed, and every slowed row marked."""
    from sciml_bench.results.store import read

    r = bench("compare_false_alarms.py", "--runs", "2", "--slowed-runs", "2", "-b", "scipy",
              "--repeats", "5", "--cold", "1", "--out", str(tmp_path))  # fmt: skip
    assert r.returncode in (0, 1), r.stderr[-2000:]  # 1: a timing off target on a busy machine
    assert "false alarms at compare's defaults" in r.stdout
    assert "noise floor measured" in r.stdout and "deliberate 1.3x slowdown" in r.stdout
    assert "1.3x is below it by design" in r.stdout
    assert re.search(r"runs as the unit, 2 identical vs 2 slowed: caught solve \d/1", r.stdout)
    slowed = sorted((tmp_path / "slowed").glob("*.h5"))
    assert len(slowed) == 2
    # the slowed runs interleaved with the identical ones, not after them (the drift)
    every = sorted(tmp_path.glob("*/*.h5"), key=lambda p: p.stat().st_mtime)
    assert [p.parent.name for p in every] == ["identical", "slowed", "identical", "slowed"]
    for path in slowed:
        run = read(path)
        assert run.environment["test_slowdown"] == "1.3"
        assert [rec["test_slowdown"] for rec in run.records] == ["1.3"]
    for ident in (tmp_path / "identical").glob("*.h5"):
        assert all("test_slowdown" not in rec for rec in read(ident).records)


@pytest.mark.slow
def test_harness_overhead_compiled_backends() -> None:
    """CVODES and diffsol against their bare twins (``_bare_cvodes.py``, ``_bare_diffsol.py``)."""
    _need("casadi", "pydiffsol")
    out = _ok(bench("harness_overhead.py", "--rounds", "1", "--repeats", "2", "--problems",
                    "stiff-robertson", "--backends", "cvodes,diffsol"))  # fmt: skip
    rows = re.findall(r"^(cvodes|diffsol) +stiff-robertson +(solve|grad) .*= ([\d.]+)", out, re.M)
    assert sorted((b, k) for b, k, _ in rows) == [
        ("cvodes", "grad"), ("cvodes", "solve"), ("diffsol", "grad"), ("diffsol", "solve")
    ], out
    assert all(float(x) > 0 for *_, x in rows)


@pytest.mark.slow
def test_diffsol_bare_ladder_tiny() -> None:
    """The suite's diffsol rung at 2 groups against ``_bare_diffsol_groups.py`` (hand-written
    and generated DiffSL): the twin passes the same-work check, and every row has a figure
    inside its interval."""
    _need("pydiffsol")
    out = _ok(bench("diffsol_bare_ladder.py", "--sizes", "2", "--rounds", "1", "--repeats", "2"))
    rows = re.findall(r"^diffsol stiff-robertson-groups n=2 +(solve|grad) .*= ([\d.]+)  95% CI "
                      r"\[([\d.]+), ([\d.]+)\]", out, re.M)  # fmt: skip
    assert sorted(k for k, *_ in rows) == ["grad", "solve"], out
    assert all(float(lo) <= float(r) <= float(hi) for _, r, lo, hi in rows), out
    assert re.search(r"^worst suite/hand = [\d.]+  95% CI", out, re.M), out
    # --in-process: the worker's own case and both twins in one process, CPU and wall
    out = _ok(bench("diffsol_bare_ladder.py", "--sizes", "2", "--rounds", "1", "--in-process", "2"))
    for kind in ("solve", "grad"):
        m = re.search(rf"^in-process n=2 +{kind} +cpu suite/hand ([\d.]+) .* wall suite/gen ([\d.]+)",
                      out, re.M)  # fmt: skip
        assert m and float(m[1]) > 0 and float(m[2]) > 0, out


def test_ratio_ci_holds_the_ratio_and_widens_with_process_spread() -> None:
    """The hierarchical bootstrap: the point is the ratio of pooled medians; rounds that
    disagree (process-to-process spread) give a wider interval than rounds that agree."""
    ratio_ci = bench_module("harness_overhead").ratio_ci
    bare = [[1.0, 1.01, 0.99, 1.0]] * 4
    agree = [[1.2, 1.21, 1.19, 1.2]] * 4
    r, lo, hi = ratio_ci(agree, bare)
    assert r == pytest.approx(1.2) and lo <= r <= hi and hi - lo < 0.05
    spread = [[1.0, 1.01, 0.99, 1.0], [1.4, 1.41, 1.39, 1.4]] * 2
    r2, lo2, hi2 = ratio_ci(spread, bare)
    assert lo2 <= 1.01 and hi2 >= 1.39 and hi2 - lo2 > 0.3


def test_process_ratio_ci_is_over_per_process_medians() -> None:
    """The harness figure: geometric means of each side's per-process medians, so a slow
    suite process counts as one process, not as its share of the pooled samples."""
    process_ratio_ci = bench_module("harness_overhead").process_ratio_ci
    bare = [[1.0, 1.01, 0.99]] * 3
    suite = [[1.0, 1.01, 0.99], [1.0, 1.0, 1.0], [4.0, 4.1, 3.9]]  # one process 4x
    r, lo, hi = process_ratio_ci(suite, bare)
    assert r == pytest.approx(4.0 ** (1 / 3), rel=1e-6) and lo <= r <= hi
    assert lo < 1.05 and hi > 2.0  # the interval holds the process spread


def test_the_smallest_floor_lets_at_most_five_percent_through() -> None:
    """20 identical pairs: one false winner is allowed (5 %), so the floor lies just above
    the second largest folded ratio (0.5 folds to 2.0, the largest)."""
    mod = bench_module("noise_floor")
    interval, smallest_floor = mod.interval, mod.smallest_floor
    floor, through = smallest_floor([1.0, 1.1, 1.2, 0.5] + [1.01] * 16)
    assert floor == pytest.approx(1.2) and floor > 1.2 and through == 1
    lo, hi = interval(1, 20)  # Clopper-Pearson, 95 %
    assert lo == pytest.approx(0.00127, abs=1e-5) and hi == pytest.approx(0.2487, abs=1e-4)


@pytest.mark.slow
def test_steady_ab_three_loops() -> None:
    _need("jax", "diffrax")
    out = _ok(bench("steady_ab.py", "--rounds", "1", "--block", "2", "--problems",
                    "nonstiff-spiral-node"))  # fmt: skip
    for kind in ("solve", "grad"):
        m = re.search(rf"nonstiff-spiral-node +{kind} +old .* new/bare ([\d.]+) +old/bare ([\d.]+)",
                      out)  # fmt: skip
        assert m and float(m[1]) > 0 and float(m[2]) > 0, out
    assert re.search(r"^worst new/bare = [\d.]+$", out, re.M), out


@pytest.mark.slow
def test_training_ratios_quick() -> None:
    """Five iterations: the target table's row (Diffrax's alone: ``--backends``) says it did
    not reach the target, and the suite's iteration is held to the bare loops' (same
    losses)."""
    _need("torch", "torchdiffeq", "jax", "diffrax", "optax")
    out = _ok(bench("training.py", "--quick", "--rounds", "1", "--problems",
                    "nonstiff-spiral-node", "--backends", "diffrax"))  # fmt: skip
    assert not re.search(r"^  (torchdiffeq|torchode) ", out, re.M), out
    assert re.search(r"^  diffrax +Tsit5 +ok: not reached in 5 iterations", out, re.M), out
    for lib in ("diffrax", "torchdiffeq"):
        m = re.search(rf"^overhead {lib} +spiral .* losses agree to ([\d.e+-]+)\)", out, re.M)
        assert m and float(m[1]) < 1e-8, out


@pytest.mark.slow
def test_scaling_exponents_and_dense_over_sparse() -> None:
    """ROBER groups at 1 and 2 on SciPy's sparse BDF (two workers): the run's line, the
    exponent, and no stop (dense ÷ sparse is checked in test_sized_run, in process)."""
    out = _ok(bench("scaling.py", "stiff-robertson-groups", "--sizes", "1,2", "-b", "scipy",
                    "--jacobian", "sparse", "--quick"))  # fmt: skip
    assert "sciml-bench run stiff-robertson-groups --sizes 1,2 -bscipy --quick" in out, out
    assert re.search(r"scipy BDF sparse: solve p = -?[\d.]+ \(3→6 states\)", out), out
    assert out.rstrip().endswith("where each line stopped:\n  (none)"), out


COVERED["store_growth.py"] = "test_store_growth_small_sweep"


@pytest.mark.slow
def test_store_growth_small_sweep() -> None:
    """200 cases: the figure lines, and an exit status that agrees with the ratio printed
    (the goal itself is measured on a quiet machine: a shared disk's fsyncs are noisy)."""
    r = bench("store_growth.py", "--cases", "200", timeout=300)
    assert r.returncode in (0, 1), (r.returncode, r.stderr[-3000:])
    assert "200 cases" in r.stdout, r.stdout
    assert re.search(r"^mean add, first 100: [\d.]+ ms; last 100: [\d.]+ ms$", r.stdout, re.M)
    assert re.search(r"^CPU time last/first: [\d.]+$", r.stdout, re.M), r.stdout
    m = re.search(r"^last/first: ([\d.]+) \(goal <= 1.5\); total [\d.]+ s$", r.stdout, re.M)
    assert m, r.stdout
    assert (r.returncode == 1) == (float(m[1]) > 1.5) == ("FAIL" in r.stdout), r.stdout


def test_readme_tables_print_the_published_ladder() -> None:
    """The README's gradients-at-scale table comes from the published rates file: one line
    per rung, every column's cell, the crossovers as intervals; and the README holds what
    the script prints, so nobody retypes it."""
    r = subprocess.run([sys.executable, "benchmarks/readme_tables.py"], capture_output=True,
                       text=True, timeout=120, cwd=ROOT)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    blocks = re.findall(r"^(<!-- readme_tables:(\w+) -->\n.*?\n<!-- /readme_tables:\2 -->)$",
                        r.stdout, re.M | re.S)  # fmt: skip
    assert [name for _, name in blocks] == ["rates", "groups", "brusselator"]
    readme = (ROOT / "README.md").read_text()
    for block, name in blocks:
        assert block in readme, f"README's {name} table is not what the script prints"
    lines = blocks[0][0].splitlines()[1:-1]
    assert lines[0].startswith("| P | CVODES forward | CVODES adjoint | diffsol forward")
    rungs = [ln.split("|")[1].strip() for ln in lines[2:] if ln.startswith("| ")]
    assert rungs == ["3", "30", "300", "3,000"]
    assert any("the crossover lies in (" in ln for ln in lines)
    groups = blocks[1][0].splitlines()[1:-1]
    assert [ln.split("|")[1].strip() for ln in groups[2:]] == [
        "100 (300)", "1,000 (3,000)", "10,000 (30,000)", "exponent p, three largest"]
    # a cell is the row's own median: CVODES' solve at 30,000 ROBER states
    from sciml_bench.results import store

    files = json.loads((ROOT / "results" / "published" / "files.json").read_text())
    cv = [x for f in files["ladder stiff-robertson-groups"]
          for x in store.read(ROOT / "results" / "published" / f).records
          if x.get("backend") == "cvodes" and x.get("size") == 10000
          and x.get("gradient_method") == "forward" and x.get("jacobian") == "sparse"]  # fmt: skip
    cell = groups[4].split("|")[3].strip()
    if cv and cv[0].get("status") == "ok":
        assert float(cell.split(" / ")[0].replace(",", "")) == pytest.approx(
            1e3 * cv[0]["solve_s"], rel=5e-3)


def test_cvodes_proxy_pairs_casadi_and_amici_rows() -> None:
    """benchmarks/cvodes_proxy.py on the published files: every case both ways to CVODES
    ran, its ratio the two rows' median solve over each other, and the tallies add up to
    the cases printed; an unknown run name is refused with the choices."""
    from sciml_bench.results import store

    files = json.loads((ROOT / "results" / "published" / "files.json").read_text())
    r = bench("cvodes_proxy.py", "--only", "run", timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [x for name in files["run"]
            for x in store.read(ROOT / "results" / "published" / name).records]  # fmt: skip
    ok = {(x["backend"], x["problem"], x["gradient_method"]): x for x in rows
          if x.get("status") == "ok" and x["backend"] in ("cvodes", "amici")}  # fmt: skip
    both = [k for k in ok if k[0] == "cvodes" and ("amici", *k[1:]) in ok]
    assert both, "the published main run has no problem CasADi and AMICI both ran"
    _, problem, method = both[0]
    c, a = ok[("cvodes", problem, method)], ok[("amici", problem, method)]
    block = r.stdout.split(f"{problem}: {method},", 1)[1]
    m = re.search(r"solve [\d.,]+ ms / [\d.,]+ ms = ([\d.]+)x", block)
    assert m and float(m[1]) == pytest.approx(c["solve_s"] / a["solve_s"], abs=0.006), block
    tallies = re.findall(r"^(solve|grad): CasADi ahead (\d+), AMICI ahead (\d+), tie (\d+)",
                         r.stdout, re.M)  # fmt: skip
    cases = len(re.findall(r"^    solve ", r.stdout, re.M))
    assert [k for k, *_ in tallies] == ["solve", "grad"]
    assert all(sum(int(x) for x in t[1:]) <= cases for t in tallies)
    assert sum(int(x) for x in tallies[0][1:]) == len(both)
    bad = bench("cvodes_proxy.py", "--only", "no-such-run", timeout=60)
    assert bad.returncode != 0 and "choose from" in bad.stderr


def test_sbml_conformance_on_cases_written_here(tmp_path: Path) -> None:
    """benchmarks/sbml_conformance.py on two cases laid out as the Test Suite lays them out,
    written here (y' = -k y exported as SBML, its exact solution as the results; one with
    a wrong result): one pass, one wrong, counted per tag and in total."""
    _need("libsbml")
    import numpy as np

    from sciml_bench.problem import spec
    from sciml_bench.problem.sbml import write

    model = write.text(spec.load(DECAY))
    t = np.linspace(0, 2, 11)
    for number, scale in (("00001", 1.0), ("00002", 1.01)):
        case = tmp_path / number
        case.mkdir()
        (case / f"{number}-model.m").write_text(
            "(*\ncomponentTags: Parameter, RateRule\ntestTags: NonConstantParameter\n"
            "testType: TimeCourse\n*)\n")
        (case / f"{number}-settings.txt").write_text(
            "start: 0\nduration: 2\nsteps: 10\nvariables: y\nabsolute: 1e-7\n"
            "relative: 1e-4\namount: \nconcentration: \n")
        rows = "\n".join(f"{float(a)!r},{float(scale * np.exp(-0.5 * a))!r}" for a in t)
        (case / f"{number}-results.csv").write_text(f"time,y\n{rows}\n")
        (case / f"{number}-sbml-l3v2.xml").write_text(model)
    out = _ok(bench("sbml_conformance.py", str(tmp_path), "--wrong", "--gradients"))
    total = next(ln for ln in out.splitlines() if ln.startswith("total"))
    assert total.split()[1:] == ["2", "1", "0", "1", "0"], out
    assert "wrong 00002: y at t=0" in out
    # the passing case's gradient: the reference against the document's own differences,
    # CVODES' and diffsol's against the reference (pass/wrong/unjudged/refused/failed)
    assert "gradients (pass/wrong/unjudged/refused/failed): 1 passing cases" in out
    graded = out.split("gradients (", 1)[1]
    last = next(ln for ln in graded.splitlines() if ln.startswith("total"))
    installed = [m for m in ("casadi", "pydiffsol") if importlib.util.find_spec(m)]
    assert last.split()[1:] == ["1/0/0/0/0"] + ["1/0/0/0/0" if m in installed
                                               else "0/0/0/1/0" for m in ("casadi", "pydiffsol")], out


@pytest.mark.slow
def test_noise_floor_identical_rows_and_their_false_winners(tmp_path: Path) -> None:
    """Two tiny interleaved runs of SciPy planned twice: the estimate first, a progress line
    per run, each candidate floor's false-winner rate with its interval, the adaptive
    rule's, the smallest floor at 5 %, and the pairs kept for --from."""
    out_file = tmp_path / "pairs.json"
    r = bench("noise_floor.py", "--runs", "2", "--backends", "scipy", "--repeats", "4",
              "--cold", "2", "--out", str(out_file))  # fmt: skip
    out = _ok(r)
    assert "min (estimated)" in r.stderr and "run 2/2:" in r.stderr
    for c in ("1.05x:", "1.1x:", "1.3x:", "2.1x:"):
        assert re.search(rf"floor {re.escape(c)}\s+false winners \d/2 = \d+ % \[", out), out
    assert re.search(r"adaptive rule: false winners \d/2 .* its floors median [\d.]+x", out)
    assert re.search(r"smallest constant floor with false winners <= 5%: [\d.]+x", out)
    assert re.search(r"steady affinity of the rows: .*cpu \d", out), out
    again = _ok(bench("noise_floor.py", "--from", str(out_file)))
    assert again.splitlines()[:3] == out.splitlines()[:3]


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "needs", "problem", "variants"), [
    ("diffrax", ("jax", "diffrax"), "nonstiff-lotka-volterra", ("pinlate",)),
    ("diffsol", ("pydiffsol",), "stiff-robertson", ("pinlate", "imports")),
])  # fmt: skip
def test_process_split_prints_each_variants_modes(
    backend: str, needs: tuple[str, ...], problem: str, variants: tuple[str, ...]
) -> None:
    """Two fresh processes a variant of a backend's bare twin (pinned late; the worker's
    imports first, whose twin runs by path), every process counted whatever the load: a
    line per variant and kind with the per-process medians' range and modes."""
    _need(*needs)
    out = _ok(bench("process_split.py", "--processes", "2", "--variants", ",".join(variants),
                    "--repeats", "3", "--load-limit", "100", "--backend", backend,
                    "--problem", problem))  # fmt: skip
    for variant in variants:
        for kind in ("grad", "solve"):
            assert re.search(rf"{variant} +{kind} +n=2 +median +[\d.]+ ms .* max/min +[\d.]+x",
                             out), out  # fmt: skip


def test_process_split_finds_two_modes() -> None:
    two_modes = bench_module("process_split").two_modes
    lo, hi, n_lo, n_hi = two_modes([1.45, 1.5, 1.47, 3.6, 1.52, 3.7])
    assert (n_lo, n_hi) == (4, 2) and hi / lo == pytest.approx(3.65 / 1.485, rel=0.01)
    lo, hi, n_lo, n_hi = two_modes([1.2, 1.21, 1.19, 1.22])
    assert hi / lo < 1.05  # one mode: the best split barely separates anything
