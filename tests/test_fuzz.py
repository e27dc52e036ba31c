"""Hostile problem files: fuzzing the spec loader and the expression parser.

Every generated input, valid or not, must end as a ``Problem`` (or a sympy
expression) or as a ``ProblemError`` / ``ExprError``: never another
exception, never more than a second (hypothesis ``deadline``), never a memory
blow-up, and never a path into Python execution. The last is checked twice
while each input is parsed: ``eval``/``exec``/``compile``/``__import__`` are
replaced by functions that fail, and an audit hook (PEP 578) records any
``exec``, ``compile``, ``import``, ``open``, ``os.system`` or process spawn.

The strategies are split so that the total is at least 10,000 examples in
well under 90 s; the examples actually run are counted and the count asserted.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib.util
import json
import math
import resource
import sys
import tomllib
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sympy
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from sciml_bench.problem import spec
from sciml_bench.problem.expr import FUNCTIONS, ExprError, parse, symbols

#: examples per strategy; their sum is the fuzz total (>= 10,000)
BUDGET = {
    "expr_grammar": 3500,
    "expr_text": 1500,
    "problem_dict": 2500,
    "problem_toml": 1500,
    "problem_text": 1200,
}
TOTAL_REQUIRED = 10_000
RUN: Counter[str] = Counter()
OUTCOME: Counter[str] = Counter()
#: memory at the first fuzz example: {"base": MB, "kernel_peak": whether VmHWM was reset}
MEMORY: dict[str, Any] = {}


def _status_kb(field: str) -> float:
    for line in open("/proc/self/status").read().splitlines():  # noqa: SIM115
        if line.startswith(f"{field}:"):
            return float(line.split()[1])
    raise KeyError(field)


def _start_memory_watch() -> None:
    """Measure memory growth during fuzzing alone. The kernel's peak (VmHWM) is reset to
    the current RSS (``echo 5 > /proc/self/clear_refs``, Linux >= 4.0), so earlier tests of
    the session (which may import the CUDA builds of torch and JAX) are not counted.
    Elsewhere ``ru_maxrss`` from now on: it can under-count growth, never over-count it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        MEMORY.update(base=_status_kb("VmRSS") / 1024, kernel_peak=True)
    except OSError:
        MEMORY.update(base=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      kernel_peak=False)


def _memory_grown_mb() -> float:
    if MEMORY["kernel_peak"]:
        return _status_kb("VmHWM") / 1024 - MEMORY["base"]
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - MEMORY["base"]

FUZZ = settings(
    deadline=1000,  # ms: no input may take a second
    database=None,
    # no shrinking: a deep hostile table shrinks for minutes; the failing input is printed
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)

# --- the no-execution guard ------------------------------------------------

_FORBIDDEN_AUDIT = ("exec", "compile", "import", "open", "os.system", "os.exec", "os.posix_spawn",
                    "os.fork", "subprocess.Popen", "socket.", "ctypes.")
_guard = {"on": False, "events": []}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _guard["on"] and event.startswith(_FORBIDDEN_AUDIT):
        _guard["events"].append(event)


sys.addaudithook(_audit)  # cannot be removed; inert unless a guarded parse is running


def _refuse(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"parsing reached builtins.{name}")

    return refuse


@contextlib.contextmanager
def no_python_execution() -> Iterator[None]:
    saved = {n: getattr(builtins, n) for n in ("eval", "exec", "compile", "__import__")}
    real_import = saved["__import__"]

    def guarded_import(
        name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
    ) -> Any:
        # sympy imports some of its own modules lazily (sympy.tensor on a first Add);
        # loading any other module is a failure
        full = name
        if level:
            package = (globals or {}).get("__package__") or ""
            full = importlib.util.resolve_name("." * level + name, package)
        module = sys.modules.get(full)
        new = [f"{full}.{x}" for x in fromlist or () if not hasattr(module, x)]
        if module is not None and all(m in sys.modules for m in new):
            return real_import(name, globals, locals, fromlist, level)
        if not full.startswith(("sympy.", "mpmath.")):
            raise AssertionError(f"parsing imported {full!r} {list(fromlist or ())}")
        # loading sympy's own files opens, may compile, and execs them: lift the guard for that
        _guard["on"] = False
        patched = {n: getattr(builtins, n) for n in saved}
        for n, f in saved.items():
            setattr(builtins, n, f)
        try:
            return real_import(name, globals, locals, fromlist, level)
        finally:
            for n, f in patched.items():
                setattr(builtins, n, f)
            _guard["on"] = True

    for n in ("eval", "exec", "compile"):
        setattr(builtins, n, _refuse(n))
    builtins.__import__ = guarded_import
    _guard["on"], _guard["events"] = True, []
    try:
        yield
    finally:
        _guard["on"] = False
        for n, f in saved.items():
            setattr(builtins, n, f)
    assert not _guard["events"], f"parsing raised audit events {_guard['events']}"


