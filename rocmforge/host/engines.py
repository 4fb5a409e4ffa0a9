"""One `Engine` per image store, and the one place a connection to an engine is made.

The stores differ where rocmforge reads and writes images:

* the classic graph-driver store (Docker's overlay2 and other drivers): the image ID is the config
  digest; the layers are read from the overlay2 store (layerstore) when this host sees it; a load
  may hold only the layers the engine lacks;
* Docker's containerd image store (Docker 29's default): the engine shows the manifest digest as
  the image ID, so the config digest is read from the manifest; the layers are read from the
  containerd content store (contentstore); an image is loaded as an OCI layout whose manifest
  rocmforge writes;
* podman: the image ID is the config digest; the layers are read from its overlay storage
  (podmanstore); a docker-archive must hold every layer of the image, but an OCI layout may leave
  out the blobs of layers the storage holds, so only the added layers travel back: with the storage
  read, and through `docker save` too (its layers are the uncompressed tars, named by diff ID)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmforge.host import dockercontext, engine_errors, engineinfo, imageid
from rocmforge.host.contentstore import ContentStore
from rocmforge.host.enginebase import DiskSpace, Engine, EngineError, ImageMissing, translated
from rocmforge.host.layerstore import LayerStore
from rocmforge.host.podmanstore import PodmanStore
from rocmforge.shared.errors import BuildError

if TYPE_CHECKING:
    from docker import DockerClient

__all__ = ["DiskSpace", "Engine", "EngineError", "ImageMissing", "connect", "wrap"]


class GraphDriverEngine(Engine):
    def layer_reader(self, image_id: str) -> LayerStore | None:
        return LayerStore.of(self.data_root(), self.described.driver)


class ContainerdEngine(Engine):
    loads_by_manifest = True
    loads_partial_layouts = True
    store_name = "the containerd content store"

    def identity(self, ref: str) -> str | None:
        shown = self.shown_id(ref)
        if shown is None:
            return None
        return imageid.from_cache(shown) or imageid.from_export(self.export(ref), shown) or shown

    def manifest_digest(self, ref: str) -> str | None:
        return self.shown_id(ref)

    def layer_reader(self, image_id: str) -> ContentStore | None:
        root = self.data_root()
        return ContentStore.of(root, image_id) if root is not None else None

    def remember_manifest(self, manifest: bytes) -> str:
        return imageid.remember(manifest)


class PodmanEngine(Engine):
    loads_partial_layouts = True
    loads_added_layers_only = False
    store_name = "podman storage"
    exec_output_may_be_lost = True  # seen here: dpkg-query's whole list came back empty, exit 0 (podman 5.8)

    def layer_reader(self, image_id: str) -> PodmanStore | None:
        return PodmanStore.of(self.data_root(), self.described.driver)


_BY_STORE = {
    engineinfo.GRAPHDRIVER: GraphDriverEngine,
    engineinfo.CONTAINERD: ContainerdEngine,
    engineinfo.PODMAN: PodmanEngine,
}


def wrap(client: DockerClient) -> Engine:
    """The Engine of a docker-py client (one made here, or a test's own)."""
    with translated():
        described = engineinfo.read(client)
    return _BY_STORE[described.store](client, described)


def connect(timeout: int = 600, *, base_url: str | None = None, check: bool = True) -> Engine:
    """The engine of DOCKER_HOST (or base_url; else the docker context chosen, as the docker CLI
    picks it: host/dockercontext), reachable; BuildError (exit 1) naming how to start it when not.
    check: also a UserError when rocmforge cannot work with it (engineinfo.problem)."""
    import docker  # docker-py (0.17 s) loads at the first engine call

    endpoint = None if base_url else dockercontext.resolve()
    try:
        if base_url:
            client = docker.DockerClient(base_url=base_url, timeout=timeout)
        elif endpoint:
            client = docker.DockerClient(timeout=timeout, **dockercontext.client_options(endpoint))
        else:
            client = docker.from_env(timeout=timeout)
        client.ping()
        engine = wrap(client)
    except (docker.errors.DockerException, OSError, EngineError) as exc:
        raise BuildError(
            engine_errors.unreachable(exc, base_url or (endpoint.describe() if endpoint else None))
        ) from None
    engine.context = endpoint.context if endpoint else None
    if check:
        engine.require()
    return engine
