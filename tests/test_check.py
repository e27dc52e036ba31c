"""``sciml-bench check``: a user's own model checked before a long run.

On a file with a mistake it prints the fix, one line, exit status 2; on a good file the
equations as parsed, the backends that can run it and one timed reference solve. The good
file, ``tests/data/sir.toml``, is the worked example of docs/problems.md, word for word.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sciml_bench.backends import REGISTRY
from sciml_bench.cli.main import main
from sciml_bench.problem import hints, spec

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
SIR = DATA / "sir.toml"


def _check(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["check", *args])
    return r.exit_code, r.output


@pytest.mark.parametrize(
    ("name", "key", "fix"),
    [
        ("typo-name", "equations.R", "unknown name 'gama' at position 0 (known names: S, I, R, "
         "beta, gamma, c, t); did you mean 'gamma'?"),
        ("stray-key", "equations.i", "no equation for state 'I'; the file has an equation for "
         "'i', which is not a state — did you mean 'I'?"),
        ("undeclared-parameter", "equations.R", "unknown name 'mu' at position 10 (known names: "
         "S, I, R, beta, gamma, c, t); declare it: under [parameters] (mu = VALUE)"),
        ("negative-tolerance", "tolerances.atol",
         "expected a positive number, got -1e-09; did you mean atol = 1e-09?"),
        ("nonfinite-initial", "state.initial[1]", "the initial value of state 'I' is inf, not a "
         "finite number; write the value I starts from at t0"),
    ],
)  # fmt: skip
def test_a_mistake_is_one_line_with_its_fix(name: str, key: str, fix: str) -> None:
    path = DATA / "check" / f"{name}.toml"
    code, out = _check("--problem-file", str(path))
    assert code == 2, out
    assert f"{path}: [{key}]: {fix}" in out
    assert "Traceback" not in out and "equations, as parsed" not in out


def test_a_good_file_prints_equations_targets_and_the_reference_time() -> None:
    code, out = _check("--problem-file", str(SIR))
    assert code == 0, out
    assert out.startswith(f"sir-lockdown ({SIR}): valid")
    assert "dR/dt = I*gamma" in out
    assert "dS/dt = -I*S*beta*(-c*(tanh(t/5 - 8) + 1)/2 + 1)" in out
    for backend in REGISTRY:  # every backend gets a line: runs, or why not and the fix
        assert re.search(rf"^  {backend} +\w+ +(runs|expressible; not installed|cannot)", out, re.M)
    assert re.search(r"^  diffrax +jax +(runs \(Tsit5\)|expressible; not installed)", out, re.M)
    assert re.search(r"reference: one solve at θ0 .* by SciPy BDF, rtol 1e-12, .*: [0-9.e-]+ s,", out)
    assert f"next: sciml-bench run --problem-file {SIR} --quick" in out


def test_a_shipped_problem_by_name_as_run_takes_it() -> None:
    code, out = _check("stiff-robertson", "--no-reference")
    assert code == 0, out
    assert "dy3/dt = k2*y2^2" in out and "reference:" not in out
    assert re.search(r"torchdiffeq +torch +.*no stiff solver", out)
    code, out = _check("stiff-robertsn")
    assert code == 2 and "did you mean 'stiff-robertson'?" in out


def test_an_array_problem_prints_its_operators() -> None:
    code, out = _check("stiff-brusselator-2d", "--no-reference")
    assert code == 0, out
    assert "lap(u, periodic)" in out and "every element of the 8 x 8 grid: 128 states" in out


def test_a_reference_that_cannot_solve_exits_2_with_the_reason() -> None:
    # sqrt of a state that goes negative: BDF's LU refuses the NaN Jacobian (a ValueError
    # that once escaped as a traceback), then LSODA's states turn non-finite
    code, out = _check("--problem-file", str(DATA / "singular-jacobian.toml"))
    assert code == 2, out
    assert "Error: the reference solve failed: BDF at rtol 1e-12: " in out
    assert "ValueError: array must not contain infs or NaNs" in out and "Traceback" not in out


def test_full_builds_the_reference_a_run_then_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCIML_BENCH_CACHE", str(tmp_path))
    code, out = _check("--problem-file", str(DATA / "decay.toml"), "--full")
    assert code == 0 and re.search(r"reference: built in [0-9.]+ s, cached", out), out
    assert "gradient: forward sensitivities" in out and len(list(tmp_path.glob("decay-*.json"))) == 1
    code, out = _check("--problem-file", str(DATA / "decay.toml"), "--full")
    assert code == 0 and "reference: read from the cache" in out


def test_in_a_fresh_process_the_error_goes_to_stderr_with_exit_status_2() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "sciml_bench.cli.main", "check", "--problem-file",
         str(DATA / "check" / "stray-key.toml")],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 2 and r.stdout == ""
    assert "did you mean 'I'?" in r.stderr and "Traceback" not in r.stderr


def test_the_worked_example_in_docs_is_the_checked_file() -> None:
    """docs/problems.md's worked example is tests/data/sir.toml, so the test above runs it."""
    doc = (ROOT / "docs" / "problems.md").read_text()
    section = doc.split("## Your own model", 1)[1]
    block = re.search(r"```toml\n(.*?)```", section, re.S)
    assert block is not None
    body = SIR.read_text().split("\n", 1)[1]  # the file's first line says where it is from
    assert block.group(1) == body


