"""The verdict under a problem's table: which row to use, by how much, and whether it shows.

Among the rows of one comparison that qualify (ODE and ensemble rows: status ``ok`` and a
gradient in the *pass* tier; CNN rows: ``ok``, trained beyond chance and not flagged for
lost accuracy), each criterion names its fastest row by the median of its samples:

- ODE and ensemble rows: the **steady gradient** (``grad_s``) and the **first gradient**
  (``ttfg_s``, time to first gradient of a fresh process);
- CNN rows: **training** (``train_s``) and the **first step** (``time_to_first_step_s``).

Each winner comes with the ratio ``r = t_runner_up / t_fastest >= 1`` and whether ``r``
clears the noise floor (:func:`sciml_bench.measure.noise.clears_noise`); inside it the
two are a tie. Steady criteria (each row's samples from one run's few processes) must clear
:data:`~sciml_bench.measure.noise.PROCESS_FLOOR` (2.1x), since fresh processes of the
same code differ by up to 2x; first-process criteria, the run-to-run floor (1.1x). A comparison is one set of rows that answer the same question: one
``size`` (an ensemble's rung, a size ladder's size), one ``rtol``, one results file in a
report of several; CNN rows also one model, precision, pipeline and dataset. When no row
qualifies, one sentence says why. Computed when read, never stored.
"""

from __future__ import annotations

import math
import textwrap
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sciml_bench.measure.noise import NOISE_FLOOR, PROCESS_FLOOR, clears_noise

#: keys whose values split rows into separate comparisons (absent keys are ignored)
GROUP_KEYS = ("_run", "size", "rtol")
CNN_GROUP_KEYS = ("_run", "model", "precision", "pipeline", "dataset")
#: (criterion, record key of its median seconds), per kind of row
ODE_CRITERIA = (("steady gradient", "grad_s"), ("first gradient", "ttfg_s"))
CNN_CRITERIA = (("training", "train_s"), ("first step", "time_to_first_step_s"))
#: criteria whose samples all come from one process per row: two rows' medians differ by
#: process-level noise too (up to 2.03x measured between fresh processes of identical
#: code), so their floor is PROCESS_FLOOR; first gradient and first step are fresh
#: processes already, and keep NOISE_FLOOR
ONE_PROCESS = ("steady gradient", "training")
#: what names a row in a verdict, in order (present, non-default values only)
LABEL_KEYS = ("backend", "solver", "gradient_method", "semantics")


@dataclass(frozen=True)
class Pick:
    """The fastest qualifying row by one criterion, and its runner-up if there is one."""

    criterion: str
    key: str
    winner: dict[str, Any]
    runner_up: dict[str, Any] | None

    @property
    def ratio(self) -> float | None:
        """``t_runner_up / t_winner`` (>= 1), or None without a runner-up."""
        if self.runner_up is None:
            return None
        return float(self.runner_up[self.key]) / float(self.winner[self.key])

    @property
    def floor(self) -> float:
        """The ratio this criterion must clear to name a winner (else a tie)."""
        return PROCESS_FLOOR if self.criterion in ONE_PROCESS else NOISE_FLOOR

    @property
    def clears_noise(self) -> bool | None:
        r = self.ratio
        return None if r is None else clears_noise(r, self.floor)


