"""The whole program one case runs, as a script a reader can paste and run.

``sciml-bench codegen NAME --target T`` prints it, to audit fairness past the vector
field: the solve call with its solver, controller, tolerances, save points, step bound,
adjoint (or sensitivity method) and dtype, then the loss and the gradient call. It is
assembled from the very source the worker runs, never from a template of it:

1. the generated vector field (``CompiledProblem.source[target]``, what the case loads);
2. ``inspect.getsource`` of the backend module's functions the case itself calls to build
   and run its solve, loss and gradient (e.g. :func:`~sciml_bench.backends.diffrax.compiled_calls`);
3. a header binding the concrete values those functions take for this case: the settings
   from the backend's own ``case_settings(problem, options)`` for the options the runner's plan
   picks, and the problem's ``y0``, time span, save points, parameters and loss arrays
   (Python floats printed by ``repr``, which round-trips every bit);
4. a ``__main__`` that calls them once and prints, with :func:`print_result`, the solution
   at the save points, the loss and the gradient.

``tests/test_program.py`` runs the printed program in a fresh process and compares its
printed solution with the backend's own solve of the same case, so the two cannot drift.
A backend without a recipe here gets its vector field and a comment saying the whole
program is not available for it yet.
"""

from __future__ import annotations

import importlib
import inspect
import pprint
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sciml_bench.backends.base import Backend, CaseOptions
from sciml_bench.problem.compiled import CompiledProblem

#: the backend that runs each codegen target's code, by default
TARGET_BACKEND = {"jax": "diffrax", "torch": "torchdiffeq", "numpy": "scipy",
                  "casadi": "cvodes", "diffsl": "diffsol", "julia": "julia",
                  "sbml": "amici"}  # fmt: skip
#: the generated source each backend runs
BACKEND_TARGET = {"diffrax": "jax", "torchdiffeq": "torch", "torchode": "torch",
                  "scipy": "numpy", "cvodes": "casadi", "diffsol": "diffsl",
                  "amici": "sbml", "roadrunner": "sbml", "julia": "julia"}  # fmt: skip


def sources_of(backend: Backend) -> tuple[str, ...] | None:
    """The generated sources ``backend``'s cases read: what its class declares
    (:attr:`~sciml_bench.backends.base.Backend.sources`), else its one target in
    :data:`BACKEND_TARGET`; None for a backend that says neither (it gets every source)."""
    if backend.sources:
        return tuple(backend.sources)
    target = BACKEND_TARGET.get(backend.name)
    return None if target is None else (target,)


def refuse_events(backend: Backend, problem: CompiledProblem) -> None:
    """:class:`~sciml_bench.backends.base.ProblemNotExpressible` (an ``unavailable`` row)
    where ``problem`` has events of a kind ``backend`` does not run
    (:attr:`~sciml_bench.backends.base.Backend.events`): said before the library is loaded,
    for every backend alike (torchode reads the same torch source as torchdiffeq, events
    included, and would solve straight through them)."""
    from sciml_bench.backends.base import ProblemNotExpressible

    missing = [k for k in problem.event_kinds if k not in backend.events]
    if missing:
        what = {"time": "at set times", "state": "where a root function crosses zero"}
        raise ProblemNotExpressible(
            f"{backend.name}: {problem.name} has events ([[events]]) "
            f"{' and '.join(what[k] for k in missing)}, which {backend.name} does not run "
            "yet (issue 51)")  # fmt: skip


#: the comment a program-less target's output starts with
NOT_YET = "# sciml-bench: the whole program is not available for"


def print_result(t_save: Any, ys: Any, loss: float | None, grad: Any) -> None:
    """Print the solution at the save points (``t`` then the states, one line per point),
    the loss and the gradient, 17 significant digits each (:func:`parse_output` reads it)."""
    print("solution (t, then the state) at each save point:")
    for t, y in zip(t_save, ys, strict=True):
        print(" ".join(f"{float(v):.17g}" for v in (t, *y)))
    if loss is None:
        print("loss: none (this backend solves only; it computes no gradient)")
        return
    print(f"loss {float(loss):.17g}")
    print("gradient " + " ".join(f"{float(g):.17g}" for g in grad))


