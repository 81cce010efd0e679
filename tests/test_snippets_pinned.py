"""Every tool's snippet, pinned byte for byte over a representative set of disk configurations.

`tests/data/snippets/pinned.json` holds what `snippets_for` produced (title, text, note and language
of every tool's snippet, the configuration's label and assumed axes) for every format × a few cache
modes × every aio × every bus × a file and a block backing × no modifier and eatmydata, every
preallocation of every format with every cache mode, cells whose tier did not vary some axes ("-"),
snippets for a given path, and the one-line errors of refused combinations. A change to any of them
is a change to what users paste: if it is meant, regenerate the file with `write_pinned()` and say
why in the commit.

Snippets repeat across configurations (Proxmox's does not depend on the path, the eatmydata wrapper
never changes), so the file stores each distinct snippet once and each configuration the indices of
its snippets."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from iomatrix import domain
from iomatrix.domain import NA, Aio, Bus, CacheMode, Format, Modifier
from iomatrix.errors import UserError
from iomatrix.snippets import DiskConfig, snippets_for

PINNED = Path(__file__).parent / "data" / "snippets" / "pinned.json"
CACHES = (CacheMode.NONE, CacheMode.WRITEBACK, CacheMode.UNSAFE)
BACKING_TYPES = ("dir", "lvm")  # an image file on a filesystem; a whole block device


def _cases() -> list[tuple[dict[str, str], str, str | None]]:
    """(a cell's axes, its backing type, the snippet's path or None for the default path)."""
    out: list[tuple[dict[str, str], str, str | None]] = []
    for fmt, cache, aio, bus, backing, modifier in itertools.product(
        Format, CACHES, Aio, Bus, BACKING_TYPES, Modifier
    ):
        axes = {
            "format": fmt.value,
            "preallocation": "off",
            "cache": cache.value,
            "aio": aio.value,
            "bus": bus.value,
            "modifier": modifier.value,
        }
        out.append((axes, backing, None))
    # Every preallocation of every format, on both backings, with every cache mode.
    for fmt, cache, backing in itertools.product(Format, CacheMode, BACKING_TYPES):
        for pre in domain.PREALLOCATIONS[fmt][1:]:
            axes = {
                "format": fmt.value,
                "preallocation": pre.value,
                "cache": cache.value,
                "aio": "threads",
                "bus": "virtio-scsi",
                "modifier": "none",
            }
            out.append((axes, backing, None))
    # A tier that does not vary format, preallocation, bus or the modifier (bare metal,
    # consolidation).
    out.append(
        (
            {"format": NA, "preallocation": NA, "cache": "writeback", "aio": "threads", "bus": NA},
            "dir",
            None,
        )
    )
    out.append(
        (
            {
                "format": NA,
                "preallocation": NA,
                "cache": "none",
                "aio": "native",
                "bus": NA,
                "modifier": NA,
            },
            "lvm",
            None,
        )
    )
    out.append(
        (
            {
                "format": "qcow2",
                "preallocation": "metadata",
                "cache": "directsync",
                "aio": "io_uring",
                "bus": "virtio-scsi",
                "modifier": "eatmydata",
            },
            "dir",
            "/srv/vm images/a,b.qcow2",
        )
    )
    out.append(
        (
            {
                "format": "raw",
                "preallocation": "off",
                "cache": "none",
                "aio": "native",
                "bus": "sata",
            },
            "blockdev",
            "/dev/mapper/vg-vm'1",
        )
    )
    return out


def _case_id(axes: dict[str, str], backing: str, path: str | None) -> str:
    return (
        ",".join(f"{k}={v}" for k, v in axes.items())
        + f",backing={backing}"
        + (f",path={path}" if path else "")
    )


def render_all() -> dict[str, Any]:
    """Every case's snippets as the pinned file stores them (invalid combinations: the error's one
    line)."""
    distinct: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    configs: dict[str, Any] = {}
    for axes, backing, path in _cases():
        try:
            cfg = DiskConfig.from_axes(axes, backing)
        except UserError as e:
            configs[_case_id(axes, backing, path)] = {"error": e.one_line()}
            continue
        sset = snippets_for(cfg, path).as_dict()
        refs = []
        for s in sset["snippets"]:
            key = json.dumps(s, sort_keys=True)
            if key not in index:
                index[key] = len(distinct)
                distinct.append(s)
            refs.append(index[key])
        configs[_case_id(axes, backing, path)] = {
            "label": sset["config"],
            "assumed": sset["assumed"],
            "snippets": refs,
        }
    return {"configs": configs, "snippets": distinct}


def write_pinned() -> None:
    PINNED.parent.mkdir(parents=True, exist_ok=True)
    PINNED.write_text(json.dumps(render_all(), indent=0, sort_keys=True) + "\n")


def _expand(data: dict[str, Any]) -> dict[str, Any]:
    return {
        case: (
            c if "error" in c else {**c, "snippets": [data["snippets"][i] for i in c["snippets"]]}
        )
        for case, c in data["configs"].items()
    }


def test_every_snippet_is_byte_identical_to_the_pinned_one() -> None:
    pinned = _expand(json.loads(PINNED.read_text()))
    now = _expand(render_all())
    # Every pinned configuration still prints the same (configurations new since, e.g. a new bus,
    # are not pinned).
    assert pinned.keys() <= now.keys()
    now = {k: now[k] for k in pinned}
    assert len([c for c in pinned.values() if "error" not in c]) > 350
    for case, expected in pinned.items():
        assert now[case] == expected, case


def test_the_pin_covers_what_it_claims() -> None:
    # The comparison above can fail on each tool: the pinned set holds available and unavailable
    # snippets of every tool, eatmydata's wrapper, and refused combinations.
    pinned = _expand(json.loads(PINNED.read_text()))
    tools = {
        (s["tool"], s["text"] is None)
        for c in pinned.values()
        if "snippets" in c
        for s in c["snippets"]
    }
    for tool in ("libvirt", "proxmox", "virt-install", "nova", "qemu-img"):
        assert (tool, False) in tools and (tool, True) in tools, tool
    assert ("qemu", False) in tools and ("qemu-wrapper", False) in tools
    errors = {c["error"] for c in pinned.values() if "error" in c}
    assert any("aio=native needs O_DIRECT" in e for e in errors)
    assert any("eatmydata would change nothing" in e for e in errors)
    assert any("the backing is a whole block device" in e for e in errors)
