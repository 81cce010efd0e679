"""Measured durability: what survives a power loss or a QEMU crash, per disk configuration.

The pure parts live here: the record format the guest writer uses and its host-side verifier
(:mod:`.records`), and the rule that turns trials into a verdict compared with QEMU's documented
semantics (:mod:`.verdict`). The tier that runs trials is :mod:`iomatrix.tiers.durability`."""
