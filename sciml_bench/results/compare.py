"""Compare results files: matched cases, ratios of medians, and whether a change is real.

Cases are matched on (problem, backend, solver, gradient method, rtol, device, and for
ensembles semantics and size): a case on the GPU is never paired with the same case on
the CPU, nor one ensemble size with another. For each timing (steady-state solve,
steady-state gradient, time to first gradient across cold processes; CNN epochs) the
ratio NEW/OLD of the medians is shown with a verdict and why.

A timing is reported *slower* or *faster* only when both hold:

1. **A test on the unit that repeats says it differs.** Two runs of identical code
   differ by more than their samples' spread: another process, the CPU's frequency, the
   allocator's state differ between runs, and steady samples of one run share all of
   that. So the statistical unit is the *run* where there are several a side (``compare
   A1.h5,A2.h5,A3.h5 B1.h5,B2.h5,B3.h5``): Welch's t-test on the runs' log medians, as
   pyperf compares values spread over its worker processes. With one run a side it is
   the raw samples (the fresh processes of time to first gradient; the samples of one
   process for steady state): a two-sided Mann–Whitney U test, which assumes neither
   normality nor equal spread, and which shows only a difference beyond that run's own
   spread. Significant at p < :data:`ALPHA` (0.01).
2. **The ratio clears the noise floor** (:mod:`sciml_bench.measure.noise`): identical
   runs on one machine were measured to differ by up to that ratio
   (``benchmarks/compare_false_alarms.py``), so a smaller ratio is never called a
   change, whatever the test says. With one run a side, a steady timing's samples all
   come from one process, and fresh processes of identical code differ by more than the
   run-to-run floor (a Diffrax gradient is bimodal across them: ``benchmarks/README.md``,
   paragraph "The process floor (2026-11-26)"), so those timings must clear
   :data:`~sciml_bench.measure.noise.PROCESS_FLOOR` (2.1x): one run a side catches only
   gross regressions, several runs a side catch small ones.

Limits, stated rather than hidden:

- The smallest two-sided p the exact Mann–Whitney test can reach with n and m samples
  is 2 / C(n+m, n): 0.1 for 3 vs 3, 0.029 for 4 vs 4, 0.0079 for 5 vs 5. Where it
  exceeds alpha the verdict is "n too small", never "no change". ``--quick`` runs (3
  repeats, 1 cold process) can therefore never show a significant change; use
  ``--repeats 10`` (and ``--cold 5`` for TTFG).
- Significance is per comparison, not corrected for multiple comparisons; the
  geometric-mean row summarizes without a test.

Status changes are always reported: ok → a failure, a failure → ok, and a
gradient tier getting worse (pass → warn → fail) or better.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sciml_bench.measure.noise import (
    LOAD_LIMIT,
    NOISE_FLOOR,
    PROCESS_FLOOR,
    clears_noise,
    floor_for,
    others_load,
)

#: significance level of the two-sided Mann–Whitney U test
ALPHA = 0.01
#: (name, raw-sample key) of the timings compared
METRICS = (
    ("solve", "solve_samples"),
    ("grad", "grad_samples"),
    ("ttfg", "ttfg_samples"),
    ("epoch", "epoch_s"),
    ("iteration", "iteration_samples"),
)
TIER_RANK = {"pass": 0, "warn": 1, "fail": 2}

SLOWER, FASTER, SAME, TOO_FEW, CHANGED, IN_NOISE, LOADED = (
    "slower", "faster", "no significant change", "n too small", "different",
    "inside noise floor", "not judged: loaded",
)  # fmt: skip
#: what a timing's test was run on, by metric, with one run a side
SAMPLE_UNITS = {"solve": "samples of one process", "grad": "samples of one process",
                "ttfg": "fresh processes", "epoch": "epochs of one process",
                "iteration": "iterations of one process"}  # fmt: skip
#: the unit with several runs a side
RUNS = "runs"


#: (problem, backend, solver, gradient method, rtol, device, semantics, size, variant)
CaseKey = tuple[str, str, str, str, str, str, str, str, str]
DEVICE = 5  # the key's device field


def case_key(r: dict[str, Any]) -> CaseKey:
    """What identifies a case across runs; rtol compared to 3 significant digits.

    The device is the one the row ran on (read back), else the one asked for, else
    ``?`` (a version-1 file from a machine with a GPU): unknown pairs only with unknown.
    An ensemble row is also its semantics and size (both empty for other rows): the
    rungs of a ladder are different cases. A CNN row is also its model, precision,
    pipeline and dataset (``variant``): bf16 is never compared with fp32. Likewise an ODE
    row's ``variant`` holds its dtype when not float64 and its fixed step ``dt``.
    """
    rtol = r.get("rtol")
    rt = f"{rtol:.3g}" if isinstance(rtol, int | float) and math.isfinite(rtol) else "-"
    variant = "train" if r.get("kind") == "train" else ""  # a training row is its own case
    if r.get("kind") == "cnn":
        variant = "/".join(str(r.get(k) or "-") for k in ("model", "precision", "pipeline",
                                                           "dataset"))  # fmt: skip
    else:  # a float32 or fixed-step row (--dtype, --dt) is never paired with float64's
        numerics = [str(r["dtype"])] if r.get("dtype") not in (None, "", "float64") else []
        if isinstance(r.get("dt"), int | float):
            numerics.append(f"dt={r['dt']:g}")
        variant = "/".join([variant, *numerics] if variant else numerics)
    return (
        str(r.get("problem", "?")),
        str(r.get("backend", "")),
        str(r.get("solver", "")),
        str(r.get("gradient_method", "")),
        rt,
        str(r.get("device") or r.get("device_requested") or "?"),
        # an array problem's ladders differ by their Jacobian kind (dense, sparse) instead
        str(r.get("semantics") or r.get("jacobian") or ""),
        str(r["size"]) if r.get("size") is not None else "",
        variant,
    )


def key_label(key: CaseKey, status: str | None = None) -> str:
    """A case key as words, the problem left out: ``diffrax Kvaerno5 ... on cpu n=16``.

    A row that names no device says why instead of ``on ?``: it ran nowhere (an
    ``unavailable`` or ``skipped`` row, given as ``status``), or it comes from a version-1
    file that did not record one."""
    _, backend, solver, grad, rtol, device, semantics, size, variant = key
    parts = [backend, solver, grad if grad not in ("", "none") else "", semantics, variant]
    if device != "?":
        where = f" on {device}"
    elif status in ("unavailable", "skipped"):
        where = f" ({status}: not run)"
    else:
        where = " (device not recorded)"
    return (
        " ".join(p for p in parts if p)
        + (f" rtol={_fmt_rtol(rtol)}" if rtol != "-" else "")
        + where
        + (f" n={size}" if size else "")
    )


def _fmt_rtol(rtol: str) -> str:
    """``0.0001`` -> ``1e-04``, ``2.5e-05`` -> ``2.5e-05``."""
    mant, exp = f"{float(rtol):.2e}".split("e")
    return f"{mant.rstrip('0').rstrip('.')}e{exp}"


def min_p(n: int, m: int) -> float:
    """Smallest two-sided p of the exact Mann–Whitney U test with n and m samples."""
    if n < 1 or m < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(n + m, n))


@dataclass
class Change:
    """One timing of one matched case: medians, ratio NEW/OLD, p, verdict and why.

    ``n_old``/``n_new`` count the units tested (``unit``: samples, fresh processes or
    runs); ``floor`` is the noise floor the ratio had to clear.
    """

    metric: str
    old_median: float
    new_median: float
    ratio: float
    p: float
    n_old: int
    n_new: int
    verdict: str
    unit: str = "samples"
    floor: float = NOISE_FLOOR
    why: str = ""

    @property
    def significant(self) -> bool:
        return self.verdict in (SLOWER, FASTER, CHANGED)


def decide(ratio: float, p: float, smallest_p: float, alpha: float, floor: float) -> tuple[str, str]:
    """The verdict on one timing and why, in a few words.

    In order: the test cannot reach ``alpha`` with these counts (``n too small``); the
    ratio is inside the noise floor (never a change, whatever p); the test finds no
    difference beyond the units' spread; else slower or faster. (:func:`judge_load`
    then sets aside timings measured under load.)
    """
    if smallest_p > alpha:
        return TOO_FEW, f"min p {smallest_p:.2g} > {alpha:g}"
    if not clears_noise(ratio, floor):
        return IN_NOISE, f"{ratio:.3f}x within {floor:g}x"
    if p >= alpha:
        return SAME, f"p {p:.2g} >= {alpha:g}"
    verdict = SLOWER if ratio > 1 else FASTER if ratio < 1 else CHANGED
    return verdict, f"p {p:.2g} < {alpha:g}, {ratio:.3f}x beyond {floor:g}x"


def _finite(x: Sequence[float]) -> np.ndarray:
    a = np.asarray(x, dtype=float).ravel()
    return a[np.isfinite(a)]


def compare_samples(
    metric: str, old: Sequence[float], new: Sequence[float], alpha: float = ALPHA,
    floor: float = NOISE_FLOOR, unit: str | None = None,
) -> Change | None:
    """Compare the raw samples of one run a side (two-sided Mann–Whitney U); ``None``
    when either side is empty."""
    from scipy.stats import mannwhitneyu

    a, b = _finite(old), _finite(new)
    if not a.size or not b.size:
        return None
    mo, mn = float(np.median(a)), float(np.median(b))
    ratio = mn / mo if mo > 0 else math.inf
    p = float(mannwhitneyu(b, a, alternative="two-sided").pvalue)
    p = 1.0 if math.isnan(p) else p  # all samples tied
    unit = unit or SAMPLE_UNITS.get(metric, "samples")
    floor = floor_for(unit, floor)
    verdict, why = decide(ratio, p, min_p(a.size, b.size), alpha, floor)
    return Change(metric, mo, mn, ratio, p, int(a.size), int(b.size), verdict, unit, floor,
                  why)  # fmt: skip


def run_center(samples: Sequence[float], takers: Sequence[int] | None = None) -> float:
    """One run's value of a timing: the geometric mean of its processes' medians, where its
    samples say which process took each (``takers``), else its samples' median."""
    a = np.asarray(samples, dtype=float)
    if takers is None or len(takers) != a.size:
        return float(np.median(a[np.isfinite(a)]))
    who = np.asarray(takers)
    keep = np.isfinite(a)
    medians = [np.median(a[keep & (who == k)]) for k in np.unique(who[keep])]
    return float(np.exp(np.mean(np.log(medians)))) if all(m > 0 for m in medians) else math.nan


