"""Which engine runs the containers, and whether it runs as root: the answer decides who opens the
GPU's device nodes.

A rootful engine (dockerd, ``sudo podman``) opens them as root and gives the container's process
the groups named by ``--group-add <GID>``. A rootless engine (Docker's rootless mode through
rootlesskit, ``podman`` run by a user) runs the container in a user namespace that maps only the
user's own ID and subordinate IDs (``/etc/subgid``): the host's ``render``/``video`` GIDs are not
mapped there, so ``--group-add <GID>`` names some other group, and the process can open
``/dev/kfd`` only through the groups the user already has, kept by the runtime (podman's
``--group-add keep-groups``; crun's ``run.oci.keep_original_groups=1`` annotation, which is what
keep-groups sets), or through nodes open to every user.

Signs of rootless mode, any one is enough: ``DOCKER_HOST``/``CONTAINER_HOST`` pointing into
``/run/user/UID/`` (the per-user socket of rootless Docker and of podman's user service), the
engine's security options including ``name=rootless`` (``docker info`` shows it for both), or
podman used by a user other than root.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from rocmforge.doctor.hostroot import HostRoot

ENGINE_INFO = "docker-info.json"  # `docker info --format '{{json .}}'` saved beside a copied host
ENGINE_INFO_COMMAND = "docker info --format '{{json .}}'"
_USER_SOCKET = re.compile(r"^unix://(/var)?/run/user/(\d+)/(podman/podman|docker)\.sock$")

DOCKER, PODMAN = "Docker", "podman"


@dataclass(frozen=True)
class EngineTraits:
    """What the engine says about itself that the CDI and rootless checks need; None: not known."""

    podman: bool | None = None
    security_options: tuple[str, ...] | None = None
    cdi_dirs: tuple[str, ...] | None = None  # CDISpecDirs: the folders the engine reads CDI specs from
    source: str = ""  # where these came from

    @classmethod
    def of_info(cls, info: dict, *, podman: bool | None = None, source: str = "the engine") -> EngineTraits:
        """From `docker info` (the API's /info, or its JSON saved by :data:`ENGINE_INFO_COMMAND`), or
        from `podman info --format json`, whose ``host.security.rootless`` says it directly."""
        host = info.get("host")
        if isinstance(host, dict):
            security = host.get("security")
            security = security if isinstance(security, dict) else {}
            rootless = security.get("rootless")
            return cls(
                podman=True,
                security_options=("name=rootless",) if rootless is True else () if rootless is False else None,
                source=source,
            )
        opts, dirs = info.get("SecurityOptions"), info.get("CDISpecDirs")
        return cls(
            podman=podman,
            security_options=tuple(str(o) for o in opts) if isinstance(opts, list) else None,
            cdi_dirs=tuple(str(d) for d in dirs) if isinstance(dirs, list) else None,
            source=source,
        )


def saved_traits(host: HostRoot) -> EngineTraits | None:
    """The engine info saved in a copied host (:data:`ENGINE_INFO`), None when there is none."""
    if host.live:
        return None
    text = host.read("/" + ENGINE_INFO)
    if text is None:
        return None
    try:
        info = json.loads(text)
    except ValueError:
        return EngineTraits(source=f"{ENGINE_INFO} (not JSON: ignored)")
    return EngineTraits.of_info(info if isinstance(info, dict) else {}, source=ENGINE_INFO)


@dataclass(frozen=True)
class EngineMode:
    engine: str  # DOCKER or PODMAN
    rootless: bool | None  # None: no sign either way (the engine's info is not known)
    why: str  # the sign it was told by

    def describe(self) -> str:
        word = {True: "rootless ", False: "rootful ", None: ""}[self.rootless]
        return f"{word}{self.engine} ({self.why})"


def mode(environ: dict[str, str], uid: int | None, traits: EngineTraits) -> EngineMode:
    """The engine the containers run under, from the environment's socket, the engine's security
    options and the user."""
    socket = environ.get("CONTAINER_HOST") or environ.get("DOCKER_HOST") or ""
    m = _USER_SOCKET.match(socket)
    podman = bool(traits.podman) or (m is not None and m.group(3) == "podman/podman")
    engine = PODMAN if podman else DOCKER
    var = "CONTAINER_HOST" if environ.get("CONTAINER_HOST") else "DOCKER_HOST"
    if m:
        return EngineMode(engine, True, f"{var}={socket}, a user's socket")
    if traits.security_options is not None and any("name=rootless" in o for o in traits.security_options):
        return EngineMode(engine, True, f"{traits.source} lists the security option name=rootless")
    if podman and uid is not None and uid != 0:
        return EngineMode(engine, True, f"podman run by UID {uid}")
    if traits.security_options is not None:
        return EngineMode(engine, False, f"{traits.source} lists no rootless security option")
    return EngineMode(
        engine, None, "no rootless socket in DOCKER_HOST, and the engine's security options are not known"
    )
