"""Regenerate the README's tables of published figures from the published files.

Those tables are data, so they are printed from ``results/published/`` by this script,
never typed. Each sits in README.md between ``<!-- readme_tables:NAME -->`` markers:

- ``rates`` ("Which gradient method for my model size"): each cell a row's steady
  gradient (median ms) with its tier (norm-wise error in parentheses for a ``warn``), the
  fastest qualifying row of each rung in bold (the verdict's own pick,
  :func:`sciml_bench.results.gradient_scaling.rung_winners`), and below it each library's
  crossover as an interval, by the verdict's rules;
- ``groups`` and ``brusselator`` ("At the anchors' sizes"): each sparse library's steady
  solve and forward-sensitivity gradient (median ms) at the ladder's three largest sizes,
  a failed or skipped rung by its status, and the growth exponent over the three largest
  sizes each line completed (``sciml-bench show``'s); the Brusselator's diffsol rows from
  its top rungs' run with the larger budget where that run has them.

    python benchmarks/readme_tables.py            # print every table, markers included
    python benchmarks/readme_tables.py --write    # replace each in README.md
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT / "results" / "published"

#: the anchors' tables: name -> (ladder run, top-rungs run or None, first heading, sizes)
ANCHORS = {
    "groups": ("ladder stiff-robertson-groups", None, "ROBER groups (states)",
               (100, 1000, 10000)),
    "brusselator": ("ladder stiff-brusselator-2d", "top stiff-brusselator-2d",
                    "Brusselator N (states)", (32, 64, 128)),
}  # fmt: skip
#: the anchors' columns, sparse Jacobians: (heading, backend, gradient method, timings)
ANCHOR_COLUMNS = (
    ("SciPy BDF solve", "scipy", "none", ("solve_s",)),
    ("CVODES solve / gradient", "cvodes", "forward", ("solve_s", "grad_s")),
    ("diffsol solve / gradient", "diffsol", "forward", ("solve_s", "grad_s")),
    ("AMICI solve / gradient", "amici", "forward", ("solve_s", "grad_s")),
)

#: the table's columns: (heading, backend, gradient method, Jacobian kind)
COLUMNS = (
    ("CVODES forward", "cvodes", "forward", "sparse"),
    ("CVODES adjoint", "cvodes", "adjoint", "sparse"),
    ("diffsol forward", "diffsol", "forward", "sparse"),
    ("diffsol adjoint", "diffsol", "adjoint", "sparse"),
    ("AMICI forward", "amici", "forward", "sparse"),
    ("AMICI adjoint", "amici", "adjoint", "sparse"),
    ("Diffrax RecursiveCheckpoint (dense)", "diffrax", "RecursiveCheckpointAdjoint", "dense"),
)


def published_rows(key: str) -> list[dict[str, Any]]:
    """The records of the published file ``key`` names in ``files.json``."""
    from sciml_bench.results import store

    files = json.loads((PUBLISHED / "files.json").read_text())[key]
    rows: list[dict[str, Any]] = []
    for name in files:
        run = store.read(PUBLISHED / name)
        rows += [{**r, "_run": name} for r in run.records]
    return rows


def cell(r: Mapping[str, Any] | None, bold: bool) -> str:
    """One row's steady gradient and tier, or why it has none."""
    if r is None:
        return "-"
    if r.get("status") != "ok" or not isinstance(r.get("grad_s"), int | float):
        return "not run (forecast)" if r.get("status") == "skipped" else str(r.get("status"))
    text = ms(float(r["grad_s"]))
    text = f"**{text}**" if bold else text
    tier = r.get("gradient_tier") or ""
    err = r.get("gradient_error")
    if tier in ("warn", "fail", "unjudged") and isinstance(err, int | float):
        return f"{text} {tier} ({err:.1e})"
    return f"{text} {tier}".rstrip()


def table(rows: Sequence[Mapping[str, Any]], winners: set[int]) -> list[str]:
    """The markdown table: one line per P, one column per :data:`COLUMNS` entry."""
    ps = sorted({int(r["n_params"]) for r in rows if isinstance(r.get("n_params"), int)})
    out = ["| P | " + " | ".join(c[0] for c in COLUMNS) + " |",
           "| --- |" + " --- |" * len(COLUMNS)]  # fmt: skip
    by_size = {int(r["size"]): r for r in rows if r.get("n_params")}
    sizes = {int(r["n_params"]): int(r["size"]) for r in by_size.values()}
    for p in ps:
        cells = []
        for _, backend, method, jac in COLUMNS:
            match = [r for r in rows if r.get("backend") == backend
                     and r.get("gradient_method") == method and r.get("jacobian") == jac
                     and r.get("size") == sizes[p]]  # fmt: skip
            r = match[0] if match else None
            cells.append(cell(r, r is not None and id(r) in winners))
        out.append(f"| {p:,} | " + " | ".join(cells) + " |")
    return out


def generated(rows: list[dict[str, Any]], gradient_rtol: float | None = None) -> list[str]:
    """The table, then each rung's winner and each library's crossover, as the
    ``show`` command words them."""
    from sciml_bench.results import gradient_scaling, verdict

    winners = {id(p.winner) for v in verdict.verdicts(rows, gradient_rtol)
               for p in v.picks if p.key == "grad_s"}  # fmt: skip
    lines = table(rows, winners)
    lines.append("")
    for text in gradient_scaling.crossover_texts(rows, gradient_rtol):
        if "no forward mode" in text:
            continue  # Diffrax, torchdiffeq, torchode: reverse mode only
        for run in {str(r.get("_run")) for r in rows}:
            text = text.removeprefix(f"{run} ")
        lines.append(f"- {text}")
    return lines


