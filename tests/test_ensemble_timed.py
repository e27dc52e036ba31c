"""What an ensemble row times and scores: the batch's arrays are arguments of Diffrax's
compiled calls (not constants), every Diffrax result code has a status, the ensemble takes
the case's solver options, and the gradient check weighs the timed batch's own members."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from sciml_bench.backends.base import CaseOptions
from sciml_bench.problem import ensemble as ens
from sciml_bench.problem import reference, spec

HAVE = {m: importlib.util.find_spec(m) is not None for m in ("jax", "torchdiffeq", "torchode")}

LV = """
name = "ens-lv-timed"
stiff = false
[state]
names = ["x", "y"]
initial = [1.0, 1.0]
[parameters]
a = 1.5
b = 1.0
[equations]
x = "a*x - b*x*y"
y = "-3*y + x*y"
[time]
span = [0.0, 2.0]
save = { linspace = [0.25, 2.0, 8] }
[tolerances]
rtol = 1.0e-7
atol = 1.0e-9
[loss]
kind = "final"
weights = [1.0, 0.5]
[ensemble]
sizes = [1, 8]
sample = 3
[ensemble.vary]
a = { uniform = [0.8, 1.2], apply = "scale" }
x = { normal = [0.0, 0.1], apply = "shift" }
"""


def _problem(n: int) -> tuple[object, ens.Batch]:
    problem = spec.loads(LV, "e.toml")
    compiled = reference.compile_problem(problem, None)
    return compiled, ens.batch(problem.ensemble, np.asarray(problem.y0), 2, n)


def _options(compiled: object, solver: str, gradient: str, **extra: float) -> CaseOptions:
    return CaseOptions(solver, gradient, compiled.rtol, compiled.atol, compiled.max_steps,
                       extra=extra)  # fmt: skip


@pytest.mark.skipif(not HAVE["jax"], reason="needs jax (diffrax) installed")
def test_diffrax_ensemble_takes_the_batch_as_arguments_and_the_case_options() -> None:
    from sciml_bench.backends import diffrax as dfx

    compiled, batch = _problem(65536)
    case = dfx.DiffraxEnsembleCase(compiled, _options(compiled, "Tsit5", "RecursiveCheckpointAdjoint",
                                                      pcoeff=0.2), batch, "independent")  # fmt: skip
    assert case.info["controller"]["pcoeff"] == 0.2  # options.extra, as the single case
    theta, w = case.prepare(compiled.theta0)
    text = case._value_and_grad.lower(theta, w, *case._batch, case._O).as_text()
    # 400 kB of program; captured, the 65536-member batch (initial states, scales and
    # shifts: 393,216 doubles) would add megabytes of constants to it
    assert len(text) < 1_000_000
    # every Diffrax result code has a status of its own (a new one fails here, not silently)
    import diffrax

    assert set(diffrax.RESULTS._name_to_item) == set(dfx.RESULT_STATUS)
    table = dfx.result_table(diffrax)
    assert table[int(diffrax.RESULTS.max_steps_rejected._value)][0].value == "max_steps"
    assert table[int(diffrax.RESULTS.nonfinite._value)][0].value == "nonfinite"


@pytest.mark.skipif(not (HAVE["torchdiffeq"] and HAVE["torchode"]),
                    reason="needs torchdiffeq and torchode installed")  # fmt: skip
def test_the_gradient_check_weighs_the_timed_batch() -> None:
    """Weights 1/3 on the first 3 of 8 members: independent members give the gradient of
    a batch of those 3 alone; coupled ones share the 8-member batch's steps, so the timed
    configuration, not a fresh 3-member one, is what gets scored."""
    from sciml_bench.backends.torchdiffeq import TorchdiffeqEnsembleCase
    from sciml_bench.backends.torchode import TorchodeEnsembleCase

    compiled, big = _problem(8)
    small = big.head(3)
    w = np.r_[np.full(3, 1 / 3), np.zeros(5)]
    theta = np.asarray(compiled.theta0)
    grads = {}
    for label, cls, gradient in (("independent", TorchodeEnsembleCase, "AutoDiffAdjoint"),
                                 ("coupled", TorchdiffeqEnsembleCase, "backprop")):  # fmt: skip
        opts = _options(compiled, "dopri5", gradient)
        timed = cls(compiled, opts, big)
        weighted = timed.check_grad(timed.grad_raw(timed.prepare(theta, w)))
        alone = cls(compiled, opts, small).loss_and_grad(theta)
        mean = timed.loss_and_grad(theta)  # default weights: the mean of all 8
        grads[label] = (weighted, alone, mean)
        assert abs(mean[0] - weighted[0]) > 1e-6  # the weights are applied
    (lw, gw), (la, ga), _ = grads["independent"]
    assert lw == pytest.approx(la, rel=1e-12) and np.allclose(gw, ga, rtol=1e-9, atol=0)
    (lw, gw), (la, ga), _ = grads["coupled"]
    diff = np.max(np.abs(gw - ga) / np.abs(ga))
    assert 1e-12 < diff < 1e-3  # same members, other steps: close, and not the same
