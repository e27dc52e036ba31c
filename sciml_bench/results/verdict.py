"""The verdict under a problem's table: which row to use, by how much, and whether it shows.

Among the rows of one comparison that qualify (ODE and ensemble rows: status ``ok``, a
gradient error ``e <= gradient_rtol`` (default :data:`~sciml_bench.measure.metrics.PASS_TOL`
= 1e-4, the *pass* tier; ``--gradient-rtol`` on ``run``, ``show`` and ``report``) and timed
with other processes taking at most :data:`~sciml_bench.measure.noise.LOAD_LIMIT` cores
(``others_cpu``; ``--load-limit`` on the same commands); CNN rows: ``ok``, trained beyond chance and not flagged for lost
accuracy), each criterion names its fastest row by the median of its samples:

- ODE and ensemble rows: the **steady gradient** (``grad_s``) and the **first gradient**
  (``ttfg_s``, time to first gradient of a fresh process);
- CNN rows: **training** (``train_s``) and the **first step** (``time_to_first_step_s``).

Each winner comes with the ratio ``r = t_runner_up / t_fastest >= 1`` and whether ``r``
clears the noise floor (:func:`sciml_bench.measure.noise.clears_noise`); inside it the
two are a tie. Steady criteria (each row's samples from one run's few processes) must clear
the floor this run's between-process spread calls for
(:func:`~sciml_bench.measure.noise.steady_floor`: a t bound on the log ratio from the two
rows' per-process medians, the spread pooled over the run's rows where that is larger, at
least 1.05x and at most 2.1x), or :data:`~sciml_bench.measure.noise.PROCESS_FLOOR` (2.1x) where a row has
one process (``--quick``, a ladder's rung): fresh processes of the same code differ by
nearly that much (``benchmarks/README.md``, paragraph "The process floor (2026-11-26)").
First-process criteria, the run-to-run floor (1.1x), unless either row holds a
single sample of it: one fresh process a side is the process-to-process spread again, so
PROCESS_FLOOR. Every pick prints its floor and where it came from. A comparison is one set of
rows that answer the same question: one ``size`` (an ensemble's rung, a size ladder's
size), one ``rtol``, one results file in a report of several; CNN rows also one model,
precision, pipeline and dataset.

No row drops out in silence (ODE and ensemble rows): a row that computed a gradient and is
faster than a winner by its ratio ``t_winner / t_row > 1`` but does not qualify is named
beside the winner with the ratio, whether it clears the pair's floor, and why it was left
out (its gradient error and tier, so that a 1.18e-4 ``warn`` row 174x faster is seen and
judged by the reader, not hidden by the fourth digit); rows timed under load are named
apart. Where every row that would qualify was timed under load (an ordinary laptop), the
answer is not withheld: the picks come from those rows and the verdict is *provisional*,
naming the load they were timed under, whose it was (this run's own cases or others',
:mod:`~sciml_bench.results.sharing`) and the command for a firm one. When no row
qualifies, one sentence says why, and the next step that would likely make one qualify
(:mod:`~sciml_bench.results.next_step`). Computed when read, never stored.
"""

from __future__ import annotations

import math
import textwrap
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sciml_bench.measure.metrics import JUDGE_MARGIN, PASS_TOL, WARN_TOL, within
from sciml_bench.measure.noise import (
    LOAD_LIMIT,
    NOISE_FLOOR,
    Floor,
    Spread,
    clears_noise,
    first_floor,
    loaded,
    others_load,
    pooled,
    steady_floor,
)
from sciml_bench.measure.noise import load_limit as load_limit_in_force
from sciml_bench.results import next_step, sharing

