"""Which of a target's images (its all-archs main image and its per-arch variants) a host should
run: the smallest one that carries code for every GPU the job will use.

The GPUs that count are the ones the job sees: the user's own ``HIP_VISIBLE_DEVICES`` when set,
else the doctor's advice (an integrated GPU beside discrete ones is hidden, so a Ryzen iGPU next
to a W7900 does not force the all-archs image). A GPU that runs an image only through
``HSA_OVERRIDE_GFX_VERSION`` counts as covered only when no image covers it natively. Pure: the
host's GPUs come from :class:`~rocmforge.doctor.diagnosis.Diagnosis`, sizes from the caller.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from rocmforge.doctor.diagnosis import Diagnosis, Gpu
from rocmforge.doctor.gfx import NATIVE, OVERRIDE, UNCOVERED, coverage


@dataclass(frozen=True)
class Candidate:
    """One image of the target: its archs (a variant's, or the main image's) and where it is."""

    archs: tuple[str, ...]
    ref: str
    size: int | None = None  # bytes, as the engine or the registry reports it; None: unknown
    variant: bool = False

    def describe(self) -> str:
        kind = "variant" if self.variant else "main image"
        size = f", {self.size / 1e9:.2f} GB" if self.size is not None else ""
        return f"{self.ref} ({kind}: {','.join(self.archs)}{size})"


@dataclass(frozen=True)
class Choice:
    image: Candidate | None  # None: refused
    reason: str
    gpus: tuple[str, ...] = ()  # the gfx of each GPU that counted
    override: bool = False  # the choice covers a GPU only through HSA_OVERRIDE_GFX_VERSION


class NoImage(Exception):
    """No image of the target covers the job's GPUs (or the asked arch)."""


def job_gpus(d: Diagnosis, hip_visible_devices: str | None) -> tuple[tuple[Gpu, ...], str]:
    """The GPUs a container's job will use, and why those: the user's HIP_VISIBLE_DEVICES (HIP
    device numbers, rocminfo's GPU order) wins over the doctor's iGPU advice."""
    if hip_visible_devices is not None and hip_visible_devices.strip():
        wanted = [w.strip() for w in hip_visible_devices.split(",") if w.strip()]
        picked = tuple(g for g in d.gpus if str(g.hip_index) in wanted or (g.agent.uuid or "") in wanted)
        return picked, f"HIP_VISIBLE_DEVICES={hip_visible_devices}"
    if d.hidden:
        return d.visible, (f"integrated GPU(s) left out as the doctor advises (HIP_VISIBLE_DEVICES={d.discrete_only})")
    return d.gpus, "every GPU of the host"


def _coverage(gpu: Gpu, archs: Collection[str]) -> str:
    return coverage(gpu.gfx, gpu.agent.isas, archs)[0]


def _order(c: Candidate) -> tuple:
    # Unknown sizes sort by how many archs they carry: fewer archs, fewer GPU files.
    return (c.size is None, c.size if c.size is not None else len(c.archs), len(c.archs), c.variant)


def choose(candidates: list[Candidate], gpus: tuple[Gpu, ...], why_gpus: str, arch: str | None = None) -> Choice:
    """The smallest candidate covering every GPU in gpus (natively if any does, else through the
    override); with arch, the smallest that carries arch. Raises NoImage naming what exists."""
    listing = "; ".join(c.describe() for c in candidates)
    if arch is not None:
        fits = sorted((c for c in candidates if arch.lower() in {a.lower() for a in c.archs}), key=_order)
        if not fits:
            raise NoImage(f"no image carries {arch} (--arch); there are: {listing}")
        return Choice(fits[0], f"--arch {arch}: the smallest image that carries it", (arch,))
    if not gpus:
        main = next((c for c in candidates if not c.variant), candidates[0])
        return Choice(main, f"no GPU seen ({why_gpus}): the main image, which runs on every declared arch")
    seen = tuple(g.gfx for g in gpus)
    native = sorted((c for c in candidates if all(_coverage(g, c.archs) == NATIVE for g in gpus)), key=_order)
    if native:
        return Choice(native[0], f"smallest image with code for {', '.join(seen)} ({why_gpus})", seen)
    posed = sorted(
        (c for c in candidates if all(_coverage(g, c.archs) in (NATIVE, OVERRIDE) for g in gpus)), key=_order
    )
    if posed:
        return Choice(
            posed[0],
            f"smallest image that runs {', '.join(seen)} through HSA_OVERRIDE_GFX_VERSION ({why_gpus})",
            seen,
            override=True,
        )
    missing = sorted({g.gfx for g in gpus if all(_coverage(g, c.archs) == UNCOVERED for c in candidates)})
    raise NoImage(f"no image has code for {', '.join(missing or seen)} ({why_gpus}); there are: {listing}")
