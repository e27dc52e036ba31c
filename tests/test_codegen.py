"""Generated code: every target computes the same right-hand side."""

from __future__ import annotations

import numpy as np
import pytest

from sciml_bench.problem import codegen, spec

#: the shipped problems whose every target has code (one with events has NumPy's alone:
#: tests/test_events.py)
PROBLEMS = [n for n in spec.available_problems() if not spec.load(n).events]


def _random_points(p: spec.Problem, n: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    pts = []
    for _ in range(n):
        y = rng.uniform(0.1, 1.0, p.n_state)
        theta = np.asarray(p.theta0) * rng.uniform(0.5, 1.5, p.n_params)
        pts.append((y, theta))
    return pts


@pytest.mark.parametrize("name", PROBLEMS)
def test_all_python_targets_agree_to_1e_12(name: str) -> None:
    torch = pytest.importorskip("torch")
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    p = spec.load(name)
    f_np = codegen.load_python(codegen.generate(p, "numpy"))["rhs"]
    f_t = codegen.load_python(codegen.generate(p, "torch"))["rhs"]
    f_j = codegen.load_python(codegen.generate(p, "jax"))["rhs"]
    for y, theta in _random_points(p, 20):
        ref = f_np(0.3, y, theta)
        got_t = f_t(torch.tensor(0.3, dtype=torch.float64), torch.tensor(y), torch.tensor(theta)).numpy()
        got_j = np.asarray(f_j(0.3, jnp.asarray(y), jnp.asarray(theta)))
        scale = np.maximum(np.abs(ref), 1e-300)
        assert np.max(np.abs(got_t - ref) / scale) <= 1e-12
        assert np.max(np.abs(got_j - ref) / scale) <= 1e-12
        assert got_t.dtype == np.float64 and got_j.dtype == np.float64


@pytest.mark.parametrize("name", PROBLEMS)
def test_exact_jacobian_matches_jax_autodiff(name: str) -> None:
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    p = spec.load(name)
    ns = codegen.load_python(codegen.generate(p, "numpy"))
    f_j = codegen.load_python(codegen.generate(p, "jax"))["rhs"]
    for y, theta in _random_points(p, 5, seed=1):
        J = ns["jac"](0.3, y, theta)
        J_ad = np.asarray(jax.jacfwd(lambda u, th=theta: f_j(0.3, u, jnp.asarray(th)))(jnp.asarray(y)))
        np.testing.assert_allclose(J, J_ad, rtol=1e-12, atol=1e-12 * np.max(np.abs(J_ad)))


def test_numpy_target_is_complex_safe() -> None:
    p = spec.load("stiff-robertson")
    ns = codegen.load_python(codegen.generate(p, "numpy"))
    theta = np.asarray(p.theta0, dtype=complex)
    theta[0] += 1e-30j
    y = np.array([0.9, 1e-5, 0.1], dtype=complex)
    assert np.iscomplexobj(ns["rhs"](0.0, y, theta))
    assert np.iscomplexobj(ns["jac"](0.0, y, theta))


def test_julia_target_is_in_place_and_one_based() -> None:
    src = codegen.generate(spec.load("stiff-robertson"), "julia")
    assert "function rhs!(du, u, p, t)" in src
    assert "u[1]" in src and "u[0]" not in src and "p[3]" in src
    assert "du[3] = " in src and "**" not in src


def test_constant_components_stay_tensors() -> None:
    torch = pytest.importorskip("torch")
    data = {
        "name": "const", "stiff": False,
        "state": {"names": ["a", "b"], "initial": [1.0, 0.0]},
        "parameters": {"k": 2.0},
        "equations": {"a": "-k*a", "b": "3"},
        "time": {"span": [0.0, 1.0], "save": [1.0]},
        "loss": {"kind": "final", "weights": [1.0, 1.0]},
    }
    p = spec.from_dict(data)
    f = codegen.load_python(codegen.generate(p, "torch"))["rhs"]
    out = f(0.0, torch.tensor([1.0, 0.0], dtype=torch.float64), torch.tensor([2.0], dtype=torch.float64))
    assert out.tolist() == [-2.0, 3.0]


def test_unknown_target() -> None:
    with pytest.raises(ValueError, match="unknown target 'fortran'"):
        codegen.generate(spec.load("stiff-robertson"), "fortran")


@pytest.mark.parametrize("name", PROBLEMS)
def test_torch_module_holds_the_parameters_in_vector_order(name: str) -> None:
    """The generated RHS module's tensors are the parameter vector, in its order, so
    vector_to_parameters / parameters_to_vector map theta and gradients onto it."""
    torch = pytest.importorskip("torch")
    p = spec.load(name)
    ns = codegen.load_python(codegen.generate(p, "torch"))
    theta = torch.tensor(np.asarray(p.theta0) * np.linspace(0.5, 1.5, p.n_params))
    module = ns["RHS"](theta)
    flat = torch.nn.utils.parameters_to_vector(module.parameters()).detach()
    assert torch.equal(flat, theta)
    torch.nn.utils.vector_to_parameters(2 * theta, module.parameters())
    y = torch.tensor(np.linspace(0.2, 0.9, p.n_state))
    with torch.no_grad():
        np.testing.assert_array_equal(module(0.3, y).numpy(), ns["rhs"](0.3, y, 2 * theta).numpy())


def test_spiral_network_is_written_on_the_state_vector() -> None:
    """u.^3 -> Dense -> Dense as torch and JAX users write it: no per-component indexing,
    no per-evaluation slicing of a parameter vector in torch."""
    p = spec.load("nonstiff-spiral-node")
    torch_src = codegen.generate(p, "torch")
    forward = torch_src.split("def forward", 1)[1].split("def rhs", 1)[0]
    assert "x_nn = y**3" in forward and "return h_nn_2" in forward
    assert "p[" not in forward and "y[" not in forward and "stack" not in forward
    jax_src = codegen.generate(p, "jax")
    assert "x_nn = y**3" in jax_src and "return h_nn_2" in jax_src and "y[" not in jax_src


@pytest.mark.parametrize("name", PROBLEMS)
@pytest.mark.parametrize("per_member", [False, True])
def test_torch_batch_rhs_matches_the_one_member_rhs(name: str, per_member: bool) -> None:
    """``rhs_batch`` on 7 members equals ``rhs`` member by member, with one shared θ
    and with one θ per member (then network layers go through ``_dense``'s bmm)."""
    torch = pytest.importorskip("torch")
    p = spec.load(name)
    ns = codegen.load_python(codegen.generate(p, "torch"))
    pts = _random_points(p, 7, seed=1)
    Y = torch.tensor(np.stack([y for y, _ in pts]))
    P = torch.tensor(np.stack([th for _, th in pts])) if per_member else torch.tensor(pts[0][1])
    t = torch.tensor(0.3, dtype=torch.float64)
    got = ns["rhs_batch"](t, Y, P).numpy()
    assert got.shape == (7, p.n_state)
    for m in range(7):
        ref = ns["rhs"](t, Y[m], P[m] if per_member else P).numpy()
        scale = np.maximum(np.abs(ref), 1e-300)
        assert np.max(np.abs(got[m] - ref) / scale) <= 1e-12


def test_torch_batch_rhs_keeps_shared_and_constant_components_per_member() -> None:
    """A component that reads no state (a constant, a shared parameter) still has one
    value per member, so the components stack into (n, n_state)."""
    torch = pytest.importorskip("torch")
    p = spec.from_dict({
        "name": "consts", "stiff": False,
        "state": {"names": ["a", "b", "c"], "initial": [1.0, 2.0, 3.0]},
        "parameters": {"k": 2.0},
        "equations": {"a": "k", "b": "1.5", "c": "-a*k"},
        "time": {"span": [0.0, 1.0], "save": {"linspace": [0.0, 1.0, 3]}},
        "loss": {"kind": "final", "weights": [1.0, 1.0, 1.0]},
    })  # fmt: skip
    f = codegen.load_python(codegen.generate(p, "torch"))["rhs_batch"]
    Y = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=torch.float64)
    got = f(torch.tensor(0.0, dtype=torch.float64), Y, torch.tensor([2.0], dtype=torch.float64))
    assert got.tolist() == [[2.0, 1.5, -2.0], [2.0, 1.5, -8.0]]