def ms(seconds: float) -> str:
    """Milliseconds as the README prints them: three significant figures, whole below
    100 with thousands separated above."""
    t = 1e3 * seconds
    return f"{t:,.0f}" if t >= 100 else f"{t:.3g}"


def failed(r: Mapping[str, Any] | None) -> str:
    """A rung without a timing, by its status (and the phase a failure ended in)."""
    if r is None:
        return "-"
    if r.get("status") == "skipped":
        return "not run (forecast)" if r.get("forecast_least_s") else "not run"
    during = str(r.get("failed_phase") or "").replace("_", " ")  # the phase it ended in
    status = str(r.get("status")).replace("_", " ")
    return f"{status} ({during})" if during else status


def anchor_cell(r: Mapping[str, Any] | None, keys: Sequence[str]) -> str:
    """``solve / gradient`` in ms, a single sample said so, or the rung's status."""
    if r is None or r.get("status") != "ok":
        return failed(r)
    cells = []
    for key in keys:
        t = r.get(key)
        if not isinstance(t, int | float):
            return failed(r)
        one = len(r.get(key.replace("_s", "_samples")) or ()) == 1
        cells.append(ms(float(t)) + (" (one sample)" if one else ""))
    return " / ".join(cells)


def anchor_rows(key: str, top: str | None) -> list[dict[str, Any]]:
    """A ladder's rows, its top rungs' rows (run again with a larger budget) in place of
    the same case's where those completed or the ladder's did not."""
    rows = [r for r in published_rows(key) if r.get("size") is not None]
    if top is None:
        return rows
    case = ("backend", "solver", "gradient_method", "jacobian", "size")
    again = {tuple(r.get(k) for k in case): r for r in published_rows(top)
             if r.get("size") is not None}  # fmt: skip
    out = []
    for r in rows:
        t = again.get(tuple(r.get(k) for k in case))
        out.append(t if t is not None and (t.get("status") == "ok" or r.get("status") != "ok")
                   else r)  # fmt: skip
    return out


def anchor_table(rows: Sequence[Mapping[str, Any]], heading: str, sizes: Sequence[int]) -> list[str]:
    """One anchor table: a line per size, a line of growth exponents."""
    from sciml_bench.results import growth

    def line_of(backend: str, method: str) -> dict[int, Mapping[str, Any]]:
        return {int(r["size"]): r for r in rows if r.get("backend") == backend
                and r.get("gradient_method") == method and r.get("jacobian") == "sparse"}

    lines = {c[0]: line_of(c[1], c[2]) for c in ANCHOR_COLUMNS}
    out = [f"| {heading} | " + " | ".join(c[0] for c in ANCHOR_COLUMNS) + " |",
           "| --- |" + " --- |" * len(ANCHOR_COLUMNS)]  # fmt: skip
    for size in sizes:
        states = next((int(r["n_state"]) for r in rows if r.get("size") == size
                       and r.get("n_state")), None)  # fmt: skip
        label = f"{size:,} ({states:,})" if states else f"{size:,}"
        cells = [anchor_cell(lines[c[0]].get(size), c[3]) for c in ANCHOR_COLUMNS]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    exps = []
    for name, _, _, keys in ANCHOR_COLUMNS:
        parts = []
        for key in keys:
            pts = {int(r["n_state"]): float(r[key]) for r in lines[name].values()
                   if r.get("status") == "ok" and isinstance(r.get(key), int | float)
                   and r.get("n_state")}  # fmt: skip
            e = growth.exponent(pts)
            parts.append("-" if e is None else f"{e.p:.2f}" + (" (two sizes)" if e.k == 2 else ""))
        exps.append(" / ".join(parts))
    out.append("| exponent p, three largest | " + " | ".join(exps) + " |")
    return out


def sections(gradient_rtol: float | None) -> dict[str, list[str]]:
    """Every generated table, by its marker's name."""
    out = {"rates": generated(published_rows("ladder stiff-robertson-rates"), gradient_rtol)}
    for name, (key, top, heading, sizes) in ANCHORS.items():
        out[name] = anchor_table(anchor_rows(key, top), heading, sizes)
    return out


def markers(name: str) -> tuple[str, str]:
    return f"<!-- readme_tables:{name} -->", f"<!-- /readme_tables:{name} -->"


def write(name: str, lines: list[str], readme: Path = ROOT / "README.md") -> None:
    """Replace the text between ``name``'s markers in ``readme`` with ``lines``."""
    start, end = markers(name)
    text = readme.read_text()
    if start not in text or end not in text:
        sys.exit(f"{readme} has no {start} ... {end} markers: add them around the table")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    readme.write_text(head + start + "\n" + "\n".join(lines) + "\n" + end + tail)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite README.md in place")
    ap.add_argument("--gradient-rtol", type=float, default=None)
    args = ap.parse_args(argv)
    for name, lines in sections(args.gradient_rtol).items():
        if args.write:
            write(name, lines)
        start, end = markers(name)
        print("\n".join([start, *lines, end]))


if __name__ == "__main__":
    main()
