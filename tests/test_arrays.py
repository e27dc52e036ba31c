"""Array problems: the format, every operator in every Python target against plain NumPy
loops, and the exact sparse Jacobian against finite differences of the generated RHS.

(Julia's array code is parsed and linted in test_julia_static.py and evaluated against
NumPy in test_julia_runtime.py where Julia exists.)
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import numpy as np
import pytest

from sciml_bench.problem import codegen, spec
from sciml_bench.problem.compiled import log_scaled
from sciml_bench.problem.generated import load_python

BASE = """
name = "grid"
stiff = false
[sizes]
N = {{ default = 5, ladder = [2, 5, 9] }}
M = 4
[state]
names = ["u", "v"]
shape = {shape}
initial = [1.0, 0.5]
[parameters]
c = 0.7
[equations]
u = "{u}"
v = "{v}"
[time]
span = [0.0, 1.0]
save = [1.0]
[loss]
kind = "final"
weights = [1.0, 2.0]
"""


def problem(u: str, v: str = "-v", shape: str = '["N", "M"]') -> spec.Problem:
    return spec.loads(BASE.format(u=u, v=v, shape=shape), "grid.toml")


# --- the operators, written as loops over elements ---------------------------------------


def at(x: np.ndarray, index: tuple[int, ...], bc: str) -> float:
    """x at a possibly outside index: periodic wraps, dirichlet 0, neumann the nearest."""
    out = []
    for i, n in zip(index, x.shape, strict=True):
        if 0 <= i < n:
            out.append(i)
        elif bc == "periodic":
            out.append(i % n)
        elif bc == "neumann":
            out.append(min(max(i, 0), n - 1))
        else:
            return 0.0
    return float(x[tuple(out)])


def loop_lap(x: np.ndarray, bc: str) -> np.ndarray:
    out = np.zeros_like(x)
    for ix in np.ndindex(*x.shape):
        for a in range(x.ndim):
            for k in (1, -1):
                nb = list(ix)
                nb[a] += k
                out[ix] += at(x, tuple(nb), bc)
        out[ix] -= 2 * x.ndim * x[ix]
    return out


def loop_shift(x: np.ndarray, offset: tuple[int, ...], bc: str) -> np.ndarray:
    out = np.zeros_like(x)
    for ix in np.ndindex(*x.shape):
        out[ix] = at(x, tuple(i + k for i, k in zip(ix, offset, strict=True)), bc)
    return out


def loop_sum(x: np.ndarray, axis: int | None, mean: bool = False) -> np.ndarray:
    out = np.zeros_like(x)
    for ix in np.ndindex(*x.shape):
        for jx in np.ndindex(*x.shape):
            if all(i == j for a, (i, j) in enumerate(zip(ix, jx, strict=True)) if a != axis
                   and axis is not None):  # fmt: skip
                out[ix] += x[jx]
    if mean:
        out /= x.size if axis is None else x.shape[axis]
    return out


CASES_2D = [
    (f"lap(u, {bc})", lambda u, bc=bc: loop_lap(u, bc)) for bc in ("periodic", "dirichlet", "neumann")
] + [
    (f"shift(u, {a}, {b}, {bc})", lambda u, a=a, b=b, bc=bc: loop_shift(u, (a, b), bc))
    for bc in ("periodic", "dirichlet", "neumann") for a, b in ((1, 0), (-2, 1), (0, -1))
] + [
    ("sum(u, 0)", lambda u: loop_sum(u, 0)), ("sum(u, 1)", lambda u: loop_sum(u, 1)),
    ("sum(u)", lambda u: loop_sum(u, None)), ("mean(u, 1)", lambda u: loop_sum(u, 1, True)),
    ("mean(u)", lambda u: loop_sum(u, None, True)),
]  # fmt: skip
CASES_1D = (
    [
        (f"lap(u, {bc})", lambda u, bc=bc: loop_lap(u, bc))
        for bc in ("periodic", "dirichlet", "neumann")
    ]
    + [
        (f"shift(u, {k}, {bc})", lambda u, k=k, bc=bc: loop_shift(u, (k,), bc))
        for bc in ("periodic", "dirichlet", "neumann")
        for k in (1, -3)
    ]
    + [("sum(u, 0)", lambda u: loop_sum(u, 0)), ("mean(u)", lambda u: loop_sum(u, None, True))]
)


def targets(p: spec.Problem) -> dict[str, object]:
    """Each Python target's RHS as f(t, y, theta) -> NumPy: numpy, jax, and torch's three
    forms (the module, the functional rhs, the batch of one)."""
    out = {"numpy": load_python(codegen.generate(p, "numpy"))["rhs"]}
    try:
        import jax

        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp

        f_j = load_python(codegen.generate(p, "jax"))["rhs"]
        out["jax"] = lambda t, y, th: np.asarray(f_j(t, jnp.asarray(y), jnp.asarray(th)))
    except ImportError:
        pass
    try:
        import torch

        ns = load_python(codegen.generate(p, "torch"))
        T = torch.tensor

        def module(t: float, y: np.ndarray, th: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return ns["RHS"](T(th))(T(t, dtype=torch.float64), T(y)).numpy()

        out["torch-module"] = module
        out["torch"] = lambda t, y, th: ns["rhs"](T(t, dtype=torch.float64), T(y), T(th)).numpy()
        out["torch-batch"] = lambda t, y, th: ns["rhs_batch"](
            T([t], dtype=torch.float64), T(y[None]), T(th[None])
        ).numpy()[0]
    except ImportError:
        pass
    with contextlib.suppress(ImportError):  # DiffSL's array form, as diffsol compiles it
        out["diffsl"] = diffsl_function(p)
    try:  # CasADi's array form, through a CasADi Function on SX symbols (as CVODES gets it)
        import casadi as ca

        F = casadi_function(p, ca)
        out["casadi"] = lambda t, y, th: np.array(F(t, y, model_inputs(p, th))).ravel()
    except ImportError:
        pass
    return out


def model_inputs(p: spec.Problem, th: np.ndarray) -> np.ndarray:
    """The compiled models' (DiffSL, CasADi) parameters for ``th``: ``log θ`` where the
    parameter is in log space (:func:`~sciml_bench.problem.compiled.log_scaled`)."""
    from sciml_bench.backends.compiled import model_parameters

    return model_parameters(th, log_scaled(p))


def diffsl_function(p: spec.Problem) -> object:
    """``f(t, y, p)`` of the DiffSL target through ``pydiffsol.Ode.rhs``, in the suite's
    layout: the model stores its state state by state, ``y = u[order]``."""
    import pydiffsol as ds

    from sciml_bench.backends.diffsol import suite_order

    code = codegen.generate(p, "diffsl")
    ode = ds.Ode(code, matrix_type=ds.faer_sparse)
    order = suite_order({"layout": codegen.state_layout(p)})

    def f(t: float, y: np.ndarray, th: np.ndarray) -> np.ndarray:
        u = np.empty_like(y)
        u[order] = y
        return np.asarray(ode.rhs(model_inputs(p, th), t, u))[order]

    return f


def casadi_function(p: spec.Problem, ca) -> object:
    """``f(t, y, u)`` of the CasADi target as a CasADi Function on SX symbols (``u`` the
    model's parameters: :func:`model_inputs`)."""
    f = load_python(codegen.generate(p, "casadi"))["rhs"]
    t, y, th = ca.SX.sym("t"), ca.SX.sym("y", p.n_state), ca.SX.sym("p", p.n_params)
    return ca.Function("f", [t, y, th], [f(t, y, th)])


@pytest.mark.slow
@pytest.mark.parametrize(("shape", "cases"), [('["N", "M"]', CASES_2D), ('"N"', CASES_1D)],
                         ids=["2d", "1d"])  # fmt: skip
def test_every_operator_in_every_python_target_matches_numpy_loops(shape, cases) -> None:
    rng = np.random.default_rng(3)
    for text, loop in cases:
        p = problem(f"c*{text} - u*v", shape=shape)
        grid = p.array.shape
        for _ in range(2):
            y = rng.uniform(-1, 1, p.n_state)
            th = np.array([rng.uniform(0.5, 1.5)])
            u, v = y.reshape(*grid, 2)[..., 0], y.reshape(*grid, 2)[..., 1]
            want = np.stack([th[0] * loop(u) - u * v, -v], axis=-1).ravel()
            for name, f in targets(p).items():
                got = f(0.3, y, th)
                np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13,
                                           err_msg=f"{text} in {name}")  # fmt: skip


