"""The report of one or more results files: ``report.md`` and ``report.html``.

The report is first built as a short list of blocks (headings, paragraphs,
tables, figures, notes) and then rendered twice: Markdown that reads well on
GitHub (figures linked as files next to it) and one self-contained HTML file
(figures embedded as base64 PNG, no external CSS or scripts). Both hold the
environment of every run and, per problem, a table of every case, failures
included with their reasons, followed by the figures of :mod:`sciml_bench.results.plots`.
An ensemble problem instead gets one row per ladder rung (backend x semantics x device x
size), the ladders that stopped with their largest completed size, and the scaling figure
and crossovers of :mod:`sciml_bench.results.scaling`. An array problem (``[sizes]``) gets
one row per ladder rung (backend x solver x Jacobian kind x size) with its states, the
Jacobian's non-zeros and peak memory, each ladder's exponent, dense ÷ sparse, the linear
solvers, and the cost-against-size figure of :mod:`sciml_bench.results.growth`.
"""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sciml_bench.results import gradient_scaling, growth, plots, scaling, summary, training
from sciml_bench.results.store import Run
from sciml_bench.results.table import (
    SIZED_COLUMNS,
    UNAVAILABLE,
    device_cell,
    error_cells,
    grad_memory_cell,
    load_notes,
    member_counts,
    reference_notes,
    sized_row,
    ttfg_cell,
    unavailable_notes,
)

CASE_COLUMNS = (
    "backend", "solver", "gradient", "device", "rtol", "status", "TTFG s [IQR]", "solve ms [IQR]",
    "grad ms [IQR]", "sol err", "grad err", "grad mem MiB",
)  # fmt: skip
CNN_COLUMNS = (
    ("backend", "variant"), ("device", "device"), ("status", "status"),
    ("cold_start_s", "cold start s"), ("time_to_first_step_s", "first step s"),
    ("train_s", "train s"), ("throughput_ips", "images/s"), ("accuracy", "accuracy"),
    ("ram_initial_mb", "RAM init MiB"), ("ram_max_mb", "RAM max MiB"),
    ("vram_initial_mb", "VRAM init MiB"), ("vram_max_mb", "VRAM max MiB"),
    ("model", "model"), ("precision", "precision"), ("pipeline", "pipeline"),
    ("data_wait_s", "data wait s"), ("time_to_accuracy_s", "to target s"),
    ("latency_p50_ms", "latency p50 ms"), ("latency_p99_ms", "latency p99 ms"),
    ("inference_ips", "inference images/s"),
)  # fmt: skip
ENSEMBLE_COLUMNS = (
    "backend", "solver", "gradient", "semantics", "device", "size", "status", "solve ms [IQR]",
    "grad ms [IQR]", "members/s", "µs/member", "steps min/med/max", "sol err", "grad err",
    "TTFG s",
)  # fmt: skip
#: statuses that stop a ladder (``skipped`` rows follow them; ``unavailable`` never started)
NOT_STOPS = ("ok", "skipped", "unavailable")
FIGURE_FOLDER = "figures"


@dataclass
class Heading:
    level: int
    text: str


@dataclass
class Para:
    text: str


@dataclass
class Table:
    header: Sequence[str]
    rows: list[list[str]]


@dataclass
class Notes:
    """A bullet list (failure reasons, what a figure leaves out)."""

    items: list[str]


@dataclass
class Figure:
    title: str
    png: Path
    svg: Path
    notes: list[str] = field(default_factory=list)


@dataclass
class NotDrawn(Para):
    """A figure that could not be drawn, and why: it stands where the figure would."""


Block = Heading | Para | Table | Notes | Figure


def is_cnn(r: dict[str, Any]) -> bool:
    return r.get("kind") == "cnn" or r.get("problem") == "cnn"


def _f(x: Any, fmt: str) -> str:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return "-"
    return format(x, fmt)


def _spread(med: Any, q: Any, scale: float, fmt: str = ".3g") -> str:
    """``median [q1-q3]`` in the given unit; ``-`` when not measured."""
    if not plots.finite(med):
        return "-"
    s = format(med * scale, fmt)
    if q and len(q) == 2 and q[0] != q[1]:
        s += f" [{q[0] * scale:{fmt}}-{q[1] * scale:{fmt}}]"
    return s


