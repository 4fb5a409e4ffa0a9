"""What a rocminfo output says: its agents (CPUs and GPUs) and the state of the driver and runtime."""

from __future__ import annotations

from dataclasses import dataclass, field

# GPU processors that only exist as integrated GPUs (APUs). A gfx name that is also used by a
# discrete part (gfx900 Vega 10, gfx940/gfx942 which MI300A shares with MI300X, ...) is left out:
# such an APU is recognised only from its ``Memory Properties: APU`` line.
# Source: LLVM's AMDGPUUsage processor table ("dGPU/APU" column) unless noted.
INTEGRATED_GFX: frozenset[str] = frozenset(
    {
        "gfx700",  # Kaveri (A6-7000 ... FX-7600P)
        "gfx703",  # Kabini / Mullins
        "gfx705",  # APU, product names "TBA" in LLVM
        "gfx801",  # Carrizo
        "gfx810",  # Stoney
        "gfx902",  # Raven Ridge (Ryzen 3 2200G, Ryzen 5 2400G)
        "gfx909",  # Raven2 APU
        "gfx90c",  # Renoir / Cezanne / Lucienne (Ryzen 4000G, 5000G/U)
        "gfx1013",  # Cyan Skillfish APU (RDNA 1)
        "gfx1033",  # Van Gogh (Steam Deck)
        "gfx1035",  # Rembrandt (Radeon 660M/680M)
        "gfx1036",  # Raphael / Granite Ridge (Ryzen 7000/9000 desktop, 2 CUs)
        "gfx1037",  # Mendocino (Radeon 610M); not in LLVM's table, reported by rocminfo users
        "gfx1103",  # Phoenix / Hawk Point (Radeon 780M/760M/740M)
        "gfx1150",  # Strix Point (Radeon 890M)
        "gfx1151",  # Strix Halo (Radeon 8060S)
        "gfx1152",  # Krackan Point (Radeon 860M)
    }
)

DEVICE_TYPES = ("CPU", "GPU", "DSP")


@dataclass(frozen=True)
class Agent:
    index: int  # "Agent N" as printed (1-based), or the 1-based position when no header was printed
    name: str  # "Name:": gfx90a for a GPU, the CPU model for a CPU agent
    marketing_name: str  # "Marketing Name:"; "" when absent or empty
    device_type: str  # "CPU" | "GPU" | "DSP"; inferred when the line is missing, "" if unknowable
    compute_units: int | None
    is_apu: bool  # integrated GPU
    isas: tuple[str, ...]  # "ISA Info" names, e.g. amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-
    uuid: str | None  # "Uuid:" value, None when absent (e.g. GPU agents on WSL)

    def to_json(self) -> dict:
        return {
            "index": self.index,
            "name": self.name,
            "marketing_name": self.marketing_name,
            "device_type": self.device_type,
            "compute_units": self.compute_units,
            "is_apu": self.is_apu,
            "isas": list(self.isas),
            "uuid": self.uuid,
        }


@dataclass(frozen=True)
class RocmInfo:
    driver_loaded: bool
    runtime_version: str | None
    agents: tuple[Agent, ...]
    problems: tuple[str, ...]
    # Paste residue removed before reading (markdown fences, prompt lines, CRLF, colour codes):
    # how the text was delivered, not what rocminfo said, so two outputs that differ only in it
    # compare equal.
    stripped: tuple[str, ...] = field(default=(), compare=False)

    @property
    def gpus(self) -> list[str]:
        """The GPU agents' gfx names, in rocminfo order (which is HIP's device order)."""
        return [a.name for a in self.agents if a.device_type == "GPU"]

    def to_json(self) -> dict:
        return {
            "driver_loaded": self.driver_loaded,
            "runtime_version": self.runtime_version,
            "agents": [a.to_json() for a in self.agents],
            "gpus": self.gpus,
            "problems": list(self.problems),
            "stripped": list(self.stripped),
        }


def gfx_base(name: str) -> str:
    """``amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-`` or ``gfx90a:xnack-`` -> ``gfx90a``."""
    n = name.strip().lower()
    if "--" in n:
        n = n.rsplit("--", 1)[1]
    return n.split(":", 1)[0]


def discrete_only_visible_devices(info: RocmInfo) -> str | None:
    """The HIP_VISIBLE_DEVICES value that keeps only the discrete GPUs, when the GPU agents mix
    integrated and discrete ones; None otherwise. HIP numbers GPU agents from 0 in rocminfo
    order; CPU agents do not count."""
    gpus = [a for a in info.agents if a.device_type == "GPU"]
    discrete = [str(i) for i, a in enumerate(gpus) if not a.is_apu]
    if not discrete or len(discrete) == len(gpus):
        return None
    return ",".join(discrete)