#: keys whose values split rows into separate comparisons (absent keys are ignored)
GROUP_KEYS = ("_run", "size", "rtol", "dtype")
CNN_GROUP_KEYS = ("_run", "model", "precision", "pipeline", "dataset")
#: (criterion, record key of its median seconds), per kind of row
ODE_CRITERIA = (("steady gradient", "grad_s"), ("first gradient", "ttfg_s"))
CNN_CRITERIA = (("training", "train_s"), ("first step", "time_to_first_step_s"))
#: criteria whose samples come from one run's few processes per row: two rows' medians
#: differ by process-level noise too (fresh processes of identical code: benchmarks/README.md,
#: paragraph "The process floor (2026-11-26)"), so their floor comes from the
#: between-process spread the run measured
#: (:func:`~sciml_bench.measure.noise.steady_floor`, over PROCESS_KEYS), PROCESS_FLOOR
#: where a side has one process; first gradient and first step are fresh processes
#: already, and keep NOISE_FLOOR (unless a row holds one sample: SAMPLE_KEYS)
ONE_PROCESS = ("steady gradient", "training")
#: the per-process medians behind a steady median, where a record keeps them
PROCESS_KEYS = {"grad_s": "grad_process_medians", "solve_s": "solve_process_medians"}
#: the raw samples behind a median, where a record keeps them: a first gradient from one
#: cold process is one draw of the process-to-process spread, judged at PROCESS_FLOOR
SAMPLE_KEYS = {"ttfg_s": "ttfg_samples", "grad_s": "grad_samples"}
#: what names a row in a verdict, in order (present, non-default values only)
LABEL_KEYS = ("backend", "solver", "gradient_method", "semantics")
#: the gradient accuracy a row must reach by default: the *pass* tier
DEFAULT_GRADIENT_RTOL = PASS_TOL
#: faster rows left out that a verdict's line names, the fastest first (--json: all)
MAX_LEFT_OUT = 5


def samples(r: dict[str, Any], key: str) -> int | None:
    """How many raw samples ``r``'s median ``key`` comes from, or None where the record
    keeps no sample list for it (CNN timings, hand-built records)."""
    raw = r.get(SAMPLE_KEYS.get(key, ""))
    return len(raw) if isinstance(raw, list | tuple) else None


def floor_of(criterion: str, key: str, a: dict[str, Any], b: dict[str, Any],
             pool: Spread | None = None) -> Floor:  # fmt: skip
    """The floor two rows' medians of ``key`` must differ by to be told apart, and its
    source: for a steady criterion, from the rows' per-process medians
    (:func:`~sciml_bench.measure.noise.steady_floor`, with the run's ``pool``); for a
    first-process one, the run-to-run floor, or PROCESS_FLOOR where either row holds a
    single sample (:func:`~sciml_bench.measure.noise.first_floor`)."""
    if criterion in ONE_PROCESS:
        medians = PROCESS_KEYS.get(key, "")
        return steady_floor(a.get(medians), b.get(medians), pool)
    return first_floor(1 in (samples(a, key), samples(b, key)))


def pair_floor(criterion: str, key: str, a: dict[str, Any], b: dict[str, Any],
               pool: Spread | None = None) -> float:  # fmt: skip
    """The ratio of :func:`floor_of`."""
    return floor_of(criterion, key, a, b, pool).value


def run_pool(rows: Sequence[dict[str, Any]], key: str) -> Spread | None:
    """The between-process spread of ``key`` pooled over ``rows`` (one run's rows of a
    kind that a verdict picks from), or None where no row has two processes' medians."""
    medians = PROCESS_KEYS.get(key)
    if medians is None:
        return None
    pool = pooled(r.get(medians) for r in rows)
    return pool if pool.df else None


@dataclass(frozen=True)
class Pick:
    """The fastest qualifying row by one criterion, and its runner-up if there is one."""

    criterion: str
    key: str
    winner: dict[str, Any]
    runner_up: dict[str, Any] | None
    #: the between-process spread of the run's rows this pick was made from (steady)
    pool: Spread | None = None

    @property
    def ratio(self) -> float | None:
        """``t_runner_up / t_winner`` (>= 1), or None without a runner-up."""
        if self.runner_up is None:
            return None
        return float(self.runner_up[self.key]) / float(self.winner[self.key])

    @property
    def one_sample(self) -> bool:
        """Whether the winner or the runner-up holds one sample of a first-process timing."""
        if self.criterion in ONE_PROCESS:
            return False
        rows = (self.winner,) if self.runner_up is None else (self.winner, self.runner_up)
        return any(samples(r, self.key) == 1 for r in rows)

    @property
    def measured_floor(self) -> Floor:
        """The floor this criterion must clear to name a winner (else a tie), and its
        source (:func:`floor_of`; without a runner-up, the winner against itself)."""
        other = self.winner if self.runner_up is None else self.runner_up
        return floor_of(self.criterion, self.key, self.winner, other, self.pool)

    @property
    def floor(self) -> float:
        """The ratio this criterion must clear to name a winner (else a tie)."""
        return self.measured_floor.value

    @property
    def clears_noise(self) -> bool | None:
        r = self.ratio
        return None if r is None else clears_noise(r, self.floor)


