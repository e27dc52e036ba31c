"""Compare two results files: matched cases, ratios of medians, and whether a change is real.

Cases are matched on (problem, backend, solver, gradient method, rtol, device, and for
ensembles semantics and size): a case on the GPU is never paired with the same case on
the CPU, nor one ensemble size with another. For each timing (steady-state solve,
steady-state gradient, time to first gradient across cold processes; CNN epochs) the
ratio NEW/OLD of the medians
is shown with a two-sided Mann–Whitney U test on the raw samples
(``scipy.stats.mannwhitneyu``), which assumes neither normality nor equal
spread. A change is *significant* when p < :data:`ALPHA` (0.01: with tens of
cases and three timings each, 0.05 would flag a few changes in every
comparison of two identical builds).

Limits, stated rather than hidden:

- The smallest two-sided p the exact test can reach with n and m samples is
  2 / C(n+m, n): 0.1 for 3 vs 3, 0.029 for 4 vs 4, 0.0079 for 5 vs 5. Where it
  exceeds alpha the verdict is "n too small", never "no change".
  ``--quick`` runs (3 repeats, 1 cold process) can therefore never show a
  significant change; use ``--repeats 10`` (and ``--cold 5`` for TTFG).
- The test treats samples as independent draws from each build's timing
  distribution. Samples of one run share a process, a machine state and
  thermal conditions, so two runs of the same code on a busy machine can
  differ "significantly" by a few percent. That is why regressions are gated
  by an effect size too (``--fail-above``, a ratio), not by p alone.
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

#: significance level of the two-sided Mann–Whitney U test
ALPHA = 0.01
#: (name, raw-sample key) of the timings compared
METRICS = (
    ("solve", "solve_samples"),
    ("grad", "grad_samples"),
    ("ttfg", "ttfg_samples"),
    ("epoch", "epoch_s"),
)
TIER_RANK = {"pass": 0, "warn": 1, "fail": 2}

SLOWER, FASTER, SAME, TOO_FEW, CHANGED = (
    "slower", "faster", "no significant change", "n too small", "different"
)  # fmt: skip


#: (problem, backend, solver, gradient method, rtol, device, semantics, size, variant)
CaseKey = tuple[str, str, str, str, str, str, str, str, str]
DEVICE = 5  # the key's device field


def case_key(r: dict[str, Any]) -> CaseKey:
    """What identifies a case across runs; rtol compared to 3 significant digits.

    The device is the one the row ran on (read back), else the one asked for, else
    ``?`` (a version-1 file from a machine with a GPU): unknown pairs only with unknown.
    An ensemble row is also its semantics and size (both empty for other rows): the
    rungs of a ladder are different cases. A CNN row is also its model, precision,
    pipeline and dataset (``variant``): bf16 is never compared with fp32.
    """
    rtol = r.get("rtol")
    rt = f"{rtol:.3g}" if isinstance(rtol, int | float) and math.isfinite(rtol) else "-"
    variant = ""
    if r.get("kind") == "cnn":
        variant = "/".join(str(r.get(k) or "-") for k in ("model", "precision", "pipeline",
                                                           "dataset"))  # fmt: skip
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


def key_label(key: CaseKey) -> str:
    """A case key as words, the problem left out: ``diffrax Kvaerno5 ... on cpu n=16``."""
    _, backend, solver, grad, rtol, device, semantics, size, variant = key
    parts = [backend, solver, grad if grad not in ("", "none") else "", semantics, variant]
    return (
        " ".join(p for p in parts if p)
        + (f" rtol={_fmt_rtol(rtol)}" if rtol != "-" else "")
        + f" on {device}"
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
    """One timing of one matched case: medians, ratio NEW/OLD, p and verdict."""

    metric: str
    old_median: float
    new_median: float
    ratio: float
    p: float
    n_old: int
    n_new: int
    verdict: str

    @property
    def significant(self) -> bool:
        return self.verdict in (SLOWER, FASTER, CHANGED)


def compare_samples(
    metric: str, old: Sequence[float], new: Sequence[float], alpha: float = ALPHA
) -> Change | None:
    """Compare two sets of raw samples; ``None`` when either is empty."""
    from scipy.stats import mannwhitneyu

    a = np.asarray(old, dtype=float).ravel()
    b = np.asarray(new, dtype=float).ravel()
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if not a.size or not b.size:
        return None
    mo, mn = float(np.median(a)), float(np.median(b))
    ratio = mn / mo if mo > 0 else math.inf
    p = float(mannwhitneyu(b, a, alternative="two-sided").pvalue)
    p = 1.0 if math.isnan(p) else p  # all samples tied
    if min_p(a.size, b.size) > alpha:
        verdict = TOO_FEW
    elif p >= alpha:
        verdict = SAME
    else:
        verdict = SLOWER if ratio > 1 else FASTER if ratio < 1 else CHANGED
    return Change(metric, mo, mn, ratio, p, int(a.size), int(b.size), verdict)


@dataclass
class CaseComparison:
    key: CaseKey
    old: dict[str, Any]
    new: dict[str, Any]
    changes: list[Change] = field(default_factory=list)
    #: status and gradient-tier changes, as sentences
    status_changes: list[str] = field(default_factory=list)
    regressed: bool = False

    @property
    def label(self) -> str:
        return key_label(self.key)


@dataclass
class Comparison:
    alpha: float
    cases: list[CaseComparison]
    only_old: list[dict[str, Any]]
    only_new: list[dict[str, Any]]

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
    old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]], alpha: float = ALPHA
) -> Comparison:
    """Match the records of two runs and test every timing both measured."""
    pending: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for r in old:
        pending.setdefault(case_key(r), []).append(r)
    cases: list[CaseComparison] = []
    only_new: list[dict[str, Any]] = []
    for r in new:
        olds = pending.get(case_key(r))
        if not olds:
            only_new.append(r)
            continue
        o = olds.pop(0)  # a case repeated within a file pairs in order
        cc = CaseComparison(case_key(r), o, r)
        for metric, key in METRICS:
            ch = compare_samples(metric, o.get(key) or [], r.get(key) or [], alpha)
            if ch is not None:
                cc.changes.append(ch)
        cc.status_changes, cc.regressed = _status_changes(o, r)
        cases.append(cc)
    only_old = [r for rs in pending.values() for r in rs]
    return Comparison(alpha, cases, only_old, only_new)


def mixed_hardware(comp: Comparison) -> list[CaseComparison]:
    """Matched cases whose OLD and NEW ran on different hardware (the records' ``hardware``
    labels differ; a record without one, from an older file, is not judged)."""
    return [
        cc for cc in comp.cases
        if cc.old.get("hardware") and cc.new.get("hardware")
        and cc.old["hardware"] != cc.new["hardware"]
    ]  # fmt: skip


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


def render(comp: Comparison, threshold: float | None = None) -> str:
    """The comparison as terminal text: a table, then status changes and unmatched cases."""
    from sciml_bench.results.table import render as render_table

    header = ("problem", "case", "timing", "old", "new", "new/old", "p", "n", "verdict")
    note = too_few_note(comp)
    rows = []
    for cc in comp.cases:
        for c in cc.changes:
            rows.append([
                cc.key[0], cc.label, c.metric, fmt_time(c.old_median), fmt_time(c.new_median),
                f"{c.ratio:.3f}x", f"{c.p:.2g}", f"{c.n_old}/{c.n_new}",
                _verdict(c, threshold, note is not None),
            ])  # fmt: skip
        if not cc.changes:
            rows.append([cc.key[0], cc.label, "-", "-", "-", "-", "-", "-", "no timings in both"])
    for metric, _ in METRICS:
        g = comp.geomean(metric)
        if g:
            rows.append(["geometric mean", f"{g[1]} case(s)", metric, "", "", f"{g[0]:.3f}x",
                         "", "", "no test"])  # fmt: skip
    out = [f"Mann-Whitney U, two-sided, alpha={comp.alpha:g}; ratio = median NEW / median OLD"]
    if note:
        out.append(note)
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
            out += [f"  {r.get('problem', '?')} {key_label(case_key(r))}" for r in recs]
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
    return {
        "alpha": comp.alpha,
        "test": "mannwhitneyu two-sided",
        "note": too_few_note(comp),
        "cases": [
            {
                "problem": cc.key[0], "backend": cc.key[1], "solver": cc.key[2],
                "gradient_method": cc.key[3], "rtol": cc.new.get("rtol"),
                "device": cc.key[5],
                **({"semantics": cc.key[6], "size": int(cc.key[7])} if cc.key[7] else {}),
                **({"variant": cc.key[8]} if cc.key[8] else {}),
                "timings": [
                    {**c.__dict__, "min_p": min_p(c.n_old, c.n_new),
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