def test_torch_batch_broadcasts_only_components_that_read_no_state() -> None:
    """``+ torch.zeros_like`` is decided on each equation as written, not on its CSE form:
    ``k*a*b`` hides the states it reads behind a CSE symbol shared by ``a`` and ``b``."""
    torch = pytest.importorskip("torch")
    p = spec.from_dict({
        "name": "cse-state", "stiff": False,
        "state": {"names": ["a", "b", "c"], "initial": [1.0, 2.0, 3.0]},
        "parameters": {"k": 2.0, "q": 3.0},
        "equations": {"a": "k*a*b + q", "b": "-k*a*b", "c": "q*k"},
        "time": {"span": [0.0, 1.0], "save": {"linspace": [0.0, 1.0, 3]}},
        "loss": {"kind": "final", "weights": [1.0, 1.0, 1.0]},
    })  # fmt: skip
    src = codegen.generate(p, "torch")
    batch = src[src.index("def rhs_batch"):]
    assert "cse0" in batch and batch.count("torch.zeros_like") == 1  # c = q*k only
    f = codegen.load_python(src)["rhs_batch"]
    Y = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=torch.float64)
    got = f(torch.tensor(0.0, dtype=torch.float64), Y, torch.tensor([2.0, 3.0],
                                                                    dtype=torch.float64))
    assert got.tolist() == [[7.0, -4.0, 6.0], [43.0, -40.0, 6.0]]
    for name in ("stiff-robertson", "stiff-hires", "stiff-pollution"):
        src = codegen.generate(spec.load(name), "torch")
        assert "zeros_like" not in src[src.index("def rhs_batch"):], name


