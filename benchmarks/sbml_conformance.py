"""The SBML importer held to the SBML Test Suite: each time-course case of a local copy of
``cases/semantic`` (sbmlteam/sbml-test-suite; fetch it yourself, this project ships none
of its files) is imported, solved by the reference solver (SciPy BDF on the generated
NumPy right-hand side and exact Jacobian, Radau then LSODA if it fails) at rtol 1e-10 over
the case's span and steps, and its variables compared with the case's ``-results.csv``
at the case's own tolerances: a point passes when ``|x - x_expected| <= absolute +
relative * |x_expected|``.

Each case is one of ``pass``, ``refused`` (the importer said why, in one line),
``wrong`` (a value outside the tolerances) or ``crash`` (anything else: a bug). The table
gives the counts per tag (a case counts under each of its component and test tags), then
the totals over every case and over the *supported subset*: cases whose tags all lie in
:data:`SUPPORTED` (compartments, species, parameters, reactions, rate and assignment
rules, initial assignments, function definitions and the tests on them). ``--refusals``
prints the most common refusal reasons.

    python benchmarks/sbml_conformance.py CASES_DIR [--first N] [--cases 1-100,205]
        [--timeout 20] [--refusals 10] [--wrong]
"""

from __future__ import annotations

import argparse
import collections
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: the tags of the constructs the importer supports (the Test Suite's names)
SUPPORTED = frozenset({
    "Compartment", "Species", "Reaction", "Parameter", "RateRule", "AssignmentRule",
    "InitialAssignment", "FunctionDefinition", "Amount", "Concentration",
    "InitialValueReassigned", "NonConstantParameter", "NonUnityStoichiometry",
    "NonUnityCompartment", "CSymbolTime", "BoundaryCondition", "AssignedConstantStoichiometry",
    "HasOnlySubstanceUnits", "LocalParameters", "DefaultValue", "ConversionFactors",
    "NonConstantCompartment", "ReversibleReaction", "ConstantSpecies", "SpeciesReferenceInMath",
    "MultiCompartment", "CSymbolAvogadro", "UncommonMathML", "VolumeConcentrationRates",
    "L3v2MathML", "ExtentConversionFactor", "0D-Compartment", "NoMathML",
})
#: model files by preference: the newest level first
LEVELS = ("l3v2", "l3v1", "l2v5", "l2v4", "l2v3", "l2v2", "l2v1")
RTOL = 1e-10


def _header(case: Path) -> dict[str, str]:
    """The ``key: value`` lines at the top of the case's ``-model.m``."""
    text = (case / f"{case.name}-model.m").read_text(errors="replace")
    return dict(re.findall(r"^(\w+):[ \t]*(.*?)[ \t]*$", text[:3000], re.MULTILINE))


def _settings(case: Path) -> dict[str, str]:
    text = (case / f"{case.name}-settings.txt").read_text()
    return dict(re.findall(r"^(\w+):[ \t]*(.*?)[ \t]*$", text, re.MULTILINE))


def _ids(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


class _Timeout(Exception):
    pass


def _alarm(_signum: int, _frame: Any) -> None:
    raise _Timeout


def solve(problem: Any, atol: float) -> np.ndarray:
    """The states at the save points, by the reference's solver (BDF, Radau, LSODA)."""
    from sciml_bench.problem.reference import ReferenceError, _Solver

    theta = np.asarray(problem.theta0, dtype=float)
    last: Exception | None = None
    for method in ("BDF", "Radau", "LSODA"):
        try:
            return _Solver(problem, method, RTOL, atol).solve(theta)
        except ReferenceError as e:
            last = e
    raise RuntimeError(f"every solver failed: {last}")


def outputs(imported: Any, variables: list[str], amounts: set[str]) -> list[Any]:
    """Each variable as an expression of the states, parameters and t: a species as its
    amount or concentration (as the settings list it), anything else its value."""
    system = imported.system
    out = []
    for v in variables:
        if v in system.amounts:
            comp = _compartment_of(imported, v)
            out.append(system.amounts[v] if v in amounts else system.amounts[v] / comp)
        elif v in system.values:
            out.append(system.values[v])
        else:
            raise KeyError(f"variable {v!r} is not a compartment, species or parameter")
    return out


def _compartment_of(imported: Any, species: str) -> Any:
    facts = imported.facts
    return imported.system.values[facts.quantities[species].compartment]


def run_case(case: Path, timeout: float) -> tuple[str, str]:
    """``(outcome, detail)`` of one case."""
    import sympy

    from sciml_bench.problem import spec
    from sciml_bench.problem.sbml import read
    from sciml_bench.problem.sbml.mathml import TIME, sym

    s = _settings(case)
    model = next((case / f"{case.name}-sbml-{lv}.xml" for lv in LEVELS
                  if (case / f"{case.name}-sbml-{lv}.xml").exists()), None)  # fmt: skip
    if model is None:
        return "refused", "no SBML Level 2 or 3 file"
    start, duration, steps = float(s["start"]), float(s["duration"]), int(s["steps"])
    if start != 0:
        return "refused", "a start time other than 0"
    points = np.linspace(start, start + duration, steps + 1)
    signal.alarm(int(timeout))
    try:
        try:
            imported = read.read(model, save_points=[float(p) for p in points])
            problem = spec.from_dict(imported.data, source=str(model))
        except spec.ProblemError as e:
            return "refused", e.reason
        variables = _ids(s["variables"])
        exprs = outputs(imported, variables, set(_ids(s.get("amount", ""))))
        y = solve(problem, float(s["absolute"]) * 1e-3)
        args = [TIME, *imported.system.states, *map(sym, imported.system.params)]
        columns = [_evaluate(sympy, args, e, points, y, problem.theta0) for e in exprs]
    except _Timeout:
        return "crash", f"over {timeout:g} s"
    except Exception as e:  # a bug, counted and shown, not a stop
        return "crash", f"{type(e).__name__}: {e}"[:200]
    finally:
        signal.alarm(0)
    return _compare(case, variables, np.column_stack(columns), s)


def _evaluate(sympy: Any, args: list[Any], e: Any, t: np.ndarray, y: np.ndarray,
              theta: Any) -> np.ndarray:  # fmt: skip
    f = sympy.lambdify(args, e, modules="numpy")
    values = f(t, *y.T, *theta)
    return np.broadcast_to(np.asarray(values, dtype=float), t.shape)


def _compare(case: Path, variables: list[str], got: np.ndarray, s: dict[str, str]) -> tuple[str, str]:
    """``pass`` when every value lies within the case's tolerances of its results."""
    raw = np.genfromtxt(case / f"{case.name}-results.csv", delimiter=",", names=True,
                        deletechars="", dtype=float)  # fmt: skip
    atol, rtol = float(s["absolute"]), float(s["relative"])
    worst = ""
    for j, v in enumerate(variables):
        want = np.asarray(raw[v], dtype=float)
        have = got[: len(want), j]
        both_nan = np.isnan(want) & np.isnan(have)
        ok = both_nan | (np.abs(have - want) <= atol + rtol * np.abs(want)) | (have == want)
        if not np.all(ok):
            i = int(np.argmin(ok))
            worst = f"{v} at t={raw['time'][i]:g}: {have[i]:.6g} vs {want[i]:.6g}"
            return "wrong", worst
    return "pass", ""


def _cases(root: Path, first: int | None, chosen: str | None) -> list[Path]:
    dirs = sorted(p for p in root.iterdir() if p.is_dir() and p.name.isdigit())
    if chosen:
        keep: set[int] = set()
        for part in chosen.split(","):
            a, _, b = part.partition("-")
            keep |= set(range(int(a), int(b or a) + 1))
        dirs = [d for d in dirs if int(d.name) in keep]
    return dirs[:first] if first else dirs


def _table(rows: list[tuple[str, set[str], str, str]]) -> None:
    kinds = ("pass", "refused", "wrong", "crash")
    per_tag: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for _, tags, outcome, _ in rows:
        for tag in tags:
            per_tag[tag][outcome] += 1
    print(f"{'tag':32} {'cases':>6} " + " ".join(f"{k:>8}" for k in kinds) + "  supported")
    for tag in sorted(per_tag, key=lambda t: -sum(per_tag[t].values())):
        c = per_tag[tag]
        print(f"{tag:32} {sum(c.values()):6d} " + " ".join(f"{c[k]:8d}" for k in kinds)
              + ("  yes" if tag in SUPPORTED else ""))
    for label, subset in (("total", rows), ("supported subset", [r for r in rows if r[1] <= SUPPORTED])):
        c = collections.Counter(r[2] for r in subset)
        print(f"{label:32} {len(subset):6d} " + " ".join(f"{c[k]:8d}" for k in kinds))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases_dir", type=Path, help="the Test Suite's cases/semantic folder")
    ap.add_argument("--first", type=int, default=None, help="only the first N cases")
    ap.add_argument("--cases", default=None, help="case numbers, e.g. 1-100,205")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per case")
    ap.add_argument("--refusals", type=int, default=10, help="how many refusal reasons to list")
    ap.add_argument("--wrong", action="store_true", help="list every wrong or crashed case")
    a = ap.parse_args(argv)
    signal.signal(signal.SIGALRM, _alarm)
    rows = []
    start = time.perf_counter()
    for case in _cases(a.cases_dir, a.first, a.cases):
        h = _header(case)
        if h.get("testType") != "TimeCourse":
            continue
        tags = set(_ids(h.get("componentTags", ""))) | set(_ids(h.get("testTags", "")))
        outcome, detail = run_case(case, a.timeout)
        rows.append((case.name, tags, outcome, detail))
    _table(rows)
    print(f"\n{len(rows)} time-course cases in {time.perf_counter() - start:.0f} s")
    reasons = collections.Counter(re.sub(r"'[^']*'", "'…'", r[3]) for r in rows if r[2] == "refused")
    for reason, n in reasons.most_common(a.refusals):
        print(f"  refused {n:4d}: {reason[:150]}")
    for name, tags, outcome, detail in rows:
        if outcome in ("wrong", "crash") and (a.wrong or tags <= SUPPORTED):
            print(f"  {outcome} {name}{'' if tags <= SUPPORTED else ' (outside the subset)'}: {detail}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
