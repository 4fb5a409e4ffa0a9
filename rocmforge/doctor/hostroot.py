"""Where the doctor reads a host: the live one (root ``/``), or a copy of one laid out under a
folder (``doctor --host-root DIR``), so that a host described in a bug report, or a test's fake
host, is read exactly as the live one is.

Under the folder, every absolute path is read relative to it: ``DIR/proc/self/status`` (who the
user is: Uid, Gid, Groups), ``DIR/proc/self/environ`` (the environment, NUL-separated as the
kernel writes it; the live host's is ``os.environ``), ``DIR/proc/mounts``, ``DIR/proc/meminfo``,
``DIR/proc/version`` and ``DIR/proc/sys/kernel/osrelease`` (the kernel, WSL's included),
``DIR/sys/module/amdgpu/`` (its ``version`` file: AMD's amdgpu-dkms only), ``DIR/sys/class/kfd/``,
``DIR/etc/passwd``, ``DIR/etc/subgid``,
``DIR/etc/cdi/``, ``DIR/var/run/cdi/``. Device nodes cannot be kept in a folder (git and tar
users cannot make them, and their owning group needs root to set), so ``DIR/dev-stat.txt``, the
output of ``stat -c '%A %u %g %n' /dev/kfd /dev/dri/* /dev/dxg``, lists them instead; without it
the files under ``DIR/dev/`` are looked at as the live host's nodes are.
"""

from __future__ import annotations

import fnmatch
import glob
import grp
import os
from dataclasses import dataclass

LISTING = "dev-stat.txt"
LISTING_COMMAND = "stat -c '%A %u %g %n' /dev/kfd /dev/dri/* /dev/dxg"


@dataclass(frozen=True)
class NodeFacts:
    """One device node as this user sees it."""

    path: str
    exists: bool
    readable_writable: bool = False  # os.access(R_OK | W_OK), or the listing's mode for the user
    gid: int | None = None  # the owning group, what `--group-add` needs
    group: str | None = None  # that group's name on this host, when it has one
    mode: int | None = None  # permission bits: whether "other" may read and write (rootless engines)

    @property
    def open_to_all(self) -> bool:
        """Read/write for every user: no group membership is needed to open it."""
        return self.mode is not None and self.mode & 0o006 == 0o006

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "exists": self.exists,
            "readable_writable": self.readable_writable,
            "gid": self.gid,
            "group": self.group,
        }


@dataclass(frozen=True)
class Identity:
    """The user the doctor runs as (whose groups a rootless engine can hand on)."""

    uid: int
    gid: int
    groups: tuple[int, ...] = ()
    name: str | None = None
    # The groups /etc/group lists the user in: one missing from `groups` was added since the
    # session began, and takes a new login (or newgrp) to count.
    listed: tuple[int, ...] = ()

    def member_of(self, gid: int | None) -> bool:
        """Whether this user may open a node of group gid (None: a node whose group is not known)."""
        return self.uid == 0 or gid == self.gid or gid in self.groups


@dataclass(frozen=True)
class Listed:
    """One line of the device listing."""

    mode: str  # as `stat %A` prints it: crw-rw----
    uid: int
    gid: int


def _mode_bits(text: str) -> int:
    bits = 0
    for i, ch in enumerate(text[1:10]):
        if ch != "-":
            bits |= 1 << (8 - i)
    return bits


def _rw(bits: int, st_uid: int, st_gid: int, who: Identity) -> bool:
    if who.uid == 0:
        return True  # root opens device nodes whatever their mode (CAP_DAC_OVERRIDE)
    if who.uid == st_uid:
        return bits & 0o600 == 0o600
    if who.member_of(st_gid):
        return bits & 0o060 == 0o060
    return bits & 0o006 == 0o006


