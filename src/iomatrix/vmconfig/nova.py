"""OpenStack Nova: the disk's snippet writer (nova.conf ``[libvirt]`` lines and image properties).
Written only: iomatrix does not read a Nova configuration back."""

from __future__ import annotations

from iomatrix.domain import (
    BackingKind,
    Modifier,
    axes,
)
from iomatrix.domain.spellings import NOVA_BACKEND_KEYS
from iomatrix.vmconfig.config import DiskConfig, Snippet, _not_available, _partition

# Nova: image properties (openstack image set --property) are hw_*; the rest are nova.conf [libvirt]
# lines, of which images_type and preallocate_images concern instance disks that are image files.
NOVA_IMAGE_PROPERTY_PREFIX = "hw_"
NOVA_IMAGE_FILE_KEYS = NOVA_BACKEND_KEYS
# a list of SOURCE=MODE: the source (file, block) is the snippet's backing
NOVA_CACHE_KEY = "disk_cachemodes"


def image_property_line(props: list[tuple[str, str]]) -> str:
    """The comment line that sets Nova's per-image properties (bus, SCSI model, …): they live on
    the image, not in nova.conf."""
    return (
        "# image property: openstack image set "
        + "".join(f"--property {k}={v} " for k, v in props)
        + "IMAGE"
    )


def nova_snippet(cfg: DiskConfig) -> Snippet:
    title = "OpenStack Nova (nova.conf on each compute node, and the image's bus)"
    skip = NOVA_IMAGE_FILE_KEYS if cfg.backing == BackingKind.BLOCK else ()
    opts, notes, unavailable = axes.tool_options(cfg.axis_values(), "nova", skip_keys=skip)
    if unavailable:
        return Snippet("nova", title, None, _not_available(unavailable), "ini")
    source = "block" if cfg.backing == BackingKind.BLOCK else "file"
    props, conf = _partition(opts, lambda k: k.startswith(NOVA_IMAGE_PROPERTY_PREFIX))
    # the cache mode, what was measured above all, first
    conf.sort(key=lambda kv: kv[0] != NOVA_CACHE_KEY)
    lines = [
        "[libvirt]",
        *(f"{k} = {source}={v}" if k == NOVA_CACHE_KEY else f"{k} = {v}" for k, v in conf),
    ]
    if props:
        lines.append(image_property_line(props))
    if cfg.modifier == Modifier.EATMYDATA:
        notes.append(
            "eatmydata cannot be expressed: Nova has no setting for the QEMU binary a guest runs"
        )
    return Snippet("nova", title, "\n".join(lines), "; ".join(notes), "ini")
