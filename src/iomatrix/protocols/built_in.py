"""The built-in protocols' classes: every module of this package imported, and the NetworkProtocol
subclasses each defines (not the ones it imports), in module name order.

Its own module, apart from the registry (:mod:`iomatrix.protocol_registry`): the axis registry
reads the protocols' axes and writers from these classes as it loads (`NetworkProtocol.axes`), and
the axes' rules ask a backing's protocol what it allows (`known_protocol`); the protocol registry
imports the axis registry to check what it registers, so asking the registry here would close that
loop.
Nothing is checked or registered here."""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
from pathlib import Path

from iomatrix.plugins import PluginError, load_entry_points
from iomatrix.protocols.base import NetworkProtocol

# (this module's package)
_PACKAGE = __name__.rpartition(".")[0]
# The entry-point group through which an installed package adds a protocol (iomatrix.plugins).
ENTRY_POINT_GROUP = "iomatrix.protocols"


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


@functools.cache
def _known() -> dict[str, NetworkProtocol]:
    found = {cls.name: cls() for cls in protocol_classes()}
    try:
        installed = load_entry_points(ENTRY_POINT_GROUP)
    except PluginError:
        installed = []  # the registry refuses it, in one line, when a plan names it
    for _, cls in installed:
        if isinstance(cls, type) and issubclass(cls, NetworkProtocol) and cls.name not in found:
            found[cls.name] = cls()
    return found


def known_protocol(name: str | None) -> NetworkProtocol | None:
    """The protocol class named `name` (built-in, or an installed package's), as an instance, for
    the axes' rules to ask what it allows of a backing; None for a local backing. Not checked as
    the registry checks it (iomatrix.protocol_registry): a protocol it refuses never serves a
    plan's backing, so no rule is asked about it."""
    return None if name is None else _known().get(name)
