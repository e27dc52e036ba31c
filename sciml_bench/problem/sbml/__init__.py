"""SBML in and out, one room beside the problem format: :mod:`.read` makes a problem
table of an SBML model (:mod:`.refuse` what it cannot be, :mod:`.mathml` its math,
:mod:`.facts` and :mod:`.odes` its equations, :mod:`.problem_file` the file a user edits),
and :mod:`.write` an SBML model of a problem. Nothing downstream knows a problem came
from SBML. python-libsbml is imported only inside the functions that need it."""
