"""``sciml-bench report`` and ``export`` on a real results file, and clear errors for
files that are not results files.

The real file comes from one ``sciml-bench run`` per test session (about a
minute: Diffrax compiles), its reference in the session's cache (conftest.py).
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from sciml_bench.cli.main import main
from sciml_bench.cli.report import register
from sciml_bench.results import compare as cmp
from sciml_bench.results import plots, publish
from sciml_bench.results.store import ResultsError, ResultsWriter, read
from sciml_bench.results.store import read as read_results

register(main)

REPEATS = 10  # the exact Mann-Whitney test can then reach p = 1.1e-5 (3 repeats: 0.1)
SHIM = (
    "import sys; from sciml_bench.cli.main import main; from sciml_bench.cli.report import register; "
    "register(main); main()"
)


@pytest.fixture(scope="session")
def results_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run: CVODES and SciPy on Robertson, a two-rung tolerance ladder. CVODES (a
    compiled library) gives its gradient rows in a fraction of a second; Diffrax's were two
    JAX compilations, 25 s of CPU, and other files run Diffrax end to end."""
    out = tmp_path_factory.mktemp("run")
    cmd = [
        sys.executable, "-m", "sciml_bench.cli.main", "run", "stiff-robertson", "--quick",
        "-b", "cvodes", "-b", "scipy", "--tolerances", "1e-5,1e-7",
        "--repeats", str(REPEATS), "--out", str(out),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = out.glob("*.h5")
    return path


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, [str(a) for a in args])


def with_extra_records(src: Path, dst: Path, extra: list[dict[str, Any]]) -> Path:
    run = read(src)
    w = ResultsWriter(dst, run.environment, "test")
    for r in run.records + extra:
        w.add({k: v for k, v in r.items() if not k.endswith("_iqr")})
    w.finish("complete")
    return dst


def failure(template: dict[str, Any]) -> dict[str, Any]:
    """A failed rung of a real case: no samples, a reason."""
    return {
        **{k: template[k] for k in ("kind", "problem", "backend", "solver", "gradient_method")},
        "rtol": 1e-9, "atol": 1e-13, "status": "max_steps",
        "reason": "hit max_steps=10000 at t=31.6 | of 1e5", "solve_samples": [],
        "grad_samples": [], "ttfg_samples": [],
        "phase_names": ["import", "build", "first_solve", "first_grad"],
        "phases": [[0.5, 0.2, float("nan"), float("nan")]],
    }  # fmt: skip


CNN = [
    {"kind": "cnn", "problem": "cnn", "backend": "torch-eager", "device": "cpu", "status": "ok",
     "reason": "", "train_s": 2.0, "epoch_s": [0.9, 1.1], "throughput_ips": 512.0,
     "accuracy": 0.9, "ram_initial_mb": 300.0, "ram_max_mb": 900.0,
     "time_to_first_step_s": 0.3, "vram_initial_mb": None, "vram_max_mb": None},
    {"kind": "cnn", "problem": "cnn", "backend": "jax", "device": "cpu", "status": "ok",
     "reason": "", "train_s": 1.5, "epoch_s": [0.7, 0.8]},  # no throughput or memory
    {"kind": "cnn", "problem": "cnn", "backend": "tensorflow", "status": "unavailable",
     "reason": "Python package(s) not installed: tensorflow"},
]  # fmt: skip


@pytest.mark.slow
def test_report_on_a_real_run(results_file: Path, tmp_path: Path) -> None:
    import matplotlib.image as mpimg

    run = read(results_file)
    assert {r["backend"] for r in run.records} >= {"scipy"}
    src = with_extra_records(results_file, tmp_path / "with-failure.h5",
                             [failure(run.records[0]), *CNN])  # fmt: skip
    out = tmp_path / "report"
    res = invoke("report", src, "--out", out)
    assert res.exit_code == 0, res.output
    md = (out / "report.md").read_text()
    page = (out / "report.html").read_text()
    # every case is a row: backend, solver and status, in both documents
    for r in run.records:
        rtol = f"{r['rtol']:.0e}"
        assert any(
            r["backend"] in line and r["solver"] in line and rtol in line and r["status"] in line
            for line in md.splitlines()
        ), (r["backend"], rtol)
        assert f"<td>{r['backend']}</td><td>{r['solver']}</td>" in page
    # the failure is a row with its reason, not dropped; the pipe is escaped for GitHub
    assert "**max_steps**" in md and "hit max_steps=10000 at t=31.6 \\| of 1e5" in md
    assert "missing rung" in md and "hit max_steps=10000 at t=31.6 | of 1e5" in page
    assert "## Runs and environment" in md and run.environment["python"] in md
    # CNN: a table, a figure, and notes for what was missing
    assert "## CNN training baselines" in md and "torch-eager" in md
    assert "no VRAM recorded" in md
    # figures: PNG and SVG for each, decodable, small; the HTML embeds them all
    pngs = sorted((out / "figures").glob("*.png"))
    names = {p.stem.split("-")[-1] for p in pngs}
    assert {"work_precision", "ttfg", "steady", "gradient", "cnn"} <= names, names
    for p in pngs:
        img = mpimg.imread(p)
        assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
        assert p.with_suffix(".svg").read_text().lstrip().startswith("<?xml")
        assert f"]({p.relative_to(out).as_posix()})" in md
    assert page.count("data:image/png;base64,") == len(pngs)
    assert 'src="http' not in page and "<link" not in page and "<script" not in page
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    assert total < 5 * 2**20, f"report is {total / 2**20:.1f} MiB"