def _grad_err(r: dict[str, Any]) -> str:
    """The gradient error with its tier (``1.2e-05 pass``)."""
    tier = r.get("gradient_tier")
    return _f(r.get("gradient_error"), ".2e") + (f" {tier}" if tier else "")


def case_row(r: dict[str, Any], metric_key: str) -> list[str]:
    sol_err, grad_err = error_cells(r, _f(r.get(metric_key), ".2e"), _grad_err(r))
    status = str(r.get("status", "?"))
    return [
        str(r.get("backend", "")),
        str(r.get("solver", "")),
        str(r.get("gradient_method", "")),
        device_cell(r),
        _f(r.get("rtol"), ".0e"),
        status if status == "ok" else f"**{status}**",
        ttfg_cell(r, _spread(r.get("ttfg_s"), r.get("ttfg_iqr"), 1.0, ".2f")),
        _spread(r.get("solve_s"), r.get("solve_iqr"), 1e3),
        _spread(r.get("grad_s"), r.get("grad_iqr"), 1e3),
        sol_err,
        grad_err,
        grad_memory_cell(r),
    ]


def ensemble_row(r: dict[str, Any], metric_key: str) -> list[str]:
    """One rung of a ladder; throughput is member-solves per second of the median solve."""
    grad_err = _grad_err(r)
    status = str(r.get("status", "?"))
    return [
        str(r.get("backend", "")),
        str(r.get("solver", "")),
        str(r.get("gradient_method", "")),
        str(r.get("semantics") or "-"),
        device_cell(r),
        str(r["size"]) if r.get("size") is not None else "-",
        status if status == "ok" else f"**{status}**",
        _spread(r.get("solve_s"), r.get("solve_iqr"), 1e3),
        _spread(r.get("grad_s"), r.get("grad_iqr"), 1e3),
        _f(r.get("throughput"), ".3g"),
        _f(scaling.per_member_us(r), ".3g"),
        member_counts(r),
        _f(r.get(metric_key), ".2e"),
        grad_err,
        _f(r.get("ttfg_s"), ".2f"),
    ]


def _ensemble_order(r: dict[str, Any]) -> tuple[Any, ...]:
    """Rows by backend, semantics, device (then solver and gradient method, which make a
    ladder with them), size, and results file; a row without a size first."""
    size = r.get("size")
    return (
        str(r.get("backend", "")), str(r.get("semantics", "")), scaling.device_of(r),
        str(r.get("solver", "")), str(r.get("gradient_method", "")),
        -1 if size is None else int(size), str(r.get("_run", "")),
    )  # fmt: skip


def ladder_stops(records: Sequence[dict[str, Any]]) -> list[str]:
    """One sentence per ladder that stopped (budget, memory, an error, a failing member):
    where, why, its largest completed size and the larger sizes left unrun."""
    ladders: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for r in records:
        if scaling.is_ensemble(r) and r.get("size") is not None:
            ladders.setdefault(scaling.line_key(r), []).append(r)
    labels = scaling.line_labels(records)
    out = []
    for key, rs in ladders.items():
        stops = sorted((r for r in rs if r.get("status") not in NOT_STOPS),
                       key=lambda r: r["size"])  # fmt: skip
        if not stops:
            continue
        first = stops[0]
        ok = first.get("largest_ok_size")  # the runner's, as the ladder ran
        text = f"{labels[key]}: stopped at size {first['size']} ({first['status']}); "
        text += f"largest completed size {ok}" if ok else "no size completed"
        unrun = sorted(r["size"] for r in rs if r.get("status") == "skipped")
        if unrun:
            text += f"; not run: {', '.join(str(n) for n in unrun)}"
        out.append(text)
    return out


