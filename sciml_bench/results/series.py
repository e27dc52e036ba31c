"""Regression tracking over an ordered series of results files: change points per timing.

``sciml-bench compare F1 F2 ... Fn`` (n >= 3, in the order given: one file per commit or
library version) matches cases across the files as the two-file ``compare`` does
(:func:`~sciml_bench.results.compare.case_key`), takes each file's value of each timing
(:func:`~sciml_bench.results.compare.run_center`: the geometric mean of its processes'
medians) and finds where the series steps, as asv does for its benchmark histories.

The step fit, on ``y_i = ln v_i`` (timings spread multiplicatively, so a step is a ratio):
a partition of ``1..n`` into contiguous segments ``S_1 .. S_K`` minimising

    Σ_k Σ_{i ∈ S_k} |y_i - median(y_{S_k})|  +  γ·K

(asv's penalised L1 "Potts" fit: the median and the absolute deviation make one outlying
file cost its distance, not its square). It is solved exactly by dynamic programming over
the end of the last segment, ``F(j) = min_{i<j} F(i) + cost(i, j) + γ``, in O(n²) segment
costs, ample for series of a few hundred files.

γ is set from the noise. ``σ`` is the series' own file-to-file spread, estimated robustly
from successive differences (a step moves one difference of the n-1):
``σ = median|y_{i+1} - y_i| / (0.6745·√2)``. Adding a segment of one file at the end pays
off only when that file sits more than γ from the rest, so γ is the smallest log-step one
file alone can show: ``γ = max(ln floor, σ·(2 + ln n))``, the ``ln n`` because a longer
series offers more places for noise to look like a step (as BIC's penalty grows); how
often that γ finds no step in noise, and a 1.3x step alone, is simulated in
docs/reports.md, "A series of results" (``tests/test_compare_series.py`` pins seeded
cases). Then every
step between adjacent segments must clear the noise floor (:mod:`sciml_bench.measure.noise`, the
run-to-run floor, since a segment's median is over runs): the adjacent pair with the
smallest step inside the floor is merged and the medians recomputed, until every
remaining step clears it. Rows measured under load (``others_cpu`` above the load limit)
are left out of the series, as ``compare`` leaves them unjudged.

One file off its neighbours on both sides, out and back (a run whose processes landed
in a slow mode: with 15 % of samples preempted, half of a file's 12 samples are slow one
time in 130), would be two change points; the fit isolates such a file as a
segment of its own, so it is set aside as an *outlier*, reported as such with its ratio,
and the series refitted without it. Limits, stated: a real change that lasts one file
and is undone by the next is shown as an outlier, not as two steps. A step at the last file rests on
that one file until the next arrives. Where files differ by far more than the floor
(σ = 30 %: steady timings of one process per file, see ``PROCESS_FLOOR``), a flat series
of 8 files still showed a change point in 15 % of the simulated cases (of 30 files: 2 %):
give several runs per file (a comma list) to shrink σ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sciml_bench.measure.noise import LOAD_LIMIT, NOISE_FLOOR, clears_noise, others_load
from sciml_bench.results.compare import METRICS, CaseKey, by_case, key_label, run_center

#: γ = σ·(GAMMA_SIGMAS + ln n), in units of the series' own noise σ (module docstring)
GAMMA_SIGMAS = 2.0
#: panels drawn by --plot: the timings with the largest steps first
MAX_PANELS = 12


def _segment_costs(y: np.ndarray) -> np.ndarray:
    """``C[i, j]`` = Σ_{t=i}^{j-1} |y_t - median(y[i:j])| for 0 <= i < j <= n."""
    n = y.size
    c = np.full((n + 1, n + 1), np.inf)
    for i in range(n):
        # every segment starting at i at once: row m holds y[i : i+m+1], NaN-padded
        tail = y[i:]
        m = np.where(np.tri(tail.size, dtype=bool), tail[None, :], np.nan)
        med = np.nanmedian(m, axis=1, keepdims=True)
        c[i, i + 1 :] = np.nansum(np.abs(m - med), axis=1)
    return c


def potts_l1(y: Sequence[float], gamma: float) -> list[int]:
    """The exact minimiser of Σ_k Σ_{i∈S_k} |y_i - median(y_{S_k})| + γ·K over partitions
    into contiguous segments, by dynamic programming; returned as the segments' starts
    (the first is always 0)."""
    a = np.asarray(y, dtype=float)
    n = a.size
    if n == 0:
        return []
    c = _segment_costs(a)
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    prev = np.zeros(n + 1, dtype=int)
    for j in range(1, n + 1):
        totals = best[:j] + c[:j, j] + gamma
        prev[j] = int(np.argmin(totals))
        best[j] = totals[prev[j]]
    starts, j = [], n
    while j > 0:
        starts.append(int(prev[j]))
        j = prev[j]
    return starts[::-1]


def _medians(y: np.ndarray, starts: list[int]) -> list[float]:
    ends = [*starts[1:], y.size]
    return [float(np.median(y[s:e])) for s, e in zip(starts, ends, strict=True)]


def merge_within_floor(y: Sequence[float], starts: list[int], floor: float) -> list[int]:
    """Merge adjacent segments whose medians differ by a ratio inside ``floor``, the
    smallest step first, recomputing medians after each merge, until every step between
    neighbours clears the floor."""
    a = np.asarray(y, dtype=float)
    starts = list(starts)
    while len(starts) > 1:
        med = _medians(a, starts)
        steps = [abs(med[k + 1] - med[k]) for k in range(len(med) - 1)]
        k = int(np.argmin(steps))
        if clears_noise(math.exp(steps[k]), floor):
            break
        del starts[k + 1]
    return starts


def noise_sigma(y: Sequence[float]) -> float:
    """The series' file-to-file spread in log units, from successive differences:
    ``median|Δy| / (0.6745·√2)`` (σ of Gaussian noise; a few steps barely move it)."""
    d = np.abs(np.diff(np.asarray(y, dtype=float)))
    return float(np.median(d) / (0.6745 * math.sqrt(2.0))) if d.size else 0.0


@dataclass
class Step:
    """One change point: between the series' points ``before`` and ``after`` (1-based
    file numbers), the segments' medians (seconds) and their ratio after/before."""

    before: int
    after: int
    old_median: float
    new_median: float
    #: the step rests on one file at an end of the series (the last, or the first)
    one_file: bool = False

    @property
    def ratio(self) -> float:
        return self.new_median / self.old_median if self.old_median > 0 else math.inf

    def sentence(self) -> str:
        """``between file 3 and 4: 1.31x slower (median 12.0 ms -> 15.7 ms)``."""
        r = self.ratio
        how = f"{r:.2f}x slower" if r >= 1 else f"{1 / r:.2f}x faster"
        note = "; one side is one file at the series' edge: confirm with more" if self.one_file else ""
        return (f"between file {self.before} and {self.after}: {how} "
                f"(median {_ms(self.old_median)} -> {_ms(self.new_median)}{note})")  # fmt: skip


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


