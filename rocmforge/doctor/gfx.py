"""Which GPUs an image's archs run on: natively (the GPU's own gfx, or a generic target that
covers it), through ``HSA_OVERRIDE_GFX_VERSION``, or not at all.

``HSA_OVERRIDE_GFX_VERSION`` (:data:`GFX_OVERRIDES`). Consumer RDNA 2 / RDNA 3 parts that ROCm
ships no code for run the code of the family's reference part when the runtime is told to report
that part's gfx version: gfx1031/1032/1033/1034/1035/1036 run gfx1030 code with ``10.3.0``,
gfx1101/1102/1103 run gfx1100 code with ``11.0.0`` (an unofficial workaround that AMD's
maintainers point users to, e.g. ROCm/Tensile#1907 for gfx1036, ROCm/rocBLAS#1536 for gfx1103;
community reports for gfx1031/gfx1032 in ROCm/legacy-rocm-build#1756, #2720). The variable
applies to every GPU of the process (ROCm/legacy-rocm-build#5069).

The generic targets and their member processors are data/probes/gfxnames.py's table (the project's one
copy of it, through :mod:`rocmforge.verify.readers.archs`).
"""

from __future__ import annotations

from collections.abc import Collection

from rocmforge.verify.readers.archs import GENERIC_TARGETS
from rocmforge.verify.readers.rocminfo import gfx_base

# GPU -> the gfx whose code objects it runs when HSA_OVERRIDE_GFX_VERSION names that gfx (same ISA
# family; unofficial, not supported by AMD). Sources in the module docstring.
GFX_OVERRIDES: dict[str, str] = {
    "gfx1031": "gfx1030",  # Navi 22: RX 6700 XT / 6750 XT, RX 6800M / 6700M
    "gfx1032": "gfx1030",  # Navi 23: RX 6600 / 6600 XT / 6650 XT, Radeon PRO W6600
    "gfx1033": "gfx1030",  # Van Gogh APU (Steam Deck)
    "gfx1034": "gfx1030",  # Navi 24: RX 6500 XT / 6400
    "gfx1035": "gfx1030",  # Rembrandt APU: Radeon 660M / 680M
    "gfx1036": "gfx1030",  # Raphael / Granite Ridge iGPU (Ryzen 7000 / 9000 desktop)
    "gfx1101": "gfx1100",  # Navi 32: RX 7800 XT / 7700 XT, Radeon PRO W7700
    "gfx1102": "gfx1100",  # Navi 33: RX 7600, Radeon PRO W7600 / W7500
    "gfx1103": "gfx1100",  # Phoenix / Hawk Point APU: Radeon 780M / 760M / 740M
}

# How an image's archs cover a GPU.
NATIVE, OVERRIDE, UNCOVERED = "native", "override", "none"


def hsa_override_version(gfx: str) -> str:
    """The HSA_OVERRIDE_GFX_VERSION value (major.minor.stepping) that names a gfx processor:
    gfx1030 -> 10.3.0, gfx1100 -> 11.0.0, gfx90a -> 9.0.10 (the last two digits are hex)."""
    digits = gfx.lower().removeprefix("gfx")
    if len(digits) < 3 or not digits[:-2].isdigit():
        raise ValueError(f"{gfx!r} is not a gfx processor name")
    return f"{int(digits[:-2])}.{int(digits[-2], 16)}.{int(digits[-1], 16)}"


def runs_natively(gfx: str, agent_isas: Collection[str], archs: Collection[str]) -> bool:
    """Does an image with these archs carry code that this GPU runs without an override? The
    GPU's generic targets are the table's and any generic ISA rocminfo lists for it."""
    archs = {a.lower() for a in archs}
    if gfx in archs:
        return True
    generics = {g for g, members in GENERIC_TARGETS.items() if gfx in members}
    generics |= {gfx_base(i) for i in agent_isas if "generic" in i}
    return bool(generics & archs)


def coverage(gfx: str, agent_isas: Collection[str], archs: Collection[str]) -> tuple[str, str | None]:
    """(NATIVE | OVERRIDE | UNCOVERED, the gfx the GPU must pose as for OVERRIDE, else None)."""
    if runs_natively(gfx, agent_isas, archs):
        return NATIVE, None
    pose = GFX_OVERRIDES.get(gfx)
    if pose and runs_natively(pose, (), archs):
        return OVERRIDE, pose
    return UNCOVERED, None
