"""Short cell names when a later axis (named in a label only away from its default) varies within a
tier: the cells at its default read as the default, so the axis tells the cells apart instead of
reading as shared."""

from __future__ import annotations

from iomatrix.report.naming import cell_names

BLOCK = "format=qcow2 preallocation=off cache=none aio=threads backing=dir"
GUEST = "format=qcow2 preallocation=off cache=none aio=threads bus=virtio-blk backing=dir"


def test_a_later_axis_at_its_default_is_named_beside_its_other_values() -> None:
    labels = [
        BLOCK,
        f"{BLOCK} detect_zeroes=on",
        f"{BLOCK} cluster_size=1M",
        f"{BLOCK} detect_zeroes=on cluster_size=1M",
    ]
    names = cell_names(labels)
    assert names.varying == ("detect_zeroes", "cluster_size")
    assert (
        "detect_zeroes" not in names.constant_text() and "cluster_size" not in names.constant_text()
    )
    assert [names.of(x) for x in labels] == [
        "detect_zeroes=off · 64k",
        "detect_zeroes=on · 64k",
        "detect_zeroes=off · 1M",
        "detect_zeroes=on · 1M",
    ]


def test_a_later_axis_one_tier_sweeps_is_not_filled_into_another_tiers_cells() -> None:
    # The guests (labels with a bus) never named detect_zeroes: they are not given it; the block
    # layer's are.
    labels = [BLOCK, f"{BLOCK} detect_zeroes=on", GUEST]
    names = cell_names(labels)
    assert names.of(BLOCK).endswith("detect_zeroes=off") and names.of(
        f"{BLOCK} detect_zeroes=on"
    ).endswith("detect_zeroes=on")
    assert "detect_zeroes" not in names.of(GUEST)


def test_labels_without_later_axes_are_named_as_before() -> None:
    labels = [BLOCK, BLOCK.replace("none", "writeback", 1)]
    assert [cell_names(labels).of(x) for x in labels] == ["cache=none", "writeback"]
    assert (
        cell_names(labels).constant_text()
        == "format=qcow2 preallocation=off aio=threads backing=dir"
    )


def test_an_axis_sharing_a_word_with_another_is_named_in_full_for_every_value() -> None:
    """rbd_cache_policy's writeback is also a cache mode: the axis is named in full for writearound
    too, so that its cells read alike (issue 70: 'writearound' stood beside
    'rbd_cache_policy=writeback')."""
    rbd = "format=raw preallocation=off aio=threads backing=rbd"
    labels = [
        f"{rbd} cache=none",
        f"{rbd} cache=writeback rbd_cache_policy=writearound",
        f"{rbd} cache=writeback rbd_cache_policy=writeback",
    ]
    names = cell_names(labels)
    assert [names.of(x) for x in labels] == [
        "cache=none · rbd_cache_policy=writearound",
        "cache=writeback · rbd_cache_policy=writearound",
        "cache=writeback · rbd_cache_policy=writeback",
    ]


def test_the_null_ceiling_names_no_other_cell_in_full() -> None:
    """A null-co ceiling's format=null backing=null share a word, which is never bare: the other
    cells keep their bare names (the quick sweep's 'blocklayer · raw · cache=none · dir')."""
    labels = [
        "tier=blocklayer format=raw preallocation=off cache=none aio=threads backing=dir",
        "tier=blocklayer format=qcow2 preallocation=off cache=writeback aio=threads backing=dir",
        "tier=blocklayer format=null preallocation=off cache=none aio=threads backing=null",
    ]
    names = cell_names(labels)
    assert [names.of(x) for x in labels] == [
        "raw · cache=none · dir",
        "qcow2 · writeback · dir",
        "format=null · cache=none · backing=null",
    ]