def _pooled_unit(metric: str, olds: list[tuple[Any, Any]], news: list[tuple[Any, Any]]) -> str | None:
    """What pooled samples of one run on a side are: None for one run of one process a side
    (:data:`SAMPLE_UNITS`), else how many runs or processes were pooled; a steady timing
    pooled so is still judged against the process floor (``one run on a side``)."""
    def procs(side: list[tuple[Any, Any]]) -> int:
        return sum(len(set(t)) if t is not None else 1 for _, t in side)

    steady = metric in ("solve", "grad", "epoch", "iteration")
    if len(olds) == len(news) == 1:
        po, pn = procs(olds), procs(news)
        if po == pn == 1 or not steady:
            return None
        return f"samples of {po} vs {pn} processes (one run on a side)"
    unit = f"samples of {len(olds)} vs {len(news)} runs"
    return unit + " (one run on a side)" if steady else unit


def compare_runs(
    metric: str, old: Sequence[Sequence[float]], new: Sequence[Sequence[float]],
    alpha: float = ALPHA, floor: float = NOISE_FLOOR,
    old_takers: Sequence[Sequence[int] | None] | None = None,
    new_takers: Sequence[Sequence[int] | None] | None = None,
) -> Change | None:
    """Compare one timing measured in several runs a side.

    With two or more runs holding samples on each side, the unit is the run: each run's
    value (:func:`run_center`: its processes' medians averaged, so that one process's luck
    does not become the run's), and Welch's t-test (unequal variances) on their
    logarithms, since timings spread multiplicatively; the medians shown are the medians
    of the runs' values. Otherwise (one run on a side) every run's samples are pooled and
    compared as :func:`compare_samples` does. ``None`` when a side has no sample.
    ``old_takers``/``new_takers``: per run, the process that took each sample (or None).
    """
    from scipy.stats import ttest_ind

    def runs(side: Sequence[Sequence[float]], takers: Any) -> list[tuple[np.ndarray, Any]]:
        takers = takers or [None] * len(side)
        out = []
        for x, t in zip(side, takers, strict=True):
            if _finite(x).size:
                out.append((np.asarray(x, dtype=float).ravel(), t))
        return out

    olds, news = runs(old, old_takers), runs(new, new_takers)
    if not olds or not news:
        return None
    if len(olds) < 2 or len(news) < 2:
        return compare_samples(metric, np.concatenate([a for a, _ in olds]),
                               np.concatenate([b for b, _ in news]), alpha, floor,
                               _pooled_unit(metric, olds, news))  # fmt: skip
    mo_runs = np.array([run_center(a, t) for a, t in olds])
    mn_runs = np.array([run_center(b, t) for b, t in news])
    mo, mn = float(np.median(mo_runs)), float(np.median(mn_runs))
    ratio = mn / mo if mo > 0 else math.inf
    if np.all(mo_runs > 0) and np.all(mn_runs > 0):
        p = float(ttest_ind(np.log(mn_runs), np.log(mo_runs), equal_var=False).pvalue)
    else:
        p = math.nan
    p = 1.0 if math.isnan(p) else p  # every run's median equal on both sides
    verdict, why = decide(ratio, p, 0.0, alpha, floor)
    return Change(metric, mo, mn, ratio, p, len(olds), len(news), verdict, RUNS, floor, why)


