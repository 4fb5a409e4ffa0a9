"""The doctor on hosts copied under a folder (tests/fixtures/hosts/<name>/, read with --host-root):
the CDI check (amd.com/gpu specs against the host's nodes), the rootless check (the user's groups
against the nodes' GIDs), what `run` passes for each host, and the pieces they are made of."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocmforge.doctor import (
    FAIL,
    OK,
    SKIPPED,
    WARN,
    HostFacts,
    NodeFacts,
    cdi,
    container_checks,
    diagnose,
    driver,
    gather,
    platform,
    platform_checks,
    rootless,
)
from rocmforge.doctor.diagnosis import Diagnosis
from rocmforge.doctor.facts import ImageDetails
from rocmforge.doctor.hostroot import HostRoot, Identity
from rocmforge.doctor.rootless import EngineTraits
from rocmforge.host.container import GpuAccess
from rocmforge.host.dockerrun import docker_run_argv, dry_run_text
from tests.conftest import ROOT, run_cli
from tests.unit.doctor_hosts import FIXTURES, ROOTFUL, USER, gpu_host, rocminfo_text
from tests.unit.test_doctor import FakeClient, FakeImage

HOSTS = FIXTURES / "hosts"


def read_host(
    name: str, built: dict[str, tuple[str, str]] | None = None, env: dict[str, dict[str, str]] | None = None
) -> HostFacts:
    """built: target -> (its archs, comma-separated, its image's ROCm); env: target -> its image's Env."""
    images = ImageDetails(rocm={t: rocm for t, (_, rocm) in (built or {}).items()}, env=env or {})
    return gather(
        client=FakeClient(),
        host_root=str(HOSTS / name),
        docker_root=str(HOSTS),
        images=images,
        built_targets={t: tuple(archs.split(",")) for t, (archs, _) in (built or {}).items()},
    )


def check(name: str, check_name: str, built=None, env=None):
    return diagnose(read_host(name, built, env)).check(check_name)


def verdict_is(v, status: str, *needles: str) -> None:
    assert v.status == status, v.detail
    for n in needles:
        assert n in v.detail, (n, v.detail)


# --------------------------------------------------------------------------- the saved hosts


@pytest.mark.parametrize(
    "host, status, needles",
    [
        (
            "cdi-amd-ctk",
            OK,
            (
                "/etc/cdi/amd.json",
                "amd.com/gpu=1: /dev/dri/card2, /dev/dri/renderD129, /dev/kfd",
                "--device amd.com/gpu=0 --device amd.com/gpu=1",
            ),
        ),
        ("rootless-podman", OK, ("/var/run/cdi/amd.json", "--device amd.com/gpu=0")),
        (
            "cdi-stale",
            FAIL,
            (
                "amd.com/gpu=1 names /dev/dri/card2, /dev/dri/renderD129, which this host does not have",
                "amd-ctk cdi generate",
                "passes the device nodes instead",
            ),
        ),
        ("rootless-docker-no-render", SKIPPED, ("no CDI spec",)),
    ],
)
def test_cdi_on_saved_hosts(host, status, needles):
    verdict_is(check(host, "cdi"), status, *needles)


@pytest.mark.parametrize(
    "host, status, needles",
    [
        ("cdi-amd-ctk", OK, ("rootful Docker", "docker-info.json", "--group-add 110")),
        (
            "rootless-podman",
            OK,
            ("rootless podman", "name=rootless", "groups 44, 110, 1000", "--group-add keep-groups"),
        ),
        (
            "rootless-docker-no-render",
            FAIL,
            (
                "rootless Docker",
                "DOCKER_HOST=unix:///run/user/1000/docker.sock",
                "lacks /dev/kfd (group render, GID 110)",
                "/dev/dri/renderD128",
                "usermod -aG render ana",
            ),
        ),
    ],
)
def test_rootless_on_saved_hosts(host, status, needles):
    verdict_is(check(host, "rootless"), status, *needles)


@pytest.mark.parametrize(
    "host, cdi_devices, keep_groups, devices",
    [
        (
            "cdi-amd-ctk",
            ("amd.com/gpu=0", "amd.com/gpu=1"),
            False,
            ("/dev/kfd", "/dev/dri/renderD128", "/dev/dri/renderD129"),
        ),
        ("cdi-stale", (), False, ("/dev/kfd", "/dev/dri/renderD128")),
        ("rootless-podman", ("amd.com/gpu=0",), True, ("/dev/kfd", "/dev/dri/renderD128")),
        ("rootless-docker-no-render", (), False, ("/dev/kfd", "/dev/dri/renderD128")),
    ],
)
def test_what_run_passes_for_each_saved_host(host, cdi_devices, keep_groups, devices):
    access = diagnose(read_host(host)).access
    assert (access.cdi_devices, access.keep_groups, access.devices, access.group_ids) == (
        cdi_devices,
        keep_groups,
        devices,
        (110,),
    )


def test_a_copied_host_is_read_relative_to_its_folder():
    facts = read_host("rootless-docker-no-render")
    assert facts.host_root == str(HOSTS / "rootless-docker-no-render")
    assert facts.identity == Identity(
        uid=1000, gid=1000, groups=(4, 27, 44, 46, 1000), name="ana", listed=(4, 27, 44, 46)
    )
    assert facts.environ["DOCKER_HOST"] == "unix:///run/user/1000/docker.sock"
    assert facts.kfd == NodeFacts("/dev/kfd", True, False, 110, "render", 0o660)
    assert [n.path for n in facts.render_nodes] == ["/dev/dri/renderD128"]
    assert facts.amdgpu_module is True
    assert facts.engine_traits.security_options == ("name=seccomp,profile=builtin", "name=rootless", "name=cgroupns")
    # this machine's rocminfo would list this machine's GPUs: not run for a copy
    assert facts.rocminfo_text is None and "copied host" in facts.rocminfo_source


def test_the_listing_decides_read_write_for_the_copied_user():
    host = HostRoot(str(HOSTS / "cdi-amd-ctk"))
    member = Identity(uid=1000, gid=1000, groups=(110,))
    stranger = Identity(uid=1001, gid=1001, groups=(44,))
    assert host.node("/dev/kfd", member).readable_writable
    assert not host.node("/dev/kfd", stranger).readable_writable
    assert host.node("/dev/dri/card1", stranger).readable_writable
    assert not host.node("/dev/dri/renderD130", member).exists
    assert host.glob("/dev/dri/renderD*") == ["/dev/dri/renderD128", "/dev/dri/renderD129"]


# --------------------------------------------------------------------------- driver against image

ROCM64 = {"hip-runtime": ("gfx90a,gfx1100", "6.4.3")}
ROCM57 = {"debian-hip": ("gfx1100", "5.7.1")}


@pytest.mark.parametrize(
    "host, built, status, needles",
    [
        ("dkms-6.4-w7900", ROCM64, OK, ("amdgpu-dkms 6.12.12 (ROCm 6.4's driver)", "hip-runtime (ROCm 6.4.3)")),
        ("dkms-6.4-w7900", {**ROCM64, **ROCM57}, FAIL, ("debian-hip (ROCm 5.7.1)", "5 releases", "±2")),
        (
            "dkms-6.3-w7900",
            ROCM57,
            FAIL,
            ("amdgpu-dkms 6.10.5 (ROCm 6.3's driver)", "ROCm 5.7 user space is 4 releases"),
        ),
        ("dkms-6.3-w7900", ROCM64, OK, ("AMD lists ROCm 6.4 user space as tested on the 6.3 driver",)),
        # Newer than AMD's table: within its stated window, so a warning and never a pass.
        (
            "dkms-6.4-w7900",
            {"next": ("gfx1100", "7.0.0")},
            WARN,
            ("not in AMD's tested list for the 6.4 driver, though 1 release(s) apart",),
        ),
        ("dkms-6.3-w7900", {}, SKIPPED, ("no built target",)),
    ],
)
def test_driver_on_saved_hosts(host, built, status, needles):
    verdict_is(check(host, "driver", built), status, *needles)


def test_the_in_tree_driver_is_never_passed_on_a_guess(tmp_path):
    (tmp_path / "sys" / "module" / "amdgpu").mkdir(parents=True)
    (tmp_path / "proc" / "sys" / "kernel").mkdir(parents=True)
    (tmp_path / "proc" / "sys" / "kernel" / "osrelease").write_text("6.8.0-49-generic\n")
    listing(tmp_path, "/dev/kfd", "/dev/dri/renderD128")
    facts = gather(
        client=FakeClient(),
        host_root=str(tmp_path),
        docker_root=str(tmp_path),
        built_targets={"t": ("gfx1100",)},
        images=ImageDetails(rocm={"t": "6.4.3"}),
    )
    verdict_is(diagnose(facts).check("driver"), SKIPPED, "in-tree driver of kernel 6.8.0-49-generic", "6.4.3")


def test_the_kernel_release_falls_back_to_proc_version(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "version").write_text("Linux version 6.11.0-1-amd64 (debian-kernel@lists.debian.org) ...\n")
    assert platform.read(HostRoot(str(tmp_path))).kernel_release == "6.11.0-1-amd64"


def test_a_dkms_version_the_table_does_not_know_warns(tmp_path):
    (tmp_path / "sys" / "module" / "amdgpu").mkdir(parents=True)
    (tmp_path / "sys" / "module" / "amdgpu" / "version").write_text("9.9.9\n")
    listing(tmp_path, "/dev/kfd")
    facts = gather(client=FakeClient(), host_root=str(tmp_path), docker_root=str(tmp_path), built_targets={})
    verdict_is(diagnose(facts).check("driver"), WARN, "amdgpu 9.9.9", "cannot tell")


def test_the_table_names_its_sources_and_is_consistent():
    text = (Path(driver.__file__).parents[1] / "data" / driver.TABLE).read_text()
    assert "rocm.docs.amd.com" in text and "support matrix" in text
    t = driver.table()
    for kmd, users in t.tested.items():
        assert kmd in t.releases and set(users) <= set(t.releases) and kmd in users, kmd
    assert set(t.dkms.values()) <= set(t.releases)
    assert driver.compatibility("6.1", "5.7.1") == (OK, "AMD lists ROCm 5.7 user space as tested on the 6.1 driver")
    assert driver.compatibility("6.0", "6.4.3")[0] == FAIL


# --------------------------------------------------------------------------- shared memory


@pytest.mark.parametrize(
    "host, status, needles, shm_size",
    [
        (
            "dkms-6.4-w7900",
            OK,
            (
                "1 GPU(s): run passes --shm-size=2g (the container's own tmpfs, not --ipc=host)",
                "the host's /dev/shm is 31.4 GiB",
                "size=32892768k",
            ),
            "2g",
        ),
        (
            "rig-6gpu-8gb",
            FAIL,
            (
                "6 GPU(s) need 6.0 GiB",
                "half of the host's 7.7 GiB memory is 3.8 GiB",
                "Error while creating shared memory segment",
            ),
            "3925m",
        ),
    ],
)
def test_shm_on_saved_hosts(host, status, needles, shm_size):
    report = diagnose(read_host(host))
    verdict_is(report.check("shm"), status, *needles)
    assert report.access.shm_size == shm_size


def test_a_small_host_shm_warns_for_ipc_host_jobs(tmp_path):
    listing(tmp_path, "/dev/kfd", "/dev/dri/renderD128", "/dev/dri/renderD129")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "mounts").write_text("tmpfs /dev/shm tmpfs rw,nosuid,nodev,size=65536k 0 0\n")
    (tmp_path / "proc" / "meminfo").write_text("MemTotal:       65785536 kB\n")
    facts = gather(client=FakeClient(), host_root=str(tmp_path), docker_root=str(tmp_path), built_targets={})
    assert facts.platform.shm_bytes == 64 * 1024**2
    v = diagnose(facts).check("shm")
    verdict_is(v, WARN, "the host's /dev/shm is 0.1 GiB", "2 GPU(s)", "--ipc=host share it", "--shm-size=2g")


@pytest.mark.parametrize(
    "mounts, size",
    [
        ("tmpfs /dev/shm tmpfs rw,size=4g 0 0\n", 4 * 1024**3),
        ("tmpfs /dev/shm tmpfs rw,nosuid 0 0\n", None),
        ("proc /proc proc rw 0 0\n", None),
    ],
)
def test_shm_size_from_mounts(tmp_path, mounts, size):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "mounts").write_text(mounts)
    assert platform.shm_size(HostRoot(str(tmp_path)))[0] == size


def test_run_passes_shm_size_never_ipc_host():
    line = " ".join(docker_run_argv("img", GPU, {}, [], interactive=False, shm_size="8g"))
    assert "--shm-size=8g" in line and "--ipc" not in line
    assert "--shm-size=2g" in " ".join(docker_run_argv("img", GpuAccess(), {}, [], interactive=False))
    assert platform_checks.size_flag(3 * 1024**3) == "3g" and platform_checks.size_flag(1536 * 1024**2) == "1536m"


# --------------------------------------------------------------------------- HSA_OVERRIDE_GFX_VERSION set


@pytest.mark.parametrize(
    "host, built, env, status, needles",
    [
        ("dkms-6.4-w7900", ROCM64, None, OK, ("no visible GPU needs HSA_OVERRIDE_GFX_VERSION",)),
        (
            "override-9.0.0-w7900",
            ROCM64,
            None,
            FAIL,
            (
                "the host's environment: HSA_OVERRIDE_GFX_VERSION=9.0.0 makes gfx1100",
                "a gfx1100 (11.0.0), pose as gfx900",
                "across major versions",
                "runtime refuses",
            ),
        ),
        ("override-9.0.0-w7900", {}, None, FAIL, ("pose as gfx900", "no built target to compare with")),
        (
            "dkms-6.4-w7900",
            ROCM64,
            {"hip-runtime": {"HSA_OVERRIDE_GFX_VERSION": "10.3.0", "PATH": "/usr/bin"}},
            FAIL,
            ("target hip-runtime's image (Env): HSA_OVERRIDE_GFX_VERSION=10.3.0", "pose as gfx1030"),
        ),
        (
            "dkms-6.4-w7900",
            ROCM64,
            {"hip-runtime": {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}},
            OK,
            ("11.0.0 is gfx1100", "own version: no effect"),
        ),
    ],
)
def test_a_set_override_on_saved_hosts(host, built, env, status, needles):
    verdict_is(check(host, "gfx-override", built, env), status, *needles)


def test_an_override_within_the_family_warns_and_keeps_the_recommendation():
    from tests.unit.doctor_hosts import gpu_host

    facts = gpu_host(
        rocminfo_text(("gfx1101", "RX 7800 XT")), {"t": ("gfx1100",)}, environ={"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}
    )
    report = diagnose(facts)
    verdict_is(
        report.check("gfx-override"),
        WARN,
        "the host's environment",
        "gfx1101",
        "pose as gfx1100",
        "same family",
        "Set HSA_OVERRIDE_GFX_VERSION=11.0.0 in containers of those targets",
    )
    assert report.env_for("t") == {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}


@pytest.mark.parametrize("value, status", [("9.0.10", WARN), ("9.4.2", WARN), ("11.0.0", FAIL), ("ten", WARN)])
def test_judge_override_on_an_mi210(value, status):
    from rocmforge.doctor.diagnosis import Gpu
    from rocmforge.doctor.gpu_checks import judge_override
    from rocmforge.verify.readers import rocminfo

    mi210 = Gpu(0, rocminfo.parse(rocminfo_text(("gfx90a", "AMD Instinct MI210"))).agents[1])
    got = judge_override(value, mi210)
    assert got[0] == (OK if value == "9.0.10" else status), got


def test_images_env_is_read_from_the_engine():
    from rocmforge.doctor.facts import image_details_from_labels

    img = FakeImage("hip-runtime", "", "2026-01-01", tags=["rocmforge/hip-runtime:content-1"])
    img.labels = {"io.rocmforge.target": "hip-runtime", "io.rocmforge.rocm": "6.4.3"}
    img.env = ["PATH=/usr/bin", "HSA_OVERRIDE_GFX_VERSION=10.3.0"]

    details = image_details_from_labels(FakeClient(images=[img]))
    assert details.rocm == {"hip-runtime": "6.4.3"}
    assert details.env == {"hip-runtime": {"PATH": "/usr/bin", "HSA_OVERRIDE_GFX_VERSION": "10.3.0"}}


# --------------------------------------------------------------------------- WSL2


def test_wsl2_is_recognised_and_the_kfd_checks_are_skipped():
    report = diagnose(read_host("wsl2-radeon", ROCM64))
    verdict_is(
        report.check("wsl"),
        FAIL,
        "WSL2 (kernel 5.15.167.4-microsoft-standard-WSL2)",
        "/dev/dxg but no /dev/kfd",
        "librocdxg",
        "HSA_ENABLE_DXG_DETECTION=1",
        "--device /dev/dxg",
        "/usr/lib/wsl",
    )
    for name in ("kfd", "render-nodes", "device-groups", "amdgpu-module"):
        verdict_is(report.check(name), SKIPPED, "not applicable on WSL2", "/dev/dxg")
    verdict_is(report.check("driver"), SKIPPED, "WSL2")
    assert [c.name for c in report.checks if c.status == FAIL] == ["engine", "wsl"] or [
        c.name for c in report.checks if c.status == FAIL
    ] == ["wsl"], report.format_text()


@pytest.mark.parametrize(
    "host, status, needles",
    [
        ("dkms-6.4-w7900", OK, ("native Linux (kernel 6.8.0-49-generic)", "no /dev/dxg")),
        ("rig-6gpu-8gb", OK, ("native Linux",)),
    ],
)
def test_native_hosts_pass_wsl(host, status, needles):
    verdict_is(check(host, "wsl"), status, *needles)


def test_dxg_beside_a_kfd_is_checked_as_native(tmp_path):
    listing(tmp_path, "/dev/kfd", "/dev/dri/renderD128", "/dev/dxg")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "version").write_text("Linux version 6.6.36.6-microsoft-standard-WSL2 (root@x) #1 SMP\n")
    facts = gather(client=FakeClient(), host_root=str(tmp_path), docker_root=str(tmp_path), built_targets={})
    report = diagnose(facts)
    verdict_is(report.check("wsl"), WARN, "/dev/dxg", "next to /dev/kfd")
    assert report.check("kfd").status != SKIPPED


# --------------------------------------------------------------------------- CDI specs


def spec_file(tmp_path: Path, folder: str, name: str, text: str) -> None:
    p = tmp_path / folder.lstrip("/") / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def listing(tmp_path: Path, *paths: str) -> None:
    (tmp_path / "dev-stat.txt").write_text("".join(f"crw-rw---- 0 110 {p}\n" for p in paths))


YAML_SPEC = """cdiVersion: 0.6.0
kind: amd.com/gpu
devices:
  - name: "0"
    containerEdits:
      deviceNodes:
        - path: /dev/dri/renderD128
        - path: /dev/kfd
"""


def test_a_yaml_spec_and_another_vendors_spec(tmp_path):
    listing(tmp_path, "/dev/kfd", "/dev/dri/renderD128")
    spec_file(tmp_path, "/etc/cdi", "amd.yaml", YAML_SPEC)
    spec_file(tmp_path, "/etc/cdi", "nvidia.yaml", YAML_SPEC.replace("amd.com", "nvidia.com"))
    specs = cdi.read_specs(HostRoot(str(tmp_path)))
    assert [(s.path, s.kind) for s in specs] == [("/etc/cdi/amd.yaml", cdi.KIND)]
    assert specs[0].gpus[0].nodes == ("/dev/dri/renderD128", "/dev/kfd") and not specs[0].gpus[0].missing
    assert cdi.run_devices(specs, ("/dev/dri/renderD128",), None, podman=True) == ("amd.com/gpu=0",)


def test_host_path_wins_over_the_containers_path(tmp_path):
    listing(tmp_path, "/dev/kfd", "/dev/dri/renderD129")
    spec_file(
        tmp_path,
        "/var/run/cdi",
        "amd.yaml",
        YAML_SPEC.replace(
            "- path: /dev/dri/renderD128", "- path: /dev/dri/renderD128\n          hostPath: /dev/dri/renderD129"
        ),
    )
    (spec,) = cdi.read_specs(HostRoot(str(tmp_path)))
    assert spec.gpus[0].nodes == ("/dev/dri/renderD129", "/dev/kfd")
    assert spec.problems() == [] and spec.unnamed(("/dev/dri/renderD129",)) == []


DOCKER_WITH_CDI = EngineTraits(podman=False, cdi_dirs=("/etc/cdi", "/var/run/cdi"))


def on(
    tmp_path: Path,
    *,
    traits=DOCKER_WITH_CDI,
    renders=("/dev/dri/renderD128",),
) -> Diagnosis:
    host = HostRoot(str(tmp_path))
    facts = gpu_host(
        None,
        render_nodes=tuple(NodeFacts(r, True, True, 110, "render") for r in renders),
        cdi_specs=cdi.read_specs(host),
        engine_traits=traits,
    )
    return Diagnosis.of(facts)


@pytest.mark.parametrize(
    "files, status, needles",
    [
        ({"amd.json": "{not json"}, FAIL, ("/etc/cdi/amd.json cannot be read as a CDI spec",)),
        (
            {"amd.yaml": YAML_SPEC.replace("        - path: /dev/kfd\n", "")},
            FAIL,
            ("amd.com/gpu=0 does not name /dev/kfd",),
        ),
        ({"amd.yaml": YAML_SPEC, "amd-copy.yaml": YAML_SPEC}, FAIL, ("2 specs define amd.com/gpu", "keep one")),
        ({"amd.yaml": YAML_SPEC.replace('name: "0"', "name: all")}, FAIL, ("names no per-GPU device",)),
    ],
)
def test_cdi_specs_that_fail(tmp_path, files, status, needles):
    listing(tmp_path, "/dev/kfd", "/dev/dri/renderD128")
    for name, text in files.items():
        spec_file(tmp_path, "/etc/cdi", name, text)
    d = on(tmp_path)
    verdict_is(container_checks.cdi_spec(d), status, *needles)
    assert container_checks.cdi_names(d) == ()


def test_cdi_spec_missing_a_gpu_the_host_has_warns(tmp_path):
    listing(tmp_path, "/dev/kfd", "/dev/dri/renderD128", "/dev/dri/renderD129")
    spec_file(tmp_path, "/etc/cdi", "amd.yaml", YAML_SPEC)
    d = on(tmp_path, renders=("/dev/dri/renderD128", "/dev/dri/renderD129"))
    verdict_is(container_checks.cdi_spec(d), WARN, "no device names /dev/dri/renderD129", "amd-ctk cdi generate")
    assert container_checks.cdi_names(d) == ()


@pytest.mark.parametrize(
    "traits, reads",
    [
        (EngineTraits(podman=False, cdi_dirs=None), False),  # an engine that does not say (Docker < 27)
        (EngineTraits(podman=False, cdi_dirs=()), False),  # CDI off
        (EngineTraits(podman=False, cdi_dirs=("/run/cdi",)), False),  # reads elsewhere
        (EngineTraits(podman=False, cdi_dirs=("/etc/cdi/",)), True),
        (EngineTraits(podman=True), True),
    ],
)
def test_a_fitting_spec_is_used_only_when_the_engine_reads_it(tmp_path, traits, reads):
    listing(tmp_path, "/dev/kfd", "/dev/dri/renderD128")
    spec_file(tmp_path, "/etc/cdi", "amd.yaml", YAML_SPEC)
    d = on(tmp_path, traits=traits)
    v = container_checks.cdi_spec(d)
    if reads:
        verdict_is(v, OK, "--device amd.com/gpu=0")
        assert container_checks.cdi_names(d) == ("amd.com/gpu=0",)
    else:
        verdict_is(v, WARN, "fits this host", '"cdi": true', "passes the device")
        assert container_checks.cdi_names(d) == ()


def test_run_cdi_dirs_under_slash_run_read_var_run(tmp_path):
    listing(tmp_path, "/dev/kfd", "/dev/dri/renderD128")
    spec_file(tmp_path, "/var/run/cdi", "amd.yaml", YAML_SPEC)
    d = on(tmp_path, traits=EngineTraits(podman=False, cdi_dirs=("/etc/cdi", "/run/cdi")))
    assert container_checks.cdi_names(d) == ("amd.com/gpu=0",)


# --------------------------------------------------------------------------- rootless engines


@pytest.mark.parametrize(
    "environ, uid, traits, expected",
    [
        ({"DOCKER_HOST": "unix:///run/user/1000/docker.sock"}, 1000, EngineTraits(), (rootless.DOCKER, True)),
        ({"CONTAINER_HOST": "unix:///run/user/1000/podman/podman.sock"}, 1000, EngineTraits(), (rootless.PODMAN, True)),
        ({"DOCKER_HOST": "unix:///var/run/docker.sock"}, 1000, ROOTFUL, (rootless.DOCKER, False)),
        ({}, 1000, EngineTraits(podman=False, security_options=("name=rootless",)), (rootless.DOCKER, True)),
        ({}, 1000, EngineTraits(podman=True, security_options=()), (rootless.PODMAN, True)),
        ({}, 0, EngineTraits(podman=True, security_options=()), (rootless.PODMAN, False)),
        ({}, 1000, EngineTraits(), (rootless.DOCKER, None)),
        ({}, None, EngineTraits(podman=True), (rootless.PODMAN, None)),
    ],
)
def test_engine_mode(environ, uid, traits, expected):
    m = rootless.mode(environ, uid, traits)
    assert (m.engine, m.rootless) == expected, m.why


def test_podman_info_says_rootless_itself():
    traits = EngineTraits.of_info({"host": {"security": {"rootless": True}}})
    assert traits.podman and traits.security_options == ("name=rootless",)
    assert EngineTraits.of_info({"host": {"security": {"rootless": False}}}).security_options == ()
    docker = EngineTraits.of_info({"SecurityOptions": ["name=seccomp"], "CDISpecDirs": ["/etc/cdi"]}, podman=False)
    assert (docker.podman, docker.security_options, docker.cdi_dirs) == (False, ("name=seccomp",), ("/etc/cdi",))


def rootless_host(mode: int = 0o660, groups=(44, 993, 1000), **kw) -> Diagnosis:
    base = dict(
        kfd=NodeFacts("/dev/kfd", True, True, 993, "render", mode),
        render_nodes=(NodeFacts("/dev/dri/renderD128", True, True, 993, "render", mode),),
        environ={"DOCKER_HOST": "unix:///run/user/1000/docker.sock"},
    )
    facts = gpu_host(
        rocminfo_text(("gfx1100", "Radeon PRO W7900")), identity=Identity(1000, 1000, groups, "ana"), **{**base, **kw}
    )
    return Diagnosis.of(facts)


def test_rootless_docker_with_the_groups_warns_that_runc_drops_them():
    verdict_is(container_checks.rootless_access(rootless_host()), WARN, "runc", "run.oci.keep_original_groups=1")


def test_rootless_docker_with_nodes_open_to_all_is_ok_without_groups():
    verdict_is(container_checks.rootless_access(rootless_host(0o666, groups=(1000,))), OK, "every user")


def test_rootless_podman_without_the_render_group_fails():
    d = rootless_host(groups=(44, 1000), environ={"CONTAINER_HOST": "unix:///run/user/1000/podman/podman.sock"})
    verdict_is(container_checks.rootless_access(d), FAIL, "rootless podman", "lacks /dev/kfd (group render, GID 993)")


def test_a_group_added_since_login_is_named():
    d = rootless_host(groups=(44, 1000))
    d = Diagnosis.of(HostFacts(**{**d.facts.__dict__, "identity": Identity(1000, 1000, (44, 1000), "ana", (44, 993))}))
    verdict_is(container_checks.rootless_access(d), FAIL, "/etc/group already lists ana in render", "newgrp render")
    assert "usermod" not in container_checks.rootless_access(d).detail


def test_rootless_does_not_apply_to_a_saved_rocminfo_output():
    d = Diagnosis.of(gpu_host(rocminfo_text(("gfx1100", "W7900"))), from_file=True)
    verdict_is(container_checks.rootless_access(d), SKIPPED, "not applicable")
    verdict_is(container_checks.cdi_spec(d), SKIPPED, "not applicable")


def test_rootless_is_skipped_without_nodes_or_signs():
    verdict_is(container_checks.rootless_access(Diagnosis.of(HostFacts())), SKIPPED, "no GPU device nodes")
    d = Diagnosis.of(gpu_host(None, engine_traits=EngineTraits(), identity=USER))
    verdict_is(container_checks.rootless_access(d), SKIPPED, "cannot tell")


# --------------------------------------------------------------------------- the run line

GPU = GpuAccess(devices=("/dev/kfd", "/dev/dri/renderD128"), group_ids=(44, 110))


def test_run_line_with_cdi_names_and_keep_groups():
    argv = docker_run_argv(
        "img", GPU, {}, ["true"], interactive=False, cdi_devices=("amd.com/gpu=0", "amd.com/gpu=1"), keep_groups=True
    )
    line = " ".join(argv)
    assert "--device amd.com/gpu=0 --device amd.com/gpu=1 --group-add keep-groups" in line
    assert "/dev/kfd" not in line and "--group-add 110" not in line


def test_run_line_without_cdi_passes_the_nodes_and_gids():
    line = " ".join(docker_run_argv("img", GPU, {}, [], interactive=False))
    assert "--device /dev/kfd --device /dev/dri --group-add 44 --group-add 110" in line and "amd.com" not in line


def test_the_saved_hosts_are_what_their_readme_says():
    readme = (HOSTS / "README.md").read_text()
    for host in sorted(p.name for p in HOSTS.iterdir() if p.is_dir()):
        assert f"`{host}`" in readme, host
        info = HOSTS / host / "docker-info.json"
        assert not info.exists() or isinstance(json.loads(info.read_text()), dict)


# --------------------------------------------------------------------------- the command line


@pytest.mark.parametrize(
    "host, cdi_status, rootless_status",
    [
        ("cdi-amd-ctk", OK, OK),
        ("cdi-stale", FAIL, OK),
        ("rootless-docker-no-render", SKIPPED, FAIL),
    ],
)
def test_doctor_host_root_on_the_command_line(host, cdi_status, rootless_status):
    p = run_cli(
        "doctor",
        "--json",
        "--host-root",
        str(HOSTS / host),
        env={"DOCKER_HOST": "unix:///nonexistent/rocmforge-no-engine.sock"},
        timeout=120,
    )
    assert p.returncode == 1, p.stderr  # the engine is unreachable here: that check fails too
    shown = json.loads(p.stdout)
    # the one result object of every acting command (rocmforge/data/result.schema.json), checks inside
    assert (shown["command"], shown["ok"], shown["exit_code"]) == ("doctor", False, 1), list(shown)[:3]
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(shown, json.loads((ROOT / "rocmforge" / "data" / "result.schema.json").read_text()))
    statuses = {c["name"]: c["status"] for c in shown["checks"]}
    assert (statuses["cdi"], statuses["rootless"], statuses["engine"]) == (cdi_status, rootless_status, FAIL)


def test_a_copy_without_its_users_status_does_not_pass_rootless(tmp_path):
    listing(tmp_path, "/dev/kfd", "/dev/dri/renderD128")
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "self" / "environ").write_bytes(b"DOCKER_HOST=unix:///run/user/1000/docker.sock\0")
    facts = gather(client=EngineWithCdi(), host_root=str(tmp_path), built_targets={}, docker_root=str(tmp_path))
    assert facts.identity is None
    verdict_is(diagnose(facts).check("rootless"), WARN, "rootless Docker", "could not be read")
    # this machine's engine says nothing about the copy's: its CDI folders are not taken
    assert facts.engine_traits.cdi_dirs is None and facts.engine_traits.security_options is None


class EngineWithCdi(FakeClient):
    """A rootful dockerd 28 with CDI on, holding every image asked for."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)

    def inspect(self, ref):
        return {"Id": "sha256:" + "1" * 64, "Size": 10**9}

    def system_info(self):
        return {
            "DockerRootDir": "/nonexistent-docker-root",
            "SecurityOptions": ["name=seccomp,profile=builtin"],
            "CDISpecDirs": ["/etc/cdi", "/var/run/cdi"],
        }


@pytest.mark.parametrize(
    "host, expected, absent, podman_expected",
    [
        (
            "cdi-amd-ctk",
            "--device amd.com/gpu=0 --device amd.com/gpu=1 --group-add 110",
            "/dev/kfd",
            "--device amd.com/gpu=0 --device amd.com/gpu=1 --group-add keep-groups",
        ),
        (
            "cdi-stale",
            "--device /dev/kfd --device /dev/dri --group-add 110",
            "amd.com/gpu",
            "--device /dev/kfd --device /dev/dri --group-add keep-groups",
        ),
        # podman's own info: Docker's command line reads no CDI folder of its, podman's does
        (
            "rootless-podman",
            "--device /dev/kfd --device /dev/dri --group-add 110",
            "amd.com/gpu",
            "--device amd.com/gpu=0 --group-add keep-groups",
        ),
        # WSL2: /dev/dxg and the WSL libraries, for AMD's WSL runtime; no KFD node, no group
        (
            "wsl2-radeon",
            "docker run --rm --device /dev/dxg -v /usr/lib/wsl:/usr/lib/wsl:ro --shm-size=2g "
            "-e HSA_ENABLE_DXG_DETECTION=1",
            "/dev/kfd",
            "podman run --rm --device /dev/dxg -v /usr/lib/wsl:/usr/lib/wsl:ro --shm-size=2g "
            "-e HSA_ENABLE_DXG_DETECTION=1",
        ),
    ],
)
def test_run_dry_run_prints_the_copied_hosts_command(monkeypatch, capsys, host, expected, absent, podman_expected):
    import rocmforge.cli as cli
    from rocmforge.cli import host_commands

    monkeypatch.setattr(host_commands.engine, "connect", lambda: EngineWithCdi())
    monkeypatch.setattr(host_commands.engine, "image_id", lambda client, ref: "sha256:" + "1" * 64)
    matrix = Path(__file__).resolve().parents[2] / "matrix.yaml"
    rc = cli.main(
        [
            "--matrix",
            str(matrix),
            "run",
            "--target",
            "hip-runtime",
            "--dry-run",
            "--host-root",
            str(HOSTS / host),
            "--",
            "rocminfo",
        ]
    )
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0 and out[0] == "# docker" and out[2] == "# podman" and len(out) == 4, out
    line, podman = out[1], out[3]
    assert line.startswith("docker run --rm ") and line.endswith(" rocminfo")
    assert podman.startswith("podman run --rm ") and podman.endswith(" rocminfo")
    assert expected in line and absent not in line, line
    assert podman_expected in podman and "--group-add 110" not in podman, podman
    for each in (line, podman):
        assert "--shm-size=2g" in each and "--ipc=host" not in each


def test_dry_run_text_labels_each_engine():
    text = dry_run_text(
        "img",
        GPU,
        {"HIP_VISIBLE_DEVICES": "0"},
        ["rocminfo"],
        interactive=False,
        podman_cdi=("amd.com/gpu=0",),
        shm_size="4g",
    )
    assert text.splitlines() == [
        "# docker",
        "docker run --rm --device /dev/kfd --device /dev/dri --group-add 44 --group-add 110 --security-opt "
        "seccomp=unconfined --shm-size=4g -e HIP_VISIBLE_DEVICES=0 img rocminfo",
        "# podman",
        "podman run --rm --device amd.com/gpu=0 --group-add keep-groups --security-opt seccomp=unconfined "
        "--shm-size=4g -e HIP_VISIBLE_DEVICES=0 img rocminfo",
    ]