def cnn_row(r: dict[str, Any]) -> list[str]:
    row = []
    for key, _ in CNN_COLUMNS:
        v = r.get(key)
        if key == "status" and v != "ok":
            row.append(f"**{v}**")
        elif key == "precision" and r.get("precision_flagged"):
            row.append(f"**{v} flagged**")
        elif key == "time_to_accuracy_s" and r.get("target_reached") is False:
            row.append("not reached")
        elif isinstance(v, float):
            row.append(_f(v, ".3g"))
        else:
            row.append("-" if v is None else str(v))
    return row


def failure_notes(records: Sequence[dict[str, Any]]) -> list[str]:
    """One line per record that has a reason: failures, and notes on ok cases; one line per
    library that is not available here (:func:`~sciml_bench.results.table.unavailable_notes`)."""
    out = []
    for r in records:
        if scaling.is_ensemble(r) and r.get("status") == "skipped":
            continue  # said once per ladder by ladder_stops
        if r.get("status") == UNAVAILABLE:
            continue  # said once per library below
        if r.get("reason") or r.get("status") != "ok":
            if scaling.is_ensemble(r):
                label = scaling.row_label(r)
            else:
                label = plots.case_label(r, with_rtol=True)
            out.append(f"{label}: {r.get('status')}: {r.get('reason') or '(no reason recorded)'}")
    return out + unavailable_notes(records)


def environment_blocks(runs: Sequence[Run]) -> list[Block]:
    blocks: list[Block] = [Heading(2, "Runs and environment")]
    for i, run in enumerate(runs, 1):
        m, env = run.meta, run.environment
        if len(runs) > 1:
            blocks.append(Heading(3, f"#{i}: {run.path.name}"))
        rows = [
            ["file", run.path.name],
            ["status", str(m.get("status", "?"))
             + (f" by {m['interrupted_by']}" if m.get("interrupted_by") else "")],
            ["created", str(m.get("created", "?"))],
            ["command", str(m.get("command", "?"))],
            [
                "sciml-bench",
                f"{m.get('sciml_bench_version', '?')} (schema {m.get('schema_version')})",
            ],
            ["git commit", str(env.get("git_commit") or "-")],
            ["python", str(env.get("python", "?"))],
            ["platform", str(env.get("platform", "?"))],
            [
                "CPU",
                f"{env.get('cpu_model', '?')} x{env.get('cpu_count', '?')}"
                f" (affinity {env.get('affinity', '?')})",
            ],  # fmt: skip
        ]
        gpus = env.get("gpus") or []
        rows.append(["GPUs", ", ".join(str(g.get("name", g)) for g in gpus) if gpus else "none"])
        threads = env.get("threads") or {}
        told = [f"--threads {env['worker_threads']} (every framework in the workers)"] \
            if env.get("worker_threads") else []  # fmt: skip
        rows.append(["threads", ", ".join(told + [f"{k}={v}" for k, v in threads.items()])
                     or "each library's default"])  # fmt: skip
        pk = env.get("packages") or {}
        rows.append(["packages", ", ".join(f"{k} {v}" for k, v in pk.items()) or "-"])
        if env.get("caches"):
            rows.append(["caches", str(env["caches"])])
        if env.get("references"):  # computed, or read from the cache every checkout shares
            rows.append(["references", reference_sources(env["references"])])
        if env.get("machines"):  # where the cases ran (a Dask run: every distinct host)
            from sciml_bench.measure.environment import hardware_label

            rows.append(["machines", "; ".join(
                f"{host}: {hardware_label(m)}" for host, m in env["machines"].items()
            )])  # fmt: skip
        blocks.append(Table(["", "value"], rows))
    return blocks


def reference_sources(refs: dict[str, Any]) -> str:
    """Per problem, whether its reference was computed in the run or read from the cache
    (``environment.references``), and where."""
    parts = []
    for name, d in refs.items():
        how = {"computed": "computed", "cache": "read from the cache",
               "none": "none (the reference solver failed)"}.get(d.get("source"), "?")  # fmt: skip
        parts.append(f"{name}: {how}" + (f" ({d['path']})" if d.get("path") else ""))
    return "; ".join(parts)


