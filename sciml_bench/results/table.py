"""Tables of results: the terminal view of a run and of ``sciml-bench show``.

Timings are medians with the interquartile range in brackets, computed from
the raw samples when the file is read.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import Any

from sciml_bench.measure.noise import load_limit as load_limit_in_force
from sciml_bench.measure.noise import using_load_limit
from sciml_bench.results import gradient_scaling, growth, sharing, training

#: the status of a library that is not installed or not set up (measure.status.Status)
UNAVAILABLE = "unavailable"

ODE_COLUMNS = (
    "backend", "solver", "gradient", "device", "rtol", "status", "TTFG s", "solve ms [IQR]",
    "grad ms [IQR]", "sol err", "grad err", "steps", "grad MB",
)

#: keys of the machine-readable (--json) case record, timing keys being medians
JSON_KEYS = (
    "problem", "backend", "solver", "gradient_method", "status", "reason", "ttfg_s",
    "solve_s", "grad_s", "solution_error", "gradient_error", "gradient", "steps",
    "rhs_evals", "gradient_tier", "gradient_cosine", "rtol", "atol", "t_reached",
    "peak_rss_mb", "device", "device_requested", "device_name", "vram_max_mb", "alloc_peak_mb",
    # where and beside what it ran (stored rows have them; --executor dask rows too)
    "host", "hardware", "dask_worker", "concurrent_cases", "threads", "threads_source",
    "xla_threads", "worker_threads",
    "grad_rss_mb", "grad_rss_source", "grad_warm_rss_mb", "grad_warm_rss_source", "kind",
    # the floating-point type computed in and asked for (--dtype), a fixed step (--dt)
    "dtype", "dtype_requested", "dt",
    # each process's steady median, and the core its steady samples ran on (issue 43)
    "solve_process_medians", "grad_process_medians", "steady_affinity",
)
#: keys of the --json record about what a row's numbers claim: what its TTFG measures,
#: the phases a failed row kept, and the reference it is scored against (NaN -> null)
CLAIM_JSON_KEYS = (
    "ttfg_kind", "phases_partial", "partial_ttfg_s", "ttfg_reached", "failed_phase",
    "failed_phase_s", "failed_phase_s_estimated", "reference_method", "complex_step_agreement",
    "complex_step_skipped", "reference_unverified", "reference_source", "reference_path",
    "solution_error_note", "gradient_error_note",
    # the solution error's scale floor, worst state, and why it is unjudged (issues 50, 53)
    "solution_error_floor", "solution_error_worst_state", "solution_unjudged",
    # which check scored the gradient, the reference's own error, why a row is unjudged
    "gradient_check", "reference_error", "gradient_tier_note",
    # the measure, the worst component and its name, a suspect component; the gradient as
    # judged and where; the reference's cross-check, tolerance pair and version
    "gradient_error_measure", "gradient_worst", "gradient_worst_at", "gradient_suspect_note",
    "gradient_judged", "gradient_theta", "reference_cross_check",
    "reference_cross_check_agreement", "reference_tolerance_error", "reference_version",
)  # fmt: skip


def _num(x: Any, fmt: str = ".2e") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return format(x, fmt)


def fmt_rtol(rtol: Any) -> str:
    """A tolerance as the table and the progress lines print it: ``1e-04``, ``2.5e-05``."""
    if not isinstance(rtol, int | float) or isinstance(rtol, bool) or not math.isfinite(rtol):
        return "-"
    mant, exp = f"{float(rtol):.2e}".split("e")
    return f"{mant.rstrip('0').rstrip('.')}e{exp}"


def _ms(median: float | None, q: Sequence[float] | None) -> str:
    if median is None:
        return "-"
    s = f"{median * 1e3:.3g}"
    if q:
        s += f" [{q[0] * 1e3:.3g}-{q[1] * 1e3:.3g}]"
    return s


SIZED_COLUMNS = (
    "backend", "solver", "gradient", "jacobian", "size", "states", "params", "jac nnz", "status",
    "TTFG s", "solve ms [IQR]", "grad ms [IQR]", "peak MB", "sol err", "grad err", "steps",
    "grad MB",
)
#: extra keys of an array problem's row in the machine-readable record
SIZED_JSON_KEYS = (
    "size", "n_state", "n_params", "jac_nnz", "jacobian", "linear_solver", "largest_ok_size",
    "codegen_s", "reference_rtol", "reference_note", "size_name",
    # a rung's processes: how many ran and were planned, and their places in the run
    "cold_processes", "rung_processes_planned", "schedule_slots", "rung_note",
)


def size_text(r: dict[str, Any]) -> str:
    """``N=32``, ``width=200``: a row's size as its problem names it (``n=`` for members
    of an ensemble and for files written before ``size_name``); "" without a size."""
    if not r.get("size"):
        return ""
    return f"{r.get('size_name') or 'n'}={r['size']}"


def sized_row(r: dict[str, Any]) -> list[str]:
    """One size of an array problem's ladder: what it was, its timings and peak memory."""
    ode = ode_row(r)
    return [
        *ode[:3], str(r.get("jacobian") or "-"),
        str(r.get("size") if r.get("size") is not None else "-"),
        str(r.get("n_state") or "-"), str(r.get("n_params") or "-"), str(r.get("jac_nnz") or "-"),
        *ode[5:9],
        _num(r.get("peak_rss_mb"), ".0f"), *ode[9:],
    ]  # fmt: skip


