"""Ensembles as data: how the members of a problem's ensemble differ, drawn once.

An ``[ensemble]`` section declares a ladder of member counts and, per varied
quantity (a state's initial value or a named parameter), a draw ``ξ`` and how
it applies to the nominal value ``v``:

- ``apply = "scale"``: ``v_m = v · ξ_m`` (DiffEqGPU's Lorenz ensemble draws
  ``p_m = p ∘ U(0, 1)``);
- ``apply = "shift"``: ``v_m = v + ξ_m``.

``ξ`` is ``normal = [mean, std]`` or ``uniform = [low, high]``. Member ``m``
varies every declared quantity at once. The gradient of an ensemble case is
taken with respect to the shared nominal parameters ``θ`` through those maps,
``∂θ_m/∂θ = ξ_m`` (scale) or ``1`` (shift), of the mean of the members' losses.

Draws are made once, in NumPy, from the section's seed: one stream per varied
quantity, in declaration order, so the first ``n`` members of a larger draw are
the members of a draw of ``n`` (every rung of the ladder shares its members
with the rungs below it, and with the reference's checked sample).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

DISTRIBUTIONS = ("normal", "uniform")
APPLY = ("scale", "shift")
SEMANTICS = ("independent", "coupled")
#: the largest ensemble a problem file may ask for
MAX_MEMBERS = 10_000_000


@dataclass(frozen=True)
class Variation:
    """One varied quantity: ``target`` is ``"state"`` or ``"parameter"``, ``index`` its
    position in the problem's states or parameters."""

    name: str
    target: str
    index: int
    distribution: str
    args: tuple[float, float]
    apply: str = "scale"

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        a, b = self.args
        if self.distribution == "normal":
            return a + b * rng.standard_normal(n)
        return a + (b - a) * rng.random(n)


@dataclass(frozen=True)
class Ensemble:
    """The ``[ensemble]`` section of a problem file."""

    sizes: tuple[int, ...]
    variations: tuple[Variation, ...]
    seed: int = 0
    #: members checked against the tight SciPy reference (the first ``sample``)
    sample: int = 8
    semantics: tuple[str, ...] = SEMANTICS

    def draws(self, n: int) -> np.ndarray:
        """``ξ`` of shape ``(n, len(variations))``; prefix-stable in ``n``."""
        out = np.empty((n, len(self.variations)))
        for k, v in enumerate(self.variations):
            rng = np.random.default_rng([self.seed, k])
            out[:, k] = v.draw(rng, n)
        return out

    def members(self, y0: np.ndarray, theta: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Initial states ``(n, n_state)`` and parameters ``(n, n_params)`` of ``n`` members."""
        xi = self.draws(n)
        Y0 = np.broadcast_to(np.asarray(y0, float), (n, len(y0))).copy()
        TH = np.broadcast_to(np.asarray(theta, float), (n, len(theta))).copy()
        for k, v in enumerate(self.variations):
            arr = Y0 if v.target == "state" else TH
            if v.apply == "scale":
                arr[:, v.index] *= xi[:, k]
            else:
                arr[:, v.index] += xi[:, k]
        return Y0, TH


@dataclass(frozen=True)
class Batch:
    """``n`` members as every backend receives them: plain arrays, drawn once.

    Member ``m`` starts at ``y0[m]`` and has parameters ``θ_m = θ ⊙ scale[m] + shift[m]``
    (``scale``/``shift`` are 1/0 for parameters that do not vary, network weights
    included), so each backend differentiates the same linear map in its own framework.
    ``observations`` (shape ``(n, n_save, n_state)``) are each member's data for a
    ``fit`` loss, or ``None`` when every member shares the problem's ``O`` (a ``final``
    loss). The loss of the batch is the mean of the members' losses,

        L̄(θ) = (1/n) Σ_m [ Σ_ij W_ij (Y_mij − O_mij)² + Σ_ij C_ij Y_mij ].
    """

    y0: np.ndarray
    scale: np.ndarray
    shift: np.ndarray
    observations: np.ndarray | None = None

    @property
    def n(self) -> int:
        return int(self.y0.shape[0])

    @property
    def varies_parameters(self) -> bool:
        """False when every member has the nominal θ (backends then share one θ)."""
        return bool(np.any(self.scale != 1.0) or np.any(self.shift != 0.0))

    def thetas(self, theta: np.ndarray) -> np.ndarray:
        """``(n, n_params)`` member parameters at nominal ``theta``."""
        return np.asarray(theta, float) * self.scale + self.shift

    def head(self, k: int) -> Batch:
        """The first ``k`` members (prefix-stable, like the draws)."""
        obs = None if self.observations is None else self.observations[:k]
        return Batch(self.y0[:k], self.scale[:k], self.shift[:k], obs)


def batch(
    ensemble: Ensemble,
    y0: np.ndarray,
    n_params: int,
    n: int,
    observations: np.ndarray | None = None,
) -> Batch:
    """The first ``n`` members of ``ensemble`` for a problem with ``n_params`` parameters
    (named ones first, as the variations index them)."""
    xi = ensemble.draws(n)
    Y0 = np.broadcast_to(np.asarray(y0, float), (n, len(y0))).copy()
    S = np.ones((n, n_params))
    A = np.zeros((n, n_params))
    for k, v in enumerate(ensemble.variations):
        if v.target == "state":
            if v.apply == "scale":
                Y0[:, v.index] *= xi[:, k]
            else:
                Y0[:, v.index] += xi[:, k]
        elif v.apply == "scale":
            S[:, v.index] = xi[:, k]
        else:
            A[:, v.index] = xi[:, k]
    obs = None if observations is None else np.asarray(observations, float)[:n]
    return Batch(Y0, S, A, obs)


def to_json(ensemble: Ensemble) -> dict[str, object]:
    """The section as a worker receives it (the worker never imports the parser)."""
    return {
        "sizes": list(ensemble.sizes),
        "seed": ensemble.seed,
        "sample": ensemble.sample,
        "semantics": list(ensemble.semantics),
        "variations": [
            {"name": v.name, "target": v.target, "index": v.index,
             "distribution": v.distribution, "args": list(v.args), "apply": v.apply}
            for v in ensemble.variations
        ],
    }  # fmt: skip


def from_json(d: dict[str, object]) -> Ensemble:
    vs = tuple(
        Variation(v["name"], v["target"], int(v["index"]), v["distribution"],
                  (float(v["args"][0]), float(v["args"][1])), v["apply"])
        for v in d["variations"]  # type: ignore[union-attr]
    )  # fmt: skip
    return Ensemble(
        sizes=tuple(int(x) for x in d["sizes"]),  # type: ignore[union-attr]
        variations=vs,
        seed=int(d["seed"]),  # type: ignore[arg-type]
        sample=int(d["sample"]),  # type: ignore[arg-type]
        semantics=tuple(d["semantics"]),  # type: ignore[arg-type]
    )


def load_observations(path: str | os.PathLike[str] | None, n: int) -> np.ndarray | None:
    """The first ``n`` members' observations from the file the ensemble reference cached
    (:func:`sciml_bench.problem.ensemble_reference.observations_path`). Here, not beside
    it, so that an ensemble worker reads them without importing sympy."""
    if path is None:
        return None
    return np.load(path, mmap_mode="r")[:n].astype(float)
