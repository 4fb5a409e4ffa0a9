"""Effects on the Docker engine: connect, build one planned target with streamed progress."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.assemble import buildstream, steplock
from rocmforge.assemble.buildstream import BuildRequest, BuildTrace
from rocmforge.host import aptmirror, aptsources, builders, debproxy, engines, registrybase
from rocmforge.host.enginebase import EngineError
from rocmforge.render import bake
from rocmforge.render.dockerfile import TrailingLabels
from rocmforge.render.plan import TargetPlan
from rocmforge.resolve import bases
from rocmforge.shared import program
from rocmforge.shared.errors import BuildError, UserError
from rocmforge.shared.files import append_line

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Set

    from rocmforge.host.builders import Builder
    from rocmforge.host.engines import Engine


def connect() -> Engine:
    """The engine a build uses, checked before anything is built or tagged."""
    return engines.connect()


def image_id(client: Engine, ref: str) -> str | None:
    """The image's identity (its config digest) on any store; None when ref names no image. Use
    ref, not this, to name the image to the engine: the containerd store knows it by manifest."""
    return client.identity(ref)


def final_base(client: Engine, tp: TargetPlan, *, fetch: bool = True) -> str | None:
    """The image the target's last stage starts FROM, as the engine knows it: its layers are the
    ones normalisation passes through. With fetch=False: None when it is not on the engine."""
    if not tp.final_from:
        raise BuildError(f"the Dockerfile of {tp.name} has no FROM")
    if tp.final_from.startswith("${") and tp.registry_base:
        image, digest = tp.registry_base
        return registrybase.pull(client, image, digest, mirror=registrybase.mirror_from_env(), fetch=fetch)
    return tp.final_from if fetch or image_id(client, tp.final_from) else None


# Two builds of one target at once each get their own raw tag: one's clean-up must not untag the
# image the other is still normalising.
_RUN = uuid.uuid4().hex[:8]


def raw_tag(tp: TargetPlan) -> str:
    """Where this process's build of tp waits for normalisation."""
    return f"rocmforge-raw/{tp.name}:{tp.content_hash[:12]}-{_RUN}"


def repro_tag(key: str, run: str) -> str:
    """Where this process's verify-repro build `run` of the image key is kept until compared: two
    checks of one target at once (two builders, two CI jobs) must not read or untag each other's."""
    return f"rocmforge-repro/{key}:{run}-{_RUN}"


@dataclass(frozen=True)
class RawBuild:
    """A build before normalisation: its image ID, and the image its last stage starts FROM as the
    engine knows it (a registry base by the reference it was pulled as)."""

    image_id: str
    final_base: str


def build(
    client: Engine,
    tp: TargetPlan,
    *,
    log_path: Path,
    ca_bundle: Path | None,
    progress: Callable[[str], None],
    extra_files: dict[str, bytes] | None = None,
    tag: str | None = None,
    nocache: bool = False,
    made: list[str] | None = None,
    builder: Builder | None = None,
    locked_debs: Mapping[str, str] | None = None,
) -> RawBuild:
    """Build tp with builder (default: the engine's classic builder); returns the (raw, not yet
    normalised) image, tagged `tag` (default: a temporary tag). The caller moves the real tags after
    normalising, then discards `made`: the image of every step (every stage's, not only the last
    stage's; BuildKit makes none, so there it is the raw image alone), which this function discards
    itself when the build fails or is interrupted. locked_debs (matrix.lock's debs of tp's stack):
    the .debs apt fetches through the outside check's cache (host.debproxy)."""
    with steplock.building(), debproxy.serving(client, locked_debs or {}) as debs:
        return _build(
            client,
            tp,
            log_path=log_path,
            ca_bundle=ca_bundle,
            progress=progress,
            extra_files=extra_files,
            tag=tag,
            nocache=nocache,
            made=[] if made is None else made,
            builder=builder or builders.ClassicBuilder(client),
            debs=debs,
        )


def build_labels(tp: TargetPlan) -> dict[str, str]:
    """The labels a build is given through the API: the builder records them as one more step."""
    return {bake.HASH_LABEL: tp.content_hash}


def given_as_labels(tp: TargetPlan) -> TrailingLabels | None:
    """The Dockerfile's trailing LABEL steps, which the builder is given with build_labels as one
    LABEL line: one step for all of them instead of a container and a commit each."""
    return tp.trailing_labels


def merged_steps(tp: TargetPlan) -> int:
    """How many of history_steps the builder's last entry holds besides its own (normalise's merged)."""
    given = given_as_labels(tp)
    return given.count if given else 0


