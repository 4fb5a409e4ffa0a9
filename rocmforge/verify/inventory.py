"""What an image has installed (dpkg and Python packages, the arch-prune records), for its
manifest and SBOM. Taken in a throw-away container, or known without one:
- an image's inventory is kept in the user's cache under its identity (config digest: the same
  bytes on every engine give the same inventory);
- an image that adds to its base only layers touching none of the files the inventory reads, with
  the same environment, user and working directory, has its base's inventory. Once one such
  image's inventory has been taken in a container, its base's is known too (the same argument,
  read the other way), so the next small change on that base needs no container at all."""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import TYPE_CHECKING, Callable, Iterable

from rocmforge.host.container import TrackedContainer
from rocmforge.render import archprune
from rocmforge.shared.files import user_cache

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine

PY_INVENTORY = ("import importlib.metadata as m, json; "
                "print(json.dumps(sorted({(d.metadata['Name'], d.version) for d in m.distributions() "
                "if d.metadata['Name']})))")

# What the container's commands read, as layer names: dpkg's database and configuration, every
# Python installation, its search path and package metadata, the prune records, and the programs
# run (python*, dpkg*, the shells, cat: wherever PATH finds them).
READ_ROOTS = (b"var/lib/dpkg", b"etc/dpkg", b"usr/lib/python", b"usr/local/lib/python", b"etc/python",
              b"opt/rocmforge/venv", archprune.PRUNE_DIR.lstrip("/").encode())
READ_MARKS = (b"site-packages", b"dist-packages", b".dist-info", b".egg", b".pth", b"pyvenv.cfg")
READ_PROGRAM_PREFIXES = (b"python", b"dpkg", b"libpython")
READ_PROGRAMS = (b"sh", b"dash", b"bash", b"cat", b"env")
RUN_AS = ("Env", "User", "WorkingDir")   # what the commands see of the config
WHITEOUT = b".wh."
OPAQUE = b".wh..opq"   # what follows WHITEOUT in an opaque marker


def cache_dir():
    return user_cache("inventory")


def take(client: Engine, image: str) -> dict:
    """The inventory read in one throw-away container of image."""
    with TrackedContainer(client, image) as tc:
        r = tc.exec(["dpkg-query", "-W", "-f", "${Package}=${Version}\\n"])
        dpkg = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line) if r.rc == 0 else {}
        python = {}
        for exe in ("/opt/rocmforge/venv/bin/python", "python3"):
            r = tc.exec([exe, "-c", PY_INVENTORY])
            if r.rc == 0:
                python = {name: version for name, version in json.loads(r.stdout)}
                break
        r = tc.exec(["sh", "-c", archprune.READ_RECORDS])
        prune_records = archprune.parse_records(r.stdout) if r.rc == 0 else []
    return {"dpkg": dict(sorted(dpkg.items())), "python": dict(sorted(python.items(), key=lambda kv: kv[0].lower())),
            "prune_records": prune_records}


def read_by_inventory(path: bytes) -> bool:
    """Whether a layer entry of this name (directories end in "/") may change what take() reads.
    A whiteout stands for the name it removes (an opaque marker for its folder); removing or
    replacing a folder above a read root counts, listing it (a directory entry) does not."""
    is_dir = path.endswith(b"/")
    folder, _, leaf = path.rstrip(b"/").rpartition(b"/")
    path = path.rstrip(b"/")
    if leaf.startswith(WHITEOUT):
        removed = leaf[len(WHITEOUT):]
        path = folder if removed == OPAQUE else (folder + b"/" + removed if folder else removed)
        leaf, is_dir = path.rpartition(b"/")[2], False
    if any(mark in path for mark in READ_MARKS):
        return True
    if not is_dir and (leaf in READ_PROGRAMS or leaf.startswith(READ_PROGRAM_PREFIXES)):
        return True
    return any(path.startswith(root) or (not is_dir and (not path or root.startswith(path + b"/")))
               for root in READ_ROOTS)


def first_read(paths: Iterable[bytes]) -> bytes | None:
    """A name the inventory reads, a file rather than its folder where both are there (the file
    says more in the log)."""
    found = [p for p in paths if read_by_inventory(p)]
    return next((p for p in found if not p.endswith(b"/")), found[0] if found else None)


def _load(identity: str) -> dict | None:
    try:
        data = json.loads((cache_dir() / f"{identity.removeprefix('sha256:')}.json").read_text())
    except (OSError, ValueError):
        return None
    inv = data.get("inventory") if isinstance(data, dict) and data.get("image") == identity else None
    if not (isinstance(inv, dict) and isinstance(inv.get("dpkg"), dict) and isinstance(inv.get("python"), dict)
            and isinstance(inv.get("prune_records"), list)):
        return None
    return inv


def _keep(identity: str, inv: dict) -> None:
    """A cache that cannot be written costs a container later, nothing else."""
    try:
        d = cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            json.dump({"image": identity, "inventory": inv}, f, sort_keys=True)
        os.replace(tmp, d / f"{identity.removeprefix('sha256:')}.json")
    except OSError:
        pass


def _runs_alike(client: Engine, image: str, base: str) -> bool:
    a, b = (client.inspect(ref).get("Config") or {} for ref in (image, base))
    return all(a.get(key) == b.get(key) for key in RUN_AS)


def inventory(client: Engine, image: str, *, base: str | None = None, added_paths: list[bytes] | None = None,
              log: Callable[[str], None] = lambda line: None) -> dict:
    """image's inventory, from the cache, its base's, or a container (then kept). base and
    added_paths: the image it was built FROM and every name of the layers the build added
    (normalise's NormalisedImage); without them only the image's own cache entry saves a
    container. log says which it was."""
    identity = client.identity(image)
    inv = _load(identity)
    if inv is not None:
        log(f"inventory of {identity[7:19]}: kept in {cache_dir()} from an earlier build")
        return inv
    neutral = base is not None and added_paths is not None
    if neutral:
        touched = first_read(added_paths)
        if touched is not None:
            neutral = False
            log(f"inventory of {identity[7:19]}: taken in a container (the build added "
                f"{touched.decode(errors='replace')}, which it reads)")
        elif not _runs_alike(client, image, base):
            neutral = False
            log(f"inventory of {identity[7:19]}: taken in a container (its {'/'.join(RUN_AS)} differ from its base's)")
    base_identity = client.identity(base) if neutral else None
    if base_identity is not None:
        inv = _load(base_identity)
        if inv is not None:
            _keep(identity, inv)
            log(f"inventory of {identity[7:19]}: its base's ({base_identity[7:19]}): the added layers change "
                "nothing it reads")
            return inv
        log(f"inventory of {identity[7:19]}: taken in a container (kept for its base {base_identity[7:19]} too)")
    elif not neutral and added_paths is None:
        log(f"inventory of {identity[7:19]}: taken in a container")
    started = time.monotonic()
    inv = take(client, image)
    log(f"inventory of {identity[7:19]}: the container took {time.monotonic() - started:.1f}s")
    _keep(identity, inv)
    if base_identity is not None:
        _keep(base_identity, inv)
    return inv
