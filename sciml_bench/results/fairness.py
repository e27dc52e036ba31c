"""The fairness page: what each library is set to, why, what its own docs recommend, and
what the rows of a published run actually ran with.

Two sources, one page (``docs/fairness.md``, printed by ``sciml-bench fairness``):

- ``sciml_bench/backends/choices.toml``: per library, each setting the suite chooses, the
  reason (with its measurement), the library's own recommendation and the code that
  applies it. Its ``[NAME.defaults]`` are checked against the backends' code
  (:func:`disagreements`), so the page cannot claim a default the code does not use;
- the results files given: per library and problem class, the distinct settings its
  ``ok`` rows recorded (solver, gradient method, linear solver, Jacobian, tolerances, step
  bound, dtype, threads, BLAS), read from the rows, never restated by hand.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from typing import Any

#: the columns of the "what ran" table: (header, how a row's value is read)
RAN_COLUMNS = ("solver", "gradient", "linear solver", "rtol", "max steps", "dtype",
               "process threads / BLAS")  # fmt: skip
#: statuses whose rows say nothing of the settings (the case never ran)
NOT_RUN = ("unavailable", "skipped")
#: the defaults a choices entry may state, and how each is read from a backend
DEFAULT_READERS = {
    "stiff": lambda b: b.default_solver(True),
    "nonstiff": lambda b: b.default_solver(False),
    "array_stiff": lambda b: b.array_solver(True),
}


def load_choices() -> dict[str, Any]:
    """``choices.toml``, parsed (the package's own data file)."""
    text = resources.files("sciml_bench.backends").joinpath("choices.toml").read_text("utf-8")
    return tomllib.loads(text)


def disagreements(choices: Mapping[str, Any]) -> list[str]:
    """Every stated default that the backend's code does not use, as one sentence each;
    every registered backend without an entry too. Empty when the page tells the truth."""
    from sciml_bench import backends

    out = [f"{name}: no entry in choices.toml; add a [{name}] table"
           for name in backends.names() if name not in choices]  # fmt: skip
    for name, entry in choices.items():
        if name == "shared":
            continue
        backend = backends.get(name)
        for key, stated in entry.get("defaults", {}).items():
            actual = DEFAULT_READERS[key](backend)
            if actual != stated:
                out.append(f"{name}: choices.toml says the {key} default is {stated!r}, "
                           f"the code uses {actual!r}; correct one of them")  # fmt: skip
    return out


def problem_class(record: Mapping[str, Any]) -> str:
    """The class a row's problem belongs to, from the suite's naming (``stiff-``,
    ``nonstiff-``) and, for a size ladder's rows, the Jacobian kind the row ran with (an
    explicit solver's rows, and a network width's, have none: ``sized``)."""
    name = str(record.get("problem", ""))
    stiff = "non-stiff" if name.startswith("nonstiff") else "stiff"
    if record.get("size") is not None:
        kind = record.get("jacobian")
        return f"{stiff}, array ({kind} Jacobian)" if kind in ("dense", "sparse") else f"{stiff}, sized"
    return stiff


def _blas(record: Mapping[str, Any]) -> str:
    libs = record.get("blas")
    if not isinstance(libs, Sequence) or isinstance(libs, str) or not libs:
        return ""
    return ", ".join(f"{b.get('internal_api', '?')} x{b.get('num_threads', '?')}"
                     for b in libs if isinstance(b, Mapping))  # fmt: skip


def _cells(record: Mapping[str, Any]) -> tuple[str, ...]:
    threads = str(record.get("worker_threads", "?"))
    blas = _blas(record)
    return (
        str(record.get("solver", "")),
        str(record.get("gradient_method", "")),
        str(record.get("linear_solver", "")),
        f"{record['rtol']:g}" if isinstance(record.get("rtol"), float) else "",
        str(record.get("max_steps", "")),
        str(record.get("dtype", "")),
        f"{threads}; {blas}" if blas else threads,
    )


def ran_settings(records: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], list[set[str]]]:
    """``(backend, problem class) -> one set of distinct values per column`` of RAN_COLUMNS,
    over the ODE rows that ran (any status but the never-run ones: a failure ran with the
    same settings)."""
    out: dict[tuple[str, str], list[set[str]]] = {}
    for r in records:
        if r.get("kind", "ode") != "ode" or r.get("status") in NOT_RUN:
            continue
        cells = out.setdefault((str(r["backend"]), problem_class(r)),
                               [set() for _ in RAN_COLUMNS])  # fmt: skip
        for column, value in zip(cells, _cells(r), strict=True):
            if value:
                column.add(value)
    return out


