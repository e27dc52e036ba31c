"""What ``sciml-bench check`` reports about a problem before anyone starts a long run: the
file in one paragraph, the equations as the parser read them, and the code targets that can
express it.

The equations are printed from the parsed sympy trees, not echoed from the file, so that a
reader sees what the suite will solve: ``-x^2`` read as ``-(x^2)``, a constant folded, an
array operator with its boundary. Whether a target can express the problem is decided the
way a run decides it: by generating its source (:func:`sciml_bench.problem.codegen.generate`)
and reading the generator's own marker of what its language lacks
(:func:`sciml_bench.problem.generated.not_expressible`).
"""

from __future__ import annotations

import sympy

from sciml_bench.problem import codegen
from sciml_bench.problem.arrays import ArrayModel, Operator
from sciml_bench.problem.generated import not_expressible
from sciml_bench.problem.spec import Network, Problem


def as_written(e: sympy.Expr) -> str:
    """A parsed expression in the file's own grammar (``^`` for powers)."""
    return str(e).replace("**", "^")


def equations(problem: Problem) -> list[tuple[str, str]]:
    """``(d<state>/dt, right-hand side)`` per state, as parsed; an array problem's
    elementwise templates with their operators written out."""
    if problem.array is not None:
        model = problem.array
        ops = {op.symbol: sympy.Symbol(_operator_text(op, model)) for op in model.operators}
        return [(f"d{s}/dt", as_written(t.xreplace(ops)))
                for s, t in zip(model.states, model.templates, strict=True)]  # fmt: skip
    return [(f"d{s}/dt", as_written(e)) for s, e in zip(problem.state_names, problem.rhs, strict=True)]


def _operator_text(op: Operator, model: ArrayModel) -> str:
    """An array operator as the file writes it: ``lap(u, periodic)``, ``shift(u, 1, 0,
    neumann)``, ``sum(u, 0)``."""
    state = model.states[op.state]
    if op.kind == "lap":
        return f"lap({state}, {op.boundary})"
    if op.kind == "shift":
        return f"shift({state}, {', '.join(map(str, op.offset))}, {op.boundary})"
    axes = "" if len(op.axes) == len(model.shape) else ", " + ", ".join(map(str, op.axes))
    return f"{op.kind}({state}{axes})"


def network_lines(problem: Problem) -> list[str]:
    """One line per declared network: its layers, activation, inputs and weight count."""
    return [_network_line(net) for net in problem.networks]


def _network_line(net: Network) -> str:
    inputs = ", ".join(as_written(e) for e in net.inputs)
    outputs = ", ".join(o.name for o in net.outputs)
    return (f"{net.name}: dense {' -> '.join(map(str, net.layers))}, {net.activation} on hidden "
            f"layers, inputs [{inputs}], outputs {outputs}, {net.n_params} weights "
            f"(seed {net.seed})")  # fmt: skip


def summary(problem: Problem) -> list[str]:
    """The problem in a few lines: size, stiffness, time, tolerances, loss, sections."""
    n_log = sum(problem.log_params)
    lines = [
        f"{'stiff' if problem.stiff else 'non-stiff'}; {problem.n_state} states, "
        f"{problem.n_params} parameters ({n_log} differentiated in log space)",
        f"t in [{problem.t_span[0]:g}, {problem.t_span[1]:g}], {len(problem.t_save)} save "
        f"points; rtol {problem.rtol:g}, atol {problem.atol:g}, max_steps {problem.max_steps}",
        _loss_line(problem),
    ]
    if problem.laddered is not None:
        lad = problem.laddered
        lines.append(f"[sizes]: {lad.ladder_name} = {lad.size} here; --sizes ladders "
                     f"{', '.join(map(str, lad.ladder)) or 'its default only'}")  # fmt: skip
    if problem.ensemble is not None:
        e = problem.ensemble
        lines.append(f"[ensemble]: {', '.join(v.name for v in e.variations)} vary; sizes "
                     f"{', '.join(map(str, e.sizes))}; {', '.join(e.semantics)}")  # fmt: skip
    if problem.training is not None:
        lines.append(f"[training]: Adam, {problem.training.iterations} iterations "
                     "(sciml-bench run --train)")  # fmt: skip
    return lines + _start_lines(problem) + _event_lines(problem)


def _event_lines(problem: Problem) -> list[str]:
    """The events, as parsed (problem/events.py): when each fires and what it sets."""
    out = []
    for k, e in enumerate(problem.events[:6]):
        if e.when is not None:
            way = "down" if e.direction < 0 else "up"
            when = f"each crossing of zero of {_short(e.when)}, going {way}"
        elif e.moves:
            when = f"t = {_short(e.at)} ({e.time0:g} here; moves with the parameters)"
        else:
            when = f"t = {e.time0:g}"
        sets = ", ".join(f"{problem.state_names[i]} = {_short(v)}" for i, v in e.assign)
        out.append(f"event {k}: at {when}: {sets}")
    if len(problem.events) > 6:
        out.append(f"(and {len(problem.events) - 6} more events)")
    return out


def _start_lines(problem: Problem) -> list[str]:
    """The initial values that move with the parameters, and the derived parameters: what
    every gradient carries through y0 (problem/initial.py)."""
    lines = []
    moving = [(n, e) for n, e in zip(problem.state_names, problem.initial, strict=False)
              if e.free_symbols]  # fmt: skip
    if moving:
        shown = "; ".join(f"{n}(t0) = {_short(e)}" for n, e in moving[:4])
        more = f" (and {len(moving) - 4} more)" if len(moving) > 4 else ""
        lines.append(f"{len(moving)} initial values depend on the parameters (the gradient "
                     f"runs through them): {shown}{more}")  # fmt: skip
    if problem.derived:
        shown = "; ".join(f"{n} = {_short(e)}" for n, e in problem.derived[:4])
        lines.append(f"{len(problem.derived)} derived parameters (evaluated once, not "
                     f"differentiated themselves): {shown}")  # fmt: skip
    return lines


def _short(e: object, limit: int = 60) -> str:
    text = str(e).replace("**", "^")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _loss_line(problem: Problem) -> str:
    loss = problem.loss
    if loss.kind == "final":
        return "loss: final, Σ w_j y_j(t_end)"
    named = problem.param_names[: problem.n_mech_params] if problem.array is None else ()
    moved = [f"{n} {a:g} -> {b:g}" for n, a, b in zip(named, problem.theta0, loss.truth,
                                                       strict=False) if a != b]  # fmt: skip
    source = "other dynamics (truth_equations)" if loss.truth_rhs else "the truth parameters"
    return (f"loss: fit ({loss.weighting}) to observations made with {source}"
            + (f": {', '.join(moved)}" if moved else ""))


def expressible(problem: Problem) -> dict[str, str | None]:
    """Per code target, ``None`` when its generator writes code for ``problem``, else why
    not (the generator's own reason, or the error it raised)."""
    out: dict[str, str | None] = {}
    for target in codegen.TARGETS:
        if target not in codegen.targets(problem):
            out[target] = "no code generator for this kind of problem"
            continue
        try:
            out[target] = not_expressible(codegen.generate(problem, target))
        except (ValueError, NotImplementedError) as e:  # a generator's refusal, in words
            out[target] = f"{type(e).__name__}: {e}"
    return out
