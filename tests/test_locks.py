"""Advisory locks (locks.py) on real files: who holds what, and refusing early without touching anything."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from iomatrix.errors import UserError
from iomatrix.locks import exclusive, refuse_if_held


def test_refuse_if_held_names_the_holder_and_creates_nothing(tmp_path: Path) -> None:
    lock = tmp_path / "r.sqlite.lock"
    refuse_if_held(lock, "results database r.sqlite")  # no lock file: nothing to refuse
    assert not lock.exists()  # and nothing created
    with exclusive(lock, "results database r.sqlite"):
        with pytest.raises(UserError, match=rf"results database r.sqlite is in use by process {os.getpid()}"):
            refuse_if_held(lock, "results database r.sqlite")
        # the real lock still refuses a second holder
        with pytest.raises(UserError, match="in use by"), exclusive(lock, "results database r.sqlite"):
            pass
    refuse_if_held(lock, "results database r.sqlite")  # released: free again
    with exclusive(lock, "results database r.sqlite"):  # and the check took no lock of its own
        pass
