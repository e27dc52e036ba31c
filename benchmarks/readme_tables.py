"""Regenerate the README's gradients-at-scale table and crossover lines from the published file.

The table under "Which gradient method for my model size" is data, so it is printed from
``results/published/`` by this script, never typed: each cell is a row's steady gradient
(median ms) with its tier (norm-wise error in parentheses for a ``warn``), the fastest
qualifying row of each rung in bold (the verdict's own pick,
:func:`sciml_bench.results.gradient_scaling.rung_winners`), and below it each library's
crossover as an interval, by the verdict's rules.

    python benchmarks/readme_tables.py            # print the section's generated part
    python benchmarks/readme_tables.py --write    # replace it in README.md, between
                                                  # <!-- readme_tables:rates --> markers
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
START, END = "<!-- readme_tables:rates -->", "<!-- /readme_tables:rates -->"

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
    t = 1e3 * r["grad_s"]
    ms = f"{t:,.0f}" if t >= 100 else f"{t:.3g}"
    ms = f"**{ms}**" if bold else ms
    tier = r.get("gradient_tier") or ""
    err = r.get("gradient_error")
    if tier in ("warn", "fail", "unjudged") and isinstance(err, int | float):
        return f"{ms} {tier} ({err:.1e})"
    return f"{ms} {tier}".rstrip()


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


def write(lines: list[str], readme: Path = ROOT / "README.md") -> None:
    """Replace the text between the markers in ``readme`` with ``lines``."""
    text = readme.read_text()
    if START not in text or END not in text:
        sys.exit(f"{readme} has no {START} ... {END} markers: add them around the table")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(head + START + "\n" + "\n".join(lines) + "\n" + END + tail)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite README.md in place")
    ap.add_argument("--gradient-rtol", type=float, default=None)
    args = ap.parse_args(argv)
    lines = generated(published_rows("ladder stiff-robertson-rates"), args.gradient_rtol)
    if args.write:
        write(lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
