"""What an image's own history entries say, taken from the Dockerfile rather than from the engine.

Each builder words a step its own way: Docker's classic builder writes the stage's SHELL into
every line (`/bin/bash -o pipefail -c #(nop)  LABEL a=b`), buildah (podman) writes `/bin/sh -c`
whatever the SHELL, keeps LABEL quotes, pads COPY lines and records each ARG without its value.
The instruction as the Dockerfile states it is the same on every engine."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_FROM_RE = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$", re.IGNORECASE)


def _logical_lines(text: str) -> list[str]:
    """Instructions with their continuation lines joined (the default escape character)."""
    return [line for line, _ in _located_lines(text)]


def _located_lines(text: str) -> list[tuple[str, int]]:
    """Each instruction, continuation lines joined, with the index of the text line it starts on."""
    out, pending, start = [], "", 0
    for i, raw in enumerate(text.splitlines()):
        line = raw.rstrip()
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if pending and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction is not part of it
        if not pending:
            start = i
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        out.append(((pending + line).strip(), start))
        pending = ""
    if pending:
        out.append((pending.strip(), start))
    return out


def stage_steps(dockerfile: str) -> list[str]:
    """The instructions the image's own history entries record, in order: the last stage's after
    its FROM, preceded by those of the stages it starts FROM by name."""
    stages: list[tuple[str, str | None, list[str]]] = []  # (from, name, steps)
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


def final_from(dockerfile: str) -> str:
    """The image the last stage starts FROM, as the Dockerfile names it ("" when it has no FROM)."""
    froms = [_FROM_RE.match(line) for line in _logical_lines(dockerfile) if line.partition(" ")[0].upper() == "FROM"]
    last = froms[-1] if froms else None
    return last.group(1) if last else ""


# A label the Dockerfile parser reads the same way every engine does: a plain key, and a value that
# is bare or double-quoted with nothing in it to escape or expand.
_LABEL_PAIR_RE = re.compile(r'([A-Za-z0-9][A-Za-z0-9._/-]*)=(?:"([^"\\$`]*)"|([^\s"\'\\$`]*))(?:\s+|$)')
_DIRECTIVE_RE = re.compile(r"^#\s*[a-z]+\s*=", re.IGNORECASE)


@dataclass(frozen=True)
class TrailingLabels:
    """A Dockerfile's last LABEL instructions, to be run by the builder as one step (each LABEL
    step is a container and a commit); the history is spelled back as the Dockerfile states them
    (config.normalise_config's `merged`)."""

    dockerfile: str  # the Dockerfile without them
    labels: dict[str, str]  # what they set, in order (a later key wins, as in the builder)
    count: int  # how many instructions they were

    def with_labels(self, more: dict[str, str]) -> str:
        """The Dockerfile with them, then `more`, as one LABEL instruction (more's values are
        quoted as they are: they must need no escaping, as the Dockerfile's own did not)."""
        pairs = {**self.labels, **more}
        if any(_label_pairs(f'{k}="{v}"') != {k: v} for k, v in more.items()):
            raise ValueError(f"labels that a LABEL line cannot hold unescaped: {more}")
        return self.dockerfile + "LABEL " + " ".join(f'{k}="{v}"' for k, v in pairs.items()) + "\n"


def _label_pairs(rest: str) -> dict[str, str] | None:
    pairs, pos = {}, 0
    rest = rest.strip()
    while pos < len(rest):
        m = _LABEL_PAIR_RE.match(rest, pos)
        if not m:
            return None
        pairs[m.group(1)] = m.group(2) if m.group(2) is not None else m.group(3)
        pos = m.end()
    return pairs or None


def trailing_labels(dockerfile: str) -> TrailingLabels | None:
    """The Dockerfile's trailing LABEL instructions, when each reads the same to any builder (else
    None: the Dockerfile is built as it is). A parser directive (`# escape=`) changes the reading,
    so such a Dockerfile is left alone too."""
    text_lines = dockerfile.splitlines()
    if any(_DIRECTIVE_RE.match(line) for line in text_lines[:5]):
        return None
    located = _located_lines(dockerfile)
    labels: list[dict[str, str]] = []
    first = None
    for line, start in reversed(located):
        keyword, _, rest = line.partition(" ")
        if keyword.upper() != "LABEL":
            break
        pairs = _label_pairs(rest)
        if pairs is None:
            break
        labels.insert(0, pairs)
        first = start
    if first is None or first == located[0][1]:
        return None
    merged: dict[str, str] = {}
    for pairs in labels:
        merged.update(pairs)
    return TrailingLabels("\n".join(text_lines[:first]) + "\n", merged, len(labels))


# The time a context folder that a COPY (or ADD) takes as a source carries. Docker 28's BuildKit
# gives the folder such a COPY makes the source folder's time, where the classic builder and
# BuildKit 0.8 give it the build's time: a time after every epoch, which normalisation clamps to the
# image's epoch, gives the same folder whichever builder ran (issue 55). Other files and folders of a
# context carry time 0.
COPIED_DIR_MTIME = 4102444800  # 2100-01-01T00:00:00Z


def copied_dirs(dockerfile: str, paths: Iterable[str]) -> set[str]:
    """The folders of a context (paths: its files) that the Dockerfile's COPY and ADD instructions
    take as sources from the context (not --from another stage)."""
    folders = {"/".join(p.split("/")[:i]) for p in paths for i in range(1, p.count("/") + 1)}
    found = set()
    for line in _logical_lines(dockerfile):
        words = line.split()
        if len(words) < 3 or words[0].upper() not in ("COPY", "ADD"):
            continue
        if any(w.startswith("--from") for w in words[1:]):
            continue
        for source in [w for w in words[1:] if not w.startswith("--")][:-1]:
            name = source.removeprefix("./").strip("/")
            if name in folders:
                found.add(name)
    return found