@dataclass(frozen=True)
class Faster:
    """One criterion by which a left-out row beat the winner (``ratio = t_winner / t_row
    > 1``) or at least the runner-up (``ratio <= 1``), its seconds, and the floor the row
    and the winner must differ by."""

    criterion: str
    seconds: float
    ratio: float
    floor: float
    #: where the floor comes from (:class:`~sciml_bench.measure.noise.Floor`)
    floor_source: str = ""

    @property
    def clears_noise(self) -> bool:
        """Whether it beat the winner by more than the floor."""
        return self.ratio > 1 and clears_noise(self.ratio, self.floor)

    def text(self) -> str:
        head = f"{self.criterion} {_seconds(self.seconds)}"
        if self.ratio <= 1:
            return f"{head}, ahead of the runner-up"
        why = f": {self.floor_source}" if self.floor_source else ""
        inside = "" if self.clears_noise else f", inside the {self.floor:.2f}x floor{why}"
        return f"{head}, {_times(self.ratio)} faster{inside}"


@dataclass(frozen=True)
class LeftOut:
    """A row that does not qualify but beat a winner or its runner-up, and why."""

    row: dict[str, Any]
    why: str
    faster: tuple[Faster, ...]

    def text(self) -> str:
        """``diffsol bdf forward sparse Jacobian (steady gradient 33 ms, 174x faster):
        gradient error 1.18e-04, warn``."""
        return f"{label(self.row)} ({'; '.join(f.text() for f in self.faster)}): {self.why}"


