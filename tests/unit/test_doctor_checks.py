"""The doctor's checks one by one (rocmforge.doctor.host_checks, gpu_checks), the coverage rules
they share (rocmforge.doctor.gfx), and the table that runs them (rocmforge.doctor.checks). Each
check is called with a Diagnosis of constructed HostFacts; test_doctor.py covers whole reports."""

from __future__ import annotations

import pytest

from rocmforge.doctor import checks, gfx, gpu_checks, host_checks
from rocmforge.doctor.diagnosis import Diagnosis
from rocmforge.doctor.facts import HostFacts, NodeFacts
from rocmforge.doctor.findings import FAIL, OK, SKIPPED, WARN, Recommendation, Report, Verdict
from rocmforge.verify.readers import archs
from tests.unit.doctor_hosts import GB, HIP_RUNTIME, fixture, gpu_host, rocminfo_text

KFD = NodeFacts("/dev/kfd", True, True, 44, "video")
RENDER = NodeFacts("/dev/dri/renderD128", True, True, 993, "render")
NO_KFD = NodeFacts("/dev/kfd", False)
IGPU = ("gfx1036", "AMD Radeon Graphics")


def on(facts: HostFacts, *, from_file: bool = False) -> Diagnosis:
    return Diagnosis.of(facts, from_file=from_file)


def host(**kw) -> Diagnosis:
    """A healthy GPU host without rocminfo output, changed by kw."""
    return on(gpu_host(None, **kw))


def gpus(*gpu_list: tuple[str, str], built: dict | None = None, **kw) -> Diagnosis:
    """A healthy host whose rocminfo lists these (gfx, marketing name) GPUs."""
    return on(gpu_host(rocminfo_text(*gpu_list), built, **kw))


def verdict_is(v: Verdict, status: str, *needles: str) -> None:
    assert v.status == status, v
    for needle in needles:
        assert needle in v.detail, (needle, v.detail)


# --------------------------------------------------------------------------- the table


def test_the_table_names_each_check_once_in_report_order():
    names = [name for name, _ in checks.CHECKS]
    assert names == [
        "engine",
        "wsl",
        "kfd",
        "render-nodes",
        "device-groups",
        "rootless",
        "cdi",
        "amdgpu-module",
        "driver",
        "gpus",
        "integrated-gpus",
        "gfx-override",
        "coverage:{target}",
        "coverage",
        "shm",
        "disk",
    ]
    assert len({fn for _, fn in checks.CHECKS}) == len(names)


def test_diagnose_runs_the_table_with_per_target_checks_sorted():
    report = checks.diagnose(gpu_host(fixture("mi210.txt"), {"zeta": ("gfx90a",), "alpha": ("gfx1100",)}))
    assert [c.name for c in report.checks] == [
        "engine",
        "wsl",
        "kfd",
        "render-nodes",
        "device-groups",
        "rootless",
        "cdi",
        "amdgpu-module",
        "driver",
        "gpus",
        "integrated-gpus",
        "gfx-override",
        "coverage:alpha",
        "coverage:zeta",
        "coverage",
        "shm",
        "disk",
    ]


def test_report_add_keeps_the_recommendation_of_a_verdict():
    report = Report()
    rec = Recommendation({"A": "1"}, "why", ("t",))
    report.add("x", Verdict(WARN, "detail", rec))
    report.add("y", Verdict(OK, "fine"))
    assert [(c.name, c.status) for c in report.checks] == [("x", WARN), ("y", OK)]
    assert report.recommendations == [rec]
    assert report.env_for("t") == {"A": "1"} and report.env_for() == {}


# --------------------------------------------------------------------------- what the checks read


def test_diagnosis_hides_integrated_gpus_beside_discrete_ones():
    d = gpus(IGPU, ("gfx1100", "W7900"), built={"T": ("GFX1100",)})
    assert [g.gfx for g in d.gpus] == ["gfx1036", "gfx1100"]
    assert d.discrete_only == "1"
    assert [g.hip_index for g in d.visible] == [1] and [g.hip_index for g in d.hidden] == [0]
    assert d.built == {"T": ("gfx1100",)}
    assert d.gpus[0].describe() == "gfx1036 'AMD Radeon Graphics' (HIP device 0, integrated)"


def test_diagnosis_without_rocminfo_has_no_gpus():
    d = host(kfd=None)
    assert d.info is None and d.gpus == () and d.visible == () and d.discrete_only is None
    assert d.kfd == NodeFacts("/dev/kfd", False)


# --------------------------------------------------------------------------- host checks


def test_engine():
    verdict_is(host_checks.engine(host()), OK, "Docker Engine 26.1.5 reachable")
    verdict_is(
        host_checks.engine(host(engine_version=None, engine_error="connection refused")),
        FAIL,
        "(connection refused)",
        "DOCKER_HOST",
    )
    assert "()" not in host_checks.engine(host(engine_version=None)).detail


