"""The report's opening table: one line per problem and comparison, the answer first.

Each line is one verdict of :func:`sciml_bench.results.verdict.verdicts` (a comparison:
one results file, size, rtol, dtype; CNN rows one model, precision, pipeline, dataset),
on one machine: its main criterion's pick (the steady gradient for ODE and ensemble rows,
training for CNN rows), read as

- **verdict**: ``faster`` (the winner clears the pair's noise floor), ``tie`` (inside it),
  ``only row`` (one row qualifies), ``none qualifies`` (the verdict's reason, shortened),
  and how many faster rows were left out for their error or load;
- **winner** and its time, **× runner-up** (``t_runner_up / t_winner``), and the winner's
  **gradient error** with its tier;
- **crossover**, on a ladder's lines (rows with a ``size``): where the verdict's winner
  changes between rungs, bounded by the rungs as an interval ``(a, b]`` and written on
  the line of rung ``b``; on a ladder whose parameter count P grows, also each library's
  forward/adjoint crossover (:func:`sciml_bench.results.gradient_scaling.library_crossovers`);
  on rows run at several tolerances, the libraries whose gradient passes from that line's
  rtol on (:func:`tolerance_starts`).

Nothing here judges anew: the words are the verdict's picks and floors, so the summary
cannot disagree with the verdict printed under each table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sciml_bench.results import gradient_scaling, tolerance_ladder, verdict
from sciml_bench.results.growth import sci

COLUMNS = ("problem", "comparison", "verdict", "winner", "steady gradient", "× runner-up",
           "winner's gradient error", "crossover")  # fmt: skip
#: longest reason printed in the winner cell of a comparison nothing qualifies in
MAX_REASON = 110
#: group keys of a ladder's rung (the size); the rest name the ladder
RUNG_KEYS = ("size", "_size_name")


@dataclass(frozen=True)
class Line:
    """One line of the summary table, as cells."""

    problem: str
    comparison: str
    verdict: str
    winner: str
    time: str
    ratio: str
    error: str
    crossover: str = ""
    #: a tie at the one-process floor (a side of one process: the floor's constant decided
    #: it, not a spread the data measured), and the ratio it held
    floor_tie: float | None = None

    def cells(self) -> list[str]:
        return [self.problem, self.comparison, self.verdict, self.winner, self.time,
                self.ratio, self.error, self.crossover]  # fmt: skip


def _group_text(group: Mapping[str, Any], machine: str) -> str:
    """``NVIDIA H200; file #2; N=32; rtol 1e-06``: where the comparison stands."""
    parts = [machine] if machine else []
    for k, v in group.items():
        if k == "_size_name":
            continue
        if k == "_run":
            parts.append(f"file {v}")
        elif k == "size":
            parts.append(f"{group.get('_size_name') or 'n'}={v}")
        elif k == "rtol":
            parts.append(f"rtol {sci(v)}")
        else:
            parts.append(f"{k} {v}")
    return "; ".join(parts) or "all rows"


def _error(r: Mapping[str, Any]) -> str:
    e = r.get("gradient_error")
    if not isinstance(e, int | float) or isinstance(e, bool):
        return "-"
    tier = r.get("gradient_tier")
    return f"{e:.2e}" + (f" {tier}" if tier else "")


def _short(text: str, n: int = MAX_REASON) -> str:
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def _word(v: verdict.Verdict, pick: verdict.Pick) -> str:
    """The verdict in a word or two, and the faster rows it left out; a provisional one
    (every candidate timed under load, so the candidates are the loaded rows) says so
    first."""
    candidates = len(v.loaded) if v.provisional else v.qualified
    if candidates == 1:
        word = "only row"
    elif pick.runner_up is None:
        word = "only timed row"
    elif pick.clears_noise:
        word = f"faster ({pick.measured_floor.text()})"
    else:
        word = f"tie ({pick.measured_floor.text()})"
    if v.provisional:
        return f"provisional, timed under load: {word}"
    left = len(v.left_out) + len(v.loaded)
    return word + (f"; {left} faster left out" if left else "")