def judge_load(ch: Change, old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]],
               limit: float) -> Change:
    """``ch`` not judged (``not judged: loaded``) when a row on either side ran while other
    processes took more than ``limit`` cores' worth of CPU (its ``others_cpu``): identical
    runs under load differ by far more than the noise floor, which was measured quiet. A
    timing the test could not judge anyway stays ``n too small``."""
    worst: tuple[float, str] | None = None
    for side, rows in (("OLD", old), ("NEW", new)):
        for r in rows:
            load = others_load(r)
            if load is not None and load > limit and (worst is None or load > worst[0]):
                worst = (load, side)
    if worst is None or ch.verdict == TOO_FEW:
        return ch
    ch.verdict, ch.why = LOADED, f"others used {worst[0]:.2f} cores ({worst[1]})"
    return ch


@dataclass
class CaseComparison:
    key: CaseKey
    #: the case's record in the first OLD and the first NEW run that hold it
    old: dict[str, Any]
    new: dict[str, Any]
    changes: list[Change] = field(default_factory=list)
    #: status and gradient-tier changes, as sentences
    status_changes: list[str] = field(default_factory=list)
    regressed: bool = False
    #: the case's record in every run of each side (one each for two files)
    old_runs: list[dict[str, Any]] = field(default_factory=list)
    new_runs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return key_label(self.key, self.new.get("status"))


