"""The leftover kind of the RBD backing (`backing.rbd`, issue 35): iomatrix's own image in an
existing pool (`rbd_image`), removed with `rbd rm`. Kept beside `leftover_kinds` (whose `Leftover`
it implements) and joined to the others in `leftovers.KINDS`; a lab-started cluster needs no kind of
its own (its daemons are `process` entries, its files the scratch directory's `path` entry)."""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from typing import ClassVar

from iomatrix.backing.leftover_kinds import EntryKind, Leftover, LeftoverError

# Names iomatrix gives its own images in an existing RBD pool (backing.rbd:
# "iomatrix-<pid>-<hex6>-<name>").
RBD_IMAGE_NAME = re.compile(r"iomatrix-[0-9]+-[0-9a-f]{6}(-[A-Za-z0-9_.-]{1,100})?")
RBD_POOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
RBD_TIMEOUT_S = 60.0
RBD_WATCH_TIMEOUT_S = 60.0  # twice Ceph's osd_client_watch_timeout (30 s)


def rbd_argv(conf: str, keyring: str | None, user: str | None, *args: str) -> list[str]:
    """The `rbd` command line reaching a cluster through `conf` (and a keyring and client name, when
    given)."""
    argv = ["rbd", "-c", conf]
    if keyring:
        argv += ["--keyring", keyring]
    if user:
        argv += ["--id", user]
    return [*argv, *args]


@dataclass(frozen=True)
class RbdImageLeftover(Leftover):
    """iomatrix's own image in an RBD pool (`target` "pool/image", info `conf`, `keyring`, `user`),
    removed with `rbd rm`: only an image of a name iomatrix generates (an existing pool's other
    images are never touched)."""

    kind: ClassVar[EntryKind] = "rbd_image"
    label: ClassVar[str] = "RBD image"

    def _where(self) -> tuple[str, str, str]:
        pool, _, image = self.target.partition("/")
        conf = self.info.get("conf")
        if not isinstance(conf, str) or not RBD_POOL_NAME.fullmatch(pool) or not image:
            raise LeftoverError(
                f"RBD image entry {self.target} does not name its pool, image and ceph.conf"
            )
        return pool, image, conf

    def _rbd(self, *args: str) -> subprocess.CompletedProcess[str]:
        _, _, conf = self._where()
        keyring, user = self.info.get("keyring"), self.info.get("user")
        argv = rbd_argv(
            conf,
            keyring if isinstance(keyring, str) else None,
            user if isinstance(user, str) else None,
            *args,
        )
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=RBD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise LeftoverError(
                f"rbd {args[0]} {self.target}: no answer within {RBD_TIMEOUT_S:g} s"
            ) from None

    def identity_problem(self, workdir: str, scratch_dirs: tuple[str, ...] = ()) -> str | None:
        try:
            _, image, _ = self._where()
        except LeftoverError as err:
            return str(err)
        if not RBD_IMAGE_NAME.fullmatch(image):
            return f"{self.target} is not a name iomatrix gives its images in an RBD pool"
        return None

    def present(self) -> bool:
        pool, image, _ = self._where()
        out = self._rbd("ls", pool)
        if out.returncode != 0:
            raise LeftoverError(
                f"cannot list RBD pool {pool}: {out.stderr.strip()[-200:] or out.returncode}"
            )
        return image in out.stdout.split()

    def remove(self) -> list[str]:
        # A client killed with the image open leaves a watch the cluster drops after 30 s
        # (osd_client_watch_timeout)
        deadline = time.monotonic() + RBD_WATCH_TIMEOUT_S
        while True:
            out = self._rbd("rm", "--no-progress", self.target)
            if (
                out.returncode == 0
                or "still has watchers" not in out.stderr
                or time.monotonic() > deadline
            ):
                break
            time.sleep(1)
        if out.returncode != 0 and "No such file" not in out.stderr:
            raise LeftoverError(
                f"cannot remove RBD image {self.target}: {out.stderr.strip()[-200:]}"
            )
        return [f"removed RBD image {self.target}"] if out.returncode == 0 else []
