"""Tiers issue I/O: bare metal (fio on the host) and guest (fio inside QEMU).

They share one small interface (`Tier.run(RunRequest) -> RunOutcome`) so the
runner, the monitor and the store treat them alike.
"""