@pytest.mark.parametrize(("text", "reduce"), [
    ("mean(v, 1)", lambda v: v.mean(axis=1, keepdims=True)),
    ("sum(v)", lambda v: np.full((1, 1), v.sum())),
    ("2*mean(v, 0)", lambda v: 2 * v.mean(axis=0, keepdims=True)),
])  # fmt: skip
def test_an_equation_of_reductions_alone_broadcasts_over_the_grid(text, reduce) -> None:
    """A template that reads a state only through a sum or mean is broadcast to the grid
    in every target (the NumPy generator once stacked the reduced shape and raised)."""
    p = problem(text)
    y = np.random.default_rng(5).uniform(-1, 1, p.n_state)
    th = np.array([0.7])
    v = y.reshape(5, 4, 2)[..., 1]
    want = np.stack([np.broadcast_to(reduce(v), (5, 4)), -v], axis=-1).ravel()
    for name, f in targets(p).items():
        np.testing.assert_allclose(f(0.1, y, th), want, rtol=1e-13, atol=1e-13, err_msg=name)


def test_indices_definitions_step_and_per_element_parameters() -> None:
    text = BASE.format(u="D*u + step(t - 0.5)*x", v="sin(i*j)*v", shape='["N", "M"]').replace(
        "[parameters]\nc = 0.7",
        '[definitions]\nx = "i/(N - 1)"\n[parameters]\nD = { value = "1 + j", per_element = true }',
    )
    p = spec.loads(text, "grid.toml")
    assert p.param_names[:2] == ("D[0,0]", "D[0,1]") and p.theta0[:5] == (1.0, 2.0, 3.0, 4.0, 1.0)
    rng = np.random.default_rng(0)
    y, th = rng.uniform(-1, 1, p.n_state), rng.uniform(0.5, 2, p.n_params)
    i, j = np.meshgrid(np.arange(5), np.arange(4), indexing="ij")
    u, v = y.reshape(5, 4, 2)[..., 0], y.reshape(5, 4, 2)[..., 1]
    for t, on in ((0.2, 0.0), (0.7, 1.0)):
        want = np.stack([th.reshape(5, 4) * u + on * i / 4, np.sin(i * j) * v], axis=-1).ravel()
        for name, f in targets(p).items():
            np.testing.assert_allclose(f(t, y, th), want, rtol=1e-13, atol=1e-14, err_msg=name)