def line(v: verdict.Verdict, machine: str = "") -> Line:
    """A verdict's summary line (without its crossover)."""
    where = _group_text(v.group, machine)
    if v.reason or not v.picks:
        why = v.reason or "no qualifying row has timings"
        return Line(v.problem, where, "none qualifies", _short(why), "-", "-", "-")
    pick = v.picks[0]  # the main criterion: steady gradient (ODE), training (CNN)
    winner = verdict.label(pick.winner)
    if pick.runner_up is not None and not pick.clears_noise:
        winner += f", tied with {verdict.label(pick.runner_up)}"
    ratio = "-" if pick.ratio is None else f"{pick.ratio:.2f}x"
    time = _seconds(float(pick.winner[pick.key]))
    if pick.criterion != verdict.ODE_CRITERIA[0][0]:  # the column's default: say the others
        time = f"{pick.criterion} {time}"
    floor_tie = None
    if pick.runner_up is not None and not pick.clears_noise and pick.ratio is not None and (
            "one process" in pick.measured_floor.source):  # fmt: skip
        floor_tie = float(pick.ratio)
    return Line(v.problem, where, _word(v, pick), winner, time, ratio, _error(pick.winner),
                floor_tie=floor_tie)  # fmt: skip


def _seconds(s: float) -> str:
    return f"{s * 1e3:.3g} ms" if s < 1.0 else f"{s:.3g} s"


