"""Van der Pol's quick end-to-end run, with tests/test_problem_library.py's checks of the
other problems' runs (the same test functions, imported).

A file of its own because its setup is the suite's longest (the tight Radau reference, six
solves of ~30,000 steps at rtol 1e-11), and ``--dist loadfile`` runs each file whole in one
process: here it runs beside the other problems' runs instead of after them.
"""

from __future__ import annotations

import pytest
from test_problem_library import (
    quick_records,
    test_quick_run_diffrax_gradient_agrees_with_the_reference,
    test_quick_run_scipy_solves,
    test_quick_run_torchdiffeq_ends_cleanly,
)

#: pytest collects the imported tests here, where ``quick_run`` is Van der Pol's run
__all__ = [
    "test_quick_run_diffrax_gradient_agrees_with_the_reference",
    "test_quick_run_scipy_solves",
    "test_quick_run_torchdiffeq_ends_cleanly",
]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, dict]]:
    return quick_records("stiff-vanderpol", tmp_path_factory)
