"""libvirt storage pools for every network storage (issue 49): iscsi-direct (QEMU's libiscsi) or
iscsi (the kernel's open-iscsi), netfs for NFS and rbd for Ceph, with <auth> placeholders that name
a libvirt secret by its usage (never a credential), each validated by the real virt-xml-validate
against libvirt's storagepool schema."""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from iomatrix.protocols.place import NetworkPlace
from iomatrix.protocols.rbd import pool_of
from iomatrix.snippets import DiskConfig, Snippet, snippets_for
from tests.conftest import needs

CELL = {
    "tier": "blocklayer",
    "format": "raw",
    "preallocation": "off",
    "cache": "none",
    "aio": "threads",
    "bus": "virtio-blk",
    "modifier": "none",
}
PLACE = NetworkPlace()
POOLS = [
    ("iscsi", {}, "iscsi-direct"),
    ("iscsi", {"initiator": "kernel"}, "iscsi"),
    ("nfs", {}, "netfs"),
    ("nfs", {"nfs_client": "kernel"}, "netfs"),
    ("rbd", {}, "rbd"),
]


def _pool(backing: str, **more: str) -> Snippet:
    cfg = DiskConfig.from_axes({**CELL, **more}, backing)
    return next(s for s in snippets_for(cfg).snippets if s.title.startswith("libvirt storage pool"))


@needs("virt-xml-validate")
@pytest.mark.parametrize(("backing", "more", "kind"), POOLS)
def test_every_pool_is_valid_libvirt_storagepool_xml(
    backing: str, more: dict[str, str], kind: str, tmp_path: Path
) -> None:
    pool = _pool(backing, **more)
    assert pool.tool == "libvirt" and pool.language == "xml" and pool.text is not None
    path = tmp_path / "pool.xml"
    path.write_text(pool.text + "\n")
    res = subprocess.run(
        ["virt-xml-validate", str(path), "storagepool"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stdout + res.stderr + pool.text
    assert ET.fromstring(pool.text).get("type") == kind


@needs("virt-xml-validate")
def test_the_validator_refuses_a_broken_pool(tmp_path: Path) -> None:
    # the check above can fail: an iscsi-direct pool without its initiator is not libvirt's
    text = _pool("iscsi").text or ""
    root = ET.fromstring(text)
    source = root.find("source")
    assert source is not None
    source.remove(source.find("initiator"))  # type: ignore[arg-type]
    path = tmp_path / "pool.xml"
    path.write_text(ET.tostring(root, encoding="unicode"))
    res = subprocess.run(
        ["virt-xml-validate", str(path), "storagepool"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode != 0


@pytest.mark.parametrize(
    ("backing", "more", "auth_type", "username"),
    [
        ("iscsi", {}, "chap", "CHAP-USER"),
        ("iscsi", {"initiator": "kernel"}, "chap", "CHAP-USER"),
        ("rbd", {}, "ceph", PLACE.ceph_user),
    ],
)
def test_auth_names_a_secret_by_its_usage_never_a_credential(
    backing: str, more: dict[str, str], auth_type: str, username: str
) -> None:
    pool = _pool(backing, **more)
    auth = ET.fromstring(pool.text or "").find("source/auth")
    assert auth is not None and auth.get("type") == auth_type and auth.get("username") == username
    secret = auth.find("secret")
    assert secret is not None and set(secret.attrib) == {"usage"}
    assert secret.get("usage") in pool.note  # the note says which secret to define
    assert "secret-define" in pool.note


def test_each_pool_points_at_the_storage_the_disk_is_on() -> None:
    source = ET.fromstring(_pool("iscsi").text or "").find("source")
    assert source is not None
    assert source.find("device").get("path") == PLACE.iqn  # type: ignore[union-attr]
    assert source.find("host").get("port") == str(PLACE.port)  # type: ignore[union-attr]
    rbd = ET.fromstring(_pool("rbd").text or "")
    assert rbd.findtext("source/name") == pool_of(PLACE)
    nfs = ET.fromstring(_pool("nfs").text or "")
    assert nfs.find("source/dir").get("path") == PLACE.export  # type: ignore[union-attr]
    assert nfs.find("source/protocol").get("ver") == "3"  # type: ignore[union-attr]
    assert nfs.findtext("target/path") == PLACE.mount


def test_a_pool_for_a_client_not_measured_says_so() -> None:
    libnfs = " ".join(_pool("nfs").note.split())
    assert "a netfs pool is a kernel NFS mount, which iomatrix did not measure" in libnfs
    assert "nfs(5) warns that a soft timeout can cause silent data corruption" in libnfs
    assert "as measured" in _pool("nfs", nfs_client="kernel").note
    krbd = _pool("rbd", rbd_client="krbd")
    assert krbd.text is None and "none needed" in krbd.note


def test_the_disk_stays_the_libvirt_targets_first_snippet() -> None:
    # the headline shows a target's first snippet: the <disk>, the pool after it
    cfg = DiskConfig.from_axes(CELL, "rbd")
    assert (snippets_for(cfg).by_tool("libvirt").text or "").startswith("<disk")