def parse_output(text: str) -> dict[str, Any]:
    """``t``, ``y``, ``loss`` and ``gradient`` from a program's :func:`print_result` output."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("solution (t,"))
    rows, out = [], {"loss": None, "gradient": None}
    for ln in lines[start + 1 :]:
        head = ln.split(" ", 1)[0]
        if head == "loss":
            out["loss"] = float(ln.split()[1])
        elif head == "gradient":
            out["gradient"] = np.array([float(v) for v in ln.split()[1:]])
        elif head and head[0] in "-+.0123456789":
            rows.append([float(v) for v in ln.split()])
    arr = np.array(rows)
    return {**out, "t": arr[:, 0], "y": arr[:, 1:]}


@dataclass(frozen=True)
class Recipe:
    """How one backend's case becomes a program: its import lines, the functions of the
    backend's module the case calls (``name``, or ``module.name`` in another backend
    module), whose source is printed, and the lines of its ``__main__`` (which call those
    functions on the header's names). The settings are the module's own
    ``case_settings(problem, options)``."""

    module: str
    imports: str
    functions: tuple[str, ...]
    main: tuple[str, ...]
    #: the generated model as program text: Python source as it is; a model in another
    #: language (DiffSL) bound to a name as a string
    embed: Callable[[str], str] = lambda source: source

    def sources(self) -> list[Callable[..., Any]]:
        """The functions whose source the program prints, in order."""
        found = []
        for name in self.functions:
            module, _, attr = name.rpartition(".")
            found.append(getattr(_backend_module(module or self.module), attr))
        return found

    def settings(self, problem: CompiledProblem, options: CaseOptions) -> dict[str, Any]:
        """The case's settings, from the backend's own ``case_settings``."""
        settings: dict[str, Any] = _backend_module(self.module).case_settings(problem, options)
        return settings


def _backend_module(name: str) -> Any:
    return importlib.import_module(f"sciml_bench.backends.{name}")


DIFFRAX = Recipe(
    module="diffrax",
    imports="""\
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

# float64 before any array is made, as the worker does
jax.config.update("jax_enable_x64", True)""",
    functions=("diffeqsolve_arguments", "solve_status", "compiled_calls"),
    main=(
        "calls = compiled_calls(rhs, Y0, T_SPAN, T_SAVE, (LOSS_W, LOSS_O, LOSS_C), SETTINGS)",
        "theta = jnp.asarray(THETA)  # the parameters as the case holds them (prepare)",
        "out = np.asarray(calls['solve_full'](theta))",
        "n = len(T_SAVE) * len(Y0)",
        "code, accepted, rejected = (int(v) for v in out[n:])",
        "print(f'diffrax result code {code} (0: successful), {accepted} accepted and "
        "{rejected} rejected steps')",
        "grad, aux = calls['value_and_grad'](theta)",
        "print_result(T_SAVE, out[:n].reshape(len(T_SAVE), len(Y0)), float(aux[0]), "
        "np.asarray(grad))",
    ),
)


SCIPY = Recipe(
    module="scipy",
    imports="""\
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import scipy.integrate""",
    functions=("jacobian_choice", "ScipyRun", "step_bound.steps_over", "integrate"),
    main=(
        "theta = np.asarray(THETA)",
        "# the Jacobian of the row's kind (an array problem's dense, sparse or banded one)",
        "jac_fn, jac_options, _ = jacobian_choice(globals(), SETTINGS['solver'], "
        "SETTINGS.get('jacobian', 'dense'), SETTINGS['exact_jacobian'])",
        "# the parameters bound once per solve, in C (functools.partial), as the case does",
        "exact = None if jac_fn is None else partial(jac_fn, p=theta)",
        "run = integrate(getattr(scipy.integrate, SETTINGS['solver']), partial(rhs, p=theta), "
        "exact, T_SPAN,",
        "                np.asarray(Y0), np.asarray(T_SAVE), SETTINGS['rtol'], "
        "SETTINGS['atol'], SETTINGS['max_steps'], **jac_options)",
        "print(f'scipy: {run.status} {run.message} at t={run.t}'.rstrip() + f'; {run.steps} "
        "steps, {run.nfev} RHS and {run.njev} Jacobian evaluations, {run.nlu} LU "
        "decompositions')",
        "print_result(T_SAVE, np.hstack(run.blocks).T, None, None)",
    ),
)


TORCHDIFFEQ = Recipe(
    module="torchdiffeq",
    imports="""\
from typing import Any

import numpy as np
import torch
import torchdiffeq  # noqa: F401  (case_parts imports it too)""",
    functions=(
        "step_bound.steps_over",
        "StepBound",
        "_Steps",
        "attach_steps",
        "case_parts",
        "_odeint_keywords",
        "loss_and_grads",
    ),
    main=(
        "parts = case_parts(RHS, Y0, THETA, T_SPAN, T_SAVE, (LOSS_W, LOSS_O, LOSS_C), SETTINGS)",
        "odeint, steps, first = parts['odeint'], parts['steps'], int(parts['skip_first'])",
        "with torch.no_grad():  # the solve",
        "    ys = odeint(parts['module'], parts['y0'], parts['t'], **parts['kw'])[first:]",
        "print(f'torchdiffeq: {steps.accepted} accepted and {steps.rejected} rejected steps')",
        "steps.reset()  # the gradient: odeint again, then the loss and autograd.grad",
        "ys_g = odeint(parts['module'], parts['y0'], parts['t'], **parts['kw'])[first:]",
        "loss, grads = loss_and_grads(torch, ys_g, parts, steps.reset)",
        "print_result(T_SAVE, ys.numpy(), loss.item(), "
        "torch.nn.utils.parameters_to_vector(grads).numpy())",
    ),
)


