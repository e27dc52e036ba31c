"""The ``rejudge`` command: a results file judged again against the current reference.

Each ODE row with a stored gradient gets its problem rebuilt as the row ran it (its name;
the run's ``--problem-file`` of that name, or one given here; an array problem or a
network at the row's ``size``), the current reference of that problem (the cache's, or
rebuilt with ``--refresh``; one per size of a ladder) and the run's own scores
(:func:`sciml_bench.run.ode.gradient_scores`). An ensemble row with a stored gradient is
scored the same way against the current ensemble reference of its problem's sample
(:func:`sciml_bench.run.ensemble.gradient_columns`); one stored without its gradient (the
old projections' judge) has its tier withdrawn (:func:`~sciml_bench.results.rejudge.withdrawn`).
The file's other rows are carried as they were. What the re-judge replaced is kept on each
row under ``rejudged_from`` (:mod:`sciml_bench.results.rejudge`).
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import click

from sciml_bench.cli.options import UserError, gradient_rtol_option, read_runs


def _command_files(command: str) -> list[str]:
    """The ``--problem-file`` paths of a run's recorded command line."""
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    out = []
    for i, w in enumerate(words):
        if w == "--problem-file" and i + 1 < len(words):
            out.append(words[i + 1])
        elif w.startswith("--problem-file="):
            out.append(w.split("=", 1)[1])
    return out


def _problem_files(given: tuple[str, ...], command: str) -> tuple[dict[str, str], list[str]]:
    """Problem name -> file: the files given here (each must load), then the run's
    ``--problem-file`` paths that still load; and the run's paths that do not."""
    from sciml_bench.problem import spec

    files: dict[str, str] = {}
    for path in given:
        if not Path(path).is_file():
            raise UserError(f"--problem-file {path}: no such file; give the problem file the "
                            "run used")  # fmt: skip
        files[spec.load(path).name] = path  # a ProblemError is the user's one-line error
    missing = []
    for path in _command_files(command):
        try:
            files.setdefault(spec.load(path).name, path)
        except spec.ProblemError:
            missing.append(path)
    return files, missing