ENSEMBLE_COLUMNS = (
    "backend", "solver", "gradient", "semantics", "device", "size", "status", "TTFG s", "solve ms [IQR]",
    "grad ms [IQR]", "members/s", "steps min/med/max", "sol err", "grad err",
)

#: extra keys of an ensemble row in the machine-readable record
ENSEMBLE_JSON_KEYS = (
    "kind", "semantics", "size", "device", "throughput", "grad_throughput", "largest_ok_size",
    "steps_min", "steps_median", "steps_max", "rhs_evals_min", "rhs_evals_median",
    "rhs_evals_max", "sample", "solution_members_checked", "loss", "reference_loss",
    "gradient_batch", "gradient_members",
    "cold_processes", "rung_processes_planned", "schedule_slots", "rung_note",
)


def member_counts(r: dict[str, Any]) -> str:
    """Steps ``min/median/max`` over an ensemble's members, else RHS evaluations (`` f``)."""
    for key, unit in (("steps", ""), ("rhs_evals", " f")):
        if r.get(f"{key}_min") is not None:
            vals = (r[f"{key}_{s}"] for s in ("min", "median", "max"))  # a median may be x.5
            return "/".join(f"{v:.0f}" if float(v).is_integer() else f"{v:.1f}" for v in vals) + unit
    return "-"


def ensemble_row(r: dict[str, Any]) -> list[str]:
    grad_err = _num(r.get("gradient_error"))
    if r.get("gradient_tier"):
        grad_err += f" {r['gradient_tier']}"
    counts = member_counts(r)
    ttfg = r.get("ttfg_s")
    return [
        r.get("backend", ""),
        r.get("solver", ""),
        r.get("gradient_method", ""),
        r.get("semantics", ""),
        device_cell(r),
        str(r.get("size") if r.get("size") is not None else "-"),
        r.get("status", ""),
        f"{ttfg:.2f}" if ttfg is not None else "-",
        _ms(r.get("solve_s"), r.get("solve_iqr")),
        _ms(r.get("grad_s"), r.get("grad_iqr")),
        _num(r.get("throughput"), ".3g"),
        counts,
        _num(r.get("solution_error")),
        grad_err,
    ]


CNN_COLUMNS = (
    "variant", "status", "device", "first step s", "warm-up s", "train s", "img/s", "accuracy",
    "RAM MB init/max", "VRAM MB init/max",
    "model", "precision", "pipeline", "data wait s", "to target s", "p50/p99 ms", "infer img/s",
)


def _pair(a: Any, b: Any) -> str:
    return "-" if a is None and b is None else f"{_num(a, '.0f')}/{_num(b, '.0f')}"


