"""The network protocol registry: one module per protocol in :mod:`iomatrix.protocols`, found as
tiers are.

A protocol's house is one module of that package (``iscsi``, ``nbd``, ``nfs``, ``rbd``) defining a
subclass of :class:`iomatrix.protocols.base.NetworkProtocol`, or an installed package's class named
in the ``iomatrix.protocols`` entry point group::

    [project.entry-points."iomatrix.protocols"]
    nbd = "mypackage.nbd:Nbd"

The registry reads both once, when it is first asked, and checks each protocol: a NetworkProtocol
subclass with every method written, a name a plan and libvirt can take, and no name already taken
(an installed protocol never replaces a built-in one), and no key of a tool's spelling an axis
writes (its QEMU protocol node, its Nova lines: `axes.network_writers`). What it refuses is one
line (a PluginError), not a traceback. Generic code asks :func:`protocol` /
:func:`network_protocol` and calls what it gets instead of comparing names.

It sits above the axis registry (:mod:`iomatrix.domain.axes`), which it imports to check what it
registers: the axis registry reads the built-in protocols' axes and writers from their classes
(`protocols.built_in`) and never asks this module; an installed protocol's writers this registry
hands it when it registers one (`axes.add_protocol_writers`)."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

from iomatrix.domain import axes as axis_registry
from iomatrix.plugins import PluginError, load_entry_points, load_object
from iomatrix.protocols.base import NAME_PATTERN, NetworkProtocol
from iomatrix.protocols.built_in import ENTRY_POINT_GROUP, protocol_classes

_PROTOCOLS: dict[str, NetworkProtocol] = {}
_discovered = False


def _problem(cls: Any) -> str | None:
    """Why `cls` cannot be registered as a protocol, or None."""
    if not (isinstance(cls, type) and issubclass(cls, NetworkProtocol)):
        return f"{cls!r} is no NetworkProtocol subclass"
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        return f"{cls.__name__} does not write {missing}"
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        return (
            f"{cls.__name__}.name {name!r} is not a protocol name (lower case letters, digits, '_')"
        )
    unset = [
        a
        for a in (
            "title",
            "client_axis",
            "kernel_client",
            "userspace_library",
            "server_noun",
            "is_volume",
            "spec",
        )
        if not hasattr(cls, a)
    ]
    if unset:
        return f"{cls.__name__} sets no {', '.join(unset)}"
    return None


def _spelling_problem(network: NetworkProtocol) -> str | None:
    """Why `network` cannot be registered: a key it writes is a registered axis's, or None."""
    for writer in axis_registry.network_writers(network):
        if (why := axis_registry.writer_collision(writer)) is not None:
            return why
    return None


def _unregistered_axes(cls: type[NetworkProtocol]) -> str | None:
    """Why an installed protocol cannot be registered: it lists axes (`axes`) the axis registry does
    not hold, which it reads of the built-in protocols only, as it loads (an installed package's
    come through the iomatrix.axes entry point); None where it lists none (or a built-in's)."""
    registry = axis_registry.REGISTRY
    missing = [a.name for a in cls.axes if registry.get(a.name) is not a]
    if not missing:
        return None
    return (
        f"{cls.__name__}.axes lists {', '.join(missing)}, which no axis registry holds: an "
        "installed protocol's axes are registered through the iomatrix.axes entry point"
    )


def _register(cls: type[NetworkProtocol], where: str, installed: bool = False) -> None:
    if (why := _problem(cls) or (_unregistered_axes(cls) if installed else None)) is not None:
        raise PluginError(f"{where}: {why}; fix or uninstall the package that declares it")
    if cls.name in _PROTOCOLS:
        taken = _PROTOCOLS[cls.name]
        raise PluginError(
            f"{where} declares protocol '{cls.name}', a name {type(taken).__module__} "
            "already has; rename the protocol or uninstall the package that declares it"
        )
    network = cls()
    if (why := _spelling_problem(network)) is not None:
        raise PluginError(f"{where}: {why}; fix or uninstall the package that declares it")
    _PROTOCOLS[cls.name] = network
    if installed:
        # (the built-in protocols' writers the axis registry reads itself, as it loads)
        axis_registry.add_protocol_writers(network)


def _discover() -> dict[str, NetworkProtocol]:
    global _discovered
    if not _discovered:
        # (first: a package's module that asks the registry as it loads finds it)
        _discovered = True
        try:
            for cls in protocol_classes():
                _register(cls, f"protocol module {cls.__module__}")
            for entry_name, cls in load_entry_points(ENTRY_POINT_GROUP):
                _register(cls, f"entry point {ENTRY_POINT_GROUP}:{entry_name}", installed=True)
        except BaseException:
            # Asked again, the same refusal: never a registry quietly missing the refused
            # package.
            _discovered = False
            for name in _PROTOCOLS:
                axis_registry.drop_protocol_writers(name)
            _PROTOCOLS.clear()
            raise
    return _PROTOCOLS


def protocol(name: str) -> NetworkProtocol:
    """The protocol named `name` (a KeyError naming the known ones for another name)."""
    try:
        return _discover()[name]
    except KeyError:
        raise KeyError(
            f"no network protocol named '{name}'; known: {', '.join(protocol_names())}"
        ) from None


def network_protocol(name: str | None) -> NetworkProtocol | None:
    """The protocol named `name`, or None for a local backing (None, 'file', 'dir', …)."""
    return None if name is None else _discover().get(name)


def is_network(name: str | None) -> bool:
    """Whether `name` (a backing type, a disk's kind) is a network protocol's."""
    return network_protocol(name) is not None


def protocols() -> list[NetworkProtocol]:
    """Every registered protocol, by name."""
    return [p for _, p in sorted(_discover().items())]


def protocol_names() -> list[str]:
    return sorted(_discover())


def kernel_fs_types() -> frozenset[str]:
    """The kernel filesystem types every protocol's kernel client mounts (an NFS mount's)."""
    return frozenset(t for p in protocols() for t in p.kernel_fs_types)


def snippet_targets() -> list[str]:
    """The storage-side tools every protocol writes snippets for (ceph.conf, tgt, …), in registry
    order: `recommend --target` takes them beside the VM tools."""
    return list(dict.fromkeys(t for p in protocols() for t in p.snippet_targets))


def spec_class(name: str) -> type:
    """The backing spec (a pydantic model) of the protocol named `name`, imported on first use."""
    return load_object(protocol(name).spec)


@contextlib.contextmanager
def registered(*classes: type[NetworkProtocol]) -> Iterator[None]:
    """Make `classes` known for the duration of the block only (a test's protocol), checked as an
    installed one is; a name already taken is refused."""
    registry = _discover()
    for cls in classes:
        if (why := _problem(cls) or _unregistered_axes(cls)) is not None or cls.name in registry:
            raise PluginError(why or f"protocol '{cls.name}' is already registered")
        if (why := _spelling_problem(cls())) is not None:
            raise PluginError(why)
    for cls in classes:
        registry[cls.name] = cls()
        axis_registry.add_protocol_writers(registry[cls.name])
    try:
        yield
    finally:
        for cls in classes:
            axis_registry.drop_protocol_writers(cls.name)
            registry.pop(cls.name, None)