class _Judge:
    """Each row's problem and current reference (each made once per problem and size,
    with progress lines on stderr) and its new columns."""

    def __init__(self, files: dict[str, str], missing: list[str], refresh: bool) -> None:
        self.files, self.missing, self.refresh = files, missing, refresh
        self.problems: dict[tuple[str, Any], Any] = {}
        self.references: dict[tuple[str, str], Any] = {}
        #: (row label, why) of every row kept as it was
        self.kept: list[tuple[str, str]] = []

    def row(self, r: dict[str, Any], environment: dict[str, Any]) -> dict[str, Any]:
        """``r`` re-judged, carried (not a candidate) or kept (with why)."""
        from sciml_bench.problem.reference import REFERENCE_VERSION
        from sciml_bench.results import rejudge

        if not rejudge.candidate(r):
            return r
        ensemble = r.get("kind") == "ensemble"
        # an ensemble row's size is its member count, not a problem size
        key = (str(r.get("problem")), None if ensemble else r.get("size"))
        if key not in self.problems:
            self.problems[key] = self._load(*key)
        problem = self.problems[key]
        score = self._score_ensemble if ensemble else self._score
        scored = problem if isinstance(problem, str) else score(r, problem, environment)
        if isinstance(scored, str):
            self.kept.append((rejudge.row_label(r), scored))
            return rejudge.kept(r, scored)
        columns, notes = scored
        return rejudge.rejudged(r, columns, environment, REFERENCE_VERSION, notes)

    def _load(self, name: str, size: Any) -> Any:
        """The row's problem as it ran (at its size), or why it cannot be rebuilt."""
        from sciml_bench.problem import spec

        source = self.files.get(name)
        if source is None and name not in spec.available_problems():
            gone = (f"; the run's problem file(s) {', '.join(self.missing)} do not load here"
                    if self.missing else "")  # fmt: skip
            return f"no problem {name!r} here (not shipped{gone}); pass --problem-file PATH"
        try:
            p = spec.load(source or name)
            if size is None:
                return p
            if p.laddered is None:
                return f"{name} has no [sizes] now, but the row ran at size {size}"
            return spec.at_size(p, int(size))
        except (spec.ProblemError, ValueError) as e:
            return f"its problem cannot be rebuilt: {e}"

    def _reference(self, p: Any, size: Any) -> Any:
        """The current reference of ``p`` (made once), or why there is none."""
        from sciml_bench.problem import reference

        key = (p.name, p.content_hash)
        if key in self.references:
            return self.references[key]
        at = "" if size is None else f" at size {size}"
        click.echo(f"reference for {p.name}{at} ({p.n_state} states, {p.n_params} parameters)"
                   f"{', rebuilt' if self.refresh else ''} ...", err=True)  # fmt: skip
        start = time.perf_counter()
        try:
            ref: Any = reference.get(p, refresh=self.refresh)
            where = (f"read from the cache {ref.cache_path}" if ref.cached
                     else f"built in {time.perf_counter() - start:.1f} s")  # fmt: skip
            click.echo(f"reference: {where}", err=True)
        except reference.ReferenceError as e:
            click.echo(f"reference: failed ({e})", err=True)
            ref = f"the current reference failed: {e}"
        self.references[key] = ref
        return ref

    def _score(
        self, r: dict[str, Any], p: Any, environment: dict[str, Any]
    ) -> tuple[dict[str, Any], list[str]] | str:
        """The row's new columns and notes, or why it cannot be re-judged."""
        checked = _stored_gradient(r, p, environment)
        if isinstance(checked, str):
            return checked
        g, notes = checked
        ref = self._reference(p, r.get("size"))
        if isinstance(ref, str):
            return ref
        return _columns(r, p, ref, g), notes

    def _score_ensemble(
        self, r: dict[str, Any], p: Any, environment: dict[str, Any]
    ) -> tuple[dict[str, Any], list[str]] | str:
        """An ensemble row's new columns and notes against the current ensemble reference
        of its problem's sample (:func:`_ensemble_columns`), its tier withdrawn where it
        stored no gradient, or why it cannot be re-judged."""
        from sciml_bench.results.rejudge import withdrawn

        if p.ensemble is None:
            return f"{p.name} has no [ensemble] section now, but the row is an ensemble's"
        if not isinstance(r.get("gradient"), dict) or not r["gradient"]:
            return withdrawn(r)
        members = r.get("gradient_members")
        if members is not None and int(members) != p.ensemble.sample:
            return (f"its gradient averages {members} members, the problem's sample is "
                    f"{p.ensemble.sample} now (the problem file changed); pass --problem-file "
                    "PATH of the file it ran")  # fmt: skip
        checked = _stored_gradient(r, p, environment)
        if isinstance(checked, str):
            return checked
        g, notes = checked
        ref = self._ensemble_reference(p)
        if isinstance(ref, str):
            return ref
        return _ensemble_columns(r, p, ref, g), notes

    def _ensemble_reference(self, p: Any) -> Any:
        """The current ensemble reference of ``p``'s sample (made once), or why there is none."""
        from sciml_bench.problem import ensemble_reference, reference

        key = (p.name, f"{p.content_hash}-ensemble")
        if key in self.references:
            return self.references[key]
        click.echo(f"ensemble reference for {p.name} ({p.ensemble.sample} members, "
                   f"{p.n_params} parameters){', rebuilt' if self.refresh else ''} ...",
                   err=True)  # fmt: skip
        start = time.perf_counter()
        try:
            ref: Any = ensemble_reference.get(p, refresh=self.refresh)
            where = (f"read from the cache {ref.cache_path}" if ref.cached
                     else f"built in {time.perf_counter() - start:.1f} s")  # fmt: skip
            click.echo(f"ensemble reference: {where}", err=True)
        except reference.ReferenceError as e:
            click.echo(f"ensemble reference: failed ({e})", err=True)
            ref = f"the current ensemble reference failed: {e}"
        self.references[key] = ref
        return ref


