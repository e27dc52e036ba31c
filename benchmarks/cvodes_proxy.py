"""Was the suite's CVODES through CasADi a fair proxy for CVODES? CasADi's rows against
AMICI's, side by side, from the published files (issue 41).

The same SUNDIALS integrator reached two ways: CasADi (an expression graph, its own
adjoint that adds a forward integration; sparse linear solver ``qr``, no KLU) and AMICI
(C++ generated per model, KLU, as systems biology runs CVODES). For every problem, size,
gradient method and Jacobian kind that both libraries ran ``ok``, in the published runs
(``results/published/files.json``), it prints each library's steady solve and gradient
(median of the row's samples), the ratio CasADi / AMICI, and whether that ratio clears the
verdict's noise floor (:func:`sciml_bench.measure.noise.steady_floor` on the two rows'
per-process medians: 2.1x for one process a side, a ladder rung's case), then the first
gradient (TTFG: AMICI's includes its C++ compile where its row says ``compiled``) and each
gradient's tier. The last lines count, per timing, where each library is ahead beyond the
floor and where they tie.

    python benchmarks/cvodes_proxy.py                       # every published run
    python benchmarks/cvodes_proxy.py --only "ladder stiff-robertson-groups"
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from readme_tables import PUBLISHED, ms, published_rows  # this folder's, run as a script

#: the two ways to CVODES, as their rows name them
CASADI, AMICI = "cvodes", "amici"
#: a timing one of the two rows lacks: printed as "-", counted nowhere
MISSING = "missing"


def pair_key(r: Mapping[str, Any]) -> tuple[Any, ...]:
    """What must match for two rows to be the same case: problem, size, method, Jacobian,
    tolerance."""
    return (r.get("problem"), r.get("size"), r.get("gradient_method"), r.get("jacobian"),
            r.get("rtol"))  # fmt: skip


def pairs(rows: Sequence[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """``(casadi, amici)`` for every case both ran ``ok``, in the rows' order."""
    amici = {pair_key(r): r for r in rows if r.get("backend") == AMICI and r.get("status") == "ok"}
    return [(r, amici[pair_key(r)]) for r in rows
            if r.get("backend") == CASADI and r.get("status") == "ok"
            and pair_key(r) in amici]  # fmt: skip


def judged(c: Mapping[str, Any], a: Mapping[str, Any], key: str) -> tuple[str, str | None]:
    """``(text, winner)`` for one steady timing: both medians, CasADi / AMICI, and who leads
    beyond the floor (None: a tie; :data:`MISSING`: a timing one row lacks)."""
    from sciml_bench.measure.noise import steady_floor

    tc, ta = c.get(f"{key}_s"), a.get(f"{key}_s")
    if not (isinstance(tc, float) and isinstance(ta, float) and tc > 0 and ta > 0):
        return "-", MISSING
    floor = steady_floor(c.get(f"{key}_process_medians"), a.get(f"{key}_process_medians")).value
    ratio = tc / ta
    winner = AMICI if ratio >= floor else CASADI if 1 / ratio >= floor else None
    lead = {AMICI: "AMICI ahead", CASADI: "CasADi ahead", None: "tie"}[winner]
    return f"{ms(tc)} ms / {ms(ta)} ms = {ratio:.2f}x ({lead}, floor {floor:.2f}x)", winner


def line(c: Mapping[str, Any], a: Mapping[str, Any]) -> tuple[str, dict[str, str | None]]:
    """One case's line and its winners per timing."""
    size = f" size {c['size']} ({c.get('n_state')} states, P = {c.get('n_params')})" \
        if c.get("size") is not None else ""  # fmt: skip
    solve, ws = judged(c, a, "solve")
    grad, wg = judged(c, a, "grad")
    source = ",".join(str(s) for s in a.get("model_sources") or []) or "compiled"
    ttfg = (f"TTFG {c.get('ttfg_s', float('nan')):.2f} s / {a.get('ttfg_s', float('nan')):.2f} s "
            f"(AMICI's model: {source})")  # fmt: skip
    tiers = f"tiers {c.get('gradient_tier')} / {a.get('gradient_tier')}"
    jac = c.get("jacobian") or "default"
    head = f"{c.get('problem')}{size}: {c.get('gradient_method')}, {jac} Jacobian"
    text = f"{head}\n    solve {solve}\n    grad  {grad}\n    {ttfg}; {tiers}"
    return text, {"solve": ws, "grad": wg}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[], metavar="RUN",
                    help="a published run's name in files.json (repeatable) [all]")
    args = ap.parse_args(argv)
    files = json.loads((PUBLISHED / "files.json").read_text())
    unknown = [k for k in args.only if k not in files]
    if unknown:
        sys.exit(f"cvodes_proxy: no published run {unknown}; choose from {', '.join(files)}")
    tally: Counter[tuple[str, str | None]] = Counter()
    print("CasADi CVODES / AMICI CVODES (ratio > 1: AMICI faster)")
    for key in args.only or list(files):
        found = pairs(published_rows(key))
        if not found:
            continue
        print(f"\n== {key}: {len(found)} case(s) both ran ok")
        for c, a in found:
            text, winners = line(c, a)
            print(text)
            tally.update((kind, w) for kind, w in winners.items() if w != MISSING)
    print()
    for kind in ("solve", "grad"):
        n = {w: tally[(kind, w)] for w in (CASADI, AMICI, None)}
        print(f"{kind}: CasADi ahead {n[CASADI]}, AMICI ahead {n[AMICI]}, tie {n[None]} "
              "(beyond each pair's floor)")


if __name__ == "__main__":
    main()
