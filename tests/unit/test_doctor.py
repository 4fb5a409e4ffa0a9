"""rocmforge.doctor: `build.py doctor` as a whole. diagnose() is driven with constructed HostFacts
and the rocminfo fixtures (tests/fixtures/rocminfo/{captured,handwritten}/,
tests/fixtures/doctor/handwritten/), and its whole output is compared with
tests/fixtures/doctor/expected/; gather() runs against a fake /dev, /sys and /proc tree and a fake
engine client. The checks one by one: test_doctor_checks.py."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from rocmforge import doctor
from rocmforge.doctor import FAIL, OK, SKIPPED, WARN, HostFacts, NodeFacts, diagnose, gather
from rocmforge.host.enginebase import Engine, ImageMissing
from rocmforge.host.engineinfo import GRAPHDRIVER, EngineInfo
from rocmforge.shared.errors import UserError
from tests.unit.doctor_hosts import (
    EXPECTED,
    GB,
    HIP_RUNTIME,
    SCENARIOS,
    fixture,
    fixture_path,
    gpu_host,
    rocminfo_text,
    saved_output,
)


def from_file(name: str, built: dict | None = None) -> doctor.Report:
    return diagnose(saved_output(name, built), from_file=True)


def status(report: doctor.Report, name: str) -> str:
    c = report.check(name)
    assert c is not None, [x.name for x in report.checks]
    return c.status


def assert_check(report: doctor.Report, name: str, expected: str, *needles: str) -> doctor.Check:
    """The check has that status and its detail holds every needle."""
    assert status(report, name) == expected, report.format_text()
    c = report.check(name)
    for needle in needles:
        assert needle in c.detail, (needle, c.detail)
    return c


def envs(report: doctor.Report) -> dict:
    out = {}
    for r in report.recommendations:
        out.update(r.env)
    return out


# --------------------------------------------------------------------------- report shape and output


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_report_matches_the_expected_output(name):
    facts, saved = SCENARIOS[name]()
    report = diagnose(facts, from_file=saved)
    assert report.format_text() + "\n" == (EXPECTED / f"{name}.txt").read_text()
    assert json.dumps(report.to_json(), indent=2) + "\n" == (EXPECTED / f"{name}.json").read_text()


def test_every_expected_output_has_a_scenario():
    assert {p.stem for p in EXPECTED.iterdir()} == set(SCENARIOS)


def test_json_shape_and_text_rendering():
    report = diagnose(gpu_host(fixture("w7900-with-igpu-first.txt"), HIP_RUNTIME))
    data = json.loads(json.dumps(report.to_json()))
    assert set(data) == {"checks", "recommendations"}
    for c in data["checks"]:
        assert set(c) == {"name", "status", "detail"}
        assert c["status"] in (OK, WARN, FAIL, SKIPPED)
        assert c["detail"]
    for r in data["recommendations"]:
        assert set(r) == {"env", "reason"}
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in r["env"].items())
    names = [c["name"] for c in data["checks"]]
    assert names[:8] == ["engine", "wsl", "kfd", "render-nodes", "device-groups", "rootless", "cdi", "amdgpu-module"]
    assert {
        "driver",
        "gpus",
        "integrated-gpus",
        "gfx-override",
        "coverage:hip-runtime",
        "coverage",
        "shm",
        "disk",
    } <= set(names)
    text = report.format_text()
    for c in report.checks:
        assert c.name in text
    assert "WARN  integrated-gpus" in text
    assert "HIP_VISIBLE_DEVICES=1" in text
    assert text.splitlines()[-1].startswith("0 failed, ")
    assert report.ok and report.exit_code == 0


def test_healthy_single_gpu_host_is_all_ok():
    report = diagnose(gpu_host(fixture("mi210.txt"), HIP_RUNTIME))
    # No CDI spec is the usual host: skipped, with `run` passing the nodes; everything else is ok.
    assert_check(report, "cdi", SKIPPED, "no CDI spec", "passes the device nodes")
    assert [c.status for c in report.checks if c.name != "cdi"] == [OK] * (len(report.checks) - 1), report.format_text()
    assert report.recommendations == []
    assert "gfx90a 'AMD Instinct MI210'" in report.check("gpus").detail
    assert_check(
        report, "device-groups", OK, "--group-add 44 --group-add 993", "--device /dev/kfd --device /dev/dri/renderD128"
    )


# --------------------------------------------------------------------------- no GPU


def test_host_without_gpu_fails_with_clear_detail():
    facts = HostFacts(
        engine_version="26.1.5",
        kfd=NodeFacts("/dev/kfd", exists=False),
        render_nodes=(),
        amdgpu_module=False,
        rocminfo_text=None,
        rocminfo_source="not run: no /dev/kfd",
        free_disk_bytes=200 * GB,
        built_targets=HIP_RUNTIME,
    )
    report = diagnose(facts)
    assert_check(report, "kfd", FAIL, "no AMD GPU device nodes: containers will run without a GPU")
    # One cause, reported once: the render-node and GPU checks would only repeat it.
    for name in ("render-nodes", "device-groups", "gpus", "coverage"):
        assert status(report, name) == SKIPPED
    assert [c.name for c in report.checks if c.status == FAIL] == ["kfd", "amdgpu-module"]
    assert status(report, "engine") == OK and status(report, "disk") == OK
    assert not report.ok and report.exit_code == 1
    assert "(exit code 1)" in report.format_text()


def test_default_facts_are_a_bare_host():
    report = diagnose(HostFacts())
    assert status(report, "engine") == FAIL
    assert status(report, "kfd") == FAIL
    assert status(report, "disk") == WARN
    assert not report.ok


@pytest.mark.parametrize(
    "name, needles",
    [
        ("debian-rocm5.7-no-gpu.txt", ["ROCk module is NOT loaded"]),
        ("kfd-permission-denied.txt", ["Unable to open /dev/kfd read-write", "--group-add"]),
    ],
)
def test_saved_output_without_gpu_fails_and_says_why(name, needles):
    report = from_file(name, HIP_RUNTIME)
    for host_check in ("kfd", "render-nodes", "device-groups", "amdgpu-module"):
        assert_check(report, host_check, SKIPPED, "not applicable")
    assert_check(report, "gpus", FAIL, *needles)
    assert status(report, "coverage") == SKIPPED
    assert not report.ok


# --------------------------------------------------------------------------- iGPU + dGPU


@pytest.mark.parametrize(
    "name, value, igpu_index",
    [
        ("w7900-with-igpu-first.txt", "1", 0),
        ("w7900-with-igpu-second.txt", "0", 1),
    ],
)
def test_w7900_with_igpu_recommends_hip_visible_devices(name, value, igpu_index):
    report = from_file(name, HIP_RUNTIME)
    assert [r.env for r in report.recommendations] == [{"HIP_VISIBLE_DEVICES": value}]
    reason = report.recommendations[0].reason
    assert "gfx1036" in reason and "integrated" in reason
    assert f"HIP device {igpu_index}, integrated" in reason
    assert doctor.SEED_ERROR in reason  # HIP error: invalid device function
    assert "W7900" in reason
    assert status(report, "integrated-gpus") == WARN
    # The hidden iGPU is not held against the images: the W7900 is covered.
    assert status(report, "coverage:hip-runtime") == OK
    assert_check(report, "coverage", OK, "hidden by HIP_VISIBLE_DEVICES")
    assert status(report, "gfx-override") == OK
    assert report.ok


def test_only_integrated_gpu_needs_no_hiding():
    report = from_file("empty-marketing-name.txt", {"t": ("gfx1151",)})
    assert status(report, "integrated-gpus") == OK
    assert "HIP_VISIBLE_DEVICES" not in envs(report)
    assert status(report, "coverage") == OK


def test_igpu_hidden_and_dgpu_overridden_together():
    text = rocminfo_text(("gfx1036", "AMD Radeon Graphics"), ("gfx1032", "AMD Radeon RX 6600"))
    report = diagnose(gpu_host(text, {"t": ("gfx1030",)}))
    assert envs(report) == {"HIP_VISIBLE_DEVICES": "1", "HSA_OVERRIDE_GFX_VERSION": "10.3.0"}


# --------------------------------------------------------------------------- HSA_OVERRIDE_GFX_VERSION


def test_gfx1031_gets_override_when_a_target_covers_gfx1030_only():
    report = from_file("rx6700xt-gfx1031.txt", {"rdna2": ("gfx1030",)})
    assert [r.env for r in report.recommendations] == [{"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}]
    reason = report.recommendations[0].reason
    assert "gfx1031" in reason and "gfx1030" in reason and "rdna2" in reason
    assert status(report, "gfx-override") == WARN
    assert_check(report, "coverage:rdna2", WARN, "only with HSA_OVERRIDE_GFX_VERSION=10.3.0")
    assert status(report, "coverage") == WARN
    assert report.ok


@pytest.mark.parametrize("archs", [("gfx1030", "gfx1031"), ("gfx1031",), ("gfx10-3-generic",)])
def test_gfx1031_needs_no_override_when_covered(archs):
    report = from_file("rx6700xt-gfx1031.txt", {"t": archs})
    assert report.recommendations == []
    assert status(report, "gfx-override") == OK
    assert status(report, "coverage:t") == OK
    assert status(report, "coverage") == OK


def test_gfx1031_not_covered_at_all_fails_coverage():
    report = from_file("rx6700xt-gfx1031.txt", HIP_RUNTIME)
    assert report.recommendations == []
    assert status(report, "gfx-override") == OK
    assert status(report, "coverage:hip-runtime") == WARN
    assert_check(report, "coverage", FAIL, "hipErrorNoBinaryForGpu", "gfx1031")
    assert not report.ok


def test_override_named_but_not_recommended_without_built_targets():
    report = from_file("rx6700xt-gfx1031.txt")
    assert_check(report, "gfx-override", SKIPPED, "HSA_OVERRIDE_GFX_VERSION=10.3.0")
    assert report.recommendations == []
    assert status(report, "coverage") == SKIPPED


def test_override_only_for_the_target_that_needs_it():
    report = from_file("rx6700xt-gfx1031.txt", {"a": ("gfx1030",), "b": ("gfx1031",)})
    assert envs(report) == {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}
    assert "target(s) b cover it without" in report.recommendations[0].reason
    assert status(report, "coverage:a") == WARN
    assert status(report, "coverage:b") == OK
    assert status(report, "coverage") == OK
    # The override is for target a's containers only.
    assert report.env_for("a") == {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}
    assert report.env_for("b") == {} and report.env_for() == {}


def test_env_for_merges_host_wide_and_target_recommendations():
    text = rocminfo_text(("gfx1036", "AMD Radeon Graphics"), ("gfx1032", "AMD Radeon RX 6600"))
    report = diagnose(gpu_host(text, {"t": ("gfx1030",), "u": ("gfx1032",)}))
    assert report.env_for() == {"HIP_VISIBLE_DEVICES": "1"}
    assert report.env_for("u") == {"HIP_VISIBLE_DEVICES": "1"}
    assert report.env_for("t") == {"HIP_VISIBLE_DEVICES": "1", "HSA_OVERRIDE_GFX_VERSION": "10.3.0"}


@pytest.mark.parametrize("gfx", ["gfx1101", "gfx1102", "gfx1103"])
def test_rdna3_parts_get_11_0_0_when_only_gfx1100_is_covered(gfx):
    report = diagnose(gpu_host(rocminfo_text((gfx, "AMD Radeon RX 7800 XT")), {"llama31-qlora-w7900": ("gfx1100",)}))
    assert envs(report) == {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}
    report = diagnose(gpu_host(rocminfo_text((gfx, "x")), {"t": ("gfx1100", gfx)}))
    assert report.recommendations == []


@pytest.mark.parametrize("gfx", ["gfx1031", "gfx1032", "gfx1034", "gfx1035", "gfx1036"])
def test_rdna2_parts_get_10_3_0(gfx):
    report = diagnose(gpu_host(rocminfo_text((gfx, "x")), {"t": ("gfx1030",)}))
    assert envs(report) == {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}


def test_gpu_without_a_known_override_gets_none():
    report = diagnose(gpu_host(rocminfo_text(("gfx1012", "RX 5500 XT")), {"t": ("gfx1030", "gfx1100")}))
    assert report.recommendations == []
    assert status(report, "coverage") == FAIL


@pytest.mark.parametrize(
    "gpus, recommended, needles",
    [
        (
            (("gfx1100", "AMD Radeon RX 7900 XTX"), ("gfx1031", "AMD Radeon RX 6700 XT")),
            False,
            ["Not recommended", "gfx1100"],
        ),
        ((("gfx1101", "RX 7800 XT"), ("gfx1031", "RX 6700 XT")), False, ["different values"]),
        ((("gfx1030", "RX 6800 XT"), ("gfx1031", "RX 6700 XT")), True, []),
    ],
    ids=["would-rename-another-gpu", "different-values", "other-gpu-is-the-reference-part"],
)
def test_override_with_two_gpus(gpus, recommended, needles):
    report = diagnose(gpu_host(rocminfo_text(*gpus), {"t": ("gfx1100", "gfx1030")}))
    assert ("HSA_OVERRIDE_GFX_VERSION" in envs(report)) is recommended
    assert_check(report, "gfx-override", WARN, *needles)


# --------------------------------------------------------------------------- coverage per target


def test_coverage_per_built_target():
    built = {
        "hip-runtime": ("gfx90a", "gfx1100"),
        "llama31-qlora-w7900": ("gfx1100",),
        "llama7b-train": ("gfx906", "gfx90a"),
    }
    report = from_file("mi210.txt", built)
    assert status(report, "coverage:hip-runtime") == OK
    assert status(report, "coverage:llama7b-train") == OK
    assert_check(report, "coverage:llama31-qlora-w7900", WARN, "no code for gfx90a", "hipErrorNoBinaryForGpu")
    assert status(report, "coverage") == OK
    assert report.ok


def test_no_built_target_covering_the_gpu_fails():
    report = from_file("mi210.txt", {"llama31-qlora-w7900": ("gfx1100",)})
    assert status(report, "coverage:llama31-qlora-w7900") == WARN
    assert status(report, "coverage") == FAIL
    assert not report.ok


def test_partly_covered_multi_gpu_host_warns():
    text = rocminfo_text(("gfx90a", "MI210"), ("gfx1100", "W7900"))
    assert_check(diagnose(gpu_host(text, {"t": ("gfx90a",)})), "coverage", WARN, "gfx1100")


def test_generic_isa_listed_by_rocminfo_counts_as_coverage():
    # w7900-with-igpu-second lists amdgcn-amd-amdhsa--gfx11-generic for the W7900.
    report = from_file("w7900-with-igpu-second.txt", {"generic": ("gfx11-generic",)})
    assert status(report, "coverage:generic") == OK


def test_engine_unreachable_is_the_only_failure():
    facts = gpu_host(
        fixture("mi210.txt"),
        HIP_RUNTIME,
        engine_version=None,
        engine_error="Error while fetching server API version: connection refused",
    )
    report = diagnose(facts)
    assert [c.name for c in report.checks if c.status == FAIL] == ["engine"]
    assert report.exit_code == 1


def test_kfd_present_but_no_rocminfo_warns():
    facts = gpu_host(None, HIP_RUNTIME, rocminfo_source="not run: rocminfo is not on PATH and no built image")
    report = diagnose(facts)
    assert_check(report, "gpus", WARN, "not on PATH")
    assert status(report, "coverage") == SKIPPED
    assert status(report, "coverage:hip-runtime") == SKIPPED
    assert report.ok


# --------------------------------------------------------------------------- gather


class FakeImage:
    def __init__(self, target, archs, created, tags=("rocmforge/x:y",)):
        self.labels = {"io.rocmforge.target": target, "io.rocmforge.archs": archs}
        self.created = created
        self.tags = list(tags)


class FakeClient(Engine):
    """An engine as rocmforge sees it (host.enginebase.Engine), with no engine behind it: a
    version, a data root, images with labels; everything else raises."""

    def __init__(self, version="26.1.5", root="/nonexistent-docker-root", images=(), fail=None):
        super().__init__(None, EngineInfo("Docker Engine", version, "1.45", "overlay2", GRAPHDRIVER))
        self._version, self._root, self._fail = version, root, fail
        self._images = {f"sha256:{i:064x}": img for i, img in enumerate(images)}
        self.present: set[str] = set()

    def version(self):
        if self._fail:
            raise self._fail
        return {"Version": self._version}

    def system_info(self):
        return {"DockerRootDir": self._root}

    def list_images(self, *, label=None, dangling=None):
        name, _, value = (label or "").partition("=")
        return [
            {"Id": i, "RepoTags": img.tags or ["<none>:<none>"]}
            for i, img in self._images.items()
            if not name or img.labels.get(name) == (value or img.labels.get(name)) and name in img.labels
        ]

    def inspect(self, ref):
        if ref in self._images:
            img = self._images[ref]
            return {
                "Id": ref,
                "Created": img.created,
                "RepoTags": img.tags,
                "Config": {"Labels": img.labels, "Env": getattr(img, "env", [])},
            }
        if ref not in self.present:
            raise ImageMissing(ref)
        return {"Id": "sha256:" + "0" * 64}


def fake_tree(tmp_path: Path, *, kfd=True, render=True, module="sys") -> dict:
    dev, sys_, proc = tmp_path / "dev", tmp_path / "sys", tmp_path / "proc"
    (dev / "dri").mkdir(parents=True, exist_ok=True)
    (sys_ / "module" / "video").mkdir(parents=True, exist_ok=True)
    proc.mkdir(exist_ok=True)
    if kfd:
        (dev / "kfd").write_text("")
        os.chown(dev / "kfd", -1, 44)
    if render:
        (dev / "dri" / "renderD128").write_text("")
        os.chown(dev / "dri" / "renderD128", -1, 4242)
        (dev / "dri" / "card0").write_text("")  # not a render node
    if module == "sys":
        (sys_ / "module" / "amdgpu").mkdir(exist_ok=True)
    elif module == "proc":
        (proc / "modules").write_text("video 65536 1 amdgpu, Live 0x0\namdgpu 12345678 4 - Live 0x0\n")
    return dict(dev_root=str(dev), sys_root=str(sys_), proc_root=str(proc))


def gather_bare(tmp_path: Path, **kw) -> HostFacts:
    """gather on a fake host without GPU nodes, with no built targets and no host rocminfo."""
    tree = {} if "dev_root" in kw else fake_tree(tmp_path / "bare", kfd=False, render=False, module="none")
    return gather(
        **{
            "client": FakeClient(),
            "built_targets": {},
            "host_rocminfo": False,
            "docker_root": str(tmp_path),
            **tree,
            **kw,
        }
    )


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="os.chown to arbitrary groups needs root")


@needs_root
def test_gather_reads_a_fake_gpu_host(tmp_path):
    images = [
        FakeImage("hip-runtime", "gfx90a,gfx1100", "2024-01-02"),
        FakeImage("hip-runtime", "gfx90a", "2023-01-01"),
        FakeImage("hip-devel", "gfx90a,gfx1100", "2024-01-01", tags=()),
    ]  # dangling: ignored
    calls = []

    def runner():
        calls.append(1)
        return fixture("w7900-with-igpu-first.txt"), "rocminfo in rocmforge/hip-runtime:test"

    facts = gather(
        client=FakeClient(images=images),
        docker_root=str(tmp_path / "docker"),
        rocminfo_runner=runner,
        host_rocminfo=False,
        **fake_tree(tmp_path),
    )
    assert facts.engine_version == "26.1.5" and facts.engine_error is None
    assert facts.kfd.exists and facts.kfd.readable_writable and facts.kfd.gid == 44
    assert [n.path for n in facts.render_nodes] == [str(tmp_path / "dev" / "dri" / "renderD128")]
    assert facts.render_nodes[0].gid == 4242
    assert facts.amdgpu_module is True
    assert calls == [1]
    assert facts.rocminfo_source == "rocminfo in rocmforge/hip-runtime:test"
    assert facts.built_targets == {"hip-runtime": ("gfx90a", "gfx1100")}
    assert facts.disk_path == str(tmp_path / "docker")
    assert isinstance(facts.free_disk_bytes, int) and facts.free_disk_bytes > 0

    report = diagnose(facts)
    assert status(report, "kfd") == OK and status(report, "render-nodes") == OK
    assert "--group-add 44 --group-add 4242" in report.check("device-groups").detail
    assert envs(report) == {"HIP_VISIBLE_DEVICES": "1"}
    assert status(report, "coverage:hip-runtime") == OK


def test_gather_without_kfd_does_not_run_rocminfo(tmp_path):
    def runner():
        raise AssertionError("must not run without /dev/kfd")

    facts = gather_bare(tmp_path, rocminfo_runner=runner)
    assert not facts.kfd.exists and facts.render_nodes == ()
    assert facts.amdgpu_module is False  # /sys/module is readable and has no amdgpu
    assert facts.rocminfo_text is None and "no /dev/kfd" in facts.rocminfo_source
    report = diagnose(facts)
    assert "containers will run without a GPU" in report.check("kfd").detail
    assert not report.ok


def test_gather_amdgpu_from_proc_modules_or_unknown(tmp_path):
    tree = fake_tree(tmp_path, kfd=False, render=False, module="proc")
    assert gather_bare(tmp_path, **tree).amdgpu_module is True
    tree["sys_root"] = str(tmp_path / "no-sys")
    (tmp_path / "proc" / "modules").unlink()
    assert gather_bare(tmp_path, **tree).amdgpu_module is None


def test_gather_engine_unreachable(tmp_path):
    facts = gather_bare(tmp_path, client=FakeClient(fail=ConnectionError("connection refused")), built_targets=None)
    assert facts.engine_version is None and "connection refused" in facts.engine_error
    assert facts.built_targets == {}
    assert status(diagnose(facts), "engine") == FAIL


def test_gather_uses_the_engines_data_root_by_default(tmp_path):
    facts = gather_bare(tmp_path, client=FakeClient(root=str(tmp_path / "data-root")), docker_root=None)
    assert facts.disk_path == str(tmp_path / "data-root")
    assert facts.free_disk_bytes is not None  # measured on the filesystem that would hold it


@needs_root
def test_gather_rocminfo_runner_failure_is_a_fact(tmp_path):
    def runner():
        raise RuntimeError("image gone")

    facts = gather_bare(tmp_path, rocminfo_runner=runner, **fake_tree(tmp_path))
    assert facts.rocminfo_text is None and "image gone" in facts.rocminfo_source
    assert status(diagnose(facts), "gpus") == WARN


def test_gather_rocminfo_file(tmp_path):
    path = fixture_path("w7900-with-igpu-second.txt")
    facts = gather_bare(
        tmp_path,
        built_targets=dict(HIP_RUNTIME),
        rocminfo_file=str(path),
        host_rocminfo=True,
        rocminfo_runner=lambda: pytest.fail("must not run"),
    )
    assert facts.rocminfo_source == str(path)
    report = diagnose(facts, from_file=True)
    assert status(report, "kfd") == SKIPPED
    assert envs(report) == {"HIP_VISIBLE_DEVICES": "0"}
    assert report.ok
    with pytest.raises(UserError) as exc:
        gather_bare(tmp_path, rocminfo_file=str(tmp_path / "missing.txt"))
    assert "missing.txt" in str(exc.value)


def test_built_targets_from_plan():
    client = FakeClient()
    client.present = {"rocmforge/hip-runtime:content-aaa"}
    plan = SimpleNamespace(
        targets={
            "hip-runtime": SimpleNamespace(
                archs=("gfx90a", "gfx1100"), content_tag="rocmforge/hip-runtime:content-aaa"
            ),
            "hip-devel": SimpleNamespace(archs=("gfx90a", "gfx1100"), content_tag="rocmforge/hip-devel:content-bbb"),
        }
    )
    assert doctor.built_targets_from_plan(client, plan) == {"hip-runtime": ("gfx90a", "gfx1100")}


def test_a_saved_file_that_is_not_a_whole_rocminfo_output_is_refused_before_the_engine(tmp_path):
    cut = tmp_path / "cut.txt"
    cut.write_text("".join(fixture("w7900-with-igpu-first.txt").splitlines(keepends=True)[:90]))
    with pytest.raises(UserError, match="truncated rocminfo output") as exc:
        doctor.run(rocminfo_file=str(cut), client=SimpleNamespace())  # an engine call would raise AttributeError
    assert exc.value.file == str(cut) and exc.value.line == 90
    (tmp_path / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    with pytest.raises(UserError, match="not a rocminfo output"):
        gather_bare(tmp_path, rocminfo_file=str(tmp_path / "passwd"))