CVODES = Recipe(
    module="cvodes",
    imports="""\
from typing import Any

import casadi as ca
import numpy as np""",
    functions=(
        "integrator",
        "loss_function",
        "compiled.model_parameters",
        "compiled.natural_gradient",
    ),
    main=(
        "F = integrator(rhs, SETTINGS['symbolics'], len(Y0), len(THETA), T_SPAN[0], T_SAVE,",
        "               SETTINGS['integrator'])",
        "G = loss_function(F, Y0, len(THETA), (np.asarray(LOSS_W), np.asarray(LOSS_O), "
        "np.asarray(LOSS_C)),",
        "                  SETTINGS['gradient'])",
        "# the model's parameters as the case holds them (prepare): log θ where in log space",
        "u = model_parameters(THETA, SETTINGS['log_scaled'])",
        "p = ca.DM(u)",
        "out = F(x0=ca.DM(Y0), p=p)  # the solve",
        "st = F.stats()",
        "print(f\"cvodes: {st['nsteps']} steps, {st['netfails'] + st['nncfails']} rejected, "
        "{st['nfevals']} RHS evaluations\")",
        "value, grad_u = G(p)  # the loss and its gradient in the model's parameters",
        "grad = natural_gradient(np.array(grad_u), u, SETTINGS['log_scaled'])  # dL/dθ",
        "print_result(T_SAVE, np.array(out['xf']).T, float(value), grad)",
    ),
)


def _verbatim(name: str) -> Callable[[str], str]:
    """How a recipe embeds its model text: bound to ``name``, verbatim (a raw
    triple-quoted string where the text allows one)."""

    def embed(source: str) -> str:
        if '"""' in source or source.endswith("\\"):
            return f"{name} = {source!r}\n"
        return f'{name} = r"""{source}"""\n'

    return embed