def labelled(dockerfile: bytes, labels: dict[str, str]) -> bytes:
    """The Dockerfile with labels set by one more LABEL instruction (a step in its history on
    every builder, as the classic builder records the labels it is given)."""
    if not labels:
        return dockerfile
    text = dockerfile.decode()
    line = "LABEL " + " ".join(f'{k}="{v}"' for k, v in labels.items())
    return (text + ("" if text.endswith("\n") else "\n") + line + "\n").encode()


def history_steps(tp: TargetPlan) -> list[str]:
    """The image's own history entries, as rocmforge words them on every engine (render.dockerfile)."""
    labels = " ".join(f"{k}={v}" for k, v in build_labels(tp).items())
    return [*tp.steps, f"LABEL {labels}"]


def _build(
    client: Engine,
    tp: TargetPlan,
    *,
    log_path: Path,
    ca_bundle: Path | None,
    progress: Callable[[str], None],
    extra_files: dict[str, bytes] | None,
    tag: str | None,
    nocache: bool,
    made: list[str],
    builder: Builder,
    debs: debproxy.Serving,
) -> RawBuild:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # No revision label: the image is a function of its content (what the content tag names), so
    # the same inputs from any commit or checkout give the same image ID. The manifest records the commit.
    if not tp.final_from:
        raise BuildError(f"the Dockerfile of {tp.name} has no FROM")
    final_base = tp.final_from
    buildargs = dict(debs.buildargs)  # Docker's own proxy argument: no image records it
    mirror = aptmirror.from_env()
    if mirror:  # dropped from the normalised history: the mirror is not part of the image
        buildargs[aptmirror.ARG] = mirror
    if tp.registry_base:  # present on the engine by digest, pulled through the mirror when one is set
        image, digest = tp.registry_base
        base = registrybase.pull(client, image, digest, mirror=registrybase.mirror_from_env())
        assert base is not None, "pull with fetch=True returns a reference or raises"
        buildargs[bases.BASE_ARG] = base
        if tp.final_from.startswith("${"):
            final_base = base
    files, labels = {**tp.files, **(extra_files or {})}, build_labels(tp)
    given = given_as_labels(tp)
    if given:  # the classic builder makes a step of each label it is given: one LABEL line instead
        files["Dockerfile"] = given.with_labels(labels).encode()
        labels = {}
    elif not builder.makes_step_images:  # BuildKit sets labels it is given with no history entry
        files["Dockerfile"] = labelled(files["Dockerfile"], labels)
        labels = {}
    request = BuildRequest(
        tp.name,
        tp.content_tag,
        files,
        tag or raw_tag(tp),
        labels,
        buildargs,
        nocache,
        ca_bundle,
        log_path,
        builder,
        debs.note,
    )
    trace = BuildTrace(made)
    try:
        try:
            buildstream.run_logged(request, trace, progress)
        finally:
            if debs.counts is not None:  # the evidence of one download, also when the build failed
                append_line(log_path, f"# .debs: {debs.counts.summary()}")
    except BaseException:
        # Ctrl-C: the classic builder goes on when the client hangs up (it would commit the step,
        # finish the build and tag it), so the step in progress is killed; the build then fails there.
        # (BuildKit's CLI is stopped as its stream is closed.)
        if builder.makes_step_images:
            _stop_step(client, trace)
        discard(client, trace.ours())
        raise
    if trace.error or not trace.image_id:
        discard(client, trace.ours())
        why = (trace.error or "no image produced").strip()
        tail = _tail(log_path)
        sources = aptsources.failure_message(tp.stack, tail, mirror=mirror) if aptsources.update_failed(tail) else None
        if sources:  # names the list file and host that failed (the Debian mirror only when it was that)
            why = sources
        elif debs.counts is not None and debs.counts.failed:  # upstream did not answer the proxy
            why = aptmirror.unreachable_message(mirror)
        elif debs.counts is not None and debs.buildargs[debproxy.ARG] in tail and aptmirror.unreachable_hint(tail):
            why = (
                f"apt in the build could not reach rocmforge's .deb cache at {debs.buildargs[debproxy.ARG]} "
                f"(a firewall between build containers and this host?); ${debproxy.ENV}=0 fetches direct"
            )
        elif aptmirror.unreachable_hint(tail):
            why = aptmirror.unreachable_message(mirror)
        raise BuildError(f"build of {tp.name} failed at {trace.step}\n  {why}\n  full log: {log_path}")
    return RawBuild(trace.image_id, final_base)


def _tail(path: Path, size: int = 8192) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, f.seek(0, 2) - size))
        return f.read().decode(errors="replace")


