"""A problem's events (:mod:`sciml_bench.problem.events`) as generated NumPy, and the
refusal every other target writes until it runs them (issue 51).

NumPy (what SciPy's rows and the reference run), appended to ``rhs`` and ``jac``:

- ``event_times(p)``: ``τ_k(θ)`` in file order; ``event_times_jac(p)``: ``∂τ/∂θ`` (K × P);
- ``EVENTS[k](y, p)``: the state after event ``k``, ``g_k(y, θ)`` (every assignment reads
  the state before it: they are simultaneous);
- ``EVENT_JACS[k](y, p)``: ``(G_y, G_θ)``, ``∂g_k/∂y`` (n × n, identity rows for the
  states it keeps) and ``∂g_k/∂θ`` (n × P), exact by sympy.

- ``EVENT_ROOTS[k](t, y, p)``: a root event's function ``h``, ``EVENT_ROOT_JACS[k]`` its
  ``(h_t, h_y, h_θ)``, ``EVENT_DIRECTIONS[k]`` its crossing (-1 down, +1 up); its entry of
  ``event_times`` is NaN (the solve finds its times).

All complex-safe (the reference's complex-step check runs through them where the times
are fixed). torch and JAX get events at times only; a root event is NumPy's and CasADi's.

CasADi (CVODES' rows) writes its own ``zero`` and ``transition`` (:mod:`.casadi`) from
:func:`indicators` and the assignments: CasADi's integrator finds the crossings and
differentiates through them itself.

torch (torchdiffeq's rows): methods of the ``RHS`` module, which holds the parameters,
``event_times(y)`` and ``event_k(y)``, so that autograd runs from its parameter tensors
through the times and the assignments.

JAX (Diffrax's rows), appended to ``rhs``: ``event_times(p)`` and ``EVENTS[k](y, p)``, the
state after event ``k`` built anew (``jnp.stack``, no in-place update), so that ``jax.grad``
runs through the assignments and the times: no Jacobians are written for it.
"""

from __future__ import annotations

import sympy

import sciml_bench.problem.codegen.native as native
from sciml_bench.problem.generated import NOT_EXPRESSIBLE
from sciml_bench.problem.spec import Problem

_NUMPY = native.TARGETS["numpy"]
_JAX = native.TARGETS["jax"]
_TORCH = native.TARGETS["torch"]
#: how each target writes a comment line
_COMMENT = {"diffsl": "// {}", "sbml": "<!--\n{}\n-->"}


#: the targets whose source runs events of each kind (``time``, ``state``), and the rows
#: that run them
EVENT_TARGETS = {"time": (("numpy", "jax", "torch", "casadi"),
                          "SciPy's, Diffrax's, torchdiffeq's and CVODES'"),
                 "state": (("numpy", "casadi"), "SciPy's and CVODES'")}  # fmt: skip
#: the time symbol a root function reads (:func:`sciml_bench.problem.events.read`)
T = sympy.Symbol("t", real=True)


def _hardest(problem: Problem) -> str:
    return "state" if any(e.when is not None for e in problem.events) else "time"


def event_targets(problem: Problem) -> tuple[str, ...]:
    """The targets whose source runs ``problem``'s events (every one without events)."""
    return EVENT_TARGETS[_hardest(problem)][0]


def indicators(problem: Problem) -> list[sympy.Expr]:
    """One function per event, in file order, positive before it fires and crossing zero
    going down where it fires (SUNDIALS' and CasADi's zero-crossing form): ``τ(θ) − t``
    for a time, ``h`` for a root going down, ``−h`` for one going up."""
    return [e.at - T if e.at is not None else e.when if e.direction < 0 else -e.when
            for e in problem.events]  # fmt: skip


def refusal(problem: Problem, target: str) -> str:
    """The whole source of a target that does not run events yet: the marker and why."""
    n, rows = len(problem.events), EVENT_TARGETS[_hardest(problem)][1]
    what = "where a root function crosses zero" if _hardest(problem) == "state" else "at set times"
    why = (f"{NOT_EXPRESSIBLE} here yet: {problem.name}'s {n} event{'s' if n > 1 else ''} "
           f"([[events]] {what}) run on {rows} rows and in the reference only so far "
           "(issue 51)")  # fmt: skip
    return _COMMENT.get(target, "# {}").format(why) + "\n"


