"""What an SBML file may not be, refused before anything runs, each with one line.

Two kinds of refusal:

* a hostile file, checked on its raw bytes before libsbml parses them: larger than
  :data:`MAX_BYTES`, more than :data:`MAX_ELEMENTS` elements, or any ``<!DOCTYPE`` /
  ``<!ENTITY`` declaration. SBML needs neither, and they are how an XML file expands
  entities without bound ("billion laughs") or reads other files and URLs (external
  entities), so no parser setting has to be trusted to stop them;
* a model outside what a problem file can state: events, algebraic rules, delays,
  ``rateOf``, fast reactions, variable stoichiometry, SBML packages (``comp``, ``fbc``,
  ...). Each refusal names the element's id and what is missing, as a
  :class:`SBMLError` (a :class:`~sciml_bench.problem.spec.ProblemError`, so the command
  line prints it as one line and exits 2).
"""

from __future__ import annotations

import re
from typing import Any

from sciml_bench.problem.spec import ProblemError

#: the largest SBML file read (BioModels' largest curated ODE models are a few MB)
MAX_BYTES = 20_000_000
#: the most XML elements (start tags) a file may hold
MAX_ELEMENTS = 200_000

_DECLARATION = re.compile(rb"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)
_START_TAG = re.compile(rb"<[A-Za-z_]")


class SBMLError(ProblemError):
    """An SBML file that cannot become a problem: ``file: [element 'id']: reason``."""


def check_bytes(raw: bytes, source: str) -> str:
    """The file's text, once it is known to be small, flat and free of declarations;
    else :class:`SBMLError`."""
    if len(raw) > MAX_BYTES:
        raise SBMLError(source, "file", f"{len(raw):,} bytes is over the {MAX_BYTES:,} "
                        "read (a model of millions of elements is refused)")  # fmt: skip
    found = _DECLARATION.search(raw)
    if found:
        kind = found.group(1).decode().upper()
        raise SBMLError(source, "file", f"an XML <!{kind}> declaration at byte {found.start()}: "
                        "SBML needs none, and entity declarations can expand without bound "
                        "or read other files; remove it")  # fmt: skip
    n = len(_START_TAG.findall(raw))
    if n > MAX_ELEMENTS:
        raise SBMLError(source, "file", f"{n:,} XML elements, over the {MAX_ELEMENTS:,} read")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SBMLError(source, "file", f"not UTF-8 text: {e}") from None


def check_document(doc: Any, source: str) -> None:
    """Any package (only SBML core is read), then libsbml's own errors."""
    import libsbml

    # first: a package's own validity errors would hide what is missing
    for package in _packages(doc):
        raise SBMLError(source, f"package '{package}'", f"the SBML package '{package}' is not "
                        "supported: only SBML core models (Levels 2 and 3) are read")  # fmt: skip
    for i in range(doc.getNumErrors()):
        err = doc.getError(i)
        if err.getSeverity() >= libsbml.LIBSBML_SEV_ERROR:
            line = err.getLine()
            message = " ".join(err.getMessage().split())
            raise SBMLError(source, "file", f"not valid SBML (line {line}): {message}")
    if doc.getModel() is None:
        raise SBMLError(source, "model", "the file holds no model")
    if doc.getLevel() < 2:
        raise SBMLError(source, "file", "SBML Level 1 is not read; convert it to Level 2 or 3")


def _packages(doc: Any) -> list[str]:
    """The SBML Level 3 packages the document declares (by their namespaces; Level 3
    Version 2's extended math is core, whatever libsbml calls it)."""
    found = []
    spaces = doc.getNamespaces()
    for i in range(spaces.getNumNamespaces() if spaces is not None else 0):
        uri = spaces.getURI(i)
        m = re.match(r"http://www\.sbml\.org/sbml/level3/version\d+/([^/]+)/", uri)
        if m and m.group(1) != "core":
            found.append(m.group(1))
    return found


def check_model(model: Any, source: str) -> None:
    """The model-level constructs no problem file can state."""
    if model.getNumEvents():
        event = model.getEvent(0)
        raise SBMLError(source, f"event '{event.getId() or 0}'", "events are not supported: "
                        "a problem file has no discontinuity at a trigger")  # fmt: skip
    for i in range(model.getNumRules()):
        rule = model.getRule(i)
        if rule.isAlgebraic():
            raise SBMLError(source, f"algebraic rule {i + 1}", "algebraic rules are not "
                            "supported: a problem file states ODEs, not a DAE")  # fmt: skip
    for i in range(model.getNumReactions()):
        reaction = model.getReaction(i)
        if reaction.isSetFast() and reaction.getFast():
            raise SBMLError(source, f"reaction '{reaction.getId()}'", "fast reactions are not "
                            "supported: their quasi-steady state is an algebraic constraint")  # fmt: skip
        if not reaction.isSetKineticLaw() or not reaction.getKineticLaw().isSetMath():
            raise SBMLError(source, f"reaction '{reaction.getId()}'",
                            "a reaction without a kinetic law has no rate")  # fmt: skip


def variable_stoichiometry(source: str, element: str) -> SBMLError:
    """The refusal of a stoichiometry that changes in time."""
    return SBMLError(source, element, "variable stoichiometry is not supported: a problem "
                     "file's reaction terms have constant coefficients")  # fmt: skip
