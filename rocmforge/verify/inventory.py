"""What an image has installed (dpkg and Python packages, the arch-prune records), for its
manifest and SBOM. Taken in a throw-away container, or known without one:
- an image's inventory is kept in the user's cache under its identity (config digest: the same
  bytes on every engine give the same inventory);
- an image that adds to its base only layers touching none of the files the inventory reads, with
  the same environment, user and working directory, has its base's inventory. Once one such
  image's inventory has been taken in a container, its base's is known too (the same argument,
  read the other way), so the next small change on that base needs no container at all."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.host.container import TrackedContainer
from rocmforge.host.enginebase import EngineError
from rocmforge.render import archprune
from rocmforge.shared.files import atomic_write, keep_most_recent, user_cache

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine

# sys.path[0] is the working directory under -c: a module or package there (an app copied into
# WORKDIR) would shadow the standard library the command imports.
PY_INVENTORY = (
    "import sys; sys.path[:1] = [p for p in sys.path[:1] if p]; "
    "import importlib.metadata as m, json; "
    "print(json.dumps(sorted({(d.metadata['Name'], d.version) for d in m.distributions() "
    "if d.metadata['Name']})))"
)
DPKG_QUERY = ["dpkg-query", "-W", "-f", "${Package}=${Version}\\n"]
PYTHONS = ("/opt/rocmforge/venv/bin/python", "python3")
NOT_THERE = (126, 127)  # the program is missing: nothing of that kind is installed

# What the container's commands read, as layer names: dpkg's database and configuration, every
# Python installation (its standard library, search path and package metadata), the prune records,
# the dynamic loader and libraries, the user database (HOME, the user site), and the programs run
# (python*, dpkg*, the shells, cat, timeout, sleep: wherever PATH finds them).
READ_ROOTS = (
    b"var/lib/dpkg",
    b"etc/dpkg",
    b"etc/python",
    b"etc/ld.so",
    b"etc/passwd",
    b"etc/group",
    b"opt/rocmforge/venv",
    archprune.PRUNE_DIR.lstrip("/").encode(),
    b"lib64",
    b"usr/lib64",
)
READ_MARKS = (
    b"site-packages",
    b"dist-packages",
    b".dist-info",
    b".egg",
    b".pth",
    b"pyvenv.cfg",
    b"lib/python",
    b"-linux-gnu",
)
# Where Debian keeps what the marks and programs match: replacing or removing a folder above one
# of these (or a root) counts.
READ_PLACES = READ_ROOTS + (
    b"usr/lib/python3",
    b"usr/local/lib/python3",
    b"usr/lib/x86_64-linux-gnu",
    b"lib/x86_64-linux-gnu",
    b"usr/bin/python3",
    b"usr/bin/dpkg-query",
    b"bin/sh",
    b"usr/bin/timeout",
    b"usr/bin/sleep",
)
READ_PROGRAM_PREFIXES = (b"python", b"dpkg", b"libpython", b"ld-linux", b"libc.so", b"libc-")
READ_PROGRAMS = (b"sh", b"dash", b"bash", b"cat", b"env", b"timeout", b"sleep")
RUN_AS = ("Env", "User", "WorkingDir")  # what the commands see of the config
WHITEOUT = b".wh."
OPAQUE = b".wh..opq"  # what follows WHITEOUT in an opaque marker
KEEP = 512  # cache entries kept (most recently used; a few tens of KB each)
# Cache entries are named by the commands too: changing what is read starts a new cache.
COMMANDS = hashlib.sha256(json.dumps([PY_INVENTORY, DPKG_QUERY, PYTHONS, archprune.READ_RECORDS]).encode()).hexdigest()[
    :12
]


def cache_dir() -> Path:
    """The folder of the inventories kept between builds, in the user's cache."""
    return user_cache("inventory")


def take(client: Engine, image: str) -> tuple[dict, bool]:
    """The inventory read in one throw-away container of image, and whether every command gave
    an answer (ran, or found its program missing); an incomplete one is not kept."""
    complete = True

    def answered(rc: int) -> bool:
        nonlocal complete
        complete = complete and (rc == 0 or rc in NOT_THERE)
        return rc == 0

    with TrackedContainer(client, image) as tc:
        r = tc.exec(DPKG_QUERY)
        dpkg = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line) if answered(r.rc) else {}
        python = {}
        for exe in PYTHONS:
            r = tc.exec([exe, "-c", PY_INVENTORY])
            if r.rc == 0:
                python = {name: version for name, version in json.loads(r.stdout)}
                break
            answered(r.rc)
        r = tc.exec(["sh", "-c", archprune.READ_RECORDS])
        prune_records = archprune.parse_records(r.stdout) if answered(r.rc) else []
    inv = {
        "dpkg": dict(sorted(dpkg.items())),
        "python": dict(sorted(python.items(), key=lambda kv: kv[0].lower())),
        "prune_records": prune_records,
    }
    return inv, complete


