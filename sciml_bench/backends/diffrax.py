"""Diffrax (JAX), in float64.

Solve and loss+gradient are each one ``jax.jit``-compiled function, as
Diffrax's documentation recommends. Solves run with ``throw=False`` and
``sol.result`` is checked, so a failed solve is a status and its gradient is
never scored. Stiff default: Kvaerno4 with a PI controller (pcoeff = icoeff =
0.3): on ROBER, HIRES, OREGO, POLLU and the Robertson UDE at the problems' own
tolerances it solved 1.4-3.5x and differentiated 1.2-2.5x faster than Kvaerno5,
every gradient within the pass tier (``benchmarks/best_config.py`` and
``benchmarks/README.md`` record what was tried).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from sciml_bench.backends.base import (
    Availability,
    Backend,
    Case,
    CaseOptions,
    EnsembleCase,
    EnsembleNotOffered,
    EnsembleSolution,
    Solution,
    SolverInfo,
    failed_members,
)
from sciml_bench.measure.status import SolverFailure, Status, classify_message
from sciml_bench.problem.compiled import CompiledProblem
from sciml_bench.problem.ensemble import Batch

_SOLVERS = {
    "Kvaerno5": SolverInfo("Kvaerno5", True, "ESDIRK, order 5"),
    "Kvaerno4": SolverInfo("Kvaerno4", True, "ESDIRK, order 4"),
    "Kvaerno3": SolverInfo("Kvaerno3", True, "ESDIRK, order 3"),
    "Tsit5": SolverInfo("Tsit5", False, "Tsitouras 5(4)"),
    "Dopri5": SolverInfo("Dopri5", False, "Dormand-Prince 5(4)"),
    "Dopri8": SolverInfo("Dopri8", False, "Dormand-Prince 8(7)"),
}
_ADJOINTS = {
    "RecursiveCheckpointAdjoint": "discretise-then-optimise backprop with checkpointing",
    "BacksolveAdjoint": "optimise-then-discretise continuous adjoint (unstable on stiff problems)",
    "DirectAdjoint": "plain backprop through the solver loop",
}
#: PI coefficients: fewer rejected steps than the default I-controller on stiff problems
STIFF_CONTROLLER = {"pcoeff": 0.3, "icoeff": 0.3}
#: how the generated code runs, recorded in each row (Diffrax's own benchmarks/ scripts
#: jit a function of the parameters around diffeqsolve, the RHS returning jnp.stack)
IDIOM = (
    "jax.jit(diffeqsolve) and jax.jit(jax.grad(loss, has_aux=True)) over the parameter "
    "array (args); RHS rhs(t, y, args) generated as jnp code; timed call = the compiled call "
    "+ jax.block_until_ready, its outputs in one buffer (solve) or two (gradient and loss); "
    "throw=False, the result code and step counts checked after the clock"
)
_RESULT_STATUS = {
    "max_steps_reached": Status.MAX_STEPS,
    "dt_min_reached": Status.DT_UNDERFLOW,
}


class DiffraxCase(Case):
    def __init__(self, problem: CompiledProblem, options: CaseOptions):
        import diffrax
        import jax
        import jax.numpy as jnp

        from sciml_bench.problem.generated import load_python

        jax.config.update("jax_enable_x64", True)
        rhs = load_python(problem.source["jax"])["rhs"]
        solver = getattr(diffrax, options.solver)()
        ctrl = dict(STIFF_CONTROLLER) if _SOLVERS[options.solver].stiff else {}
        ctrl.update({k: v for k, v in options.extra.items() if k in ("pcoeff", "icoeff", "dcoeff")})
        controller = diffrax.PIDController(rtol=options.rtol, atol=options.atol, **ctrl)
        adjoint = getattr(diffrax, options.gradient_method)()
        term = diffrax.ODETerm(lambda t, y, args: rhs(t, y, args))
        t0, t1 = problem.t_span
        y0 = jnp.asarray(problem.y0)
        saveat = diffrax.SaveAt(ts=jnp.asarray(problem.t_save))
        W, O, C = (jnp.asarray(a) for a in (problem.loss_W, problem.loss_O, problem.loss_C))

        def _solve(theta: Any) -> Any:
            sol = diffrax.diffeqsolve(
                term,
                solver,
                t0,
                t1,
                None,
                y0,
                args=theta,
                saveat=saveat,
                stepsize_controller=controller,
                max_steps=options.max_steps,
                adjoint=adjoint,
                throw=False,
            )
            return sol.ys, _status(sol)

        def _status(sol: Any) -> Any:
            # [result code, accepted, rejected steps] in one small array: each extra output
            # of a compiled call costs microseconds of dispatch (here +25% on the spiral)
            return jnp.stack(
                [
                    sol.result._value,
                    sol.stats["num_accepted_steps"],
                    sol.stats["num_rejected_steps"],
                ]
            ).astype(jnp.float64)

        def _solve_flat(theta: Any) -> Any:
            ys, status = _solve(theta)
            return jnp.concatenate([ys.ravel(), status])  # one output buffer, as ys alone

        def _loss(theta: Any) -> Any:
            ys, status = _solve(theta)
            d = ys - O
            value = jnp.sum(W * d * d) + jnp.sum(C * ys)
            return value, jnp.concatenate([value[None], status])

        self._solve = jax.jit(_solve_flat)
        # jax.grad with the loss as auxiliary output: two buffers, as value_and_grad gives
        self._value_and_grad = jax.jit(jax.grad(_loss, has_aux=True))
        self._shape = (len(problem.t_save), problem.n_state)
        #: Diffrax's results by integer code, so a check is plain Python (a comparison of
        #: RESULTS items is a JAX operation and a sync)
        self._results = {
            int(item._value): (name, str(diffrax.RESULTS[item]))
            for name, item in diffrax.RESULTS._name_to_item.items()
        }
        self.options = {"controller": {"rtol": options.rtol, "atol": options.atol, **ctrl}}
        #: what runs, for the result record
        self.info = {
            **self.options,
            "idiom": IDIOM,
        }
        if problem.size is not None and _SOLVERS[options.solver].stiff:
            self.info["linear_solver"] = (
                "lineax AutoLinearSolver (dense LU) on the dense jax.jacfwd Jacobian, in "
                f"{options.solver}'s VeryChord Newton iterations"
            )
        elif problem.size is not None:
            self.info["linear_solver"] = f"none ({options.solver} is explicit)"
        self.t_save = problem.t_save
        # JAX is pinned by the worker's JAX_PLATFORMS; what it did is read back from arrays
        self._last: Any = y0
        self._jnp = jnp

    def _check(self, code: float, ys: np.ndarray | None) -> None:
        name, message = self._results[int(code)]
        if name == "successful":
            return
        status = _RESULT_STATUS.get(name, Status.SOLVER_FAILURE)
        t_reached = None
        if ys is not None:
            finite = np.all(np.isfinite(ys), axis=1)
            t_reached = float(self.t_save[finite][-1]) if finite.any() else None
        raise SolverFailure(status, f"diffrax: {message}", t_reached)

    def _runtime(self, fn: Any, theta: Any) -> Any:
        out = run_compiled(fn, theta)
        self._last = out  # what the device read-back inspects
        return out

    def placement(self) -> tuple[str, str | None]:
        return jax_placement(jax_device(self._last))

    def alloc_peak_mb(self) -> float | None:
        return jax_alloc_peak(jax_device(self._last))

    def prepare(self, theta: np.ndarray) -> Any:
        return self._jnp.asarray(theta)  # a device array, made once, as a JAX user holds it

    def timed_solve(self, params: Any) -> Any:
        return self._runtime(self._solve, params)

    def check_solve(self, raw: Any) -> Solution:
        flat = np.asarray(raw)
        n = self._shape[0] * self._shape[1]
        ys = flat[:n].reshape(self._shape)
        code, accepted, rejected = flat[n:]
        self._check(code, ys)
        if not np.all(np.isfinite(ys)):
            raise SolverFailure(Status.NONFINITE, "diffrax: non-finite values in the solution")
        return Solution(ys, {"steps": int(accepted), "rejected_steps": int(rejected)})

    def timed_grad(self, params: Any) -> Any:
        return self._runtime(self._value_and_grad, params)

    def check_grad(self, raw: Any) -> tuple[float, np.ndarray]:
        grad, aux = raw
        value, code, _, _ = np.asarray(aux)
        self._check(code, None)
        return float(value), np.asarray(grad)  # the worker rejects a non-finite one


def jax_device(tree: Any) -> Any:
    """The device of the first array in ``tree`` (a result, or arrays made at build)."""
    import jax

    return next(iter(jax.tree_util.tree_leaves(tree)[0].devices()))


def jax_placement(dev: Any) -> tuple[str, str | None]:
    """``(cpu|cuda, name)`` of a JAX device: its platform and the GPU's ``device_kind``
    (e.g. ``NVIDIA H100 80GB HBM3``), or the CPU model."""
    from sciml_bench.measure.device import normalize
    from sciml_bench.measure.environment import cpu_model

    where = normalize(dev.platform)
    return (where, dev.device_kind) if where != "cpu" else ("cpu", cpu_model())


def jax_alloc_peak(dev: Any) -> float | None:
    """XLA's allocator peak (MiB) on a JAX device; None on the CPU."""
    from sciml_bench.measure.memory import jax_alloc_peak_mb

    return jax_alloc_peak_mb(dev) if dev.platform != "cpu" else None