@dataclass(frozen=True)
class Verdict:
    """One comparison's verdict: its group, the picks, or why nothing qualified."""

    problem: str
    group: dict[str, Any]
    qualified: int
    picks: tuple[Pick, ...]
    reason: str | None
    #: what a qualifying row is, for the sentence of a lone one
    noun: str = "row with a passing gradient"

    def text(self) -> str:
        """One line (wrapped by :func:`lines`)."""
        where = ", ".join(_group_label(k, v) for k, v in self.group.items())
        head = f"verdict{' (' + where + ')' if where else ''}:"
        if self.reason:
            return f"{head} {self.reason}"
        if self.qualified == 1:
            times = ", ".join(f"{p.criterion} {_seconds(p.winner[p.key])}" for p in self.picks)
            return f"{head} {label(self.picks[0].winner)} is the only {self.noun} ({times})"
        return f"{head} " + "; ".join(_pick_text(p) for p in self.picks)

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` record: ``kind = "verdict"`` (see docs/results-schema.md)."""
        out: dict[str, Any] = {"kind": "verdict", "problem": self.problem}
        out.update({k: v for k, v in self.group.items() if not k.startswith("_")})
        if "_run" in self.group:
            out["run"] = self.group["_run"]
        out["qualified"] = self.qualified
        out["noise_floor"] = NOISE_FLOOR
        out["reason"] = self.reason
        for p in self.picks:
            out[p.criterion.replace(" ", "_")] = {
                "winner": _row_id(p.winner), "s": p.winner[p.key],
                "runner_up": None if p.runner_up is None else _row_id(p.runner_up),
                "runner_up_s": None if p.runner_up is None else p.runner_up[p.key],
                "ratio": p.ratio, "floor": p.floor, "clears_noise": p.clears_noise,
            }  # fmt: skip
        out["text"] = self.text()
        return out


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _row_id(r: dict[str, Any]) -> dict[str, Any]:
    keys = (*LABEL_KEYS, "device", "dtype", "size", "rtol", "dt")
    return {k: r[k] for k in keys if r.get(k) not in (None, "")}


def label(r: dict[str, Any]) -> str:
    """``diffrax Tsit5 RecursiveCheckpointAdjoint``, plus the device when not the CPU,
    the dtype when not float64 and the results file (``#2``) in a report of several."""
    parts = [str(r[k]) for k in LABEL_KEYS if r.get(k)]
    if r.get("jacobian") in ("dense", "sparse"):  # an array problem's ladders differ by it
        parts.append(f"{r['jacobian']} Jacobian")
    if r.get("device") and r["device"] != "cpu":
        parts.append(f"on {r['device']}")
    if r.get("dtype") and r["dtype"] != "float64" and r.get("kind", "ode") != "cnn":
        parts.append(str(r["dtype"]))
    if isinstance(r.get("dt"), int | float):  # a fixed step (--dt)
        parts.append(f"dt={r['dt']:g}")
    if r.get("_run"):
        parts.append(str(r["_run"]))
    return " ".join(parts)


def _seconds(s: float) -> str:
    return f"{s * 1e3:.3g} ms" if s < 1.0 else f"{s:.3g} s"


def _group_label(key: str, value: Any) -> str:
    if key == "rtol":
        # as the table prints a tolerance (table.fmt_rtol; table imports this module)
        mant, exp = f"{float(value):.2e}".split("e")
        return f"rtol {mant.rstrip('0').rstrip('.')}e{exp}"
    if key == "size":
        return f"n={value}"
    if key == "_run":
        return f"file {value}"
    return f"{key} {value}"


def _pick_text(p: Pick) -> str:
    t = p.winner[p.key]
    head = f"{p.criterion}: {label(p.winner)} ({_seconds(t)})"
    if p.runner_up is None:
        return f"{head}, the only qualifying row with this timing"
    r = p.ratio or 1.0
    times = f"{r:.2f}x" if r < 10 else f"{r:.3g}x"
    other = f"{label(p.runner_up)} ({_seconds(p.runner_up[p.key])})"
    if p.clears_noise:
        return f"{head}, {times} faster than {other}"
    return f"{head} and {other} tie: {times} is inside the {p.floor:.2f}x noise floor"


def _qualifies_ode(r: dict[str, Any]) -> bool:
    return r.get("status") == "ok" and r.get("gradient_tier") == "pass"


def _qualifies_cnn(r: dict[str, Any]) -> bool:
    return (r.get("status") == "ok" and not r.get("trained_to_chance")
            and not r.get("precision_flagged"))  # fmt: skip


def _why_none_ode(rows: Sequence[dict[str, Any]]) -> str:
    """Why no row of a comparison qualifies, in one sentence."""
    ok = [r for r in rows if r.get("status") == "ok"]
    if not ok:
        counts = Counter(str(r.get("status", "?")) for r in rows)
        return "no row finished (" + ", ".join(f"{s} {n}" for s, n in counts.items()) + ")"
    scored = [r for r in ok if isinstance(r.get("gradient_error"), int | float)]
    if not scored:
        names = ", ".join(sorted({label(r) for r in ok}))
        return f"no backend computed a gradient (the rows that finished: {names})"
    best = min(scored, key=lambda r: (math.isnan(r["gradient_error"]), r["gradient_error"]))
    tier = best.get("gradient_tier") or "no tier"
    return (f"no backend produced a passing gradient (the best: {label(best)}, gradient "
            f"error {best['gradient_error']:.2e}, {tier})")  # fmt: skip


def _why_none_cnn(rows: Sequence[dict[str, Any]]) -> str:
    ok = [r for r in rows if r.get("status") == "ok"]
    if not ok:
        counts = Counter(str(r.get("status", "?")) for r in rows)
        return "no variant finished (" + ", ".join(f"{s} {n}" for s, n in counts.items()) + ")"
    return "no variant trained beyond chance without losing accuracy to its precision"


@dataclass(frozen=True)
class _Kind:
    group_keys: tuple[str, ...]
    criteria: tuple[tuple[str, str], ...]
    qualifies: Callable[[dict[str, Any]], bool]
    why_none: Callable[[Sequence[dict[str, Any]]], str]
    noun: str = "row with a passing gradient"


_KINDS = {
    "ode": _Kind(GROUP_KEYS, ODE_CRITERIA, _qualifies_ode, _why_none_ode),
    "ensemble": _Kind(GROUP_KEYS, ODE_CRITERIA, _qualifies_ode, _why_none_ode),
    "cnn": _Kind(CNN_GROUP_KEYS, CNN_CRITERIA, _qualifies_cnn, _why_none_cnn,
                 "variant that trained beyond chance"),
}


def _kind(r: dict[str, Any]) -> str:
    if r.get("kind") == "cnn" or r.get("problem") == "cnn":
        return "cnn"
    return str(r.get("kind") or "ode")


def _groups(
    rows: Sequence[dict[str, Any]], keys: Sequence[str]
) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Rows split by their values of ``keys``; a group is labelled by the keys whose
    values vary. A row without a value where others have one (an ``unavailable`` row:
    no tolerance, no size) ran in no comparison: it joins every group, where it can
    only explain why nothing qualified."""
    present = [k for k in keys if any(r.get(k) is not None for r in rows)]
    varying = [k for k in present if len({repr(r[k]) for r in rows if r.get(k) is not None}) > 1]
    placed = [r for r in rows if all(r.get(k) is not None for k in present)]
    unplaced = [r for r in rows if r not in placed]
    out: dict[tuple[str, ...], tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for r in placed:
        group = {k: r[k] for k in varying}
        out.setdefault(tuple(repr(v) for v in group.values()), (group, []))[1].append(r)
    if not out:
        return [({}, list(rows))]
    return [(group, members + unplaced) for group, members in out.values()]


def _pick(rows: list[dict[str, Any]], criterion: str, key: str) -> Pick | None:
    timed = sorted((r for r in rows if _finite(r.get(key))), key=lambda r: float(r[key]))
    if not timed:
        return None
    return Pick(criterion, key, timed[0], timed[1] if len(timed) > 1 else None)


def verdicts(records: Sequence[dict[str, Any]]) -> list[Verdict]:
    """Every comparison's verdict, problem by problem in the order the records came."""
    by_problem: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        kind = _kind(r)
        if kind in _KINDS:
            by_problem.setdefault((str(r.get("problem", "?")), kind), []).append(r)
    out = []
    for (problem, kind), rows in by_problem.items():
        spec = _KINDS[kind]
        for group, members in _groups(rows, spec.group_keys):
            good = [r for r in members if spec.qualifies(r)]
            picks = tuple(p for c, k in spec.criteria if (p := _pick(good, c, k)) is not None)
            reason = None
            if not good:
                reason = spec.why_none(members)
            elif not picks:
                reason = "no qualifying row has timings (an interrupted run?)"
            out.append(Verdict(problem, group, len(good), picks, reason, spec.noun))
    return out


def lines(records: Sequence[dict[str, Any]], width: int = 100) -> list[str]:
    """The verdicts of ``records`` as terminal lines, each wrapped at ``width``."""
    return [
        textwrap.fill(v.text(), width=width, subsequent_indent="    ")
        for v in verdicts(records)
    ]


def json_records(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``kind = "verdict"`` records that ``--json`` prints after the case records."""
    return [v.to_json() for v in verdicts(records)]
