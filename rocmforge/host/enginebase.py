"""The engine boundary: everything rocmforge asks of a container engine, in one class.

`Engine` talks to the engine's Docker-compatible API (Docker Engine 20.10+, podman's compatible
service) and is the only place outside `host/` that an engine is reached through; the rest of the
code holds an `Engine` and never a docker-py object, a docker-py error or a store's name. What
differs between image stores (how an image is identified, where its layers can be read without an
export, what a load must contain) is a subclass in `host/engines.py`, one per store. A builder other
than the engine's own (BuildKit) would replace `build`, the one method that runs a build.

docker-py is imported by the methods that use it (0.17 s), so commands that never reach an engine
do not pay for it."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, NamedTuple

from rocmforge.host import engineinfo
from rocmforge.shared.errors import BuildError

if TYPE_CHECKING:
    from docker import DockerClient

    from rocmforge.host.contentstore import ContentStore
    from rocmforge.host.layerstore import LayerStore
    from rocmforge.host.podmanstore import PodmanStore


class EngineError(BuildError):
    """The engine refused or failed a request (exit 1); the message is the engine's."""


class ImageMissing(EngineError):
    """The engine holds no image (or container) by that name."""


class DiskSpace(NamedTuple):
    path: str  # the engine's data root
    free_bytes: int


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """docker-py's and requests' errors as this module's: callers never import docker."""
    import docker.errors  # docker-py (0.17 s) loads at the first engine call
    import requests.exceptions  # comes with docker-py, loaded with it

    try:
        yield
    except docker.errors.NotFound as exc:
        raise ImageMissing(str(getattr(exc, "explanation", None) or exc)) from None
    except docker.errors.DockerException as exc:
        raise EngineError(str(getattr(exc, "explanation", None) or exc)) from None
    except requests.exceptions.RequestException as exc:
        raise EngineError(str(exc)) from None


def _streamed(chunks: Iterable) -> Iterator:
    with translated():
        yield from chunks


