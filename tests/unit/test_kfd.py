"""The KFD topology reader (rocmforge.verify.readers.kfd) and what doctor and run make of it: a pruned
image on a host whose GPUs it has no code for is refused with one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rocmforge.doctor import gpu_checks
from rocmforge.doctor.diagnosis import Diagnosis
from rocmforge.doctor.facts import gather
from rocmforge.doctor.findings import FAIL, OK, WARN
from rocmforge.shared.errors import UserError
from rocmforge.verify.readers import kfd
from tests.unit.doctor_hosts import HIP_RUNTIME, gpu_host

TOPOLOGIES = Path(__file__).resolve().parents[1] / "fixtures" / "kfd"


@pytest.mark.parametrize(
    "version, gfx",
    [
        (90010, "gfx90a"),
        (100300, "gfx1030"),
        (110000, "gfx1100"),
        (90402, "gfx942"),
        (80003, "gfx803"),
        (120001, "gfx1201"),
    ],
)
def test_gfx_name(version, gfx):
    assert kfd.gfx_name(version) == gfx


def test_reads_gpu_nodes_in_order_as_agents():
    info = kfd.read_topology(str(TOPOLOGIES / "mi210-gfx90a"))
    assert [(a.device_type, a.name) for a in info.agents] == [("CPU", "CPU node 0"), ("GPU", "gfx90a")]
    gpu = info.agents[1]
    assert gpu.compute_units == 104 and not gpu.is_apu and gpu.isas == ("amdgcn-amd-amdhsa--gfx90a",)
    assert kfd.read_topology(str(TOPOLOGIES / "rx6800-gfx1030")).gpus == ["gfx1030"]


def test_a_folder_that_is_no_topology_is_refused(tmp_path):
    assert kfd.read_topology(str(tmp_path)) is None
    with pytest.raises(UserError, match="is not a KFD topology folder"):
        kfd.read_saved_topology(str(tmp_path))


def facts_with_topology(name: str, pruned=frozenset({"hip-runtime"})):
    return Diagnosis.of(
        gpu_host(
            None,
            HIP_RUNTIME,
            kfd_info=kfd.read_topology(str(TOPOLOGIES / name)),
            kfd_source=name,
            pruned_targets=pruned,
        )
    )


def test_pruned_image_on_a_gpu_it_has_no_code_for_fails_with_one_line():
    v = gpu_checks.target_coverage(facts_with_topology("rx6800-gfx1030"), "hip-runtime")
    assert v.status == FAIL and "\n" not in v.detail
    assert v.detail.startswith(
        "target hip-runtime: this host's GPU gfx1030 (HIP device 0, discrete) is gfx1030, "
        "but the image keeps GPU code only for gfx90a, gfx1100 (pruned)"
    )


def test_unpruned_image_only_warns_and_a_covered_gpu_passes():
    v = gpu_checks.target_coverage(facts_with_topology("rx6800-gfx1030", pruned=frozenset()), "hip-runtime")
    assert v.status == WARN
    assert gpu_checks.target_coverage(facts_with_topology("mi210-gfx90a"), "hip-runtime").status == OK


def test_gather_reads_the_hosts_topology_when_rocminfo_is_missing(tmp_path):
    sys_root = tmp_path / "sys"
    shutil.copytree(TOPOLOGIES / "mi210-gfx90a", sys_root / "class" / "kfd" / "kfd" / "topology")
    facts = gather(
        client=None,
        sys_root=str(sys_root),
        dev_root=str(tmp_path / "dev"),
        proc_root=str(tmp_path),
        docker_root=str(tmp_path),
        built_targets={},
        host_rocminfo=False,
    )
    assert facts.rocminfo_text is None and facts.kfd_info.gpus == ["gfx90a"]
    assert Diagnosis.of(facts).source.startswith("KFD topology ")