@dataclass
class Comparison:
    alpha: float
    cases: list[CaseComparison]
    only_old: list[dict[str, Any]]
    only_new: list[dict[str, Any]]
    #: the noise floor every ratio had to clear
    floor: float = NOISE_FLOOR
    #: runs on each side
    runs_old: int = 1
    runs_new: int = 1
    #: rows whose others_cpu exceeds this many cores are not judged
    load_limit: float = LOAD_LIMIT

    def loaded(self) -> list[Change]:
        return [c for cc in self.cases for c in cc.changes if c.verdict == LOADED]

    def geomean(self, metric: str) -> tuple[float, int] | None:
        """Geometric mean of the ratios of one timing over every matched case."""
        ratios = [
            c.ratio for cc in self.cases for c in cc.changes
            if c.metric == metric and 0 < c.ratio < math.inf
        ]  # fmt: skip
        if not ratios:
            return None
        return float(np.exp(np.mean(np.log(ratios)))), len(ratios)

    def slowdowns(self, threshold: float) -> list[tuple[CaseComparison, Change]]:
        """Significant slowdowns whose ratio exceeds ``threshold``."""
        return [
            (cc, c) for cc in self.cases for c in cc.changes
            if c.verdict == SLOWER and c.ratio > threshold
        ]  # fmt: skip

    def status_regressions(self) -> list[CaseComparison]:
        return [cc for cc in self.cases if cc.regressed]


def _status_changes(old: dict[str, Any], new: dict[str, Any]) -> tuple[list[str], bool]:
    """Sentences describing status / gradient-tier changes, and whether any is a regression."""
    out: list[str] = []
    regressed = False
    so, sn = old.get("status"), new.get("status")
    if so != sn:
        reason = f": {new.get('reason')}" if sn != "ok" and new.get("reason") else ""
        out.append(f"status {so} → {sn}{reason}")
        regressed = so == "ok"
    to, tn = old.get("gradient_tier") or "", new.get("gradient_tier") or ""
    if so == sn == "ok" and to != tn:
        if to and not tn:
            out.append(f"gradient {to} → not computed")
            regressed = True
        elif tn:
            worse = TIER_RANK.get(tn, 2) > TIER_RANK.get(to, -1) if to else False
            ge_o, ge_n = old.get("gradient_error"), new.get("gradient_error")
            detail = ""
            if isinstance(ge_o, float) and isinstance(ge_n, float):
                detail = f" (error {ge_o:.1e} → {ge_n:.1e})"
            out.append(f"gradient {to or 'none'} → {tn}{detail}")
            regressed = regressed or worse
    return out, regressed


