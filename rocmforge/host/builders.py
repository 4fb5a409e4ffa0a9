"""The builders rocmforge can run a Dockerfile with, behind one small interface, and the one place
that picks which (`build --builder`, `$ROCMFORGE_BUILDER`).

* classic: the engine's own builder through its API (docker-py's `build`): every instruction is a
  container and a commit, each leaving a step image that is the next build's cache;
* buildkit: BuildKit, through the buildx CLI plugin's `docker` driver, the BuildKit inside the
  engine (`docker buildx build --load`): no step images; its cache is the engine's builder cache.
  docker-py cannot drive BuildKit (docker/docker-py#2230), so the CLI is run.

Both take the same tar context and report in the Engine API's build-stream format (`stream` lines
with `Step i/n : INSTRUCTION`, `aux.ID`, `error`), so one reader (assemble.engine) logs either.
Either builder's raw image is normalised into the same image (assemble.image): what BuildKit writes
differently (history wording, no step images, its layer differ) never reaches the image ID."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, ClassVar, Protocol

from rocmforge.shared import processes
from rocmforge.shared.errors import UserError

if TYPE_CHECKING:
    from rocmforge.host.enginebase import Engine

ENV = "ROCMFORGE_BUILDER"
OPTION = "--builder"
CLASSIC, BUILDKIT, AUTO = "classic", "buildkit", "auto"
CHOICES = (AUTO, CLASSIC, BUILDKIT)
# As Docker's CLI since 23: BuildKit where it can run (buildx found, a Docker engine, $DOCKER_BUILDKIT
# not 0), else the classic builder. Either gives the same image ID (tests/integration/test_builders.py,
# test_verify_repro.py, test_engines.py; docs/engines.md lists which targets on which engine).
DEFAULT = AUTO
INSTALL_HINT = (
    "install the buildx CLI plugin: Debian 13 and later `apt-get install docker-buildx`, elsewhere "
    "put the `docker-buildx` binary (e.g. unpacked from Debian sid's docker-buildx .deb, which is "
    "static) into ~/.docker/cli-plugins/ or $DOCKER_CONFIG/cli-plugins/ and make it executable"
)


class Builder(Protocol):
    """What a build asks of a builder."""

    name: ClassVar[str]
    makes_step_images: ClassVar[bool]  # a step image per instruction (the classic builder's cache)

    def build(
        self,
        context: IO[bytes],
        *,
        tag: str,
        labels: dict[str, str],
        buildargs: dict[str, str],
        nocache: bool,
    ) -> Iterator[dict]:
        """Builds the tar context into the engine, tagged tag; the progress in the Engine API's
        build-stream format. Closing the iterator stops a build still running."""
        ...


class ClassicBuilder:
    """The engine's own builder, through its API."""

    name: ClassVar[str] = CLASSIC
    makes_step_images: ClassVar[bool] = True

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def build(
        self, context: IO[bytes], *, tag: str, labels: dict[str, str], buildargs: dict[str, str], nocache: bool
    ) -> Iterator[dict]:
        return self.engine.build(context, tag=tag, labels=labels, buildargs=buildargs, nocache=nocache)


# `#7 [3/4] RUN ...` and, in a multi-stage build, `#9 [builder 2/3] COPY ...`: a step starting.
_VERTEX_RE = re.compile(r"^#\d+ \[(?:(?P<stage>[^\]]+?) )?(?P<i>\d+)/(?P<n>\d+)\] (?P<what>.*)$")