DIFFSOL = Recipe(
    module="diffsol",
    imports="""\
from typing import Any

import numpy as np
import pydiffsol as ds  # noqa: F401""",
    functions=(
        "make_ode",
        "suite_order",
        "loss_and_dL_dY",
        "gradient",
        "compiled.model_parameters",
        "compiled.natural_gradient",
    ),
    main=(
        "ode = make_ode(DIFFSL, SETTINGS)  # JIT-compiled here",
        "order = suite_order(SETTINGS)  # an array model's state by state -> the suite's layout",
        "# the model's parameters as the case holds them (prepare): log θ where in log space",
        "u = np.ascontiguousarray(model_parameters(THETA, SETTINGS['log_scaled']))",
        "t_save = np.asarray(T_SAVE, dtype=np.float64)",
        "sol = ode.solve_dense(u, t_save)  # the solve",
        "steps = len(ode.solve(u, float(t_save[-1])).ts) - 1",
        "print(f'diffsol: {steps} accepted steps')",
        "loss_arrays = (np.asarray(LOSS_W), np.asarray(LOSS_O), np.asarray(LOSS_C))",
        "value, grad_u = gradient(ode, u, t_save, SETTINGS['gradient'] == 'adjoint', "
        "loss_arrays, order)",
        "grad = natural_gradient(grad_u, u, SETTINGS['log_scaled'])  # dL/dθ",
        "ys = np.asarray(sol.ys) if order is None else np.asarray(sol.ys)[order]",
        "print_result(T_SAVE, ys.T, value, grad)",
    ),
    embed=_verbatim("DIFFSL"),
)


AMICI = Recipe(
    module="amici",
    imports="""\
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import Any

import amici
import amici.sim.sundials as S
import numpy as np""",
    functions=(
        "swig_first_on_path",
        "import_model",
        "load_model",
        "parameter_indices",
        "configure_model",
        "make_solver",
        "noise",
        "exp_data",
        "loss_constant",
        "loss_and_gradient",
        "compiled.model_parameters",
        "compiled.natural_gradient",
    ),
    main=(
        "outdir = tempfile.mkdtemp(prefix='amici-model-')",
        "name = 'sciml_bench_program_model'",
        "phases = import_model(SBML, name, outdir, SETTINGS)  # code generation and "
        "the C++ compile",
        "print('amici build: ' + ', '.join(f'{k} {v:.2f} s' for k, v in phases.items()))",
        "model = load_model(name, outdir)",
        "configure_model(model, SETTINGS, T_SAVE)",
        "# the model's parameters as the case holds them (prepare): log θ where on the ln scale",
        "u = model_parameters(THETA, SETTINGS['log_scaled'])",
        "model.set_free_parameters([float(v) for v in u])",
        "solver = make_solver(model, SETTINGS, gradient=False)",
        "rdata = S.run_simulation(model, solver)  # the solve",
        "print(f'amici status {rdata.status}: {int(rdata.numsteps[-1])} steps, '",
        "      f'{int(rdata.num_rhs_evals[-1])} RHS evaluations')",
        "edata = exp_data(model, SETTINGS, np.asarray(LOSS_W), np.asarray(LOSS_O))",
        "rg = S.run_simulation(model, make_solver(model, SETTINGS, gradient=True), edata)",
        "value, grad_u = loss_and_gradient(rg, loss_constant(np.asarray(LOSS_W)))  # -llh - K, "
        "-sllh",
        "grad = natural_gradient(grad_u, u, SETTINGS['log_scaled'])  # dL/dθ",
        "print_result(T_SAVE, np.asarray(rdata.x), value, grad)",
        "shutil.rmtree(outdir, ignore_errors=True)  # this compiled model",
    ),
    embed=_verbatim("SBML"),
)

#: the backends whose whole program is printed
RECIPES: dict[str, Recipe] = {"diffrax": DIFFRAX, "scipy": SCIPY, "torchdiffeq": TORCHDIFFEQ,
                              "cvodes": CVODES, "diffsol": DIFFSOL, "amici": AMICI}  # fmt: skip


