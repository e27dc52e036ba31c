"""The ``sciml-bench`` command line: ``main`` (run, show, list, codegen,
reference), ``report`` (report, compare, export) and ``julia`` (setup, status).
"""
