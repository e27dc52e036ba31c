"""A run's plan, and turning it into processes and records.

``plan`` makes a run's plan from its parsed options (``options``): the problems
(``problems``, ``sizes``), the checks against what exists (``plan_checks``) and the
generated sources its backends declare; ``execute`` carries it out into one results
file. ``runner`` plans the cases and assembles one record per case, ``executor``
turns a job into a measured process, ``worker`` runs inside that process,
and ``jobs`` is the small interface through which each kind of job (ODE
case, CNN variant) supplies its own worker and record code. Nothing outside
``run/`` (and the command line) imports this package.
"""
