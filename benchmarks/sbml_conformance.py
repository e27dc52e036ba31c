"""The SBML importer held to the SBML Test Suite: each time-course case of a local copy of
``cases/semantic`` (sbmlteam/sbml-test-suite; fetch it yourself, this project ships none
of its files) is imported, solved by the reference solver (SciPy BDF on the generated
NumPy right-hand side and exact Jacobian, Radau then LSODA if it fails) at rtol 1e-10 over
the case's span and steps, and its variables compared with the case's ``-results.csv``
at the case's own tolerances: a point passes when ``|x - x_expected| <= absolute +
relative * |x_expected|``.

Every requested variable is compared (:mod:`sciml_bench.problem.sbml.variables`: a
species as the amount or concentration the settings ask for, a compartment, a parameter,
an assignment-rule variable); a model with no ODE state is evaluated as the functions of t
its variables are, not refused.

Each case is one of ``pass``, ``refused`` (the importer said why, in one line),
``wrong`` (a value outside the tolerances) or ``crash`` (anything else: a bug). The table
gives the counts per tag (a case counts under each of its component and test tags), then
the totals over every case and over the *supported subset*: cases whose tags all lie in
:data:`SUPPORTED` (compartments, species, parameters, reactions, rate and assignment
rules, initial assignments, function definitions and the tests on them). ``--refusals``
prints the most common refusal reasons.

``--gradients`` adds what no SBML tool publishes: on every passing case with a
differentiable parameter, the reference gradient of the import's default loss against the
SBML document's own central differences (:mod:`sciml_bench.problem.sbml.semantic`: each
parameter changed in the file, re-imported, solved), and each compiled backend's gradient
(``--backends``, CVODES through CasADi and diffsol by default, AMICI on request: its C++
compile is 10-20 s a case) against the reference at rtol 1e-8 (atol: 1e-8 of the smallest
state's scale), judged as rows are: norm-wise within 1e-4 where the reference's own error
is at most 1e-5. A second table per tag: ``pass`` / ``wrong`` / ``unjudged`` (the reference
cannot resolve the bound) / ``refused`` (the library's row would be ``unavailable``, named;
for the semantic check: no parameter of the file to change) / ``failed`` (its solve or
gradient failed, a status with a reason) for the semantic check and for each backend.

    python benchmarks/sbml_conformance.py CASES_DIR [--first N] [--cases 1-100,205]
        [--timeout 20] [--refusals 10] [--wrong] [--gradients] [--backends cvodes,diffsol]
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


def _model(case: Path) -> Path | None:
    return next((case / f"{case.name}-sbml-{lv}.xml" for lv in LEVELS
                 if (case / f"{case.name}-sbml-{lv}.xml").exists()), None)  # fmt: skip


def run_case(case: Path, timeout: float) -> tuple[str, str, Any]:
    """``(outcome, detail, the import)`` of one case (the import None unless it passed)."""
    s = _settings(case)
    model = _model(case)
    if model is None:
        return "refused", "no SBML Level 2 or 3 file", None
    start, duration, steps = float(s["start"]), float(s["duration"]), int(s["steps"])
    if start != 0:
        return "refused", "a start time other than 0", None
    points = np.linspace(start, start + duration, steps + 1)
    signal.alarm(int(timeout))
    try:
        got, imported = _values(model, s, points)
    except _Refused as e:
        return "refused", str(e), None
    except _Timeout:
        return "crash", f"over {timeout:g} s", None
    except Exception as e:  # a bug, counted and shown, not a stop
        return "crash", f"{type(e).__name__}: {e}"[:200], None
    finally:
        signal.alarm(0)
    outcome, detail = _compare(case, _ids(s["variables"]), got, s)
    return outcome, detail, imported if outcome == "pass" else None


class _Refused(Exception):
    """The importer refused the model (its one-line reason)."""


def _values(model: Path, s: dict[str, str], points: np.ndarray) -> tuple[np.ndarray, Any]:
    """Every requested variable at the points: the import solved by the reference's
    solver, or, for a model with no ODE state, its variables as functions of t."""
    from sciml_bench.problem import spec
    from sciml_bench.problem.sbml import odes, read
    from sciml_bench.problem.sbml import variables as sv

    ids = _ids(s["variables"])
    amounts = set(_ids(s.get("amount", "")))
    try:
        imported = read.read(model, save_points=[float(p) for p in points])
        problem = imported.problem()
    except odes.NoState as e:  # only rules and constants: nothing to integrate
        asked = sv.resolve(_facts(model), e.system, ids, amounts, set(ids) - amounts)
        return sv.evaluate(asked, e.system, points, np.zeros((len(points), 0)), e.system.theta0), None
    except spec.ProblemError as e:
        raise _Refused(e.reason) from None
    asked = sv.resolve(imported.facts, imported.system, ids, amounts, set(ids) - amounts)
    y = solve(problem, float(s["absolute"]) * 1e-3)
    return sv.evaluate(asked, imported.system, points, y, problem.theta0), (imported, problem)


def _facts(model: Path) -> Any:
    from sciml_bench.problem.sbml import read
    from sciml_bench.problem.sbml.facts import read_facts

    return read_facts(read.parse_file(model), str(model))


def _compare(case: Path, variables: list[str], got: np.ndarray, s: dict[str, str]) -> tuple[str, str]:
    """``pass`` when every value lies within the case's tolerances of its results. The
    columns are read by position: the first is time, the others are named by the header,
    which may name a variable ``Time`` as well (cases 01820-01821)."""
    path = case / f"{case.name}-results.csv"
    header = [h.strip() for h in path.read_text().splitlines()[0].split(",")]
    data = np.atleast_2d(np.genfromtxt(path, delimiter=",", skip_header=1, dtype=float))
    atol, rtol = float(s["absolute"]), float(s["relative"])
    for j, v in enumerate(variables):
        want = data[:, 1 + header[1:].index(v)]
        have = got[: len(want), j]
        both_nan = np.isnan(want) & np.isnan(have)
        ok = both_nan | (np.abs(have - want) <= atol + rtol * np.abs(want)) | (have == want)
        if not np.all(ok):
            i = int(np.argmin(ok))
            return "wrong", f"{v} at t={data[i, 0]:g}: {have[i]:.6g} vs {want[i]:.6g}"
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


#: a backend's gradient passes within this of the reference's (norm-wise, on the judged
#: scale), plus the reference's own error estimate: the suite's pass tier
GRADIENT_BOUND = 1e-4
#: the backends' tolerances in the gradient comparison (the reference's are 1e-12)
GRADIENT_RTOL = 1e-8
GRADE_KINDS = ("pass", "wrong", "unjudged", "refused", "failed")


def grade_gradients(imported: Any, problem: Any, names: list[str]) -> dict[str, tuple[str, str]]:
    """Per check, ``(outcome, detail)``: ``semantic`` (the reference gradient against the
    document's own differences) and each backend in ``names`` (its gradient against the
    reference)."""
    from sciml_bench.problem import reference
    from sciml_bench.problem.sbml import semantic

    ref = reference.build(problem)
    if ref.missing or ref.gradient_missing:
        why = ref.missing or ref.gradient_missing
        return {k: ("failed", f"no reference gradient: {why}"[:200]) for k in ["semantic", *names]}
    check = semantic.check(imported, problem, ref)
    out = {"semantic": ("refused", "; ".join(check.skipped)) if not check.ran else
           ("pass", "") if check.ok else ("wrong", check.refusal()[:200])}  # fmt: skip
    compiled = reference.compile_problem(problem, ref, sbml="amici" in names)
    for name in names:
        out[name] = _backend_grade(name, compiled, ref)
    return out


def _atol(ref: Any) -> float:
    """The backends' atol: :data:`GRADIENT_RTOL` times the smallest state's scale (its
    largest magnitude in the reference), so that every state is resolved to that relative
    accuracy: the Test Suite's amounts of 1e-6 mol under the import's default atol (1e-10)
    left CVODES' forward gradient 1.6e-4 off at rtol 1e-8 and 2e-6 at 1e-10 (case 00062)."""
    y = np.abs(np.asarray(ref.y, dtype=float))
    scales = y.max(axis=0) if y.size else np.ones(1)
    scales = scales[scales > 0]
    return GRADIENT_RTOL * float(scales.min() if scales.size else 1.0)