# --- the exact sparse Jacobian ------------------------------------------------------------


def fd_jacobian(f, t: float, y: np.ndarray, th: np.ndarray) -> np.ndarray:
    """Central differences of the generated RHS, column by column."""
    J = np.empty((y.size, y.size))
    for k in range(y.size):
        h = 1e-6 * max(1.0, abs(y[k]))
        up, down = y.copy(), y.copy()
        up[k] += h
        down[k] -= h
        J[:, k] = (f(t, up, th) - f(t, down, th)) / (2 * h)
    return J


JACOBIAN_CASES = {
    "robertson-groups": lambda: spec.at_size(spec.load("stiff-robertson-groups"), 4),
    "brusselator-2d": lambda: spec.load("stiff-brusselator-2d"),
    "every-operator": lambda: problem(
        "c*lap(u, dirichlet)*v + shift(v, 1, -1, neumann)^2 - mean(u, 1)*v + sum(v)*u^2",
        "lap(v, neumann) + shift(u, -2, 1, periodic)*u - exp(-sum(u, 0))*v",
    ),
}


@pytest.mark.parametrize("name", list(JACOBIAN_CASES))
def test_sparse_jacobian_matches_finite_differences_of_the_rhs(name: str) -> None:
    p = JACOBIAN_CASES[name]()
    ns = load_python(codegen.generate(p, "numpy"))
    rng = np.random.default_rng(1)
    y = np.asarray(p.y0) * rng.uniform(0.5, 1.5, p.n_state) + rng.uniform(0, 1e-3, p.n_state)
    th = np.asarray(p.theta0) * rng.uniform(0.8, 1.2, p.n_params)
    J = ns["jac_sparse"](2.0, y, th)
    fd = fd_jacobian(ns["rhs"], 2.0, y, th)
    scale = np.max(np.abs(fd))
    np.testing.assert_allclose(J.toarray(), fd, atol=1e-7 * scale, rtol=1e-6)
    # the pattern holds every entry the differences see, and nothing structural beyond it
    assert not np.any((np.abs(fd) > 1e-9 * scale) & (J.toarray() == 0))
    assert J.nnz == ns["JAC_NNZ"] == len(ns["JAC_ROWS"])
    np.testing.assert_array_equal(ns["jac"](2.0, y, th), J.toarray())
    lower, upper = ns["JAC_BANDS"]
    B = ns["jac_banded"](2.0, y, th)
    rows, cols = np.nonzero(J.toarray())
    np.testing.assert_array_equal(B[upper + rows - cols, cols], J.toarray()[rows, cols])
    try:  # CasADi differentiates its array form (what CVODES factorises): the same matrix
        import casadi as ca
    except ImportError:
        return
    F = casadi_function(p, ca)
    t_, y_, th_ = F.sx_in()
    Jc = ca.Function("J", [t_, y_, th_], [ca.jacobian(F(t_, y_, th_), y_)])(
        2.0, y, model_inputs(p, th))
    np.testing.assert_allclose(np.array(Jc), J.toarray(), rtol=1e-12, atol=1e-12 * scale)
    assert Jc.nnz() <= J.nnz


