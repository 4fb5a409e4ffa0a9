"""rocmforge.verify.readers.rocminfo: parsing rocminfo output and pastes of it.

Fixtures: tests/fixtures/rocminfo/captured/ holds real captures (debian-rocm5.7-no-gpu.txt:
Debian's rocminfo in a container on this GPU-less host); tests/fixtures/rocminfo/handwritten/ holds
outputs written by hand after rocminfo.cc's layout and values seen in public reports (see each
case's comment): no GPU-host output here is a capture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocmforge.verify.readers.rocminfo import (
    INTEGRATED_GFX,
    Agent,
    NotRocminfo,
    RocmInfo,
    decode,
    discrete_only_visible_devices,
    format_table,
    gfx_base,
    parse,
    read_saved,
    recognise,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rocminfo"
CAPTURED = {p.name for p in (FIXTURES / "captured").glob("*.txt")}
PASTED = {p.name for p in (FIXTURES / "pasted").glob("*.txt")}


def path(name: str) -> Path:
    return FIXTURES / ("captured" if name in CAPTURED else "pasted" if name in PASTED else "handwritten") / name


def load(name: str) -> str:
    # bytes -> str without newline translation, so CRLF fixtures keep their \r
    return path(name).read_bytes().decode("utf-8")


# One row per fixture. agents: (index, device_type, name, compute_units, is_apu, uuid).
def cpu_and_gpu(
    runtime: str | None,
    cpu: tuple[str, int],
    gpu: tuple[str, int, str | None],
    marketing: str,
    isas: tuple[str, ...],
    *,
    apu: bool = False,
    **more,
) -> dict:
    """The common host: Agent 1 a CPU (name, CUs), Agent 2 a GPU (gfx, CUs, uuid)."""
    gfx, cus, uuid = gpu
    return dict(
        driver_loaded=True,
        runtime=runtime,
        gpus=[gfx],
        visible=None,
        agents=[(1, "CPU", *cpu, False, "CPU-XX"), (2, "GPU", gfx, cus, apu, uuid)],
        isas={2: isas},
        marketing={2: marketing},
        **more,
    )


def no_gpu(driver_loaded: bool, *problems: str) -> dict:
    return dict(
        driver_loaded=driver_loaded, runtime=None, gpus=[], agents=[], visible=None, problems_contain=list(problems)
    )


def isa(*names: str) -> tuple[str, ...]:
    return tuple(f"amdgcn-amd-amdhsa--{n}" for n in names)


CASES = {
    # captured/: Debian's rocminfo in a container on a host without a GPU (exit code 1).
    "debian-rocm5.7-no-gpu.txt": no_gpu(False, "ROCk module is NOT loaded"),
    # handwritten/ from here on.
    # 1 CPU + MI210, ROCm 6.2 padded output, coloured driver line.
    "mi210.txt": cpu_and_gpu(
        "1.14",
        ("AMD EPYC 7313P 16-Core Processor", 32),
        ("gfx90a", 104, "GPU-880b91d040da15d8"),
        "AMD Instinct MI210",
        isa("gfx90a:sramecc+:xnack-"),
    ),
    # 2 CPUs + 4 MI300X, ROCm 6.4, with the gfx9-4-generic ISA.
    "mi300x-multi.txt": dict(
        driver_loaded=True,
        runtime="1.15",
        gpus=["gfx942"] * 4,
        visible=None,
        agents=[
            (1, "CPU", "Intel(R) Xeon(R) Platinum 8470", 104, False, "CPU-XX"),
            (2, "CPU", "Intel(R) Xeon(R) Platinum 8470", 104, False, "CPU-XX"),
            (3, "GPU", "gfx942", 304, False, "GPU-07386a321fa45d1e"),
            (4, "GPU", "gfx942", 304, False, "GPU-c14abb436c69353f"),
            (5, "GPU", "gfx942", 304, False, "GPU-9d0b2c3e41f7a6b2"),
            (6, "GPU", "gfx942", 304, False, "GPU-5b6e1c2a8f30d9e4"),
        ],
        isas={3: isa("gfx942:sramecc+:xnack-", "gfx9-4-generic:sramecc+:xnack-")},
        marketing={3: "AMD Instinct MI300X"},
    ),
    # Ryzen 9 7900X + W7900 + the 2-CU gfx1036 iGPU flagged "Memory Properties: APU" (ROCm 7.2,
    # trailing padding stripped as in a GitHub paste; iGPU Marketing Name is the CPU's).
    "w7900-with-igpu-second.txt": dict(
        driver_loaded=True,
        runtime="1.18",
        gpus=["gfx1100", "gfx1036"],
        visible="0",
        agents=[
            (1, "CPU", "AMD Ryzen 9 7900X 12-Core Processor", 24, False, "CPU-XX"),
            (2, "GPU", "gfx1100", 96, False, "GPU-5b6e1c2a3d4f7788"),
            (3, "GPU", "gfx1036", 2, True, "GPU-XX"),
        ],
        isas={2: isa("gfx1100", "gfx11-generic"), 3: isa("gfx1036", "gfx10-3-generic")},
        marketing={2: "AMD Radeon Pro W7900", 3: "AMD Ryzen 9 7900X 12-Core Processor"},
    ),
    # Same machine, iGPU enumerated first, older layout without Memory Properties: the gfx name
    # alone marks the iGPU.
    "w7900-with-igpu-first.txt": dict(
        driver_loaded=True,
        runtime="1.1",
        gpus=["gfx1036", "gfx1100"],
        visible="1",
        agents=[
            (1, "CPU", "AMD Ryzen 9 7900X 12-Core Processor", 24, False, "CPU-XX"),
            (2, "GPU", "gfx1036", 2, True, "GPU-XX"),
            (3, "GPU", "gfx1100", 96, False, "GPU-5b6e1c2a3d4f7788"),
        ],
        isas={2: isa("gfx1036"), 3: isa("gfx1100")},
        marketing={2: "AMD Radeon Graphics"},
    ),
    # MI300A: gfx942 is also the discrete MI300X, only "Memory Properties: APU" tells.
    "apu-memory-properties.txt": cpu_and_gpu(
        "1.15",
        ("AMD Instinct MI300A Accelerator", 48),
        ("gfx942", 228, "GPU-8a034d0fdebb161c"),
        "AMD Instinct MI300A",
        isa("gfx942:sramecc+:xnack-", "gfx9-4-generic:sramecc+:xnack-"),
        apu=True,
    ),
    # CRLF, prompt line first and last, ANSI, trailing spaces, ⏎ | … markers at line ends.
    "crlf-with-prompt.txt": cpu_and_gpu(
        "1.15",
        ("AMD Ryzen 7 7800X3D 8-Core Processor", 16),
        ("gfx1100", 96, "GPU-398a3f843a146602"),
        "Radeon RX 7900 XTX",
        isa("gfx1100"),
    ),
    # Every line dedented, single space after the colon.
    "no-padding.txt": cpu_and_gpu(
        "1.18",
        ("AMD Ryzen 9 5900X 12-Core Processor", 24),
        ("gfx1030", 72, "GPU-e4a1f3c95b2d7086"),
        "AMD Radeon RX 6800 XT",
        isa("gfx1030", "gfx10-3-generic"),
    ),
    # Paste from "Agent 2" to just before ISA Info: no driver line, no system attributes.
    "missing-isa-section.txt": dict(
        driver_loaded=True,
        runtime=None,
        gpus=["gfx1032"],
        visible=None,
        agents=[(2, "GPU", "gfx1032", 28, False, "GPU-XX")],
        isas={2: ()},
        marketing={2: "AMD Radeon PRO W6600"},
    ),
    # Strix Halo with an empty Marketing Name.
    "empty-marketing-name.txt": cpu_and_gpu(
        "1.15",
        ("AMD RYZEN AI MAX+ 395 w/ Radeon 8060S", 32),
        ("gfx1151", 40, "GPU-XX"),
        "",
        isa("gfx1151", "gfx11-generic"),
        apu=True,
    ),
    # WSL2: no driver line, GPU agent without Uuid.
    "wsl.txt": cpu_and_gpu(
        "1.15",
        ("AMD Ryzen 9 7950X 16-Core Processor", 32),
        ("gfx1100", 96, None),
        "AMD Radeon RX 7900 XTX",
        isa("gfx1100"),
        problems_contain=["WSL environment detected"],
    ),
    # WSL2 without a usable GPU (newer rocminfo's early check).
    "wsl-no-gpu.txt": no_gpu(False, "WSL environment detected", "hsa_init Failed", "No WDDM adapters"),
    # Driver loaded but /dev/kfd not accessible (user outside the render group).
    "kfd-permission-denied.txt": no_gpu(True, "Unable to open /dev/kfd", 'not member of "render" group'),
    # pasted/: whole outputs as bug reports deliver them (sources in tests/fixtures/README.md).
    # ROCm/aiter#179: one MI250X/MI250 GCD of many, the others elided as "...", in a "``` " fence.
    "mi250-aiter-179.txt": dict(
        driver_loaded=True,
        runtime="1.14",
        gpus=["gfx90a"],
        visible=None,
        agents=[(16, "GPU", "gfx90a", 104, False, "GPU-124d13ccd7b050e5")],
        isas={16: isa("gfx90a:sramecc+:xnack-")},
        marketing={16: "AMD Instinct MI250X/MI250"},
        stripped=["markdown fences (2 lines)"],
    ),
    # lamikr/rocm_sdk_builder#180: MI60 inside <details> and a fence, the command on its own line, CRLF.
    "mi60-rocm-sdk-builder-180.txt": dict(
        cpu_and_gpu(
            "1.1",
            ("AMD Ryzen 9 5950X 16-Core Processor", 32),
            ("gfx906", 64, "GPU-XX"),
            "AMD Radeon Graphics",
            isa("gfx906:sramecc+:xnack-"),
        ),
        stripped=["markdown fences (2 lines)", "shell prompt lines (1 line)", "CRLF line ends (194 lines)"],
    ),
    # ollama/ollama#3158: two RX 7900 XTX, a coloured bash prompt, the closing fence glued to "*** Done ***".
    "rx7900xtx-x2-ollama-3158.txt": dict(
        driver_loaded=True,
        runtime="1.14",
        gpus=["gfx1100", "gfx1100"],
        visible=None,
        agents=[
            (1, "CPU", "AMD Ryzen 9 7950X 16-Core Processor", 32, False, "CPU-XX"),
            (2, "GPU", "gfx1100", 96, False, "GPU-0aac02dbebd629ee"),
            (3, "GPU", "gfx1100", 96, False, "GPU-398a3f843a146602"),
        ],
        isas={2: isa("gfx1100"), 3: isa("gfx1100")},
        marketing={2: "Radeon RX 7900 XTX"},
        stripped=["stray backticks (1 line)", "shell prompt lines (1 line)", "ANSI colour codes (1 line)"],
    ),
}


def test_every_fixture_has_a_case():
    on_disk = [p.name for p in FIXTURES.glob("*/*.txt")]
    assert sorted(on_disk) == sorted(CASES), set(on_disk) ^ set(CASES)
    assert {p.parent.name for p in FIXTURES.glob("*/*.txt")} <= {"captured", "handwritten", "pasted"}
    assert not list(FIXTURES.glob("*.txt")), "every fixture says what it is: captured/, handwritten/ or pasted/"


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture(name):
    case = CASES[name]
    info = parse(load(name))
    assert isinstance(info, RocmInfo)
    assert info.driver_loaded is case["driver_loaded"]
    assert info.runtime_version == case["runtime"]
    assert info.gpus == case["gpus"]
    got = [(a.index, a.device_type, a.name, a.compute_units, a.is_apu, a.uuid) for a in info.agents]
    assert got == case["agents"]
    by_index = {a.index: a for a in info.agents}
    for idx, isas in case.get("isas", {}).items():
        assert by_index[idx].isas == isas
    for idx, mkt in case.get("marketing", {}).items():
        assert by_index[idx].marketing_name == mkt
    for a in info.agents:
        if a.device_type == "CPU":
            assert a.isas == () and not a.is_apu
    for needle in case.get("problems_contain", []):
        assert any(needle in p for p in info.problems), info.problems
    if not case.get("problems_contain"):
        assert info.problems == ()
    assert discrete_only_visible_devices(info) == case["visible"]
    if name in PASTED:
        assert list(info.stripped) == case["stripped"]


def test_captured_no_gpu():
    assert "debian-rocm5.7-no-gpu.txt" in CAPTURED
    raw = load("debian-rocm5.7-no-gpu.txt")
    assert "\x1b[31m" in raw  # the capture keeps rocminfo's red colour codes
    info = parse(raw)
    assert info.driver_loaded is False
    assert info.agents == () and info.gpus == []
    assert info.problems == ("ROCk module is NOT loaded, possibly no GPU devices",)


def test_crlf_fixture_really_is_a_messy_paste():
    raw = load("crlf-with-prompt.txt")
    assert "\r\n" in raw and raw.startswith("user@host:~$ rocminfo")
    assert "\x1b[37m" in raw and "⏎" in raw and "…" in raw and " |\r\n" in raw
    # same result as the clean text
    clean = "\n".join(line.rstrip(" ⏎…|") for line in raw.replace("\x1b[37m", "").replace("\x1b[0m", "").split("\r\n"))
    assert parse(clean) == parse(raw)


def test_isa_and_pool_names_do_not_overwrite_agent_name():
    info = parse(load("mi210.txt"))
    gpu = info.agents[1]
    assert gpu.name == "gfx90a"  # not amdgcn-amd-amdhsa--gfx90a:... nor a pool key
    assert info.agents[0].name == "AMD EPYC 7313P 16-Core Processor"


def test_generic_isa_kept():
    info = parse(load("w7900-with-igpu-second.txt"))
    assert "amdgcn-amd-amdhsa--gfx11-generic" in info.agents[1].isas
    assert "amdgcn-amd-amdhsa--gfx10-3-generic" in info.agents[2].isas


def test_padding_does_not_matter():
    padded = load("w7900-with-igpu-first.txt")
    squeezed = "\n".join(" ".join(line.split()).replace(": ", ":\t", 1) for line in padded.splitlines())
    tabbed = "\n".join("\t" + line.strip() for line in padded.splitlines())
    assert parse(squeezed) == parse(padded) == parse(tabbed)


def test_quoted_paste_with_prompt_variants():
    body = load("mi210.txt")
    quoted = "\n".join("> " + line for line in body.splitlines())
    for prompt in (
        "root@cdd69b58e233:/var/lib/jenkins# rocminfo",
        "❯ rocminfo",
        "$ /opt/rocm/bin/rocminfo --support",
        "PS C:\\> wsl rocminfo",
    ):
        assert parse(prompt + "\n" + body) == parse(body)
    assert parse(quoted) == parse(body)


def test_headerless_agents_rocminfo_gpu_option():
    # `rocminfo -g` prints agent blocks without the "*******/Agent N" headers.
    text = load("w7900-with-igpu-second.txt")
    lines = [ln for ln in text.splitlines() if ln.strip() not in ("*******", "Agent 1", "Agent 2", "Agent 3")]
    info = parse("\n".join(lines))
    assert info.gpus == ["gfx1100", "gfx1036"]
    assert [a.index for a in info.agents] == [1, 2, 3]
    assert info.agents[2].isas == ("amdgcn-amd-amdhsa--gfx1036", "amdgcn-amd-amdhsa--gfx10-3-generic")
    assert discrete_only_visible_devices(info) == "0"


def test_two_runs_in_one_paste_keep_the_last():
    info = parse(load("mi210.txt") + "\nuser@host:~$ rocminfo\n" + load("no-padding.txt"))
    assert info.gpus == ["gfx1030"]


def test_missing_device_type_is_inferred():
    text = "*******\nAgent 2\n*******\n  Name: gfx1103\n  Uuid: GPU-XX\n  Compute Unit: 12\n"
    (a,) = parse(text).agents
    assert (a.device_type, a.is_apu, a.compute_units, a.marketing_name) == ("GPU", True, 12, "")
    text = "Agent 1\n  Name: AMD Ryzen 7 8845HS w/ Radeon 780M Graphics\n  Uuid: CPU-XX\n"
    (a,) = parse(text).agents
    assert (a.device_type, a.is_apu) == ("CPU", False)


def test_empty_memory_properties_with_integrated_gfx_is_still_integrated():
    text = (
        "Agent 2\n  Name: gfx1035\n  Device Type: GPU\n  Memory Properties:\n"
        "Agent 3\n  Name: gfx1030\n  Device Type: GPU\n  Memory Properties:\n"
    )
    info = parse(text)
    assert [a.is_apu for a in info.agents] == [True, False]
    assert discrete_only_visible_devices(info) == "1"


def test_hsa_failure_is_a_problem():
    text = (
        "ROCk module is loaded\n\x1b[31mhsa api call failure at: "
        "/build/rocminfo/rocminfo.cc:1306\n\x1b[31mCall returned HSA_STATUS_ERROR_OUT_OF_RESOURCES: "
        "The runtime failed to allocate the necessary resources.\x1b[0m\n"
    )
    info = parse(text)
    assert info.driver_loaded is True and info.agents == ()
    assert len(info.problems) == 2 and info.problems[0].startswith("hsa api call failure")


def test_not_live_driver():
    info = parse("\x1b[31mROCk module is NOT live, possibly no GPU devices\x1b[0m\n")
    assert info.driver_loaded is False and "NOT live" in info.problems[0]


@pytest.mark.parametrize(
    "garbage",
    [
        "",
        "\n\n",
        "   ",
        "hello world",
        "Name:",
        ":::",
        "*******\nAgent\n*******",
        "Agent 7\n",
        "\x00\x01\x02 binary \xff",
        "ISA Info:\n  ISA 1\n    Name: amdgcn-amd-amdhsa--gfx90a\n",
        "Pool Info:\n Segment: GLOBAL\n",
        "Compute Unit: lots\nMemory Properties: APU\n",
        "\x1b[31m\x1b[0m",
        "é" * 5000,
        "Name: " + "x" * 100000,
        "\r\r\r",
        "*** Done ***",
        "<html><body>404 Not Found</body></html>",
    ],
)
def test_garbage_never_raises(garbage):
    info = parse(garbage)
    assert info.driver_loaded is False
    assert info.gpus == []
    assert all(a.device_type != "GPU" for a in info.agents)
    json.dumps(info.to_json())
    format_table(info)


def test_garbage_does_not_invent_agents():
    for text in (
        "",
        "hello world",
        ":::",
        "Agent 7\n",
        "*** Done ***",
        "ISA Info:\n  ISA 1\n    Name: amdgcn-amd-amdhsa--gfx90a\n",
    ):
        assert parse(text).agents == ()


def test_non_str_input():
    assert parse(None).agents == ()  # type: ignore[arg-type]
    assert parse(path("mi210.txt").read_bytes()) == parse(load("mi210.txt"))  # type: ignore[arg-type]


def test_to_json_shape():
    info = parse(load("wsl.txt"))
    data = info.to_json()
    assert set(data) == {"driver_loaded", "runtime_version", "agents", "gpus", "problems", "stripped"}
    assert data["gpus"] == ["gfx1100"]
    assert data["agents"][1] == {
        "index": 2,
        "name": "gfx1100",
        "marketing_name": "AMD Radeon RX 7900 XTX",
        "device_type": "GPU",
        "compute_units": 96,
        "is_apu": False,
        "isas": ["amdgcn-amd-amdhsa--gfx1100"],
        "uuid": None,
    }
    assert json.loads(json.dumps(data)) == data


def test_format_table():
    out = format_table(parse(load("w7900-with-igpu-second.txt")))
    lines = out.splitlines()
    assert lines[0].startswith("driver: loaded")
    assert sum("gfx" in ln for ln in lines[2:5]) == 2
    assert any("gfx1036" in ln and "integrated" in ln for ln in lines)
    assert any("gfx1100" in ln and "discrete" in ln and "AMD Radeon Pro W7900" in ln for ln in lines)
    assert lines[-1] == "hint: HIP_VISIBLE_DEVICES=0 keeps only the discrete GPU(s)"
    empty = format_table(parse(load("debian-rocm5.7-no-gpu.txt")))
    assert "NOT loaded" in empty and "no agents" in empty and "problem: ROCk module" in empty


def test_discrete_only_visible_devices_multi():
    def gpu(name, apu):
        return Agent(
            index=0, name=name, marketing_name="", device_type="GPU", compute_units=None, is_apu=apu, isas=(), uuid=None
        )

    cpu = Agent(
        index=0, name="cpu", marketing_name="", device_type="CPU", compute_units=None, is_apu=False, isas=(), uuid=None
    )

    def mk(*ags):
        return RocmInfo(driver_loaded=True, runtime_version=None, agents=ags, problems=())

    assert (
        discrete_only_visible_devices(mk(cpu, gpu("gfx1036", True), gpu("gfx1100", False), cpu, gpu("gfx1100", False)))
        == "1,2"
    )
    assert discrete_only_visible_devices(mk(cpu, gpu("gfx1151", True))) is None
    assert discrete_only_visible_devices(mk(cpu)) is None
    assert discrete_only_visible_devices(mk()) is None


def test_integrated_gfx_set():
    for g in ("gfx1036", "gfx1035", "gfx1103", "gfx90c", "gfx1150", "gfx1151", "gfx1152", "gfx902"):
        assert g in INTEGRATED_GFX
    # names shared with (or only used by) discrete parts never appear
    for g in ("gfx900", "gfx906", "gfx90a", "gfx940", "gfx942", "gfx1030", "gfx1100", "gfx1201"):
        assert g not in INTEGRATED_GFX
    assert gfx_base("amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-") == "gfx90a"
    assert gfx_base("gfx1036") == "gfx1036"


def test_pathological_lines_are_fast():
    import time

    junk = "\n".join(
        ["Name" + " " * 100_000 + "x", "$x" * 50_000, "/" * 100_000 + " rocminfo", ("Name: " + "a " * 50_000)] * 20
    )
    start = time.monotonic()
    parse(junk)
    assert time.monotonic() - start < 5


# ---------------------------------------------------------------------------------------------
# Saved outputs handed to `rocminfo FILE` / `doctor --rocminfo FILE` (the bad ones are the corpus
# in tests/unit/bad_inputs/rocminfo/, run through the CLI by test_bad_input_files.py)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_fixture_is_a_whole_rocminfo_output(name):
    text = read_saved(str(path(name)))
    assert recognise(text) == parse(text) == parse(load(name))


def test_utf16_saved_by_powershell_reads_like_utf8():
    text = load("wsl.txt")
    assert decode(text.encode("utf-16")) == text
    assert recognise(decode(text.encode("utf-16"))) == parse(text)


def test_a_few_stray_bytes_are_still_a_paste():
    raw = path("mi210.txt").read_bytes().replace(b"AMD EPYC", b"AMD\xae EPYC")  # a Latin-1 (R)
    assert recognise(decode(raw)).gpus == ["gfx90a"]


@pytest.mark.parametrize(
    "text",
    [
        "hello world",
        ":::",
        "Agent 7\n",
        "*** Done ***",
        "<html></html>",
        "Compute Unit: lots\nMemory Properties: APU\n",
    ],
)
def test_text_that_is_not_rocminfo_is_refused(text):
    with pytest.raises(NotRocminfo, match="not a rocminfo output"):
        recognise(text)


def test_a_failing_run_is_whole_without_done():
    text = (
        "ROCk module is loaded\n=====================\nHSA System Attributes\n=====================\n"
        "hsa api call failure at: /build/rocminfo/rocminfo.cc:1306\n"
    )
    assert recognise(text).problems[0].startswith("hsa api call failure")


def test_cut_inside_an_agent_names_the_line_and_the_agent():
    cut = "".join(load("mi300x-multi.txt").splitlines(keepends=True)[:400])
    with pytest.raises(NotRocminfo) as exc:
        recognise(cut)
    assert exc.value.line == 400 and "inside Agent" in exc.value.message


def test_an_endless_file_is_refused_not_read_forever():
    from rocmforge.shared.errors import UserError

    with pytest.raises(UserError, match="larger than 16 MiB"):
        read_saved("/dev/zero")


# ---------------------------------------------------------------------------------------------
# Paste residue: a whole output copied from a thread is read whole, what was removed is said

BODY = "mi210.txt"


def _residue_variants() -> dict[str, tuple[str, str]]:
    body = load(BODY)
    done_at_end = body.rstrip("\n")
    return {
        "fenced": ("```\n" + body + "```\n", "markdown fences (2 lines)"),
        "fenced-with-info-string": ("```console\n" + body + "```\n\nthanks", "markdown fences (2 lines)"),
        "tilde-fence": ("~~~\n" + body + "~~~\n", "markdown fences (2 lines)"),
        "backtick-after-done": (done_at_end + "`\n", "stray backticks (1 line)"),
        "fence-glued-to-done": (done_at_end + " ```\n", "stray backticks (1 line)"),
        "prompt-with-pipe": (
            "user@host:~$ rocminfo | tee out.txt\n" + body + "user@host:~$ \n",
            "shell prompt lines (1 line)",
        ),
        "crlf": (body.replace("\n", "\r\n"), "CRLF line ends (185 lines)"),
        "ansi-everywhere": (
            "".join(f"\x1b[32m{line}\x1b[0m\n" for line in body.splitlines()),
            "ANSI colour codes (184 lines)",
        ),
    }


@pytest.mark.parametrize("variant", sorted(_residue_variants()))
def test_a_whole_paste_with_residue_reads_like_the_clean_output(variant):
    text, said = _residue_variants()[variant]
    info = recognise(text)  # not refused as truncated
    assert info == parse(load(BODY)) and info.gpus == ["gfx90a"]
    assert said in info.stripped and info.to_json()["stripped"] == list(info.stripped)


def test_rocminfos_own_colour_on_its_driver_line_is_not_residue():
    assert parse(load(BODY)).stripped == ()
    assert parse(load("debian-rocm5.7-no-gpu.txt")).stripped == ()


@pytest.mark.parametrize("wrap", ["```\n{}```\n", "$ rocminfo\r\n{}", "{}`"], ids=["fenced", "crlf-prompt", "tick"])
def test_a_cut_paste_is_still_refused_naming_its_last_line(wrap):
    cut = "".join(load("mi300x-multi.txt").splitlines(keepends=True)[:400])
    text = wrap.format(cut)
    if "\r\n" in wrap:
        text = text.replace("\n", "\r\n").replace("\r\r", "\r")
    with pytest.raises(NotRocminfo) as exc:
        recognise(text)
    shift = 1 if wrap.startswith(("```", "$")) else 0
    assert exc.value.line == 400 + shift and "inside Agent" in exc.value.message


def test_cli_json_says_what_was_stripped(tmp_path):
    import subprocess
    import sys

    f = tmp_path / "paste.txt"
    f.write_text(_residue_variants()["fenced"][0])
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, str(root / "build.py"), "rocminfo", str(f), "--json"], capture_output=True, text=True, cwd=root
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["stripped"] == ["markdown fences (2 lines)"]


def test_doctor_json_says_what_was_stripped_from_a_saved_paste():
    from rocmforge.doctor.checks import diagnose
    from rocmforge.doctor.facts import HostFacts

    text = load("rx7900xtx-x2-ollama-3158.txt")
    report = diagnose(HostFacts(rocminfo_text=text, rocminfo_source="paste.txt"), from_file=True).to_json()
    gpus = next(c for c in report["checks"] if c["name"] == "gpus")
    assert gpus["status"] == "ok" and "2 GPU(s)" in gpus["detail"]
    assert (
        "stripped: stray backticks (1 line), shell prompt lines (1 line), ANSI colour codes (1 line)" in gpus["detail"]
    )