@dataclass(frozen=True)
class HostRoot:
    root: str = "/"

    @property
    def live(self) -> bool:
        return os.path.abspath(self.root) == "/"

    def path(self, p: str) -> str:
        """Where the host's absolute path p is on this machine."""
        return p if self.live else os.path.join(self.root, p.lstrip("/"))

    def read(self, p: str, *, binary: bool = False):
        """The file's text (or bytes), None when it cannot be read."""
        try:
            with open(self.path(p), "rb") as f:
                data = f.read()
        except OSError:
            return None
        return data if binary else data.decode("utf-8", errors="replace")

    def exists(self, p: str) -> bool:
        listed = self.listing()
        if listed is not None and p.startswith("/dev/") and p != "/dev/shm":
            return p in listed
        return os.path.exists(self.path(p))

    def glob(self, pattern: str) -> list[str]:
        """Host paths matching pattern (the listing's for /dev nodes), sorted."""
        listed = self.listing()
        if listed is not None and pattern.startswith("/dev/"):
            return sorted(p for p in listed if fnmatch.fnmatchcase(p, pattern))
        found = glob.glob(self.path(pattern))
        if self.live:
            return sorted(found)
        return sorted("/" + os.path.relpath(p, self.root) for p in found)

    def listing(self) -> dict[str, Listed] | None:
        """The device listing of a copied host, None on the live host or when the copy has none.
        Lines that are not `MODE UID GID PATH` are left out."""
        if self.live:
            return None
        text = self.read("/" + LISTING)
        if text is None:
            return None
        nodes = {}
        for line in text.splitlines():
            parts = line.split(None, 3)
            if len(parts) == 4 and len(parts[0]) == 10 and parts[1].isdigit() and parts[2].isdigit():
                nodes[parts[3].strip()] = Listed(parts[0], int(parts[1]), int(parts[2]))
        return nodes

    def node(self, p: str, who: Identity | None = None) -> NodeFacts:
        """The device node p: present, read/write for the user, owning group, mode."""
        who = who or self.identity()
        listed = self.listing()
        if listed is not None:
            entry = listed.get(p)
            if entry is None:
                return NodeFacts(path=p, exists=False)
            bits = _mode_bits(entry.mode)
            return NodeFacts(
                path=p,
                exists=True,
                readable_writable=_rw(bits, entry.uid, entry.gid, who),
                gid=entry.gid,
                group=self.group_name(entry.gid),
                mode=bits,
            )
        real = self.path(p)
        try:
            st = os.stat(real)
        except OSError:
            return NodeFacts(path=p, exists=False)
        rw = os.access(real, os.R_OK | os.W_OK) if self.live else _rw(st.st_mode & 0o777, st.st_uid, st.st_gid, who)
        return NodeFacts(
            path=p,
            exists=True,
            readable_writable=rw,
            gid=st.st_gid,
            group=self.group_name(st.st_gid),
            mode=st.st_mode & 0o777,
        )

    def group_name(self, gid: int) -> str | None:
        if self.live:
            try:
                return grp.getgrgid(gid).gr_name
            except (KeyError, OverflowError):
                return None
        for line in (self.read("/etc/group") or "").splitlines():
            parts = line.split(":")
            if len(parts) >= 3 and parts[2] == str(gid):
                return parts[0]
        return None

    def environ(self) -> dict[str, str]:
        if self.live:
            return dict(os.environ)
        data = self.read("/proc/self/environ", binary=True) or b""
        env = {}
        for item in data.split(b"\0"):
            key, sep, value = item.decode("utf-8", errors="replace").partition("=")
            if sep and key:
                env[key] = value
        return env

    def identity(self) -> Identity:
        """The user from /proc/self/status (effective IDs and supplementary groups); on the live
        host without /proc, the process's own IDs."""
        status = self.read("/proc/self/status") or ""
        fields = {}
        for line in status.splitlines():
            key, _, value = line.partition(":")
            fields[key.strip()] = value.split()
        try:
            uid, gid = int(fields["Uid"][1]), int(fields["Gid"][1])
            groups = tuple(int(g) for g in fields.get("Groups", []))
        except (KeyError, IndexError, ValueError):
            if not self.live:
                return Identity(uid=0, gid=0, name="root")  # a copy without status: as rocmforge is run (root)
            uid, gid, groups = os.geteuid(), os.getegid(), tuple(os.getgroups())
        name = self.user_name(uid)
        return Identity(uid=uid, gid=gid, groups=groups, name=name, listed=self.groups_listing(name))

    def groups_listing(self, user: str | None) -> tuple[int, ...]:
        """The GIDs whose /etc/group entry names user as a member."""
        if not user:
            return ()
        found = set()
        for line in (self.read("/etc/group") or "").splitlines():
            parts = line.split(":")
            if len(parts) >= 4 and parts[2].isdigit() and user in parts[3].split(","):
                found.add(int(parts[2]))
        return tuple(sorted(found))

    def user_name(self, uid: int) -> str | None:
        for line in (self.read("/etc/passwd") or "").splitlines():
            parts = line.split(":")
            if len(parts) >= 3 and parts[2] == str(uid):
                return parts[0]
        return None
