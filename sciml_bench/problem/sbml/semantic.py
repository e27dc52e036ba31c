"""An import's meaning checked against the SBML document itself, not against the import.

The reference judges every backend's gradient, but it is built from the *imported*
problem: an import that changed the model (an initial assignment frozen to a number, a
parameter assigned from another made a constant) changes the reference with it, and every
row agrees with both. So the import is checked against its source: for each differentiated
parameter ``θ_i`` the document itself is changed (the parameter's value in the SBML,
``θ_i e^{±h}``, or ``θ_i ± h max(1, |θ_i|)`` for one not in log space), imported again with
the same choices, solved by the reference's solver at the reference's tolerances, and the
loss evaluated on the *original* observations. The central difference

    d_i = (L(θ_i e^{h}) − L(θ_i e^{−h})) / 2h  ≈  θ_i ∂L/∂θ_i

owes nothing to how the import treated ``θ_i``, only to SBML's meaning as the document
states it. Component ``i`` disagrees with the reference gradient ``g`` (on the judged
scale, :func:`~sciml_bench.problem.gradient_measures.judged_scale`) when

    |d_i − g_i| > REL |g_i| + (FLOOR + e_ref) ‖g‖ + |L₊ + L₋ − 2 L₀| / 2h

with ``e_ref`` the reference's own error estimate: ``REL`` (1e-3) is far above a central
difference's error at ``h = 1e-3`` (``O(h²)`` truncation, the solver's ``rtol / h``), and
``FLOOR`` (1e-5) is ten times below the pass tier (1e-4, norm-wise), so what the judge can
see, the check sees. The last term, ``h`` times the loss's curvature along ``θ_i``, bounds
the difference's own asymmetry where the gradient is zero (a loss at its minimum, an SBML
Test Suite model at equilibrium: ``L₊ ≈ L₋ ≈ c h²``, ``d_i ≈ c' h²``), where the other
terms vanish with ``g``. A disagreement refuses the model, naming the parameter and its SBML
element. Costs two imports and two tight solves per parameter (:data:`CHEAP` says when
``import`` and ``run --sbml`` run it by default; ``sciml-bench check --sbml`` always does).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sciml_bench.problem.gradient_measures import judged_scale, norm_error
from sciml_bench.problem.sbml.refuse import SBMLError

#: the central difference's step (log space; relative for a parameter not in log space)
STEP = 1e-3
#: a component's allowed disagreement: relative to itself...
REL = 1e-3
#: ...plus this fraction of the gradient's norm (ten times below the pass tier)
FLOOR = 1e-5
#: ``import`` and ``run --sbml`` check by default up to this many states x parameters
#: (Bachmann_MSB2011's 25 x 34 is 850; each parameter costs two tight solves)
CHEAP = 1_000


@dataclass
class Component:
    """One differentiated parameter: the reference's ``g_i`` and the document's ``d_i``, both
    on the judged scale."""

    name: str
    element: str
    reference: float
    document: float
    allowed: float

    @property
    def ok(self) -> bool:
        return abs(self.document - self.reference) <= self.allowed


@dataclass
class SemanticCheck:
    """What the check found: per component, the norm-wise disagreement, its cost."""

    components: list[Component] = field(default_factory=list)
    #: ``‖d − g‖ / ‖g‖`` on the judged scale
    error: float | None = None
    seconds: float = 0.0
    solves: int = 0
    #: parameters with no SBML element to change (``time_scale``), or why nothing ran
    skipped: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.components)

    @property
    def ran(self) -> bool:
        return bool(self.components)

    def summary(self) -> str:
        """One line: what was compared, how well, at what cost."""
        if not self.ran:
            return f"semantic check against the SBML document: not run ({'; '.join(self.skipped)})"
        bad = [c for c in self.components if not c.ok]
        head = (f"semantic check against the SBML document: {len(self.components)} parameters "
                f"changed in the file, re-imported and solved ({self.solves} solves, "
                f"{self.seconds:.1f} s)")  # fmt: skip
        if bad:
            return f"{head}: {len(bad)} disagree with the reference gradient: {self.refusal()}"
        return f"{head}: the reference gradient agrees to {self.error:.1e} (norm-wise relative)"

    def refusal(self) -> str:
        """The worst disagreeing component, naming the parameter and its SBML element."""
        bad = sorted((c for c in self.components if not c.ok),
                     key=lambda c: -abs(c.document - c.reference) / max(c.allowed, 1e-300))  # fmt: skip
        if not bad:
            return ""
        c = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        return (f"{c.name} ({c.element}): changing it in the SBML moves the loss by "
                f"{c.document:.4g} per unit of log {c.name}, the imported problem's gradient says "
                f"{c.reference:.4g}{more}: the import does not mean what the file means; please "
                "report it with the file")  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {"error": self.error, "seconds": self.seconds, "solves": self.solves,
                "ok": self.ok if self.ran else None, "skipped": self.skipped,
                "components": [vars(c) | {"ok": c.ok} for c in self.components]}  # fmt: skip


def cheap(n_state: int, n_params: int) -> bool:
    """Whether ``import`` and ``run --sbml`` check by default (:data:`CHEAP`)."""
    return n_state * n_params <= CHEAP


def check(imported: Any, problem: Any, reference: Any, step: float = STEP) -> SemanticCheck:
    """The check (module doc) of ``problem`` (``imported``'s) against its document, with
    ``reference`` the problem's reference (its gradient, observations and settings)."""
    from sciml_bench.problem.loss import loss_arrays

    if not reference.gradient or reference.observations is None and problem.loss.kind == "fit":
        why = reference.gradient_missing or reference.missing or "no reference gradient"
        return SemanticCheck(skipped=[f"no reference gradient to compare ({why})"])
    start = time.perf_counter()
    W, O, C = loss_arrays(problem, None if reference.observations is None
                          else np.asarray(reference.observations))  # fmt: skip
    theta = np.asarray(problem.theta0, dtype=float)
    log = np.asarray(problem.log_params, dtype=bool) & (theta > 0)
    scale = judged_scale(theta, log)
    g = np.asarray(reference.gradient, dtype=float) * scale
    allowed_floor = (FLOOR + (reference.reference_error or 0.0)) * float(np.linalg.norm(g))
    out = SemanticCheck()

    def loss_at(doc: Any) -> float:
        y = _solve(imported, doc, problem, reference)
        out.solves += 1
        d = y - O
        return float(np.sum(W * d * d) + np.sum(C * y))

    d = np.full(theta.size, np.nan)
    for i, sid in enumerate(imported.system.params):
        q = imported.facts.quantities.get(sid)
        if q is None:  # time_scale: a parameter the import added, no element of the file
            out.skipped.append(f"{problem.param_names[i]} (not an element of the file)")
            continue
        up, down = _moved(theta[i], bool(log[i]), step)
        # per unit of log θ_i (the judged scale) or of θ_i
        width = 2 * step if log[i] else up - down
        hi, lo = loss_at(_changed(imported, q, up)), loss_at(_changed(imported, q, down))
        d[i] = (hi - lo) / width
        curvature = abs(hi + lo - 2 * reference.loss) / width  # h L'' along θ_i
        out.components.append(Component(problem.param_names[i], q.element, float(g[i]),
                                         float(d[i]), REL * abs(g[i]) + allowed_floor
                                         + curvature))  # fmt: skip
    done = ~np.isnan(d)
    out.error = norm_error(d[done], g[done]) if done.any() else None
    out.seconds = time.perf_counter() - start
    return out


def _moved(value: float, log: bool, step: float) -> tuple[float, float]:
    """The parameter's two changed values: ``θ e^{±h}``, or ``θ ± h max(1, |θ|)``."""
    if log:
        return value * math.exp(step), value * math.exp(-step)
    h = step * max(1.0, abs(value))
    return value + h, value - h


def _changed(imported: Any, q: Any, value: float) -> Any:
    """A copy of ``imported``'s document with quantity ``q``'s declared value set to
    ``value`` (a global parameter's, or a reaction's local parameter's)."""
    doc = imported.document.clone()
    model = doc.getModel()
    if q.origin:
        rid, lid = q.origin
        law = model.getReaction(rid).getKineticLaw()
        element = law.getLocalParameter(lid) or law.getParameter(lid)
    else:
        element = model.getParameter(q.id)
    if element is None or element.setValue(float(value)) != 0:
        raise SBMLError(imported.source, q.element, "the semantic check could not change its "
                        "value in the document")  # fmt: skip
    return doc


def _solve(imported: Any, doc: Any, problem: Any, reference: Any) -> np.ndarray:
    """The changed document imported with the same choices (the same parameters, save
    points) and solved by the reference's solver at its settings."""
    from sciml_bench.problem.reference import solve_at
    from sciml_bench.problem.sbml.read import read_document
    from sciml_bench.problem.spec import from_dict

    again = read_document(doc, imported.source, list(imported.system.params),
                          (problem.t_span[1], len(problem.t_save), list(problem.t_save)))  # fmt: skip
    changed = from_dict(again.data, source=imported.source)
    method = reference.method.split()[1] if reference.method.startswith("scipy") else "BDF"
    return solve_at(changed, np.asarray(changed.theta0), method, reference.rtol, reference.atol)


def run_check(imported: Any, problem: Any, say: Any, force: bool = False,
              refresh: bool = False) -> SemanticCheck:  # fmt: skip
    """The check where it is cheap (:func:`cheap`) or ``force``d, with its reference (built
    once and cached: ``run`` reads it back), saying what it does through ``say``; a
    :class:`SBMLError` naming the parameter and its element where the import disagrees
    with the document."""
    from sciml_bench.problem import reference

    if not force and not cheap(problem.n_state, problem.n_params):
        result = SemanticCheck(skipped=[
            f"{problem.n_state} states x {problem.n_params} parameters > {CHEAP:,} (each "
            "parameter costs two tight solves); `sciml-bench check --sbml FILE` runs it"])
        say(result.summary())
        return result
    say(f"checking the import against the SBML document: its reference, then each of "
        f"{problem.n_params} parameters changed in the file (2 solves each) ...")
    ref = reference.get_or_missing(problem, refresh=refresh)
    result = check(imported, problem, ref)
    say(result.summary())
    if result.ran and not result.ok:
        bad = next(c for c in result.components if not c.ok)
        raise SBMLError(imported.source, bad.element, result.refusal())
    return result
