"""The reference's SciPy solver classes: BDF and Radau with the LU each system deserves.

SciPy's ``BDF`` and ``Radau`` factorise ``M = I − c·J`` on every change of step size or
order, with ``scipy.linalg.lu_factor`` (dense ``J``) or ``scipy.sparse.linalg.splu``
(sparse ``J``, SuperLU with its default COLAMD column ordering). The reference keeps the
method and changes only how ``M`` is factorised, so its steps are SciPy's own:

- **dense**: LAPACK ``getrf``/``getrs`` called directly (:func:`lapack_lu`), the calls
  ``lu_factor`` ends in, bit for bit, without their wrappers;
- **sparse**: SuperLU with the minimum-degree ordering on ``Mᵀ + M``
  (``permc_spec="MMD_AT_PLUS_A"``), the one SuperLU's guide gives for a matrix whose
  pattern is (nearly) symmetric, as a PDE stencil's and a block-diagonal system's are. On
  the 2-D Brusselator's ``M`` it halves the fill of COLAMD's factors and factorises faster
  (measured: docs/measurements.md, "What a row claims about its reference", "The
  reference's sparse LU orders for fill").

The reference also starts every BDF and Radau solve with a small first step
(:data:`FIRST_STEP` of the span) instead of SciPy's estimate from ``f(t0)``: a model that
starts at its steady state, with an input that switches on at ``t0`` (Fiedler_BMCSystBiol2016:
a pulse of time constant 0.02 from the steady state), has ``f(t0) = 0``, and from it BDF at
rtol 1e-12 chose a first step over the whole pulse and missed it (what it gave against the
other solvers: docs/measurements.md, "What a row claims about its reference", "The
solution reference falls back as an expert would"). The error control takes the step
up from there in a few steps; a step too large for a fast start is rejected and shrunk.

The benchmarked SciPy rows (``backends/scipy.py``) keep ``solve_ivp``'s own defaults:
SciPy exposes no ordering, and a row measures the library as its users call it.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np

#: SuperLU's column ordering for the reference's sparse iteration matrices
SPARSE_ORDERING = "MMD_AT_PLUS_A"
#: the reference's BDF and Radau first step, as a fraction of the span they integrate
FIRST_STEP = 1e-6


def lapack_lu(solver: Any) -> None:
    """Give a dense BDF or Radau ``solver`` the LU factorisation and solve that SciPy's
    ``lu_factor`` / ``lu_solve`` end in (LAPACK ``getrf`` / ``getrs``, the same finite-input
    checks and errors) without their batch and array-API wrappers. Same calls, same numbers,
    bit for bit; on Van der Pol's Radau solve (2 states, ~30,000 steps, ~5 solves of the
    system per step) the wrappers were a third of the solve's time."""
    from scipy.linalg import LinAlgWarning, get_lapack_funcs

    def lu(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        solver.nlu += 1
        A = np.asarray_chkfinite(A)  # lu_factor's check: a NaN Jacobian raises ValueError
        (getrf,) = get_lapack_funcs(("getrf",), (A,))
        lu_, piv, info = getrf(A, overwrite_a=True)
        if info < 0:
            raise ValueError(f"illegal value in {-info}th argument of internal getrf (lu_factor)")
        if info > 0:
            warnings.warn(f"Diagonal number {info} is exactly zero. Singular matrix.",
                          LinAlgWarning, stacklevel=2)  # fmt: skip
        return lu_, piv

    def solve_lu(LU: tuple[np.ndarray, np.ndarray], b: np.ndarray) -> np.ndarray:
        b = np.asarray_chkfinite(b)
        (getrs,) = get_lapack_funcs(("getrs",), (LU[0], b))
        x, info = getrs(LU[0], LU[1], b, overwrite_b=True)
        if info != 0:
            raise ValueError(f"illegal value in {-info}th argument of internal getrs")
        return x  # type: ignore[no-any-return]

    solver.lu, solver.solve_lu = lu, solve_lu


def ordered_splu(solver: Any) -> None:
    """Give a sparse BDF or Radau ``solver`` SuperLU with :data:`SPARSE_ORDERING` (SciPy's
    own ``lu`` is ``splu(A)``, COLAMD). Its ``solve_lu`` (``LU.solve``) stays."""
    from scipy.sparse.linalg import splu

    def lu(A: Any) -> Any:
        solver.nlu += 1
        return splu(A, permc_spec=SPARSE_ORDERING)

    solver.lu = lu


@functools.cache
def ode_solver(method: str) -> Any:
    """``method`` for ``solve_ivp``: BDF and Radau as subclasses whose LU is
    :func:`lapack_lu`'s (dense Jacobian) or :func:`ordered_splu`'s (sparse) and whose first
    step is :data:`FIRST_STEP` of the span (module doc); any other name as is."""
    from scipy import integrate
    from scipy.sparse import issparse

    base = {"BDF": integrate.BDF, "Radau": integrate.Radau}.get(method)
    if base is None:
        return method

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        t0, t_bound = args[1], args[3]  # (fun, t0, y0, t_bound) as solve_ivp passes them
        if kwargs.get("first_step") is None and t_bound != t0:
            kwargs["first_step"] = FIRST_STEP * abs(float(np.real(t_bound)) - float(np.real(t0)))
        base.__init__(self, *args, **kwargs)
        if issparse(self.I):
            ordered_splu(self)
        else:
            lapack_lu(self)

    return type(method, (base,), {"__init__": __init__, "__doc__": base.__doc__})
