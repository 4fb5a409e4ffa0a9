"""The one error this package raises for bad input, so that callers catch it beside BuildError."""

from __future__ import annotations

from rocmforge.shared.errors import BuildError


class ImageArchiveError(BuildError):
    """An image archive (or one of its layer tars) could not be read or rewritten."""
