"""Which of hip-runtime's images a host runs, from saved rocminfo outputs and KFD topologies."""

from __future__ import annotations

import pytest

from rocmforge.doctor.diagnosis import Diagnosis
from rocmforge.doctor.facts import HostFacts
from rocmforge.doctor.pick import Candidate, NoImage, choose, job_gpus
from rocmforge.verify.readers import kfd
from tests.conftest import ROOT
from tests.unit.doctor_hosts import rocminfo_text

SAVED = ROOT / "tests" / "fixtures" / "rocminfo" / "handwritten"
KFD = ROOT / "tests" / "fixtures" / "kfd"

MAIN = Candidate(("gfx90a", "gfx1100"), "rocmforge/hip-runtime:main", 1_650_000_000)
GFX90A = Candidate(("gfx90a",), "rocmforge/hip-runtime:gfx90a", 1_610_000_000, variant=True)
GFX1100 = Candidate(("gfx1100",), "rocmforge/hip-runtime:gfx1100", 1_210_000_000, variant=True)
IMAGES = [MAIN, GFX90A, GFX1100]


def diagnosis(text: str | None = None, topology: str | None = None) -> Diagnosis:
    info = kfd.read_saved_topology(topology) if topology else None
    return Diagnosis.of(HostFacts(rocminfo_text=text, kfd_info=info), from_file=True)


def pick(d: Diagnosis, hip_visible_devices: str | None = None, arch: str | None = None, images=IMAGES):
    gpus, why = job_gpus(d, hip_visible_devices)
    return choose(images, gpus, why, arch)


def saved(name: str) -> Diagnosis:
    return diagnosis((SAVED / name).read_text())


def test_a_w7900_gets_the_gfx1100_variant():
    choice = pick(saved("w7900-with-igpu-second.txt"))
    assert choice.image == GFX1100 and choice.gpus == ("gfx1100",) and not choice.override


def test_an_mi210_gets_the_gfx90a_variant_from_rocminfo_and_from_its_kfd_topology():
    assert pick(saved("mi210.txt")).image == GFX90A
    assert pick(diagnosis(topology=str(KFD / "mi210-gfx90a"))).image == GFX90A


def test_the_igpu_beside_a_w7900_does_not_force_the_all_archs_image():
    choice = pick(saved("w7900-with-igpu-first.txt"))
    assert choice.image == GFX1100
    assert "integrated" in choice.reason and "HIP_VISIBLE_DEVICES=1" in choice.reason


def test_the_users_hip_visible_devices_decides_which_gpus_count():
    # Device 0 of this host is the Ryzen iGPU (gfx1036): no image has code for it.
    with pytest.raises(NoImage, match="gfx1036"):
        pick(saved("w7900-with-igpu-first.txt"), hip_visible_devices="0")
    assert pick(saved("w7900-with-igpu-first.txt"), hip_visible_devices="1").image == GFX1100


def test_gpus_of_both_archs_get_the_main_image():
    text = rocminfo_text(("gfx90a", "AMD Instinct MI210"), ("gfx1100", "AMD Radeon Pro W7900"))
    assert pick(diagnosis(text)).image == MAIN


def test_a_gpu_no_image_covers_is_refused_with_the_list_of_images():
    with pytest.raises(NoImage) as exc:
        pick(diagnosis(topology=str(KFD / "rx6800-gfx1030")))
    message = str(exc.value)
    assert "gfx1030" in message and all(c.ref in message for c in IMAGES)


def test_a_gpu_that_runs_only_through_the_override_gets_it_said():
    choice = pick(diagnosis(rocminfo_text(("gfx1101", "AMD Radeon Pro W7700"))))
    assert choice.image == GFX1100 and choice.override and "HSA_OVERRIDE_GFX_VERSION" in choice.reason


def test_arch_overrides_the_hosts_gpus():
    assert pick(saved("w7900-with-igpu-second.txt"), arch="gfx90a").image == GFX90A
    with pytest.raises(NoImage, match="gfx942"):
        pick(saved("mi210.txt"), arch="gfx942")


def test_no_gpu_seen_gets_the_main_image():
    choice = pick(diagnosis(None))
    assert choice.image == MAIN and "no GPU" in choice.reason


def test_unknown_sizes_prefer_the_image_with_fewer_archs():
    unsized = [Candidate(c.archs, c.ref, None, c.variant) for c in IMAGES]
    assert pick(saved("mi210.txt"), images=unsized).image.ref == GFX90A.ref


def test_a_smaller_main_image_wins_over_a_larger_variant():
    # Sizes decide, not the kind: whichever image is smallest and covers the GPU.
    small_main = Candidate(MAIN.archs, MAIN.ref, 1_000_000_000)
    assert pick(saved("mi210.txt"), images=[small_main, GFX90A, GFX1100]).image == small_main
