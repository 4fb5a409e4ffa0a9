"""Effects on the Docker engine: connect, build one planned target with streamed progress."""

from __future__ import annotations

import io
import re
import subprocess
import tarfile
import time
from pathlib import Path

from .errors import BuildError
from .plan import TargetPlan
from .render import CA_PLACEHOLDER

STEP_RE = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


def connect():
    import docker
    import docker.errors

    try:
        client = docker.from_env(timeout=600)
        client.ping()
        return client
    except (docker.errors.DockerException, OSError) as exc:
        raise BuildError(f"cannot reach the Docker engine ({exc}); start dockerd or set DOCKER_HOST") from None


def image_id(client, ref: str) -> str | None:
    import docker.errors

    try:
        return client.images.get(ref).id
    except docker.errors.ImageNotFound:
        return None


def context_tar(files: dict[str, bytes], ca_bundle: Path | None) -> io.BytesIO:
    """The build context as a tar with fixed owners and mtimes, so checkout mtimes never leak in.
    The CA bundle, when given, fills the placeholder that only builder stages read."""
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
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                    tar.addfile(info)
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def git_revision(root: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""
    except OSError:
        return ""


def build(client, tp: TargetPlan, *, log_path: Path, ca_bundle: Path | None,
          progress, extra_files: dict[str, bytes] | None = None, tag: str | None = None,
          nocache: bool = False) -> str:
    """Build tp; returns the (raw, not yet normalised) image ID, tagged `tag` (default: a
    temporary tag). The caller moves the real tags after normalising."""
    tag = tag or f"rocmforge-raw/{tp.name}:{tp.content_hash[:12]}"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # No revision label: the image is a function of its content (what the content tag names), so
    # the same inputs from any commit or checkout give the same image ID. The manifest records the commit.
    labels = {"io.rocmforge.content-hash": tp.content_hash}
    buildargs = {}
    if tp.registry_base:   # present on the engine by digest, pulled through the mirror when one is set
        from . import bases, registry

        image, digest = tp.registry_base
        buildargs[bases.BASE_ARG] = registry.pull(client, image, digest, mirror=registry.mirror_from_env())
    step, new_id, error = "(before the first step)", None, None
    started = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        log.write(f"# rocmforge build {tp.name} -> {tp.content_tag}\n")
        context = {**tp.files, **(extra_files or {})}
        stream = client.api.build(fileobj=context_tar(context, ca_bundle), custom_context=True,
                                  tag=tag, labels=labels, buildargs=buildargs, rm=True, forcerm=True, nocache=nocache,
                                  pull=False, decode=True)
        for chunk in stream:
            if "stream" in chunk:
                text = ANSI_RE.sub("", chunk["stream"])
                log.write(text)
                for line in text.splitlines():
                    m = STEP_RE.match(line.strip())
                    if m:
                        step = line.strip()
                        progress(step)
            if "aux" in chunk and "ID" in chunk["aux"]:
                new_id = chunk["aux"]["ID"]
            if "error" in chunk:
                error = chunk.get("errorDetail", {}).get("message") or chunk["error"]
                log.write(f"ERROR: {error}\n")
        log.write(f"# finished in {time.monotonic() - started:.1f}s\n")
    if error or not new_id:
        raise BuildError(f"build of {tp.name} failed at {step}\n  {(error or 'no image produced').strip()}\n"
                         f"  full log: {log_path}")
    return new_id