def build(runs: Sequence[Run], out: Path, metric: str = "rel_l2",
          gradient_rtol: float | None = None) -> list[Block]:  # fmt: skip
    """The report's blocks, the answer first: the summary table (one line per problem and
    comparison), then every figure, then each problem's tables, notes and verdicts, and
    the runs and their environment last. Figures are written to ``out/figures`` on the
    way; verdicts judged against ``gradient_rtol`` (``--gradient-rtol``; None: the pass
    tier)."""
    metric_key = plots.ERROR_METRICS[metric]
    several = len(runs) > 1
    # with several files, "#1", "#2"... tell their cases apart in tables and figures
    records = [
        {**r, "_run": f"#{i}", "_run_file": run.path.name} if several else r
        for i, run in enumerate(runs, 1)
        for r in run.records
    ]
    blocks: list[Block] = [Heading(1, "sciml-bench report")]
    blocks.append(Para(
        "Timings are medians with the interquartile range in brackets, computed from the "
        "raw samples. TTFG is the time to first gradient of a fresh process, from spawn. "
        f"Solution error: {plots.METRIC_LABELS[metric]} against a tight reference "
        f"(`{metric_key}`). Gradient error: norm-wise relative error ‖g − r‖/‖r‖ against a "
        "full reference gradient of our own (forward sensitivities or an adjoint, at two "
        "tolerances, cross-checked); tiers pass ≤ 1e-4, warn ≤ 1e-2, otherwise fail, each "
        "only where the reference's own error is a tenth of the bound (else unjudged)."
    ))  # fmt: skip
    if not records:
        blocks.append(Para("No completed cases in these files."))
    sections = problem_sections(records)
    blocks += summary_blocks(sections, gradient_rtol)
    figures: list[Block] = [Heading(2, "Figures")]
    tables: list[Block] = [Heading(2, "Results by problem")]
    for name, hw, group in sections:
        prefix = _slug(name if not hw else f"{name}-{hw}")
        if name == "cnn":
            made = cnn_blocks(group, out, prefix)
        else:
            made = _case_blocks(group, out, prefix, metric, metric_key, several, gradient_rtol)
        drawn = [b for b in made if isinstance(b, Figure | NotDrawn)]
        figures += _section_heads(name, hw, figures) + drawn if drawn else []
        tables += _section_heads(name, hw, tables)
        tables += [b for b in made if not isinstance(b, Figure | NotDrawn)]
    return blocks + (figures if len(figures) > 1 else []) + tables + environment_blocks(runs)


def problem_sections(
    records: Sequence[dict[str, Any]],
) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(problem, hardware, rows) in the order the problems came, one per machine a problem
    ran on (timings from different machines are never mixed); ``hardware`` is empty where
    the problem ran on one machine only."""
    problems: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        problems.setdefault("cnn" if is_cnn(r) else str(r.get("problem", "?")), []).append(r)
    out = []
    for name, recs in problems.items():
        groups = by_hardware(recs)
        for hw, group in groups.items():
            out.append((name, hw if len(groups) > 1 else "", group))
    return out


def _section_heads(name: str, hw: str, so_far: Sequence[Block]) -> list[Block]:
    """A problem's heading (the first time it appears in ``so_far``'s section), and the
    machine's under it where it ran on several."""
    title = "CNN training baselines" if name == "cnn" else name
    heads: list[Block] = []
    if not any(isinstance(b, Heading) and b.level == 3 and b.text == title for b in so_far):
        heads.append(Heading(3, title))
    if hw:
        heads.append(Heading(4, f"{name} on {hw}"))
    return heads


