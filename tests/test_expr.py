"""The whitelist expression parser: what it accepts, and that nothing executes."""

from __future__ import annotations

import builtins
from pathlib import Path

import pytest
import sympy

from sciml_bench.problem.expr import ExprError, parse, symbols

NAMES = symbols(["y1", "y2", "k1", "t"])
y1, y2, k1, t = (NAMES[n] for n in ("y1", "y2", "k1", "t"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("-k1*y1 + 2*y2", -k1 * y1 + 2 * y2),
        ("y1^2", y1**2),
        ("y1**2", y1**2),
        ("-y1^2", -(y1**2)),
        ("2^3^2", sympy.Float(512.0)),  # right-associative, folded
        ("y1/y2/k1", y1 / y2 / k1),
        ("exp(-k1*t) + sqrt(y1) + tanh(y2) + abs(y1)",
         sympy.exp(-k1 * t) + sympy.sqrt(y1) + sympy.tanh(y2) + sympy.Abs(y1)),
        ("1.5e-3 * (y1 - y2)", sympy.Float(1.5e-3) * (y1 - y2)),
        (".5*y1", sympy.Float(0.5) * y1),
    ],
)
def test_accepts_the_grammar(text: str, expected: sympy.Expr) -> None:
    assert sympy.simplify(parse(text, NAMES) - expected) == 0


HOSTILE = [
    "__import__('os').system('touch PWNED')",
    "y1.__class__",
    "y1.real",
    "().__class__.__bases__[0].__subclasses__()",
    "eval('1')",
    "exec('x=1')",
    "open('/etc/passwd')",
    "getattr(y1, 'x')",
    "lambda: 1",
    "[x for x in (1, 2)]",
    "f'{y1}'",
    "y1[0]",
    "{1: 2}",
    "y1 if y1 else y2",
    "y1; y2",
    "y1 = 2",
    "sympify('y1')",
    "Symbol('x')",
    "unknown_name + 1",
    "exp",
    "exp(y1, y2)",
    "1e999",
    "2^100000",
    "10^400",
    "log(0)",
    "sqrt(-4)",
    "y1 / 0",
    "(" * 200 + "y1" + ")" * 200,
    "-" * 500 + "y1",
    "",
    "   ",
    "y1 +",
    "y1 y2",
    "\u00e9 + y1",
    "y1 # comment",
    "`y1`",
    "y1 @ y2",
    "y1 % y2",
    "y1 // y2",
    "y1 & y2",
    "True",
    "None",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_rejects_hostile_and_malformed_input(text: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ExprError):
        parse(text, NAMES)
    assert not (tmp_path / "PWNED").exists()


def test_never_reaches_python_evaluation(monkeypatch) -> None:
    def forbidden(*args, **kwargs):
        raise AssertionError("the parser called eval/exec/compile/__import__")

    for name in ("eval", "exec", "compile"):
        monkeypatch.setattr(builtins, name, forbidden)
    expr = parse("-k1*y1 + exp(y2)^2 / (1 + t)", NAMES)
    assert expr.free_symbols == {k1, y1, y2, t}
    with pytest.raises(ExprError):
        parse("__import__('os')", NAMES)


def test_error_names_the_position_and_the_known_names() -> None:
    with pytest.raises(ExprError, match=r"unknown name 'k9' at position 3 \(known names: y1, y2"):
        parse("y1*k9", NAMES)


@pytest.mark.parametrize("bad", [None, 3, 2.5, ["y1"], {"a": 1}, b"y1"])
def test_non_string_input(bad: object) -> None:
    with pytest.raises(ExprError, match="expected an expression string"):
        parse(bad, NAMES)