def read_by_inventory(path: bytes) -> bool:
    """Whether a layer entry of this name (directories end in "/") may change what take() reads.
    A whiteout stands for the name it removes (an opaque marker for its folder); removing or
    replacing a folder above a read root counts, listing it (a directory entry) does not."""
    is_dir = path.endswith(b"/")
    folder, _, leaf = path.rstrip(b"/").rpartition(b"/")
    path = path.rstrip(b"/")
    if leaf.startswith(WHITEOUT):
        removed = leaf[len(WHITEOUT) :]
        path = folder if removed == OPAQUE else (folder + b"/" + removed if folder else removed)
        leaf, is_dir = path.rpartition(b"/")[2], False
    if any(mark in path for mark in READ_MARKS):
        return True
    if not is_dir and (leaf in READ_PROGRAMS or leaf.startswith(READ_PROGRAM_PREFIXES)):
        return True
    if any(path.startswith(root) for root in READ_ROOTS):
        return True
    return not is_dir and any(not path or place.startswith(path + b"/") for place in READ_PLACES)


def first_read(paths: Iterable[bytes]) -> bytes | None:
    """A name the inventory reads, a file rather than its folder where both are there (the file
    says more in the log)."""
    found = [p for p in paths if read_by_inventory(p)]
    return next((p for p in found if not p.endswith(b"/")), found[0] if found else None)


def _entry(identity: str) -> Path:
    return cache_dir() / f"{identity.removeprefix('sha256:')}-{COMMANDS}.json"


def _load(identity: str) -> dict | None:
    path = _entry(identity)
    try:
        data = json.loads(path.read_text())
        os.utime(path)  # most recently used: pruned last
    except (OSError, ValueError):
        return None
    inv = data.get("inventory") if isinstance(data, dict) and data.get("image") == identity else None
    if not (
        isinstance(inv, dict)
        and isinstance(inv.get("dpkg"), dict)
        and isinstance(inv.get("python"), dict)
        and isinstance(inv.get("prune_records"), list)
    ):
        return None
    return inv


def _keep(identity: str, inv: dict) -> None:
    """A cache that cannot be written costs a container later, nothing else."""
    try:
        atomic_write(_entry(identity), json.dumps({"image": identity, "inventory": inv}, sort_keys=True).encode())
        keep_most_recent(cache_dir(), "*.json", KEEP)
    except OSError:
        pass


def _run_as(inspected: dict) -> tuple:
    config = inspected.get("Config") or {}
    return tuple(json.dumps(config.get(key), sort_keys=True) for key in RUN_AS)


@dataclass(frozen=True)
class BaseSeen:
    """The image a build started FROM, as it was when the build was normalised (a tag may move on)."""

    identity: str
    run_as: tuple  # its config's RUN_AS fields

    @classmethod
    def of(cls, client: Engine, ref: str | None) -> BaseSeen | None:
        """None when there is no base, or the engine cannot say (the inventory then takes a container)."""
        if not ref:
            return None
        try:
            identity = client.identity(ref)
            return cls(identity, _run_as(client.inspect(ref))) if identity else None
        except EngineError:
            return None


def _why_not_the_bases(client: Engine, image: str, base: BaseSeen, added_paths: list[bytes]) -> str | None:
    touched = first_read(added_paths)
    if touched is not None:
        return f"the build added {touched.decode(errors='replace')}, which it reads"
    if _run_as(client.inspect(image)) != base.run_as:
        return f"its {'/'.join(RUN_AS)} differ from its base's"
    return None


def inventory(
    client: Engine,
    image: str,
    *,
    base: BaseSeen | None = None,
    added_paths: list[bytes] | None = None,
    log: Callable[[str], None] = lambda line: None,
) -> dict:
    """image's inventory, from the cache, its base's, or a container (then kept). base and
    added_paths: what its build started FROM and every name of the layers the build added
    (normalise's NormalisedImage); without them only the image's own cache entry saves a
    container. log says which it was, and why."""
    identity = client.identity(image)
    if identity is None:  # gone since the caller found it: the TypeError that slicing None raised
        raise TypeError(f"inventory of {image}: the engine holds no such image")
    said = f"inventory of {identity[7:19]}"
    inv = _load(identity)
    if inv is not None:
        log(f"{said}: kept in {cache_dir()} from an earlier build")
        return inv
    why = _why_not_the_bases(client, image, base, added_paths) if base and added_paths is not None else "no base"
    same_as = base if why is None else None  # the base whose inventory is the image's
    if same_as is not None:
        inv = _load(same_as.identity)
        if inv is not None:
            _keep(identity, inv)
            log(f"{said}: its base's ({same_as.identity[7:19]}): the added layers change nothing it reads")
            return inv
        log(f"{said}: taken in a container (kept for its base {same_as.identity[7:19]} too)")
    else:
        log(f"{said}: taken in a container ({why})")
    started = time.monotonic()
    inv, complete = take(client, image)
    log(
        f"{said}: the container took {time.monotonic() - started:.1f}s"
        + ("" if complete else "; a command failed, so it is not kept")
    )
    if complete:
        _keep(identity, inv)
        if same_as is not None:
            _keep(same_as.identity, inv)
    return inv
