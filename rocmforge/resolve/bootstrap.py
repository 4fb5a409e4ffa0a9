"""The bootstrap base provider: debootstrap → normalised tar → docker-archive with a config we
write → `docker load`. Same recipe and same packages give the same image ID, because the ID is
the sha256 of config bytes that hold no wall-clock time."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.define.schema import Stack
from rocmforge.host import aptmirror
from rocmforge.resolve import bases
from rocmforge.shared.errors import BuildError

if TYPE_CHECKING:
    from collections.abc import Callable

    from rocmforge.define.schema import BootstrapBase
    from rocmforge.host.engines import Engine

# Paths that differ between two debootstraps of the same packages (logs, caches, host identity).
SCRUB = [
    "var/cache/ldconfig/aux-cache",
    "var/log/bootstrap.log",
    "var/log/dpkg.log",
    "var/log/alternatives.log",
    "var/log/apt",
    "var/cache/apt/pkgcache.bin",
    "var/cache/apt/srcpkgcache.bin",
    "var/cache/debconf/config.dat-old",
    "var/cache/debconf/templates.dat-old",
    "var/lib/dpkg/status-old",
    "var/lib/dpkg/diversions-old",
    "debootstrap",
]
EMPTY_DIRS = ["var/lib/apt/lists", "var/cache/apt/archives"]
BLANK = ["etc/resolv.conf", "etc/hostname", "etc/machine-id"]
BLANK_MODE = 0o644
# What debootstrap itself writes differs between its versions (1.0.128 in Debian 12, 1.0.141 in
# 13, 1.0.145 in sid): the placeholder fstab's wording, the modes of the files it copies from the
# host (hostname, resolv.conf), and an empty run/mount that only older ones leave. These are
# written one way here, so a recipe gives one base whichever debootstrap the host has.
FSTAB = "etc/fstab"
CANONICAL_FSTAB = (
    "# UNCONFIGURED FSTAB FOR BASE SYSTEM\n#\n# <file system> <mount point>   <type>  <options>       <dump>  <pass>\n"
)
RUN = "run"
RUN_KEEP = {"lock"}
EPOCH0 = "1970-01-01T00:00:00Z"
SNAPSHOT_CONF = "etc/apt/apt.conf.d/99rocmforge-snapshot"


# debootstrap writes the mirror it used into the sources and the day it ran into every shadow entry
# (the date of the last password change): neither may decide the image ID.
SOURCES = "etc/apt/sources.list"
SHADOW = ["etc/shadow", "etc/shadow-"]


def canonical_sources(suite: str) -> str:
    """The sources.list a bootstrapped base ships: Debian's own archive, whatever mirror built it."""
    return f"deb {aptmirror.CANONICAL} {suite} main\n"


def undated_shadow(text: str) -> str:
    """Shadow entries with an empty last-change field (aging off), as on a never-dated system."""
    out = []
    for line in text.splitlines(keepends=True):
        fields = line.split(":")
        if len(fields) >= 3 and fields[2].strip().isdigit():
            fields[2] = ""
        out.append(":".join(fields))
    return "".join(out)


def settle_rootfs(rootfs: Path, suite: str) -> None:
    """What debootstrap leaves that differs run to run, made the same: the sources list, the
    shadow files' change dates, and caches and logs removed. (build.image normalises built
    images; this settles a root file system before it becomes the base's one layer.)"""
    (rootfs / SOURCES).parent.mkdir(parents=True, exist_ok=True)
    (rootfs / SOURCES).write_text(canonical_sources(suite))
    for rel in SHADOW:
        p = rootfs / rel
        if p.is_file() and not p.is_symlink():
            p.write_text(undated_shadow(p.read_text()))
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
            p.chmod(BLANK_MODE)
    _canonical_debootstrap_files(rootfs)