class Engine:
    """rocmforge's client of one engine. Images are named by reference (a tag, an ID as the engine
    shows it, name@digest); `identity` is what rocmforge calls an image's ID on every store."""

    # How a store wants a normalised image loaded (see host/engines.py for each store's reasons).
    loads_by_manifest = False  # the image is known by the manifest rocmforge writes: an OCI layout
    loads_partial_layouts = False  # an OCI layout may leave out the blobs of layers the engine holds
    loads_added_layers_only = True  # a docker-archive may leave out layers the engine already holds
    store_name = "the engine's store"
    # An exec's output can come back empty although the command printed (podman's compatible API,
    # when the command ends before the attach: containers/podman-py#506), so an empty answer is asked again.
    exec_output_may_be_lost = False

    def __init__(self, client: DockerClient, described: engineinfo.EngineInfo):
        self.docker = client  # host/ only: the docker-py client behind this engine
        self.described = described
        # The docker context it was reached through (None: DOCKER_HOST or the local socket): the
        # docker CLI, and so buildx, must be pointed at the same engine (buildx names its builder
        # for a context after the context).
        self.context: str | None = None

    # --- the engine itself ------------------------------------------------------------------

    def require(self) -> engineinfo.EngineInfo:
        """The engine's description; a UserError naming what rocmforge lacks on it."""
        return engineinfo.require_usable(self.described)

    def version(self) -> dict:
        with translated():
            return self.docker.version() or {}

    def system_info(self) -> dict:
        with translated():
            return self.docker.info() or {}

    def ping(self) -> bool:
        """True when the engine answers; EngineError when it does not."""
        with translated():
            return bool(self.docker.ping())

    def on_local_socket(self) -> bool:
        """Whether the engine is reached through a unix socket (docker-py names those
        http+docker://localhost), as opposed to tcp:// or ssh://, behind which it may be anywhere."""
        return self.docker.api.base_url == "http+docker://localhost"

    def bridge(self) -> tuple[str, str] | None:
        """(gateway address, interface name) of the engine's default bridge network, where its
        containers reach the machine the engine runs on; None when it has none that says both. A
        network whose IPAM leaves Gateway out (an engine that found docker0 already addressed) has
        the subnet's first address."""
        try:
            with translated():
                net = self.docker.api.inspect_network("bridge")
            config = ((net.get("IPAM") or {}).get("Config") or [{}])[0]
            address = config.get("Gateway") or str(next(ipaddress.ip_network(config["Subnet"]).hosts()))
        except (BuildError, KeyError, ValueError, StopIteration):
            return None
        return address, (net.get("Options") or {}).get("com.docker.network.bridge.name", "docker0")

    def data_root(self) -> Path | None:
        """Where this process reads the engine's data root; None when it cannot (engineinfo.store_root)."""
        return engineinfo.store_root(self.docker)

    def free_disk(self) -> DiskSpace | None:
        """The engine's data root and the bytes free there when the engine runs on this host."""
        root = self.system_info().get("DockerRootDir")
        try:
            return DiskSpace(root, shutil.disk_usage(root).free) if root else None
        except OSError:
            return None

    # --- images ------------------------------------------------------------------------------

    def inspect(self, ref: str) -> dict:
        """The engine's inspect document of the image; ImageMissing when there is none."""
        with translated():
            return self.docker.api.inspect_image(ref)

    def history(self, ref: str) -> list[dict]:
        """The image's history as the engine lists it (`docker history`), newest first: each entry's
        CreatedBy, Size and Comment; ImageMissing when there is no such image."""
        with translated():
            return list(self.docker.api.history(ref))

    def find(self, ref: str) -> dict | None:
        """inspect, or None when ref names no image."""
        try:
            return self.inspect(ref)
        except ImageMissing:
            return None

    def identity(self, ref: str) -> str | None:
        """The image's config digest (the same on every store); None when ref names no image. Here
        the ID the engine shows; a store that shows another ID overrides this."""
        return self.shown_id(ref)

    def shown_id(self, ref: str) -> str | None:
        """The ID the engine itself shows and accepts for the image (the manifest digest on a store
        that knows images by manifest); None when ref names no image."""
        found = self.find(ref)
        return found["Id"] if found else None

    def manifest_digest(self, ref: str) -> str | None:
        """The manifest digest the engine knows the image by; None where the store does not."""
        return None

    def labels(self, ref: str) -> dict[str, str]:
        return (self.inspect(ref).get("Config") or {}).get("Labels") or {}

    def list_images(self, *, label: str | None = None, dangling: bool | None = None) -> list[dict]:
        """The engine's image list (tagged images, or dangling ones), each with Id, RepoTags, Size, Labels."""
        filters: dict = {}
        if label:
            filters["label"] = label
        if dangling is not None:
            filters["dangling"] = dangling
        with translated():
            return self.docker.api.images(all=False, filters=filters or None)

    def image_ids(self) -> set[str]:
        """Every image the engine holds, intermediate ones too, by the ID it shows."""
        with translated():
            return set(self.docker.api.images(all=True, quiet=True))

    def tags(self) -> set[str]:
        return {t for img in self.list_images() for t in img.get("RepoTags") or []}

    def tag(self, source: str, ref: str) -> None:
        """Tags the image source as ref (repository[:tag], tag defaulting to latest)."""
        from docker.utils import parse_repository_tag  # docker-py (0.17 s) loads at the first engine call

        repo, tag = parse_repository_tag(ref)
        with translated():
            self.docker.api.tag(source, repo, tag or "latest")

    def untag(self, ref: str) -> None:
        """Removes the tag ref only: the image and its parents stay."""
        with translated():
            self.docker.api.remove_image(ref, noprune=True)

    def remove_image(self, ref: str, *, force: bool = False) -> None:
        """Removes the image (with the untagged parents only it uses); an image in use stays unless force."""
        with translated():
            self.docker.api.remove_image(ref, force=force, noprune=False)

    def export(self, ref: str) -> Iterator[bytes]:
        """`docker save` of the image, as chunks."""
        with translated():
            chunks = self.docker.api.get_image(ref)
        return _streamed(chunks)

    def load(self, chunks: Iterable[bytes]) -> int:
        """`docker load` of an archive; the bytes sent to the engine. EngineError with the engine's
        message when it refuses."""
        sent = 0

        def counted() -> Iterator[bytes]:
            nonlocal sent
            for chunk in chunks:
                sent += len(chunk)
                yield chunk

        with translated():
            for msg in self.docker.api.load_image(counted()):
                if isinstance(msg, dict) and (msg.get("error") or msg.get("errorDetail")):
                    raise EngineError(str(msg.get("error") or msg["errorDetail"]))
        return sent

    def layer_reader(self, image_id: str) -> LayerStore | ContentStore | PodmanStore | None:
        """Where this process reads the image's layers without an export; None: export them."""
        return None

    def unreadable(self) -> str:
        """Why layer_reader gave None, for the log."""
        root = self.data_root()
        return (
            f"{self.store_name} is not readable here (data root {root or 'not reported'}; set "
            f"${engineinfo.ROOT_ENV} to where this host sees it)"
        )

    def remember_manifest(self, manifest: bytes) -> str:
        """The ID the engine will show for an image loaded by this manifest: its config's digest,
        unless the store names images by their manifest."""
        return json.loads(manifest)["config"]["digest"]

    # --- the builder -------------------------------------------------------------------------

    def build(
        self,
        context: IO[bytes],
        *,
        tag: str,
        labels: dict[str, str],
        buildargs: dict[str, str],
        nocache: bool,
    ) -> Iterator[dict]:
        """Runs the engine's own builder on a tar context; the decoded progress stream."""
        with translated():
            stream = self.docker.api.build(
                fileobj=context,
                custom_context=True,
                tag=tag,
                labels=labels,
                buildargs=buildargs,
                rm=True,
                forcerm=True,
                nocache=nocache,
                pull=False,
                decode=True,
            )
        return _streamed(stream)

    # --- containers --------------------------------------------------------------------------

    def list_containers(self, *, ancestor: str | None = None, label: str | None = None) -> list[dict]:
        """Every container (running or not), each with Id and ImageID."""
        filters = {k: v for k, v in (("ancestor", ancestor), ("label", label)) if v}
        with translated():
            return self.docker.api.containers(all=True, filters=filters or None)

    def kill_if_running(self, container_id: str) -> bool:
        """Kills the container when it runs; whether it did. A container gone already is not an error."""
        try:
            with translated():
                if self.docker.api.inspect_container(container_id)["State"]["Running"]:
                    self.docker.api.kill(container_id)
                    return True
        except EngineError:
            pass
        return False

    def remove_container(self, container_id: str) -> None:
        with translated():
            self.docker.api.remove_container(container_id, force=True)

    def kill(self, container_id: str) -> None:
        """SIGKILL; a container that has ended or is gone is not an error (the removal says which matters)."""
        with contextlib.suppress(EngineError), translated():
            self.docker.api.kill(container_id)

    def create_container(
        self, image: str, argv: list[str], *, labels: dict, entrypoint: list[str] | None = None, **options
    ) -> str:
        """A container of the image, created, not started; its ID. options (devices, group_add,
        security_opt): what the GPU needs, as `docker run` passes them."""
        with translated():
            host_config = self.docker.api.create_host_config(**options)
            created = self.docker.api.create_container(
                image, argv, entrypoint=entrypoint, labels=labels, host_config=host_config
            )
        return created["Id"]

    def start_container(self, container_id: str) -> None:
        """EngineError with the engine's words when it cannot start (an entrypoint that is missing)."""
        with translated():
            self.docker.api.start(container_id)

    def wait_container(self, container_id: str, timeout: int) -> int | None:
        """The exit code, or None when it still runs after timeout seconds."""
        import requests.exceptions  # as docker-py's read timeout surfaces; loaded with it

        with translated():
            try:
                return self.docker.api.wait(container_id, timeout=timeout)["StatusCode"]
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                return None

    def container_logs(self, container_id: str) -> tuple[bytes, bytes]:
        """What the container wrote: (stdout, stderr)."""
        with translated():
            api = self.docker.api
            return api.logs(container_id, stdout=True, stderr=False), api.logs(container_id, stdout=False, stderr=True)

    def exec_in(self, container_id: str, argv: list[str], env: dict | None = None) -> tuple[int, bytes, bytes]:
        """argv run to its end in the running container: (exit code, stdout, stderr)."""
        with translated():
            api = self.docker.api
            exec_id = api.exec_create(container_id, argv, environment=env, stdout=True, stderr=True)["Id"]
            out, err = api.exec_start(exec_id, demux=True)
            return api.exec_inspect(exec_id)["ExitCode"], out or b"", err or b""

    def put_archive(self, container_id: str, path: str, data: bytes) -> None:
        """A tar unpacked into path through the engine's archive API: no program in the image takes part."""
        with translated():
            self.docker.api.put_archive(container_id, path, data)

    def get_archive(self, container_id: str, path: str) -> bytes | None:
        """What is at path, as a tar read through the engine's archive API; None when nothing is."""
        try:
            with translated():
                stream, _ = self.docker.api.get_archive(container_id, path)
                return b"".join(stream)  # the engine sends the archive whether read or not
        except ImageMissing:
            return None

    # --- registries --------------------------------------------------------------------------

    def push(self, repository: str, tag: str) -> Iterator[dict]:
        """`docker push repository:tag`; the decoded progress stream."""
        with translated():
            stream = self.docker.api.push(repository, tag=tag, stream=True, decode=True)
        return _streamed(stream)

    def pull(self, repository: str, reference: str) -> Iterator[dict]:
        """`docker pull repository:tag` or `repository@digest` (reference a digest); the progress stream."""
        with translated():
            stream = self.docker.api.pull(repository, tag=reference, stream=True, decode=True)
        return _streamed(stream)

    def registry_config(self) -> dict:
        """The engine's RegistryConfig: which registries it reaches over plain HTTP."""
        return self.system_info().get("RegistryConfig") or {}
