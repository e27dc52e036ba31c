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