def test_robertson_groups_are_3x3_blocks_on_a_band_of_width_two() -> None:
    p = spec.at_size(spec.load("stiff-robertson-groups"), 100)
    ns = load_python(codegen.generate(p, "numpy"))
    assert p.n_state == 300 and ns["JAC_NNZ"] == 7 * 100 and ns["JAC_BANDS"] == (1, 2)
    assert p.param_names == ("k1", "k2", "k3")  # shared by every group


def test_jacobian_and_rhs_are_complex_safe() -> None:
    p = spec.load("stiff-brusselator-2d")
    ns = load_python(codegen.generate(p, "numpy"))
    th = np.asarray(p.theta0, dtype=complex)
    th[0] += 1e-30j
    y = np.asarray(p.y0, dtype=complex)
    assert np.iscomplexobj(ns["rhs"](2.0, y, th)) and np.iscomplexobj(
        ns["jac_sparse"](2.0, y, th).data
    )


def test_code_is_array_code_of_the_same_length_at_every_size() -> None:
    small = spec.load("stiff-robertson-groups")
    start = time.perf_counter()
    large = spec.at_size(small, 10_000)
    sources = {t: codegen.generate(large, t) for t in codegen.targets(large)}
    load_python(sources["numpy"])  # builds the pattern: 70,000 entries
    elapsed = time.perf_counter() - start
    assert large.n_state == 30_000 and elapsed < 10, elapsed  # a few seconds, not per element
    for t, src in sources.items():
        if t == "sbml":  # SBML has no arrays: one rate rule per element, refused past a cap
            assert "at most 20000 states" in src, src[:300]
            continue
        assert len(src) < 6000 and abs(len(src) - len(codegen.generate(small, t))) < 40, t


def test_sizes_change_the_content_and_keep_the_ladder() -> None:
    p = spec.load("stiff-brusselator-2d")
    q = spec.at_size(p, 16)
    assert (p.array.size, q.array.size) == (8, 16) and q.n_state == 2 * 16 * 16
    assert q.array.ladder == p.array.ladder == (8, 16, 32, 64, 128)
    assert q.content_hash != p.content_hash and spec.at_size(q, 8).content_hash == p.content_hash


# --- format errors: one line naming the file, the key and the position --------------------


@pytest.mark.parametrize(
    ("edit", "key", "fragment"),
    [
        (("N = {{ default = 5, ladder = [2, 5, 9] }}", "N = 0"), "sizes.N", "positive integer"),
        (("N = {{ default = 5, ladder = [2, 5, 9] }}", "N = 2.5"), "sizes.N", "positive integer"),
        (("ladder = [2, 5, 9]", "ladder = [5, 2]"), "sizes.N.ladder", "increasing"),
        (("M = 4", "M = {{ default = 4, ladder = [4] }}"), "sizes", "at most one size"),
        (("shape = {shape}", 'shape = ["N", "K"]'), "state.shape[1]", "'K' is not a size"),
        (("shape = {shape}", 'shape = ["N", ["M"]]'), "state.shape[1]", "is not a size"),
        (("shape = {shape}", 'shape = ["N", {{ a = 1 }}]'), "state.shape[1]", "is not a size"),
        (("N = {{ default = 5, ladder = [2, 5, 9] }}", "N = 0x" + "f" * 4000), "sizes.N", "int"),
        (("initial = [1.0, 0.5]", "initial = [1.0, 0x" + "f" * 300 + "]"), "state.initial[1]",
         "not finite"),
        (("{u}", "lap(u, periodc)"), "equations.u", "unknown boundary 'periodc' at position 7"),
        (("{u}", "shift(u, 1, periodic)"), "equations.u", "2-D state takes 2 integer offset"),
        (("{u}", "sum(u, 2)"), "equations.u", "axis 2 at position 7 is out of range"),
        (("{u}", "lap(c, periodic)"), "equations.u", "'c' at position 4 is not one"),
        (("{u}", "lap(u + v, periodic)"), "equations.u", "expected ',' or ')' at position 6"),
        (("{u}", "shift(u, 9, 0, dirichlet)"), "equations", "exceeds its size 5"),
        (
            ("[parameters]", "[networks.nn]\nlayers = [1, 1]\n[parameters]"),
            "networks",
            "not supported",
        ),
        (
            ("initial = [1.0, 0.5]", 'initial = [1.0, "u"]'),
            "state.initial[1]",
            "sizes, the indices",
        ),
    ],
)
def test_format_errors_name_the_file_key_and_position(edit, key, fragment) -> None:
    text = BASE.replace(*edit).format(u="-u", v="-v", shape='["N", "M"]')
    with pytest.raises(spec.ProblemError) as info:
        spec.loads(text, "grid.toml")
    msg = str(info.value)
    assert msg.startswith(f"grid.toml: [{key}]: ") and fragment in msg and "\n" not in msg, msg


