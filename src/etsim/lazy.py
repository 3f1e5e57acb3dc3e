"""Packages whose public names load their modules only when first used.

A package ``__init__`` that re-exports heavy submodules (lxml, numpy, networkx) would make every import of one
of its light modules pay for all of them: importing ``etsim.producers.tacos.source`` imports the package first.
Such a package lists where each name lives and sets ``__getattr__ = lazy_attributes(__name__, HOMES)``
(PEP 562); type checkers read the same names from an ``if TYPE_CHECKING:`` block of imports.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

__all__ = ["lazy_attributes"]


def lazy_attributes(package: str, homes: Mapping[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for *package*: name → ``getattr(import package.<homes[name]>, name)``."""

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{home}"), name)

    return __getattr__
