"""Each tool's snippet read back by that tool's `--current` reader gives the configuration it was
written for (issue 36: a format's writer and reader agree, checked in one place): libvirt's domain
XML, QEMU's command line and Proxmox's `qm set` (as the VM's config file lines it produces), over
every format × cache × aio × bus a snippet can be written for and the device axes the tools spell.

One documented difference: QEMU's command line of a lone scsi disk on its own controller is the same
for virtio-scsi and virtio-scsi-single (vmconfig/qemu.py), so it reads back as virtio-scsi."""

from __future__ import annotations

import itertools
import shlex
from pathlib import Path

import pytest

from iomatrix.current import parse_current
from iomatrix.domain import Aio, Bus, CacheMode, Format
from iomatrix.errors import UserError
from iomatrix.snippets import DiskConfig, snippets_for
from iomatrix.vmconfig.libvirt import minimal_domain_xml

FIRST = ("format", "cache", "aio", "bus")
LATER = ({}, {"detect_zeroes": "unmap", "discard": "unmap"}, {"iothread": "on"})


def _configs() -> list[dict[str, str]]:
    out = []
    for fmt, cache, aio, bus, later in itertools.product(
        (Format.RAW, Format.QCOW2), CacheMode, Aio, Bus, LATER
    ):
        axes = {
            "format": fmt.value,
            "preallocation": "off",
            "cache": cache.value,
            "aio": aio.value,
            "bus": bus.value,
            **later,
        }
        try:
            DiskConfig.from_axes(axes)
        # a combination no snippet is written for (aio=native without O_DIRECT)
        except (UserError, ValueError):
            continue
        out.append(axes)
    return out


CONFIGS = _configs()


def _read_back(tool: str, text: str, tmp_path: Path) -> dict[str, str]:
    if tool == "libvirt":
        path = tmp_path / "vm.xml"
        path.write_text(minimal_domain_xml(text))  # the snippet is what goes inside a domain
        return parse_current(str(path)).axes
    # `qm set VMID --KEY VALUE …` writes "KEY: VALUE" lines into the VM's config file
    if tool == "proxmox":
        words = shlex.split(text.replace("\\\n", " "))[3:]
        path = tmp_path / "100.conf"
        path.write_text(
            "".join(
                f"{words[i].removeprefix('--')}: {words[i + 1]}\n" for i in range(0, len(words), 2)
            )
        )
        return parse_current(str(path)).axes
    return parse_current(text).axes


@pytest.mark.parametrize("tool", ["libvirt", "qemu", "proxmox"])
def test_every_snippet_reads_back_as_the_configuration_it_was_written_for(
    tool: str, tmp_path: Path
) -> None:
    assert len(CONFIGS) > 300
    wrong, read = [], 0
    for axes in CONFIGS:
        snippet = snippets_for(DiskConfig.from_axes(axes), f"/images/vm.{axes['format']}").by_tool(
            tool
        )
        # the tool cannot spell this configuration (said in the snippet's note)
        if snippet.text is None:
            continue
        got = _read_back(tool, snippet.text, tmp_path)
        read += 1
        want = dict(axes)
        if tool == "qemu" and want["bus"] == Bus.VIRTIO_SCSI_SINGLE.value:
            want["bus"] = Bus.VIRTIO_SCSI.value  # the same command line (module docstring)
        diff = {
            k: (v, got.get(k)) for k, v in want.items() if k != "preallocation" and got.get(k) != v
        }
        if diff:
            wrong.append(f"{axes}: {diff}")
    assert read > 100, read
    assert wrong == [], f"{len(wrong)} of {read} do not read back; first: {wrong[:3]}"