def summary_blocks(sections: Sequence[tuple[str, str, list[dict[str, Any]]]],
                   gradient_rtol: float | None = None) -> list[Block]:  # fmt: skip
    """The report's first section: one line per problem and comparison
    (:mod:`sciml_bench.results.summary`)."""
    rows: list[list[str]] = []
    last = ""
    found = [line for _, hw, group in sections
             for line in summary.lines(group, summary.machine_name(hw) if hw else "", gradient_rtol)]
    for line in found:
        cells = line.cells()
        if line.verdict == "none qualifies":
            cells[2] = f"**{cells[2]}**"
        if line.problem == last:  # the problem named once, on its first line
            cells[0] = ""
        last = line.problem
        rows.append(cells)
    if not rows:
        return []
    bound = (f"gradient error at most {gradient_rtol:g} (`--gradient-rtol`)"
             if gradient_rtol is not None else "a passing gradient (error ≤ 1e-4)")  # fmt: skip
    return [
        Heading(2, "Summary"),
        Para("One line per problem and comparison: the fastest steady gradient among the rows "
             f"with {bound}, not timed under load (its median; CNN rows: training time), its "
             "ratio to the runner-up, and whether that clears the noise floor (`tie` inside it). A "
             "ladder's crossover is where its winner changes, or a library's adjoint "
             "overtakes its forward mode, bounded by the rungs. The verdict under each "
             "table below says the same in full, with the rows it left out."),
        Table(list(summary.COLUMNS), rows),
        *([Para(ties)] if (ties := summary.floor_ties(found)) else []),
    ]  # fmt: skip