def cnn_row(r: dict[str, Any]) -> list[str]:
    acc = _num(r.get("accuracy"), ".3f")
    if r.get("trained_to_chance"):
        acc += " CHANCE"
    return [
        r.get("backend", ""),
        r.get("status", ""),
        str(r.get("device") or "-"),
        _num(r.get("time_to_first_step_s"), ".2f"),
        _num(r.get("warmup_epoch_s"), ".2f"),
        _num(r.get("train_s"), ".3f"),
        _num(r.get("throughput_ips"), ".0f"),
        acc,
        _pair(r.get("ram_initial_mb"), r.get("ram_max_mb")),
        _pair(r.get("vram_initial_mb"), r.get("vram_max_mb")),
        *cnn_second_wave(r),
    ]


def cnn_second_wave(r: dict[str, Any]) -> list[str]:
    """Model, precision (FLAGGED when it lost accuracy), pipeline, data wait, time to the
    target accuracy (``not reached``), inference latency and throughput; ``-`` in old files."""
    precision = str(r.get("precision") or "-")
    if r.get("precision_flagged"):
        precision += " FLAGGED"
    if r.get("target_reached") is False:
        tta = "not reached"
    else:
        tta = _num(r.get("time_to_accuracy_s"), ".2f")
    lat = "-"
    if r.get("latency_p50_ms") is not None:
        lat = f"{_num(r.get('latency_p50_ms'), '.3g')}/{_num(r.get('latency_p99_ms'), '.3g')}"
    return [
        str(r.get("model") or "-"),
        precision,
        str(r.get("pipeline") or "-"),
        _num(r.get("data_wait_s"), ".3f"),
        tta,
        lat,
        _num(r.get("inference_ips"), ".0f"),
    ]


def device_cell(r: dict[str, Any]) -> str:
    """The device a row ran on; ``cpu (asked cuda)`` where a CPU-only backend was asked
    for the GPU; ``- (asked cuda)`` where a row asked for the GPU ran nowhere (``unavailable``,
    ``error``, ``skipped``); ``-`` where it is unknown (a version-1 file from a GPU machine)."""
    dev, asked = r.get("device"), r.get("device_requested")
    if r.get("status") in ("skipped", "unavailable"):  # no worker ran: nothing was read back
        dev = None
    if not dev:
        return f"- (asked {asked})" if asked and asked != "cpu" else "-"
    return f"{dev} (asked {asked})" if asked and asked != dev else str(dev)


def solver_cell(r: dict[str, Any]) -> str:
    """The solver, with the dtype where it is not float64 (``rk4 float32``), or where a
    float64-only backend was asked for another (``LSODA float64 (asked float32)``)."""
    solver, dtype, asked = r.get("solver", ""), r.get("dtype"), r.get("dtype_requested")
    if asked and dtype and asked != dtype:
        return f"{solver} {dtype} (asked {asked})"
    return f"{solver} {dtype}" if dtype and dtype != "float64" else solver


def control_cell(r: dict[str, Any]) -> str:
    """The step control: ``dt=0.05`` for a fixed-step solver (no error control), else
    the rtol."""
    dt = r.get("dt")
    if isinstance(dt, int | float) and not isinstance(dt, bool) and math.isfinite(dt):
        return f"dt={dt:g}"
    return fmt_rtol(r.get("rtol"))


def grad_memory_cell(r: dict[str, Any]) -> str:
    """What a gradient call needed in memory: on the CPU the RAM above the worker's RSS
    before the first call (``grad_rss_mb``, compilation included), then ``/`` that of a
    compiled call after the steady samples (``grad_warm_rss_mb``) where measured (``≥``
    marks a sampled lower bound); on a GPU the allocator's peak over the case
    (``alloc_peak_mb``, ``gpu``); ``-`` when not measured."""
    if r.get("device") == "cuda" and r.get("alloc_peak_mb") is not None:
        return f"{r['alloc_peak_mb']:.3g} gpu"
    cells = [("≥" if r.get(f"{key}_source") == "sampled" else "") + f"{r[key]:.3g}"
             for key in ("grad_rss_mb", "grad_warm_rss_mb") if r.get(key) is not None]  # fmt: skip
    return " / ".join(cells) or "-"


