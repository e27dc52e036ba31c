"""``--gradient all``: every gradient method each backend offers, each its own case."""

from __future__ import annotations

import numpy as np
import pytest

from sciml_bench import backends
from sciml_bench.cli.options import UserError, check_offered
from sciml_bench.problem import reference, spec
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.run import cases


@pytest.fixture(scope="module")
def rober() -> CompiledProblem:
    p = spec.load("stiff-robertson")
    return reference.compile_problem(p, None, np.zeros((len(p.t_save), p.n_state)))


def test_all_plans_every_offered_method_once_per_backend(rober) -> None:
    names = ["scipy", "diffrax", "torchdiffeq", "cvodes", "diffsol", "julia"]
    plan = cases.plan(rober, names, gradients=["all"])
    got: dict[str, list[str]] = {}
    for c in plan:
        got.setdefault(c.backend, []).append(c.gradient_method)
    for name in names:
        assert got[name] == list(backends.get(name).gradient_methods), name
    assert got["diffrax"] == ["RecursiveCheckpointAdjoint", "BacksolveAdjoint", "DirectAdjoint"]
    assert got["cvodes"] == ["forward", "adjoint"] and got["scipy"] == ["none"]
    assert len(got["julia"]) == 6


def test_a_named_method_still_picks_only_the_backends_offering_it(rober) -> None:
    plan = cases.plan(rober, ["diffrax", "cvodes"], gradients=["adjoint"])
    assert [(c.backend, c.gradient_method) for c in plan] == [
        ("diffrax", "RecursiveCheckpointAdjoint"), ("cvodes", "adjoint")]


def test_all_is_accepted_and_an_unknown_method_is_still_refused() -> None:
    check_offered(["cvodes", "diffrax"], (), ("all",))
    with pytest.raises(UserError, match="offered by none of cvodes"):
        check_offered(["cvodes"], (), ("alll",))