def _stored_gradient(
    r: dict[str, Any], p: Any, environment: dict[str, Any]
) -> tuple[Any, list[str]] | str:
    """A row's stored gradient in ``p``'s parameter order and the notes on how it was
    taken, or why it cannot be scored against ``p``'s reference (other parameters, another
    θ)."""
    import numpy as np

    from sciml_bench.results.rejudge import cache_facts

    names = list(p.param_names)
    grad = r["gradient"]
    if set(grad) != set(names):
        return (f"its gradient's {len(grad)} parameters are not {p.name}'s {len(names)} "
                "now (the problem file changed); pass --problem-file PATH of the file it ran")  # fmt: skip
    notes = []
    theta = r.get("gradient_theta")
    if theta is None:
        notes.append("θ not recorded (a file from before gradient_theta): taken as the "
                     "problem's θ0")  # fmt: skip
    elif len(theta) != len(names) or not np.allclose(theta, p.theta0, rtol=1e-12, atol=0):
        return ("its gradient was taken at a θ other than the problem's θ0 now (the "
                "problem file changed); pass --problem-file PATH of the file it ran")  # fmt: skip
    recorded, _ = cache_facts(r, environment)
    if recorded and recorded != p.content_hash:
        notes.append(f"the problem's content changed since the run (hash {recorded}, now "
                     f"{p.content_hash}): judged against the current problem's reference")  # fmt: skip
    return np.array([grad[n] for n in names], dtype=float), notes


def _ensemble_columns(r: dict[str, Any], p: Any, ref: Any, g: Any) -> dict[str, Any]:
    """An ensemble row's columns against the ensemble reference ``ref``, as a run scores
    them (:func:`sciml_bench.run.ensemble.gradient_columns`, the ODE rows' scores); the
    solution's scores, made on member states a row does not store, stay as they were."""
    from sciml_bench.run.ensemble import gradient_columns
    from sciml_bench.run.ode import reference_columns

    cols = {**reference_columns(ref, str(r.get("gradient_method", ""))),
            **gradient_columns(g, ref, p)}  # fmt: skip
    cols.update({k: v for k, v in r.items() if k.startswith("solution_error")})
    return cols


def _columns(r: dict[str, Any], p: Any, ref: Any, g: Any) -> dict[str, Any]:
    """A row's columns against ``ref``, as a run scores them: the reference's, the
    gradient's in the judged space, the solution's and the gradient's scores."""
    import numpy as np

    from sciml_bench.run.ode import (
        gradient_scores,
        judged_space,
        reference_columns,
        solution_scores,
    )

    cols = {**reference_columns(ref, str(r.get("gradient_method", ""))),
            **judged_space(g, p.theta0, p.log_params)}  # fmt: skip
    y = r.get("y")
    if y is not None and not ref.missing:
        cols.update(solution_scores(p, ref, np.asarray(y, dtype=float)))
    else:  # no solution stored: its scores, if any, stay as they were
        cols.update({k: v for k, v in r.items() if k.startswith("solution_error")})
    if ref.gradient_missing:  # reference_columns' gradient_error_note says why
        cols["gradient_tier"] = "unjudged"
    else:
        cols.update(gradient_scores(g, ref.gradient, p, ref.reference_error))
    if r.get("size") is not None:
        cols.update(reference_rtol=ref.rtol, reference_note=ref.tolerance_note or None)
    return cols


def _warn_kept(kept: list[tuple[str, str]]) -> None:
    """One warning line per reason rows were kept as they were."""
    by_reason: dict[str, list[str]] = {}
    for label, why in kept:
        by_reason.setdefault(why, []).append(label)
    for why, labels in by_reason.items():
        first = labels[0] + (f" and {len(labels) - 1} more" if len(labels) > 1 else "")
        click.echo(f"warning: {len(labels)} row(s) kept as they were ({first}): {why}", err=True)