@dataclass
class Timing:
    """One timing of one case across the series: its values (seconds) at the files that
    hold it (1-based ``files``), the fitted segments and the change points."""

    key: CaseKey
    metric: str
    files: list[int]
    values: list[float]
    sigma: float = 0.0
    gamma: float = 0.0
    starts: list[int] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    #: files left out: their row was measured under load
    loaded: list[int] = field(default_factory=list)
    #: files set aside as outliers: (file, value, ratio to its neighbours' medians)
    outliers: list[tuple[int, float, float]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.key[0]} {key_label(self.key)} {self.metric}"

    def biggest(self) -> float:
        """The largest step, folded to >= 1 (1.0 without one)."""
        return max((max(s.ratio, 1 / s.ratio) for s in self.steps), default=1.0)


def _fit_points(y: np.ndarray, floor: float) -> tuple[float, float, list[int]]:
    """σ, γ and the segments' starts of one series of log values."""
    sigma = noise_sigma(y)
    gamma = max(math.log(floor), sigma * (GAMMA_SIGMAS + math.log(y.size)))
    return sigma, gamma, merge_within_floor(y, potts_l1(y, gamma), floor)


def lone_excursion(y: np.ndarray, starts: list[int]) -> tuple[int, float] | None:
    """An interior segment of one point whose neighbours both lie on the same side of it
    (out and back): its index in ``y`` and its log distance from the mean of the two
    neighbouring segments' medians; None when there is none."""
    med = _medians(y, starts)
    ends = [*starts[1:], y.size]
    for k in range(1, len(starts) - 1):
        out_and_back = (med[k] - med[k - 1]) * (med[k] - med[k + 1]) > 0
        if ends[k] - starts[k] == 1 and out_and_back:
            return starts[k], med[k] - (med[k - 1] + med[k + 1]) / 2
    return None


