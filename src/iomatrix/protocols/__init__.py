"""Network protocols as plug-ins: one module per protocol (``iscsi``, ``nbd``, ``nfs``, ``rbd``),
each a :class:`iomatrix.protocols.base.NetworkProtocol` subclass with its spellings; its lab half
and its reader are the modules it names (``spec``, ``reader``: at most three modules in all).

The registry that finds them (built-in and installed) is :mod:`iomatrix.protocol_registry`; its
names are re-exported here, each imported when first asked (`iomatrix.lazy_names`), so that
importing a protocol's module, as the axis registry does to read the protocols' axes, does not load
the registry, which imports the axis registry to check what it registers."""

from __future__ import annotations

from iomatrix.lazy_names import lazy_names

_REGISTRY = "iomatrix.protocol_registry"
_WHERE = {
    name: _REGISTRY
    for name in (
        "ENTRY_POINT_GROUP",
        "is_network",
        "kernel_fs_types",
        "network_protocol",
        "protocol",
        "protocol_names",
        "protocols",
        "registered",
        "snippet_targets",
        "spec_class",
    )
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_names(__name__, _WHERE)
