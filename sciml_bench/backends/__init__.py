"""The backends under test, one module per library.

This registry names them without importing anything heavy: a backend's
module imports its library only when a case is built.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sciml_bench.backends.base import Backend

#: backend name -> (module, class); the order is the display order
REGISTRY: dict[str, tuple[str, str]] = {
    "scipy": ("sciml_bench.backends.scipy", "ScipyBackend"),
    "diffrax": ("sciml_bench.backends.diffrax", "DiffraxBackend"),
    "torchdiffeq": ("sciml_bench.backends.torchdiffeq", "TorchdiffeqBackend"),
    "torchode": ("sciml_bench.backends.torchode", "TorchodeBackend"),
    "cvodes": ("sciml_bench.backends.cvodes", "CvodesBackend"),
    "diffsol": ("sciml_bench.backends.diffsol", "DiffsolBackend"),
    "amici": ("sciml_bench.backends.amici", "AmiciBackend"),
    "roadrunner": ("sciml_bench.backends.roadrunner", "RoadrunnerBackend"),
    "julia": ("sciml_bench.backends.julia", "JuliaBackend"),
}


class UnknownBackend(KeyError):
    def __str__(self) -> str:
        return f"unknown backend {self.args[0]!r}; choose from {', '.join(REGISTRY)}"


def get(name: str) -> Backend:
    if name not in REGISTRY:
        raise UnknownBackend(name)
    module, cls = REGISTRY[name]
    return getattr(importlib.import_module(module), cls)()


def names() -> list[str]:
    return list(REGISTRY)
