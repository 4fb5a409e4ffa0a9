"""One build's run and its log: the build context as a tar, what is asked of the builder, and its
progress stream read into the log, the status line and a trace of the images it made (the classic
builder's step images, or BuildKit's one image)."""

from __future__ import annotations

import io
import re
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from rocmforge.render.contexts import CA_PLACEHOLDER
from rocmforge.render.dockerfile import COPIED_DIR_MTIME, copied_dirs

if TYPE_CHECKING:
    from rocmforge.host.builders import Builder

STEP_RE = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
STEP_IMAGE_RE = re.compile(r"^ ---> ([0-9a-f]{12})$")  # the image a finished step left
ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


def context_tar(files: dict[str, bytes], ca_bundle: Path | None) -> io.BytesIO:
    """The build context as a tar with fixed owners and mtimes, so checkout mtimes never leak in:
    0, but COPIED_DIR_MTIME for a folder a COPY takes (render.dockerfile.copied_dirs). The CA
    bundle, when given, fills the placeholder that only builder stages read."""
    copied = copied_dirs(files["Dockerfile"].decode(), files) if "Dockerfile" in files else set()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        dirs: set[str] = set()
        for rel in sorted(files):
            data = files[rel]
            if rel == CA_PLACEHOLDER and ca_bundle is not None:
                data = ca_bundle.read_bytes()
            parts = rel.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    info = tarfile.TarInfo(d)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    info.mtime = COPIED_DIR_MTIME if d in copied else 0
                    tar.addfile(info)
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


@dataclass(frozen=True)
class BuildRequest:
    """One build: what the builder is given."""

    name: str
    content_tag: str
    context: dict[str, bytes]  # the target's files and the fetched inputs
    tag: str
    labels: dict[str, str]
    buildargs: dict[str, str]
    nocache: bool
    ca_bundle: Path | None
    log_path: Path
    builder: Builder
    note: str = ""  # a line for the log after its first (where apt fetches its .debs)


@dataclass
class BuildTrace:
    """What the build's output named as it went: on a failure or an interrupt, the step in progress
    is stopped from it and the step images are discarded from it."""

    made: list[str]  # the image of every step, in order (BuildKit: its one image)
    reused: set[str] = field(default_factory=set)  # cache hits: an earlier build's, not ours to discard
    running: list[str] = field(default_factory=list)  # the container of the step in progress (last)
    step: str = "(before the first step)"
    image_id: str | None = None
    error: str | None = None

    def ours(self) -> list[str]:
        return [m for m in self.made if m not in self.reused]


def run_logged(req: BuildRequest, trace: BuildTrace, progress: Callable[[str], None]) -> None:
    """Runs the build, its output into req.log_path line by line; trace follows it."""
    try:
        _run_logged(req, trace, progress)
    except OSError as exc:  # a full disk under the log: a write names no path, so say which
        if exc.errno is not None and exc.filename is None:
            exc.filename = str(req.log_path)
        raise


def _run_logged(req: BuildRequest, trace: BuildTrace, progress: Callable[[str], None]) -> None:
    started = time.monotonic()
    with open(req.log_path, "w", encoding="utf-8", buffering=1) as log:  # line by line: people tail it
        log.write(f"# rocmforge build {req.name} -> {req.content_tag} ({req.builder.name} builder)\n")
        if req.note:
            log.write(req.note.rstrip("\n") + "\n")
        stream = req.builder.build(
            context_tar(req.context, req.ca_bundle),
            tag=req.tag,
            labels=req.labels,
            buildargs=req.buildargs,
            nocache=req.nocache,
        )
        try:
            read_stream(stream, log, trace, progress, one_image=not req.builder.makes_step_images)
        finally:
            if not req.builder.makes_step_images:  # stops BuildKit's CLI when the build did not end
                getattr(stream, "close", lambda: None)()
        log.write(f"# finished in {time.monotonic() - started:.1f}s\n")


def read_stream(
    stream: Iterator[dict], log: TextIO, trace: BuildTrace, progress: Callable[[str], None], *, one_image: bool
) -> None:
    """The build stream (the Engine API's format) into log and trace. one_image: the builder makes
    no step images, so the image it reports is the only one the build made."""
    cached = False
    for chunk in stream:
        if "stream" in chunk:
            text = ANSI_RE.sub("", chunk["stream"])
            log.write(text)
            for line in text.splitlines():
                if line.startswith(" ---> Running in "):
                    trace.running.append(line.split()[-1])
                if STEP_IMAGE_RE.match(line):
                    trace.made.append(line.split()[-1])
                    if cached:
                        trace.reused.add(trace.made[-1])
                cached = line.strip() == "---> Using cache"
                m = STEP_RE.match(line.strip())
                if m:
                    trace.step = line.strip()
                    progress(trace.step)
        if "aux" in chunk and "ID" in chunk["aux"]:
            trace.image_id = chunk["aux"]["ID"]
            if one_image:
                trace.made.append(trace.image_id)
        if "error" in chunk:
            trace.error = chunk.get("errorDetail", {}).get("message") or chunk["error"]
            log.write(f"ERROR: {trace.error}\n")
