"""Parse the text that ROCm's ``rocminfo`` prints, including pastes copied from bug reports.

Only the standard library is used, and :func:`parse` does no I/O: callers read the text.
:func:`parse` accepts anything; :func:`read_saved` is for a saved output a user hands us: it
refuses what is not a rocminfo output (binary data, another file, an empty file) and an output
cut off before rocminfo finished, because diagnosing those would describe a host that is not
there.

How ``rocminfo`` (ROCm/rocminfo, ``rocminfo.cc``) lays out its output, which is what this parser
follows:

* a first line about the kernel driver, coloured with ANSI codes even when redirected to a file:
  ``ROCk module is loaded``, ``ROCk module version 6.8.5 is loaded``, or (red, exit code 1)
  ``ROCk module is NOT loaded, possibly no GPU devices`` / ``ROCk module is NOT live, ...``;
  after it possibly ``Unable to open /dev/kfd read-write: ...`` and a group-membership hint;
* on WSL the driver check is skipped and ``WSL environment detected.`` comes first instead; GPU
  agents then have no ``Uuid:``, ``ASIC Revision:``, ``BDFID:`` or ``WatchPts`` lines, and a
  WSL host without a usable GPU gives ``hsa_init Failed, possibly no supported GPU devices``;
* an ``HSA System Attributes`` banner (``Runtime Version:`` ...), an ``HSA Agents`` banner, then
  one block per agent headed by ``*******`` / ``Agent N`` / ``*******``;
* agent keys at indent 2, labels padded to 25 columns and values to 35; ``Cache Info:``,
  ``Pool Info:`` (``Pool N``) and ``ISA Info:`` (``ISA N``) sub-sections, the latter two with
  their own keys: ISA entries have their own ``Name:``;
* ``Memory Properties:`` followed by ``APU`` for integrated GPUs (newer releases only);
* ``*** Done ***`` at the end.

Pastes lose or change much of that (padding, indentation, line endings, colour codes), so the
parser relies on content (labels and the order of sections), not on columns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "INTEGRATED_GFX",
    "Agent",
    "NotRocminfo",
    "RocmInfo",
    "decode",
    "discrete_only_visible_devices",
    "format_table",
    "gfx_base",
    "parse",
    "read_saved",
    "recognise",
]

# GPU processors that only exist as integrated GPUs (APUs). A gfx name that is also used by a
# discrete part (gfx900 Vega 10, gfx940/gfx942 which MI300A shares with MI300X, ...) is left out:
# such an APU is recognised only from its ``Memory Properties: APU`` line.
# Source: LLVM's AMDGPUUsage processor table ("dGPU/APU" column) unless noted.
INTEGRATED_GFX: frozenset[str] = frozenset({
    "gfx700",   # Kaveri (A6-7000 ... FX-7600P)
    "gfx703",   # Kabini / Mullins
    "gfx705",   # APU, product names "TBA" in LLVM
    "gfx801",   # Carrizo
    "gfx810",   # Stoney
    "gfx902",   # Raven Ridge (Ryzen 3 2200G, Ryzen 5 2400G)
    "gfx909",   # Raven2 APU
    "gfx90c",   # Renoir / Cezanne / Lucienne (Ryzen 4000G, 5000G/U)
    "gfx1013",  # Cyan Skillfish APU (RDNA 1)
    "gfx1033",  # Van Gogh (Steam Deck)
    "gfx1035",  # Rembrandt (Radeon 660M/680M)
    "gfx1036",  # Raphael / Granite Ridge (Ryzen 7000/9000 desktop, 2 CUs)
    "gfx1037",  # Mendocino (Radeon 610M); not in LLVM's table, reported by rocminfo users
    "gfx1103",  # Phoenix / Hawk Point (Radeon 780M/760M/740M)
    "gfx1150",  # Strix Point (Radeon 890M)
    "gfx1151",  # Strix Halo (Radeon 8060S)
    "gfx1152",  # Krackan Point (Radeon 860M)
})

_DEVICE_TYPES = ("CPU", "GPU", "DSP")


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


# --------------------------------------------------------------------------- line clean-up

_ANSI = re.compile(
    r"\x1b\[[0-9;?]*[ -/]*[@-~]"  # CSI (colours, cursor)
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC (titles, hyperlinks)
    r"|\x1b[@-Z\\-_]"  # other two-byte escapes
    r"|\^\[\[[0-9;]*[A-Za-z]"  # caret notation left by `cat -v` or copied from a terminal
)
# Characters terminals, pagers and editors show at line ends (wrap or end-of-line markers).
_END_MARKERS = "|│┃⏎↵↲⮐↩⤶¶…$"
_JUNK_SPACE = str.maketrans({"\xa0": " ", "\u2007": " ", "\u202f": " ", "\u200b": "", "\ufeff": "",
                             "\t": "    ", "\r": ""})
_PROMPT = re.compile(
    r"(?:^|[\s$#>%❯➜»:~\]])(?:sudo\s+)?(?:\S*/)?rocminfo(?:\.exe)?(?:\s+-{1,2}[\w-]+)*\s*$")
_QUOTE = re.compile(r"^\s*(?:>\s?)+")


def _clean(line: str) -> str:
    line = _ANSI.sub("", line).translate(_JUNK_SPACE)
    line = _QUOTE.sub("", line)  # e-mail/GitHub quoting
    line = line.rstrip()
    while line and line[-1] in _END_MARKERS:
        line = line[:-1].rstrip()
    return line


# --------------------------------------------------------------------------- labels

def _norm(label: str) -> str:
    return " ".join(label.split()).lower()


# Labels rocminfo prints (agent, pool, ISA and system keys). A line with one of these is data,
# never a problem report.
_KNOWN_LABELS = {_norm(x) for x in (
    "Runtime Version", "Runtime Ext Version", "System Timestamp Freq.", "Sig. Max Wait Duration",
    "Machine Model", "System Endianness", "Mwaitx", "XNACK enabled", "DMAbuf Support", "VMM Support",
    "Name", "Uuid", "Marketing Name", "Vendor Name", "Feature", "Profile", "Float Round Mode",
    "Max Queue Number", "Queue Min Size", "Queue Max Size", "Queue Type", "Node", "Device Type",
    "Cache Info", "L1", "L2", "L3", "L4", "Chip ID", "ASIC Revision", "Cacheline Size",
    "Max Clock Freq. (MHz)", "BDFID", "Internal Node ID", "Compute Unit", "SIMDs per CU",
    "Shader Engines", "Shader Arrs. per Eng.", "WatchPts on Addr. Ranges", "Coherent Host Access",
    "Memory Properties", "Features", "Fast F16 Operation", "Wavefront Size", "Workgroup Max Size",
    "Workgroup Max Size per Dimension", "Max Waves Per CU", "Max Work-item Per CU", "Grid Max Size",
    "Grid Max Size per Dimension", "Max fbarriers/Workgrp", "Packet Processor uCode",
    "SDMA engine uCode", "IOMMU Support", "Pool Info", "Segment", "Size", "Allocatable",
    "Alloc Granule", "Alloc Recommended Granule", "Alloc Alignment", "Accessible by all",
    "ISA Info", "Machine Models", "Profiles", "Default Rounding Mode", "Fast f16",
    "FBarrier Max Size", "Level",
)}

# Agent-level keys: seeing one inside a Cache Info listing means the listing has ended.
_AGENT_LABELS = {_norm(x) for x in (
    "Name", "Uuid", "Marketing Name", "Vendor Name", "Feature", "Profile", "Float Round Mode",
    "Max Queue Number", "Queue Min Size", "Queue Max Size", "Queue Type", "Node", "Device Type",
    "Chip ID", "ASIC Revision", "Cacheline Size", "Max Clock Freq. (MHz)", "BDFID",
    "Internal Node ID", "Compute Unit", "SIMDs per CU", "Shader Engines", "Shader Arrs. per Eng.",
    "WatchPts on Addr. Ranges", "Coherent Host Access", "Memory Properties", "Features",
    "Fast F16 Operation", "Wavefront Size", "Max Waves Per CU", "Max Work-item Per CU",
    "Max fbarriers/Workgrp", "Packet Processor uCode", "SDMA engine uCode", "IOMMU Support",
)}

_LABEL = re.compile(r"[A-Za-z][A-Za-z0-9 .()/_-]*")
_MAX_LINE = 2000  # rocminfo lines are far shorter; bounds the work done on junk input
_AGENT_HDR = re.compile(r"^\s*Agent\s+(\d+)\s*$", re.I)
_SUB_HDR = re.compile(r"^\s*(Pool|ISA|Cache L)\s*(\d+)\s*$", re.I)
_STARS = re.compile(r"^\s*\*{3,}\s*$")
_DONE = re.compile(r"^\s*\*+\s*Done\s*\*+\s*$", re.I)
_RULE = re.compile(r"^\s*={3,}\s*$")
_ISA_NAME = re.compile(r"^[a-z0-9_]+-[a-z0-9_]*-[a-z0-9_]*-", re.I)  # target triple: amdgcn-amd-amdhsa--
_GFX = re.compile(r"^gfx[0-9a-f]+(?:-generic)?(?::|$)", re.I)
_INT = re.compile(r"^\s*(\d+)")

_DRIVER_OK = re.compile(r"\bROCk module(?: version \S+)? is loaded\b", re.I)
_DRIVER_BAD = re.compile(r"\bROCk module(?: version \S+)? is NOT (?:loaded|live)\b", re.I)
_WSL = re.compile(r"\bWSL environment detected\b", re.I)
_PROBLEM = re.compile(
    r"hsa api call failure|call returned|hsa_init failed|unable to open|is not member of|"
    r"no wddm adapters|\bfailed\b|\bfailure\b|\berror\b|\bunable\b|\bcannot\b|permission denied|"
    r"no such file|segmentation fault|core dumped|\bnot (?:loaded|live)\b", re.I)


# --------------------------------------------------------------------------- parser

@dataclass
class _AgentBuf:
    index: int
    name: str | None = None
    marketing_name: str = ""
    device_type: str = ""
    compute_units: int | None = None
    memory_properties: str | None = None
    uuid: str | None = None
    vendor: str = ""
    isas: list[str] = field(default_factory=list)
    section: str = "agent"  # agent | cache | pool | isa | cachedump

    def freeze(self) -> Agent:
        name = self.name or ""
        dtype = self.device_type.upper()
        if dtype not in _DEVICE_TYPES:
            dtype = _infer_type(name, self.uuid, self.vendor, self.isas)
        is_apu = False
        if dtype == "GPU":
            flagged = self.memory_properties is not None and "APU" in self.memory_properties.upper()
            base = gfx_base(name) if _GFX.match(name.strip()) else ""
            is_apu = flagged or base in INTEGRATED_GFX or (
                not base and any(gfx_base(i) in INTEGRATED_GFX for i in self.isas))
        return Agent(index=self.index, name=name, marketing_name=self.marketing_name,
                     device_type=dtype, compute_units=self.compute_units, is_apu=is_apu,
                     isas=tuple(self.isas), uuid=self.uuid)


def _split_key(line: str) -> tuple[str, str] | None:
    """``  Marketing Name:   AMD Instinct MI210`` -> ("marketing name", "AMD Instinct MI210").
    The label ends at the first colon (values may hold colons: ISA names, CPU names)."""
    colon = line.find(":")
    if colon < 0:
        return None
    label = line[:colon].strip()
    if not _LABEL.fullmatch(label):
        return None
    return _norm(label), line[colon + 1:].lstrip(":").strip()


def _infer_type(name: str, uuid: str | None, vendor: str, isas: list[str]) -> str:
    if _GFX.match(name.strip()) or (uuid or "").upper().startswith("GPU-") or isas:
        return "GPU"
    if (uuid or "").upper().startswith("CPU-") or vendor.upper() == "CPU":
        return "CPU"
    return ""


def parse(text: str) -> RocmInfo:
    """Parse rocminfo output (or a paste of it). Never raises on odd input."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    elif not isinstance(text, str):
        text = str(text or "")
    agents: list[_AgentBuf] = []
    cur: _AgentBuf | None = None
    problems: list[str] = []
    runtime: str | None = None
    driver: bool | None = None
    wsl = False
    pending_index: int | None = None  # from an "Agent N" line, for the agent that follows

    def start(index: int | None) -> _AgentBuf:
        if index is None:
            index = agents[-1].index + 1 if agents else 1
        buf = _AgentBuf(index=index)
        agents.append(buf)
        return buf

    def note(msg: str) -> None:
        msg = msg.strip()[:300]
        if msg and msg not in problems:
            problems.append(msg)

    for raw in text.splitlines():
        line = _clean(raw[:_MAX_LINE])
        if not line.strip():
            continue
        stripped = line.strip()

        # Driver / environment lines, wherever they are.
        if _DRIVER_BAD.search(stripped):
            driver = False
            note(stripped)
            continue
        if _DRIVER_OK.search(stripped):
            driver = True if driver is None else driver
            continue
        if _WSL.search(stripped):
            wsl = True
            note("WSL environment detected.")
            continue
        if "rocminfo" in stripped and _PROMPT.search(stripped):
            continue  # `user@host:~$ rocminfo`, `$ /opt/rocm/bin/rocminfo --support`

        if _RULE.match(stripped):
            continue
        if stripped.lower() == "hsa system attributes":
            if agents:  # a second run pasted after the first one: keep the last
                agents.clear()
            cur, pending_index = None, None
            continue
        if stripped.lower() == "hsa agents":
            cur, pending_index = None, None
            continue
        if _DONE.match(stripped):
            cur, pending_index = None, None
            continue
        if _STARS.match(stripped):
            continue
        m = _AGENT_HDR.match(stripped)
        if m:
            pending_index = int(m.group(1))
            cur = None
            continue

        km = _split_key(stripped)
        label, value = km if km else ("", "")

        if not km or label not in _KNOWN_LABELS:
            if _PROBLEM.search(stripped):
                note(stripped)
                continue
            if cur is not None:
                sm = _SUB_HDR.match(stripped)
                if sm:
                    kind = sm.group(1).lower()
                    cur.section = {"pool": "pool", "isa": "isa"}.get(kind, "cachedump")
            continue

        if label == "runtime version":
            runtime = value or runtime
            continue

        # A key that begins an agent when no "Agent N" header came first (rocminfo -c / -g,
        # or a paste that starts mid-way).
        if label == "name":
            isa_like = bool(_ISA_NAME.match(value))
            if cur is None:
                if pending_index is None and isa_like:
                    continue  # a stray ISA name with no agent to belong to
                cur = start(pending_index)
                pending_index = None
            elif cur.section == "isa" and isa_like:
                cur.isas.append(value)
                continue
            elif cur.section == "cachedump":
                continue
            elif cur.section in ("isa", "pool") or cur.name is not None:
                cur = start(None)  # next agent, printed without a header
            cur.name = value
            cur.section = "agent"
            continue

        if cur is None:
            if pending_index is not None and label in _AGENT_LABELS:
                cur = start(pending_index)  # "Agent N" block whose Name line was lost
                pending_index = None
            else:
                continue

        if label == "cache info":
            cur.section = "cachedump" if cur.section in ("pool", "isa") else "cache"
            continue
        if label == "pool info":
            cur.section = "pool"
            continue
        if label == "isa info":
            cur.section = "isa"
            continue
        if cur.section in ("pool", "isa", "cachedump"):
            continue  # pool, ISA and cache-dump keys other than ISA names
        if label in _AGENT_LABELS:
            cur.section = "agent"

        if label == "uuid":
            cur.uuid = value or None
        elif label == "marketing name":
            cur.marketing_name = value
        elif label == "vendor name":
            cur.vendor = value
        elif label == "device type":
            cur.device_type = value.split()[0].upper() if value else ""
        elif label == "compute unit":
            im = _INT.match(value)
            cur.compute_units = int(im.group(1)) if im else None
        elif label == "memory properties":
            cur.memory_properties = value

    frozen = tuple(a.freeze() for a in agents)
    if driver is None:
        # No driver line (WSL, or a paste that starts later): the runtime came up if it printed
        # its attributes or enumerated a GPU.
        driver = runtime is not None or any(a.device_type == "GPU" for a in frozen)
        if wsl and not any(a.device_type == "GPU" for a in frozen):
            driver = False
    return RocmInfo(driver_loaded=driver, runtime_version=runtime, agents=frozen,
                    problems=tuple(problems))


