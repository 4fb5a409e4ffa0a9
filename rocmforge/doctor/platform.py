"""The host's platform as the round-2 checks read it (:class:`PlatformFacts`): the amdgpu
driver's version, the kernel, ``/dev/shm``, memory, and the signs of WSL2. Read through a
:class:`HostRoot`, so a copied host (``--host-root DIR``) is read as the live one is."""

from __future__ import annotations

import os
from dataclasses import dataclass

from rocmforge.doctor.hostroot import HostRoot

SHM = "/dev/shm"


@dataclass(frozen=True)
class PlatformFacts:
    driver_version: str | None = None  # /sys/module/amdgpu/version: only AMD's amdgpu-dkms writes it
    kernel_release: str | None = None  # uname -r
    proc_version: str | None = None  # /proc/version, which names WSL's kernel build
    shm_bytes: int | None = None  # the size of /dev/shm; None: not mounted or not read
    shm_source: str = ""  # where shm_bytes came from
    mem_total_bytes: int | None = None  # MemTotal of /proc/meminfo
    dxg: bool = False  # /dev/dxg: the GPU paravirtualisation device of WSL2

    @property
    def wsl(self) -> bool:
        """WSL2's kernel: its /proc/version names Microsoft (e.g. 5.15.167.4-microsoft-standard-WSL2)."""
        text = (self.proc_version or self.kernel_release or "").lower()
        return "microsoft" in text or "wsl" in text


def _size(text: str) -> int | None:
    """tmpfs's size= option (k, m, g suffixes; a bare number is bytes)."""
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    text = text.strip().lower()
    try:
        if text and text[-1] in units:
            return int(text[:-1]) * units[text[-1]]
        return int(text)
    except ValueError:
        return None


def shm_size(host: HostRoot) -> tuple[int | None, str]:
    """(bytes, source). A mounts line without size= is tmpfs's default, half the memory, which
    the kernel fills in when it lists the mount; the live host is measured with statvfs."""
    if host.live:
        try:
            st = os.statvfs(SHM)
            return st.f_blocks * st.f_frsize, f"statvfs({SHM})"
        except OSError:
            pass
    for line in (host.read("/proc/mounts") or "").splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[1] == SHM:
            opts = dict(o.partition("=")[::2] for o in parts[3].split(","))
            if "size" in opts:
                return _size(opts["size"]), f"{host.path('/proc/mounts')} ({parts[2]} size={opts['size']})"
            return None, f"{host.path('/proc/mounts')} lists {SHM} without a size"
    return None, f"{SHM} is not mounted (not in {host.path('/proc/mounts')})"


def mem_total(host: HostRoot) -> int | None:
    """The host's memory in bytes (MemTotal of /proc/meminfo); None when it cannot be read."""
    for line in (host.read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) * 1024  # meminfo's kB are KiB
    return None


def kernel_release(host: HostRoot, proc_version: str | None) -> str | None:
    """The kernel's release as `uname -r` says it (6.8.0-49-generic), else as proc_version names it; None when
    neither does."""
    text = (host.read("/proc/sys/kernel/osrelease") or "").strip()
    if text:
        return text
    parts = (proc_version or "").split()  # "Linux version 6.8.0-49-generic (...) ..."
    return parts[2] if len(parts) > 2 and parts[:2] == ["Linux", "version"] else None


def read(host: HostRoot) -> PlatformFacts:
    """The host's platform facts; each one that cannot be read is None (dxg: False)."""
    version = (host.read("/sys/module/amdgpu/version") or "").strip() or None
    proc_version = (host.read("/proc/version") or "").strip() or None
    shm, source = shm_size(host)
    return PlatformFacts(
        driver_version=version,
        kernel_release=kernel_release(host, proc_version),
        proc_version=proc_version,
        shm_bytes=shm,
        shm_source=source,
        mem_total_bytes=mem_total(host),
        dxg=host.exists("/dev/dxg"),
    )
