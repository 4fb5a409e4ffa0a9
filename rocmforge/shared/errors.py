"""User-facing errors: one message naming file, line and field; the CLI maps them to exit code 2."""

from __future__ import annotations

import errno

# Errors of the machine rather than of a path the user named: reported like a failed build (exit 1).
MACHINE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.ENOMEM, errno.EMFILE, errno.ENFILE}


class UserError(Exception):
    """Bad input from the user (matrix, template, CLI, lock). Never shown with a traceback."""

    def __init__(
        self, message: str, *, file: str | None = None, line: int | None = None, field: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.field = field

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "") + ": "
        what = f"{self.field}: " if self.field else ""
        return f"{where}{what}{self.message}"


class BuildError(Exception):
    """A build or engine step failed (exit code 1): not the user's input, but the user must see why."""


class ImageArchiveError(BuildError):
    """An image archive (or one of its layer tars) could not be read or rewritten."""