def _canonical_debootstrap_files(rootfs: Path) -> None:
    fstab = rootfs / FSTAB
    if fstab.is_file() and not fstab.is_symlink():
        fstab.write_text(CANONICAL_FSTAB)
    run = rootfs / RUN
    if run.is_dir() and not run.is_symlink():
        for child in run.iterdir():  # only empty directories: a package's file there is content
            if child.name not in RUN_KEEP and child.is_dir() and not child.is_symlink() and not any(child.iterdir()):
                child.rmdir()


def layer_tar(rootfs: Path, out: Path) -> str:
    """Deterministic tar of rootfs; returns the diffID."""
    subprocess.run(
        [
            "tar",
            "--sort=name",
            "--mtime=@0",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "--format=gnu",
            "-C",
            str(rootfs),
            "-cf",
            str(out),
            ".",
        ],
        check=True,
    )
    h = hashlib.sha256()
    with open(out, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def image_config(diff_id: str, stack_name: str, stack: Stack) -> bytes:
    """The base image's config (canonical JSON, no wall-clock time): the same recipe and layer give the same
    image ID. Raises ValueError for a stack whose base is not bootstrapped."""
    boot = stack.base.from_bootstrap
    recipe = bases.recipe_hash(stack)
    cmd = f"debootstrap --variant={boot.variant} {boot.suite}"
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": EPOCH0,
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Cmd": ["bash"],
            "Labels": {"io.rocmforge.base": stack_name, "io.rocmforge.recipe": recipe},
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": EPOCH0, "created_by": f"rocmforge bootstrap: {cmd} (recipe {recipe[:12]})"}],
    }
    return bases.canonical_json(config)


def _fixed_member(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    return info


def write_archive(layer: Path, diff_id: str, config: bytes, ref: str, out: Path) -> str:
    """Writes to out the docker-archive of the one-layer image (layer, config) tagged ref; returns its image
    ID."""
    config_id = hashlib.sha256(config).hexdigest()
    layer_dir = diff_id.split(":")[1]
    manifest = json.dumps(
        [{"Config": f"{config_id}.json", "RepoTags": [ref], "Layers": [f"{layer_dir}/layer.tar"]}]
    ).encode()
    with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in ((f"{config_id}.json", config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, fileobj=io.BytesIO(data))
        # Fixed metadata: two bootstraps of the same packages give byte-identical archives too.
        tar.add(layer, arcname=f"{layer_dir}/layer.tar", filter=_fixed_member)
    return "sha256:" + config_id


def _debootstrap(boot: BootstrapBase, rootfs: Path, ref: str, log: Callable[[str], None], pause: float = 2.0) -> None:
    """debootstrap through the mirror setting, tried RETRIES times when the archive does not answer."""
    mirror = aptmirror.from_env()
    cmd = ["debootstrap", f"--variant={boot.variant}"]
    if boot.include:
        cmd.append("--include=" + ",".join(boot.include))
    cmd += [boot.suite, str(rootfs), aptmirror.effective()]
    for attempt in range(1, aptmirror.RETRIES + 1):
        log(f"base {ref}: {' '.join(cmd)}")
        proc = _run_as_one(cmd)
        log(proc.stdout)
        if proc.returncode == 0:
            return
        tail = "\n".join(proc.stdout.strip().splitlines()[-5:])
        # debootstrap says only "Failed getting release file" when nothing answers; wget's own words
        # ("Connection refused", "unable to resolve") may be in the log above it.
        unanswered = "Failed getting release file" in proc.stdout or aptmirror.unreachable_hint(proc.stdout)
        if not unanswered:
            raise BuildError(f"debootstrap of {boot.suite} failed (exit {proc.returncode}):\n{tail}")
        if rootfs.exists():
            shutil.rmtree(rootfs)
        if attempt < aptmirror.RETRIES:
            time.sleep(pause * attempt)
    raise BuildError(f"debootstrap of {boot.suite}: " + aptmirror.unreachable_message(mirror))


def _run_as_one(cmd: list[str]) -> subprocess.CompletedProcess:
    """cmd and every process it starts (debootstrap's wget, dpkg-deb and tar work outside the
    chroot) in a process group of their own, killed together when this command is stopped: a
    SIGTERM to rocmforge alone (`docker stop`, a supervisor) would otherwise end debootstrap only,
    and they would go on writing into a tree being removed."""
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    ) as proc:
        try:
            out, _ = proc.communicate()
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out)


