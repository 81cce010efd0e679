"""Consolidation tiles (the consolidation article): how many guests a host carries with a given
cache mode.

Pure parts of the consolidation tier: the plan table (`spec`), the guest roles a tile is made of and
the jobs they run (`roles`), the memory arithmetic that refuses plans the host cannot hold
(`memory`), and the host view of one sweep point (`hostview`). The tier itself is
`iomatrix.tiers.consolidation`; the answer ("how many tiles stay within the slowdown bound") is
`iomatrix.stats.consolidation`."""