def test_an_array_problem_carries_its_state_layout_as_data() -> None:
    """``(S, n)`` comes from the problem, never from generated text: the compiled problem
    a worker receives holds it, and a scalar problem has none."""
    from sciml_bench.problem import reference

    groups = spec.at_size(spec.load("stiff-robertson-groups"), 4)
    assert codegen.state_layout(groups) == groups.array.state_layout == (3, 4)
    assert codegen.state_layout(spec.load("stiff-robertson")) is None
    n = len(groups.t_save) * groups.n_state
    obs = np.linspace(0.1, 0.9, n).reshape(len(groups.t_save), groups.n_state)
    assert reference.compile_problem(groups, None, obs).layout == [3, 4]


#: an array problem with every operator kind, on a 2-D grid
OPERATORS_TOML = """
name = "every-operator"
stiff = false
[sizes]
n = { default = 4, ladder = [4, 5] }
m = 3
[state]
names = ["u", "v"]
shape = ["n", "m"]
initial = ["sin(i + j)", "1 + i"]
[parameters]
k = 0.5
[equations]
u = "k*lap(u, periodic) + shift(v, 1, 0, neumann) + shift(u, 0, -2, dirichlet) + sum(v)"
v = "mean(u, 0) + lap(v, neumann) + sum(u, 1) + mean(v)"
[time]
span = [0.0, 1.0]
save = { linspace = [0.1, 1.0, 5] }
[loss]
kind = "final"
weights = [1.0, 1.0]
"""


@pytest.mark.parametrize(("name", "size"), [("stiff-brusselator-2d", 5), ("heat-1d", 6),
                                            ("every-operator", 5)])  # fmt: skip
def test_operator_matrices_match_the_numpy_rhs(name: str, size: int) -> None:
    """:func:`~sciml_bench.problem.codegen.operators.operator_matrix` (what DiffSL writes
    out) applied to a state equals the NumPy target's operator on the grid."""
    from pathlib import Path

    from sciml_bench.problem.codegen.grid import op_source
    from sciml_bench.problem.codegen.operators import SHIFT_PY, operator_matrix

    path = Path(__file__).parent / "data" / f"{name}.toml"
    if name == "every-operator":
        p = spec.at_size(spec.loads(OPERATORS_TOML), size)
    else:
        p = spec.at_size(spec.load(path if path.exists() else name), size)
    m = p.array
    ns: dict = {"np": np}
    exec(SHIFT_PY.format(xp="np"), ns)  # noqa: S102 (our own template)
    x = np.random.default_rng(0).uniform(size=m.shape)
    for op in m.operators:
        entries = operator_matrix(op, m.shape)
        M = np.zeros((m.n_elements, m.n_elements))
        for (r, c), v in entries.items():
            M[r, c] = v
        want = np.broadcast_to(eval(op_source(op, m, "numpy"), {**ns, f"s_{m.states[op.state]}": x}),
                               m.shape)  # fmt: skip
        np.testing.assert_allclose(M @ x.ravel(), want.ravel(), rtol=1e-14, atol=1e-14)
