"""What every check reads: the host's facts and what follows from them once (the parsed rocminfo
output, its GPUs in HIP order, which of them stay visible)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rocmforge.doctor.facts import HostFacts, NodeFacts
from rocmforge.verify.readers import rocminfo


@dataclass(frozen=True)
class Gpu:
    """A GPU agent and the device number HIP gives it (GPU agents in rocminfo order, from 0)."""

    hip_index: int
    agent: rocminfo.Agent

    @property
    def gfx(self) -> str:
        return rocminfo.gfx_base(self.agent.name)

    def describe(self) -> str:
        a = self.agent
        kind = "integrated" if a.is_apu else "discrete"
        name = f" '{a.marketing_name}'" if a.marketing_name and a.marketing_name != a.name else ""
        return f"{a.name}{name} (HIP device {self.hip_index}, {kind})"


def describe_all(gpus: Iterable[Gpu]) -> str:
    """The GPUs as one readable list: `gfx1100 'Radeon RX 7900 XTX' (HIP device 0, discrete), ...`."""
    return ", ".join(g.describe() for g in gpus)


@dataclass(frozen=True)
class Diagnosis:
    facts: HostFacts
    from_file: bool  # facts.rocminfo_text is a saved output: this host's nodes and module do not apply
    built: dict[str, tuple[str, ...]]  # built target -> its archs, lower case
    info: rocminfo.RocmInfo | None  # None: no rocminfo output
    gpus: tuple[Gpu, ...]
    discrete_only: str | None  # the HIP_VISIBLE_DEVICES value that hides integrated GPUs, if needed
    visible: tuple[Gpu, ...]  # the GPUs containers use once that value is set

    @classmethod
    def of(cls, facts: HostFacts, *, from_file: bool = False) -> Diagnosis:
        built = {name: tuple(a.lower() for a in archs) for name, archs in (facts.built_targets or {}).items()}
        info = rocminfo.parse(facts.rocminfo_text) if facts.rocminfo_text is not None else facts.kfd_info
        agents = [a for a in info.agents if a.device_type == "GPU"] if info else []
        gpus = tuple(Gpu(i, a) for i, a in enumerate(agents))
        discrete_only = rocminfo.discrete_only_visible_devices(info) if gpus and info is not None else None
        visible = tuple(g for g in gpus if not g.agent.is_apu) if discrete_only is not None else gpus
        return cls(
            facts=facts,
            from_file=from_file,
            built=built,
            info=info,
            gpus=gpus,
            discrete_only=discrete_only,
            visible=visible,
        )

    @property
    def source(self) -> str:
        """Where the GPU list came from (or why there is none)."""
        if self.facts.rocminfo_text is None and self.facts.kfd_info is not None:
            return f"KFD topology {self.facts.kfd_source}"
        return self.facts.rocminfo_source or "rocminfo"

    @property
    def hidden(self) -> tuple[Gpu, ...]:
        return tuple(g for g in self.gpus if g not in self.visible)

    @property
    def kfd(self) -> NodeFacts:
        return self.facts.kfd if self.facts.kfd is not None else NodeFacts(path="/dev/kfd", exists=False)

    @property
    def render_nodes(self) -> tuple[NodeFacts, ...]:
        """The render nodes that exist."""
        return tuple(n for n in self.facts.render_nodes if n.exists)