# --------------------------------------------------------------------------- saved outputs

class NotRocminfo(ValueError):
    """A saved file that is not a (whole) rocminfo output. line: the 1-based line concerned, if any."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


# Characters no terminal output or paste holds (ESC stays: rocminfo colours its lines); U+FFFD
# is what bytes that are not UTF-8 decode to.
_NON_TEXT = re.compile(r"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f\x7f\ufffd]")
_MAX_SAVED = 16 * 2**20   # rocminfo prints about 10 kB per agent
_RUNTIME_FAILURE = re.compile(r"hsa api call failure|hsa_init failed|call returned hsa_status", re.I)


def decode(data: bytes) -> str:
    """The text of a saved output. Raises NotRocminfo for an empty file or binary data."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):  # `wsl rocminfo > out.txt` in Windows PowerShell
        text = data.decode("utf-16", errors="replace")
    else:
        text = data.decode("utf-8", errors="replace")
    if not text.strip():
        raise NotRocminfo(("nothing but blank lines" if data else "empty file") + ", not a rocminfo output")
    odd = len(_NON_TEXT.findall(text))
    # A few stray bytes (a Latin-1 "®" in a CPU name) are a paste; more, or any NUL, is not text.
    if "\x00" in text or odd > max(8, len(text) // 100):
        raise NotRocminfo(f"binary data ({odd} of {len(text)} characters are not text), not a rocminfo output")
    return text


def _last_agent_header(lines: list[str], start: int, end: int) -> str | None:
    for i in range(end, start - 1, -1):
        m = _AGENT_HDR.match(lines[i])
        if m:
            return f"Agent {m.group(1)}"
    return None


def recognise(text: str) -> RocmInfo:
    """Parse a saved output, refusing (NotRocminfo) text that rocminfo did not print and a run that
    stops before rocminfo's closing ``*** Done ***``. A run is judged complete only from its
    ``HSA System Attributes`` / ``HSA Agents`` banner on: a paste that starts mid-way has no
    known start, so only its content is checked."""
    info = parse(text)
    lines = [_clean(raw[:_MAX_LINE]).strip() for raw in text.splitlines()]
    banners = [i for i, ln in enumerate(lines) if ln.lower() in ("hsa system attributes", "hsa agents")]
    driver_or_failure = any(_DRIVER_OK.search(ln) or _DRIVER_BAD.search(ln) or _WSL.search(ln)
                            or _RUNTIME_FAILURE.search(ln) for ln in lines)
    agents = any(a.name and a.device_type for a in info.agents)
    if not (banners or driver_or_failure or agents or info.runtime_version):
        raise NotRocminfo("not a rocminfo output (no 'ROCk module' line, no 'HSA Agents' section, no agent)")
    if banners:
        start = banners[-1]          # a paste may hold several runs: the last one must be whole
        tail = lines[start:]
        if not any(_DONE.match(ln) or _RUNTIME_FAILURE.search(ln) for ln in tail):
            last = max(i for i, ln in enumerate(lines) if ln)
            agent = _last_agent_header(lines, start, last)
            where = (f"inside {agent}" if agent else "before the agent list"
                     if lines[start].lower() == "hsa system attributes" else "before the first agent")
            raise NotRocminfo(f"truncated rocminfo output: it stops at line {last + 1}, {where}, without "
                              "rocminfo's closing '*** Done ***' line; save the whole output again", last + 1)
    return info


def read_saved(path: str) -> str:
    """The text of the saved rocminfo output at ``path``, checked by :func:`recognise`. Raises
    UserError (file, and the line where one line tells) for anything else."""
    from ..errors import UserError

    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_SAVED + 1)     # bounded: /dev/zero or a disk image is no rocminfo output
    except OSError as exc:
        raise UserError(f"cannot read: {exc.strerror or exc}", file=path) from None
    if len(data) > _MAX_SAVED:
        raise UserError(f"larger than {_MAX_SAVED // 2**20} MiB, not a rocminfo output", file=path)
    try:
        text = decode(data)
        recognise(text)
    except NotRocminfo as exc:
        raise UserError(exc.message, file=path, line=exc.line) from None
    return text