def _print(old: list[dict[str, Any]], new: list[dict[str, Any]], out: Path,
           gradient_rtol: float | None, as_json: bool, kept: list[tuple[str, str]]) -> None:  # fmt: skip
    """What moved: the table of tiers, the verdicts before and after (``--json``: one
    object with the same)."""
    from sciml_bench.problem.reference import REFERENCE_VERSION
    from sciml_bench.results import rejudge, verdict

    found = rejudge.moves(new)
    if as_json:
        doc = {"output": str(out), "reference_version": REFERENCE_VERSION,
               "rows": [m.to_json() for m in found],
               "kept": [{"row": label, "reason": why} for label, why in kept],
               "verdicts_before": verdict.json_records(old, gradient_rtol),
               "verdicts_after": verdict.json_records(new, gradient_rtol)}  # fmt: skip
        click.echo(json.dumps(doc, indent=2, default=str))
        return
    click.echo(f"re-judged against reference version {REFERENCE_VERSION}: {out}")
    click.echo(rejudge.move_table(found))
    for line in rejudge.verdict_moves(verdict.lines(old, gradient_rtol=gradient_rtol),
                                      verdict.lines(new, gradient_rtol=gradient_rtol)):  # fmt: skip
        click.echo(line)


@click.command("rejudge")
@click.argument("file", type=click.Path())
@click.option("--refresh", is_flag=True,
              help="Rebuild each reference (and its cache entry) instead of reading the cache.")
@click.option("--out", type=click.Path(), default=None, metavar="NEW.h5",
              help="Where the re-judged file goes [default: FILE-rejudged.h5 beside FILE]; "
                   "never FILE itself, never an existing file.")
@click.option("--problem-file", "problem_files", multiple=True, type=click.Path(),
              help="Rebuild the rows of this file's problem from it (repeatable) [default: "
                   "the run's own --problem-file of that name, else the shipped problem].")
@gradient_rtol_option
@click.option("--json", "as_json", is_flag=True,
              help="Print what moved as one JSON object: rows, kept rows, verdicts before and after.")
def rejudge_cmd(file: str, refresh: bool, out: str | None, problem_files: tuple[str, ...],
                gradient_rtol: float | None, as_json: bool) -> None:  # fmt: skip
    """Judge a results file's gradients again against the current reference, without
    running its rows again, and say which tiers and verdicts moved.

    Every ODE row with a stored gradient is scored against the current reference of its
    problem (at its size, for a ladder: one reference per size, built or read from the
    cache, with progress on stderr) on today's measure; every ensemble row with a stored
    gradient against the current ensemble reference of its problem's sample, on the same
    measure (an ensemble row stored without its gradient, judged on projections, has its
    tier withdrawn: unjudged, saying why). The new file holds every row: the re-judged
    ones carry `rejudged_from` (what they replaced: the old error, tier, reference method
    and version); rows without a gradient, training and CNN rows are carried as they were;
    a row whose problem cannot be rebuilt (unknown name, missing problem file, changed
    parameters) is kept with a `rejudge_note` and a warning. FILE itself is never changed.

    \b
    Examples:
      sciml-bench rejudge results/stiff-robertson-20261126-153109-5680-749b05.h5
      sciml-bench rejudge results/run.h5 --refresh --out results/run-tight.h5
      sciml-bench rejudge results/mine.h5 --problem-file problems/mine.toml --gradient-rtol 1e-3
      sciml-bench rejudge results/run.h5 --json | jq '.rows[] | select(.moved)'
    """
    from sciml_bench.measure.environment import git_commit
    from sciml_bench.problem.reference import REFERENCE_VERSION
    from sciml_bench.results import rejudge

    run = read_runs([file])[0]
    target = rejudge.check_out(file, out or rejudge.default_out(file))
    files, missing = _problem_files(problem_files, str(run.meta.get("command", "")))
    judge = _Judge(files, missing, refresh)
    new = [judge.row(r, run.environment) for r in run.records]
    if not rejudge.moves(new) and not judge.kept:
        raise UserError(f"{file}: no ODE or ensemble row with a stored gradient or a tier to "
                        "re-judge (rows never scored, training and CNN rows are not)")  # fmt: skip
    command = "sciml-bench " + shlex.join(sys.argv[1:])
    facts = rejudge.rejudge_facts(Path(file), command, REFERENCE_VERSION, refresh, git_commit())
    rejudge.write(run, new, target, facts)
    _warn_kept(judge.kept)
    _print(run.records, new, target, gradient_rtol, as_json, judge.kept)