def test_array_sections_in_a_scalar_problem_are_errors() -> None:
    data = spec.load("stiff-robertson").content
    bad = {**data, "state": {**data["state"], "shape": "n"}}
    with pytest.raises(spec.ProblemError, match=r"\[state.shape\]: only array problems"):
        spec.from_dict(bad, "rober.toml")
    with pytest.raises(spec.ProblemError, match=r"\[definitions\]: only array problems"):
        spec.from_dict({**data, "definitions": {"x": "1"}}, "rober.toml")
    # and the operators are not in the scalar grammar
    bad = {**data, "equations": {**data["equations"], "y3": "lap(y2, periodic)"}}
    with pytest.raises(spec.ProblemError, match=r"call of 'lap' at position 0 is not allowed"):
        spec.from_dict(bad, "rober.toml")


def test_the_problems_doc_shows_the_diffsl_array_form_as_codegen_prints_it() -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "problems.md").read_text()
    model = codegen.generate(spec.at_size(spec.load("stiff-robertson-groups"), 4), "diffsl")
    assert f"```\n{model}```" in doc


def test_a_template_of_scalars_and_an_operator_reading_only_zeros() -> None:
    """``v' = c + t`` (no state: a scalar every target broadcasts, DiffSL through a ones
    vector) and a dirichlet shift by the whole axis (every neighbour outside: 0)."""
    p = problem("c*shift(u, 5, 0, dirichlet) - u", "c + t")
    rng = np.random.default_rng(5)
    y, th = rng.uniform(-1, 1, p.n_state), np.array([0.9])
    u = y.reshape(5, 4, 2)[..., 0]
    want = np.stack([-u, np.full((5, 4), 0.9 + 0.4)], axis=-1).ravel()
    for name, f in targets(p).items():
        np.testing.assert_allclose(f(0.4, y, th), want, rtol=1e-14, atol=1e-15, err_msg=name)
    assert "(20:40): (p0 + t) * one_i," in codegen.generate(p, "diffsl")


def test_diffsl_array_form_is_vector_code_with_stencils_as_diagonal_runs() -> None:
    """The DiffSL array form is one vector expression per state: ROBER's groups are the
    same model at every size (only the ranges change), and a 2-D periodic Laplacian is
    O(N) diagonal runs, not O(N^2) entries (one matrix shared by lap(u) and lap(v))."""
    from sciml_bench.problem.generated import not_expressible

    rober = spec.load("stiff-robertson-groups")
    small, big = (codegen.generate(spec.at_size(rober, n), "diffsl") for n in (10, 10_000))
    assert not_expressible(big) is None and len(big.splitlines()) == len(small.splitlines())
    assert "(10000:20000): x1 = 0.0,  // y2" in big and "c2_i { p1*(x1_i*x1_i) }" in big
    assert "// layout: 3 states x 10000 elements" in big and "3 states x 10 elements" in small
    bru = codegen.generate(spec.at_size(spec.load("stiff-brusselator-2d"), 64), "diffsl")
    matrix = bru[bru.index("L0_ij {") : bru.index("}", bru.index("L0_ij {"))]
    assert matrix.count("\n") < 6 * 64 and "(0..4096, 0..4096): (-4.0)," in matrix
    assert "L1_ij" not in bru and "o1_i { L0_ij * x1_j }" in bru
    assert "heaviside(t + (-1.1))" in bru  # the forcing's switch; its disc is a constant g0
