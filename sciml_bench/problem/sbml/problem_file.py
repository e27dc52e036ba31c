"""An imported model as the problem file a user reads and edits: TOML, each default
choice stated in a comment beside it. What it writes, ``spec.loads`` reads back to the
same table (the tests check it)."""

from __future__ import annotations

import json
import math
from typing import Any

from sciml_bench.problem.sbml.read import ATOL, RTOL, TRUTH_FACTOR, Imported


def _value(v: Any) -> str:
    """A TOML value: strings (JSON's escapes are TOML's), finite floats, arrays, inline
    tables."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        f = float(v)
        if not math.isfinite(f):
            raise ValueError(f"{v} has no place in a problem file")
        return repr(f)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"no TOML for {type(v).__name__}")


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() and k.isascii() else json.dumps(k)


def text(imported: Imported, command: str) -> str:
    """The problem file; ``command`` is the command line that wrote it, quoted at the top."""
    d, notes = imported.data, imported.comments
    states = d["state"]["names"]
    lines = [
        f"# {d['description']}:", f"#   {command}",
        "# Every choice below that SBML does not make is a default; edit it here.",
        *([f"# Set in the SBML before the import (--set): "
           f"{', '.join(f'{k} = {v:g}' for k, v in imported.settings.items())}"]
          if imported.settings else []),
        f"name = {_value(d['name'])}", f"description = {_value(d['description'])}",
        "stiff = true   # default: biochemical models are often stiff (the reference uses BDF)",
        "", "[state]", f"names = {_value(states)}", f"initial = {_value(d['state']['initial'])}",
        *[f"# {n}: {notes[f'state.{n}']}" for n in states if f"state.{n}" in notes],
        "", "# Differentiated: every non-zero constant parameter the equations use, in log space",
        "# where positive (`sciml-bench import --parameters a,b` chooses others); the other",
        "# constants are numbers in the equations.",
        *[f"# {k.split('.', 1)[1]}: {v}" for k, v in notes.items() if k.startswith("parameters.")],
        "[parameters]",
        *[f"{_key(k)} = {_value(v)}" for k, v in d["parameters"].items()],
        "", "# Reactions, rate rules and assignment rules, substituted.", "[equations]",
        *[f"{_key(k)} = {_value(v)}" for k, v in d["equations"].items()],
        "", f"# t from 0 to {d['time']['span'][1]:g}, save points evenly spaced (51 by default; "
        f"--t-end T --saves N){'; ' + imported.span_note if imported.span_note else ''}.",
        "[time]",
        f"span = {_value(d['time']['span'])}", f"save = {_value(d['time']['save'])}",
        "", "[tolerances]      # the shipped stiff problems' defaults",
        f"rtol = {_value(RTOL)}", f"atol = {_value(ATOL)}",
        "", "# Default: a scaled least-squares fit to observations made at the truth, every",
        f"# differentiated parameter x {TRUTH_FACTOR} (the shipped problems' kind of loss).",
        "[loss]", 'kind = "fit"', f"truth = {_value(d['loss']['truth'])}", "",
    ]  # fmt: skip
    return "\n".join(lines)