# --------------------------------------------------------------------------- text summary

def format_table(info: RocmInfo) -> str:
    """A plain-text summary: a status line, one line per agent, then problems and a hint."""
    head = f"driver: {'loaded' if info.driver_loaded else 'NOT loaded'}"
    head += f"   runtime: {info.runtime_version or '?'}"
    head += f"   GPUs: {', '.join(info.gpus) if info.gpus else 'none'}"
    lines = [head]
    gpu_no = 0
    rows = []
    for a in info.agents:
        hip = ""
        kind = ""
        if a.device_type == "GPU":
            hip = str(gpu_no)
            gpu_no += 1
            kind = "integrated" if a.is_apu else "discrete"
        cus = "" if a.compute_units is None else str(a.compute_units)
        desc = a.marketing_name if a.marketing_name and a.marketing_name != a.name else ""
        rows.append((str(a.index), a.device_type or "?", hip, a.name or "?", cus, kind, desc))
    if rows:
        titles = ("agent", "type", "hip", "name", "CUs", "kind", "marketing name")
        widths = [max(len(r[i]) for r in (*rows, titles)) for i in range(len(titles) - 1)]

        def fmt(r):
            return "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1]

        lines.append(fmt(titles).rstrip())
        lines += [fmt(r).rstrip() for r in rows]
    else:
        lines.append("no agents")
    lines += [f"problem: {p}" for p in info.problems]
    vis = discrete_only_visible_devices(info)
    if vis is not None:
        lines.append(f"hint: HIP_VISIBLE_DEVICES={vis} keeps only the discrete GPU(s)")
    return "\n".join(lines)