def _stop_step(client: Engine, trace: BuildTrace, wait: float = 5.0) -> None:
    """Kills the container of the step in progress. The stream may not have named it yet (the
    interrupt can come between a step's announcement and its container), so containers made from
    the last step's image are looked for until one is found or `wait` runs out."""
    deadline = time.monotonic() + wait
    while True:
        ids = set(trace.running[-1:])
        if trace.made:
            ids |= {c["Id"] for c in client.list_containers(ancestor=trace.made[-1])}
        stopped = False
        for cid in ids:
            stopped = client.kill_if_running(cid) or stopped
        if stopped or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    time.sleep(1)  # the builder fails the step and removes the container (forcerm)


def discard(client: Engine, made: list[str]) -> None:
    """Removes the step images a build made, newest first, with the untagged parents only they
    use. A tagged image (the base, a prerequisite) and one another image still uses are kept.
    While another build runs on the engine they are left to it (see steplock)."""
    with steplock.exclusive() as alone:
        if not alone:
            steplock.defer(made)
            return
        remove_untagged(client, list(made) + steplock.take_pending())


def remove_untagged(client: Engine, images: list[str]) -> None:
    """Removes each of images that no tag names, newest (last) first; one still in use is left."""
    for short in reversed(images):
        try:
            if client.inspect(short).get("RepoTags"):
                continue
            client.remove_image(short)
        except EngineError:  # gone with a child removed before it, or still in use
            pass


def short_name(repo: str) -> str:
    """A repository as rocmforge names it: podman lists `rocmforge/x` as `localhost/rocmforge/x`,
    the containerd store may qualify it with docker.io."""
    for prefix in ("localhost/", "docker.io/library/", "docker.io/"):
        if repo.startswith(prefix):
            return repo[len(prefix) :]
    return repo


LEFTOVER_REPOS = ("rocmforge-raw", "rocmforge-repro")  # a build or verify-repro stopped before its clean-up
CACHE_REPO = "rocmforge-cache"


def leftovers(
    client: Engine,
    targets: list[str],
    stacks: list[str],
    cached: Set[str] = frozenset(),
    kept: Set[str] = frozenset(),
) -> list[tuple[str, str, int]]:
    """(kind, reference, bytes) of what `clean` removes: the tags of the targets' images and of the
    stacks' bases, the targets' kept build cache (tags, and the step images in `cached`), tags and
    step images an interrupted build left, and containers of such images. Step images carry no
    tag; they are found as images no tag reaches that inherited a rocmforge label (every image we
    build or build on carries io.rocmforge.content-hash); those in `kept`, the build cache other
    targets keep, are left alone."""
    repos = {f"rocmforge/{n}" for n in targets} | {f"rocmforge/base-{s}" for s in stacks}
    leftover = {f"{r}/{n}" for r in LEFTOVER_REPOS for n in targets}
    cache = {f"{CACHE_REPO}/{n}" for n in targets}
    out: list[tuple[str, str, int]] = []
    images = client.list_images()
    for img in images:
        for tag in img.get("RepoTags") or []:
            repo = short_name(tag.rsplit(":", 1)[0])
            if repo in repos:
                out.append(("tag", tag, img.get("Size", 0)))
            elif repo in cache:
                out.append(("build cache", tag, img.get("Size", 0)))
            elif repo in leftover:
                out.append(("leftover tag", tag, img.get("Size", 0)))
    for img in client.list_images(dangling=True, label="io.rocmforge.content-hash"):
        if img["Id"][7:19] in kept and img["Id"][7:19] not in cached:
            continue  # another target's kept build cache
        kind = "build cache" if img["Id"][7:19] in cached else "leftover image"
        out.append((kind, img["Id"], img.get("Size", 0)))
    ours = {
        img["Id"]
        for img in images
        if any(short_name(t.rsplit(":", 1)[0]) in leftover for t in img.get("RepoTags") or [])
    }
    for c in client.list_containers():
        if c.get("ImageID") in ours:
            out.append(("container", c["Id"], 0))
    return out


def require_built(client: Engine, tp: TargetPlan, flag: str = "--target") -> str:
    """The image ID of tp's built image; a UserError naming the build command when it is not built."""
    found = image_id(client, tp.content_tag)
    if found is None:
        what = f"variant {','.join(tp.variant)} of target {tp.name!r}" if tp.variant else f"target {tp.name!r}"
        raise UserError(
            f"{what} is not built ({tp.content_tag} not found); "
            f"run `{program.command('build --target ' + tp.name)}` first",
            field=flag,
        )
    return found
