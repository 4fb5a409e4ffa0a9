"""The ``driver`` check: the host's amdgpu kernel driver against the ROCm of the built images,
by AMD's user/kernel-space support matrix (rocmforge/data/driver_compat.yaml, with its sources).

Only AMD's amdgpu-dkms driver says its version (``/sys/module/amdgpu/version``); the table maps
that version to the ROCm release that shipped it. The in-tree driver of a distribution kernel
has no version file and is not in AMD's table, so for it the check is ``skipped`` with the
kernel release named: a pass there would be a guess.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

import yaml

from rocmforge.doctor.diagnosis import Diagnosis
from rocmforge.doctor.findings import FAIL, OK, SKIPPED, WARN, Verdict

TABLE = "driver_compat.yaml"


@dataclass(frozen=True)
class Table:
    releases: tuple[str, ...]
    window: int
    dkms: dict[str, str]  # module version -> ROCm release (major.minor)
    tested: dict[str, tuple[str, ...]]  # driver release -> user-space releases tested on it


@functools.lru_cache(maxsize=1)
def table() -> Table:
    """AMD's user/kernel-space support matrix as the package ships it (data/driver_compat.yaml), read once."""
    data = yaml.safe_load(resources.files("rocmforge.data").joinpath(TABLE).read_text(encoding="utf-8"))
    return Table(
        releases=tuple(data["releases"]),
        window=int(data["window"]),
        dkms=dict(data["dkms"]),
        tested={k: tuple(v) for k, v in data["tested"].items()},
    )


def release_of(rocm: str) -> str:
    """6.4.3 -> 6.4"""
    return ".".join(rocm.split(".")[:2])


def compatibility(driver_release: str, rocm: str, t: Table | None = None) -> tuple[str, str]:
    """(OK | WARN | FAIL, why) for ROCm user space rocm on the amdgpu driver of driver_release."""
    t = t or table()
    user = release_of(rocm)
    if user == driver_release:
        return OK, f"ROCm {user} user space on its own release's driver"
    if user in t.tested.get(driver_release, ()):
        return OK, f"AMD lists ROCm {user} user space as tested on the {driver_release} driver"
    if driver_release in t.releases and user in t.releases:
        apart = abs(t.releases.index(driver_release) - t.releases.index(user))
        if apart <= t.window and driver_release not in t.tested:
            return WARN, (
                f"the {driver_release} driver is newer than AMD's table; ROCm {user} is {apart} release(s) "
                f"apart, inside the ±{t.window} releases AMD states, but not listed as tested"
            )
        if apart <= t.window:
            return WARN, f"not in AMD's tested list for the {driver_release} driver, though {apart} release(s) apart"
        return FAIL, (
            f"ROCm {user} user space is {apart} releases from the {driver_release} driver, beyond the "
            f"±{t.window} AMD supports"
        )
    return WARN, f"ROCm {user} or the {driver_release} driver is not in AMD's table"


def driver(d: Diagnosis) -> Verdict:
    """fail: a built target's ROCm is beyond AMD's ±2 releases from the host's amdgpu-dkms driver
    (its jobs can fail in the kernel interface: hangs, missing features). warn: not in AMD's
    tested list but within the rule, or a driver version the table does not know. skipped: no
    amdgpu module, the in-tree driver (no version to compare), a saved GPU list, or no built
    target with a known ROCm."""
    if d.from_file:
        return Verdict(SKIPPED, "not applicable: the saved GPU list is not this host's driver")
    p = d.facts.platform
    if p.wsl and p.dxg and not d.kfd.exists:
        return Verdict(SKIPPED, "WSL2: the GPU is driven by the Windows driver (see wsl), not amdgpu")
    if d.facts.amdgpu_module is not True:
        return Verdict(SKIPPED, "no amdgpu module found loaded, so no driver to compare (see amdgpu-module)")
    rocm = {t: v for t, v in sorted(d.facts.built_rocm.items()) if t in d.built and v}
    if p.driver_version is None:
        kernel = p.kernel_release or "unknown"
        return Verdict(
            SKIPPED,
            f"driver version unknown: no /sys/module/amdgpu/version, so amdgpu is the in-tree "
            f"driver of kernel {kernel}; AMD's user/kernel-space table covers only its amdgpu-dkms "
            f"releases, so the images' ROCm ({', '.join(sorted(set(rocm.values()))) or 'none known'}) "
            f"cannot be checked against it",
        )
    t = table()
    release = t.dkms.get(p.driver_version)
    if release is None:
        return Verdict(
            WARN,
            f"amdgpu {p.driver_version} (from /sys/module/amdgpu/version) is not a version AMD's "
            f"amdgpu-dkms releases in {TABLE} report: cannot tell which ROCm it shipped with",
        )
    if not rocm:
        return Verdict(
            SKIPPED,
            f"amdgpu-dkms {p.driver_version} (ROCm {release}'s driver); no built target with a "
            f"known ROCm to compare with",
        )
    verdicts = {target: compatibility(release, v, t) for target, v in rocm.items()}
    status = (
        FAIL
        if any(s == FAIL for s, _ in verdicts.values())
        else WARN
        if any(s == WARN for s, _ in verdicts.values())
        else OK
    )
    parts = [f"{target} (ROCm {rocm[target]}): {why}" for target, (_, why) in verdicts.items()]
    head = f"amdgpu-dkms {p.driver_version} (ROCm {release}'s driver): "
    tail = "; update the host's amdgpu-dkms or build the target on a nearer ROCm" if status == FAIL else ""
    return Verdict(status, head + "; ".join(parts) + tail)