@pytest.mark.slow
def test_metric_choice_changes_the_error_column(results_file: Path, tmp_path: Path) -> None:
    run = read(results_file)
    r = next(r for r in run.records if r["status"] == "ok")
    res = invoke("report", results_file, "--out", tmp_path, "--metric", "final")
    assert res.exit_code == 0, res.output
    md = (tmp_path / "report.md").read_text()
    assert f"{r['solution_error_final']:.2e}" in md
    assert "DiffEqDevTools final" in md


@pytest.mark.slow
def test_export_csv_and_json(results_file: Path, tmp_path: Path) -> None:
    run = read(results_file)
    res = invoke("export", results_file, "--format", "csv", "--output", tmp_path / "r.csv")
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(io.StringIO((tmp_path / "r.csv").read_text())))
    assert len(rows) == len(run.records)
    for row, r in zip(rows, run.records, strict=True):
        assert row["backend"] == r["backend"] and row["status"] == r["status"]
        assert float(row["solve_s"]) == pytest.approx(np.median(r["solve_samples"]))
        assert int(row["solve_n"]) == len(r["solve_samples"]) == REPEATS
        assert float(row["solve_q1"]) <= float(row["solve_s"]) <= float(row["solve_q3"])
        assert float(row["phase_import_s"]) > 0
        assert "solve_samples" not in row and "y" not in row  # arrays stay in JSON
    res = invoke("export", results_file, "--format", "json")
    assert res.exit_code == 0
    doc = json.loads(res.stdout)  # strict JSON: NaN became null
    assert "NaN" not in res.stdout
    recs = doc["files"][0]["records"]
    assert [x["solve_samples"] for x in recs] == [r["solve_samples"] for r in run.records]
    assert doc["files"][0]["environment"]["python"] == run.environment["python"]
    assert doc["files"][0]["meta"]["schema_version"] == 2


@pytest.mark.slow
def test_compare_flags_a_3x_slowdown_of_real_samples(results_file: Path, tmp_path: Path) -> None:
    """NEW = the real file with every steady-state sample tripled: one file a side, beyond
    the process floor (2.1x)."""
    run = read(results_file)
    w = ResultsWriter(tmp_path / "slow.h5", run.environment, "test")
    for r in run.records:
        r = {k: v for k, v in r.items() if not k.endswith("_iqr")}
        r["solve_samples"] = [3 * x for x in r.get("solve_samples", [])]
        r["grad_samples"] = [3 * x for x in r.get("grad_samples", [])]
        w.add(r)
    w.finish("complete")
    # the same real samples doubled: the machine's load during the run is not what is
    # tested here, so rows are judged however busy it was (--load-limit)
    res = invoke("compare", results_file, tmp_path / "slow.h5", "--fail-above", "1.10", "--json",
                 "--load-limit", "1000")
    assert res.exit_code == 1
    data = json.loads(res.stdout)
    timed = [t for c in data["cases"] for t in c["timings"] if t["metric"] in ("solve", "grad")]
    # preempted samples on a busy machine can blur a case, so ask for most, not all
    verdicts = [t["verdict"] for t in timed]
    assert verdicts.count(cmp.SLOWER) >= len(verdicts) / 2 and cmp.FASTER not in verdicts
    assert data["geomean"]["solve"] == pytest.approx(3.0)
    assert invoke("compare", results_file, results_file, "--fail-above", "1.10").exit_code == 0


def test_plots_say_why_nothing_was_drawn() -> None:
    r = {"kind": "ode", "backend": "torchdiffeq", "status": "unavailable", "reason": "no torch"}
    for plot in (
        plots.work_precision_figure([r]),
        plots.ttfg_figure([r]),
        plots.steady_figure([r]),
        plots.gradient_figure([r]),
        plots.cnn_figure([r]),
    ):
        assert plot.fig is None and plot.notes, plot.name  # fmt: skip


def test_html_escapes_record_text(tmp_path: Path) -> None:
    rec = {"kind": "ode", "problem": "p<1>", "backend": "<script>x</script>", "solver": "s",
           "gradient_method": "g", "status": "crashed", "reason": "a & b <tag>"}  # fmt: skip
    w = ResultsWriter(tmp_path / "x.h5", {}, "test")
    w.add(rec)
    w.finish("complete")
    publish.write([read(tmp_path / "x.h5")], tmp_path / "out")
    page = (tmp_path / "out" / "report.html").read_text()
    assert "<script>x" not in page and "&lt;script&gt;x" in page and "a &amp; b &lt;tag&gt;" in page


