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
