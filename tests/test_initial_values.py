"""Initial values that are expressions of the parameters, and derived parameters
(sciml_bench/problem/initial.py): the format, every target's code, and the reference's
gradient through y0, checked against central differences of the loss with the parameter
changed in the problem file itself (re-parsed each time), never against ourselves."""

from __future__ import annotations

import numpy as np
import pytest

from sciml_bench.problem import codegen, reference, spec
from sciml_bench.problem.adjoint import adjoint_gradient
from sciml_bench.problem.loss import loss_arrays

#: A decays into B at rate k3 = k2*ka, k2 = 2 ka + c; A starts at 10 k2 (so at 10 (2 ka + c)):
#: ka reaches the loss through the start, through k3 and through B's production
TEXT = """
name = "moving-start"
stiff = false
[state]
names = ["A", "B"]
initial = ["10*k2", 0.5]
[parameters]
ka = 0.3
c = 2.0
k2 = "2*ka + c"
k3 = "k2*ka"
[equations]
A = "-k3*A"
B = "ka*A - c*B"
[time]
span = [0.0, 1.0]
save = { linspace = [0.0, 1.0, 5] }
[loss]
kind = "fit"
truth = { ka = 0.4 }
"""


def _loss_from_file(text: str, W: np.ndarray, O: np.ndarray, C: np.ndarray) -> float:
    """The loss of the problem file ``text`` at its own parameters, solved tight."""
    p = spec.loads(text)
    y = reference.solve_at(p, np.asarray(p.theta0), "DOP853", 1e-12, 1e-14)
    return float(np.sum(W * (y - O) ** 2) + np.sum(C * y))


def test_the_format_reads_expressions_and_derived_parameters() -> None:
    p = spec.loads(TEXT)
    assert p.param_names == ("ka", "c")  # derived ones are not differentiated
    assert p.y0 == pytest.approx((10 * (2 * 0.3 + 2.0), 0.5))
    assert [str(e) for e in p.initial] == ["10*c + 20*ka", "0.500000000000000"]
    assert dict(p.derived)["k3"].equals(spec.sympy.sympify("ka*(2*ka + c)", locals={
        "ka": spec.sympy.Symbol("ka", real=True), "c": spec.sympy.Symbol("c", real=True)}))
    # substituted: no derived symbol is left in the equations
    assert {s.name for e in p.rhs for s in e.free_symbols} == {"A", "B", "ka", "c"}
    assert spec.loads(TEXT.replace('["10*k2", 0.5]', "[26.0, 0.5]")).initial == ()


@pytest.mark.parametrize(("change", "key", "says"), [
    (('"10*k2", 0.5', '"10*A", 0.5'), "state.initial[0]", "cannot depend on states or time"),
    (('k3 = "k2*ka"', 'k3 = "k2*t"'), "parameters.k3", "evaluated once"),
    (('k3 = "k2*ka"', 'k3 = "k3*ka"'), "parameters.k3", "depends on itself"),
    (('k2 = "2*ka + c"', 'k2 = "2*kz"'), "parameters.k2", "derived parameter"),
    (('"10*k2", 0.5', '"log(-ka)", 0.5'), "state.initial[0]", "not a finite real number"),
    (('[loss]', '[ensemble]\nsizes = [2]\n[ensemble.vary]\nka = { uniform = [0.9, 1.1] }\n'
               '[loss]'), "ensemble", "initial values that are numbers"),
])  # fmt: skip
def test_a_bad_start_or_derived_parameter_is_one_line_naming_its_key(
    change: tuple[str, str], key: str, says: str
) -> None:
    with pytest.raises(spec.ProblemError) as e:
        spec.loads(TEXT.replace(*change))
    assert e.value.key == key
    assert says in e.value.reason


def test_numpys_start_and_its_jacobian_are_the_expressions_and_complex_safe() -> None:
    p = spec.loads(TEXT)
    ns = codegen.load_python(codegen.generate(p, "numpy"))
    theta = np.array([0.3, 2.0])
    assert ns["y0"](theta) == pytest.approx([26.0, 0.5])
    assert ns["y0_jac"](theta) == pytest.approx(np.array([[20.0, 10.0], [0.0, 0.0]]))
    z = theta.astype(complex)
    z[0] += 1e-30j
    assert np.imag(ns["y0"](z))[0] / 1e-30 == pytest.approx(20.0)  # complex step through y0
    # a fixed start generates no y0: the backends keep the bundle's numbers
    assert "def y0" not in codegen.generate(spec.load("stiff-robertson"), "numpy")


def test_every_target_starts_from_the_parameters() -> None:
    p = spec.loads(TEXT)
    src = {t: codegen.generate(p, t) for t in codegen.targets(p) if t != "sbml"}
    assert "def y0(p)" in src["jax"] and "def initial(self)" in src["torch"]
    assert "function y0(p)" in src["julia"] and "def y0(p)" in src["casadi"]
    assert "x0 = 10.0*p1 + 20.0*p0" in src["diffsl"]  # u_i reads the inputs
    pytest.importorskip("libsbml", reason="python-libsbml is not installed")
    sbml = codegen.generate(p, "sbml")
    assert "<initialAssignment symbol=\"A\">" in sbml


def test_the_reference_gradient_runs_through_the_start_and_the_derived_parameters() -> None:
    """Forward sensitivities (S(t0) = dy0/dθ) and the adjoint (+ λ(t0)ᵀ dy0/dθ) both equal
    central differences of the loss with ``ka`` and ``c`` changed in the file's text."""
    p = spec.loads(TEXT)
    ref = reference.build(p)
    W, O, C = loss_arrays(p, np.asarray(ref.observations))
    h = 1e-5
    fd = [(_loss_from_file(TEXT.replace(f"{n} = {v}", f"{n} = {v + h!r}"), W, O, C)
           - _loss_from_file(TEXT.replace(f"{n} = {v}", f"{n} = {v - h!r}"), W, O, C)) / (2 * h)
          for n, v in (("ka", 0.3), ("c", 2.0))]  # fmt: skip
    assert ref.gradient == pytest.approx(fd, rel=1e-6)
    assert "forward sensitivities" in ref.method
    adj = adjoint_gradient(p, (W, O, C), 1e-10, 1e-14, "DOP853")[1]
    assert adj == pytest.approx(fd, rel=1e-6)
    # the start alone moves the loss: frozen at its number, the gradient is another one
    frozen = spec.loads(TEXT.replace('["10*k2", 0.5]', "[26.0, 0.5]"))
    frozen_g = reference.build(frozen).gradient
    assert np.linalg.norm(np.subtract(frozen_g, fd)) > 0.1 * np.linalg.norm(fd)