def _backend_grade(name: str, compiled: Any, ref: Any) -> tuple[str, str]:
    """One backend's gradient at :data:`GRADIENT_RTOL` against the reference's, judged as
    the suite judges rows: within :data:`GRADIENT_BOUND`, where the reference's own error
    is at most a tenth of it (else ``unjudged``: the reference cannot resolve the bound,
    e.g. a loss at round-off whose gradient is noise)."""
    from sciml_bench import backends
    from sciml_bench.backends.base import CaseOptions, ProblemNotExpressible
    from sciml_bench.problem.gradient_measures import judged_scale, norm_error

    backend = backends.get(name)
    available = backend.availability()
    if not available.ok:
        return "refused", f"not installed: {available.reason}"
    options = CaseOptions(backend.default_solver(True), "forward", GRADIENT_RTOL, _atol(ref),
                          compiled.max_steps)  # fmt: skip
    try:
        case = backend.build(compiled, options)
    except ProblemNotExpressible as e:
        return "refused", str(e)[:200]
    except Exception as e:  # the library's own refusal (AMICI: "StoichiometryMath is ...")
        return "refused", f"{name}'s build: {type(e).__name__}: {e}"[:200]
    try:
        _, g = case.loss_and_grad(compiled.theta0)
    except Exception as e:  # a status with a reason (SolverFailure), or the library's error
        return "failed", f"{type(e).__name__}: {e}"[:200]
    scale = judged_scale(np.asarray(compiled.theta0), np.asarray(compiled.log_params))
    err = norm_error(np.asarray(g) * scale, np.asarray(ref.gradient) * scale)
    if ref.reference_error is None or ref.reference_error > GRADIENT_BOUND / 10:
        return "unjudged", f"{err:.2e}; the reference's own error {ref.reference_error}"
    return ("pass", f"{err:.1e}") if err <= GRADIENT_BOUND else (
        "wrong", f"{err:.2e} > {GRADIENT_BOUND:.0e}")


