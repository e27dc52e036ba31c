"""Neural terms: declared as data, generated natively, identical weights everywhere."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from sciml_bench.problem import codegen, reference, spec
from sciml_bench.problem.spec import ProblemError

ROOT = Path(__file__).resolve().parent.parent
SPIRAL = tomllib.loads((ROOT / "problems" / "nonstiff-spiral-node.toml").read_text())


def test_weights_are_deterministic_glorot_and_named() -> None:
    a, b = spec.load("nonstiff-spiral-node"), spec.load("nonstiff-spiral-node")
    assert a.theta0 == b.theta0
    assert a.n_params == 2 * 50 + 50 + 50 * 2 + 2 == 252
    assert a.n_mech_params == 0 and not any(a.log_params)
    w1 = np.asarray(a.theta0[:100])
    assert np.all(np.abs(w1) <= np.sqrt(6 / 52)) and w1.std() > 0.05
    assert a.param_names[0] == "nn.W1[0,0]" and a.param_names[-1] == "nn.b2[1]"
    data = json.loads(json.dumps(SPIRAL))
    data["networks"]["nn"]["seed"] = 1
    assert spec.from_dict(data).theta0 != a.theta0


def test_numpy_network_matches_a_hand_written_forward_pass() -> None:
    p = spec.load("nonstiff-spiral-node")
    f = codegen.load_python(codegen.generate(p, "numpy"))["rhs"]
    th = np.asarray(p.theta0)
    W1, b1 = th[:100].reshape(50, 2), th[100:150]
    W2, b2 = th[150:250].reshape(2, 50), th[250:]
    u = np.array([0.7, -1.2])
    expected = W2 @ np.tanh(W1 @ u**3 + b1) + b2
    np.testing.assert_allclose(f(0.0, u, th), expected, rtol=1e-14)


def test_ude_keeps_mechanistic_parameters_first() -> None:
    p = spec.load("stiff-robertson-ude")
    assert p.param_names[:2] == ("k2", "k3")
    assert p.n_params == 2 + 3 * 8 + 8 + 8 + 1
    assert p.log_params[:2] == (True, True) and not any(p.log_params[2:])
    assert p.loss.truth_rhs  # observations come from true ROBER, not from the UDE


@pytest.mark.parametrize(
    ("change", "key", "reason"),
    [
        ({"layers": [2]}, "networks.nn.layers", "at least two layer sizes"),
        ({"activation": "relu6"}, "networks.nn.activation", "use one of"),
        ({"inputs": ["u1^3"]}, "networks.nn.inputs", "expected 2 input expressions"),
        ({"inputs": ["u1^3", "os.system"]}, "networks.nn.inputs[1]", "attribute access"),
        ({"output_scale": [1.0]}, "networks.nn.output_scale", "expected 2 values"),
        ({"dropout": 0.5}, "networks.nn", "unknown key"),
    ],
)
def test_network_validation(change: dict, key: str, reason: str) -> None:
    data = json.loads(json.dumps(SPIRAL))
    data["networks"]["nn"].update(change)
    with pytest.raises(ProblemError) as err:
        spec.from_dict(data, source="spiral.toml")
    assert err.value.key == key and reason in err.value.reason


def test_many_parameters_get_a_full_reference_checked_along_directions() -> None:
    p = spec.load("nonstiff-spiral-node")
    ref = reference.get(p)
    # every one of the 252 components, judged; directional FD only cross-checks it
    assert len(ref.gradient) == p.n_params and ref.gradient_check == "full"
    assert ref.directions is not None and len(ref.directions) == reference.N_DIRECTIONS
    assert ref.cross_check.startswith(f"{reference.N_DIRECTIONS}-direction central")
    V = np.asarray(ref.directions)
    projected = V @ np.asarray(ref.gradient)
    d = np.asarray(ref.directional_derivatives)
    assert np.linalg.norm(projected - d) / np.linalg.norm(d) == pytest.approx(
        ref.cross_check_agreement, rel=1e-9)
    assert ref.cross_check_agreement < 1e-6 and ref.reference_error < 1e-6


@pytest.fixture(scope="module")
def spiral_run(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("spiral")
    r = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "run", "nonstiff-spiral-node", "--quick",
         "--tolerances", "1e-9", "-b", "diffrax", "-b", "torchdiffeq", "--json",
         "--out", str(out)],
        capture_output=True, text=True, timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return [x for x in json.loads(r.stdout) if x.get("kind") != "verdict"]


@pytest.mark.slow
def test_spiral_gradients_agree_across_backends(spiral_run: list[dict]) -> None:
    d, t = spiral_run
    assert d["backend"] == "diffrax" and t["backend"] == "torchdiffeq"
    assert d["status"] == t["status"] == "ok"
    assert d["gradient_error"] <= 1e-5  # non-stiff, tight tolerance
    assert t["gradient_error"] <= 1e-5
    gd, gt = np.array(list(d["gradient"].values())), np.array(list(t["gradient"].values()))
    assert list(d["gradient"]) == list(t["gradient"])
    assert np.linalg.norm(gd - gt) <= 1e-5 * np.linalg.norm(gd)
