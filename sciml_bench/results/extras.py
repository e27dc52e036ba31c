"""Optional dependencies: one check, one line naming the extra that installs them.

The first quick-start install is ``.[torch,jax]``; figures need matplotlib and
data frames need pandas (the ``report`` extra). Without this check, the first
``sciml-bench report`` after that install ended in a 30-line
``ModuleNotFoundError``. Every place that imports an optional library outside
a backend calls :func:`require`; the CLI turns :class:`MissingExtra` into its
usual one-line error (exit status 2), and the Python API raises it with the
same message and no chained traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message says which extra installs it."""


def require(module: str, extra: str, needed_for: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtra` naming ``extra``.

    ``needed_for`` completes "… needs MODULE", e.g. ``"sciml-bench report"``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        top = module.split(".")[0]
        # a broken install (one of its own dependencies missing) names that one too
        detail = f" ({e})" if e.name and e.name.split(".")[0] != top else ""
        raise MissingExtra(
            f"{needed_for} needs {top}, which is not installed{detail}. "
            f"Fix: pip install -c constraints.txt -e '.[{extra}]'"
        ) from None


def check(module: str, extra: str, needed_for: str) -> None:
    """As :func:`require`, without importing: for a check before work starts."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a None in sys.modules
        found = False
    if not found:
        require(module, extra, needed_for)  # raises the same one line
