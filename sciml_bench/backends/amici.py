"""AMICI (SUNDIALS CVODES, C++ generated and compiled per model), in float64.

Run the way a systems biologist runs it: the problem as SBML (``sciml-bench codegen
--target sbml``: rate rules, :mod:`sciml_bench.problem.codegen.sbml`) goes through
``amici.SbmlImporter(sbml).sbml2amici(name, outdir, observation_model=...)`` (sympy
derivatives, C++ code generation, the C++ compile with the ``swig`` on PATH, linked against
scipy_openblas64's BLAS), then ``import_model_module(name, outdir).get_model()``. All of
that is the build phase, in time to first gradient; its parts are recorded as the
row's ``ttfg_detail`` (``sbml_import``, ``codegen``, ``cxx_compile``, ``model_load``).
A compiled model may come from a cache instead (:func:`cache_root`: the folder named by
``SCIML_BENCH_AMICI_CACHE``, keyed by the SBML, the observables and AMICI's version); the
row's ``model_source`` says which (``compiled`` or ``cache``), so a warm build is never
shown as a cold one. Without the variable every worker compiles.

The loss as AMICI's objective. The suite's loss is ``L = Σ_ij W_ij (Y_ij − O_ij)² +
Σ_ij C_ij Y_ij`` (:mod:`sciml_bench.problem.compiled`). AMICI computes the log-likelihood
of Gaussian measurements ``O_ij`` of observables ``y_j`` (here the states the loss
weighs) with noise ``σ_ij``:

    −llh = Σ_{ij: measured} [ (y_ij − O_ij)² / (2 σ_ij²) + ½ log(2π σ_ij²) ],

so with ``σ_ij = 1/√(2 W_ij)`` (and no measurement where ``W_ij = 0``)

    −llh = Σ_ij W_ij (Y_ij − O_ij)² + K,   K = Σ_{W_ij > 0} ½ log(π / W_ij),

a constant: ``L = −llh − K`` (:func:`loss_constant`) and ``∇L = −∇llh`` (AMICI's
``sllh``). The linear term ``C·Y`` (the ``final`` loss) has no Gaussian likelihood: such a
problem is refused (:class:`~sciml_bench.backends.base.ProblemNotExpressible`), never
answered wrong.

Parameters: a parameter differentiated in log space
(:func:`~sciml_bench.problem.compiled.log_scaled`) is on AMICI's ``ln`` scale, the others
on ``none`` (linear); AMICI takes and differentiates the scaled values ``u``
(:func:`~sciml_bench.backends.compiled.model_parameters`) and the case returns ``∂L/∂θ``
(:func:`~sciml_bench.backends.compiled.natural_gradient`), as CVODES' and diffsol's do.

Settings (AMICI's defaults where the suite has no reason to differ, each recorded):

- solver ``BDF`` with Newton iteration (AMICI's default, for stiff and non-stiff
  problems alike); ``Adams`` on request;
- linear solver: ``dense`` (SUNDIALS' dense LU, AMICI's default) for a scalar problem or
  a dense Jacobian, ``KLU`` (sparse LU on the generated sparse Jacobian) for a sparse one;
  ``options.extra["linear_solver"]`` overrides. An array problem reaches AMICI as one
  rate rule per element (``u[1,2]`` is the SBML id ``u_1_2``, its observable and free
  parameter ids likewise: :mod:`sciml_bench.problem.sbml.write_arrays`), up to that
  writer's size cap;
- the shared ``rtol``/``atol`` for the states, the sensitivities (FSA), the adjoint's
  backward problem and its quadratures (AMICI's quadrature default is 1e-8/1e-12);
- the shared ``max_steps``: AMICI applies it to the whole forward solve (it passes the
  remaining steps to each ``CVode`` call); the backward problem keeps AMICI's default
  bound (100 × ``max_steps``); counted again after the solve like every backend;
- ``--gradient forward`` (CVODES' forward sensitivity module, simultaneous corrector)
  or ``adjoint`` (CVODES' adjoint module: checkpointed ``CVodeF``, ``CVodeB``, the
  gradient as a quadrature), by default by parameter count
  (:func:`~sciml_bench.backends.compiled.forward_or_adjoint`);
- conservation-law reduction at its default (on); a model of rate rules has none to
  find, and the row records how many were found (``conservation_laws``);
- the gradient call reports the likelihood only (``RDataReporting.likelihood``, as
  optimisers built on AMICI call it); the solve reports the states (``full``).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from sciml_bench.backends.base import (
    Availability,
    CaseOptions,
    ProblemNotExpressible,
    Solution,
    SolverInfo,
)
from sciml_bench.backends.checks import finite_solution
from sciml_bench.backends.compiled import (
    CompiledBackend,
    CompiledCase,
    expressible_source,
    library_failure,
)
from sciml_bench.backends.step_bound import check_steps
from sciml_bench.measure.status import SolverFailure
from sciml_bench.problem.compiled import CompiledProblem, log_scaled

_SOLVERS = {
    "BDF": SolverInfo("BDF", True, "CVODES variable-order BDF (orders 1-5), Newton iteration "
                      "(AMICI's default)"),
    "Adams": SolverInfo("Adams", False, "CVODES Adams-Moulton (orders 1-12), Newton iteration"),
}  # fmt: skip
_GRADIENTS = {
    "forward": ("CVODES' forward sensitivity module (FSA, simultaneous corrector), AMICI's "
                "sllh from the sensitivities at the measurement times"),
    "adjoint": ("CVODES' adjoint module driven by AMICI: checkpointed CVodeF, CVodeB with the "
                "measurements' jumps, the gradient as a quadrature"),
}
#: the environment variable naming the compiled-model cache folder (unset: no cache)
CACHE_VAR = "SCIML_BENCH_AMICI_CACHE"
#: the linear solver of each Jacobian kind (AMICI's ``LinearSolver`` names)
LINEAR_SOLVERS = {"dense": "dense", "sparse": "KLU"}
_LINEAR_WORDS = {
    "dense": "dense (SUNDIALS dense LU on AMICI's generated Jacobian)",
    "KLU": "KLU (SuiteSparse sparse LU on AMICI's generated sparse Jacobian)",
}
#: AMICI's conservation-law reduction, left at its default
CONSERVATION_LAWS = True
IDIOM = (
    "amici.SbmlImporter(sbml).sbml2amici(name, outdir, observation_model=[MeasurementChannel"
    "(state)]) + import_model_module(name, outdir).get_model() at build; timed solve = "
    "amici.sim.sundials.run_simulation(model, solver) with the parameters set on the model; "
    "timed gradient = run_simulation(model, solver_with_sensitivities, ExpData(O, σ = "
    "1/sqrt(2W))) reporting the likelihood; L = -llh - K and dL/du = -sllh after the clock"
)


def observed_states(loss_W: np.ndarray) -> list[int]:
    """The states the loss weighs (a column of ``W`` with a positive entry): AMICI's
    observables, in state order."""
    return [int(j) for j in np.flatnonzero(np.any(np.asarray(loss_W) > 0, axis=0))]


def check_loss(problem: CompiledProblem) -> None:
    """Refuse a loss AMICI's Gaussian likelihood cannot state: a linear term ``Σ C·Y`` (the
    ``final`` loss), or no weighted state at all."""
    if np.any(np.asarray(problem.loss_C) != 0):
        raise ProblemNotExpressible(
            f"amici: {problem.name}'s loss has a linear term Σ C·y (a 'final' loss), which no "
            "Gaussian likelihood states; AMICI's objective is -llh of measured observables: "
            "give the problem a 'fit' loss ([loss] kind = \"fit\") to run it here")
    if not observed_states(problem.loss_W):
        raise ProblemNotExpressible(f"amici: {problem.name}'s loss weighs no state (W = 0)")


def case_settings(problem: CompiledProblem, options: CaseOptions) -> dict[str, Any]:
    """The plain settings of one case (``sciml-bench codegen`` prints them): solver, linear
    solver, tolerances (sensitivities', backward problem's and quadratures' too), step
    bound, gradient method, the observed states, each parameter's AMICI scale and which
    parameters the model takes as logs (:func:`~sciml_bench.problem.compiled.log_scaled`).

    A ``run --sbml`` problem runs the modeller's own file (``problem.sbml_map``): its
    observables are the observed states' SBML formulas (``X * C`` for an amount), and the
    states that are no AMICI state id of their own (those amounts) are observables too,
    unmeasured, so that the solution reads every problem state (:func:`state_columns`)."""
    from sciml_bench.problem.sbml.write_arrays import sbml_id

    log = log_scaled(problem)
    observed = observed_states(problem.loss_W)
    kind = options.extra.get("jacobian", "sparse" if problem.size else "dense")
    linear = str(options.extra.get("linear_solver", LINEAR_SOLVERS.get(kind, "dense")))
    own = problem.sbml_map
    if own is None:
        formulas = [sbml_id(n) for n in problem.state_names]
        params, extra = [sbml_id(n) for n in problem.param_names], []
    else:
        formulas, params = list(own["states"]), list(own["parameters"])
        extra = [j for j, f in enumerate(formulas) if j not in observed and not _is_id(f)]
    return {"solver": options.solver, "linear_solver": linear, "rtol": options.rtol,
            "atol": options.atol, "max_steps": options.max_steps,
            "gradient": options.gradient_method, "t0": float(problem.t_span[0]),
            "observed": observed, "unmeasured": extra,
            "observables": [formulas[j] for j in [*observed, *extra]],
            "state_formulas": formulas, "param_names": params,
            "locals": None if own is None else own["locals"],
            "sbml": "the modeller's own file" if own else "the suite's rate-rule export",
            "parameter_scale": ["ln" if v else "none" for v in log],
            "compute_conservation_laws": CONSERVATION_LAWS, "dtype": options.dtype,
            "log_scaled": log.tolist()}  # fmt: skip


def _is_id(formula: str) -> bool:
    """Whether an SBML formula is a bare id (a state AMICI holds itself), not an expression."""
    return formula.replace("_", "a").isalnum()


def model_key(sbml: str, settings: Mapping[str, Any]) -> str:
    """What a compiled model depends on, hashed: the SBML, the observables, the
    conservation-law setting and AMICI's version (16 hex digits)."""
    import amici

    text = "\n".join([amici.__version__, sbml, ",".join(settings["observables"]),
                      str(settings["compute_conservation_laws"])])  # fmt: skip
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def swig_first_on_path() -> None:
    """Put this environment's ``bin`` (PyPI's ``swig``, the version AMICI was built with)
    first on PATH for the model compile: a system swig of another version gives "SWIG
    version mismatch" and a model module that fails to load."""
    here = os.path.dirname(sys.executable)
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[:1] != [here]:
        os.environ["PATH"] = here + os.pathsep + path


def import_model(
    sbml: str, name: str, outdir: str, settings: Mapping[str, Any]
) -> dict[str, float]:
    """``SbmlImporter(sbml).sbml2amici(name, outdir, ...)`` in its two halves, timed: the
    symbolic import and C++ code generation (``compile=False``), then the C++ compile of
    the generated package (AMICI's own ``build_model_extension``, what ``compile=True``
    runs). The observables are ``o_<k> = formula`` (the observed states' values, then the
    unmeasured ones :func:`case_settings` adds); their noise comes with the measurements
    (:func:`exp_data`)."""
    import amici
    from amici.exporters.sundials.compile import build_model_extension

    t0 = time.perf_counter()
    importer = amici.SbmlImporter(sbml, from_file=False)
    t1 = time.perf_counter()
    channels = [amici.MeasurementChannel(f"o_{k}", formula=formula)
                for k, formula in enumerate(settings["observables"])]  # fmt: skip
    importer.sbml2amici(
        name, outdir, observation_model=channels, verbose=False, compile=False,
        compute_conservation_laws=settings["compute_conservation_laws"],
    )  # fmt: skip
    t2 = time.perf_counter()
    swig_first_on_path()
    build_model_extension(outdir)
    t3 = time.perf_counter()
    return {"sbml_import": t1 - t0, "codegen": t2 - t1, "cxx_compile": t3 - t2}


def load_model(name: str, outdir: str) -> Any:
    """The compiled model: ``import_model_module(name, outdir).get_model()``."""
    import amici

    return amici.import_model_module(name, outdir).get_model()


def parameter_indices(model: Any, settings: Mapping[str, Any]) -> list[int]:
    """Where each of the problem's parameters is among AMICI's free parameters: the rate-rule
    export has exactly the problem's, in its order; the modeller's own file has all of its
    parameters (a reaction's local one promoted by libsbml as ``<reaction>_<id>``)."""
    ids = [str(i) for i in model.get_free_parameter_ids()]
    wanted = list(settings["param_names"])
    if settings.get("locals") is None:
        if ids != wanted:
            raise RuntimeError(f"AMICI's free parameters {ids} are not the problem's "
                               f"{wanted}: the SBML export changed")  # fmt: skip
        return list(range(len(ids)))
    out = []
    for name, local in zip(wanted, settings["locals"], strict=True):
        names = [name] if not local else [f"{local[0]}_{local[1]}", f"_{local[0]}_{local[1]}"]
        found = [ids.index(n) for n in names if n in ids]
        if not found:
            raise RuntimeError(f"AMICI has no free parameter for the problem's {name!r} "
                               f"(looked for {', '.join(names)} among {len(ids)})")  # fmt: skip
        out.append(found[0])
    return out


def configure_model(model: Any, settings: Mapping[str, Any], t_save: Any) -> list[int]:
    """Save points, start time and each parameter's scale (``ln`` or ``none``) on the
    model; with the modeller's own file, sensitivities for the problem's parameters only
    (AMICI's parameter list). Returns where the problem's parameters are among AMICI's
    free ones (:func:`parameter_indices`)."""
    import amici.sim.sundials as S

    index = parameter_indices(model, settings)
    model.set_timepoints([float(t) for t in t_save])
    model.set_t0(float(settings["t0"]))
    scales = ["none"] * len(model.get_free_parameter_ids())
    for i, s in zip(index, settings["parameter_scale"], strict=True):
        scales[i] = s
    model.set_parameter_scale([getattr(S.ParameterScaling, s) for s in scales])
    if settings.get("locals") is not None:
        model.set_parameter_list(index)
    return index


def state_columns(model: Any, settings: Mapping[str, Any]) -> list[tuple[str, int]]:
    """Per problem state, where a solve's return data holds it: ``("x", i)``, AMICI's state
    of that id, or ``("y", k)``, observable ``o_k`` (a formula, e.g. an amount ``X * C``).
    The export's states are AMICI's, in order."""
    if settings.get("locals") is None:
        return [("x", j) for j in range(len(settings["state_formulas"]))]
    xid = [str(i) for i in model.get_state_ids()]
    observables = list(settings["observables"])
    out = []
    for f in settings["state_formulas"]:
        if f in xid:
            out.append(("x", xid.index(f)))
        elif f in observables:
            out.append(("y", observables.index(f)))
        else:
            raise RuntimeError(f"AMICI holds no state {f!r} and no observable of it: the "
                               "model's states are {', '.join(xid[:8])}")  # fmt: skip
    return out


def make_solver(model: Any, settings: Mapping[str, Any], gradient: bool) -> Any:
    """CVODES through AMICI with the case's settings: the method, linear solver, shared
    tolerances (for the states, the sensitivities, the backward problem and its
    quadratures) and step bound; with ``gradient``, first-order sensitivities by the case's
    method and only the likelihood reported."""
    import amici.sim.sundials as S

    solver = model.create_solver()
    methods = {"BDF": S.LinearMultistepMethod.BDF, "Adams": S.LinearMultistepMethod.adams}
    solver.set_linear_multistep_method(methods[settings["solver"]])
    solver.set_non_linear_solver_iteration(S.NonlinearSolverIteration.newton)
    solver.set_linear_solver(getattr(S.LinearSolver, settings["linear_solver"]))
    rtol, atol = settings["rtol"], settings["atol"]
    solver.set_relative_tolerance(rtol)
    solver.set_absolute_tolerance(atol)
    solver.set_relative_tolerance_fsa(rtol)
    solver.set_absolute_tolerance_fsa(atol)
    solver.set_relative_tolerance_b(rtol)
    solver.set_absolute_tolerance_b(atol)
    solver.set_relative_tolerance_quadratures(rtol)
    solver.set_absolute_tolerance_quadratures(atol)
    solver.set_max_steps(int(settings["max_steps"]))
    if gradient:
        solver.set_sensitivity_order(S.SensitivityOrder.first)
        solver.set_sensitivity_method(getattr(S.SensitivityMethod, settings["gradient"]))
        solver.set_return_data_reporting_mode(S.RDataReporting.likelihood)
    return solver


def noise(loss_W: np.ndarray, observed: list[int]) -> np.ndarray:
    """``σ = 1/√(2W)`` on the observed states (``n_save × n_observed``), ``inf`` where
    ``W = 0`` (its measurement is left out: :func:`exp_data`)."""
    W = np.asarray(loss_W, dtype=np.float64)[:, observed]
    with np.errstate(divide="ignore"):
        return np.where(W > 0, 1.0 / np.sqrt(2.0 * np.where(W > 0, W, 1.0)), np.inf)


def exp_data(model: Any, settings: Mapping[str, Any], loss_W: Any, loss_O: Any) -> Any:
    """AMICI's ``ExpData``: measurements ``O`` of the observed states with noise
    ``σ = 1/√(2W)``; an entry with ``W = 0`` is not measured (NaN, AMICI skips it)."""
    import amici.sim.sundials as S

    observed = settings["observed"]
    sigma = noise(loss_W, observed)
    measured = np.where(np.isfinite(sigma), np.asarray(loss_O, dtype=np.float64)[:, observed],
                        np.nan)  # fmt: skip
    unmeasured = len(settings.get("unmeasured", ()))  # observables read, never measured
    if unmeasured:
        measured = np.hstack([measured, np.full((len(measured), unmeasured), np.nan)])
        sigma = np.hstack([sigma, np.full((len(sigma), unmeasured), np.inf)])
    edata = S.ExpData(model)
    edata.t_start = float(settings["t0"])  # the ExpData's start time wins over the model's
    edata.set_measurements(measured.ravel().tolist())  # row-major: n_save x n_observed
    edata.set_noise_scales(np.where(np.isfinite(sigma), sigma, 1.0).ravel().tolist())
    return edata


def loss_constant(loss_W: Any) -> float:
    """``K = Σ_{W_ij > 0} ½ log(2π σ_ij²) = Σ_{W_ij > 0} ½ log(π / W_ij)``: AMICI's
    normalisation, with ``L = −llh − K``."""
    W = np.asarray(loss_W, dtype=np.float64)
    W = W[W > 0]
    return float(np.sum(0.5 * np.log(np.pi / W)))


def loss_and_gradient(rdata: Any, constant: float) -> tuple[float, np.ndarray]:
    """``(L, ∂L/∂u) = (−llh − K, −sllh)`` from AMICI's return data."""
    return -float(rdata.llh) - constant, -np.asarray(rdata.sllh, dtype=np.float64)


def cache_root() -> Path | None:
    """The compiled-model cache folder (``$SCIML_BENCH_AMICI_CACHE``), or None: compile."""
    folder = os.environ.get(CACHE_VAR, "").strip()
    return Path(folder) if folder else None


#: the file a cached model's folder holds once its compile has finished
_DONE = "sciml-bench-complete"


def _publish(built: str, final: Path) -> str:
    """Move a finished build into the cache at ``final`` (a rename: a concurrent worker
    sees the whole model or none); when another worker got there first, use its copy."""
    Path(built, _DONE).write_text("compiled by sciml-bench\n")
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(built, final)
    except OSError:
        if not (final / _DONE).is_file():
            raise
        shutil.rmtree(built, ignore_errors=True)
    return str(final)


def built_model(
    problem: CompiledProblem, settings: Mapping[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """The compiled model and how it was made: from the cache (``model_source: cache``,
    the load timed) or compiled here (``compiled``: import, code generation and the C++
    compile, timed; into the cache when there is one, else a folder removed at exit)."""
    import amici
    import amici.sim.sundials  # noqa: F401  (a model module reads amici.sim at import)

    sbml = (problem.source["sbml_model"] if problem.sbml_map is not None
            else expressible_source("amici", problem, "sbml"))
    key = model_key(sbml, settings)
    name, root = f"sciml_bench_{key}", cache_root()
    final = None if root is None else root / amici.__version__ / key
    phases: dict[str, float] = {}
    if final is not None and (final / _DONE).is_file():
        outdir, source = str(final), "cache"
    else:
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)
        outdir = tempfile.mkdtemp(prefix=f"amici-{key}-", dir=None if root is None else root)
        if root is None:
            atexit.register(shutil.rmtree, outdir, True)
        phases = import_model(sbml, name, outdir, settings)
        outdir = outdir if final is None else _publish(outdir, final)
        source = "compiled"
    t0 = time.perf_counter()
    model = load_model(name, outdir)
    phases["model_load"] = time.perf_counter() - t0
    where = outdir if root is not None else "a temporary folder, removed at exit (no cache)"
    return model, {"model_source": source, "model_key": key, "model_dir": where,
                   "build_phases": phases}  # fmt: skip


#: CVODES' forward-sensitivity corrector, as AMICI numbers it (InternalSensitivityMethod)
_ISM = {1: "simultaneous", 2: "staggered", 3: "staggered1"}


def amici_scales(log_scaled: np.ndarray) -> str:
    """What a row records of its parameters' scales (``case_info.parameter_scale``)."""
    k, n = int(np.sum(log_scaled)), int(np.size(log_scaled))
    rest = f", none (linear) for the other {n - k}" if k < n else ""
    return f"AMICI ParameterScaling ln (log θ) for {k} of {n} parameters{rest}"


def amici_failure(rdata: Any) -> SolverFailure:
    """An unsuccessful ``run_simulation`` (``rdata.status`` not AMICI_SUCCESS) as a status
    classified from AMICI's messages (``[identifier] message``), with the time reached."""
    texts = [f"[{m.identifier}] {m.message}" for m in rdata.messages] or [
        f"AMICI status {int(rdata.status)}"]  # fmt: skip
    t = float(rdata.t_last)
    return library_failure("amici", " ".join(" ".join(texts).split()),
                           t if np.isfinite(t) else None)  # fmt: skip


class AmiciCase(CompiledCase):
    def __init__(self, problem: CompiledProblem, options: CaseOptions):
        check_loss(problem)  # before anything is imported or compiled
        import amici
        import amici.sim.sundials as S

        st = case_settings(problem, options)
        self.model, made = built_model(problem, st)
        self.index = configure_model(self.model, st, problem.t_save)
        self.columns = state_columns(self.model, st)
        #: every free parameter's value on its scale; the problem's are set into it
        self.base = np.asarray(self.model.get_free_parameters(), dtype=np.float64)
        self.solver = make_solver(self.model, st, gradient=False)
        self.grad_solver = make_solver(self.model, st, gradient=True)
        self.edata = exp_data(self.model, st, problem.loss_W, problem.loss_O)
        self.constant = loss_constant(problem.loss_W)
        self.log_scaled = np.asarray(st["log_scaled"], dtype=bool)
        self.max_steps = options.max_steps
        self._run = S.run_simulation
        self.build_detail = made.pop("build_phases")
        self.info = {
            "idiom": IDIOM, **made, "amici_version": amici.__version__,
            "linear_solver": _LINEAR_WORDS.get(st["linear_solver"], st["linear_solver"]),
            "parameter_scale": amici_scales(self.log_scaled),
            "conservation_laws": (f"reduction {'on' if CONSERVATION_LAWS else 'off'} (AMICI's "
                                  f"default); {int(self.model.ncl())} found"),
            "observables": st["observables"], "sbml": st["sbml"],
            "loss_constant": self.constant,
            "internal_sensitivity_method": _ISM.get(
                int(self.grad_solver.get_internal_sensitivity_method()), "?"),
            "max_steps_backward": "AMICI's default, 100 x max_steps",
        }  # fmt: skip

    def library_parameters(self, u: np.ndarray) -> Any:
        # AMICI takes a sequence of floats, every free parameter's, set on the model: the
        # problem's at their places, the file's others at their own values
        full = self.base.copy()
        full[self.index] = u
        return [float(v) for v in full]

    def failure(self, e: RuntimeError) -> SolverFailure:
        return library_failure("amici", " ".join(str(e).split()))

    def timed_solve(self, params: Any) -> Any:
        self.model.set_free_parameters(params)
        return self._call(self._run, self.model, self.solver)

    def check_solve(self, raw: Any) -> Solution:
        if int(raw.status) != 0:
            raise amici_failure(raw)
        steps = int(raw.numsteps[-1])
        rejected = int(raw.num_err_test_fails[-1]) + int(raw.num_non_lin_solv_conv_fails[-1])
        check_steps("amici", self.max_steps, steps, rejected,
                    note="AMICI's own bound counts accepted steps, whole solve")  # fmt: skip
        x, obs = np.array(raw.x, dtype=np.float64), np.array(raw.y, dtype=np.float64)
        y = finite_solution("amici", np.column_stack(
            [x[:, i] if where == "x" else obs[:, i] for where, i in self.columns]))
        return Solution(y, {"steps": steps, "rejected_steps": rejected,
                            "rhs_evals": int(raw.num_rhs_evals[-1])})  # fmt: skip

    def timed_grad(self, params: Any) -> Any:
        self.model.set_free_parameters(params)
        return self._call(self._run, self.model, self.grad_solver, self.edata), params

    def check_grad(self, raw: Any) -> tuple[float, np.ndarray]:
        rdata, params = raw
        if int(rdata.status) != 0:
            raise amici_failure(rdata)
        value, grad_u = loss_and_gradient(rdata, self.constant)
        # sllh is over AMICI's parameter list: the problem's parameters, in its order
        u = np.asarray(params)[self.index] if len(params) != len(grad_u) else np.asarray(params)
        return super().check_grad((value, grad_u, u))


class AmiciBackend(CompiledBackend):
    name = "amici"
    packages = ("amici", "swig", "scipy-openblas64")
    extra = "amici"
    #: the SBML model it imports (and a model's own SBML text, ``sbml_model``, with it)
    sources = ("sbml",)
    modules = ("amici", "amici.sim.sundials")
    gradient_methods: Mapping[str, str] = _GRADIENTS
    solver_table = _SOLVERS
    case_type = AmiciCase
    stiff_solver, nonstiff_solver = "BDF", "BDF"
    no_ensemble = ("run_simulations over ExpData conditions exists, but this suite does not yet "
                   "map an ensemble's members onto conditions")  # fmt: skip

    def availability(self) -> Availability:
        """AMICI with what its model compiles need at run time: PyPI's ``swig`` (the version
        AMICI was built with), ``scipy_openblas64`` (the BLAS it links) and a C++ compiler;
        found without importing anything."""
        found = Availability.of_modules("amici", "swig", "scipy_openblas64", extra=self.extra)
        if found.ok and not any(shutil.which(c) for c in ("c++", "g++", "clang++")):
            return Availability(False, "amici compiles each model to C++, and no C++ compiler "
                                "(c++, g++, clang++) is on PATH", "install one (Debian: "
                                "apt-get install g++)")  # fmt: skip
        return found
