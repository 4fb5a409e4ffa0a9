"""Hosts for the doctor's tests: rocminfo outputs and HostFacts built in code, the rocminfo
fixtures, and the scenarios whose whole report is kept in tests/fixtures/doctor/expected/."""

from __future__ import annotations

from pathlib import Path

from rocmforge.doctor import HostFacts, NodeFacts
from rocmforge.doctor.hostroot import Identity
from rocmforge.doctor.platform import PlatformFacts
from rocmforge.doctor.rootless import EngineTraits

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EXPECTED = FIXTURES / "doctor" / "expected"
GB = 10**9
HIP_RUNTIME = {"hip-runtime": ("gfx90a", "gfx1100")}
# A rootful dockerd as `docker info` describes it, with CDI off, and a user in the nodes' groups.
ROOTFUL = EngineTraits(
    podman=False, security_options=("name=apparmor", "name=seccomp,profile=builtin"), source="the engine"
)
USER = Identity(uid=1000, gid=1000, groups=(44, 993, 1000), name="ana")
GIB = 1024**3
# AMD's ROCm 6.4 amdgpu-dkms on Ubuntu 24.04 with 64 GiB of memory and tmpfs's default /dev/shm.
PLATFORM = PlatformFacts(
    driver_version="6.12.12",
    kernel_release="6.8.0-49-generic",
    shm_bytes=32 * GIB,
    shm_source="statvfs(/dev/shm)",
    mem_total_bytes=64 * GIB,
)


def fixture_path(name: str) -> Path:
    """A rocminfo output in tests/fixtures/*/{captured,handwritten}/: each name exists in exactly one place."""
    (found,) = [p for p in FIXTURES.glob(f"*/*/{name}")]
    return found


def fixture(name: str) -> str:
    return fixture_path(name).read_bytes().decode("utf-8")


def rocminfo_text(*gpus: tuple[str, str]) -> str:
    """A minimal rocminfo output: one CPU agent, then one agent per (gfx, marketing name)."""
    lines = [
        "ROCk module is loaded",
        "HSA Agents",
        "*******",
        "Agent 1",
        "*******",
        "  Name:                    AMD Ryzen 9 5900X 12-Core Processor",
        "  Device Type:             CPU",
    ]
    for n, (gfx, marketing) in enumerate(gpus, start=2):
        lines += [
            "*******",
            f"Agent {n}",
            "*******",
            f"  Name:                    {gfx}",
            f"  Marketing Name:          {marketing}",
            "  Device Type:             GPU",
            "  ISA Info:",
            "    ISA 1",
            f"      Name:                    amdgcn-amd-amdhsa--{gfx}",
        ]
    return "\n".join(lines + ["*** Done ***"])


def gpu_host(text: str | None, built: dict | None = None, **kw) -> HostFacts:
    """A healthy GPU host (engine, nodes, module, disk) with the given rocminfo output."""
    base = dict(
        engine_version="26.1.5",
        kfd=NodeFacts("/dev/kfd", True, True, 44, "video"),
        render_nodes=(NodeFacts("/dev/dri/renderD128", True, True, 993, "render"),),
        amdgpu_module=True,
        rocminfo_text=text,
        rocminfo_source="host rocminfo (/opt/rocm/bin/rocminfo)",
        free_disk_bytes=500 * GB,
        disk_path="/var/lib/docker",
        built_targets=built or {},
        engine_traits=ROOTFUL,
        identity=USER,
        platform=PLATFORM,
        built_rocm={t: "6.4.3" for t in built or {}},
    )
    base.update(kw)
    return HostFacts(**base)


def saved_output(name: str, built: dict | None = None, **kw) -> HostFacts:
    """The facts `doctor --rocminfo FILE` diagnoses: a saved output, this host's engine and disk."""
    return HostFacts(
        engine_version="26.1.5",
        rocminfo_text=fixture(name),
        rocminfo_source=name,
        free_disk_bytes=500 * GB,
        built_targets=built or {},
        **kw,
    )


# name -> (facts, from_file). Their reports (text and JSON) were written by the doctor before it
# became a package of checks and must not change unless the doctor's output is meant to.
SCENARIOS = {
    "bare-host": lambda: (HostFacts(), False),
    "igpu-beside-an-overridden-gpu": lambda: (
        gpu_host(
            rocminfo_text(("gfx1036", "AMD Radeon Graphics"), ("gfx1032", "AMD Radeon RX 6600")),
            {"t": ("gfx1030",), "u": ("gfx1032",), "w": ("gfx1100",)},
            render_nodes=(
                NodeFacts("/dev/dri/renderD128", True, False, 993, None),
                NodeFacts("/dev/dri/renderD129", False),
            ),
        ),
        False,
    ),
    "override-not-recommended-low-disk": lambda: (
        gpu_host(
            rocminfo_text(("gfx1101", "RX 7800 XT"), ("gfx1031", "RX 6700 XT")),
            {"t": ("gfx1100", "gfx1030")},
            kfd=NodeFacts("/dev/kfd", True, False, 44, None),
            amdgpu_module=None,
            free_disk_bytes=20 * GB,
        ),
        False,
    ),
    "override-would-rename-another-gpu-no-engine": lambda: (
        gpu_host(
            rocminfo_text(("gfx1100", "RX 7900 XTX"), ("gfx1031", "RX 6700 XT")),
            {"t": ("gfx1100", "gfx1030")},
            engine_version=None,
            engine_error="connection refused",
        ),
        False,
    ),
    "saved-rx6700xt": lambda: (saved_output("rx6700xt-gfx1031.txt", {"rdna2": ("gfx1030",), **HIP_RUNTIME}), True),
    "saved-w7900-with-igpu": lambda: (saved_output("w7900-with-igpu-first.txt", HIP_RUNTIME), True),
    "saved-no-gpu": lambda: (saved_output("debian-rocm5.7-no-gpu.txt", HIP_RUNTIME), True),
}