def _gradient_table(rows: list[tuple[str, set[str], dict[str, tuple[str, str]]]],
                    checks: list[str]) -> None:  # fmt: skip
    """Per tag, each check's pass/wrong/refused/failed counts."""
    per_tag: dict[str, dict[str, collections.Counter[str]]] = collections.defaultdict(
        lambda: collections.defaultdict(collections.Counter))
    for _, tags, graded in rows:
        for tag in [*tags, "total"]:
            for check, (outcome, _) in graded.items():
                per_tag[tag][check][outcome] += 1
    head = " ".join(f"{c:>22}" for c in checks)
    print(f"\ngradients ({'/'.join(GRADE_KINDS)}): {len(rows)} passing cases")
    print(f"{'tag':32} {head}")
    order = sorted((t for t in per_tag if t != "total"), key=lambda t: -sum(per_tag[t]["semantic"].values()))
    for tag in [*order, "total"]:
        cells = ["/".join(str(per_tag[tag][c][k]) for k in GRADE_KINDS) for c in checks]
        print(f"{tag:32} " + " ".join(f"{x:>22}" for x in cells))


def _options(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases_dir", type=Path, help="the Test Suite's cases/semantic folder")
    ap.add_argument("--first", type=int, default=None, help="only the first N cases")
    ap.add_argument("--cases", default=None, help="case numbers, e.g. 1-100,205")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per case")
    ap.add_argument("--refusals", type=int, default=10, help="how many refusal reasons to list")
    ap.add_argument("--wrong", action="store_true", help="list every wrong or crashed case")
    ap.add_argument("--gradients", action="store_true",
                    help="grade gradients on the passing cases (see the module doc)")
    ap.add_argument("--backends", default="cvodes,diffsol",
                    help="--gradients: the compiled backends graded (cvodes, diffsol, amici)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = _options(argv)
    signal.signal(signal.SIGALRM, _alarm)
    names = [b.strip() for b in a.backends.split(",") if b.strip()]
    rows, graded = [], []
    start = time.perf_counter()
    for case in _cases(a.cases_dir, a.first, a.cases):
        h = _header(case)
        if h.get("testType") != "TimeCourse":
            continue
        tags = set(_ids(h.get("componentTags", ""))) | set(_ids(h.get("testTags", "")))
        outcome, detail, passed = run_case(case, a.timeout)
        rows.append((case.name, tags, outcome, detail))
        if a.gradients and passed is not None:
            graded.append((case.name, tags, grade_gradients(*passed, names)))
    _table(rows)
    print(f"\n{len(rows)} time-course cases in {time.perf_counter() - start:.0f} s")
    reasons = collections.Counter(re.sub(r"'[^']*'", "'…'", r[3]) for r in rows if r[2] == "refused")
    for reason, n in reasons.most_common(a.refusals):
        print(f"  refused {n:4d}: {reason[:150]}")
    for name, tags, outcome, detail in rows:
        if outcome in ("wrong", "crash") and (a.wrong or tags <= SUPPORTED):
            print(f"  {outcome} {name}{'' if tags <= SUPPORTED else ' (outside the subset)'}: {detail}")
    if a.gradients:
        _report_gradients(graded, ["semantic", *names], a.wrong)
    return 0


def _report_gradients(graded: list[tuple[str, set[str], dict[str, tuple[str, str]]]],
                      checks: list[str], every: bool) -> None:  # fmt: skip
    """The gradient table, then each wrong grade (and, with ``every``, each failed one)."""
    _gradient_table(graded, checks)
    for name, _, grades in graded:
        for check, (outcome, detail) in grades.items():
            if outcome == "wrong" or (every and outcome == "failed"):
                print(f"  {outcome} gradient {name} {check}: {detail}")


if __name__ == "__main__":
    raise SystemExit(main())