def numpy_lines(problem: Problem) -> list[str]:
    """The NumPy functions of the module docstring (nothing without events)."""
    if not problem.events:
        return []
    out = ["", "", "def event_times(p):", '    """The events\' times, in file order."""',
           *_times_body(problem), "", "", "def event_times_jac(p):",
           '    """d tau / d theta (events x parameters)."""', *_times_jac_body(problem)]  # fmt: skip
    for k in range(len(problem.events)):
        out += ["", "", f"def event_{k}(y, p):", f'    """The state after event {k}."""',
                *_assign_body(problem, k), "", "", f"def event_{k}_jac(y, p):",
                f'    """(dg/dy, dg/dtheta) of event {k}."""', *_assign_jac_body(problem, k)]  # fmt: skip
    ks = range(len(problem.events))
    out += ["", "", f"EVENTS = ({', '.join(f'event_{k}' for k in ks)},)",
            f"EVENT_JACS = ({', '.join(f'event_{k}_jac' for k in ks)},)"]  # fmt: skip
    return out + _root_lines(problem)


def _root_lines(problem: Problem) -> list[str]:
    """Each root function ``root_k(t, y, p)`` and its gradient ``root_k_jac(t, y, p)``,
    ``(h_t, h_y, h_θ)``, with ``EVENT_ROOTS``, ``EVENT_ROOT_JACS`` and ``EVENT_DIRECTIONS``
    keyed on the event's number (nothing without a root)."""
    roots = [(k, e) for k, e in enumerate(problem.events) if e.when is not None]
    if not roots:
        return []
    names = {**native.names(problem), T: "t"}
    pr = native.printer(_NUMPY, names)
    out = []
    for k, e in roots:
        h = e.when
        hy = [sympy.diff(h, s) for s in problem.state_symbols]
        hp = [sympy.diff(h, s) for s in problem.param_symbols]
        out += ["", "", f"def root_{k}(t, y, p):", f'    """Event {k} fires where this crosses zero."""',
                *_bind(problem, [h], True), f"    return {pr.doprint(h)}",
                "", "", f"def root_{k}_jac(t, y, p):", '    """(dh/dt, dh/dy, dh/dtheta)."""',
                *_bind(problem, [sympy.diff(h, T), *hy, *hp], True),
                "    dt = np.result_type(y, p, float)",
                f"    hy = np.zeros({problem.n_state}, dtype=dt)",
                f"    hp = np.zeros({problem.n_params}, dtype=dt)",
                *[f"    hy[{i}] = {pr.doprint(d)}" for i, d in enumerate(hy) if d != 0],
                *[f"    hp[{j}] = {pr.doprint(d)}" for j, d in enumerate(hp) if d != 0],
                f"    return {pr.doprint(sympy.diff(h, T))}, hy, hp"]  # fmt: skip
    out += ["", "", "EVENT_ROOTS = {" + ", ".join(f"{k}: root_{k}" for k, _ in roots) + "}",
            "EVENT_ROOT_JACS = {" + ", ".join(f"{k}: root_{k}_jac" for k, _ in roots) + "}",
            "EVENT_DIRECTIONS = {" + ", ".join(f"{k}: {e.direction}" for k, e in roots) + "}"]
    return out


def jax_lines(problem: Problem) -> list[str]:
    """JAX's ``event_times`` and ``EVENTS`` (module docstring; nothing without events)."""
    if not problem.events:
        return []
    times = [e.at for e in problem.events]
    comps = ", ".join(_print(problem, t, _JAX) for t in times)
    out = ["", "", "def event_times(p):", '    """The events\' times, in file order."""',
           *_bind(problem, times, False), f"    return jnp.asarray([{comps}], dtype=p.dtype)"]  # fmt: skip
    for k, e in enumerate(problem.events):
        new = dict(e.assign)
        parts = [_print(problem, new[i], _JAX) if i in new else f"y[{i}]"
                 for i in range(problem.n_state)]  # fmt: skip
        out += ["", "", f"def event_{k}(y, p):", f'    """The state after event {k}."""',
                *_bind(problem, list(new.values()), True),
                f"    return jnp.stack([{', '.join(parts)}]).astype(y.dtype)"]  # fmt: skip
    ks = range(len(problem.events))
    return [*out, "", "", f"EVENTS = ({', '.join(f'event_{k}' for k in ks)},)"]


