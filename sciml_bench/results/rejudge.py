"""Re-judging a results file against the current reference, without running its rows again.

A row's gradient is stored (``gradient``, by name, natural units), so any later reference,
newer (a new :data:`~sciml_bench.problem.reference.REFERENCE_VERSION`) or tighter (the
problem file's ``[reference]`` tolerances), can judge it again. This module holds what does
not need the run layer: which rows can be re-judged (:func:`candidate`), a row with its new
columns and what they replaced (:func:`rejudged`, under ``rejudged_from``), a row kept as it
was (:func:`kept`), what moved (:func:`moves`, :func:`move_table`), the new file
(:func:`write`), and when a file is older than the code that would publish it
(:func:`stale_reasons`). The command (``sciml-bench rejudge``, :mod:`sciml_bench.cli.rejudge`)
rebuilds each row's problem and reference and scores it with the run's own functions.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sciml_bench.results.store import (
    PROCESS_MEDIAN_FIELDS,
    SAMPLE_FIELDS,
    ResultsError,
    ResultsWriter,
    Run,
)
from sciml_bench.results.table import fmt_rtol, render
from sciml_bench.results.verdict import label

#: the columns a re-judge replaces: set anew from the current reference, or removed when
#: the new scores have no value for them (a stale note must not outlive its score)
REPLACED = (
    "gradient_error", "gradient_error_measure", "gradient_worst", "gradient_worst_at",
    "gradient_cosine", "gradient_check", "gradient_tier", "gradient_tier_note",
    "gradient_suspect_note", "gradient_error_note", "reference_error",
    "solution_error", "solution_error_rel_final", "solution_error_final", "solution_error_l2",
    "solution_error_note", "reference_loss", "reference_gradient", "reference_directional",
    "reference_method", "complex_step_agreement", "complex_step_skipped",
    "reference_cross_check", "reference_cross_check_agreement", "reference_tolerance_error",
    "reference_unverified", "reference_source", "reference_path", "reference_rtol",
    "reference_note", "reference_version", "gradient_judged", "gradient_theta",
    "gradient_judged_scale", "rejudge_note",
)  # fmt: skip
#: keys :func:`~sciml_bench.results.store.summarize` derives when reading (never stored);
#: an ensemble row's throughputs too (:data:`ENSEMBLE_DERIVED`)
DERIVED = (*SAMPLE_FIELDS.values(), *(f"{k[:-2]}_iqr" for k in SAMPLE_FIELDS.values()),
           *PROCESS_MEDIAN_FIELDS.values())
ENSEMBLE_DERIVED = ("throughput", "grad_throughput")
#: a reference cache file's name: ``NAME-HASH-vVERSION.json`` (ensembles and training
#: curves add their own suffix after the version)
#: how a kept row's ``rejudge_note`` begins
_KEPT = "not re-judged: "
_CACHE_NAME = re.compile(r"-([0-9a-f]{16})-v(\d+)(?=[-.])")


def candidate(r: dict[str, Any]) -> bool:
    """Whether a row can be re-judged: an ODE row (a size ladder's included) with a stored
    gradient, or an ensemble row that was scored (its stored gradient is scored again; one
    stored without it, from the projections' judge, has its tier withdrawn:
    :func:`withdrawn`). Training and CNN rows, and rows never scored, are carried."""
    kind = r.get("kind", "ode")
    stored_gradient = isinstance(r.get("gradient"), dict) and bool(r["gradient"])
    if kind == "ode":
        return stored_gradient
    return kind == "ensemble" and (stored_gradient or bool(r.get("gradient_tier")))


#: why an ensemble row stored without its gradient loses its tier (:func:`withdrawn`)
WITHDRAWN = ("its gradient was not stored (it was scored on {check} projections against a "
             "finite-difference reference that gave no estimate of its own error), so the full "
             "reference cannot judge it: its tier is withdrawn. Fix: run it again "
             "(`sciml-bench run {problem}`)")  # fmt: skip


def withdrawn(r: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The columns and note of an ensemble row that cannot be scored again (no stored
    gradient): ``unjudged`` with the reason; its solution's scores and the reference it
    was scored against stay as they were (the old error and tier go under
    ``rejudged_from``)."""
    kept_keys = [k for k in REPLACED if k.startswith("solution_error")
                 or k in ("reference_loss", "reference_method")]  # fmt: skip
    check = str(r.get("gradient_check") or "its").removeprefix("directional ")
    note = WITHDRAWN.format(check=check, problem=r.get("problem", "PROBLEM"))
    columns = {k: r[k] for k in kept_keys if k in r}
    columns.update(gradient_tier="unjudged", gradient_error_note=f"unjudged: {note}")
    return columns, [note]


def default_out(path: str | Path) -> Path:
    """``FILE-rejudged.h5`` beside ``FILE.h5``."""
    p = Path(path)
    return p.with_name(f"{p.stem}-rejudged{p.suffix or '.h5'}")


def cache_facts(r: dict[str, Any], environment: dict[str, Any]) -> tuple[str | None, int | None]:
    """The content hash and reference version a row was judged with, read from its
    reference's cache file name (the row's ``reference_path``, else the run's
    ``environment.references``); a re-judged row's ``reference_version`` wins."""
    path = r.get("reference_path")
    if not path:
        path = ((environment.get("references") or {}).get(str(r.get("problem"))) or {}).get("path")
    m = _CACHE_NAME.search(Path(str(path)).name) if path else None
    version = r.get("reference_version")
    if isinstance(version, int | float) and not isinstance(version, bool):
        return (m.group(1) if m else None), int(version)
    return (m.group(1), int(m.group(2))) if m else (None, None)


def rejudged(r: dict[str, Any], columns: dict[str, Any], environment: dict[str, Any],
             version: int, notes: Sequence[str] = ()) -> dict[str, Any]:  # fmt: skip
    """``r`` with the columns a re-judge computed (a None value removes the key), its
    ``reference_version``, the notes (``rejudge_note``) and, under ``rejudged_from``,
    every key it replaced or removed as it was, with the reference version it was judged
    with (a row re-judged before keeps that chain inside)."""
    _, old_version = cache_facts(r, environment)
    before = {k: r[k] for k in REPLACED if k in r}
    before["reference_version"] = old_version
    out = {k: v for k, v in r.items() if k not in REPLACED and k != "rejudged_from"}
    if "rejudged_from" in r:
        before["rejudged_from"] = r["rejudged_from"]
    out.update({k: v for k, v in columns.items() if v is not None})
    out["reference_version"] = version
    out["rejudged_from"] = before
    if notes:
        out["rejudge_note"] = "; ".join(notes)
    return out


def kept(r: dict[str, Any], why: str) -> dict[str, Any]:
    """A row that could not be re-judged, as it was, saying why (``rejudge_note``)."""
    return {**r, "rejudge_note": f"{_KEPT}{why}"}


def row_label(r: dict[str, Any]) -> str:
    """``stiff-robertson diffrax Kvaerno5 ... rtol 1e-06 n=10``: a row as the table of
    moves names it (the verdict's label, with the problem, tolerance and size)."""
    parts = [str(r.get("problem", "?")), label(r)]
    if r.get("rtol") is not None:
        parts.append(f"rtol {fmt_rtol(r['rtol'])}")
    if r.get("size") is not None:
        parts.append(f"{r.get('size_name') or 'n'}={r['size']}")
    return " ".join(p for p in parts if p)


@dataclass
class Move:
    """One re-judged row: its error and tier before and after."""

    label: str
    old_error: float | None
    old_tier: str
    new_error: float | None
    new_tier: str
    #: the measure the old error was on: ``norm``, ``component`` (rows judged before
    #: reference version 7 have no ``gradient_error_measure``: the largest component's) or
    #: ``directional`` (norm-wise over random projections: ``gradient_check`` said so)
    old_measure: str = "norm"

    @property
    def moved(self) -> bool:
        return self.old_tier != self.new_tier

    def to_json(self) -> dict[str, Any]:
        return {"row": self.label, "old_error": self.old_error, "old_tier": self.old_tier,
                "old_measure": self.old_measure, "new_error": self.new_error,
                "new_tier": self.new_tier, "moved": self.moved}  # fmt: skip


def _number(x: Any) -> float | None:
    ok = isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if ok else None


def moves(new_records: Sequence[dict[str, Any]]) -> list[Move]:
    """Every row of ``new_records`` re-judged (``rejudged_from``; not one :func:`kept` as it
    was from an earlier re-judge), before and after."""
    out = []
    for r in new_records:
        was = r.get("rejudged_from")
        if not isinstance(was, dict) or str(r.get("rejudge_note", "")).startswith(_KEPT):
            continue
        out.append(Move(row_label(r), _number(was.get("gradient_error")),
                        str(was.get("gradient_tier") or "-"), _number(r.get("gradient_error")),
                        str(r.get("gradient_tier") or "-"), _old_measure(was)))  # fmt: skip
    return out


def _old_measure(was: dict[str, Any]) -> str:
    """The measure a replaced error was on (:attr:`Move.old_measure`)."""
    if str(was.get("gradient_check") or "").startswith("directional"):
        return "directional"
    return str(was.get("gradient_error_measure") or "component")


#: the mark of an old error on another measure than today's, and what it says
_MARKS = {"component": ("†", "the largest component's relative error"),
          "directional": ("‡", "norm-wise over 8 random projections of the gradient")}  # fmt: skip


def _cell(error: float | None, tier: str, measure: str = "norm") -> str:
    mark = f" {_MARKS[measure][0]}" if measure in _MARKS else ""
    return f"{'-' if error is None else f'{error:.2e}'} {tier}{mark}"


def move_table(found: Sequence[Move]) -> str:
    """The rows whose tier moved, old error and tier → new, and a line counting the rest."""
    moved = [m for m in found if m.moved]
    head = (f"{len(found)} row(s) re-judged: {len(moved)} tier(s) moved, "
            f"{len(found) - len(moved)} kept their tier")  # fmt: skip
    if not moved:
        return head
    rows = [[m.label, _cell(m.old_error, m.old_tier, m.old_measure), "->",
             _cell(m.new_error, m.new_tier)] for m in moved]  # fmt: skip
    note = "".join(f"\n{mark} on the measure it was judged with then: {what} (now the "
                   "norm-wise ‖g − r‖/‖r‖ of the full gradient)"
                   for measure, (mark, what) in _MARKS.items()
                   if any(m.old_measure == measure for m in moved))  # fmt: skip
    return head + "\n" + render(["row", "before", "", "after"], rows) + note


def verdict_moves(before: Sequence[str], after: Sequence[str]) -> list[str]:
    """The verdict lines that changed, each before (``-``) and after (``+``), and a count
    of those that did not (every line, ``-`` then ``+``, if the comparisons differ)."""
    if len(before) != len(after):
        return ["verdicts before:", *before, "verdicts after:", *after]
    changed = [(b, a) for b, a in zip(before, after, strict=True) if b != a]
    head = f"verdicts: {len(changed)} of {len(before)} moved"
    return [head, *(line for b, a in changed for line in (f"- {b}", f"+ {a}"))]


def stored(r: dict[str, Any]) -> dict[str, Any]:
    """A row as it is written: without what reading derives (medians, IQRs, an ensemble
    row's throughputs; a CNN row's own ``throughput`` is stored)."""
    derived = (*DERIVED, *ENSEMBLE_DERIVED) if r.get("kind") == "ensemble" and r.get("size") else DERIVED
    return {k: v for k, v in r.items() if k not in derived}


def check_out(source: str | Path, out: str | Path) -> Path:
    """``out`` as the path a re-judged file may be written to: neither the file being
    re-judged nor any existing file (a :class:`ResultsError` saying what to do)."""
    out = Path(out)
    if out.resolve() == Path(source).resolve():
        raise ResultsError(f"{out}: that is the file being re-judged (never overwritten); "
                           "pass --out NEW.h5")  # fmt: skip
    if out.exists():
        raise ResultsError(f"{out} exists; remove it or pass --out NEW.h5")
    return out


def write(run: Run, records: Sequence[dict[str, Any]], out: Path,
          rejudge: dict[str, Any]) -> Path:  # fmt: skip
    """A new results file at ``out`` (:func:`check_out`): the run's header, status and
    environment, ``environment.rejudged`` (``rejudge``: what re-judged it, when, with which
    reference version) and ``records``."""
    out = check_out(run.path, out)
    env = {**run.environment, "rejudged": rejudge}
    writer = ResultsWriter(out, env, str(run.meta.get("command", "")))
    writer.meta["created"] = run.meta.get("created", writer.meta["created"])
    for r in records:
        writer.records.append(stored(r))
    writer.finish(str(run.meta.get("status") or "complete"), run.meta.get("interrupted_by"))
    writer.close()
    return out


def rejudge_facts(source: Path, command: str, version: int, refresh: bool,
                  commit: str | None) -> dict[str, Any]:  # fmt: skip
    """``environment.rejudged`` of a re-judged file."""
    return {"from": str(source), "command": command, "reference_version": version,
            "refresh": refresh, "git_commit": commit,
            "at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}  # fmt: skip


def _judged(r: dict[str, Any]) -> bool:
    """Whether a row was scored against a reference (its version then matters)."""
    if r.get("reference_source") == "none" or r.get("kind") == "cnn":
        return False
    return any(r.get(k) is not None for k in ("gradient_error", "solution_error", "reference_method"))


def _old_ensembles(records: Sequence[dict[str, Any]], environment: dict[str, Any]) -> list[str]:
    """Why a file's scored ensemble rows are stale: their reference's cache name carries an
    ensemble version below :data:`~sciml_bench.problem.ensemble_reference.VERSION` (none:
    the finite-difference reference, which gave no estimate of its own error)."""
    from sciml_bench.problem.ensemble_reference import VERSION

    old = 0
    for r in records:
        if r.get("kind") != "ensemble" or r.get("gradient_error") is None:
            continue
        path = r.get("reference_path") or ((environment.get("references") or {}).get(
            str(r.get("problem"))) or {}).get("path")
        m = re.search(r"-ensemble-v(\d+)-", Path(str(path)).name) if path else None
        old += not m or int(m.group(1)) < VERSION
    if not old:
        return []
    return [f"{old} ensemble row(s) judged by an ensemble reference before version {VERSION} "
            "(finite differences, no estimate of its own error)"]


def stale_reasons(
    records: Sequence[dict[str, Any]], environment: dict[str, Any], version: int,
    code_changed: Callable[[str], bool | None],
) -> list[str]:  # fmt: skip
    """Why a results file is older than the code that would publish it ([] when it is not):
    a row judged with a reference version below ``version`` (or none recorded), or a run
    commit (``environment.git_commit``, ``-dirty`` stripped) whose ``sciml_bench/`` differs
    from HEAD's (``code_changed(commit)``: True, False, or None when it cannot tell)."""
    out = []
    versions = [cache_facts(r, environment)[1] for r in records if _judged(r)]
    old = sorted({v for v in versions if v is not None and v < version})
    unknown = sum(v is None for v in versions)
    if old:
        out.append(f"rows judged with reference version {', '.join(map(str, old))} "
                   f"(now {version})")  # fmt: skip
    if unknown:
        out.append(f"{unknown} row(s) record no reference version (written before it was recorded)")
    out += _old_ensembles(records, environment)
    commit = str(environment.get("git_commit") or "").removesuffix("-dirty")
    if not commit:
        out.append("its run recorded no git commit")
    else:
        changed = code_changed(commit)
        if changed is None:
            out.append(f"its run's commit {commit[:10]} is not in this repository")
        elif changed:
            out.append(f"sciml_bench/ changed between its run's commit {commit[:10]} and HEAD")
    return out
