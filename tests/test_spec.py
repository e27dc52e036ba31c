"""Problem files: validation errors name the file, the key and the reason."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from sciml_bench.problem import spec
from sciml_bench.problem.spec import ProblemError

ROOT = Path(__file__).resolve().parent.parent
ROBER = (ROOT / "problems" / "stiff-robertson.toml").read_text()


def _edit(**changes: object) -> dict:
    data = tomllib.loads(ROBER)
    for dotted, value in changes.items():
        node = data
        *path, last = dotted.split("__")
        for p in path:
            node = node[p]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return data


def test_shipped_robertson_is_rober() -> None:
    p = spec.load("stiff-robertson")
    assert p.theta0 == (0.04, 3.0e7, 1.0e4)
    assert p.y0 == (1.0, 0.0, 0.0)
    assert p.t_span == (0.0, 1.0e5)
    assert p.t_save[-1] == 1.0e5 and p.t_save[0] == pytest.approx(1e-5)
    assert p.stiff and p.loss.kind == "fit"
    assert all(p.log_params)


@pytest.mark.parametrize(
    ("changes", "key", "reason"),
    [
        ({"state__initial": [1.0, 0.0]}, "state.initial", "expected 3 values, got 2"),
        ({"equations__y2": "k1*y1 - k9*y2"}, "equations.y2", "unknown name 'k9'"),
        ({"equations__y2": "__import__('os')"}, "equations.y2", "strings are not allowed"),
        ({"equations__y2": "y1.real"}, "equations.y2", "attribute access"),
        ({"equations__y2": "system(y1)"}, "equations.y2", "call of 'system'"),
        ({"equations__y3": None}, "equations", "no equation for state 'y3'; add y3 = "),
        ({"time__span": [1.0, 0.0]}, "time.span", "the end must be after the start"),
        ({"time__save": {"points": [3.0, 2.0]}}, "time.save", "strictly increasing"),
        ({"loss__kind": "sum"}, "loss.kind", "unknown kind 'sum'"),
        ({"loss__truth": {"k1": 0.04}}, "loss.truth", "equals the initial parameters"),
        ({"parameters__k1": "fast"}, "parameters.k1", "is a derived parameter"),
        ({"state__names": ["y1", "y1", "y3"]}, "state.names[1]", "duplicate name"),
        ({"state__names": ["y1", "t", "y3"]}, "state.names[1]", "reserved"),
        ({"tolerances__rtol": -1.0}, "tolerances.rtol", "positive"),
        ({"stiff": "yes"}, "stiff", "expected true or false"),
        ({"bogus": 1}, "bogus", "unknown key"),
    ],
)
def test_validation_errors_name_file_key_and_reason(changes: dict, key: str, reason: str) -> None:
    with pytest.raises(ProblemError) as err:
        spec.from_dict(_edit(**changes), source="my.toml")
    assert err.value.source == "my.toml"
    assert err.value.key == key
    assert reason in err.value.reason
    assert str(err.value).startswith(f"my.toml: [{key}]: ")


def test_final_loss_needs_matching_weights() -> None:
    data = _edit(loss={"kind": "final", "weights": [1.0, 0.0]})
    with pytest.raises(ProblemError, match=r"\[loss.weights\]: expected 3 values"):
        spec.from_dict(data)
    data = _edit(loss={"kind": "final", "weights": [0.0, 0.0, 0.0]})
    with pytest.raises(ProblemError, match="all weights are zero"):
        spec.from_dict(data)


def test_malformed_toml() -> None:
    with pytest.raises(ProblemError, match=r"bad.toml: \[toml\]: not valid TOML"):
        spec.loads("name = [unclosed", source="bad.toml")


def test_unknown_problem_name_lists_shipped_ones() -> None:
    with pytest.raises(ProblemError, match="stiff-robertson"):
        spec.load("no-such-problem")


def test_save_points_always_end_at_t_end() -> None:
    p = spec.from_dict(_edit(time={"span": [0.0, 10.0], "save": {"linspace": [1.0, 5.0, 5]}}))
    assert p.t_save == (1.0, 2.0, 3.0, 4.0, 5.0, 10.0)


def test_content_hash_tracks_content() -> None:
    a = spec.from_dict(_edit())
    b = spec.from_dict(_edit(parameters__k1=0.041))
    assert a.content_hash == spec.load("stiff-robertson").content_hash
    assert a.content_hash != b.content_hash


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", *args],
        capture_output=True, text=True, cwd=cwd, timeout=120,
    )


def test_cli_rejects_a_malformed_file_with_one_line_and_nonzero_exit(tmp_path: Path) -> None:
    bad = tmp_path / "evil.toml"
    bad.write_text(ROBER.replace('y3 = "k2*y2^2"', 'y3 = "__import__(\'os\').system(\'touch PWNED\')"'))
    r = _cli("run", "--problem-file", str(bad), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert r.returncode == 2
    assert f"{bad}: [equations.y3]:" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "PWNED").exists()
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.h5"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--solver", "Kvaerno9", "-b", "diffrax"], "--solver 'Kvaerno9' is offered by none of diffrax"),
        (["--gradient", "magic"], "--gradient 'magic' is offered by none of"),
        (["-b", "fortran"], "unknown backend 'fortran'"),
        (["--tolerances", "1e-4,abc"], "--tolerances '1e-4,abc'"),
    ],
)
def test_cli_rejects_unknown_options_before_running(args: list[str], message: str, tmp_path: Path) -> None:
    r = _cli("run", "stiff-robertson", *args, "--out", str(tmp_path), cwd=tmp_path)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not list(tmp_path.glob("*.h5"))