def torch_methods(problem: Problem) -> list[str]:
    """torch's ``RHS.event_times()`` and ``RHS.event_k(y)``, methods of the module that holds
    the parameters (module docstring; nothing without events), indented for the class."""
    if not problem.events:
        return []
    times = [e.at for e in problem.events]
    like = "y"

    def wrap(c: str) -> str:  # a number or a tensor, in the state's dtype and device
        return f"torch.as_tensor({c}, dtype={like}.dtype, device={like}.device)"

    out = ["", "    def event_times(self, y):",
           '        """The events\' times from these parameters, in file order, in the dtype and',
           '        on the device of the state y."""',
           *["    " + ln for ln in _bind(problem, times, False, module=True)],
           f"        return torch.stack([{', '.join(wrap(_print(problem, t, _TORCH)) for t in times)}])"]  # fmt: skip
    for k, e in enumerate(problem.events):
        new = dict(e.assign)
        parts = [wrap(_print(problem, new[i], _TORCH)) if i in new else f"y[{i}]"
                 for i in range(problem.n_state)]  # fmt: skip
        out += ["", f"    def event_{k}(self, y):", f'        """The state after event {k}."""',
                *["    " + ln for ln in _bind(problem, list(new.values()), True, module=True)],
                f"        return torch.stack([{', '.join(parts)}])"]  # fmt: skip
    return out


def _bind(problem: Problem, exprs: list[sympy.Expr], states: bool, module: bool = False) -> list[str]:
    """Locals for the states and parameters ``exprs`` read: each parameter from the vector
    ``p``, or (``module``: torch's form) from the module that holds it."""
    used = set().union(*(e.free_symbols for e in exprs)) if exprs else set()
    lines = []
    if states:
        lines += [f"s_{s.name} = y[{i}]" for i, s in enumerate(problem.state_symbols) if s in used]
    lines += [f"p_{s.name} = self.p_{s.name}" if module else f"p_{s.name} = p[{i}]"
              for i, s in enumerate(problem.param_symbols) if s in used]  # fmt: skip
    return ["    " + ln for ln in lines]


def _print(problem: Problem, e: sympy.Expr, target: native.Target = _NUMPY) -> str:
    return native.printer(target, native.names(problem)).doprint(e)


def _times_body(problem: Problem) -> list[str]:
    """NaN stands for a root's time, which the solve finds."""
    times = [e.at for e in problem.events if e.at is not None]
    comps = ", ".join("np.nan" if e.at is None else _print(problem, e.at) for e in problem.events)
    return [*_bind(problem, times, False),
            f"    return np.array([{comps}], dtype=np.result_type(p, float))"]  # fmt: skip


def _times_jac_body(problem: Problem) -> list[str]:
    times = [sympy.Integer(0) if e.at is None else e.at for e in problem.events]
    entries = [(k, j, sympy.diff(t, s)) for k, t in enumerate(times)
               for j, s in enumerate(problem.param_symbols)]  # fmt: skip
    entries = [(k, j, d) for k, j, d in entries if d != 0]
    body = [*_bind(problem, [d for *_, d in entries], False),
            f"    D = np.zeros(({len(times)}, {problem.n_params}), dtype=np.result_type(p, float))"]
    body += [f"    D[{k}, {j}] = {_print(problem, d)}" for k, j, d in entries]
    return [*body, "    return D"]


def _assign_body(problem: Problem, k: int) -> list[str]:
    assign = problem.events[k].assign
    body = _bind(problem, [e for _, e in assign], True)
    body.append("    out = np.array(y, dtype=np.result_type(y, p, float))")
    body += [f"    out[{i}] = {_print(problem, e)}" for i, e in assign]
    return [*body, "    return out"]


def _assign_jac_body(problem: Problem, k: int) -> list[str]:
    assign = problem.events[k].assign
    n, P = problem.n_state, problem.n_params
    ys, ps = problem.state_symbols, problem.param_symbols
    gy = [(i, m, sympy.diff(e, s)) for i, e in assign for m, s in enumerate(ys)]
    gp = [(i, j, sympy.diff(e, s)) for i, e in assign for j, s in enumerate(ps)]
    gy, gp = [x for x in gy if x[2] != 0], [x for x in gp if x[2] != 0]
    body = _bind(problem, [d for *_, d in gy + gp], True)
    body += ["    dt = np.result_type(y, p, float)", f"    Gy = np.eye({n}, dtype=dt)",
             f"    Gp = np.zeros(({n}, {P}), dtype=dt)"]  # fmt: skip
    body += [f"    Gy[{i}, {i}] = 0.0" for i, _ in assign]
    body += [f"    Gy[{i}, {m}] = {_print(problem, d)}" for i, m, d in gy]
    body += [f"    Gp[{i}, {j}] = {_print(problem, d)}" for i, j, d in gp]
    return [*body, "    return Gy, Gp"]