@pytest.mark.parametrize(
    "check", [host_checks.kfd, host_checks.render_nodes, host_checks.device_groups, host_checks.amdgpu_module]
)
def test_host_checks_do_not_apply_to_a_saved_output(check):
    d = on(gpu_host(fixture("mi210.txt"), rocminfo_source="saved.txt"), from_file=True)
    verdict_is(check(d), SKIPPED, "not applicable", "saved.txt")


@pytest.mark.parametrize(
    "node, status, needles",
    [
        (None, FAIL, ["no AMD GPU device nodes: containers will run without a GPU"]),
        (NO_KFD, FAIL, ["/dev/kfd is missing"]),
        (KFD, OK, ["owned by group video (GID 44)"]),
        (NodeFacts("/dev/kfd", True, True), OK, ["an unknown group"]),
        (NodeFacts("/dev/kfd", True, False, 44, None), WARN, ["add the user to GID 44", "--group-add"]),
        (NodeFacts("/dev/kfd", True, False), WARN, ["add the user to its group"]),
    ],
)
def test_kfd(node, status, needles):
    verdict_is(host_checks.kfd(host(kfd=node)), status, *needles)


@pytest.mark.parametrize(
    "kfd, renders, status, needles",
    [
        (KFD, (), FAIL, ["HIP cannot open the GPU"]),
        (KFD, (NodeFacts("/dev/dri/renderD128", False),), FAIL, ["no /dev/dri/renderD* node"]),
        (NO_KFD, (), SKIPPED, ["see kfd"]),
        (NO_KFD, (RENDER,), WARN, ["another vendor's GPU"]),
        (
            KFD,
            (RENDER, NodeFacts("/dev/dri/renderD129", True, False, 993)),
            WARN,
            ["not read/write for this user: /dev/dri/renderD129", "(GID 993)"],
        ),
        (KFD, (RENDER,), OK, ["/dev/dri/renderD128 (group render (GID 993)), read/write"]),
    ],
)
def test_render_nodes(kfd, renders, status, needles):
    verdict_is(host_checks.render_nodes(host(kfd=kfd, render_nodes=renders)), status, *needles)


@pytest.mark.parametrize(
    "kfd, renders, status, needles",
    [
        (NO_KFD, (), SKIPPED, ["no groups to add"]),
        (
            KFD,
            (RENDER,),
            OK,
            [
                "owning GIDs 44 (video), 993 (render)",
                "--device /dev/kfd --device /dev/dri/renderD128 --group-add 44 --group-add 993",
            ],
        ),
        (
            NodeFacts("/dev/kfd", True, True, 0, "root"),
            (NodeFacts("/dev/dri/renderD128", True, True, 0, "root"),),
            OK,
            ["needs no --group-add"],
        ),
        (
            NO_KFD,
            (NodeFacts("/dev/dri/renderD128", True, True, 993, None),),
            OK,
            ["owning GIDs 993:", "--group-add 993"],
        ),
    ],
)
def test_device_groups(kfd, renders, status, needles):
    verdict_is(host_checks.device_groups(host(kfd=kfd, render_nodes=renders)), status, *needles)


@pytest.mark.parametrize(
    "module, kfd, status",
    [
        (True, KFD, OK),
        (True, NO_KFD, OK),
        (False, KFD, WARN),
        (None, KFD, WARN),
        (None, NO_KFD, WARN),
        (False, NO_KFD, FAIL),
    ],
)
def test_amdgpu_module(module, kfd, status):
    assert host_checks.amdgpu_module(host(amdgpu_module=module, kfd=kfd)).status == status


@pytest.mark.parametrize(
    "free, status, needles",
    [
        (None, WARN, ["could not measure the free space under /d"]),
        (20 * GB, WARN, ["only 20.0 GB free under /d", "keep at least 60.0 GB free"]),
        (host_checks.LOW_DISK_BYTES, OK, ["60.0 GB free under /d"]),
        (500 * GB, OK, ["500.0 GB free"]),
    ],
)
def test_disk(free, status, needles):
    verdict_is(host_checks.disk(host(free_disk_bytes=free, disk_path="/d")), status, *needles)


# --------------------------------------------------------------------------- GPU checks