def _survives(kind: str, fn: Callable[[], Any]) -> None:
    """Run one input: a result or a ProblemError/ExprError; anything else fails the test."""
    if not MEMORY:
        _start_memory_watch()
    RUN[kind] += 1
    with no_python_execution():
        try:
            result = fn()
        except (spec.ProblemError, ExprError):
            OUTCOME[f"{kind}:rejected"] += 1
            return
    OUTCOME[f"{kind}:valid"] += 1
    if isinstance(result, spec.Problem):
        assert all(isinstance(e, sympy.Expr) for e in result.rhs)
        assert all(math.isfinite(x) for x in (*result.y0, *result.theta0, *result.t_save))


# --- expression strategies -------------------------------------------------

NAMES = symbols(["y1", "y2", "k1", "k2", "t"])
LEAVES = [
    *NAMES, "0", "1", "2", "2.5", ".5", "1e300", "1e-300", "1e308", "1e999", "9" * 40,
    "nan", "inf", "NaN", "Infinity", "0x10", "1_000", "\u0663", "\u00b2", "\u00e9", "pi", "E",
    "I", "oo", "zoo", "x", "True", "None", "__import__", "__builtins__", "os", "exp", "",
]
OPS = ["+", "-", "*", "/", "^", "**", " ", ".", "//", "%", "@", ",", "&", "|", "<", "==", ";",
       "=", "[", "]", "{", "}", "'", '"', "`", "\\", "#", "\n", "\x00", "\u2028"]
CALLS = [*FUNCTIONS, "eval", "exec", "open", "getattr", "__import__", "print", "sympify",
         "Symbol", "globals", "vars", "type", "compile", "breakpoint"]

valid_expr = st.recursive(
    st.sampled_from([*NAMES, "1", "2", "0.5", "3e-2", "1e5"]),
    lambda c: st.one_of(
        st.tuples(c, st.sampled_from(["+", "-", "*", "/", "^"]), c).map("".join),
        st.tuples(st.sampled_from(list(FUNCTIONS)), c).map(lambda a: f"{a[0]}({a[1]})"),
        c.map(lambda s: f"-({s})"),
    ),
    max_leaves=12,
)

hostile_expr = st.recursive(
    st.sampled_from(LEAVES),
    lambda c: st.one_of(
        st.tuples(c, st.sampled_from(OPS), c).map("".join),
        st.tuples(st.sampled_from(CALLS), c).map(lambda a: f"{a[0]}({a[1]})"),
        st.tuples(st.sampled_from(CALLS), c, c).map(lambda a: f"{a[0]}({a[1]}, {a[2]})"),
        st.tuples(c, st.integers(0, 120)).map(lambda a: "(" * a[1] + a[0] + ")" * a[1]),
        st.tuples(c, st.integers(0, 120), st.sampled_from(["-", "exp(", "sqrt(", "+"])).map(
            lambda a: a[2] * a[1] + a[0] + (")" * a[1] if a[2].endswith("(") else "")
        ),
        st.tuples(c, st.sampled_from(["9", "99", "1e3", "64", "65", "-65", "0.5", "1e300"])).map(
            lambda a: f"({a[0]})^{a[1]}"
        ),
        c.map(lambda s: f"{s}.__class__.__bases__[0]"),
        c.map(lambda s: f"[{s} for x in (1,)]"),
        c.map(lambda s: f"lambda: {s}"),
        c.map(lambda s: f"f'{{{s}}}'"),
        c.map(lambda s: f"{s}[0]"),
        c.map(lambda s: f"{s} if y1 else y2"),
        c.map(lambda s: f"__import__('os').system({s!r})"),
    ),
    max_leaves=25,
)

long_expr = st.tuples(
    st.sampled_from(["y1+", "k1*", "y1/", "-", "(", "exp(", "y2^2+", "sin(1)+", "1e300*", "1+"]),
    st.integers(1, 8000),
).map(lambda a: (a[0] * a[1] + "y1")[:25_000])

numbers = st.one_of(
    st.floats().map(repr),
    st.integers().map(str),
    st.tuples(st.floats(), st.floats(allow_nan=False)).map(lambda a: f"{a[0]!r}^{a[1]!r}"),
    st.tuples(st.integers(-(10**6), 10**6), st.integers(-400, 400)).map(lambda a: f"{a[0]}e{a[1]}"),
)