def ttfg_cell(r: dict[str, Any], ok_cell: str | None = None) -> str:
    """The TTFG column of an ODE row: the median (``ok_cell`` when the caller formats it
    with its spread), ``(solve)`` where the backend computes no gradient and the time is
    to its first solve; for a failed row, what it kept: ``108.58 partial`` where it got
    past its first gradient, ``(3.51) partial`` (to the end of its last completed phase)
    where it did not; ``-`` where nothing was measured."""
    ttfg = r.get("ttfg_s")
    if _finite(ttfg):
        cell = ok_cell or f"{ttfg:.2f}"
        return f"{cell} (solve)" if r.get("ttfg_kind") == "solve" else cell
    partial = r.get("partial_ttfg_s")
    if not _finite(partial):
        return "-"
    return f"{partial:.2f} partial" if r.get("ttfg_reached") else f"({partial:.2f}) partial"


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def error_cells(r: dict[str, Any], sol: str, grad: str) -> tuple[str, str]:
    """The solution- and gradient-error cells (formatted by the caller) with what they
    claim: ``no ref`` where there was nothing to score against, ``*`` after a gradient
    error scored against an unverified reference, ``†`` after a ladder rung's scored
    against a reference that was never cross-checked, ``?`` after a solution error the
    reference's own cross-check could not judge (notes: :func:`reference_notes`)."""
    if r.get("solution_error_note"):
        sol = "no ref"
    elif r.get("solution_unjudged") and r.get("solution_error") is not None:
        sol += "?"
    if r.get("gradient_error_note"):
        grad = "no ref"
    elif r.get("reference_unverified") and r.get("gradient_error") is not None:
        grad += "*"
    elif unchecked(r):
        grad += "†"
    return sol, grad


def unchecked(r: dict[str, Any]) -> bool:
    """Whether a ladder rung's gradient error is scored against a reference gradient that
    no complex-step cross-check verified (``complex_step_skipped``: above 1,000 states its
    three complex BDF solves cost too much) and that gives no error estimate of its own
    (``reference_error``: references from version 6 on give one, and their tier is gated on
    it). Single-trajectory rows are not marked: their reference's ``method`` says whether the
    check ran."""
    return (growth.is_sized(r) and bool(r.get("complex_step_skipped"))
            and r.get("gradient_error") is not None
            and r.get("reference_error") is None)  # fmt: skip


def _unchecked_notes(records: Sequence[dict[str, Any]]) -> list[str]:
    """One ``†`` line per reason a ladder's cross-check did not run, with its sizes."""
    sizes: dict[str, list[str]] = {}
    for r in records:
        if unchecked(r):
            sizes.setdefault(str(r["complex_step_skipped"]), []).append(str(r.get("size")))
    return [f"† size {', '.join(dict.fromkeys(n))}: the reference gradient was not "
            f"cross-checked by complex step, {why.removeprefix('not run: ')}: its finite "
            "differences are unverified" for why, n in sizes.items()]  # fmt: skip


def _suspect_notes(records: Sequence[dict[str, Any]]) -> list[str]:
    """One line per row whose norm-wise gradient error passes while one component is off
    by more than 10 %: the component, by name (:func:`~sciml_bench.measure.metrics.suspect_note`)."""
    return [f"{r.get('backend')} {r.get('gradient_method')}: {r['gradient_suspect_note']}"
            + (f" (size {r['size']})" if r.get("size") is not None else "")
            for r in records if r.get("gradient_suspect_note")]  # fmt: skip


