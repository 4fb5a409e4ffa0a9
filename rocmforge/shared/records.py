"""Reading the JSON records rocmforge writes: publish records (published/<target>.json, committed
and read back by `pull`), suite results by image ID, build-cache records, `lock --check` and
`verify-repro` check records, manifests.

A record that is not what rocmforge wrote (binary data, not JSON, cut short, the wrong shape) is
never trusted. Callers choose what follows: a publish record `pull` needs is bad input (exit 2);
a record kept only for rocmforge's own use reads as absent, which is the conservative state (not
tested, no build cache, not checked), with one warning naming the file and what to do.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


class BadRecord(ValueError):
    """Why a record file cannot be used; line: the 1-based line concerned, when one is."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


def read_json(path: Path):
    """The parsed JSON at ``path``; None when there is no such file. Raises BadRecord for a file
    that is empty, not UTF-8 text, not JSON, or cut short, and OSError when it cannot be read."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    if not raw.strip():
        raise BadRecord("empty file, not a rocmforge record")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRecord(
            f"not a text file (byte {raw[exc.start]:#04x} at offset {exc.start}), not a rocmforge record",
            raw[: exc.start].count(b"\n") + 1,
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # An unterminated string also means the parser reached the end of the text first.
        if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string"):
            last = text.rstrip().count("\n") + 1
            raise BadRecord(f"cut short: the JSON stops at line {last} before it is complete", last) from None
        raise BadRecord(f"not JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None


def where(path: Path, line: int | None) -> str:
    """path:line for a message, or the path alone when no line is known."""
    return f"{path}:{line}" if line else str(path)


_warned: set[str] = set()


def warn_ignored(path: Path, problem: str, line: int | None = None, fix: str = "") -> None:
    """One stderr line per file and process: the record is ignored, and why."""
    key = str(path)
    if key in _warned:
        return
    _warned.add(key)
    print(f"warning: {where(path, line)}: {problem}; ignored{'; ' + fix if fix else ''}", file=sys.stderr)


def load_internal(path: Path, check: Callable[[Any], str | None], fix: str):
    """A record rocmforge keeps for itself, or None when it is absent or not usable (then warned
    about). ``check(data)`` returns what is wrong with its shape, or None."""
    try:
        data = read_json(path)
    except BadRecord as exc:
        warn_ignored(path, exc.message, exc.line, fix)
        return None
    except OSError as exc:
        warn_ignored(path, f"cannot read: {exc.strerror or exc}", fix=fix)
        return None
    if data is None:
        return None
    problem = check(data)
    if problem:
        warn_ignored(path, problem, fix=fix)
        return None
    return data