def fit(t: Timing, floor: float = NOISE_FLOOR) -> Timing:
    """Fill ``t``'s noise, γ, segments and change points (the module docstring's fit).

    A file the fit isolates alone between neighbours on one side of it is set aside as
    an outlier (kept in ``t.outliers`` with its ratio to its neighbours) and the rest
    refitted, until none is left or three files remain."""
    if len(t.values) < 2 or min(t.values) <= 0:
        t.starts = [0] if t.values else []
        return t
    while True:
        y = np.log(np.asarray(t.values, dtype=float))
        t.sigma, t.gamma, t.starts = _fit_points(y, floor)
        lone = lone_excursion(y, t.starts) if y.size > 3 else None
        if lone is None:
            break
        i, dist = lone
        t.outliers.append((t.files.pop(i), t.values.pop(i), math.exp(dist)))
    med = [math.exp(m) for m in _medians(y, t.starts)]
    n = len(t.values)
    t.steps = [Step(t.files[s - 1], t.files[s], med[k], med[k + 1], s in (1, n - 1))
               for k, s in enumerate(t.starts[1:])]  # fmt: skip
    return t


@dataclass
class Series:
    """Every timing of every case matched across the series' files."""

    n_files: int
    timings: list[Timing]
    floor: float = NOISE_FLOOR
    load_limit: float = LOAD_LIMIT
    #: per case (its key and occurrence), its records in every file that holds it
    records: dict[tuple[Any, ...], list[dict[str, Any]]] = field(default_factory=dict)

    def changed(self) -> list[Timing]:
        return [t for t in self.timings if t.steps]

    def slowdowns(self, threshold: float) -> list[tuple[Timing, Step]]:
        return [(t, s) for t in self.timings for s in t.steps if s.ratio > threshold]


def _file_value(rec: dict[str, Any], key: str) -> float | None:
    """One file's value of one timing: :func:`run_center` of its samples, or None."""
    x = np.asarray(rec.get(key) or [], dtype=float).ravel()
    if not np.isfinite(x).any():
        return None
    v = run_center(x, rec.get(key.replace("_samples", "_sample_process")))
    return v if math.isfinite(v) else None


def _collect(files: Sequence[Sequence[Sequence[dict[str, Any]]]]
             ) -> dict[tuple[Any, ...], dict[int, list[dict[str, Any]]]]:
    """Per case, per file (1-based), its records (one per run of that file)."""
    out: dict[tuple[Any, ...], dict[int, list[dict[str, Any]]]] = {}
    for i, runs in enumerate(files, start=1):
        for run in runs:
            for ukey, recs in by_case([run]).items():
                out.setdefault(ukey, {}).setdefault(i, []).extend(recs)
    return out


def _timing(ukey: tuple[Any, ...], by_file: dict[int, list[dict[str, Any]]], metric: str,
            key: str, load_limit: float) -> Timing:
    """One timing's series: per file the median of its runs' values; loaded rows out."""
    t = Timing(ukey[0], metric, [], [])
    for i in sorted(by_file):
        recs = by_file[i]
        if any((others_load(r) or 0.0) > load_limit for r in recs):
            if any(_file_value(r, key) is not None for r in recs):
                t.loaded.append(i)
            continue
        vals = [v for v in (_file_value(r, key) for r in recs) if v is not None]
        if vals:
            t.files.append(i)
            t.values.append(float(np.median(vals)))
    return t


