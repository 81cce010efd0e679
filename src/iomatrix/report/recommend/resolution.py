"""What an answer says when the sweep could not tell its cells apart (issue 71): the interval it
reached, the property the pick rests on, and how many minutes more would settle it.

Every role ends with one configuration and one of three statuses: decided (shown better),
equivalent (within the margin, TOST: stats/equivalence.py) or not told apart at this resolution.
The last never prints a round count (a user cannot act on "1272 more rounds"): the decision's
estimate of the rounds still needed (stats/decision.py, power 0.8) becomes minutes through the time
one round of the two cells took in this sweep, and the plan's budget that would buy them.

Worked example (a quickstart, tests/data/quickstart-roles): the file server's job ran 44 runs of
2.35 s on average in a sweep of 240 s whose runs add up to 232 s (set-up and boots: a factor of
1.03); one round of its deciding pair is two runs, 2 × 2.35 × 1.03 = 4.8 s; "about 60 more rounds"
is 60 × 4.8 s ≈ 5 minutes: with time_budget = "4m", a budget of "9m" would settle it."""

from __future__ import annotations

from collections.abc import Mapping

# the rounds → minutes arithmetic lives in report/settle_time.py (rank's notes use it too)
from iomatrix.report.settle_time import minutes_text as minutes_text
from iomatrix.report.settle_time import run_seconds as run_seconds
from iomatrix.report.settle_time import settle_text as settle_text
from iomatrix.stats.decision import safety_key

# The three statuses every answer ends with, by the decision's own status (roles.STATUS_WORDS).
RESOLUTION = {
    "answer": "decided",
    "equivalent": "equivalent",
    "tied": "not told apart at this resolution",
    "provisional": "not told apart at this resolution",
}

# What each format offers a user, the reason a tie between formats is broken as it is.
FORMAT_PROPERTY = {
    "raw": "raw: the simpler format, nothing between the guest and the file",
    "qcow2": "qcow2: snapshots and thin provisioning",
}


def pick_reason(pick: Mapping[str, str], rival: Mapping[str, str] | None, keeper: str = "") -> str:
    """The property a pick among cells not told apart rests on, in the decision's tie-break order
    (stats/decision.py: safety, keeper, simplicity): power-loss safety where the rival is less
    safe; `keeper` ("what you run", "QEMU's default") where the pick keeps it and the rival
    changes the cache or aio; else what the pick's format offers; else the simpler configuration.

    >>> pick_reason({"format": "qcow2", "cache": "none"}, {"format": "raw", "cache": "none"})
    'qcow2: snapshots and thin provisioning'
    """
    if rival is None:
        return keeper or "the tie-break"
    if safety_key(pick) < safety_key(rival):
        return "power-loss safety"
    own = ("cache", "aio")
    if keeper and any(pick.get(a) != rival.get(a) for a in own):
        return "keeps what you run" if keeper.startswith("what you run") else keeper
    if pick.get("format") != rival.get("format") and pick.get("format") in FORMAT_PROPERTY:
        return FORMAT_PROPERTY[str(pick.get("format"))]
    if keeper:
        return "keeps what you run" if keeper.startswith("what you run") else keeper
    return "the simpler configuration"