def compare(
    old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]], alpha: float = ALPHA,
    floor: float = NOISE_FLOOR, load_limit: float = LOAD_LIMIT,
) -> Comparison:
    """Match the records of two runs and test every timing both measured."""
    return compare_many([old], [new], alpha, floor, load_limit)


def by_case(runs: Sequence[Sequence[dict[str, Any]]]) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    """Each case's records across runs, in run order. A case repeated within one file is
    told apart by its occurrence (the 2nd pairs with the 2nd), as before."""
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for records in runs:
        seen: dict[CaseKey, int] = {}
        for r in records:
            k = case_key(r)
            seen[k] = seen.get(k, 0) + 1
            out.setdefault((k, seen[k]), []).append(r)
    return out


def compare_many(
    old_runs: Sequence[Sequence[dict[str, Any]]], new_runs: Sequence[Sequence[dict[str, Any]]],
    alpha: float = ALPHA, floor: float = NOISE_FLOOR, load_limit: float = LOAD_LIMIT,
) -> Comparison:
    """Match the records of several runs a side (each a file's records) and test every
    timing both sides measured, with the run as the unit where each side has two or
    more runs (:func:`compare_runs`); timings of rows measured under load are not judged
    (:func:`judge_load`)."""
    old, new = by_case(old_runs), by_case(new_runs)
    cases: list[CaseComparison] = []
    only_new: list[dict[str, Any]] = []
    for ukey, news in new.items():
        olds = old.pop(ukey, None)
        if not olds:
            only_new.append(news[0])
            continue
        o, r = olds[0], news[0]
        cc = CaseComparison(ukey[0], o, r, old_runs=olds, new_runs=news)
        for metric, key in METRICS:
            who = key.replace("_samples", "_sample_process")
            ch = compare_runs(metric, [x.get(key) or [] for x in olds],
                              [x.get(key) or [] for x in news], alpha, floor,
                              [x.get(who) for x in olds], [x.get(who) for x in news])  # fmt: skip
            if ch is not None:
                cc.changes.append(judge_load(ch, olds, news, load_limit))
        cc.status_changes, cc.regressed = _status_changes(o, r)
        cases.append(cc)
    only_old = [rs[0] for rs in old.values()]
    return Comparison(alpha, cases, only_old, only_new, floor, len(old_runs), len(new_runs),
                      load_limit)  # fmt: skip


def mixed_hardware(comp: Comparison) -> list[CaseComparison]:
    """Matched cases measured on different hardware, in any of their runs (the records'
    ``hardware`` labels differ; a record without one, from an older file, is not judged)."""
    out = []
    for cc in comp.cases:
        labels = {r.get("hardware") for r in (*cc.old_runs, *cc.new_runs) or (cc.old, cc.new)}
        if len(labels - {None, ""}) > 1:
            out.append(cc)
    return out


def hardware_pair(cc: CaseComparison) -> tuple[str, str]:
    """Two hardware labels a mixed case was measured on, OLD's first (for the error line)."""
    labels = [str(r["hardware"]) for r in (cc.old, *cc.old_runs, cc.new, *cc.new_runs)
              if r.get("hardware")]  # fmt: skip
    return labels[0], next((x for x in labels if x != labels[0]), labels[0])


def order_note(old_created: Sequence[str], new_created: Sequence[str]) -> str | None:
    """A note when several runs a side were not interleaved in time (every run of one side
    made before every run of the other; ``created``: each run's ISO 8601 UTC time), else
    None. The run as the unit then measures the machine's drift between the two sessions
    too, which Welch's t can report as a change: this project's machine drifted between
    the first and second halves of 20 identical runs enough for a timing to be reported,
    where odd against even runs reported none (``benchmarks/README.md``, paragraph "20
    runs a side, the default now (2026-11-26, evening)", by
    ``benchmarks/compare_false_alarms.py``)."""
    if len(old_created) < 2 or len(new_created) < 2:
        return None
    if max(old_created) < min(new_created) or max(new_created) < min(old_created):
        return ("note: every OLD run was made before every NEW run (or after): the runs as "
                "the unit also measure the machine's drift between the two sessions (1.13x "
                "over 15 minutes here, benchmarks/README.md); interleave them (OLD, NEW, "
                "OLD, NEW, ...) to judge the code alone")  # fmt: skip
    return None