def series(files: Sequence[Sequence[Sequence[dict[str, Any]]]], floor: float = NOISE_FLOOR,
           load_limit: float = LOAD_LIMIT) -> Series:
    """The change points of every timing of every case, over ``files`` in order (each a
    list of runs, each run a file's records). A timing present in fewer than 3 files is
    listed without a fit."""
    cases = _collect(files)
    out = Series(len(files), [], floor, load_limit)
    for ukey, by_file in cases.items():
        out.records[ukey] = [r for i in sorted(by_file) for r in by_file[i]]
        for metric, key in METRICS:
            t = _timing(ukey, by_file, metric, key, load_limit)
            if t.values or t.loaded:
                out.timings.append(fit(t, floor) if len(t.values) >= 3 else t)
    return out


def mixed_hardware(s: Series) -> list[tuple[Any, ...]]:
    """Cases whose rows across the series name more than one hardware label."""
    return [k for k, recs in s.records.items()
            if len({r.get("hardware") for r in recs} - {None, ""}) > 1]  # fmt: skip


def render(s: Series, threshold: float | None = None) -> str:
    """The series report: the rule once, then per timing its change points, or none."""
    out = [
        f"Series of {s.n_files} files, in the order given. Change points per timing: a "
        f"penalised L1 step fit on each file's log median (γ = max(ln {s.floor:g}, "
        f"σ·({GAMMA_SIGMAS:g} + ln n)), σ the series' own file-to-file spread); every step must "
        f"clear the noise floor {s.floor:g}x."
    ]
    if threshold is not None and threshold < s.floor:
        out.append(f"--fail-above {threshold:g} is inside the noise floor: only steps "
                   f"beyond {s.floor:g}x can be reported.")  # fmt: skip
    changed = sorted(s.changed(), key=lambda t: -t.biggest())
    for t in changed:
        out.append(f"\n{t.label}: {len(t.steps)} change point(s) "
                   f"({len(t.files)} files, noise {_pct(t.sigma)})")  # fmt: skip
        out += [f"  {st.sentence()}" for st in t.steps]
        out += _outlier_lines(t)
    flat = [t for t in s.timings if not t.steps]
    if flat:
        out.append(f"\nNo change point ({len(flat)} timing(s)):")
        for t in flat:
            out += [f"  {t.label}: {_flat_line(t)}", *_outlier_lines(t)]
    loaded = [t for t in s.timings if t.loaded]
    if loaded:
        out.append(f"\n{len(loaded)} timing(s) left files out, measured while other "
                   f"processes took more than {s.load_limit:g} cores (others_cpu), e.g. "
                   f"{loaded[0].label}: file(s) {_nums(loaded[0].loaded)}")  # fmt: skip
    if not s.timings:
        out.append("(no timing in any file)")
    return "\n".join(out)


def _outlier_lines(t: Timing) -> list[str]:
    return [f"  file {f} set aside as an outlier: {r:.2f}x its neighbours ({_ms(v)}), "
            "out and back" for f, v, r in t.outliers]  # fmt: skip


def _pct(sigma: float) -> str:
    return f"{math.expm1(sigma) * 100:.1f}%"


def _nums(xs: Sequence[int]) -> str:
    return ", ".join(map(str, xs))


def _flat_line(t: Timing) -> str:
    if len(t.values) < 3:
        return f"in {len(t.values)} file(s) only ({_nums(t.files)}): too few to fit"
    med = float(np.median(t.values))
    return f"median {_ms(med)} over {len(t.files)} files, noise {_pct(t.sigma)}"