@pytest.mark.slow
@settings(FUZZ, max_examples=BUDGET["expr_grammar"])
@given(st.one_of(valid_expr, hostile_expr, long_expr, numbers))
def test_fuzz_expression_grammar(text: str) -> None:
    _survives("expr_grammar", lambda: parse(text, NAMES))


@pytest.mark.slow
@settings(FUZZ, max_examples=BUDGET["expr_text"])
@given(st.one_of(
    st.text(max_size=300),
    st.text(alphabet=st.characters(codec="ascii"), max_size=300),
    st.binary(max_size=50),
    st.none(), st.integers(), st.floats(), st.lists(st.text(max_size=5), max_size=3),
))
def test_fuzz_expression_arbitrary_text(text: Any) -> None:
    _survives("expr_text", lambda: parse(text, NAMES))


# --- problem-file strategies -----------------------------------------------


def _base_problem(n: int, eqs: list[str]) -> dict[str, Any]:
    states = [f"y{i + 1}" for i in range(n)]
    return {
        "name": "fuzz",
        "description": "generated",
        "stiff": False,
        "state": {"names": states, "initial": [1.0] * n},
        "parameters": {"k1": 0.5, "k2": {"value": -1.0, "log": False}},
        "equations": dict(zip(states, eqs, strict=True)),
        "time": {"span": [0.0, 1.0], "save": {"linspace": [0.0, 1.0, 5]}},
        "tolerances": {"rtol": 1e-6, "atol": 1e-9},
        "solver": {"max_steps": 1000},
        "loss": {"kind": "final", "weights": [1.0] * n},
    }


small_valid_expr = st.recursive(
    st.sampled_from(["y1", "k1", "k2", "t", "1", "0.5"]),
    lambda c: st.one_of(
        st.tuples(c, st.sampled_from(["+", "-", "*"]), c).map("".join),
        st.tuples(st.sampled_from(["exp", "tanh", "sin"]), c).map(lambda a: f"{a[0]}({a[1]})"),
    ),
    max_leaves=6,
)


@st.composite
def valid_problems(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(1, 3))
    doc = _base_problem(1, [draw(small_valid_expr)])
    if n > 1:
        doc = _base_problem(n, [draw(small_valid_expr) for _ in range(n)])
    doc["time"]["span"][1] = draw(st.floats(0.1, 1e3))
    doc["time"]["save"] = draw(st.sampled_from([
        {"linspace": [0.0, doc["time"]["span"][1], 7]},
        [0.0, doc["time"]["span"][1]],
        {"points": [doc["time"]["span"][1] / 2]},
    ]))
    doc["parameters"]["k1"] = draw(st.floats(1e-6, 1e6))
    if draw(st.booleans()):
        doc["loss"] = {"kind": "fit", "truth": {"k1": doc["parameters"]["k1"] * 1.5}}
    return doc


#: built lazily: a strategy's repr holds its sample list, and huge reprs are slow
_HOSTILE_LEAVES: list[Callable[[], Any]] = [
    lambda: math.nan, lambda: math.inf, lambda: -math.inf, lambda: 10**400, lambda: -(10**400),
    lambda: 10**5000, lambda: 0, lambda: -1, lambda: 1e308, lambda: 5e-324, lambda: "",
    lambda: "y1+", lambda: "exp(" * 80, lambda: "y1" * 20_000, lambda: "__import__('os')",
    lambda: "\u202e\u0000", lambda: "nan", lambda: [], lambda: {}, lambda: "Radau",
    lambda: "fit", lambda: "final", lambda: "logspace", lambda: "points", lambda: "linspace",
]
hostile_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=40),
    st.integers(0, len(_HOSTILE_LEAVES) - 1).map(lambda i: _HOSTILE_LEAVES[i]()),
)
hostile_value = st.recursive(
    hostile_leaf,
    lambda c: st.lists(c, max_size=6) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=12,
)


def _paths(doc: dict[str, Any], max_depth: int = 6) -> list[tuple[Any, ...]]:
    """Paths to the nodes of ``doc`` (iterative: a deepened doc must not recurse here)."""
    out: list[tuple[Any, ...]] = []
    stack: list[tuple[tuple[Any, ...], Any]] = [((), doc)]
    while stack:
        prefix, node = stack.pop()
        if prefix:
            out.append(prefix)
        if len(prefix) >= max_depth:
            continue
        items = node.items() if isinstance(node, dict) else (
            enumerate(node) if isinstance(node, list) else ()
        )
        stack += [((*prefix, k), v) for k, v in items]
    return sorted(out, key=repr)  # a stable order, so that hypothesis can replay draws


SHIPPED = {p.stem: p.read_text() for p in sorted(spec.problems_dir().glob("*.toml"))}