def _cache_notes(records: Sequence[dict[str, Any]]) -> list[str]:
    """One line per row whose cold processes loaded a compiled model from a cache (AMICI's
    ``SCIML_BENCH_AMICI_CACHE``) instead of compiling it: its TTFG has no compile in it."""
    out = []
    for r in records:
        sources = [s for s in r.get("model_sources") or [] if s]
        if "cache" not in sources:
            continue
        head = (f"TTFG (cache): {r.get('backend')} {r.get('gradient_method')}: "
                f"{sources.count('cache')} of {len(sources)} cold process(es) loaded the "
                "compiled model from the cache, with no code generation or compile in their "
                "build")  # fmt: skip
        cached = r.get("ttfg_cached_samples")
        if cached:  # the row's TTFG is the processes that compiled (run/ode.compiled_ttfg)
            head += (f"; the TTFG shown is the compiling process(es)', the loads took "
                     f"{', '.join(f'{t:.3g} s' for t in cached)}")  # fmt: skip
        out.append(head)
    return out


def reference_notes(records: Sequence[dict[str, Any]]) -> list[str]:
    """One line per distinct thing a problem's rows claim about their numbers: no
    reference (or no reference gradient) and why, an unverified reference (``*``), ladder
    rungs whose reference was never cross-checked (``†``), TTFG columns
    that are times to first solve, and failed rows' partial TTFG."""
    from sciml_bench.measure.metrics import PASS_TOL

    out: list[str] = []
    for key, what in (("solution_error_note", "solution and gradient errors are not scored"),
                      ("gradient_error_note", "gradient errors are not scored")):  # fmt: skip
        for note in dict.fromkeys(str(r[key]) for r in records if r.get(key)):
            if key == "gradient_error_note" and any(r.get("solution_error_note") == note
                                                     for r in records):  # fmt: skip
                continue  # said once, by the solution's line
            out.append(f"{note.rstrip('.')}: {what}")
    for r in records:
        if r.get("reference_unverified"):
            agree = r.get("reference_cross_check_agreement",
                          r.get("complex_step_agreement", float("nan")))  # fmt: skip
            check = r.get("reference_cross_check") or "complex-step"
            out.append(
                f"* scored against an unverified reference: its {check} cross-check "
                f"disagrees by {float(agree if agree is not None else 'nan'):.1e} > "
                f"{PASS_TOL / 100:g} (PASS_TOL/100)"
            )
            break
    out += [f"? solution error unjudged: {note}" for note in
            dict.fromkeys(str(r["solution_unjudged"]) for r in records if r.get("solution_unjudged"))]
    out += _unchecked_notes(records)
    out += _suspect_notes(records)
    solve = sorted({str(r.get("backend")) for r in records
                    if r.get("ttfg_kind") == "solve" and _finite(r.get("ttfg_s"))})  # fmt: skip
    if solve:  # "scipy computes ...; its", "scipy and X compute ...; their"
        names = solve[0] if len(solve) == 1 else f"{', '.join(solve[:-1])} and {solve[-1]}"
        verb, its = ("computes", "its") if len(solve) == 1 else ("compute", "their")
        out.append(f"TTFG (solve): {names} {verb} no gradient; {its} TTFG is the time to "
                   f"{its} first solve, from spawn")  # fmt: skip
    out += _cache_notes(records)
    if any(_finite(r.get("partial_ttfg_s")) for r in records):
        out.append("TTFG partial: a failed row keeps the phases it completed before it "
                   "failed: its time to first gradient where it got that far, else (in "
                   "parentheses) the time to the end of its last completed phase")  # fmt: skip
    return out


def ode_row(r: dict[str, Any]) -> list[str]:
    grad_err = _num(r.get("gradient_error"))
    if r.get("gradient_tier"):
        grad_err += f" {r['gradient_tier']}"
    sol_err, grad_err = error_cells(r, _num(r.get("solution_error")), grad_err)
    steps = r.get("steps")
    if steps is None and r.get("rhs_evals") is not None:
        steps = f"{r['rhs_evals']} f"
    return [
        r.get("backend", ""),
        solver_cell(r),
        r.get("gradient_method", ""),
        device_cell(r),
        control_cell(r),
        r.get("status", ""),
        ttfg_cell(r),
        _ms(r.get("solve_s"), r.get("solve_iqr")),
        _ms(r.get("grad_s"), r.get("grad_iqr")),
        sol_err,
        grad_err,
        str(steps) if steps is not None else "-",
        grad_memory_cell(r),
    ]