class DiffraxEnsembleCase(EnsembleCase):
    """An ensemble in Diffrax, float64.

    ``independent``: ``jax.vmap`` over ``diffeqsolve`` (each member its own step sizes
    and result; the batched while-loop runs until the slowest member ends).
    ``coupled``: one ``diffeqsolve`` on the stacked ``(n, n_state)`` state, the RHS
    vmapped over members, so one RMS error norm and one step size govern the batch.

    On ``cuda`` nothing here names the device: the worker is pinned
    (``JAX_PLATFORMS=cuda,cpu``, :func:`~sciml_bench.measure.device.device_env`), so the
    arrays made at build and every compiled call are on the GPU, and the read-back
    (:meth:`placement`) says where they really were.
    """

    def __init__(
        self, problem: CompiledProblem, options: CaseOptions, batch: Batch, semantics: str
    ):
        import diffrax
        import jax
        import jax.numpy as jnp

        from sciml_bench.problem.generated import load_python

        jax.config.update("jax_enable_x64", True)
        self._dfx = diffrax
        self.semantics = semantics
        rhs = load_python(problem.source["jax"])["rhs"]
        solver = getattr(diffrax, options.solver)()
        ctrl = dict(STIFF_CONTROLLER) if _SOLVERS[options.solver].stiff else {}
        controller = diffrax.PIDController(rtol=options.rtol, atol=options.atol, **ctrl)
        adjoint = getattr(diffrax, options.gradient_method)()
        t0, t1 = problem.t_span
        saveat = diffrax.SaveAt(ts=jnp.asarray(problem.t_save))
        Y0 = jnp.asarray(batch.y0)
        S, A = jnp.asarray(batch.scale), jnp.asarray(batch.shift)
        per_member = batch.varies_parameters  # else every member shares θ (no batched weights)
        p_axis = 0 if per_member else None
        W, C = jnp.asarray(problem.loss_W), jnp.asarray(problem.loss_C)
        O = jnp.asarray(batch.observations if batch.observations is not None else problem.loss_O)
        n = batch.n

        def params(theta: Any) -> Any:
            return theta * S + A if per_member else theta

        def one(y0: Any, th: Any) -> Any:
            sol = diffrax.diffeqsolve(
                diffrax.ODETerm(lambda t, y, args: rhs(t, y, args)), solver, t0, t1, None,
                y0, args=th, saveat=saveat, stepsize_controller=controller,
                max_steps=options.max_steps, adjoint=adjoint, throw=False,
            )  # fmt: skip
            return sol.ys, sol.result._value, sol.stats["num_accepted_steps"]

        if semantics == "independent":

            def _solve(theta: Any) -> Any:
                return jax.vmap(one, in_axes=(0, p_axis))(Y0, params(theta))

        else:
            batched = jax.vmap(rhs, in_axes=(None, 0, p_axis))

            def _solve(theta: Any) -> Any:
                sol = diffrax.diffeqsolve(
                    diffrax.ODETerm(lambda t, y, args: batched(t, y, args)), solver, t0, t1,
                    None, Y0, args=params(theta), saveat=saveat, stepsize_controller=controller,
                    max_steps=options.max_steps, adjoint=adjoint, throw=False,
                )  # fmt: skip
                code = jnp.broadcast_to(sol.result._value, (n,))
                steps = jnp.broadcast_to(sol.stats["num_accepted_steps"], (n,))
                return jnp.swapaxes(sol.ys, 0, 1), code, steps

        def _loss(theta: Any) -> Any:
            ys, code, steps = _solve(theta)
            d = ys - O
            return (jnp.sum(W * d * d) + jnp.sum(C * ys)) / n, code

        self._solve = jax.jit(_solve)
        self._value_and_grad = jax.jit(jax.value_and_grad(_loss, has_aux=True))
        self.info = {"semantics": semantics, "members": n, "shared_theta": not per_member}
        self._jnp = jnp
        #: the device of the last checked result (at first, of the batch's y0): read in
        #: the checks, outside the clock, and without holding a result alive
        self._device: Any = jax_device(Y0)

    def _check(self, code: Any) -> None:
        code = np.asarray(code)
        ok = code == int(self._dfx.RESULTS.successful._value)
        if ok.all():
            return
        first = int(code[~ok][0])
        status = Status.SOLVER_FAILURE
        for attr, st in _RESULT_STATUS.items():
            r = getattr(self._dfx.RESULTS, attr, None)
            if r is not None and first == int(r._value):
                status = st
        raise SolverFailure(status, f"diffrax {self.semantics}: {status.value} in "
                                    f"{failed_members(ok)}")  # fmt: skip

    def prepare(self, theta: np.ndarray) -> Any:
        return self._jnp.asarray(theta)  # a device array, made once, as a JAX user holds it

    def solve_raw(self, params: Any) -> Any:
        return run_compiled(self._solve, params)

    def check_solve(self, raw: Any) -> EnsembleSolution:
        ys, code, steps = raw
        self._device = jax_device(ys)
        self._check(code)
        ys = np.asarray(ys)
        if not np.all(np.isfinite(ys)):
            raise SolverFailure(Status.NONFINITE, "diffrax: non-finite values in the solution")
        return EnsembleSolution(ys, steps=np.asarray(steps))

    def grad_raw(self, params: Any) -> Any:
        return run_compiled(self._value_and_grad, params)

    def check_grad(self, raw: Any) -> tuple[float, np.ndarray]:
        (value, code), grad = raw
        self._device = jax_device(grad)
        self._check(code)
        return float(value), np.asarray(grad)

    def placement(self) -> tuple[str, str | None]:
        return jax_placement(self._device)

    def alloc_peak_mb(self) -> float | None:
        return jax_alloc_peak(self._device)


