"""The protocol registry and the axis registry load in either order (issue 68): each of them, a
protocol's module and the axes' modules is imported first in a fresh interpreter, and none of them
needs the other half-loaded. The registry imports the axis registry to check what it registers;
nothing the axis registry imports asks the registry back (no hook list it fills while it loads, no
import inside a function holding a loop)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import iomatrix.domain.spellings as spellings

FIRST = (
    "iomatrix.protocols",
    "iomatrix.protocol_registry",
    "iomatrix.domain.axes",
    "iomatrix.domain.network_axes",
    "iomatrix.domain.local_axes",
    "iomatrix.protocols.iscsi",
    "iomatrix.protocols.rbd",
    "iomatrix.backing.leftovers",
)


@pytest.mark.parametrize("module", FIRST)
def test_imported_first_in_a_fresh_interpreter(module: str) -> None:
    code = (
        f"import {module}\n"
        "from iomatrix.protocols import protocol_names\n"
        "from iomatrix.domain import axes\n"
        "print(protocol_names(), 'rtt' in axes.REGISTRY)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "['iscsi', 'nbd', 'nfs', 'rbd'] True", out.stdout


def test_no_hook_list_is_left_for_a_registry_to_fill() -> None:
    assert not hasattr(spellings, "WRITER_SOURCES") and not hasattr(spellings, "PROTOCOL_LOOKUP")