# -- files that are not results files ----------------------------------------------------------


def _bad_files(folder: Path) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    good = folder / "good.h5"
    w = ResultsWriter(good, {"python": "x"}, "test")
    w.add({"kind": "ode", "problem": "p", "backend": "scipy", "status": "ok",
           "solve_samples": rng.random(50).tolist(), "y": rng.random((40, 3)).tolist()})  # fmt: skip
    w.finish("complete")
    data = good.read_bytes()
    files = {
        "random": folder / "random.h5",
        "foreign": folder / "foreign.h5",
        "truncated": folder / "truncated.h5",
        "missing": folder / "does-not-exist.h5",
    }
    files["random"].write_bytes(rng.bytes(4096))
    with h5py.File(files["foreign"], "w") as f:
        f["x"] = np.arange(10)
    files["truncated"].write_bytes(data[: len(data) // 2])
    return files


@pytest.mark.parametrize("kind", ["random", "foreign", "truncated", "missing"])
def test_bad_files_give_one_line_and_exit_2(tmp_path: Path, kind: str) -> None:
    bad = _bad_files(tmp_path)[kind]
    with pytest.raises(ResultsError):
        read_results(bad)
    for args in (["report", bad, "--out", tmp_path / "r"], ["export", bad],
                 ["compare", bad, tmp_path / "good.h5"]):  # fmt: skip
        res = invoke(*args)
        assert res.exit_code == 2, (args, res.output)
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: ") and str(bad) in lines[0], lines
        assert "Traceback" not in res.output


def test_bad_file_in_a_real_process_has_no_traceback(tmp_path: Path) -> None:
    bad = _bad_files(tmp_path)["truncated"]
    proc = subprocess.run([sys.executable, "-c", SHIM, "report", str(bad)], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "truncated" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_damage_past_the_header_is_a_results_error(tmp_path: Path) -> None:
    """Bytes overwritten inside the file: whatever h5py raises becomes one ResultsError."""
    good = tmp_path / "good.h5"
    _bad_files(tmp_path)
    data = bytearray(good.read_bytes())
    rng = np.random.default_rng(3)
    outcomes = set()
    for i in range(12):
        b = bytearray(data)
        pos = int(rng.integers(1024, len(b) - 256))
        b[pos : pos + 128] = rng.bytes(128)
        p = tmp_path / f"damaged{i}.h5"
        p.write_bytes(bytes(b))
        try:
            read_results(p)
            outcomes.add("read")  # the damage hit unused bytes or sample values
        except ResultsError as e:
            assert "\n" not in str(e)
            outcomes.add("error")
    assert "error" in outcomes


def test_cnn_rows_of_two_machines_are_reported_apart(tmp_path: Path) -> None:
    """A GPU machine's CNN rows (published beside this machine's) never share a table or a
    figure with the CPU rows: one section per hardware."""
    src = Path(__file__).resolve().parent.parent / "results" / "published"
    (cpu_file,) = src.glob("cnn-*.h5")
    recs = read(cpu_file).records
    w = ResultsWriter(tmp_path / "other.h5", {}, "test")
    for r in recs:  # the same rows, as if measured on a second machine
        w.add({**r, "hardware": "Other CPU x16; NVIDIA H100 (driver 1)"})
    w.finish("complete")
    blocks = publish.build([read(cpu_file), read(tmp_path / "other.h5")], tmp_path / "out")
    heads = [b.text for b in blocks if isinstance(b, publish.Heading)]
    # the figures, then the tables: each section names the problem once, each machine apart
    for section in ("Figures", "Results by problem"):
        part = heads[heads.index(section) + 1 :]
        part = part[: next(i for i, h in enumerate(part) if h in ("Results by problem",
                                                                  "Runs and environment"))]
        assert part.count("CNN training baselines") == 1
        assert sum(h.startswith("cnn on ") for h in part) == 2
    heads = heads[heads.index("Results by problem") :]
    assert [h for h in heads if h.startswith("cnn on ")] == [
        f"cnn on {recs[0]['hardware']}", "cnn on Other CPU x16; NVIDIA H100 (driver 1)"]
    tables = [b for b in blocks if isinstance(b, publish.Table) and "variant" in b.header]
    assert [len(t.rows) for t in tables] == [len(recs), len(recs)]


def test_the_runs_section_names_the_thread_budget_the_run_was_given(tmp_path: Path) -> None:
    for env, says in (({"worker_threads": 1, "threads": {"OMP_NUM_THREADS": "4"}},
                       "--threads 1 (every framework in the workers), OMP_NUM_THREADS=4"),
                      ({"threads": {}}, "each library's default")):  # fmt: skip
        w = ResultsWriter(tmp_path / "t.h5", env, "test")
        w.finish("complete")
        (table,) = [b for b in publish.environment_blocks([read(tmp_path / "t.h5")])
                    if isinstance(b, publish.Table)]  # fmt: skip
        assert dict(map(tuple, table.rows))["threads"] == says