@pytest.mark.parametrize(
    "d, status, needles",
    [
        (host(rocminfo_source="not run: rocminfo is not on PATH"), WARN, ["could not list the GPUs: not run"]),
        (on(HostFacts(rocminfo_source="x.txt"), from_file=True), WARN, ["could not list the GPUs: x.txt"]),
        (host(kfd=NO_KFD, rocminfo_source="not run: no /dev/kfd"), SKIPPED, ["no /dev/kfd, so no GPU to enumerate"]),
        (
            on(gpu_host(fixture("kfd-permission-denied.txt"))),
            FAIL,
            ["lists no GPU agent: Unable to open /dev/kfd", "--group-add its GID"],
        ),
        (on(gpu_host(fixture("debian-rocm5.7-no-gpu.txt"))), FAIL, ["ROCk module is NOT loaded"]),
        (
            gpus(("gfx90a", "MI210"), ("gfx1100", "W7900")),
            OK,
            ["2 GPU(s) from host rocminfo", "gfx90a 'MI210' (HIP device 0, discrete); gfx1100"],
        ),
    ],
    ids=["no-output", "no-output-saved", "no-kfd", "kfd-denied", "driver-not-loaded", "two-gpus"],
)
def test_gpus(d, status, needles):
    verdict_is(gpu_checks.gpus(d), status, *needles)


def test_gpus_without_agents_and_without_problems():
    d = on(gpu_host("ROCk module is loaded\nHSA Agents\n*** Done ***"))
    verdict_is(gpu_checks.gpus(d), FAIL, "no problem reported")
    assert "--group-add" not in gpu_checks.gpus(d).detail


def test_integrated_gpus():
    assert gpu_checks.integrated_gpus(host()) == gpu_checks.NO_GPU
    verdict_is(gpu_checks.integrated_gpus(gpus(("gfx1100", "W7900"))), OK, "no integrated GPU")
    verdict_is(gpu_checks.integrated_gpus(gpus(IGPU)), OK, "only integrated GPU(s): nothing to hide")
    mixed = gpu_checks.integrated_gpus(gpus(("gfx1100", "W7900"), IGPU, ("gfx1100", "W7900")))
    verdict_is(
        mixed,
        WARN,
        "integrated GPU gfx1036",
        "HIP device 1, integrated",
        gpu_checks.SEED_ERROR,
        "HIP_VISIBLE_DEVICES=0,2",
    )
    assert mixed.recommendation == Recommendation({"HIP_VISIBLE_DEVICES": "0,2"}, mixed.detail)


def test_gfx_override_without_gpus_or_targets():
    assert gpu_checks.gfx_override(host(built_targets=HIP_RUNTIME)) == gpu_checks.NO_GPU
    verdict_is(
        gpu_checks.gfx_override(gpus(("gfx1031", "x"), ("gfx1101", "y"))),
        SKIPPED,
        "no built target to compare with",
        "gfx1031 usually runs gfx1030 code with HSA_OVERRIDE_GFX_VERSION="
        "10.3.0; gfx1101 usually runs gfx1100 code with HSA_OVERRIDE_GFX_VERSION=11.0.0",
    )
    assert gpu_checks.gfx_override(gpus(("gfx90a", "x"))).detail == "no built target to compare with"


