"""Role profiles: what a VM of a given role asks of its disk, and which figures decide its answer.

A user runs a database VM, a file server, a VDI pool, a backup target, not ``rand-write-4k``. A role
is a few fio jobs (each run as a workload of its own, named ``ROLE:JOB``: ``database:data``,
``database:log``), the figures that decide it (the first one decides; a configuration worse than the
role's margin on another one is not chosen: report/roles.py) and its margin of practical
equivalence. The built-in roles are the TOML files beside this module, one per role, found by name
as the built-in plans are; docs/roles.md traces each to the published profile it follows (Nutanix
X-Ray, Microsoft VMFleet, fio's IOMeter file server, PerfKit Benchmarker).

A built-in job is a table of fio options, rendered into a job section and checked against the same
allowlist as a user's job file (fio.allowlist): what runs is what any custom job could say. A custom
role is a ``[role.NAME]`` table of the plan whose jobs are the user's fio job files (``file:PATH``
workloads, the allowlist again). The job section holds no size, target or engine: the cell gives
them (fio.jobs), so a role runs at the plan's size (its region) on any device, a tiny test image
included; its rates are fio's ``rate_iops`` per job."""

# Star imports re-export each module's __all__: callers keep `from iomatrix.roles import Role`.
from iomatrix.roles.margins import *  # noqa: F403
from iomatrix.roles.profile import *  # noqa: F403
