"""Turning a case matrix into processes and records.

``runner`` plans the cases and assembles one record per case, ``executor``
turns a job into a measured process, ``worker`` runs inside that process,
and ``jobs`` is the small interface through which each kind of job (ODE
case, CNN variant) supplies its own worker and record code. Nothing outside
``run/`` (and the command line) imports this package.
"""
