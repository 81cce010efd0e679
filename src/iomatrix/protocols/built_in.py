"""The built-in protocols' classes: every module of this package imported, and the NetworkProtocol
subclasses each defines (not the ones it imports), in module name order.

Its own module, apart from the registry (:mod:`iomatrix.protocols`): the axis registry reads the
protocols' axes from these classes as it loads (`NetworkProtocol.axes`), and the protocol registry
imports the axis registry to check what it registers; asking the registry package itself would close
that loop. Nothing is checked or registered here."""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
from pathlib import Path

from iomatrix.protocols.base import NetworkProtocol

# (this module's package, read without importing it: its __init__ imports this module)
_PACKAGE = __name__.rpartition(".")[0]


@functools.cache
def protocol_classes() -> tuple[type[NetworkProtocol], ...]:
    """The protocol classes the modules of this package define, by module name."""
    found: list[type[NetworkProtocol]] = []
    for mod in pkgutil.iter_modules([str(Path(__file__).parent)]):
        module = importlib.import_module(f"{_PACKAGE}.{mod.name}")
        found += [
            obj
            for _, obj in inspect.getmembers(module, inspect.isclass)
            if issubclass(obj, NetworkProtocol)
            and obj.__module__ == module.__name__
            and not inspect.isabstract(obj)
        ]
    return tuple(found)
