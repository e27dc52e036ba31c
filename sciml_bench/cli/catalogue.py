"""The ``list`` command: the problems and the backends, with availability, solvers,
gradient methods and defaults."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click


@click.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_(as_json: bool) -> None:
    """List problems (size, stiffness, description) and backends (availability, the
    solvers with the stiff ones marked, the gradient methods, and the defaults).

    \b
    Examples:
      sciml-bench list
      sciml-bench list --json | jq '.backends[] | select(.available) | .name'
    """
    from sciml_bench import backends
    from sciml_bench.problem import spec

    probs = []
    loaded = []
    for name in spec.available_problems():
        try:
            p = spec.load(name)
            loaded.append(p)
            probs.append({
                "name": p.name, "states": p.n_state, "parameters": p.n_params,
                "stiff": p.stiff, "description": p.description,
                **(_ladder(p) if p.array else {}),
            })
        except spec.ProblemError as e:
            probs.append({"name": name, "error": str(e)})
    bks = []
    for name in backends.names():
        b = backends.get(name)
        av = b.availability()
        bks.append({
            "name": name, "available": av.ok, "reason": av.reason, "fix": av.fix,
            "solvers": list(b.solvers()), "gradient_methods": list(b.gradient_methods),
            "devices": list(b.devices), "dtypes": list(b.dtypes),
            **_backend_defaults(b, loaded),
        })
    if as_json:
        click.echo(json.dumps({"problems": probs, "backends": bks}, indent=2))
        return
    click.echo("Problems:")
    for p in probs:
        if "error" in p:
            click.echo(f"  {p['name']:<28} INVALID: {p['error']}")
        else:
            kind = "stiff" if p["stiff"] else "non-stiff"
            click.echo(
                f"  {p['name']:<28} {p['states']:>3} states {p['parameters']:>4} params  "
                f"{kind:<9}  {p['description']}"
            )
            if p.get("ladder"):
                click.echo(f"  {'':<28} --sizes takes {p['size']}, {p['size_meaning']} "
                           f"({p['states_formula']} states): {p['ladder_text']}")  # fmt: skip
    click.echo("\nBackends (solvers and gradient methods as --solver and --gradient take them):")
    for b in bks:
        state = "available" if b["available"] else f"unavailable: {b['reason']}"
        click.echo(f"  {b['name']:<12} {state}")
        if not b["available"] and b["fix"]:
            click.echo(f"  {'':<12} fix: {b['fix']}")
        for line in _backend_lines(b):
            click.echo(line)


def _ladder(p: Any) -> dict[str, Any]:
    """An array problem's size for ``list``: its name, what it is, the state count as a
    formula and at each ladder value (``--sizes`` takes the size, not the states)."""
    from sciml_bench.run.sizes import size_axis

    a = size_axis(p)
    return {"size": a.name, "ladder": list(a.ladder),
            "ladder_states": [a.states(v) for v in a.ladder], "size_meaning": a.meaning,
            "states_formula": a.formula, "ladder_text": a.ladder_text()}  # fmt: skip


def _backend_defaults(b: Any, problems: Sequence[Any]) -> dict[str, Any]:
    """A backend's stiff solvers and defaults, for ``list``: the default solver per
    problem class and the default gradient method per shipped problem (some backends,
    Julia's, pick it by the problem's size)."""
    gradients: dict[str, list[str]] = {}
    for p in problems:
        try:
            gradients.setdefault(b.default_gradient(p), []).append(p.name)
        except Exception:  # a backend that needs the compiled problem to decide
            continue
    return {
        "stiff_solvers": [n for n, info in b.solvers().items() if info.stiff],
        # no error control: the step is --dt
        "fixed_step_solvers": [n for n, info in b.solvers().items() if info.fixed_step],
        "default_solver": {"stiff": b.default_solver(True), "nonstiff": b.default_solver(False)},
        "default_gradient": gradients,
    }


def _backend_lines(b: dict[str, Any]) -> list[str]:
    """``list``'s lines of one backend: its solvers and gradient methods, stiff solvers
    and the defaults marked, wrapped between items."""
    stiff, default = set(b["stiff_solvers"]), b["default_solver"]
    fixed = set(b.get("fixed_step_solvers", ()))
    solvers = []
    for name in b["solvers"]:
        notes = ["stiff"] if name in stiff else []
        if name in fixed:
            notes.append("fixed step, --dt")
        if name == default["stiff"] == default["nonstiff"]:
            notes.append("default")
        elif name in (default["stiff"], default["nonstiff"]):
            kind = "stiff" if name == default["stiff"] else "non-stiff"
            notes.append(f"default for {kind} problems")
        solvers.append(name + (f" ({'; '.join(notes)})" if notes else ""))
    by_default = b["default_gradient"]
    usual = max(by_default, key=lambda g: len(by_default[g]), default=None)
    others = sorted(p for g, ps in by_default.items() if g != usual for p in ps)
    grads = []
    for name in b["gradient_methods"]:
        if name == usual:
            grads.append(f"{name} (default{', except for ' + ', '.join(others) if others else ''})")
        elif name in by_default:
            grads.append(f"{name} (default for {', '.join(by_default[name])})")
        else:
            grads.append(name)
    lines = _wrap_items("solvers", solvers) + _wrap_items("gradients", grads)
    return lines + _wrap_items("dtypes", b["dtypes"]) if b.get("dtypes") else lines


def _wrap_items(label: str, items: Sequence[str], width: int = 100) -> list[str]:
    """``label: a, b, c`` indented under a backend's name, broken between items only."""
    lines = [f"{'':<15}{label}:"]
    for i, item in enumerate(items):
        piece = f" {item}" + ("," if i < len(items) - 1 else "")
        if len(lines[-1]) + len(piece) > width and lines[-1].strip() != f"{label}:":
            lines.append(f"{'':<17}")
        lines[-1] += piece
    return lines