@dataclass(frozen=True)
class Verdict:
    """One comparison's verdict: its group, the picks, or why nothing qualified; the faster
    rows left out and the rows timed under load."""

    problem: str
    group: dict[str, Any]
    qualified: int
    picks: tuple[Pick, ...]
    reason: str | None
    #: what a qualifying row is, for the sentence of a lone one
    noun: str = "row with a passing gradient"
    left_out: tuple[LeftOut, ...] = ()
    #: rows accurate enough whose others_cpu exceeded LOAD_LIMIT: left out for the load
    loaded: tuple[dict[str, Any], ...] = ()
    #: the gradient accuracy judged against (None: a kind without gradients, CNN)
    gradient_rtol: float | None = None
    #: the picks come from rows timed under load (``loaded``), none being quiet: the
    #: answer as it would be, said to be provisional, with the load and the firm command
    provisional: bool = False
    #: others' cores up to which a row counted as quiet (``--load-limit``)
    load_limit: float = LOAD_LIMIT
    #: when nothing qualifies: what would likely make a row qualify (:mod:`next_step`)
    next_step: str | None = None

    def text(self) -> str:
        """One line (wrapped by :func:`lines`)."""
        where = [_group_label(k, v, self.group) for k, v in self.group.items()
                 if k != "_size_name"]  # fmt: skip
        if self.gradient_rtol is not None and self.gradient_rtol != DEFAULT_GRADIENT_RTOL:
            where.append(f"gradient error ≤ {_sci(self.gradient_rtol)}")
        head = f"verdict{' (' + ', '.join(where) + ')' if where else ''}:"
        if self.provisional:
            head += " provisional, timed under load:"
        return f"{head} {self._body()}"

    def _body(self) -> str:
        """The picks (or why none), the faster rows left out, the rows timed under load,
        and the next step."""
        # beside faster rows left out for their errors, the winners show theirs
        err = bool(self.left_out)
        if self.reason:
            body = self.reason
        elif (len(self.loaded) if self.provisional else self.qualified) == 1:
            lone = self.picks[0].winner
            times = ", ".join(f"{p.criterion} {_seconds(p.winner[p.key])}" for p in self.picks)
            body = f"{label(lone)} is the only {self.noun} ({times}{_error_text(lone, err)})"
        else:
            body = "; ".join(_pick_text(p, err) for p in self.picks)
        if self.left_out:
            named = "; ".join(x.text() for x in self.left_out[:MAX_LEFT_OUT])
            more = len(self.left_out) - MAX_LEFT_OUT
            body += f"; faster but left out: {named}"
            body += f"; and {more} more (--json lists them)" if more > 0 else ""
        if self.provisional:
            body += (f"; {'it was' if len(self.loaded) == 1 else 'every such row was'} "
                     f"{sharing.under_load(self.loaded, self.load_limit)}; "
                     f"{sharing.firm_command(self.loaded)}")  # fmt: skip
        elif self.loaded:
            body += (f"; left out, timed under load (others_cpu above {self.load_limit:g} "
                     "cores): " + ", ".join(f"{label(r)} ({others_load(r):.2f})"
                                           for r in self.loaded)
                     + f" (--load-limit {sharing.suggested_limit(self.loaded):g} counts them)")
        if self.next_step:
            body += f"; next step: {self.next_step}"
        return body

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` record: ``kind = "verdict"`` (see docs/results-schema.md)."""
        out: dict[str, Any] = {"kind": "verdict", "problem": self.problem}
        out.update({k: v for k, v in self.group.items() if not k.startswith("_")})
        if "_run" in self.group:
            out["run"] = self.group["_run"]
        out["qualified"] = self.qualified
        out["noise_floor"] = NOISE_FLOOR
        out["reason"] = self.reason
        out["provisional"] = self.provisional
        out["load_limit"] = self.load_limit
        out["next_step"] = self.next_step
        if self.gradient_rtol is not None:
            out["gradient_rtol"] = self.gradient_rtol
        for p in self.picks:
            out[p.criterion.replace(" ", "_")] = {
                "winner": _row_id(p.winner), "s": p.winner[p.key],
                "runner_up": None if p.runner_up is None else _row_id(p.runner_up),
                "runner_up_s": None if p.runner_up is None else p.runner_up[p.key],
                "ratio": p.ratio, "floor": p.floor,
                "floor_source": p.measured_floor.source, "clears_noise": p.clears_noise,
            }  # fmt: skip
        out["left_out"] = [
            {"row": _row_id(x.row), "why": x.why, "gradient_error": x.row.get("gradient_error"),
             "faster": {f.criterion.replace(" ", "_"): {"s": f.seconds, "ratio": f.ratio,
                        "floor": f.floor, "floor_source": f.floor_source,
                        "clears_noise": f.clears_noise} for f in x.faster}}
            for x in self.left_out
        ]  # fmt: skip
        out["loaded"] = [{"row": _row_id(r), "others_cpu": others_load(r)} for r in self.loaded]
        out["text"] = self.text()
        return out


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _row_id(r: dict[str, Any]) -> dict[str, Any]:
    keys = (*LABEL_KEYS, "jacobian", "device", "dtype", "size", "rtol", "dt")
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


def _times(r: float) -> str:
    return f"{r:.2f}x" if r < 10 else f"{r:.3g}x"


def _sci(x: float) -> str:
    """``1e-04``, ``1.5e-04``: a tolerance as the table prints one (table.fmt_rtol)."""
    mant, exp = f"{float(x):.2e}".split("e")
    return f"{mant.rstrip('0').rstrip('.')}e{exp}"


def _group_label(key: str, value: Any, group: dict[str, Any]) -> str:
    if key == "rtol":  # as the table prints a tolerance (table imports this module)
        return f"rtol {_sci(value)}"
    if key == "size":  # as the problem names it (N=32, width=200), else n (members)
        return f"{group.get('_size_name') or 'n'}={value}"
    if key == "_run":
        return f"file {value}"
    return f"{key} {value}"


def _error_text(r: dict[str, Any], shown: bool) -> str:
    """``, gradient error 8.25e-05`` where ``shown`` and the row has one."""
    e = _error(r)
    return f", gradient error {e:.2e}" if shown and e is not None else ""


def _pick_text(p: Pick, with_error: bool = False) -> str:
    t = p.winner[p.key]
    head = f"{p.criterion}: {label(p.winner)} ({_seconds(t)}{_error_text(p.winner, with_error)})"
    if p.runner_up is None:
        return f"{head}, the only qualifying row with this timing"
    times = _times(p.ratio or 1.0)
    other = f"{label(p.runner_up)} ({_seconds(p.runner_up[p.key])})"
    floor = p.measured_floor.text()
    if p.clears_noise:
        return f"{head}, {times} faster than {other}, {floor}"
    return f"{head} and {other} tie at {times}, {floor}"


def _error(r: dict[str, Any]) -> float | None:
    e = r.get("gradient_error")
    return float(e) if isinstance(e, int | float) and not isinstance(e, bool) else None


def accurate(r: dict[str, Any], rtol: float) -> bool:
    """``gradient_error <= rtol`` (NaN never is), against a reference able to judge it at
    that bound: its own error estimate at most ``rtol / 10``
    (:func:`~sciml_bench.measure.metrics.within`), the rule the tiers follow at theirs.
    A row without a stored estimate (older files) keeps its tier's word."""
    e = _error(r)
    if e is None:
        return False
    ref_err = r.get("reference_error")
    if isinstance(ref_err, int | float) and not isinstance(ref_err, bool):
        return within(e, float(ref_err), rtol)
    return e <= rtol and r.get("gradient_tier") != "unjudged"


def qualifies(r: dict[str, Any], rtol: float = PASS_TOL, load_limit: float | None = None) -> bool:
    """Whether an ODE row counts in a verdict (and in a ladder's summaries): ``ok``, its
    gradient judged within ``rtol`` (:func:`accurate`), not timed under load (others'
    CPU above ``load_limit`` cores; None: the limit in force, ``--load-limit``)."""
    return _qualifies_ode(r, rtol, load_limit)


def _loaded(r: dict[str, Any], limit: float | None = None) -> bool:
    return loaded(r, limit)


def _has_gradient(r: dict[str, Any]) -> bool:
    """Whether a row computed a gradient (SciPy's rows solve only: their TTFG is a solve)."""
    if r.get("gradient_method") == "none" or r.get("ttfg_kind") == "solve":
        return False
    return _error(r) is not None or bool(r.get("gradient_error_note")) or _finite(r.get("grad_s"))


def _qualifies_ode(r: dict[str, Any], rtol: float, limit: float | None = None) -> bool:
    return r.get("status") == "ok" and accurate(r, rtol) and not _loaded(r, limit)


def _qualifies_cnn(r: dict[str, Any], _rtol: float, _limit: float | None = None) -> bool:
    return (r.get("status") == "ok" and not r.get("trained_to_chance")
            and not r.get("precision_flagged"))  # fmt: skip


def _short_of(rtol: float) -> str:
    """What a row lacks that does not reach ``rtol``: a passing gradient by default."""
    if rtol == DEFAULT_GRADIENT_RTOL:
        return "a passing gradient"
    return f"a gradient error ≤ {_sci(rtol)}"


def _why_left_out(r: dict[str, Any], rtol: float) -> str:
    """Why a row that computed a gradient does not qualify (it is ``ok`` and not loaded)."""
    e = _error(r)
    if e is None:
        note = r.get("gradient_error_note")
        return f"gradient not scored ({note})" if note else "gradient not scored"
    tier = r.get("gradient_tier") or ("fail" if not math.isfinite(e) or e > WARN_TOL
                                      else "pass" if e <= PASS_TOL else "warn")  # fmt: skip
    why = f"gradient error {e:.2e}, {tier}"
    ref_err = r.get("reference_error")
    if (e <= rtol and isinstance(ref_err, int | float) and math.isfinite(e)
            and ref_err > JUDGE_MARGIN * rtol):  # fmt: skip
        return (f"{why}: within the {_sci(rtol)} asked, but the reference's own error "
                f"estimate {ref_err:.2e} is above {_sci(JUDGE_MARGIN * rtol)}, a tenth of it: "
                "unjudged at that bound")  # fmt: skip
    if tier == "unjudged":  # the reference's own error is too large to tell
        return f"{why} ({r['gradient_tier_note']})" if r.get("gradient_tier_note") else why
    return why if rtol == DEFAULT_GRADIENT_RTOL else f"{why}, above the {_sci(rtol)} asked"


def _why_none_ode(rows: Sequence[dict[str, Any]], rtol: float = DEFAULT_GRADIENT_RTOL,
                  limit: float | None = None) -> str:  # fmt: skip
    """Why no row of a comparison qualifies, in one sentence."""
    ok = [r for r in rows if r.get("status") == "ok"]
    if not ok:
        counts = Counter(str(r.get("status", "?")) for r in rows)
        return "no row finished (" + ", ".join(f"{s} {n}" for s, n in counts.items()) + ")"
    scored = [r for r in ok if isinstance(r.get("gradient_error"), int | float)]
    if not scored:
        names = ", ".join(sorted({label(r) for r in ok}))
        unjudged = [r for r in ok if r.get("gradient_error_note") and _has_gradient(r)]
        if unjudged:
            return (f"gradients computed but not judged: {unjudged[0]['gradient_error_note']} "
                    f"(the rows with a gradient: {names})")  # fmt: skip
        return f"no backend computed a gradient (the rows that finished: {names})"
    passing = [r for r in scored if accurate(r, rtol)]
    if passing:  # all of them loaded, or there would be a qualifying row
        names = ", ".join(f"{label(r)} (others_cpu {others_load(r):.2f}{_times_of(r)})"
                          for r in passing)  # fmt: skip
        return (f"every row with {_short_of(rtol)} was timed under load (others_cpu above "
                f"{load_limit_in_force() if limit is None else limit:g} cores) and none has timings to "
                f"name a winner by: {names}; rerun them on an otherwise idle machine")
    best = min(scored, key=lambda r: (math.isnan(r["gradient_error"]), r["gradient_error"]))
    tier = best.get("gradient_tier") or "no tier"
    return (f"no backend produced {_short_of(rtol)} (the best: {label(best)}, gradient "
            f"error {best['gradient_error']:.2e}, {tier}){_fastest_near_miss(scored, best)}")


def _fastest_near_miss(scored: Sequence[dict[str, Any]], best: dict[str, Any]) -> str:
    """``; the fastest within the warn tier: ...`` where that is not the most accurate row
    already named: the row a reader who can live with a ``warn`` gradient would take."""
    near = [r for r in scored if accurate(r, WARN_TOL)
            and any(_finite(r.get(k)) for _, k in ODE_CRITERIA)]  # fmt: skip
    if not near:
        return ""
    fastest = min(near, key=lambda r: tuple(float(r[k]) if _finite(r.get(k)) else math.inf
                                            for _, k in ODE_CRITERIA))  # fmt: skip
    if fastest is best:
        return ""
    load = f", timed under load (others_cpu {others_load(fastest):.2f})" if _loaded(fastest) else ""
    return (f"; the fastest within the warn tier: {label(fastest)} "
            f"({_times_of(fastest).removeprefix(', ')}), gradient error "
            f"{fastest['gradient_error']:.2e}{load}")


def _times_of(r: dict[str, Any]) -> str:
    """``, steady gradient 33 ms, first gradient 900 ms``: a row's timings that exist."""
    return "".join(f", {c} {_seconds(r[k])}" for c, k in ODE_CRITERIA if _finite(r.get(k)))


def _why_none_cnn(rows: Sequence[dict[str, Any]], _rtol: float = DEFAULT_GRADIENT_RTOL,
                  _limit: float | None = None) -> str:  # fmt: skip
    ok = [r for r in rows if r.get("status") == "ok"]
    if not ok:
        counts = Counter(str(r.get("status", "?")) for r in rows)
        return "no variant finished (" + ", ".join(f"{s} {n}" for s, n in counts.items()) + ")"
    return "no variant trained beyond chance without losing accuracy to its precision"


@dataclass(frozen=True)
class _Kind:
    group_keys: tuple[str, ...]
    criteria: tuple[tuple[str, str], ...]
    qualifies: Callable[[dict[str, Any], float, float | None], bool]
    why_none: Callable[[Sequence[dict[str, Any]], float, float | None], str]
    noun: str = "row with a passing gradient"
    #: rows judged by gradient accuracy and load: faster rows left out are named
    gradients: bool = True


_KINDS = {
    "ode": _Kind(GROUP_KEYS, ODE_CRITERIA, _qualifies_ode, _why_none_ode),
    "ensemble": _Kind(GROUP_KEYS, ODE_CRITERIA, _qualifies_ode, _why_none_ode),
    "cnn": _Kind(CNN_GROUP_KEYS, CNN_CRITERIA, _qualifies_cnn, _why_none_cnn,
                 "variant that trained beyond chance", gradients=False),
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
        if "size" in group and r.get("size_name"):
            group["_size_name"] = r["size_name"]
        out.setdefault(tuple(repr(v) for v in group.values()), (group, []))[1].append(r)
    if not out:
        return [({}, list(rows))]
    return [(group, members + unplaced) for group, members in out.values()]


def _pick(rows: list[dict[str, Any]], criterion: str, key: str,
          pool_rows: Sequence[dict[str, Any]] = ()) -> Pick | None:  # fmt: skip
    """The fastest of ``rows`` by ``key`` and its runner-up; a steady pick's floor pools
    the between-process spread of ``pool_rows`` (the run's rows it is judged among)."""
    timed = sorted((r for r in rows if _finite(r.get(key))), key=lambda r: float(r[key]))
    if not timed:
        return None
    pool = run_pool(pool_rows or rows, key) if criterion in ONE_PROCESS else None
    return Pick(criterion, key, timed[0], timed[1] if len(timed) > 1 else None, pool)


def _bar(p: Pick) -> float:
    """The time a left-out row must beat to be named: the runner-up's, else the winner's."""
    return float((p.runner_up or p.winner)[p.key])


def _left_out(
    members: Sequence[dict[str, Any]], picks: Sequence[Pick], rtol: float
) -> tuple[LeftOut, ...]:
    """The ``ok`` rows with a gradient short of ``rtol`` that beat a winner (or, where it
    has one, its runner-up: the row a reader sees between the two) by some criterion,
    those within the warn tier first, then the fastest, each with its ratios and why it
    was left out (loaded or not: its error leaves it out regardless; accurate rows under
    load are named apart)."""
    out = []
    for r in members:
        if r.get("status") != "ok" or accurate(r, rtol) or not _has_gradient(r):
            continue
        faster = tuple(
            Faster(p.criterion, float(r[p.key]), float(p.winner[p.key]) / float(r[p.key]),
                   (f := floor_of(p.criterion, p.key, r, p.winner, p.pool)).value, f.source)
            for p in picks if _finite(r.get(p.key)) and float(r[p.key]) < _bar(p)
        )  # fmt: skip
        if faster:
            out.append(LeftOut(r, _why_left_out(r, rtol), faster))
    # the near misses (within the warn tier) first, as the reader's alternatives; then speed
    return tuple(sorted(out, key=lambda x: (not accurate(x.row, max(rtol, WARN_TOL)),
                                            -max(f.ratio for f in x.faster))))  # fmt: skip


def _verdict(problem: str, spec: _Kind, group: dict[str, Any], members: list[dict[str, Any]],
             rtol: float, limit: float, run_rows: Sequence[dict[str, Any]] = ()) -> Verdict:  # fmt: skip
    """One comparison's verdict under ``spec``'s rules, judged against ``rtol``, rows timed
    with others' CPU above ``limit`` cores counted as loaded. Where every row that would
    qualify was loaded, the picks come from those rows and the verdict is provisional.
    A steady floor pools the between-process spread of ``run_rows`` (the problem's rows
    of this kind in the same file) that qualify as the picks' rows do."""
    good = [r for r in members if spec.qualifies(r, rtol, limit)]
    pool = [r for r in run_rows if spec.qualifies(r, rtol, limit)] or good
    picks = tuple(p for c, k in spec.criteria if (p := _pick(good, c, k, pool)) is not None)
    reason = None
    if not good:
        reason = spec.why_none(members, rtol, limit)
    elif not picks:
        reason = "no qualifying row has timings (an interrupted run?)"
    if not spec.gradients:
        return Verdict(problem, group, len(good), picks, reason, spec.noun)
    noun = "row with " + _short_of(rtol).removeprefix("a ")
    noun = spec.noun if rtol == DEFAULT_GRADIENT_RTOL else noun
    # rows that would qualify but for the load (the others are left out by their error)
    loaded = tuple(r for r in members
                   if r.get("status") == "ok" and accurate(r, rtol) and _loaded(r, limit))  # fmt: skip
    provisional = False
    if not good and loaded:  # never withhold the answer: the loaded rows' winner, provisional
        heavy = [r for r in run_rows if r.get("status") == "ok" and accurate(r, rtol)
                 and _loaded(r, limit)] or list(loaded)  # fmt: skip
        picks = tuple(p for c, k in spec.criteria
                      if (p := _pick(list(loaded), c, k, heavy)) is not None)  # fmt: skip
        provisional = bool(picks)
        reason = None if provisional else reason
    step = next_step.suggest(members, rtol) if reason and not good and not loaded else None
    return Verdict(problem, group, len(good), picks, reason, noun,
                   _left_out(members, picks, rtol) if picks else (),
                   () if reason and "under load" in reason else loaded, rtol,
                   provisional, limit, step)  # fmt: skip


def verdicts(
    records: Sequence[dict[str, Any]], gradient_rtol: float | None = None,
    load_limit: float | None = None,
) -> list[Verdict]:  # fmt: skip
    """Every comparison's verdict, problem by problem in the order the records came; ODE
    and ensemble rows qualify with ``gradient_error <= gradient_rtol`` (None: the default,
    the *pass* tier) and others' CPU at most ``load_limit`` cores (None: the limit in
    force, :func:`~sciml_bench.measure.noise.load_limit`, ``--load-limit``)."""
    rtol = DEFAULT_GRADIENT_RTOL if gradient_rtol is None else float(gradient_rtol)
    if not (rtol > 0 and math.isfinite(rtol)):
        raise ValueError(f"gradient_rtol must be a positive number, not {gradient_rtol!r}")
    limit = _limit(load_limit)
    by_problem: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        kind = _kind(r)
        if kind in _KINDS:
            by_problem.setdefault((str(r.get("problem", "?")), kind), []).append(r)
    return [
        _verdict(problem, _KINDS[kind], group, members, rtol, limit,
                 [r for r in rows if r.get("_run") == group.get("_run", r.get("_run"))])
        for (problem, kind), rows in by_problem.items()
        for group, members in _groups(rows, _KINDS[kind].group_keys)
    ]  # fmt: skip


def _limit(load_limit: float | None) -> float:
    """``load_limit`` checked (None: the limit in force)."""
    limit = load_limit_in_force() if load_limit is None else float(load_limit)
    if not (limit >= 0 and math.isfinite(limit)):
        raise ValueError(f"load_limit must be a number of cores >= 0, not {load_limit!r}")
    return limit


def lines(
    records: Sequence[dict[str, Any]], width: int = 100, gradient_rtol: float | None = None,
    load_limit: float | None = None,
) -> list[str]:  # fmt: skip
    """The verdicts of ``records`` as terminal lines, each wrapped at ``width``."""
    return [
        textwrap.fill(v.text(), width=width, subsequent_indent="    ")
        for v in verdicts(records, gradient_rtol, load_limit)
    ]


def json_records(
    records: Sequence[dict[str, Any]], gradient_rtol: float | None = None,
    load_limit: float | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """The ``kind = "verdict"`` records that ``--json`` prints after the case records."""
    return [v.to_json() for v in verdicts(records, gradient_rtol, load_limit)]