def _mounts_under(root: Path) -> list[str]:
    """Mount points at or below `root`, deepest first (mountinfo escapes blanks as octal)."""
    prefix = str(root.resolve())
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            point = line.split()[4].encode().decode("unicode_escape")
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    return sorted(points, key=len, reverse=True)


def _kill_chrooted(root: Path) -> None:
    """An interrupted debootstrap is killed without running its own clean-up, and the maintainer
    scripts it started in the chroot may outlive it: they would keep writing into the tree."""
    prefix = str(root.resolve())
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            where = os.readlink(proc / "root")
            if where == prefix or where.startswith(prefix + "/"):
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ValueError):  # gone meanwhile, or not ours to see
            pass


@contextlib.contextmanager
def _scratch_dir(workdir: Path, log: Callable[[str], None]):
    """A temporary directory for the rootfs. debootstrap mounts /proc and /sys inside it and only
    unmounts them when it ends normally; removing the tree over such a mount would reach into the
    host's, so they are unmounted first, and a tree that stays mounted is left in place, named."""
    tmp = Path(tempfile.mkdtemp(dir=workdir, prefix="bootstrap-"))
    try:
        yield str(tmp)
    finally:
        _kill_chrooted(tmp)
        for point in _mounts_under(tmp):
            subprocess.run(["umount", "--lazy", point], capture_output=True)
        left = _mounts_under(tmp)
        if left:
            log(f"left {tmp} in place: still mounted there: {', '.join(left)}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def ensure_base(client: Engine, stack_name: str, stack: Stack, workdir: Path, log: Callable[[str], None]) -> str:
    """Return the base image ref, bootstrapping it when no image carries its recipe tag."""
    ref = bases.bootstrap_ref(stack_name, stack)
    if client.find(ref) is not None:
        log(f"base {ref}: present (recipe hash matches)")
        return ref
    if shutil.which("debootstrap") is None:
        raise BuildError(
            "debootstrap is not installed; install it (apt-get install debootstrap) to build the "
            f"bootstrapped base of stack {stack_name!r}"
        )
    if os.geteuid() != 0:
        raise BuildError(
            f"bootstrapping the base of stack {stack_name!r} needs root (debootstrap creates device nodes)"
        )
    workdir.mkdir(parents=True, exist_ok=True)
    with _scratch_dir(workdir, log) as tmp:
        archive, image_id, diff_id = bootstrap_archive(stack_name, stack, Path(tmp), log)
        with open(archive, "rb") as f:
            client.load(f)
        log(f"base {ref}: loaded {image_id} (layer {diff_id})")
    return ref


def bootstrap_archive(stack_name: str, stack: Stack, tmp: Path, log: Callable[[str], None]) -> tuple[Path, str, str]:
    """Bootstraps the stack's base into tmp: (its docker-archive, image ID, diff ID)."""
    boot = stack.base.from_bootstrap
    ref = bases.bootstrap_ref(stack_name, stack)
    rootfs = tmp / "rootfs"
    _debootstrap(boot, rootfs, ref, log)
    if boot.snapshot:
        (rootfs / SNAPSHOT_CONF).write_text('Acquire::Check-Valid-Until "false";\n')
    settle_rootfs(rootfs, boot.suite)
    layer = tmp / "layer.tar"
    diff_id = layer_tar(rootfs, layer)
    shutil.rmtree(rootfs)
    config = image_config(diff_id, stack_name, stack)
    archive = tmp / "image.tar"
    image_id = write_archive(layer, diff_id, config, ref, archive)
    layer.unlink()
    return archive, image_id, diff_id
