"""User-facing errors.

Anything the user can fix (bad plan, missing package, refused device) raises
`UserError`; the CLI prints its message as one line and exits 2, never a
traceback. Internal bugs are left to raise normally.
"""

from __future__ import annotations


class UserError(Exception):
    """A problem the user can fix: the message names the problem and the fix."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(message if hint is None else f"{message} ({hint})")

    def one_line(self) -> str:
        return self.message if self.hint is None else f"{self.message} — {self.hint}"


class MissingTool(UserError):
    """A host program is missing; the hint names the Debian package to install."""

    def __init__(self, program: str, package: str) -> None:
        super().__init__(
            f"'{program}' was not found on this host",
            hint=f"install it with: apt-get install {package} (or run scripts/setup.sh)",
        )
        self.program = program
        self.package = package


def no_results_database(path: object) -> UserError:
    """A results database that is not there, for reading. Here rather than in the store: a command
    refuses a missing --db before it imports the store and the reports (commands/common.py
    open_store), in the words the store uses."""
    return UserError(
        f"results database {path} does not exist",
        hint="run 'iomatrix run' first, or point --db at its file",
    )