def _ladder(group: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """What a rung's group shares with the other rungs of its ladder (all but the size)."""
    return tuple((k, repr(v)) for k, v in group.items() if k not in RUNG_KEYS)


def winner_changes(found: Sequence[verdict.Verdict]) -> dict[int, str]:
    """Index of a rung's verdict -> where the ladder's winner changed, ``A → B in (a, b]``:
    ``a`` the last rung ``A`` won beyond the floor, ``b`` the first ``B`` did; ties and
    rungs nothing qualifies at in between widen the interval."""
    ladders: dict[tuple[tuple[str, str], ...], list[tuple[Any, int, str | None]]] = {}
    for i, v in enumerate(found):
        if "size" in v.group:
            ladders.setdefault(_ladder(v.group), []).append((v.group["size"], i, _decisive(v)))
    out: dict[int, str] = {}
    for rungs in ladders.values():
        last: tuple[Any, str] | None = None
        for size, i, who in sorted(rungs, key=lambda x: x[0]):
            if who is None:
                continue
            if last is not None and last[1] != who:
                out[i] = f"{last[1]} → {who} in ({last[0]}, {size}]"
            last = (size, who)
    return out


def _decisive(v: verdict.Verdict) -> str | None:
    """The winner's label where it won beyond the floor (or was the only row), else None;
    never from a provisional verdict (a crossover needs rows not timed under load)."""
    if v.reason or not v.picks or v.provisional:
        return None
    p = v.picks[0]
    return verdict.label(p.winner) if p.runner_up is None or p.clears_noise else None


def mode_crossovers(records: Sequence[dict[str, Any]], found: Sequence[verdict.Verdict],
                    gradient_rtol: float | None) -> dict[int, list[str]]:  # fmt: skip
    """Index of a rung's verdict -> each library whose adjoint overtook its forward mode
    at that rung (a P ladder: :mod:`~sciml_bench.results.gradient_scaling`), with the
    interval the rungs bound it to."""
    if not gradient_scaling.laddered_params(records):
        return {}
    # (rung, what overtook what, where) -> the libraries: four libraries crossing in one
    # interval read as one clause, not four
    at: dict[tuple[int, str], list[str]] = {}
    for lib, c in gradient_scaling.library_crossovers(records, gradient_rtol):
        span = c.interval if isinstance(c, gradient_scaling.Crossover) else None
        if span is None or c.upper is None:
            continue
        i = _rung_of(records, found, c.upper.p, lib[0])
        if i is not None:
            lo = f"({span[0]}, {span[1]}]" if span[0] is not None else f"≤ {span[1]}"
            what = f"{c.upper.reverse} overtakes {c.upper.forward} at P in {lo}"
            at.setdefault((i, what), []).append(
                " ".join(p for p in lib[1:4] if p not in ("", "none")))  # no Jacobian kind
    out: dict[int, list[str]] = {}
    for (i, what), libs in at.items():
        out.setdefault(i, []).append(f"{what}: {', '.join(libs)}")
    return out


def _rung_of(records: Sequence[dict[str, Any]], found: Sequence[verdict.Verdict], p: int,
             run: str) -> int | None:  # fmt: skip
    """The index of the rung's verdict whose rows (in results file ``run``) have ``p``
    parameters."""
    for i, v in enumerate(found):
        if "size" in v.group and any(
            r.get("n_params") == p and str(r.get("_run") or "") == run and _in(r, v.group)
            for r in records
        ):
            return i
    return None


def _in(r: Mapping[str, Any], group: Mapping[str, Any]) -> bool:
    """Whether a row belongs to a verdict's comparison (its varying keys' values)."""
    return all(r.get(k) == v for k, v in group.items() if k != "_size_name")


def tolerance_starts(records: Sequence[dict[str, Any]], found: Sequence[verdict.Verdict],
                     gradient_rtol: float | None = None) -> dict[int, str]:  # fmt: skip
    """Where rows ran at several tolerances: on the line of the rtol from which a library's
    gradient passes (:mod:`~sciml_bench.results.tolerance_ladder`), ``passes from here on:
    LABELS``, so that a tolerance ladder's answer is in the summary, not only under its
    table."""
    out: dict[int, list[str]] = {}
    for lad in tolerance_ladder.ladders(records, gradient_rtol):
        for x in lad.ladders:
            start = next((r for r in records if x.passes_from is not None
                          and r.get("rtol") == x.passes_from and r.get("problem") == lad.problem
                          and r.get("_run") == lad.group.get("_run")
                          and verdict.label({**r, "_run": None}) == x.label), None)  # fmt: skip
            i = next((k for k, v in enumerate(found) if start is not None
                      and v.problem == lad.problem and _in(start, v.group)), None)  # fmt: skip
            if i is not None:
                out.setdefault(i, []).append(x.label)
    return {i: "gradient passes from this rtol on: " + ", ".join(names)
            for i, names in out.items()}  # fmt: skip


def lines(records: Sequence[dict[str, Any]], machine: str = "",
          gradient_rtol: float | None = None) -> list[Line]:  # fmt: skip
    """The summary lines of one problem's rows on one machine (``machine``: its short name,
    where the problem ran on several), in the verdicts' order."""
    found = verdict.verdicts(records, gradient_rtol)
    changes = winner_changes(found)
    modes = mode_crossovers(records, found, gradient_rtol)
    starts = tolerance_starts(records, found, gradient_rtol)
    out = []
    for i, v in enumerate(found):
        cross = [changes[i]] if i in changes else []
        cross += modes.get(i, [])
        cross += [starts[i]] if i in starts else []
        base = line(v, machine)
        out.append(Line(*base.cells()[:-1], crossover="; ".join(cross), floor_tie=base.floor_tie))
    return out


#: a lead that three processes a side resolve (issue 53's aim; docs/measurements.md, "Ladders
#: of several processes a rung"): a tie at the one-process floor with at least this ratio is
#: one the floor decided, not the data
CLEAR_LEAD = 1.5


def floor_ties(found: Sequence[Line]) -> str:
    """The sentence under the summary that counts its ties at the one-process floor (both
    sides of one process: the floor is a constant, 2.10x, whatever the data), and those
    with a lead of :data:`CLEAR_LEAD` or more; empty where there are none."""
    ties = [x.floor_tie for x in found if x.floor_tie is not None]
    if not ties:
        return ""
    big = sum(1 for r in ties if r >= CLEAR_LEAD)
    n = sum(1 for x in found if x.verdict.startswith("tie") or ", tied with" in x.winner)
    return (f"{len(ties)} of the {n} ties are the one-process floor's ({big} with a lead of "
            f"{CLEAR_LEAD:g}x or more): a side measured in one process cannot be told apart "
            "below 2.10x whatever its data; `--cold 3` (the default) measures a cheap ladder "
            "rung in three processes a side, whose spread sets the floor instead.")


def machine_name(hardware: str) -> str:
    """A machine's short name for the comparison cell: its accelerator where it has one
    (``NVIDIA H200``), else its CPU (``Intel(R) Xeon(R) Processor x2``)."""
    cpu, _, accel = hardware.partition(";")
    return (accel.split("(driver")[0] if accel.strip() else cpu).strip()