def _joined(values: set[str]) -> str:
    """Distinct values in order; numbers (tolerances) as their range when there are many."""
    try:
        nums = sorted(float(v) for v in values)
    except ValueError:
        return "; ".join(sorted(values)) or "—"
    if len(nums) > 3:
        return f"{nums[0]:g} to {nums[-1]:g} ({len(nums)} values)"
    return "; ".join(f"{v:g}" for v in nums) or "—"


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def settings_section(name: str, entry: Mapping[str, Any]) -> list[str]:
    """One library's table of choices: setting, ours, why, what its docs recommend."""
    lines = [f"### {entry.get('library', name)}", "",
             "| setting | ours | why | the library recommends | set in |",
             "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for s in entry.get("setting", []):
        rec = s.get("recommended", "")
        if s.get("source"):
            rec = f"{rec} ([source]({s['source']}))" if rec else f"[source]({s['source']})"
        where = f"`{s['where']}`" if s.get("where") else ""
        lines.append("| " + " | ".join(_escape(c) for c in (
            s["name"], s["ours"], s["why"], rec or "—", where or "—")) + " |")  # fmt: skip
    return [*lines, ""]


def ran_section(records: Iterable[Mapping[str, Any]], order: Sequence[str]) -> list[str]:
    """What the rows ran with, per library and problem class (distinct values joined)."""
    settings = ran_settings(records)
    if not settings:
        return ["No results file was given, so nothing here is read from rows.", ""]
    rank = {n: i for i, n in enumerate(order)}
    lines = ["| library | problem class | " + " | ".join(RAN_COLUMNS) + " |",
             "| --- | --- |" + " --- |" * len(RAN_COLUMNS)]  # fmt: skip
    for (backend, cls) in sorted(settings, key=lambda k: (rank.get(k[0], 99), k[1])):
        cells = [_joined(c) for c in settings[(backend, cls)]]
        lines.append("| " + " | ".join(_escape(c) for c in (backend, cls, *cells)) + " |")
    return [*lines, ""]


def page(choices: Mapping[str, Any], records: Sequence[Mapping[str, Any]],
         sources: Sequence[str]) -> str:  # fmt: skip
    """``docs/fairness.md`` as Markdown, from the choices and the rows of ``sources``."""
    order = [n for n in choices if n != "shared"]
    head = [
        "# Fairness: each library at its expert's settings", "",
        "[← README](../README.md) · [docs index](README.md)", "",
        "Generated by `sciml-bench fairness` from `sciml_bench/backends/choices.toml` (the",
        "settings, their reasons, each library's own advice) and from the rows of the published",
        "results. To disagree with a line, change it in `choices.toml` and in the code its",
        "`set in` column names; `tests/test_fairness.py` checks the stated defaults against",
        "the code and this page against its sources.", "",
        "## What every library shares", "", *settings_section("shared", choices["shared"])[2:],
        "## Each library", "",
    ]
    body = [line for name in order for line in settings_section(name, choices[name])]
    ran = ["## What the published rows ran with", "",
           "Read from " + (", ".join(f"`{s}`" for s in sources) or "no file") + ".", "",
           *ran_section(records, order)]  # fmt: skip
    return "\n".join([*head, *body, *ran]).rstrip() + "\n"