def by_hardware(recs: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Records grouped by the hardware they ran on (``hardware`` of each record; rows
    without one, e.g. ``unavailable`` rows or older files, join the first group)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in recs:
        if r.get("hardware"):
            groups.setdefault(str(r["hardware"]), [])
    first = next(iter(groups), "")
    for r in recs:
        groups.setdefault(str(r.get("hardware") or first), []).append(r)
    return groups


def titled_notes(title: str, lines: Sequence[str]) -> list[Block]:
    """A paragraph ``title`` over the bullet list ``lines``; nothing when there are none."""
    return [Para(title), Notes(list(lines))] if lines else []


def _table(
    recs: Sequence[dict[str, Any]], columns: Sequence[str],
    row: Callable[[dict[str, Any]], list[str]], several: bool,
) -> Table:  # fmt: skip
    """One ``row`` per record under ``columns``, led by its results file (``#1``...) when
    the report has several."""
    header = (("run",) if several else ()) + tuple(columns)
    recs = [r for r in recs if r.get("status") != UNAVAILABLE]  # one note per library instead
    return Table(header, [([r.get("_run", "")] if several else []) + row(r) for r in recs])


def verdict_blocks(recs: Sequence[dict[str, Any]], which: str = "whose gradient passes",
                   gradient_rtol: float | None = None) -> list[Block]:  # fmt: skip
    """The verdict under a table (:mod:`sciml_bench.results.verdict`), one item per
    comparison (tolerance, size, results file), judged against ``gradient_rtol``."""
    from sciml_bench.measure.noise import NOISE_FLOOR, PROCESS_FLOOR
    from sciml_bench.results import verdict

    found = verdict.verdicts(recs, gradient_rtol)
    if gradient_rtol is not None:
        which = f"whose gradient error is at most {gradient_rtol:g} (`--gradient-rtol`)"
    if not found:
        return []
    return [
        Para(f"**Verdict**: the fastest rows {which}, the ratio to the "
             f"runner-up, and whether it clears the noise floor: for steady timings the one "
             f"this run's between-process spread calls for ({PROCESS_FLOOR:g}x with one "
             f"process a side), {NOISE_FLOOR:.2f}x for first ones (each names its floor)"
             + ("; faster rows left out are named with the reason:"
                if any(v.left_out or v.loaded for v in found) else ":")),
        Notes([v.text().removeprefix("verdict").lstrip(" :") for v in found]),
        *tolerance_blocks(recs, gradient_rtol),
    ]  # fmt: skip


def tolerance_blocks(recs: Sequence[dict[str, Any]],
                     gradient_rtol: float | None = None) -> list[Block]:  # fmt: skip
    """Where the rows ran at several tolerances: from which rtol each library's gradient
    passes (:mod:`sciml_bench.results.tolerance_ladder`)."""
    from sciml_bench.results import tolerance_ladder

    found = tolerance_ladder.ladders(recs, gradient_rtol)
    if not found:
        return []
    return [
        Para("**From which tolerance each gradient passes** (at that rtol and every tighter "
             "one run; the error at it and at the next looser rtol):"),
        Notes([f"{x.problem}{x.where}: {x.body()}" for x in found]),
    ]  # fmt: skip


def _case_blocks(
    recs: list[dict[str, Any]], out: Path, prefix: str, metric: str, metric_key: str,
    several: bool, gradient_rtol: float | None = None,
) -> list[Block]:  # fmt: skip
    """The table, failure notes and figures of one problem's cases on one machine."""
    ens = [r for r in recs if scaling.is_ensemble(r)]
    blocks: list[Block] = _ensemble_blocks(ens, out, prefix, metric_key, several,
                                                      gradient_rtol) if ens else []  # fmt: skip
    sized = [r for r in recs if growth.is_sized(r)]
    blocks += _sized_blocks(sized, out, prefix, several, gradient_rtol) if sized else []
    blocks += verdict_blocks(sized, gradient_rtol=gradient_rtol)  # one per size (and rtol)
    trained = [r for r in recs if training.is_training(r)]
    blocks += _training_blocks(trained, out, prefix, several) if trained else []
    recs = [r for r in recs if not scaling.is_ensemble(r) and not growth.is_sized(r)
            and not training.is_training(r)]  # fmt: skip
    if not recs:  # an ensemble, array or training problem: the single-trajectory figures do not apply
        return blocks
    blocks.append(_table(recs, CASE_COLUMNS, lambda r: case_row(r, metric_key), several))
    blocks += titled_notes("Failures and notes:", failure_notes(recs) + reference_notes(recs))
    # cases timed beside others on their host
    blocks += titled_notes("Load:", load_notes(recs))
    blocks += verdict_blocks(recs, gradient_rtol=gradient_rtol)
    ok = [r for r in recs if r.get("kind", "ode") == "ode"]
    for plot in (
        plots.work_precision_figure(ok, metric),
        plots.ttfg_figure(ok),
        plots.steady_figure(ok),
        plots.gradient_figure(ok),
    ):
        blocks.append(_figure(plot, out, prefix))
    return blocks


def _ensemble_blocks(
    recs: list[dict[str, Any]], out: Path, prefix: str, metric_key: str, several: bool,
    gradient_rtol: float | None = None,
) -> list[Block]:
    """An ensemble problem: one row per ladder rung, where ladders stopped, failures, and
    the scaling figure with its crossovers in words."""
    recs = sorted(recs, key=_ensemble_order)
    blocks: list[Block] = [
        Para(
            "Ensemble: one row per backend x semantics x device x size, each size in a fresh "
            "worker. members/s: size / median solve; µs/member: median solve / size. "
            "Steps per member (independent) or of the batch (coupled); `f` marks RHS "
            "evaluations where steps are not reported. Errors over the first `sample` "
            "members against the ensemble reference."
        ),
        _table(recs, ENSEMBLE_COLUMNS, lambda r: ensemble_row(r, metric_key), several),
        *titled_notes("Ladders that stopped:", ladder_stops(recs)),
        *titled_notes("Failures and notes:", failure_notes(recs)),
        *verdict_blocks(recs, gradient_rtol=gradient_rtol),
    ]
    blocks.append(_figure(scaling.scaling_figure(recs, gradient_rtol), out, prefix))
    texts = scaling.scaling_texts(recs, gradient_rtol)
    if texts:
        blocks.append(Notes(texts))
    return blocks


def _sized_blocks(
    recs: list[dict[str, Any]], out: Path, prefix: str, several: bool,
    gradient_rtol: float | None = None,
) -> list[Block]:  # fmt: skip
    """An array problem: one row per ladder rung, each ladder's exponent, dense ÷ sparse,
    what each factorises, failures, and the cost-against-size figure; crossovers and
    per-rung winners judged against ``gradient_rtol`` as the verdict is."""
    recs = sorted(recs, key=lambda r: (growth.line_key(r, growth.SPLIT_KEYS), r.get("size") or 0))
    blocks: list[Block] = [
        Para(
            "Array problem: one row per backend x solver x Jacobian kind x size, each size in a "
            "fresh worker (TTFG from that one process; its first gradient and one untimed solve "
            "are the warm-up). states: n; params: P, the gradient's length; jac nnz: the exact "
            "Jacobian's structural non-zeros; peak MB: "
            "the worker's peak RSS. p: the least-squares slope of log time against log n over "
            "the three largest sizes a line completed."
        ),
        _table(recs, SIZED_COLUMNS, sized_row, several),
    ]
    for title, lines in (
        ("Growth (time ∝ states^p, ok rows):", growth.growth_texts(recs, gradient_rtol)),
        ("Dense ÷ sparse at the largest size both completed:", growth.ratio(recs)),
        ("Linear solvers, as each library names them:", growth.linear_solvers(recs)),
        *((f"{title[0].upper()}{title[1:]}:", lines)
          for title, lines in gradient_scaling.titled_notes(recs, gradient_rtol)),
        ("Reference tolerances loosened at size:",
         sorted({f"size {r['size']}: {r['reference_note']}" for r in recs
                 if r.get("reference_note")})),
        ("Failures and notes:", failure_notes(recs) + reference_notes(recs)),
    ):  # fmt: skip
        blocks += titled_notes(title, lines)
    blocks.append(_figure(growth.growth_figure(recs, gradient_rtol), out, prefix))
    if gradient_scaling.laddered_params(recs):
        blocks.append(_figure(gradient_scaling.gradient_scaling_figure(recs, gradient_rtol), out,
                              prefix))  # fmt: skip
    return blocks


def _training_blocks(
    recs: list[dict[str, Any]], out: Path, prefix: str, several: bool
) -> list[Block]:
    """Training rows (``--train``): their table, failures, and the loss-curve figure."""
    blocks: list[Block] = [
        Para(
            "Training (`--train`): each backend trains the problem's `[training]` section in "
            "one fresh worker, Adam with the declared constants in the library's own loop, "
            "from the problem's initial parameters. ms/iter: median timed iteration [IQR] "
            "(gradient and update). To target: the first iteration whose loss reached the "
            "target and the wall time to it, from the build's start (build and compilation "
            "included, for every backend; in brackets, the iterations alone with the first "
            "at most the median). Gradient at iterates: the worst error of the backend's "
            "gradient against the reference's at the reference curve's iterates. Curve "
            "vs reference: the largest relative deviation of the loss curve from SciPy's "
            "reference curve (its forward-sensitivity gradient in the same Adam loop) over "
            "the first K iterations; pass ≤ 1e-3, warn ≤ 1e-2, else fail, with the iteration "
            "where the curve departed."
        ),
        _table(recs, training.COLUMNS, _training_row, several),
        *titled_notes("Failures and notes:", failure_notes(recs)),
        Para("**Verdict** " + training.verdict_text(recs).removeprefix("verdict ")),
    ]
    blocks.append(_figure(training.training_figure(recs), out, prefix))
    return blocks


def _training_row(r: dict[str, Any]) -> list[str]:
    """A training row's cells, its status in bold unless ``ok``."""
    cells = training.row(r, device_cell(r))
    cells[4] = cells[4] if cells[4] == "ok" else f"**{cells[4]}**"
    return cells


def cnn_blocks(recs: list[dict[str, Any]], out: Path, prefix: str = "cnn") -> list[Block]:
    """The CNN table, failure notes and figures of one machine's rows."""
    several = any(r.get("_run") for r in recs)
    blocks: list[Block] = [_table(recs, [h for _, h in CNN_COLUMNS], cnn_row, several)]
    blocks += titled_notes("Failures and notes:", failure_notes(recs))
    oversubscribed = [r for r in recs if r.get("oversubscribed")]
    warn = (f" **{len(oversubscribed)} row(s) ran on an oversubscribed machine**: their "
            "timings include waiting for a core." if oversubscribed else "")  # fmt: skip
    # threads, load at start, others' CPU; cases run side by side
    blocks += titled_notes("Threads and load:" + warn, load_notes(recs))
    blocks += verdict_blocks(recs, "that trained beyond chance and kept their accuracy")
    blocks.append(_figure(plots.cnn_figure(recs), out, prefix))
    blocks.append(_figure(plots.cnn_curve_figure(recs), out, prefix))
    blocks.append(_figure(plots.cnn_speed_figure(recs), out, prefix))
    return blocks


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in s)[:60]


