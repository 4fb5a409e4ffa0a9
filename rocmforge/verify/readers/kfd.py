"""The GPUs the amdgpu driver's KFD topology lists (``/sys/class/kfd/kfd/topology/nodes/N/``),
as rocminfo agents: what `doctor` and `run` read when rocminfo is not at hand, or from a saved
copy of the folder (``--kfd-topology DIR``).

Each node's ``properties`` file is ``key value`` lines. A GPU node has a non-zero
``gfx_target_version``, major*10000 + minor*100 + stepping with minor and stepping printed in
hex in the gfx name (90010 -> gfx90a, 100300 -> gfx1030, 110000 -> gfx1100); CPU nodes have 0.
Nodes are numbered CPU-first in the order the HSA runtime enumerates agents, so GPU nodes in
node order are HIP's device order."""

from __future__ import annotations

import os

from rocmforge.shared.errors import UserError
from rocmforge.verify.readers.rocminfo import INTEGRATED_GFX, Agent, RocmInfo

DEFAULT_TOPOLOGY = "/sys/class/kfd/kfd/topology"


def gfx_name(version: int) -> str:
    """The gfx name a gfx_target_version stands for (90010 -> gfx90a)."""
    major, minor, step = version // 10000, (version // 100) % 100, version % 100
    return f"gfx{major}{minor:x}{step:x}"


def _properties(path: str) -> dict[str, int]:
    props: dict[str, int] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            key, _, value = line.strip().partition(" ")
            if key and value.strip().lstrip("-").isdigit():
                props[key] = int(value)
    return props


def read_topology(root: str = DEFAULT_TOPOLOGY) -> RocmInfo | None:
    """The topology's agents, or None when root has no nodes (no driver, no GPU). A folder given
    by the user that holds no topology is refused (UserError)."""
    nodes_dir = os.path.join(root, "nodes")
    try:
        names = sorted((n for n in os.listdir(nodes_dir) if n.isdigit()), key=int)
    except OSError:
        return None
    agents: list[Agent] = []
    for n in names:
        try:
            props = _properties(os.path.join(nodes_dir, n, "properties"))
        except OSError:
            continue
        version = props.get("gfx_target_version", 0)
        gpu = version > 0 and props.get("simd_count", 0) > 0
        name = gfx_name(version) if gpu else f"CPU node {n}"
        simd_per_cu = props.get("simd_per_cu") or 0
        agents.append(
            Agent(
                index=len(agents) + 1,
                name=name,
                marketing_name="",
                device_type="GPU" if gpu else "CPU",
                compute_units=(props["simd_count"] // simd_per_cu) if gpu and simd_per_cu else None,
                is_apu=gpu and (props.get("cpu_cores_count", 0) > 0 or name in INTEGRATED_GFX),
                isas=(f"amdgcn-amd-amdhsa--{name}",) if gpu else (),
                uuid=None,
            )
        )
    if not agents:
        return None
    return RocmInfo(driver_loaded=True, runtime_version=None, agents=tuple(agents), problems=())


def read_saved_topology(root: str) -> RocmInfo:
    """The agents of a topology folder the user saved (--kfd-topology); UserError when it holds none."""
    info = read_topology(root)
    if info is None:
        raise UserError(
            f"{root} is not a KFD topology folder (it has no nodes/N/properties; copy {DEFAULT_TOPOLOGY} with `cp -r`)",
            field="--kfd-topology",
        )
    return info