def test_gfx_override_recommended_for_the_targets_that_need_it():
    d = gpus(("gfx1032", "RX 6600"), built={"b": ("gfx1030",), "a": ("gfx1030",), "n": ("gfx1032",)})
    (need,) = gpu_checks.override_needs(d)
    assert (need.gpu.gfx, need.pose, need.needed_by, need.native_in) == ("gfx1032", "gfx1030", ("b", "a"), ("n",))
    v = gpu_checks.gfx_override(d)
    verdict_is(
        v,
        WARN,
        "target(s) b, a, whose gfx1030 code runs on it",
        "target(s) n cover it without",
        "Set HSA_OVERRIDE_GFX_VERSION=10.3.0",
    )
    assert v.recommendation == Recommendation({"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}, v.detail, ("a", "b"))


@pytest.mark.parametrize(
    "gpu_list, needles",
    [
        (
            (("gfx1100", "XTX"), ("gfx1031", "XT")),
            ["it would also make gfx1100 'XTX' (HIP device 0, discrete) pose as gfx1030"],
        ),
        ((("gfx1101", "a"), ("gfx1031", "b")), ["different GPUs would need different values"]),
    ],
)
def test_gfx_override_not_recommended(gpu_list, needles):
    v = gpu_checks.gfx_override(gpus(*gpu_list, built={"t": ("gfx1100", "gfx1030")}))
    verdict_is(v, WARN, "Not recommended", *needles)
    assert v.recommendation is None


def test_gfx_override_not_needed():
    verdict_is(
        gpu_checks.gfx_override(gpus(("gfx1031", "x"), built={"t": ("gfx10-3-generic",)})),
        OK,
        "no visible GPU needs HSA_OVERRIDE_GFX_VERSION",
    )


def test_target_coverage():
    d = gpus(
        ("gfx90a", "MI210"),
        ("gfx1101", "RX 7800 XT"),
        ("gfx1012", "RX 5500"),
        built={"t": ("gfx90a", "gfx1100"), "e": ()},
    )
    verdict_is(
        gpu_checks.target_coverage(d, "t"),
        WARN,
        "archs gfx90a, gfx1100: covers gfx90a 'MI210'",
        "gfx1101 'RX 7800 XT' (HIP device 1, discrete) only with HSA_OVERRIDE_GFX_VERSION=11.0.0",
        "no code for gfx1012 'RX 5500' (HIP device 2, discrete) (HIP stops with hipErrorNoBinaryForGpu)",
    )
    verdict_is(gpu_checks.target_coverage(d, "e"), WARN, "archs none: no code for")
    verdict_is(gpu_checks.target_coverage(gpus(("gfx90a", "MI210"), built={"t": ("gfx90a",)}), "t"), OK)
    assert gpu_checks.target_coverage(host(built_targets={"t": ("gfx90a",)}), "t") == gpu_checks.NO_GPU


def test_target_coverage_names_the_hidden_gpus():
    d = gpus(IGPU, ("gfx1100", "W7900"), built={"t": ("gfx1100",)})
    verdict_is(
        gpu_checks.target_coverage(d, "t"),
        OK,
        "(left out: gfx1036 'AMD Radeon Graphics' (HIP device 0, integrated), hidden by HIP_VISIBLE_DEVICES)",
    )


@pytest.mark.parametrize(
    "d, status, needles",
    [
        (gpus(("gfx90a", "x")), SKIPPED, ["no built target"]),
        (host(built_targets=HIP_RUNTIME), SKIPPED, ["no GPU listed"]),
        (
            gpus(("gfx1012", "x"), ("gfx906", "y"), built={"t": ("gfx1100",), "u": ("gfx90a",)}),
            FAIL,
            [
                "no built target has code for gfx1012 'x' (HIP device 0, discrete), gfx906",
                "built archs: gfx1100, gfx90a",
            ],
        ),
        (gpus(("gfx1012", "x"), ("gfx90a", "y"), built=HIP_RUNTIME), WARN, ["no built target has code for gfx1012"]),
        (
            gpus(("gfx1101", "x"), ("gfx90a", "y"), built=HIP_RUNTIME),
            WARN,
            ["gfx1101 'x' (HIP device 0, discrete) only with HSA_OVERRIDE_GFX_VERSION"],
        ),
        (gpus(("gfx1101", "x"), built={"t": ("gfx1100",), "u": ("gfx1101",)}), OK, ["every visible GPU is covered"]),
    ],
    ids=["no-target", "no-gpu", "none-covered", "one-uncovered", "one-overridden", "covered"],
)
def test_overall_coverage(d, status, needles):
    verdict_is(gpu_checks.overall_coverage(d), status, *needles)


# --------------------------------------------------------------------------- coverage rules


def test_hsa_override_version():
    assert gfx.hsa_override_version("gfx1030") == "10.3.0"
    assert gfx.hsa_override_version("gfx1100") == "11.0.0"
    assert gfx.hsa_override_version("gfx90a") == "9.0.10"
    assert gfx.hsa_override_version("gfx1151") == "11.5.1"
    assert {gfx.hsa_override_version(t) for t in gfx.GFX_OVERRIDES.values()} == {"10.3.0", "11.0.0"}
    with pytest.raises(ValueError):
        gfx.hsa_override_version("gfx10-3-generic")


def test_the_generic_targets_are_the_probes_table():
    assert gfx.GENERIC_TARGETS is archs.GENERIC_TARGETS
    # gfx11-7-generic is only in the probe's table: the doctor sees it too.
    assert gfx.runs_natively("gfx1171", (), ("gfx11-7-generic",))


@pytest.mark.parametrize(
    "gpu, isas, archs_, expected",
    [
        ("gfx90a", (), ("GFX90A",), (gfx.NATIVE, None)),
        ("gfx1031", (), ("gfx10-3-generic",), (gfx.NATIVE, None)),
        ("gfx1100", ("amdgcn-amd-amdhsa--gfx11-generic",), ("gfx11-generic",), (gfx.NATIVE, None)),
        ("gfx1031", (), ("gfx1030",), (gfx.OVERRIDE, "gfx1030")),
        ("gfx1103", (), ("gfx11-generic",), (gfx.NATIVE, None)),
        ("gfx1103", (), ("gfx1100",), (gfx.OVERRIDE, "gfx1100")),
        ("gfx1012", (), ("gfx1030", "gfx1100"), (gfx.UNCOVERED, None)),
        ("gfx1031", (), (), (gfx.UNCOVERED, None)),
    ],
)
def test_coverage(gpu, isas, archs_, expected):
    assert gfx.coverage(gpu, isas, archs_) == expected
