"""The bootstrap base provider: debootstrap → normalised tar → docker-archive with a config we
write → `docker load`. Same recipe and same packages give the same image ID, because the ID is
the sha256 of config bytes that hold no wall-clock time."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from . import bases
from .errors import BuildError
from .matrix import Stack

# Paths that differ between two debootstraps of the same packages (logs, caches, host identity).
SCRUB = ["var/cache/ldconfig/aux-cache", "var/log/bootstrap.log", "var/log/dpkg.log",
         "var/log/alternatives.log", "var/log/apt", "var/cache/apt/pkgcache.bin",
         "var/cache/apt/srcpkgcache.bin", "var/cache/debconf/config.dat-old",
         "var/cache/debconf/templates.dat-old", "var/lib/dpkg/status-old",
         "var/lib/dpkg/diversions-old", "debootstrap"]
EMPTY_DIRS = ["var/lib/apt/lists", "var/cache/apt/archives"]
BLANK = ["etc/resolv.conf", "etc/hostname", "etc/machine-id"]
EPOCH0 = "1970-01-01T00:00:00Z"
SNAPSHOT_CONF = "etc/apt/apt.conf.d/99rocmforge-snapshot"


def normalise(rootfs: Path) -> None:
    for rel in SCRUB:
        p = rootfs / rel
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
    for rel in EMPTY_DIRS:
        d = rootfs / rel
        if d.is_dir():
            for child in d.iterdir():
                if child.name in ("partial", "lock"):
                    continue
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                else:
                    child.unlink()
    for rel in BLANK:
        p = rootfs / rel
        if p.is_symlink():
            p.unlink()
        if p.parent.is_dir():
            p.write_bytes(b"")


def layer_tar(rootfs: Path, out: Path) -> str:
    """Deterministic tar of rootfs; returns the diffID."""
    subprocess.run(["tar", "--sort=name", "--mtime=@0", "--owner=0", "--group=0", "--numeric-owner",
                    "--format=gnu", "-C", str(rootfs), "-cf", str(out), "."], check=True)
    h = hashlib.sha256()
    with open(out, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def image_config(diff_id: str, stack_name: str, stack: Stack) -> bytes:
    boot = stack.base.bootstrap
    recipe = bases.recipe_hash(stack)
    cmd = f"debootstrap --variant={boot.variant} {boot.suite}"
    config = {
        "architecture": "amd64", "os": "linux", "created": EPOCH0,
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                   "Cmd": ["bash"],
                   "Labels": {"io.rocmforge.base": stack_name, "io.rocmforge.recipe": recipe}},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": EPOCH0, "created_by": f"rocmforge bootstrap: {cmd} (recipe {recipe[:12]})"}],
    }
    return bases.canonical_json(config)


def _fixed_member(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    return info


def write_archive(layer: Path, diff_id: str, config: bytes, ref: str, out: Path) -> str:
    config_id = hashlib.sha256(config).hexdigest()
    layer_dir = diff_id.split(":")[1]
    manifest = json.dumps([{"Config": f"{config_id}.json", "RepoTags": [ref],
                            "Layers": [f"{layer_dir}/layer.tar"]}]).encode()
    with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in ((f"{config_id}.json", config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, fileobj=io.BytesIO(data))
        # Fixed metadata: two bootstraps of the same packages give byte-identical archives too.
        tar.add(layer, arcname=f"{layer_dir}/layer.tar", filter=_fixed_member)
    return "sha256:" + config_id


def ensure_base(client, stack_name: str, stack: Stack, workdir: Path, log) -> str:
    """Return the base image ref, bootstrapping it when no image carries its recipe tag."""
    import docker.errors

    ref = bases.bootstrap_ref(stack_name, stack)
    try:
        client.images.get(ref)
        log(f"base {ref}: present (recipe hash matches)")
        return ref
    except docker.errors.ImageNotFound:
        pass
    if shutil.which("debootstrap") is None:
        raise BuildError("debootstrap is not installed; install it (apt-get install debootstrap) to build the "
                         f"bootstrapped base of stack {stack_name!r}")
    if os.geteuid() != 0:
        raise BuildError(f"bootstrapping the base of stack {stack_name!r} needs root (debootstrap creates device nodes)")
    boot = stack.base.bootstrap
    workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=workdir, prefix="bootstrap-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        cmd = ["debootstrap", f"--variant={boot.variant}"]
        if boot.include:
            cmd.append("--include=" + ",".join(boot.include))
        cmd += [boot.suite, str(rootfs)]
        mirror = os.environ.get("ROCMFORGE_DEBIAN_MIRROR")
        if mirror:
            cmd.append(mirror)
        log(f"base {ref}: {' '.join(cmd)}")
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        log(proc.stdout)
        if proc.returncode != 0:
            tail = "\n".join(proc.stdout.strip().splitlines()[-5:])
            raise BuildError(f"debootstrap of {boot.suite} failed (exit {proc.returncode}):\n{tail}")
        if boot.snapshot:
            (rootfs / SNAPSHOT_CONF).write_text('Acquire::Check-Valid-Until "false";\n')
        normalise(rootfs)
        layer = Path(tmp) / "layer.tar"
        diff_id = layer_tar(rootfs, layer)
        shutil.rmtree(rootfs)
        config = image_config(diff_id, stack_name, stack)
        archive = Path(tmp) / "image.tar"
        image_id = write_archive(layer, diff_id, config, ref, archive)
        with open(archive, "rb") as f:
            client.api.load_image(f)
        log(f"base {ref}: loaded {image_id} (layer {diff_id})")
    return ref
