"""What an image's own history entries say, taken from the Dockerfile rather than from the engine.

Each builder words a step its own way: Docker's classic builder writes the stage's SHELL into
every line (`/bin/bash -o pipefail -c #(nop)  LABEL a=b`), buildah (podman) writes `/bin/sh -c`
whatever the SHELL, keeps LABEL quotes, pads COPY lines and records each ARG without its value.
The instruction as the Dockerfile states it is the same on every engine."""

from __future__ import annotations

import re

_FROM_RE = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$", re.IGNORECASE)


def _logical_lines(text: str) -> list[str]:
    """Instructions with their continuation lines joined (the default escape character)."""
    out, pending = [], ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if pending and line.lstrip().startswith("#"):
            continue   # a comment inside a continued instruction is not part of it
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        out.append((pending + line).strip())
        pending = ""
    if pending:
        out.append(pending.strip())
    return out


def stage_steps(dockerfile: str) -> list[str]:
    """The instructions the image's own history entries record, in order: the last stage's after
    its FROM, preceded by those of the stages it starts FROM by name."""
    stages: list[tuple[str, str | None, list[str]]] = []   # (from, name, steps)
    for line in _logical_lines(dockerfile):
        keyword, _, rest = line.partition(" ")
        if keyword.upper() == "FROM":
            m = _FROM_RE.match(line)
            stages.append((m.group(1) if m else rest.strip(), m.group(2).lower() if m and m.group(2) else None, []))
        elif stages:
            stages[-1][2].append(f"{keyword.upper()} {rest.strip()}")
    if not stages:
        return []
    by_name = {name: (src, steps) for src, name, steps in stages if name}
    src, _, steps = stages[-1]
    chain, seen = list(steps), set()
    while src.lower() in by_name and src.lower() not in seen:
        seen.add(src.lower())
        src, earlier = by_name[src.lower()]
        chain = earlier + chain
    return chain
