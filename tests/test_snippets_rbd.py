"""Snippets for Ceph RBD disks (issue 35): libvirt's <disk type="network"> with protocol="rbd", its
monitors and cephx <auth>, checked by the real virt-xml-validate; QEMU's -blockdev driver=rbd, whose
options the real qemu-io accepts (QEMU 7.2's BlockdevOptionsRbd); Proxmox's rbd: storage with krbd
0|1; ceph.conf's [client] cache lines, read back by the real ceph-conf through Ceph's option schema;
and `rbd create --object-size`, checked against rbd's own help."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from iomatrix.backing.provision import provision
from iomatrix.backing.rbd import LabRbdServer, RbdBacking
from iomatrix.domain import axes
from iomatrix.protocols.place import NetworkPlace
from iomatrix.protocols.rbd import pool_of, rbd_device, rbd_name, rbd_order
from iomatrix.snippets import DiskConfig, minimal_domain_xml, snippet_backing, snippets_for
from iomatrix.vmconfig.read_rbd import WRITETHROUGH_UNTIL_FLUSH
from tests.conftest import needs

CELL = {
    "tier": "blocklayer",
    "format": "raw",
    "preallocation": "off",
    "cache": "writeback",
    "aio": "threads",
    "bus": "virtio-blk",
    "modifier": "none",
}
PLACE = NetworkPlace()
POOL = pool_of(PLACE)  # the placeholder's pool (Ceph's default pool: it names none)


def _snippets(**more: str) -> dict[str, tuple[str | None, str]]:
    cfg = DiskConfig.from_axes({**CELL, **more}, "rbd")
    # the first snippet of each tool, as SnippetSet.by_tool gives it (a storage may have more than
    # one)
    return {s.tool: (s.text, s.note) for s in reversed(snippets_for(cfg).snippets)}


def _validate(disks: list[str], tmp_path: Path) -> None:
    body = "\n".join(d.replace('dev="vda"', f'dev="vd{chr(97 + i)}"') for i, d in enumerate(disks))
    path = tmp_path / "domain.xml"
    path.write_text(minimal_domain_xml(body))
    res = subprocess.run(
        ["virt-xml-validate", str(path), "domain"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr + path.read_text()


@needs("virt-xml-validate")
def test_librbd_disks_are_valid_libvirt_xml(tmp_path: Path) -> None:
    disks = [
        _snippets(format=fmt, cache=cache)["libvirt"][0]
        for fmt in ("raw", "qcow2")
        for cache in ("none", "writeback")
    ]
    assert all(d is not None and 'protocol="rbd"' in d for d in disks)
    _validate([d or "" for d in disks], tmp_path)


@needs("virt-xml-validate")
def test_krbd_disks_are_valid_libvirt_xml(tmp_path: Path) -> None:
    disks = [
        _snippets(rbd_client="krbd", aio=aio, cache="none")["libvirt"][0] or ""
        for aio in ("threads", "native")
    ]
    assert all(f'<source dev="{rbd_device(PLACE)}" />' in d and 'type="block"' in d for d in disks)
    _validate(disks, tmp_path)


def test_libvirt_names_the_image_its_monitor_and_its_cephx_user() -> None:
    text, note = _snippets()["libvirt"]
    assert text is not None and '<disk type="network" device="disk">' in text
    assert f'<source protocol="rbd" name="{rbd_name(PLACE)}">' in text
    assert f'<host name="{PLACE.host}" port="6789" />' in text
    assert f'<auth username="{PLACE.ceph_user}">' in text
    assert f'<secret type="ceph" uuid="{PLACE.secret_uuid}" />' in text
    assert 'io="' not in text  # aio is the file protocol's: QEMU's rbd driver has none
    assert "librbd" in note and "virsh secret-set-value" in note and "ceph.conf snippet" in note


def test_qemu_blockdev_opens_the_image_with_the_rbd_driver() -> None:
    text = (_snippets(format="qcow2")["qemu"][0] or "").replace("\\\n", "")
    assert (
        f"file.driver=rbd,file.pool={POOL},file.image={PLACE.image},file.conf="
        f"{PLACE.ceph_conf},"
        f"file.user={PLACE.ceph_user}"
    ) in text
    assert "file.aio" not in text and "file.filename" not in text


@needs("qemu-io")
def test_qemu_io_accepts_every_option_of_the_blockdev(tmp_path: Path) -> None:
    # QEMU checks the options against BlockdevOptionsRbd before it reads the conf file: a missing
    # conf file is the first error only where every option name is QEMU's (an unknown one:
    # "Parameter '…' is unexpected").
    blockdev = (_snippets()["qemu"][0] or "").replace("\\\n", "").split()[1]
    missing = tmp_path / "absent.conf"
    opts = blockdev.replace(PLACE.ceph_conf, str(missing)).replace("node-name=disk0,", "")
    res = subprocess.run(
        ["qemu-io", "--image-opts", opts, "-c", "quit"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode != 0 and f"error reading conf file {missing}" in res.stderr, res.stderr


def test_proxmox_rbd_storage_and_disk_line() -> None:
    text, note = _snippets()["proxmox"]
    assert text is not None
    assert (
        f"rbd: ceph-vm\n\tpool {POOL}\n\tmonhost {PLACE.host}\n\tusername {PLACE.ceph_user}\n"
        "\tcontent images\n\tkrbd 0\n"
    ) in text
    assert (
        "--virtio0 ceph-vm:32,cache=writeback" in text
        and "aio=" not in text
        and "format=" not in text
    )
    assert (
        "krbd 0: QEMU's own librbd client, as measured" in note
        and "/etc/pve/priv/ceph/ceph-vm.keyring" in note
    )
    qcow2 = _snippets(format="qcow2")["proxmox"]
    assert qcow2[0] is None and "raw images only" in qcow2[1]


def test_proxmox_krbd_storage() -> None:
    text, note = _snippets(rbd_client="krbd", aio="native", cache="none")["proxmox"]
    assert text is not None and "\tkrbd 1" in text and "aio=native" in text
    assert "krbd 1: the host kernel's rbd client" in note


def test_ceph_conf_client_lines_at_cephs_defaults() -> None:
    text, note = _snippets()["ceph"]
    assert text == (
        "[client]\nrbd cache = true\nrbd cache policy = writearound\n"
        "rbd cache writethrough until flush = true"
    )
    assert "every librbd client of that host" in note and WRITETHROUGH_UNTIL_FLUSH in note
    # QEMU sets rbd cache itself, over the file
    assert "cache=none and directsync turn it off" in note


def test_ceph_conf_lines_follow_the_cell_and_say_their_risk() -> None:
    text, note = _snippets(rbd_cache_policy="writeback", rbd_cache_writethrough_until_flush="off")[
        "ceph"
    ]
    assert text is not None and "rbd cache policy = writeback" in text
    assert "rbd cache writethrough until flush = false" in text
    assert "client crash" in note or "crash of the client host" in note
    assert "also for a guest that never flushes" in note and WRITETHROUGH_UNTIL_FLUSH not in note
    none = _snippets(cache="none")["ceph"][1]
    assert "with cache=none QEMU turns librbd's cache off for this disk" in none


def _ceph_value(conf: Path, option: str) -> str:
    res = subprocess.run(
        [
            "ceph-conf",
            "-c",
            str(conf),
            "--name",
            f"client.{PLACE.ceph_user}",
            "--show-config-value",
            option,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


@needs("ceph-conf")
@pytest.mark.parametrize("policy", ["writeback", "writethrough", None])
def test_ceph_conf_reads_the_client_lines(policy: str | None, tmp_path: Path) -> None:
    # ceph-conf reads the file through Ceph's option schema (an unknown policy falls back to the
    # default): the values it shows are the ones written, so the option names and values are Ceph's
    # own.
    more = (
        {"rbd_cache_policy": policy, "rbd_cache_writethrough_until_flush": "off"} if policy else {}
    )
    text = _snippets(**more)["ceph"][0] or ""
    conf = tmp_path / "ceph.conf"
    conf.write_text(text + "\n")
    assert _ceph_value(conf, "rbd_cache_policy") == (policy or "writearound")
    assert _ceph_value(conf, "rbd_cache_writethrough_until_flush") == (
        "false" if policy else "true"
    )
    assert _ceph_value(conf, "rbd_cache") == "true"


def test_rbd_create_sets_the_object_size() -> None:
    text, note = _snippets()["rbd"]
    assert (
        text == f"rbd create --id {PLACE.ceph_user} --size 32G --object-size 4M "
        f"{POOL}/{PLACE.image}"
    )
    assert "fixed when it is created" in note
    img = _snippets()["qemu-img"]
    assert img[0] is None and "rbd create snippet" in img[1]


def test_a_qcow2_image_on_rbd_is_created_by_qemu_img_with_the_object_size() -> None:
    rbd, note = _snippets(format="qcow2")["rbd"]
    assert rbd is None and "rbd_default_order" in note
    img = _snippets(format="qcow2")["qemu-img"][0] or ""
    assert (
        f"rbd:{POOL}/{PLACE.image}:id={PLACE.ceph_user}:conf={PLACE.ceph_conf}"
        ":rbd_default_order=22" in img.replace("\\\n", "")
    )


@needs("qemu-img")
def test_qemu_img_accepts_the_rbd_filenames_ceph_options(tmp_path: Path) -> None:
    # QEMU hands the rbd: filename's options to librados after reading the conf file: with an empty
    # one, a Ceph option it does not know fails as "invalid conf option" and a valid one reaches the
    # connection (no monitor).
    img = (_snippets(format="qcow2")["qemu-img"][0] or "").replace("\\\n", "").split()
    empty = tmp_path / "ceph.conf"
    empty.write_text("")
    for target, expected in (
        (img[4], "error connecting"),
        (img[4] + ":rbd_no_such_option=1", "invalid conf option"),
    ):
        argv = [*img[:4], target.replace(PLACE.ceph_conf, str(empty)), "1G"]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert res.returncode != 0 and expected in res.stderr, (argv, res.stderr)


@pytest.mark.parametrize(
    ("size", "order"), [("4M", 22), ("1M", 20), ("16M", 24), ("512K", 19), ("4194304", 22)]
)
def test_object_sizes_as_orders(size: str, order: int) -> None:
    assert rbd_order(size) == order


@pytest.mark.parametrize("size", ["3M", "64M", "1K", "big"])
def test_object_sizes_rbd_refuses(size: str) -> None:
    with pytest.raises(ValueError, match="power of two from 4K to 32M"):
        rbd_order(size)


def test_rbd_create_follows_the_cells_object_size() -> None:
    value = next(
        v for v in axes.get("rbd_object_size").values if v != axes.get("rbd_object_size").default
    )
    assert f"--object-size {value} " in (_snippets(rbd_object_size=value)["rbd"][0] or "")


@needs("rbd")
def test_rbd_knows_the_create_options_the_snippet_uses() -> None:
    words = (_snippets()["rbd"][0] or "").split()
    create = subprocess.run(["rbd", "help", "create"], capture_output=True, text=True, timeout=120)
    # global: --id
    every = subprocess.run(["rbd", "--help"], capture_output=True, text=True, timeout=120)
    assert create.returncode == 0, create.stderr
    assert words[:2] == ["rbd", "create"]
    for option in (w for w in words if w.startswith("--")):
        assert f"{option} " in create.stdout + every.stdout, option


def test_nova_puts_the_instance_disk_on_ceph() -> None:
    text, note = _snippets(bus="virtio-scsi")["nova"]
    assert text is not None and text.startswith("[libvirt]\ndisk_cachemodes = network=writeback\n")
    assert (
        f"images_type = rbd\nimages_rbd_pool = {POOL}\nimages_rbd_ceph_conf = "
        f"{PLACE.ceph_conf}\n"
        f"rbd_user = {PLACE.ceph_user}\nrbd_secret_uuid = {PLACE.secret_uuid}"
    ) in text
    assert (
        "images_type = raw" not in text
        and "hw_disk_bus=scsi" in text
        and "rbd default order" in note
    )
    assert (
        _snippets(format="qcow2")["nova"][0] is None
        and "raw images" in _snippets(format="qcow2")["nova"][1]
    )
    assert _snippets(rbd_client="krbd")["nova"][0] is None


def test_tools_that_cannot_write_an_rbd_disk_say_so() -> None:
    snippets = _snippets()
    assert (
        snippets["virt-install"][0] is None
        and "a Ceph RBD network disk" in snippets["virt-install"][1]
    )
    assert "tgt" not in snippets
    krbd = _snippets(rbd_client="krbd")["ceph"]
    assert krbd[0] is None and "no librbd cache" in krbd[1]


def test_a_stored_rbd_backing_gives_its_protocol_to_the_snippets() -> None:
    assert snippet_backing({"backing_type": "rbd", "kind": "network"}) == "rbd"


def _on_lab(text: str, conf: Path, pool: str) -> str:
    """A snippet's words with the placeholder conf and pool made the lab cluster's."""
    return (
        text.replace("\\\n", "")
        .replace(PLACE.ceph_conf, str(conf))
        .replace(f"{POOL}/", f"{pool}/")
        .replace(f"file.pool={POOL},", f"file.pool={pool},")
    )


def _rbd_info(conf: Path, pool: str) -> str:
    res = subprocess.run(
        ["rbd", "-c", str(conf), "info", f"{pool}/{PLACE.image}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def _qemu_io_round_trip(blockdev: str) -> None:
    opts = blockdev.replace("node-name=disk0,", "")
    res = subprocess.run(
        [
            "qemu-io",
            "--image-opts",
            opts,
            "-c",
            "write -P 0xcd 1048576 65536",
            "-c",
            "flush",
            "-c",
            "read -P 0xcd 1048576 65536",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (
        res.returncode == 0
        and "wrote 65536/65536" in res.stdout
        and "read 65536/65536" in res.stdout
        and "Pattern verification failed" not in res.stdout
    ), res.stdout + res.stderr


@pytest.mark.slow
@needs("ceph-mon")
@needs("ceph-osd")
@needs("qemu-io")
def test_the_snippets_make_and_open_an_image_on_a_real_cluster(tmp_path: Path) -> None:
    # A lab-started one-node cluster (the rbd backing, memstore); the ceph.conf snippet's [client]
    # lines appended to its conf as a client host's; the raw image made by the rbd create snippet
    # and the qcow2 one by the qemu-img snippet, each with the cell's object size (rbd info's
    # order); both opened by qemu-io with the QEMU snippet's own -blockdev, a pattern written,
    # flushed and read back through librbd.
    cell = {"rbd_cache_policy": "writeback", "rbd_cache_writethrough_until_flush": "off"}
    with provision(RbdBacking(store="memstore"), tmp_path / "wd", set()) as handle:
        server = handle.server
        assert isinstance(server, LabRbdServer)
        pids, pool = server.server_pids(), server.pool
        conf = tmp_path / "client.conf"
        conf.write_text(
            server.conf.read_text() + "\n" + (_snippets(**cell)["ceph"][0] or "") + "\n"
        )
        assert _ceph_value(conf, "rbd_cache_policy") == "writeback"

        raw = _snippets(rbd_object_size="1M", **cell)
        words = _on_lab(raw["rbd"][0] or "", conf, pool).split()
        made = subprocess.run(
            [words[0], "-c", str(conf), *words[1:]], capture_output=True, text=True, timeout=120
        )
        assert made.returncode == 0, made.stderr
        assert "order 20 (1 MiB objects)" in _rbd_info(conf, pool)
        _qemu_io_round_trip(_on_lab(raw["qemu"][0] or "", conf, pool).split()[1])
        subprocess.run(
            ["rbd", "-c", str(conf), "rm", f"{pool}/{PLACE.image}"],
            capture_output=True,
            timeout=120,
        )

        qcow2 = _snippets(format="qcow2", rbd_object_size="16M", **cell)
        created = subprocess.run(
            _on_lab(qcow2["qemu-img"][0] or "", conf, pool).split(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert created.returncode == 0, created.stderr
        assert "order 24 (16 MiB objects)" in _rbd_info(conf, pool)
        _qemu_io_round_trip(_on_lab(qcow2["qemu"][0] or "", conf, pool).split()[1])
        subprocess.run(
            ["rbd", "-c", str(conf), "rm", f"{pool}/{PLACE.image}"],
            capture_output=True,
            timeout=120,
        )
    for pid in pids:  # the cluster is stopped with the backing
        assert (
            not Path(f"/proc/{pid}").exists()
            or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
        )


# --------------------------------------------------------------------------- every librbd setting
# the answer makes


def _all(**more: str) -> list:
    return snippets_for(DiskConfig.from_axes({**CELL, **more}, "rbd")).snippets


def _image_config(**more: str) -> str:
    return next(s.text or "" for s in _all(**more) if s.title.startswith("rbd config image set"))


def test_rbd_config_image_set_writes_the_cells_cache_settings_for_the_one_image() -> None:
    lines = _image_config(
        rbd_cache_policy="writeback", rbd_cache_writethrough_until_flush="off"
    ).splitlines()
    assert lines == [
        f"rbd config image set --id {PLACE.ceph_user} {rbd_name(PLACE)} rbd_cache_policy writeback",
        f"rbd config image set --id {PLACE.ceph_user} {rbd_name(PLACE)} "
        "rbd_cache_writethrough_until_flush false",
    ]
    # rbd_cache is QEMU's to set from its cache mode: never written per image
    assert "rbd_cache " not in _image_config()
    krbd = next(s for s in _all(rbd_client="krbd") if s.title.startswith("rbd config image set"))
    assert krbd.text is None and "krbd" in krbd.note


@needs("rbd")
def test_rbd_knows_config_image_set_and_its_options() -> None:
    usage = subprocess.run(
        ["rbd", "help", "config", "image", "set"], capture_output=True, text=True, timeout=120
    )
    # global: --id
    every = subprocess.run(["rbd", "--help"], capture_output=True, text=True, timeout=120)
    assert usage.returncode == 0, usage.stderr
    assert "<image-spec> <key> <value>" in " ".join(usage.stdout.split())
    for line in _image_config(rbd_cache_writethrough_until_flush="off").splitlines():
        words = line.split()
        assert words[:4] == ["rbd", "config", "image", "set"]
        assert f"{words[4]} " in every.stdout  # --id
        assert len(words) == 9  # --id USER, POOL/IMAGE, KEY, VALUE


@needs("ceph-conf")
@pytest.mark.parametrize("policy", ["writeback", "writethrough"])
def test_the_image_settings_are_cephs_own_options_and_values(policy: str, tmp_path: Path) -> None:
    # Each KEY VALUE of `rbd config image set`, written as a ceph.conf line, reads back through
    # Ceph's option schema as written: the keys are Ceph's option names and the values ones it
    # accepts.
    for line in _image_config(
        rbd_cache_policy=policy, rbd_cache_writethrough_until_flush="off"
    ).splitlines():
        key, value = line.split()[-2:]
        conf = tmp_path / f"{key}.conf"
        conf.write_text(f"[client]\n{key} = {value}\n")
        assert _ceph_value(conf, key) == value


def test_the_ceph_conf_snippet_sums_its_settings_in_one_line() -> None:
    ceph = next(s for s in _all(rbd_cache_writethrough_until_flush="off") if s.tool == "ceph")
    assert ceph.summary == (
        "ceph.conf [client]: rbd cache = true, rbd cache policy = writearound, rbd cache "
        "writethrough until flush = false"
    )
    assert not next(s for s in _all(rbd_client="krbd") if s.tool == "ceph").summary