def _warm_up() -> None:
    """One-time costs (sympy's lazy imports, first network initialisation) are paid
    here, not inside an example's one-second deadline."""
    for name in SHIPPED:
        spec.load(name)
    parse("y1 + k1*y2 - exp(t)/2 + sin(1)", NAMES)


_warm_up()


@st.composite
def mutated_problems(draw: st.DrawFn) -> dict[str, Any]:
    """A valid problem (generated or shipped, networks included) with a few places
    replaced, removed, deepened or added to."""
    if draw(st.booleans()):
        doc = draw(valid_problems())
    else:
        doc = tomllib.loads(SHIPPED[draw(st.sampled_from(sorted(SHIPPED)))])
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        parent = doc
        for p in path[:-1]:
            parent = parent[p]
        action = draw(st.sampled_from(["replace", "replace", "delete", "deepen", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(hostile_value)
        elif action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "deepen":
            depth = draw(st.integers(1, 300))
            v: Any = parent[path[-1]]
            for _ in range(depth):
                v = [v] if draw(st.booleans()) else {"a": v}
            parent[path[-1]] = v
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=10))] = draw(hostile_value)
    return doc


problem_docs = st.one_of(valid_problems(), mutated_problems())


@pytest.mark.slow
@settings(FUZZ, max_examples=BUDGET["problem_dict"])
@given(st.one_of(problem_docs, hostile_value))
def test_fuzz_problem_tables(doc: Any) -> None:
    _survives("problem_dict", lambda: spec.from_dict(doc, "<fuzz>"))


def to_toml(doc: dict[str, Any]) -> str:
    """A small TOML writer (inline tables), enough to turn fuzzed tables into files."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return hex(v) if abs(v) > 10**1000 else str(v)  # str() of a huge int raises
        if isinstance(v, float):
            return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{json.dumps(str(k))} = {value(x)}" for k, x in v.items()) + "}"
        return json.dumps(str(v))

    return "\n".join(f"{json.dumps(str(k))} = {value(v)}" for k, v in doc.items()) + "\n"


@pytest.mark.slow
@settings(FUZZ, max_examples=BUDGET["problem_toml"])
@given(problem_docs)
def test_fuzz_problem_files(doc: dict[str, Any]) -> None:
    text = to_toml(doc)
    _survives("problem_toml", lambda: spec.loads(text, "<fuzz.toml>"))


SNIPPETS = ["[", "]", "{", "}", "=", '"', "'''", "\\u0000", "\n[state]\n", "nan", "-inf", "1e999",
            "0x" + "f" * 5000, "9" * 5000, "[" * 2000, "{a=" * 500, "\ud800", "\u202e", "#", "\x00",
            "\n[[equations]]\n", 'y1 = "exp(" ', "= 1\n", "\nsave = { logspace = [0, 400, 9] }\n"]
@st.composite
def mangled_text(draw: st.DrawFn) -> str:
    text = SHIPPED[draw(st.sampled_from(sorted(SHIPPED)))]
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 40)))
        piece = draw(st.one_of(st.integers(0, len(SNIPPETS) - 1).map(SNIPPETS.__getitem__),
                                st.text(max_size=20)))
        text = text[:i] + piece + text[j:]
    return text


@pytest.mark.slow
@settings(FUZZ, max_examples=BUDGET["problem_text"])
@given(st.one_of(mangled_text(), st.text(max_size=400)))
def test_fuzz_problem_text(text: str) -> None:
    _survives("problem_text", lambda: spec.loads(text, "<fuzz.toml>"))


@pytest.mark.slow
def test_fuzz_total_and_mix() -> None:
    """Runs last (file order): the fuzz examples above were really run, valid and invalid."""
    if set(RUN) != set(BUDGET):
        pytest.skip(f"needs every fuzz test in this session; ran {sorted(RUN)}")
    total = sum(RUN.values())
    print(f"fuzz examples run: {dict(RUN)} total={total}; outcomes {dict(OUTCOME)}")
    assert total >= TOTAL_REQUIRED
    for kind in ("expr_grammar", "problem_dict", "problem_toml"):
        assert OUTCOME[f"{kind}:valid"] >= 0.05 * RUN[kind], f"{kind}: too few valid inputs"
        assert OUTCOME[f"{kind}:rejected"] >= 0.05 * RUN[kind], f"{kind}: too few invalid inputs"
    grown = _memory_grown_mb()
    print(f"peak memory growth while fuzzing: {grown:.0f} MB "
          f"({'VmHWM reset at the first example' if MEMORY['kernel_peak'] else 'ru_maxrss'})")
    assert grown < 1000, f"peak memory grew by {grown:.0f} MB while fuzzing"
