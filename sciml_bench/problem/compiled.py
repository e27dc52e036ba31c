"""The problem as a worker receives it: plain arrays plus generated source.

The runner compiles a :class:`~sciml_bench.problem.spec.Problem` once (sympy, code
generation, observations from the reference) and ships this JSON-able bundle
to each worker, so a worker never imports sympy and its cold phases measure
the framework, not our front end.

The loss every backend computes, on the solution ``Y`` at the save times
(shape ``(n_save, n_state)``), is

    L(Y) = Σ_ij W_ij (Y_ij - O_ij)² + Σ_ij C_ij Y_ij

which covers ``fit`` (``W`` the per-state scaled weights, ``O`` the
observations, ``C = 0``) and ``final`` (``W = 0``, ``C`` non-zero in the last
row only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np


class Dimensions:
    """``n_state`` and ``n_params`` from the flat ``state_names`` and ``param_names``,
    for a problem as the runner holds it (:class:`~sciml_bench.problem.spec.Problem`) and
    as a worker receives it (:class:`CompiledProblem`)."""

    state_names: Sequence[str]
    param_names: Sequence[str]

    @property
    def n_state(self) -> int:
        return len(self.state_names)

    @property
    def n_params(self) -> int:
        return len(self.param_names)


class ScaledParameters(Protocol):
    """What :func:`log_scaled` reads: a problem as the runner or a worker holds it."""

    @property
    def theta0(self) -> Any: ...
    @property
    def log_params(self) -> Any: ...


def log_scaled(problem: ScaledParameters) -> np.ndarray:
    """``True`` where a compiled model (CasADi, DiffSL) takes ``u_i = log θ_i`` instead of
    ``θ_i`` and computes ``θ_i = exp(u_i)`` inside: the parameters the gradient is judged
    in log space (``log_params``) whose initial value is positive. The code generators
    write the model from it and the compiled backends map ``θ`` to ``u`` and ``∂L/∂u``
    back to ``∂L/∂θ = (∂L/∂u) / θ`` from it, so the two cannot disagree.

    Why: a sensitivity's error test weighs ``∂y/∂θ_i`` with one absolute tolerance for
    every ``i``; ``∂y/∂(log θ_i) = θ_i ∂y/∂θ_i`` puts rates from 0.04 to 3e7 on one scale
    (docs/backends.md, "Parameters in the gradient's scale")."""
    theta = np.asarray(problem.theta0, dtype=np.float64)
    return np.asarray(problem.log_params, dtype=bool) & (theta > 0)


@dataclass
class CompiledProblem(Dimensions):
    name: str
    stiff: bool
    state_names: list[str]
    param_names: list[str]
    y0: np.ndarray
    theta0: np.ndarray
    #: True where the reference differentiates in log space
    log_params: np.ndarray
    t_span: tuple[float, float]
    t_save: np.ndarray
    rtol: float
    atol: float
    max_steps: int
    loss_W: np.ndarray
    loss_O: np.ndarray
    loss_C: np.ndarray
    #: generated source per target: numpy, torch, jax, julia
    source: dict[str, str] = field(default_factory=dict)
    content_hash: str = ""
    #: an array problem (``[sizes]``): the laddered size's value, the exact Jacobian's
    #: structural non-zeros and (lower, upper) bandwidth; None for a scalar problem
    size: int | None = None
    jac_nnz: int | None = None
    jac_bands: list[int] | None = None
    #: an array problem's ``[S, n]`` (states, grid elements): DiffSL stores its state state
    #: by state and the diffsol backend reorders by it; None for a scalar problem
    layout: list[int] | None = None
    #: the initial state depends on the parameters (:mod:`sciml_bench.problem.initial`):
    #: every generated source defines it from them (``y0(p)``; DiffSL's ``u_i`` reads the
    #: inputs; the SBML has initial assignments), and ``y0`` is its value at ``theta0``
    y0_depends: bool = False
    #: the modeller's own SBML a ``run --sbml`` problem came from, for AMICI and
    #: libRoadRunner: ``{"path", "states", "parameters", "locals"}`` (each state's SBML
    #: formula, each parameter's id; :class:`~sciml_bench.problem.spec.SBMLModel`), its text
    #: in ``source["sbml_model"]``; None for a problem file (they run the rate-rule export)
    sbml_map: dict[str, Any] | None = None
    #: how many events (``[[events]]``, :mod:`sciml_bench.problem.events`) the problem has,
    #: and their kinds (``time``, ``state``): their functions are in the sources of the
    #: targets that run them, every other target's says it runs none yet
    events: int = 0
    event_kinds: list[str] = field(default_factory=list)

    def loss_numpy(self, y: np.ndarray) -> float:
        """The loss above, in NumPy (also valid for complex ``y``)."""
        d = y - self.loss_O
        return np.sum(self.loss_W * d * d) + np.sum(self.loss_C * y)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for k, v in out.items():
            if isinstance(v, np.ndarray):
                out[k] = v.tolist()
        out["t_span"] = list(self.t_span)
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CompiledProblem:
        d = dict(d)
        for k in ("y0", "theta0", "t_save", "loss_W", "loss_O", "loss_C"):
            d[k] = np.asarray(d[k], dtype=np.float64)
        d["log_params"] = np.asarray(d["log_params"], dtype=bool)
        d["t_span"] = (float(d["t_span"][0]), float(d["t_span"][1]))
        return cls(**d)