def fmt_time(s: float) -> str:
    """Seconds in the unit that gives three readable digits."""
    if not math.isfinite(s):
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(s) >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def needed_samples(alpha: float) -> int:
    """The fewest samples per side (n vs n) at which the exact test can reach p < alpha."""
    n = 1
    while min_p(n, n) >= alpha:
        n += 1
    return n


def too_few_note(comp: Comparison) -> str | None:
    """One sentence, said once, when no timing at all could be significant (e.g. two
    ``--quick`` runs: 3 repeats and 1 cold process each), with the counts that would do."""
    changes = [c for cc in comp.cases for c in cc.changes]
    if not changes or any(c.verdict != TOO_FEW for c in changes):
        return None
    worst = min(changes, key=lambda c: min_p(c.n_old, c.n_new))
    n = needed_samples(comp.alpha)
    return (
        f"No timing here can be significant: the best-sampled has {worst.n_old} vs "
        f"{worst.n_new} samples, whose smallest possible p is "
        f"{min_p(worst.n_old, worst.n_new):.2g}, above alpha={comp.alpha:g} (--quick runs "
        f"take 3 repeats and 1 cold process). For a usable "
        f"test run both with --repeats 10 (at least {n}) and, for TTFG, --cold {n}."
    )


def _verdict(c: Change, threshold: float | None, said: bool = False) -> str:
    v = c.verdict
    if v == TOO_FEW:
        return v if said else f"n too small (min p {min_p(c.n_old, c.n_new):.2g})"
    if v == SLOWER and threshold is not None and c.ratio > threshold:
        return f"SLOWER > {threshold:g}x"
    return v


def rule(comp: Comparison) -> list[str]:
    """The lines above the table: when a timing is reported, and on what unit."""
    several = comp.runs_old > 1 and comp.runs_new > 1
    test = (f"Welch's t on the log medians of {comp.runs_old} vs {comp.runs_new} runs"
            if several else "Mann-Whitney U on the raw samples, two-sided")  # fmt: skip
    out = [
        f"Reported slower/faster only when the test finds a difference ({test}, "
        f"p < {comp.alpha:g}) AND the ratio median NEW / median OLD is outside the noise "
        f"floor {comp.floor:g}x measured between identical runs (--noise-floor); not "
        f"judged where other processes took more than {comp.load_limit:g} cores while a "
        "row ran (--load-limit)."
    ]
    if not several:
        out.append(
            "One run on a side: a steady timing's samples come from that run's few "
            "processes (one with --cold 1), and fresh "
            "processes of identical code were measured to differ by up to 2.03x, so a steady "
            f"timing is reported only beyond {max(comp.floor, PROCESS_FLOOR):g}x (time to first "
            "gradient, whose samples are fresh processes, keeps the floor above). To judge "
            "smaller changes, give several runs a side (OLD1.h5,OLD2.h5,OLD3.h5 "
            "NEW1.h5,NEW2.h5,NEW3.h5): the run is then the unit and the floor "
            f"{comp.floor:g}x."
        )
    return out