@dataclass(frozen=True)
class Buildx:
    """The buildx CLI plugin as the docker CLI finds it."""

    docker: str  # the docker CLI that runs it
    version: str  # `docker buildx version`'s line

    @classmethod
    def find(cls) -> Buildx | None:
        """buildx where the docker CLI finds it ($DOCKER_CONFIG/cli-plugins, ~/.docker/cli-plugins,
        the system's plugin folders); None when it does not."""
        docker = shutil.which("docker")
        if docker is None:
            return None
        try:
            proc = subprocess.run([docker, "buildx", "version"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
        line = (proc.stdout.strip().splitlines() or [""])[0]
        # Docker's buildx names itself so; another `docker` (podman-docker's) may answer otherwise
        if proc.returncode != 0 or not line.startswith("github.com/docker/buildx"):
            return None
        return cls(docker, line)


class BuildKitBuilder:
    """BuildKit in the engine, through `docker buildx build --builder default --load` (the `docker`
    driver: the builder of the engine DOCKER_HOST names, as Engine's own connection is)."""

    name: ClassVar[str] = BUILDKIT
    makes_step_images: ClassVar[bool] = False

    def __init__(self, engine: Engine, buildx: Buildx) -> None:
        self.engine = engine
        self.buildx = buildx

    @property
    def builder(self) -> str:
        """The engine rocmforge reached, as buildx names its builder."""
        return self.engine.context or "default"

    def command(self, *, tag: str, labels: dict[str, str], buildargs: dict[str, str], nocache: bool):
        cmd = [self.buildx.docker, "buildx", "build", "--builder", self.builder, "--load", "--progress", "plain"]
        # No attestations: the docker driver on an overlay2 engine cannot store them, and they are
        # rocmforge's to write (the SBOM, the signature), not the builder's.
        cmd += ["--provenance", "false", "--sbom", "false", "--tag", tag]
        for k, v in buildargs.items():
            cmd += ["--build-arg", f"{k}={v}"]
        for k, v in labels.items():
            cmd += ["--label", f"{k}={v}"]
        if nocache:
            cmd.append("--no-cache")
        return [*cmd, "-"]  # the context: a tar on stdin

    def build(
        self, context: IO[bytes], *, tag: str, labels: dict[str, str], buildargs: dict[str, str], nocache: bool
    ) -> Iterator[dict]:
        cmd = self.command(tag=tag, labels=labels, buildargs=buildargs, nocache=nocache)
        env = {**os.environ, "BUILDX_NO_DEFAULT_ATTESTATIONS": "1", "BUILDKIT_PROGRESS": "plain"}
        try:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
            )
        except OSError as exc:
            raise UserError(f"cannot run {self.buildx.docker} buildx ({exc}); {INSTALL_HINT}", field=OPTION) from None
        return self._stream(proc, context, tag)

    @staticmethod
    def _feed(proc: subprocess.Popen, context: IO[bytes]) -> None:
        assert proc.stdin is not None
        try:
            shutil.copyfileobj(context, proc.stdin, 1 << 20)
        except OSError:  # buildx stopped reading (it failed): its output says why
            pass
        finally:
            try:
                proc.stdin.close()
            except OSError:
                pass

    def _stream(self, proc: subprocess.Popen, context: IO[bytes], tag: str) -> Iterator[dict]:
        feeder = threading.Thread(target=self._feed, args=(proc, context), daemon=True, name="buildx-context")
        feeder.start()
        tail: list[str] = []
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                tail = [*tail[-19:], line]
                m = _VERTEX_RE.match(line)
                if m:
                    stage = f" ({m['stage']})" if m["stage"] else ""
                    yield {"stream": f"Step {m['i']}/{m['n']} : {m['what']}{stage}\n"}
                yield {"stream": line + "\n"}
            rc = proc.wait()
            feeder.join()
            if rc != 0:
                errors = [t for t in tail if t.startswith("ERROR") or " ERROR" in t or "error:" in t]
                why = (errors or tail[-1:] or [f"exit status {rc}"])[-1]
                yield {"error": why, "errorDetail": {"message": why}}
                return
            # The ID the engine knows the image by, through the tag (unique to this build): buildx's
            # --iidfile holds the config digest, which a store that keys images by manifest
            # (containerd's) refuses.
            image_id = self.engine.shown_id(tag)
            if not image_id:
                why = (
                    f"buildx finished, but the engine rocmforge reached has no {tag}: buildx's builder "
                    f"{self.builder!r} builds on another engine"
                )
                yield {"error": why, "errorDetail": {"message": why}}
                return
            yield {"aux": {"ID": image_id}}
        finally:
            processes.stop(proc)  # closed early (an interrupt, a failure of the reader): stop the build


@dataclass(frozen=True)
class Chosen:
    """The builder a build runs, as choose picked it."""

    name: str  # CLASSIC or BUILDKIT
    buildx: Buildx | None = None  # with BUILDKIT: the buildx found
    asked: str = BUILDKIT  # with BUILDKIT: the value that chose it (AUTO or BUILDKIT) ...
    where: str = OPTION  # ... and where it was given (the option or the variable)

    def on(self, engine: Engine) -> Builder:
        """The builder, on engine. podman serves no BuildKit session (its API builds with buildah,
        as the classic builder asks): `auto` builds classic there, `buildkit` is a UserError."""
        if self.name != BUILDKIT or self.buildx is None:
            return ClassicBuilder(engine)
        if engine.described.podman:
            if self.asked == AUTO:
                return ClassicBuilder(engine)
            raise UserError(
                f"{engine.described.name} {engine.described.version} has no BuildKit (buildx's docker driver "
                "needs a Docker engine); its own builder runs through the classic builder's API: "
                + (
                    f"give {OPTION} classic or {OPTION} auto"
                    if self.where == OPTION
                    else f"set {self.where} to classic or auto"
                ),
                field=self.where,
            )
        return BuildKitBuilder(engine, self.buildx)


def choose(given: str | None) -> Chosen:
    """The builder a build runs: `--builder` (given), else $ROCMFORGE_BUILDER, else DEFAULT; `auto`
    is BuildKit when buildx is found and $DOCKER_BUILDKIT is not 0, else classic. A bad value, or
    buildkit without buildx, is a UserError (exit 2) naming the option or variable; nothing here
    reaches the engine."""
    where, value = (OPTION, given) if given else (f"${ENV}", os.environ.get(ENV) or DEFAULT)
    value = value.strip().lower()
    if value not in CHOICES:
        raise UserError(f"unknown builder {value!r}: give one of {', '.join(CHOICES)}", field=where)
    if value == CLASSIC or (value == AUTO and os.environ.get("DOCKER_BUILDKIT", "").strip() == "0"):
        return Chosen(CLASSIC)  # DOCKER_BUILDKIT=0: the user turned BuildKit off, as Docker's CLI reads it
    found = Buildx.find()
    if found is not None:
        return Chosen(BUILDKIT, found, value, where)
    if value == AUTO:
        return Chosen(CLASSIC)
    raise UserError(f"the BuildKit builder needs docker buildx, which is not found: {INSTALL_HINT}", field=where)
