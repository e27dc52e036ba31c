"""Environment failures: a missing or broken optional library, a GPU that is not
there, an output folder that cannot be written. Each is a result row or a
one-line error that says what to do, never a traceback unless ``--debug``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sciml_bench.results import store as results

DATA = Path(__file__).parent / "data"
SCIML = [sys.executable, "-m", "sciml_bench.cli.main"]
DECAY = str(DATA / "decay.toml")


def sciml(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SCIML, *args], capture_output=True, text=True, timeout=180,
                          env={**os.environ, **(env or {})})


def one_line_error(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("Error:")]
    return line


def _hiding_torch(tmp_path: Path) -> dict[str, str]:
    """PYTHONPATH with a sitecustomize that makes torch absent (``None`` in
    sys.modules: find_spec returns None and ``import torch`` fails), exactly as
    in an environment without it; worker processes inherit it."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\nsys.modules['torch'] = None\nsys.modules['torchdiffeq'] = None\n"
    )
    return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}


def _hiding(tmp_path: Path, *modules: str) -> dict[str, str]:
    """As :func:`_hiding_torch`, for any modules."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(
        "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules)
    )
    return {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.slow
def test_without_the_report_extra_each_command_works_or_names_the_extra(tmp_path: Path) -> None:
    # the first quick-start install is .[torch,jax]: no matplotlib, pandas or scikit-learn
    env = _hiding(tmp_path, "matplotlib", "pandas", "sklearn")
    out = tmp_path / "out"
    r = sciml("run", "--problem-file", DECAY, "-b", "scipy", "--quick", "--out", str(out), env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    (path,) = out.glob("*.h5")
    report_dir = tmp_path / "report"
    line = one_line_error(sciml("report", str(path), "--out", str(report_dir), env=env))
    assert line == ("Error: sciml-bench report needs matplotlib, which is not installed. "
                    "Fix: pip install -c constraints.txt -e '.[report]'")  # fmt: skip
    assert not report_dir.exists(), "nothing is written before the check"
    line = one_line_error(sciml("run", "cnn", "--quick", "--dataset", "digits", "-b", "jax",
                                "--out", str(out), env=env))  # fmt: skip
    assert "--dataset digits needs sklearn" in line and "-e '.[digits]'" in line
    assert len(list(out.glob("*.h5"))) == 1, "no results file for a run that cannot start"
    # the Python API: the same line, without a chained ModuleNotFoundError traceback
    api = subprocess.run(
        [sys.executable, "-c",
         f"import sciml_bench.results as r; r.load({str(path)!r}, as_frame=True)"],
        capture_output=True, text=True, timeout=60, env={**os.environ, **env},
    )  # fmt: skip
    assert api.returncode == 1
    assert api.stderr.strip().splitlines()[-1] == (
        "sciml_bench.results.extras.MissingExtra: sciml_bench.results.load(..., as_frame=True) "
        "needs pandas, which is not installed. Fix: pip install -c constraints.txt -e '.[report]'"
    )
    assert "During handling" not in api.stderr and "ModuleNotFoundError" not in api.stderr
    # every other command works without the extra
    for args in (["show", str(path)], ["export", str(path)], ["compare", str(path), str(path)],
                 ["list"], ["codegen", "--problem-file", DECAY, "--target", "torch"],
                 ["reference", "--problem-file", DECAY]):  # fmt: skip
        r = sciml(*args, env=env)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (args, r.stderr[-2000:])


@pytest.mark.slow
def test_missing_torch_is_an_unavailable_row_with_the_fix(tmp_path: Path) -> None:
    env = _hiding_torch(tmp_path)
    r = sciml("list", env=env)
    assert r.returncode == 0
    assert "torchdiffeq  unavailable: Python package(s) not installed: torch" in r.stdout
    assert "fix: pip install" in r.stdout
    r = sciml("run", "--problem-file", DECAY, "-b", "torchdiffeq", "--quick", "--out",
              str(tmp_path / "out"), env=env)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    (path,) = (tmp_path / "out").glob("*.h5")
    (rec,) = results.read(path).records
    assert rec["status"] == "unavailable"
    assert "torch" in rec["reason"] and "Fix: pip install" in rec["reason"]


@pytest.mark.slow
def test_broken_torch_install_is_an_error_row_with_the_import_error(tmp_path: Path) -> None:
    # torch is found but cannot be imported (a broken install): the worker's
    # import phase fails, and that is a row with the library's own message.
    broken = tmp_path / "broken" / "torch"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('libtorch_cpu.so: cannot open')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(broken.parent), os.environ.get("PYTHONPATH", "")])}
    r = sciml("run", "--problem-file", DECAY, "-b", "torchdiffeq", "--quick", "--out",
              str(tmp_path / "out"), env=env)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    (path,) = (tmp_path / "out").glob("*.h5")
    (rec,) = results.read(path).records
    assert rec["status"] == "error"
    assert "libtorch_cpu.so: cannot open" in rec["reason"]


@pytest.mark.parametrize("under", ["/dev/null", "regular-file"])
def test_unwritable_output_folder_is_a_one_line_error_with_the_fix(
    tmp_path: Path, under: str
) -> None:
    # Works as root too: nothing can create a folder below a regular file.
    parent = Path("/dev/null") if under == "/dev/null" else tmp_path / "a-file"
    if under != "/dev/null":
        parent.write_text("")
    out = str(parent / "results")
    line = one_line_error(sciml("run", "--problem-file", DECAY, "-b", "scipy", "--out", out))
    assert "cannot write results to" in line and "choose a writable folder with --out" in line
    r = sciml("--debug", "run", "--problem-file", DECAY, "-b", "scipy", "--out", out)
    assert r.returncode == 2 and "Traceback" in r.stderr  # --debug shows where


def test_read_only_output_folder_is_a_one_line_error(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("running as root: chmod 0o500 does not stop writes (see the /dev/null test)")
        line = one_line_error(sciml("run", "--problem-file", DECAY, "-b", "scipy", "--out",
                                    str(folder)))
        assert "Permission denied" in line and "--out" in line
    finally:
        folder.chmod(0o700)


def test_gpu_requested_where_there_is_none(tmp_path: Path) -> None:
    help_text = sciml("run", "--help").stdout
    if "--device" not in help_text:
        pytest.skip("`sciml-bench run` has no --device option in this version")
    from sciml_bench.measure.memory import gpu_count

    if gpu_count():
        pytest.skip("a GPU is visible here")
    line = one_line_error(sciml("run", "cnn", "--quick", "--device", "cuda", "--out",
                                str(tmp_path)))
    assert "--device cuda" in line and "--device cpu" in line
    assert not list(tmp_path.glob("*.h5")), "no results file for a run that cannot start"
