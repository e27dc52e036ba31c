"""Everything that reads and shows stored results.

``store`` owns the HDF5 schema (writing and reading), ``table`` the terminal
table, ``plots`` and ``publish`` the figures and the md/html report,
``compare`` run-to-run comparisons, ``export`` JSON/CSV.

``sciml_bench.results.load`` and ``read`` are the Python API.
"""

from sciml_bench.results.store import ResultsError, Run, load, read

__all__ = ["ResultsError", "Run", "load", "read"]