def to_json(s: Series, threshold: float | None = None) -> dict[str, Any]:
    """The series as plain data (for CI)."""
    return {
        "files": s.n_files, "noise_floor": s.floor, "load_limit": s.load_limit,
        "gamma_sigmas": GAMMA_SIGMAS, "fail_above": threshold,
        "timings": [
            {"case": list(t.key), "metric": t.metric, "files": t.files, "values": t.values,
             "sigma": t.sigma, "gamma": t.gamma, "loaded_files": t.loaded,
             "outliers": [{"file": f, "value": v, "ratio": r} for f, v, r in t.outliers],
             "change_points": [{**st.__dict__, "ratio": st.ratio, "text": st.sentence()}
                               for st in t.steps]}
            for t in s.timings
        ],
        "slowdowns": [{"case": list(t.key), "metric": t.metric, "between": [st.before,
                       st.after], "ratio": st.ratio} for t, st in s.slowdowns(threshold)]
        if threshold is not None else [],
    }  # fmt: skip


def plot(s: Series, path: str | Path, max_panels: int = MAX_PANELS) -> Path:
    """One panel per timing (the largest steps first, at most ``max_panels``): each
    file's median against its number, log y, the fitted segments' medians as lines and
    each change point as a dashed vertical line labelled with its ratio."""
    from sciml_bench.results.extras import require

    matplotlib = require("matplotlib", "report", "drawing figures (compare --plot)")
    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    shown = sorted((t for t in s.timings if len(t.values) >= 3),
                   key=lambda t: (-t.biggest(), t.label))[:max_panels]  # fmt: skip
    cols = min(3, max(1, len(shown)))
    rows = max(1, math.ceil(len(shown) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.4 * rows), squeeze=False)
    for ax in axes.flat[len(shown):]:
        ax.set_visible(False)
    for ax, t in zip(axes.flat, shown, strict=False):
        _panel(ax, t)
    left = len([t for t in s.timings if len(t.values) >= 3]) - len(shown)
    note = f" ({left} more timing(s) without larger steps not drawn)" if left > 0 else ""
    fig.suptitle(f"Series of {s.n_files} files: change points beyond the {s.floor:g}x "
                 f"noise floor{note}", fontsize=10)  # fmt: skip
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _panel(ax: Any, t: Timing) -> None:
    """One timing: points, the segments' medians, the steps."""
    ms = np.asarray(t.values) * 1e3
    ax.plot(t.files, ms, "o", color="0.35", ms=4, label="file median")
    if t.outliers:
        ax.plot([f for f, _, _ in t.outliers], [v * 1e3 for _, v, _ in t.outliers], "x",
                color="C1", ms=6, label="outlier (set aside)")  # fmt: skip
        ax.legend(fontsize=7, loc="lower right")
    ends = [*t.starts[1:], len(t.files)]
    for a, b in zip(t.starts, ends, strict=True):
        m = float(np.exp(np.median(np.log(ms[a:b]))))
        ax.hlines(m, t.files[a] - 0.4, t.files[b - 1] + 0.4, color="C0", lw=2)
    for st in t.steps:
        x = (st.before + st.after) / 2
        ax.axvline(x, color="C3", ls="--", lw=1)
        how = f"{st.ratio:.2f}x slower" if st.ratio >= 1 else f"{1 / st.ratio:.2f}x faster"
        ax.annotate(how, (x, 0.97), xycoords=("data", "axes fraction"), ha="center",
                    va="top", color="C3", fontsize=8,
                    bbox={"fc": "white", "ec": "none", "pad": 1})  # fmt: skip
    _plain_log_y(ax)
    ax.set_xticks(range(1, max([*t.files, *(f for f, _, _ in t.outliers)]) + 1))
    ax.set_xlabel("file (in the order given)")
    ax.set_ylabel(f"{t.metric} [ms]")
    ax.set_title(f"{t.label}: {len(t.steps)} change point(s)", fontsize=8)


def _plain_log_y(ax: Any) -> None:
    """A log y axis with plain numbers (``12``, ``15``), not ``1.2×10¹``: a series spans
    less than a decade, where matplotlib's log labels read badly."""
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("log")
    fmt = FuncFormatter(lambda v, _pos: f"{v:.3g}")
    ax.yaxis.set_major_formatter(fmt)
    ax.yaxis.set_minor_formatter(fmt)
    ax.margins(y=0.18)  # room for the step labels at the top