def render(comp: Comparison, threshold: float | None = None) -> str:
    """The comparison as terminal text: a table, then status changes and unmatched cases."""
    from sciml_bench.results.table import render as render_table

    header = ("problem", "case", "timing", "old", "new", "new/old", "p", "n", "verdict", "why")
    note = too_few_note(comp)
    rows = []
    for cc in comp.cases:
        for c in cc.changes:
            rows.append([
                cc.key[0], cc.label, c.metric, fmt_time(c.old_median), fmt_time(c.new_median),
                f"{c.ratio:.3f}x", f"{c.p:.2g}", f"{c.n_old}/{c.n_new}",
                _verdict(c, threshold, note is not None), "" if note else c.why,
            ])  # fmt: skip
        if not cc.changes:
            rows.append([cc.key[0], cc.label, "-", "-", "-", "-", "-", "-", "no timings in both",
                         ""])  # fmt: skip
    for metric, _ in METRICS:
        g = comp.geomean(metric)
        if g:
            rows.append(["geometric mean", f"{g[1]} case(s)", metric, "", "", f"{g[0]:.3f}x",
                         "", "", "no test", ""])  # fmt: skip
    first, *rest = rule(comp)
    out = [first, *([note] if note else []), *rest]  # the note, when there is one, comes first
    loaded = comp.loaded()
    if loaded:
        out.append(f"{len(loaded)} timing(s) not judged: measured while other processes took "
                   f"more than {comp.load_limit:g} cores (the rows' others_cpu); compare runs "
                   "from a quieter machine, or raise --load-limit.")  # fmt: skip
    if threshold is not None and threshold < comp.floor:
        out.append(f"--fail-above {threshold:g} is inside the noise floor: only slowdowns "
                   f"beyond {comp.floor:g}x can be reported.")  # fmt: skip
    out.append(render_table(header, rows) if rows else "(no matched cases)")
    changes = [(cc, s) for cc in comp.cases for s in cc.status_changes]
    if changes:
        out.append("\nStatus changes:")
        out += [
            f"  {'REGRESSION ' if cc.regressed else ''}{cc.key[0]} {cc.label}: {s}"
            for cc, s in changes
        ]
    for title, recs in (("only in OLD", comp.only_old), ("only in NEW", comp.only_new)):
        if recs:
            out.append(f"\nCases {title} (not compared):")
            out += [f"  {r.get('problem', '?')} {key_label(case_key(r), r.get('status'))}"
                    for r in recs]  # fmt: skip
    moved = across_devices(comp)
    if moved:
        out.append(f"\n{len(moved)} of these ran on another device in the other file (e.g. "
                   f"{moved[0]}); timings are compared on one device only: run both on the "
                   "same --device")  # fmt: skip
    return "\n".join(out)


def across_devices(comp: Comparison) -> list[str]:
    """Unpaired cases whose only difference from an unpaired case of the other file is the
    device: ``problem label on OLD-device -> NEW-device``."""

    def bare(k: CaseKey) -> CaseKey:
        return (*k[:DEVICE], "", *k[DEVICE + 1 :])  # type: ignore[return-value]

    new = {bare(case_key(r)): case_key(r)[DEVICE] for r in comp.only_new}
    out = []
    for r in comp.only_old:
        k = case_key(r)
        if bare(k) in new:
            out.append(f"{k[0]} {key_label(k)} -> {new[bare(k)]}")
    return out


def to_json(comp: Comparison, threshold: float | None = None) -> dict[str, Any]:
    """The comparison as plain data (for CI)."""
    several = comp.runs_old > 1 and comp.runs_new > 1
    return {
        "alpha": comp.alpha,
        "test": "welch t on log run medians" if several else "mannwhitneyu two-sided",
        "noise_floor": comp.floor,
        "load_limit": comp.load_limit,
        "not_judged_loaded": len(comp.loaded()),
        "runs_old": comp.runs_old,
        "runs_new": comp.runs_new,
        "rule": " ".join(rule(comp)),
        "note": too_few_note(comp),
        "cases": [
            {
                "problem": cc.key[0], "backend": cc.key[1], "solver": cc.key[2],
                "gradient_method": cc.key[3], "rtol": cc.new.get("rtol"),
                "device": cc.key[5],
                **({"semantics": cc.key[6], "size": int(cc.key[7])} if cc.key[7] else {}),
                **({"variant": cc.key[8]} if cc.key[8] else {}),
                "timings": [
                    {**c.__dict__,
                     "min_p": min_p(c.n_old, c.n_new) if c.unit != RUNS else None,
                     "significant": c.significant} for c in cc.changes
                ],
                "status_changes": cc.status_changes, "regressed": cc.regressed,
            }
            for cc in comp.cases
        ],
        "geomean": {m: comp.geomean(m)[0] for m, _ in METRICS if comp.geomean(m)},
        "only_old": [list(case_key(r)) for r in comp.only_old],
        "only_new": [list(case_key(r)) for r in comp.only_new],
        "fail_above": threshold,
        "slowdowns": [
            {"case": list(cc.key), "timing": c.metric, "ratio": c.ratio, "p": c.p}
            for cc, c in comp.slowdowns(threshold)
        ] if threshold is not None else [],
    }  # fmt: skip
