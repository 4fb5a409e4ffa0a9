"""Saved rocminfo outputs a user hands us (``rocminfo FILE``, ``doctor --rocminfo FILE``).

Unlike :func:`~.parser.parse`, which accepts anything, these refuse what is not a rocminfo output
(binary data, another file, an empty file) and an output cut off before rocminfo finished:
diagnosing those would describe a host that is not there.
"""

from __future__ import annotations

import re

from rocmforge.shared.errors import UserError
from rocmforge.verify.readers.rocminfo import lines as ln
from rocmforge.verify.readers.rocminfo.model import RocmInfo
from rocmforge.verify.readers.rocminfo.parser import parse


class NotRocminfo(ValueError):
    """A saved file that is not a (whole) rocminfo output. line: the 1-based line concerned, if any."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


# Characters no terminal output or paste holds (ESC stays: rocminfo colours its lines); U+FFFD
# is what bytes that are not UTF-8 decode to.
_NON_TEXT = re.compile(r"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f\x7f\ufffd]")
MAX_SAVED = 16 * 2**20  # rocminfo prints about 10 kB per agent


def decode(data: bytes) -> str:
    """The text of a saved output. Raises NotRocminfo for an empty file or binary data."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):  # `wsl rocminfo > out.txt` in Windows PowerShell
        text = data.decode("utf-16", errors="replace")
    else:
        text = data.decode("utf-8", errors="replace")
    if not text.strip():
        raise NotRocminfo(("nothing but blank lines" if data else "empty file") + ", not a rocminfo output")
    odd = len(_NON_TEXT.findall(text))
    # A few stray bytes (a Latin-1 "®" in a CPU name) are a paste; more, or any NUL, is not text.
    if "\x00" in text or odd > max(8, len(text) // 100):
        raise NotRocminfo(f"binary data ({odd} of {len(text)} characters are not text), not a rocminfo output")
    return text


def _last_agent_header(lines: list[str], start: int, end: int) -> str | None:
    for i in range(end, start - 1, -1):
        m = ln.AGENT_HEADER.match(lines[i])
        if m:
            return f"Agent {m.group(1)}"
    return None


def _says_rocminfo_ran(lines: list[str]) -> bool:
    """A driver line, WSL's notice or a runtime failure: lines only rocminfo prints."""
    return any(
        ln.DRIVER_LOADED.search(line)
        or ln.DRIVER_NOT_LOADED.search(line)
        or ln.WSL.search(line)
        or ln.RUNTIME_FAILURE.search(line)
        for line in lines
    )


def _truncation(lines: list[str], start: int) -> NotRocminfo | None:
    """The run whose banner is at lines[start] stops before rocminfo's closing line (a run that
    failed ends early and is whole)."""
    if any(ln.DONE.match(line) or ln.RUNTIME_FAILURE.search(line) for line in lines[start:]):
        return None
    last = max(i for i, line in enumerate(lines) if line)
    agent = _last_agent_header(lines, start, last)
    where = (
        f"inside {agent}"
        if agent
        else "before the agent list"
        if lines[start].lower() == "hsa system attributes"
        else "before the first agent"
    )
    return NotRocminfo(
        f"truncated rocminfo output: it stops at line {last + 1}, {where}, without "
        "rocminfo's closing '*** Done ***' line; save the whole output again",
        last + 1,
    )


def recognise(text: str) -> RocmInfo:
    """Parse a saved output, refusing (NotRocminfo) text that rocminfo did not print and a run that
    stops before rocminfo's closing ``*** Done ***``. A run is judged complete only from its
    ``HSA System Attributes`` / ``HSA Agents`` banner on: a paste that starts mid-way has no
    known start, so only its content is checked."""
    info = parse(text)
    lines = ln.cleaned_lines(text)
    banners = [i for i, line in enumerate(lines) if line.lower() in ln.BANNERS]
    agents = any(a.name and a.device_type for a in info.agents)
    if not (banners or _says_rocminfo_ran(lines) or agents or info.runtime_version):
        raise NotRocminfo("not a rocminfo output (no 'ROCk module' line, no 'HSA Agents' section, no agent)")
    if banners:
        cut = _truncation(lines, banners[-1])  # a paste may hold several runs: the last one must be whole
        if cut is not None:
            raise cut
    return info


def read_saved(path: str) -> str:
    """The text of the saved rocminfo output at ``path``, checked by :func:`recognise`. Raises
    UserError (file, and the line where one line tells) for anything else."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SAVED + 1)  # bounded: /dev/zero or a disk image is no rocminfo output
    except OSError as exc:
        raise UserError(f"cannot read: {exc.strerror or exc}", file=path) from None
    if len(data) > MAX_SAVED:
        raise UserError(f"larger than {MAX_SAVED // 2**20} MiB, not a rocminfo output", file=path)
    try:
        text = decode(data)
        recognise(text)
    except NotRocminfo as exc:
        raise UserError(exc.message, file=path, line=exc.line) from None
    return text