def render(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def table(records: Sequence[dict[str, Any]], gradient_rtol: float | None = None,
          load_limit: float | None = None) -> str:  # fmt: skip
    """One table per problem, failures with their reasons underneath, one line per library
    that is not available here, then its verdict (judged against ``gradient_rtol``, None:
    the pass tier; rows timed with others' CPU up to ``load_limit`` cores count as quiet,
    None: the limit in force)."""
    out: list[str] = []
    problems: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        problems.setdefault(r.get("problem", "?"), []).append(r)
    with using_load_limit(load_limit_in_force() if load_limit is None else load_limit):
        for name, recs in problems.items():
            out += _problem_lines(name, in_case_order(recs), gradient_rtol)
    return "\n".join(out).lstrip("\n")


def _problem_lines(name: str, recs: list[dict[str, Any]], gradient_rtol: float | None) -> list[str]:
    """One problem's tables, notes and verdict; ``unavailable`` rows are no table rows but
    one line per library under the tables (:func:`unavailable_notes`)."""
    out: list[str] = []
    shown = [r for r in recs if r.get("status") != UNAVAILABLE]
    sized = [r for r in shown if growth.is_sized(r)]
    ode = [r for r in shown if r.get("kind", "ode") == "ode" and not growth.is_sized(r)]
    other = [r for r in shown if r.get("kind", "ode") != "ode"]
    if ode:
        out += [f"\n{name}", render(ODE_COLUMNS, [ode_row(r) for r in ode])]
    if sized:
        out += [f"\n{name}", render(SIZED_COLUMNS, [sized_row(r) for r in sized])]
        out += sized_notes(sized, gradient_rtol)
    ensemble = [r for r in other if r.get("kind") == "ensemble"]
    if ensemble:
        out += [f"\n{name}", render(ENSEMBLE_COLUMNS, [ensemble_row(r) for r in ensemble])]
    cnn = [r for r in other if r.get("kind") == "cnn"]
    trained = [r for r in other if training.is_training(r)]
    if trained:
        rows = [training.row(r, device_cell(r)) for r in trained]
        out += [f"\n{name} (training)", render(training.COLUMNS, rows)]
        out += training.verdict_lines(trained, gradient_rtol)
    other = [r for r in other if r.get("kind") not in ("cnn", "ensemble", "train")]
    if cnn:
        out += [f"\n{name}", render(CNN_COLUMNS, [cnn_row(r) for r in cnn])]
    if other:
        out += [f"\n{name}", generic_table(other)]
    if not shown:  # every library unavailable: the problem's name still heads its lines
        out.append(f"\n{name}")
    out += [_wrapped(n) for n in _reason_notes(shown)]
    out += [_wrapped(n) for n in method_notes(ode)]
    out += [_wrapped(n) for n in reference_notes(ode + sized + ensemble)]
    out += [_wrapped(n) for n in unavailable_notes(recs)]
    out += [_wrapped(n) for n in load_notes(shown)]
    out += verdict_lines(recs, gradient_rtol)
    return out


#: the gradient methods whose name alone does not say what runs (each compiled library's
#: "forward" and "adjoint"); the others are the libraries' own names (BacksolveAdjoint)
GENERIC_METHODS = ("forward", "adjoint")


def method_notes(recs: Sequence[dict[str, Any]]) -> list[str]:
    """One line per generic gradient method a row shows: what it is in each library that
    ran it (the backend's own description)."""
    from sciml_bench import backends

    out = []
    for method in GENERIC_METHODS:
        libs = list(dict.fromkeys(str(r.get("backend")) for r in recs
                                  if r.get("gradient_method") == method))  # fmt: skip
        said = []
        for lib in libs:
            try:
                said.append(f"{lib}: {backends.get(lib).gradient_methods[method]}")
            except (KeyError, backends.UnknownBackend):
                continue
        if said:
            out.append(f"gradient {method}: " + "; ".join(said))
    return out


def _wrapped(note: str) -> str:
    # never split a name at its hyphen (sciml-bench, --load-limit): a reader greps for it
    return textwrap.fill(note, width=100, initial_indent="  ", subsequent_indent="    ",
                         break_on_hyphens=False)


def _reason_notes(recs: Sequence[dict[str, Any]]) -> list[str]:
    """One line per status and reason, the rows that share it named."""
    notes: dict[tuple[str, str], list[str]] = {}
    for r in recs:
        if r.get("reason"):
            label = " ".join(x for x in (r.get("backend"), r.get("solver"), r.get("semantics"),
                                         size_text(r)) if x)  # fmt: skip
            notes.setdefault((r["status"], r["reason"]), []).append(label)
    return [f"{', '.join(labels)}: {status}: {reason}" for (status, reason), labels in notes.items()]


def unavailable_notes(records: Sequence[dict[str, Any]]) -> list[str]:
    """One line per library whose rows are ``unavailable`` (not installed, not set up, or
    a case it cannot express): the library, why and the fix (the row's reason carries the
    install command), in place of one table row per case it would have run. A library that
    has other rows names the cases it did not run (``diffrax sparse``)."""
    ran = {r.get("backend") for r in records if r.get("status") != UNAVAILABLE}
    why: dict[str, list[str]] = {}
    for r in records:
        if r.get("status") == UNAVAILABLE:
            lib = str(r.get("backend") or "?")
            which = " ".join(str(x) for x in (lib, r.get("solver"), r.get("jacobian")) if x)
            reasons = why.setdefault(which if lib in ran else lib, [])
            reason = str(r.get("reason") or "no reason recorded")
            if reason not in reasons:
                reasons.append(reason)
    return [f"{name}: unavailable, {'not run' if ' ' in name else 'no rows'}: {'; '.join(reasons)}"
            for name, reasons in why.items()]  # fmt: skip


def sized_notes(
    records: Sequence[dict[str, Any]], gradient_rtol: float | None = None
) -> list[str]:  # fmt: skip
    """Under an array problem's table: each ladder's exponent, dense ÷ sparse where a library
    offers both, what each factorises, and (P growing) the gradients at scale, their
    crossovers and winners judged against ``gradient_rtol`` as the verdict is."""
    out = []
    for title, lines in (
        ("growth, time ∝ states^p over the three largest sizes completed (ok rows)",
         growth.growth_texts(records, gradient_rtol)),
        ("dense ÷ sparse at the largest size both completed", growth.ratio(records)),
        ("linear solvers", growth.linear_solvers(records)),
        *gradient_scaling.titled_notes(records, gradient_rtol),
    ):  # fmt: skip
        if lines:
            out.append(f"  {title}:")
            out += [textwrap.fill(ln, width=100, initial_indent="    ", subsequent_indent="      ")
                    for ln in lines]  # fmt: skip
    return out


def in_case_order(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows in the order the run planned its cases (``case_index``), not the order they
    finished in (a Dask run's); rows without one (older files) keep their place after."""
    return sorted(records, key=lambda r: r.get("case_index", math.inf))


def _row_label(r: dict[str, Any]) -> str:
    return " ".join(str(x) for x in (r.get("backend"), r.get("solver"), r.get("precision"))
                    if x)  # fmt: skip


def load_notes(records: Sequence[dict[str, Any]]) -> list[str]:
    """What the rows shared their machine with, when that bears on their timings: rows
    timed beside other cases on their host (this run's own, ``concurrent_own`` > 1, told
    apart from other runs', :mod:`~sciml_bench.results.sharing`) or while other processes
    took more than the load limit in force (``others_cpu``), and for CNN rows the
    thread budget, the load average it was decided at and the others' CPU during the run."""
    return (sharing.beside_other_cases(records) + sharing.beside_busy_processes(records)
            + _cnn_share(records))


def _cnn_share(records: Sequence[dict[str, Any]]) -> list[str]:
    """For CNN rows, one note of each row's thread budget, the load average at its start
    and the other processes' CPU during it, with where the budgets came from."""
    cnn = [r for r in records if r.get("kind") == "cnn" and r.get("cores")]
    if not cnn:
        return []
    parts = []
    for r in cnn:
        threads = r.get("threads")
        budget = f"{threads} thread{'s' * (threads != 1)}" if threads else "library threads"
        parts.append(f"{_row_label(r)} {budget}, {_num(r.get('load_start'), '.2f')}, "
                     f"{_num(r.get('others_cpu'), '.2f')}")  # fmt: skip
    sources = {str(r.get("threads_source")) for r in cnn if r.get("threads_source")}
    return [
        f"threads, 1-minute load average at the start, and cores' worth of CPU other "
        f"processes used during the run, on {cnn[0]['cores']} cores: {'; '.join(parts)}"
        + (f" (threads: {'; '.join(sorted(sources))})" if sources else "")
    ]


def generic_table(records: Sequence[dict[str, Any]]) -> str:
    """Rows whose kind has no dedicated layout: their scalar fields."""
    keys: list[str] = []
    for r in records:
        for k, v in r.items():
            if k not in keys and k not in ("reason", "kind", "problem") and isinstance(
                v, str | int | float | bool
            ):
                keys.append(k)
    keys = keys[:12]
    rows = []
    for r in records:
        row = []
        for k in keys:
            v = r.get(k)
            row.append(_num(v, ".3g") if isinstance(v, float) else ("-" if v is None else str(v)))
        rows.append(row)
    return render(keys, rows)


def verdict_lines(
    records: Sequence[dict[str, Any]], gradient_rtol: float | None = None,
    load_limit: float | None = None,
) -> list[str]:  # fmt: skip
    """The verdict lines of one problem's rows (:mod:`sciml_bench.results.verdict`),
    judged against ``gradient_rtol`` (``--gradient-rtol``; None: the pass tier) and
    ``load_limit`` (``--load-limit``; None: the limit in force), then, where the rows ran
    at several tolerances, from which rtol each library's gradient passes
    (:mod:`sciml_bench.results.tolerance_ladder`)."""
    from sciml_bench.results import tolerance_ladder, verdict

    ladder = [textwrap.fill(line, width=100, subsequent_indent="    ")
              for line in tolerance_ladder.lines(records, gradient_rtol)]  # fmt: skip
    return verdict.lines(records, gradient_rtol=gradient_rtol, load_limit=load_limit) + ladder


def json_records(
    records: Sequence[dict[str, Any]], gradient_rtol: float | None = None,
    load_limit: float | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """What ``--json`` prints: every case's :func:`json_record`, then the verdicts
    (records with ``kind = "verdict"``) and the tolerance ladders (``kind =
    "tolerance_ladder"``); case records carry no ``kind``, so consumers of case rows skip
    the others by it."""
    from sciml_bench.results import tolerance_ladder, verdict

    ladders = [x.to_json() for x in tolerance_ladder.ladders(records, gradient_rtol)]
    return ([json_record(r) for r in records]
            + verdict.json_records(records, gradient_rtol, load_limit) + ladders)  # fmt: skip


def json_record(r: dict[str, Any]) -> dict[str, Any]:
    """The machine-readable record: the documented ODE keys, or a CNN row's scalars."""
    if r.get("kind") == "cnn":
        return {k: v for k, v in r.items() if not isinstance(v, dict)}
    claims = {k: None if isinstance(v := r.get(k), float) and math.isnan(v) else v
              for k in CLAIM_JSON_KEYS}  # fmt: skip
    if r.get("kind") == "ensemble":  # judged as an ODE row: the same claims
        return {**{k: r.get(k) for k in (*JSON_KEYS, *ENSEMBLE_JSON_KEYS)}, **claims}
    if training.is_training(r):
        return {k: r.get(k) for k in (*JSON_KEYS, *training.JSON_KEYS)}
    if growth.is_sized(r):
        return {**{k: r.get(k) for k in (*JSON_KEYS, *SIZED_JSON_KEYS)}, **claims}
    return {**{k: r.get(k) for k in JSON_KEYS}, **claims}

