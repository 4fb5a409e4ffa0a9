"""Which engine and image store the client talks to, and whether rocmforge can work with it.

Three stores behave differently where it matters here: the classic graph-driver store (image ID =
config digest; `docker load` of only the added layers works), Docker's containerd image store
(image ID = manifest digest; `docker save` writes an OCI layout), and podman (image ID = config
digest; `docker load` needs every layer in the archive)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.shared.errors import UserError

if TYPE_CHECKING:
    from docker import DockerClient

GRAPHDRIVER, CONTAINERD, PODMAN = "graphdriver", "containerd", "podman"
MIN_API = (1, 41)  # Docker 20.10 and podman's compatible API; older lacks what normalise uses
CONTAINERD_SNAPSHOTTER = "io.containerd.snapshotter.v1"
KNOWN_DRIVERS = {"overlay2", "overlay", "fuse-overlayfs", "vfs", "btrfs", "zfs", "devicemapper", "aufs"}
# The engine's data root as this process sees it, where that is not the path the engine reports:
# an engine in a container (Docker-in-Docker, a CI service) whose /var/lib/docker is a volume here.
ROOT_ENV = "ROCMFORGE_ENGINE_ROOT"


@dataclass(frozen=True)
class EngineInfo:
    name: str  # "Docker Engine", "Podman Engine"
    version: str
    api_version: str
    driver: str  # the storage driver (overlay2; overlayfs under the containerd store)
    store: str  # GRAPHDRIVER, CONTAINERD or PODMAN

    @property
    def podman(self) -> bool:
        """podman, whose command lines differ from Docker's (doctor)."""
        return self.store == PODMAN

    def describe(self) -> str:
        store = {CONTAINERD: f"containerd image store ({self.driver})", PODMAN: f"podman storage ({self.driver})"}
        return f"{self.name} {self.version} (API {self.api_version}), {store.get(self.store, self.driver)}"


def _api_tuple(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in text.split("."))
    except ValueError:
        return ()


def read(client: DockerClient) -> EngineInfo:
    """What the engine says of itself: Docker or podman, its versions, and which image store it runs."""
    version = client.version() or {}
    info = client.info() or {}
    names = [c.get("Name", "") for c in version.get("Components") or []]
    podman = any("podman" in n.lower() for n in names) or "podman" in str(version.get("Platform", {})).lower()
    driver = str(info.get("Driver") or "unknown")
    status = dict(tuple(pair) for pair in info.get("DriverStatus") or [] if len(pair) == 2)
    if podman:
        store = PODMAN
    elif status.get("driver-type") == CONTAINERD_SNAPSHOTTER:
        store = CONTAINERD
    else:
        store = GRAPHDRIVER
    return EngineInfo(
        name="Podman Engine" if podman else "Docker Engine",
        version=str(version.get("Version") or "unknown"),
        api_version=str(version.get("ApiVersion") or "unknown"),
        driver=driver,
        store=store,
    )


def problem(engine: EngineInfo) -> str | None:
    """What rocmforge lacks on this engine, in one line; None when it can work with it."""
    need = f"rocmforge needs Docker Engine API {'.'.join(map(str, MIN_API))} or newer"
    api = _api_tuple(engine.api_version)
    if api and api < MIN_API:
        return f"{engine.describe()}: {need}"
    if engine.store != CONTAINERD and engine.driver not in KNOWN_DRIVERS | {"unknown"}:
        return (
            f"{engine.describe()}: unknown storage driver {engine.driver!r}; rocmforge works with "
            f"{', '.join(sorted(KNOWN_DRIVERS))} or the containerd image store"
        )
    return None


def require_usable(engine: EngineInfo) -> EngineInfo:
    """engine itself; a UserError (exit 2) naming what is missing when rocmforge cannot use it."""
    why = problem(engine)
    if why:
        raise UserError(why)
    return engine


def store_root(client: DockerClient) -> Path | None:
    """Where this process reads the engine's data root (DockerRootDir): $ROCMFORGE_ENGINE_ROOT, else
    the path the engine reports, which is this host's only for an engine on this host. None when
    the engine does not say."""
    if os.environ.get(ROOT_ENV):
        return Path(os.environ[ROOT_ENV])
    try:
        root = (client.info() or {}).get("DockerRootDir")
    except Exception:  # noqa: BLE001 - any failure means: no store to read, use docker save
        return None
    return Path(root) if root else None
