"""Shell snippets fit 100 columns: long QEMU and virt-install words continue at their commas (issue
38: the QEMU line was 208 characters, virt-install's 133), and a shell reads them back as the very
same words."""

from __future__ import annotations

import subprocess

import pytest

from iomatrix.snippets import SNIPPET_WIDTH, DiskConfig, qemu_argv, shell_word, snippets_for
from tests.conftest import needs
from tests.test_snippets_pinned import _cases


def shell_words(text: str) -> list[str]:
    """The words bash reads from a snippet (continuations, quotes and all), as a user pasting it
    gets them."""
    res = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {text}"], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.split("\0")[:-1]


def _configs() -> list[tuple[DiskConfig, str | None]]:
    out = []
    for cell, backing, path in _cases():
        try:
            out.append((DiskConfig.from_axes(cell, backing), path))
        except Exception:  # (a refused combination: no snippet)
            continue
    for extra in (
        {"iothread": "on", "queues": "4", "discard": "unmap", "bus": "virtio-scsi-single"},
        {"iothread": "vq-mapping", "queues": "2", "l2_cache": "whole-image", "detect_zeroes": "on"},
    ):
        cell = {
            "format": "qcow2",
            "preallocation": "metadata",
            "cache": "none",
            "aio": "native",
            "bus": "virtio-blk",
            **extra,
        }
        out.append(
            (
                DiskConfig.from_axes(cell, "dir"),
                "/var/lib/libvirt/images/a-rather-long-image-name.qcow2",
            )
        )
    return out


CONFIGS = _configs()


def test_every_line_of_every_shell_snippet_fits() -> None:
    widest = 0
    for cfg, path in CONFIGS:
        for tool in ("qemu", "virt-install", "qemu-img", "proxmox"):
            text = snippets_for(cfg, path).by_tool(tool).text or ""
            widest = max(widest, *(len(line) for line in text.splitlines() or [""]))
    assert widest <= SNIPPET_WIDTH, widest


@needs("bash")
@pytest.mark.parametrize("index", range(0, len(CONFIGS), 7))
def test_a_shell_reads_the_wrapped_qemu_snippet_as_the_measured_arguments(index: int) -> None:
    cfg, path = CONFIGS[index]
    assert shell_words(snippets_for(cfg, path).by_tool("qemu").text or "") == qemu_argv(cfg, path)


@needs("bash")
def test_a_word_that_needs_quoting_stays_one_word() -> None:
    value = "driver=qcow2,file.filename=/srv/vm images/a,,b's.qcow2," + ",".join(
        f"k{i}=v{i}" for i in range(30)
    )
    text = shell_word("-blockdev ", value, width=60)
    assert max(len(line) for line in text.splitlines()) <= 60 and text.count("\n") > 2
    assert shell_words(text) == ["-blockdev", value]