def _figure(plot: plots.Plot, out: Path, prefix: str) -> Block:
    files = plots.save(plot, out / FIGURE_FOLDER, f"{prefix}-{plot.name}")
    if not files:
        return NotDrawn(f"*{plot.title}: not drawn.* " + "; ".join(plot.notes))
    return Figure(plot.title, files["png"], files["svg"], plot.notes)


# -- Markdown ---------------------------------------------------------------------------------


def _md_cell(s: str) -> str:
    return " ".join(str(s).split()).replace("|", "\\|")


def to_markdown(blocks: Sequence[Block], out: Path) -> str:
    lines: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            lines += ["#" * b.level + " " + b.text, ""]
        elif isinstance(b, Para):
            lines += [b.text, ""]
        elif isinstance(b, Table):
            lines.append("| " + " | ".join(_md_cell(h) for h in b.header) + " |")
            lines.append("|" + "|".join("---" for _ in b.header) + "|")
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
            lines.append("")
        elif isinstance(b, Notes):
            lines += [f"- {_md_cell(n)}" for n in b.items] + [""]
        elif isinstance(b, Figure):
            png = b.png.relative_to(out).as_posix()
            svg = b.svg.relative_to(out).as_posix()
            lines += [f"**{b.title}** ([SVG]({svg}))", "", f"![{b.title}]({png})", ""]
            lines += [f"- {_md_cell(n)}" for n in b.notes] + ([""] if b.notes else [])
    return "\n".join(lines)