def run_compiled(fn: Any, theta: Any) -> Any:
    """Run a compiled call; a runtime error inside it (e.g. Equinox's check that a
    linear solve stayed finite) is a solver failure with the library's message."""
    import jax

    try:
        # the call ends when every output is ready on the device, before the clock is read
        return jax.block_until_ready(fn(theta))
    except Exception as e:
        if "RuntimeError" not in type(e).__name__:
            raise
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        # JAX appends notes about its own frames; keep the library's message
        useful = [
            ln
            for ln in lines
            if "JAX has removed its internal frames" not in ln and not ln.startswith("----")
        ]
        message = " ".join(useful[:3]) or type(e).__name__
        raise SolverFailure(classify_message(message), f"diffrax: {message}") from None


class DiffraxBackend(Backend):
    name = "diffrax"
    packages = ("diffrax", "jax", "jaxlib", "equinox")
    extra = "jax"
    modules = ("jax", "diffrax")
    gradient_methods: Mapping[str, str] = _ADJOINTS
    devices = ("cpu", "cuda")
    #: array problems run on the generated jnp code; Kvaerno's Newton iterations solve with
    #: lineax's AutoLinearSolver on the dense jax.jacfwd Jacobian: dense is its only kind
    array_problems = True

    def cuda_missing(self) -> tuple[str, str] | None:
        import jax

        fix = "pip install -U 'jax[cuda12]' (a CUDA build of jaxlib), or use --device cpu"
        try:
            dev = jax.devices()[0]
        except Exception as e:  # no CUDA plugin: JAX raises (an AssertionError in 0.10)
            why = " ".join(str(e).split())[:160] or type(e).__name__
            return f"jax {jax.__version__} has no CUDA backend ({why})", fix
        if dev.platform != "gpu":
            return _no_gpu(jax.__version__, dev), fix
        return None

    def availability(self) -> Availability:
        return Availability.of_modules("jax", "diffrax", extra="jax")

    def load(self) -> dict[str, float]:
        import jax

        jax.config.update("jax_enable_x64", True)
        import diffrax  # noqa: F401

        return {}

    def solvers(self) -> Mapping[str, SolverInfo]:
        return _SOLVERS

    def default_solver(self, stiff: bool) -> str:
        return "Kvaerno4" if stiff else "Tsit5"

    def default_gradient(self, problem: CompiledProblem) -> str:
        return "RecursiveCheckpointAdjoint"

    def build(self, problem: CompiledProblem, options: CaseOptions) -> Case:
        return DiffraxCase(problem, options)

    ensemble_semantics = ("independent", "coupled")

    def build_ensemble(
        self, problem: CompiledProblem, options: CaseOptions, batch: Batch, semantics: str
    ) -> EnsembleCase:
        if semantics not in self.ensemble_semantics:
            raise EnsembleNotOffered(f"diffrax: no {semantics} ensemble")
        return DiffraxEnsembleCase(problem, options, batch, semantics)


def _no_gpu(version: str, first: Any) -> str:
    """What is missing when a JAX pinned to ``cuda,cpu`` starts on the CPU: JAX skips a
    platform it has no plugin for, so name whether a CUDA plugin is installed at all."""
    from importlib import metadata

    plugins = sorted({d.metadata["Name"] for d in metadata.distributions()
                      if (d.metadata["Name"] or "").lower().startswith("jax-cuda")})  # fmt: skip
    if not plugins:
        return (f"jax {version} has no CUDA backend (no jax-cuda plugin is installed: a "
                f"CPU-only jaxlib; its first device is {first})")  # fmt: skip
    return f"jax {version} found no GPU ({', '.join(plugins)} installed; first device {first})"
