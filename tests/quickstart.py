"""The README's quick start as the tests read it: each shell line of its three fenced `sh` blocks,
in order, so a test can run exactly what a newcomer copies (tests/unit/test_readme.py parses each
`rocmforge` line with the real parser; test_signing.py runs them with the installed command)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from tests.conftest import ROOT

README = ROOT / "README.md"
BLOCK = re.compile(r"^```sh\n(.*?)^```", re.M | re.S)


@dataclass(frozen=True)
class Line:
    path: int  # 1, 2 or 3: which quick-start path it belongs to
    text: str  # the line as written (bash runs it, comment and all)
    words: tuple[str, ...]  # as the shell splits it


def lines() -> list[Line]:
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    found = []
    for path, block in enumerate(BLOCK.findall(section), start=1):
        for raw in block.splitlines():
            words = tuple(shlex.split(raw, comments=True))
            if words:
                found.append(Line(path, raw.strip(), words))
    return found