# -- HTML -------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1100px;
padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1em;font-size:.85em}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f3f3f3} tr.fail td{background:#fdecea}
img{max-width:100%;height:auto} figure{margin:1em 0} figcaption{font-weight:600}
ul.notes{font-size:.85em;color:#444} code{background:#f3f3f3;padding:0 .2em}
"""


def _inline(text: str) -> str:
    """Escape, then render the two Markdown marks the blocks use: **bold** and `code`."""
    s = html.escape(text)
    parts = s.split("**")
    s = "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))
    parts = s.split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def to_html(blocks: Sequence[Block]) -> str:
    body: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            body.append(f"<h{b.level}>{html.escape(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            body.append(f"<p>{_inline(b.text)}</p>")
        elif isinstance(b, Table):
            head = "".join(f"<th>{html.escape(h)}</th>" for h in b.header)
            rows = []
            for row in b.rows:
                failed = any(c.startswith("**") for c in row)
                cells = "".join(f"<td>{_inline(c)}</td>" for c in row)
                cls = ' class="fail"' if failed else ""
                rows.append(f"<tr{cls}>{cells}</tr>")
            thead = f"<thead><tr>{head}</tr></thead>"
            body.append(f"<table>{thead}<tbody>{''.join(rows)}</tbody></table>")
        elif isinstance(b, Notes):
            items = "".join(f"<li>{html.escape(n)}</li>" for n in b.items)
            body.append(f'<ul class="notes">{items}</ul>')
        elif isinstance(b, Figure):
            data = base64.b64encode(b.png.read_bytes()).decode("ascii")
            notes = "".join(f"<li>{html.escape(n)}</li>" for n in b.notes)
            body.append(
                f"<figure><figcaption>{html.escape(b.title)}</figcaption>"
                f'<img alt="{html.escape(b.title)}" src="data:image/png;base64,{data}">'
                + (f'<ul class="notes">{notes}</ul>' if notes else "")
                + "</figure>"
            )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>sciml-bench report</title><style>{_CSS}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def write(runs: Sequence[Run], out: Path, metric: str = "rel_l2",
          gradient_rtol: float | None = None) -> dict[str, Path]:  # fmt: skip
    """Write ``report.md``, ``report.html`` and ``figures/*.png|svg`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    blocks = build(runs, out, metric, gradient_rtol)
    md = out / "report.md"
    md.write_text(to_markdown(blocks, out), encoding="utf-8")
    page = out / "report.html"
    page.write_text(to_html(blocks), encoding="utf-8")
    return {"markdown": md, "html": page, "figures": out / FIGURE_FOLDER}