def _fails(text: str) -> str:
    with pytest.raises(spec.ProblemError) as e:
        spec.loads(text, source="my.toml")
    return str(e.value)


SIR_TEXT = SIR.read_text()


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("[tolerances]", "[tolerance]", "[tolerance]: unknown key (allowed: definitions"),
        ("[tolerances]", "[tolerance]", "did you mean 'tolerances'?"),
        ("rtol = 1.0e-6", "rtl = 1.0e-6", "[tolerances.rtl]: unknown key (allowed: rtol, atol); "
         "did you mean 'rtol'?"),
        ('stiff = false\n', 'stiff = false\nrtol = 1e-6\n', "[rtol]: unknown key (allowed: "),
        ('stiff = false\n', 'stiff = false\nrtol = 1e-6\n', "write it under [tolerances]"),
        ('stiff = false\n', '', "[stiff]: missing; add stiff = true"),
        ('kind = "fit"', 'kind = "Fit"', "did you mean 'fit'?"),
        ("gamma = 0.1 ", 'gamma = "0.1"', "[parameters.gamma]: expected a number, got str; "
         "write it without quotes: 0.1"),
        ("c = 0.4 }", "k = 0.4 }", "unknown parameter(s) ['k'] (parameters: beta, gamma, c)"),
        ("tanh((t - 40)/5))/2)*S*I\"\nI", "tahn((t - 40)/5))/2)*S*I\"\nI",
         "call of 'tahn' at position 18 is not allowed (allowed functions: abs, cos, cosh, exp, "
         "log, sin, sinh, sqrt, tan, tanh); did you mean 'tanh'?"),
        ('\nR = "gamma*I"', '', "no equation for state 'R'; add R = \"...\" under [equations]"),
        ('\nR = "gamma*I"', '\nR = "gamma*I"\nD = "0"', "[equations.D]: equation for 'D', which "
         "is not a state (states: S, I, R); add it to [state] names"),
    ],
)  # fmt: skip
def test_parser_errors_suggest_the_fix(old: str, new: str, message: str) -> None:
    assert old in SIR_TEXT
    assert message in _fails(SIR_TEXT.replace(old, new, 1))


def test_stray_keys_pair_with_the_missing_names_they_were_meant_as() -> None:
    assert hints.pair_strays(["h", "n"], ["hh", "x"]) == [("hh", "h")]
    assert hints.pair_strays(["V"], ["v"]) == [("v", "V")]  # case first
    assert hints.pair_strays(["k1"], ["k9"]) == []  # not close enough to pair
    assert hints.did_you_mean("radau", ("Radau", "BDF")) == "; did you mean 'Radau'?"
    assert hints.missing("networks.nn.layers") == "missing; add layers = ... under [networks.nn]"


def _doc_section(title: str) -> str:
    doc = (ROOT / "docs" / "problems.md").read_text()
    return doc.split(title, 1)[1].split("\n## ", 1)[0]


def test_the_docs_name_every_key_the_parser_reads() -> None:
    """docs/problems.md alone is enough to write a file: every top-level key and every
    section's key (the parser's own lists) is in its table, and every function in the
    grammar in its Expressions section."""
    from sciml_bench.problem import expr
    from sciml_bench.problem.arrays import FUNCTIONS as ARRAY_FUNCTIONS
    from sciml_bench.problem.arrays import OPERATORS

    table = _doc_section("### Every section and key")
    keys = [*spec._TOP_KEYS, *(k for ks in spec._SECTION_KEYS.values() for k in ks),
            "layers", "activation", "inputs", "output_scale", "seed", "value", "log"]  # fmt: skip
    assert [k for k in keys if k not in _code_words(table)] == []
    sections = [s for s in spec._TOP_KEYS if s not in ("name", "description", "stiff")]
    # a section, or an array of tables (``[[events]]``)
    assert [s for s in sections if f"`[{s}" not in table and f"`[[{s}" not in table] == []
    grammar = _code_words(_doc_section("## Expressions"))
    assert [f for f in [*expr.FUNCTIONS, *ARRAY_FUNCTIONS, *OPERATORS] if f not in grammar] == []


def _code_words(text: str) -> set[str]:
    """The words inside the text's `code spans`."""
    return {w for span in re.findall(r"`([^`]*)`", text) for w in re.findall(r"\w+", span)}
