"""Export results files as JSON (everything) or CSV (one flat row per case).

JSON keeps every field of every record (raw samples, solutions, gradients),
the derived medians and IQRs, the file's metadata and its environment. NaN
and infinities become ``null``, as JSON has no spelling for them.

CSV has one row per case, scalars only, so that it opens in a spreadsheet:

- scalar fields as they are;
- ``X_iqr`` pairs as ``X_q1`` and ``X_q3``;
- raw sample lists (``*_samples``, ``epoch_s``) as their count ``X_n`` (and
  ``X_median`` where the record does not already carry the median, e.g.
  ``solve_s`` is the median of ``solve_samples``);
- ``phases`` (cold processes x phases) as ``phase_NAME_s``, the median over
  cold processes;
- ``reference_gradient`` as ``reference_gradient.NAME`` when the parameter
  names are known (from ``gradient``);
- dicts of scalars as ``key.sub``; other dicts as a JSON string;
- lists of strings joined with ``;``;
- other arrays (the solution ``y``) are left to the JSON export.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from sciml_bench.results.store import SAMPLE_FIELDS, Run
from sciml_bench.results.store import read as read_results

#: the first CSV columns, in this order, when present
LEADING = (
    "run_id", "problem", "kind", "backend", "solver", "gradient_method", "rtol", "atol",
    "status", "reason", "ttfg_s", "solve_s", "grad_s", "solution_error", "gradient_error",
    "gradient_tier",
)  # fmt: skip
SKIP_CSV = {"y", "phase_names"}


def _clean(x: Any) -> Any:
    """JSON-safe: arrays as lists, tuples as lists, NaN/inf as None."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    if isinstance(x, np.ndarray):
        return _clean(x.tolist())
    if isinstance(x, np.generic):
        return _clean(x.item())
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def to_json(runs: Sequence[Run]) -> str:
    doc = {
        "format": "sciml-bench-export",
        "files": [
            {
                "path": str(run.path),
                "meta": _clean(run.meta),
                "environment": _clean(run.environment),
                "records": _clean(run.records),
            }
            for run in runs
        ],
    }
    return json.dumps(doc, indent=1, allow_nan=False)


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, str | int | float | bool)


def _numeric_list(v: Any) -> np.ndarray | None:
    if not isinstance(v, list | tuple):
        return None
    try:
        a = np.asarray(v, dtype=float)
    except (TypeError, ValueError):
        return None
    return a


def _median(a: np.ndarray) -> float | None:
    a = a[np.isfinite(a)]
    return float(np.median(a)) if a.size else None


def flat_row(r: dict[str, Any]) -> dict[str, Any]:
    """One record as a dict of scalars (see the module docstring for the rules)."""
    row: dict[str, Any] = {}
    for k, v in r.items():
        if k in SKIP_CSV:
            continue
        if k.endswith("_iqr") and isinstance(v, list | tuple) and len(v) == 2:
            row[f"{k[:-4]}_q1"], row[f"{k[:-4]}_q3"] = v
        elif k.endswith("_iqr") and v is None:
            row[f"{k[:-4]}_q1"] = row[f"{k[:-4]}_q3"] = None
        elif _scalar(v):
            row[k] = v
        elif k == "phases":
            a = _numeric_list(v)
            names = list(r.get("phase_names") or [])
            if a is not None and a.ndim == 2 and a.shape[1] == len(names):
                for j, name in enumerate(names):
                    row[f"phase_{name}_s"] = _median(a[:, j])
        elif k == "reference_gradient" and isinstance(r.get("gradient"), dict):
            a = _numeric_list(v)
            names = list(r["gradient"])
            if a is not None and a.ndim == 1 and a.size == len(names):
                row.update({f"{k}.{n}": float(x) for n, x in zip(names, a, strict=True)})
        elif isinstance(v, dict):
            if all(_scalar(x) for x in v.values()):
                row.update({f"{k}.{sub}": x for sub, x in v.items()})
            else:
                row[k] = json.dumps(_clean(v), sort_keys=True)
        elif k.endswith("_samples") or k == "epoch_s":
            a = _numeric_list(v)
            if a is not None and a.ndim == 1:
                row[f"{k.removesuffix('_samples')}_n"] = int(a.size)
                if SAMPLE_FIELDS.get(k) not in r:  # solve_s etc. are already medians
                    row[f"{k.removesuffix('_samples')}_median"] = _median(a)
        elif isinstance(v, list | tuple) and all(isinstance(x, str) for x in v):
            row[k] = ";".join(v)
    return row


def rows(runs: Sequence[Run]) -> list[dict[str, Any]]:
    return [{"run_id": run.meta.get("run_id", run.path.stem), **flat_row(r)}
            for run in runs for r in run.records]  # fmt: skip


def columns(table: Sequence[dict[str, Any]]) -> list[str]:
    """LEADING columns that occur, then the rest in order of first appearance."""
    seen: dict[str, None] = {}
    for row in table:
        seen.update(dict.fromkeys(row))
    return [c for c in LEADING if c in seen] + [c for c in seen if c not in LEADING]


def to_csv(runs: Sequence[Run]) -> str:
    table = rows(runs)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns(table), lineterminator="\n")
    w.writeheader()
    for row in table:
        w.writerow({k: _csv_value(v) for k, v in row.items()})
    return buf.getvalue()


def _csv_value(v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, float):
        return repr(v)  # round-trips exactly
    return v


def frame(paths: Sequence[str | os.PathLike[str]]) -> Any:
    """The CSV table as a pandas DataFrame (one flat row per case)."""
    from sciml_bench.results.extras import require

    pd = require("pandas", "report", "sciml_bench.results.export.frame")

    table = rows([read_results(p) for p in paths])
    return pd.DataFrame(table, columns=columns(table))


def export(paths: Sequence[str | os.PathLike[str]], fmt: str) -> str:
    """The text of the export of ``paths`` in ``fmt`` ("json" or "csv")."""
    runs = [read_results(p) for p in paths]
    if fmt == "json":
        return to_json(runs)
    if fmt == "csv":
        return to_csv(runs)
    raise ValueError(f"unknown export format {fmt!r}; choose json or csv")