def _bind(name: str, value: Any) -> str:
    """``NAME = value`` as Python source, wrapped at 100 columns (floats by ``repr``)."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    text = pprint.pformat(value, width=100 - len(name) - 3, compact=True, sort_dicts=False)
    pad = " " * (len(name) + 3)
    return f"{name} = " + text.replace("\n", "\n" + pad)


def header(problem: CompiledProblem, settings: dict[str, Any]) -> list[str]:
    """The concrete values the case's functions take: its settings and the problem's."""
    return [
        "# the case's settings, from its backend's case_settings(options)",
        _bind("SETTINGS", settings),
        "# the problem, as the worker receives it (CompiledProblem)",
        _bind("Y0", problem.y0),
        _bind("T_SPAN", tuple(float(t) for t in problem.t_span)),
        _bind("T_SAVE", problem.t_save),
        "# the parameters every backend starts from (theta0), in declaration order: "
        + ", ".join(problem.param_names[:8])
        + (" ..." if problem.n_params > 8 else ""),
        _bind("THETA", problem.theta0),
        "# the loss L(Y) = sum(W * (Y - O)**2) + sum(C * Y) over the states Y at T_SAVE",
        _bind("LOSS_W", problem.loss_W),
        _bind("LOSS_O", problem.loss_O),
        _bind("LOSS_C", problem.loss_C),
    ]


def program(problem: CompiledProblem, backend: str, options: CaseOptions, command: str) -> str:
    """The whole program of ``backend``'s case ``options`` on ``problem`` (see the module's
    docstring); for a backend without a :data:`RECIPES` entry, its vector field after a
    :data:`NOT_YET` comment. ``command`` is the codegen command line, quoted in the text."""
    from sciml_bench.problem.generated import not_expressible

    target = BACKEND_TARGET[backend]
    rhs = problem.source[target]
    why = not_expressible(rhs)
    if why is not None:  # the row is unavailable: there is no program to print
        return (f"# sciml-bench: {backend} runs no program for {problem.name}: it is {why} "
                f"({command})\n{rhs}")  # fmt: skip
    recipe = RECIPES.get(backend)
    if recipe is None:
        return (f"{NOT_YET} {backend} yet: this is its vector field alone, as the worker "
                f"loads it ({command})\n{rhs}")  # fmt: skip
    if problem.events:  # the recipes run one smooth solve
        return (f"{NOT_YET} a problem with events yet ({problem.name}): this is {backend}'s "
                f"vector field and events alone, as the worker loads them ({command})\n{rhs}")
    if problem.y0_depends:  # the recipes bind one fixed Y0
        return (f"{NOT_YET} a problem whose initial state depends on its parameters yet "
                f"({problem.name}): this is {backend}'s vector field and start (y0(p)) alone, "
                f"as the worker loads them ({command})\n{rhs}")  # fmt: skip
    doc = [
        f'"""{problem.name} as sciml-bench\'s {backend} worker runs it: {options.solver}, '
        f"gradient {options.gradient_method},",
        f"rtol={options.rtol:g}, atol={options.atol:g}, max_steps={options.max_steps}, "
        f"{options.dtype}, on {options.device}.",
        "",
        "Printed by",
        f"    {command}",
        f"from the source the worker calls (sciml_bench/backends/{backend}.py), so it cannot",
        "drift from it. Run it with python: it prints the solution at the save points, the",
        "loss and the gradient.",
        '"""',
    ]
    parts = [
        "\n".join(doc),
        recipe.imports,
        f"\n# -- the vector field --\n{recipe.embed(rhs)}",
    ]
    for fn in [*recipe.sources(), print_result]:
        where = fn.__module__.replace(".", "/") + ".py"
        parts.append(f"\n# -- from {where} --\n{inspect.getsource(fn)}")
    parts.append("\n" + "\n".join(header(problem, recipe.settings(problem, options))) + "\n")
    parts.append('\nif __name__ == "__main__":\n' + "".join(f"    {ln}\n" for ln in recipe.main))
    return "\n".join(parts)
