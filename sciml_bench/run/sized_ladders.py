"""Problems with [sizes] (array problems, and networks whose width is a size): one ladder
of sizes per case and Jacobian kind, each size in a fresh worker, refused up front when its
dense Jacobian would not fit in memory or its forecast least time exceeds the budget."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sciml_bench import backends
from sciml_bench.measure.affinity import RUNG_UNPINNED
from sciml_bench.measure.status import Status
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.problem.reference import Reference
from sciml_bench.results.store import ResultsWriter, summarize
from sciml_bench.run import forecast
from sciml_bench.run.cases import CaseSpec, Settings, case_job, plan, sources_read
from sciml_bench.run.executor import Executor, LocalExecutor
from sciml_bench.run.interrupts import saved_on_interrupt
from sciml_bench.run.ladder import Ladder
from sciml_bench.run.progress import Progress, to_stderr
from sciml_bench.run.rung_processes import Rounds, Rung, planned, rows_in_order, rung

#: a dense Jacobian may take at most this share of the memory available when a ladder starts
DENSE_MEMORY_SHARE = 0.8
#: a rung's untimed warm-up calls of each kind before its steady samples. The first
#: gradient is the steady gradient's own call in every backend (``loss_and_grad`` is
#: ``check_grad(timed_grad(...))``), so it warms it, and a warm-up would cost one more of a
#: rung's dearest call. The first solve is not always the steady solve's call: Diffrax's
#: first solve runs ``_solve_full`` (states, result code and step counts), its steady
#: samples ``_solve_ys`` (the states alone), another XLA program, compiled at its first
#: call: without a warm-up that compilation was the first steady sample (what it held in the
#: published ladders: docs/measurements.md, "How it measures (and why you can trust it)",
#: "A timed sample holds the library's call and nothing else").
RUNG_WARMUPS = {"solve": 1, "grad": 0}


@dataclass(frozen=True)
class SizedSpec:
    """One ladder of a problem with sizes: a case (``case.extra["jacobian"]`` its Jacobian
    kind: ``dense``, ``sparse`` or ``none`` for an explicit solver) at each size."""

    case: CaseSpec
    jacobian: str
    sizes: tuple[int, ...]
    #: why the library has no path for this Jacobian kind (a kind asked for by --jacobian
    #: that its solver does not offer): the ladder is one ``unavailable`` row, never a run
    #: of another kind standing in for it
    unavailable: str = ""

    @property
    def label(self) -> str:
        c = self.case
        return (f"{c.backend} {c.solver} {c.gradient_method} jacobian={self.jacobian} "
                f"rtol={c.rtol:g}")  # fmt: skip


def plan_sized(
    problem: CompiledProblem,
    backend_names: Sequence[str],
    sizes: Sequence[int],
    solvers: Sequence[str] = (),
    gradients: Sequence[str] = (),
    jacobians: Sequence[str] = (),
    max_steps: int | None = None,
    devices: Sequence[str] = ("cpu",),
    rtols: Sequence[float] | None = None,
) -> list[SizedSpec]:
    """One ladder per case of :func:`plan` (at ``rtols``, atol keeping the problem's ratio as
    for a single trajectory; default the problem's tolerances) and Jacobian kind: each of
    ``jacobians`` (every kind its solver offers when none is asked for). A kind an implicit
    solver does not offer is a ladder marked :attr:`SizedSpec.unavailable` (Diffrax asked
    for ``sparse``), not its other kind run in its place; an explicit solver needs no
    Jacobian and runs as ``none`` whatever is asked. A backend given no solver it offers
    runs its array default (SciPy: BDF, which takes a sparse Jacobian). A scalar problem (a
    network's width laddered) keeps :func:`plan`'s cases, one ladder each: ``none`` for an
    explicit solver, else ``dense`` (its few states' Jacobian, as any scalar problem's)."""
    out = []
    for case in plan(problem, backend_names, solvers, gradients, rtols, max_steps, devices):
        b = backends.get(case.backend)
        if problem.size is None:  # scalar: its own solver, no Jacobian kind to ladder
            kind = "none" if b.jacobian_kinds(case.solver) == ("none",) else "dense"
            out.append(SizedSpec(replace(case, extra={**case.extra, "jacobian": kind}), kind,
                                 tuple(sizes)))  # fmt: skip
            continue
        if not any(s in b.solvers() for s in solvers):
            case = replace(case, solver=b.array_solver(problem.stiff))
        kinds = b.jacobian_kinds(case.solver)
        asked = list(dict.fromkeys(jacobians)) if jacobians and kinds != ("none",) else kinds
        for kind in asked:
            why = "" if kind in kinds else kind_missing(b, case.solver, kind)
            out.append(SizedSpec(replace(case, extra={**case.extra, "jacobian": kind}), kind,
                                 tuple(sizes), why))  # fmt: skip
    return out


def kind_missing(backend: Any, solver: str, kind: str) -> str:
    """Why ``backend``'s ``solver`` cannot run ``kind`` Jacobians, and what does: its own
    kinds, and the backends whose array code offers ``kind``."""
    why = backend.sparse_missing if kind == "sparse" and backend.sparse_missing else (
        f"{backend.name} has no {kind} Jacobian path: {solver} takes "
        f"{' or '.join(backend.jacobian_kinds(solver))} Jacobians only")  # fmt: skip
    others = [n for n in backends.names()
              if n != backend.name and _offers(backends.get(n), kind)]  # fmt: skip
    fix = f"run --jacobian {','.join(backend.jacobian_kinds(solver))}"
    return f"{why}; {fix}" + (f", or choose {', '.join(others)}" if others else "")


def _offers(backend: Any, kind: str) -> bool:
    """Whether ``backend`` runs array problems with ``kind`` Jacobians (class attributes
    only: no library is imported)."""
    return bool(backend.array_problems) and kind in backend.jacobians


def memory_refusal(jacobian: str, n_state: int, available: int | None) -> str | None:
    """Why a size is refused up front (its dense Jacobian would not fit in memory), or None."""
    from sciml_bench.problem.arrays import dense_jacobian_bytes

    if jacobian != "dense" or not available:
        return None
    need = dense_jacobian_bytes(n_state)
    if need <= DENSE_MEMORY_SHARE * available:
        return None
    return (
        f"not run: a dense Jacobian of {n_state} states needs about {_size_text(need)} "
        "(3 n x n float64: the Jacobian, the iteration matrix and its LU), over "
        f"{DENSE_MEMORY_SHARE:.0%} of the {_size_text(available)} available; a sparse "
        "Jacobian runs this size"
    )


def _size_text(n_bytes: float) -> str:
    """``21.6 GiB``, ``37.5 KiB``: three significant digits in the largest fitting unit."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.3g} {unit}"
    return f"{n_bytes:.0f} B"


class Rungs:
    """Each size's problem, reference and compiled bundle, made once for every ladder (the
    reference is also cached on disk, keyed by the content at that size)."""

    def __init__(self, problem: Any, refresh: bool = False, progress: Progress = to_stderr,
                 sources: tuple[str, ...] | None = None):  # fmt: skip
        self.problem = problem
        self.refresh = refresh
        self.progress = progress
        #: the generated sources each size is compiled with: what the ladders' backends
        #: read (:func:`~sciml_bench.run.cases.sources_read`; None: every one but SBML)
        self.sources = sources
        self.made: dict[int, Any] = {}
        self.sized: dict[int, Any] = {}

    def at(self, size: int) -> Any:
        """The problem file at ``size`` (parsed once; raises its format error)."""
        from sciml_bench.problem import spec

        if size not in self.sized:
            self.sized[size] = spec.at_size(self.problem, size)
        return self.sized[size]

    def get(self, size: int) -> tuple[CompiledProblem, Reference, float]:
        """``(compiled, reference, codegen seconds)`` at ``size``; a reference or problem
        that cannot be made raises its error (for every ladder that asks)."""
        from sciml_bench.problem import reference, spec

        if size not in self.made:
            try:
                p = self.at(size)
                self.progress(f"reference for {p.name} at size {size} ({p.n_state} states, "
                              f"{p.n_params} parameters) ...")  # fmt: skip
                # a reference that cannot be built leaves rows saying so, as for any problem
                ref = reference.get_or_missing(p, refresh=self.refresh)
                start = time.perf_counter()
                compiled = reference.compile_problem(p, ref, sources=self.sources)
                self.made[size] = (compiled, ref, time.perf_counter() - start)
                built = "cached" if ref.cached else f"built in {ref.build_s:.1f} s"
                if ref.missing:
                    built = f"failed ({ref.missing})"
                self.progress(f"reference: {built}, rtol {ref.rtol:g}")
            except (reference.ReferenceError, spec.ProblemError) as e:
                self.made[size] = e
        made = self.made[size]
        if isinstance(made, Exception):
            raise made
        return made  # type: ignore[no-any-return]


def _sized_row(problem: str, ladder: SizedSpec, size: int | None, status: str, reason: str,
               **extra: Any) -> dict[str, Any]:  # fmt: skip
    c = ladder.case
    return summarize({
        "kind": "ode", "problem": problem, "backend": c.backend, "solver": c.solver,
        "gradient_method": c.gradient_method, "jacobian": ladder.jacobian, "size": size,
        "device": c.device, "device_requested": c.device_requested, "rtol": c.rtol,
        "atol": c.atol, "status": status, "reason": reason, **extra,
    })  # fmt: skip


def _not_runnable(name: str, seen: dict[str, Any], array: bool = True) -> str | None:
    """Why a backend runs no ``array`` problem (any problem) here: not available, or no
    array code yet."""
    if name not in seen:
        b = backends.get(name)
        av = b.availability()
        if not av.ok:
            seen[name] = f"{av.reason}. Fix: {av.fix}" if av.fix else av.reason
        elif array and not b.array_problems:
            seen[name] = b.array_missing or (
                f"{name} has no array code yet: array problems ([sizes], vector states) do "
                "not run on this backend")  # fmt: skip
        else:
            seen[name] = None
    return seen[name]  # type: ignore[no-any-return]


def _build_over(done: Sequence[dict[str, Any]], ladder: SizedSpec, size: int) -> str | None:
    """Why ``size`` is not run on this ladder: another ladder of its backend spent the whole
    budget building the model at this size or a smaller one (a library builds one model for
    every Jacobian kind and gradient method: AMICI's C++ compile, issue 41), or None. Read
    from the row's ``failed_phase`` (the phase its worker was in when the budget killed
    it), never from the words of its reason."""
    for r in done:
        same = r.get("backend") == ladder.case.backend and r.get("size") is not None
        if same and r["size"] <= size and r.get("status") == Status.BUDGET_EXCEEDED.value \
                and r.get("failed_phase") == "build":  # fmt: skip
            return (f"not run: the {r['backend']} {r.get('gradient_method')} "
                    f"{r.get('jacobian')} ladder's build alone spent the budget at size "
                    f"{r['size']} (the same model for every Jacobian and gradient method); "
                    "--budget S runs it")  # fmt: skip
    return None


def run_sized(
    problem: Any,
    ladders: Sequence[SizedSpec],
    writer: ResultsWriter,
    settings: Settings,
    executor: Executor | None = None,
    progress: Progress = to_stderr,
    refresh: bool = False,
    available: int | None = None,
) -> list[dict[str, Any]]:
    """An array problem's ladders, size by size, each size's first process in a fresh
    worker where its ladder reaches it, each row on disk as it ends (:class:`Ladder`: after
    a size fails, larger ones are ``skipped``). A cheap size runs the run's ``--cold``
    processes, its others after every ladder's first pass, interleaved across the ladders
    (:mod:`~sciml_bench.run.rung_processes`). A size whose dense Jacobian would not fit in
    ``available`` bytes (default: what the machine has now) is refused up front, a
    ``skipped`` row with the estimate. The first gradient is the gradient's warm-up, and
    one untimed solve the solve's (:data:`RUNG_WARMUPS`): the steady samples follow them in
    the same process. Returns the rows in the ladders' order (``case_index``)."""
    import psutil

    executor = executor or LocalExecutor(threads=settings.threads)
    available = available if available is not None else psutil.virtual_memory().available
    # each size's sources only as its ladders' backends read them (AMICI's SBML model:
    # seconds at 20,000 states)
    rungs = Rungs(problem, refresh, progress, sources_read(x.case.backend for x in ladders))
    run = _LadderRun(problem, rungs, settings, executor, progress, available, writer,
                     Rounds(writer, problem.name, settings.seed))  # fmt: skip
    with saved_on_interrupt(writer, run.done), run.rounds.written_on_interrupt():
        for i, ladder in enumerate(ladders, 1):
            run.ladder(i, len(ladders), ladder)
        final = run.rounds.run(executor, settings.budget_s, progress)
    return rows_in_order(run.done, final)


@dataclass
class _LadderRun:
    """What one :func:`run_sized` call's ladders share, and the rows so far."""

    problem: Any
    rungs: Rungs
    settings: Settings
    executor: Executor
    progress: Progress
    available: int | None
    writer: ResultsWriter
    rounds: Rounds
    done: list[dict[str, Any]] = field(default_factory=list)
    seen: dict[str, Any] = field(default_factory=dict)

    def add(self, rec: dict[str, Any], waits: Rung | None = None) -> None:
        """A row in the ladders' order (:meth:`Rounds.place`)."""
        self.rounds.place(self.done, rec, waits, LADDER_KEYS)

    def ladder(self, i: int, n: int, ladder: SizedSpec) -> None:
        """One ladder's first pass: every size, or one row saying why none runs."""
        name, progress = self.problem.name, self.progress
        why = _not_runnable(ladder.case.backend, self.seen, self.problem.array is not None)
        if why is not None:
            if not any(r["backend"] == ladder.case.backend for r in self.done):
                progress(f"[ladder {i}/{n}] {ladder.case.backend}: unavailable ({why})")
                self.add(_sized_row(name, ladder, None, Status.UNAVAILABLE.value, why))
            return
        if ladder.unavailable:  # a Jacobian kind this library has no path for
            progress(f"[ladder {i}/{n}] {ladder.label}: unavailable ({ladder.unavailable})")
            self.add(_sized_row(name, ladder, None, Status.UNAVAILABLE.value,
                                ladder.unavailable))  # fmt: skip
            return
        state = Ladder()
        for size in ladder.sizes:
            title = f"[ladder {i}/{n}] {name}: {ladder.label} size={size}"
            over = _build_over(self.done, ladder, size)
            if over:
                progress(f"{title}: {over}")
                rec, waits = _sized_row(name, ladder, size, Status.SKIPPED.value, over), None
            else:
                rec, waits = _rung(title, ladder, size, state, self)
            if self.problem.laddered is not None:  # labels read N=32, width=200
                rec["size_name"] = self.problem.laddered.ladder_name
            state.done(size, rec)
            self.add(rec, waits)


#: a rung's keys that its ladder adds to the job's record (:func:`_rung`, :class:`Ladder`)
LADDER_KEYS = ("size", "codegen_s", "reference_rtol", "n_state", "n_params", "jac_nnz",
               "reference_note", "size_name", "largest_ok_size", "case_index")  # fmt: skip


def _rung(
    title: str, ladder: SizedSpec, size: int, state: Ladder, run: _LadderRun,
) -> tuple[dict[str, Any], Rung | None]:  # fmt: skip
    """One size of one ladder: skipped, refused, or its first process run in a fresh
    worker, and recorded with its size, states, the Jacobian's non-zeros and kind, and the
    reference's tolerance; the rung too where it waits for its other processes."""
    settings, progress = run.settings, run.progress
    name = run.problem.name
    skip = state.skipped()
    if skip is not None:
        return _sized_row(name, ladder, size, Status.SKIPPED.value, skip), None
    try:
        at = run.rungs.at(size)
        n_state = at.n_state
        # before the reference at this size is made: a skipped rung costs nothing. A
        # network's width grows the parameters, not the states: its cost grows with P
        key = "n_state" if at.array is not None else "n_params"
        least = forecast.least_seconds(state.completed, getattr(at, key), key)
        if least is not None and least.beyond(settings.budget_s):
            why = least.reason(settings.budget_s)
            progress(f"{title}: {why}")
            return _sized_row(name, ladder, size, Status.SKIPPED.value, why, n_state=n_state,
                              n_params=at.n_params, forecast_least_s=least.seconds), None
        compiled, ref, codegen_s = run.rungs.get(size)
    except Exception as e:  # a reference or problem that cannot be made at this size
        return _sized_row(name, ladder, size, Status.ERROR.value, f"size {size}: {e}"), None
    facts = {"n_state": compiled.n_state, "n_params": compiled.n_params, "jac_nnz": compiled.jac_nnz}
    refused = memory_refusal(ladder.jacobian, compiled.n_state, run.available)
    if refused:
        progress(f"{title}: {refused}")
        return _sized_row(name, ladder, size, Status.SKIPPED.value, refused, **facts), None
    nnz = f"{compiled.jac_nnz} Jacobian non-zeros" if compiled.jac_nnz is not None else (
        f"{compiled.n_params} parameters")  # fmt: skip
    processes = planned(settings.cold, state.completed, facts[key], key)
    many = f", {processes} processes" if processes > 1 else ""
    progress(f"{title} ({compiled.n_state} states, {nnz}{many})")
    job = {**case_job(ladder.case, compiled, ref, settings), "warmups": dict(RUNG_WARMUPS),
           "steady_pin": RUNG_UNPINNED if settings.pin else False}
    r = rung(job, processes, title)
    r.extra = {"size": size, "codegen_s": codegen_s, "reference_rtol": ref.rtol, **facts,
               **({"reference_note": ref.tolerance_note} if ref.tolerance_note else {})}
    rec = run.rounds.first(r, run.executor, settings.budget_s, progress)
    return rec, (r if r.waiting else None)
