"""Van der Pol's quick end-to-end run, with tests/test_problem_library.py's checks of the
other problems' runs (the same test functions, imported).

A file of its own because its setup is the suite's longest (the tight Radau reference at
rtol 1e-11), and ``--dist loadfile`` runs each file whole in one process: here it runs beside
the other problems' runs instead of after them.

The run is the shipped problem cut to its first relaxation jump (t in (0, 1.3), five save
points, each >= 0.1 from the jump at t = 0.807): the same equations, parameters, tolerances,
step bound and reference solution settings, so the same hard fold for Diffrax's gradient
(the full problem's seven jumps run in the published main run,
``benchmarks/publish_results.py``). The reference's gradient pair runs at rtol 1e-9 and 1e-8
(``gradient_rtol = 1e-9``) instead of the shipped 1e-10 and 1e-9: measured 2026-12-07 on the
2-core machine, the reference took 7 s instead of 38 s, its error estimate 8.0e-7 (1.4e-6
at 1e-10, where the central-difference check bounds it), and Diffrax's row the same error
(0.547) and tier (fail).
"""

from __future__ import annotations

import pytest
from test_problem_library import (
    quick_records,
    test_quick_run_diffrax_gradient_agrees_with_the_reference,
    test_quick_run_scipy_solves,
    test_quick_run_torchdiffeq_ends_cleanly,
)

from sciml_bench.problem.spec import problems_dir

#: pytest collects the imported tests here, where ``quick_run`` is Van der Pol's run
__all__ = [
    "test_quick_run_diffrax_gradient_agrees_with_the_reference",
    "test_quick_run_scipy_solves",
    "test_quick_run_torchdiffeq_ends_cleanly",
]


#: the shipped file's lines that the cut changes, and what they become
CUT = {
    'name = "stiff-vanderpol"': 'name = "stiff-vanderpol-first-jump"',
    "span = [0.0, 6.3]": "span = [0.0, 1.3]",
    "save = { linspace = [0.1, 6.3, 32] }": "save = { linspace = [0.1, 1.3, 5] }",
    "gradient_rtol = 1.0e-10": "gradient_rtol = 1.0e-9",
}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, dict]]:
    text = (problems_dir() / "stiff-vanderpol.toml").read_text()
    for old, new in CUT.items():
        assert text.count(old) == 1, f"problems/stiff-vanderpol.toml no longer has {old!r}"
        text = text.replace(old, new)
    path = tmp_path_factory.mktemp("vanderpol") / "stiff-vanderpol-first-jump.toml"
    path.write_text(text)
    return quick_records("stiff-vanderpol", tmp_path_factory, str(path))
