"""Lines of a rocminfo output as pastes deliver them: terminal colour codes, quoting, line-end
markers and odd white space removed; the labels rocminfo prints, and the patterns of its
banners, agent headers and driver lines.

Pastes lose or change rocminfo's padding, indentation and line endings, so everything here goes by
content (labels, words), never by column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ANSI = re.compile(
    r"\x1b\[[0-9;?]*[ -/]*[@-~]"  # CSI (colours, cursor)
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC (titles, hyperlinks)
    r"|\x1b[@-Z\\-_]"  # other two-byte escapes
    r"|\^\[\[[0-9;]*[A-Za-z]"  # caret notation left by `cat -v` or copied from a terminal
)
# Characters terminals, pagers and editors show at line ends (wrap or end-of-line markers).
_END_MARKERS = "|│┃⏎↵↲⮐↩⤶¶…$"
_JUNK_SPACE = str.maketrans(
    {"\xa0": " ", "\u2007": " ", "\u202f": " ", "\u200b": "", "\ufeff": "", "\t": "    ", "\r": ""}
)
_QUOTE = re.compile(r"^\s*(?:>\s?)+")
MAX_LINE = 2000  # rocminfo lines are far shorter; bounds the work done on junk input


def clean(line: str) -> str:
    """A line without colour codes, quoting, odd white space and end-of-line markers (right-stripped)."""
    line = _ANSI.sub("", line[:MAX_LINE]).translate(_JUNK_SPACE)
    line = _QUOTE.sub("", line)  # e-mail/GitHub quoting
    line = line.rstrip()
    while line and line[-1] in _END_MARKERS:
        line = line[:-1].rstrip()
    return line


# What a paste of a whole output carries around it (markdown, a shell session), removed before
# the text is read: a fence line, a prompt line, a backtick at a line's edge. Such lines become
# blank so that positions stay line numbers of the file.
_FENCE = re.compile(r"^(?:`{3,}|~{3,})\s*[\w.+-]*\s*(?:`{3,}|~{3,})?$")
_EDGE_TICKS = re.compile(r"^`+\s*|\s*`+$")
# A shell prompt (`$`, `#`, `%`, `>` after an optional user@host:dir, `[user@host dir]`, a
# `(venv)`, PowerShell's `PS C:\>`, zsh themes' `❯`/`➜`), then a command or nothing. rocminfo
# itself never prints a line that starts like this.
_PROMPT_LINE = re.compile(
    r"^(?:\([\w.-]+\)\s*)?(?:[\w.-]+@[\w.-]+(?::[^\s$#%>]*)?|\[[^\]]{1,200}\]|PS\s+[^>\s]{1,200})?"
    r"\s?[$#%>❯➜»](?:\s+\S.*)?$"
)


@dataclass(frozen=True)
class Paste:
    """A text's lines, cleaned and stripped (one per line of the text, blank where a line was
    markdown or shell residue), and what was removed, for the user to see (``--json``)."""

    lines: list[str]
    stripped: tuple[str, ...]


def _count(what: str, n: int) -> str:
    return f"{what} ({n} line{'s' if n != 1 else ''})"


def read_paste(text: str) -> Paste:
    """The text's lines cleaned, markdown and shell residue blanked, with a count of what was removed."""
    raw = text.splitlines()
    crlf = text.count("\r\n")
    ansi = fences = prompts = ticks = 0
    out = []
    for line in raw:
        coloured = bool(_ANSI.search(line[:MAX_LINE]))
        line = clean(line).strip()
        # rocminfo colours its driver line itself, even into a file: that is its output, not residue
        if coloured and not (DRIVER_LOADED.search(line) or DRIVER_NOT_LOADED.search(line)):
            ansi += 1
        if _FENCE.match(line):
            fences += 1
            line = ""
        elif _PROMPT_LINE.match(line) or ("rocminfo" in line and PROMPT.search(line)):
            prompts += 1
            line = ""
        elif line.startswith("`") or line.endswith("`"):
            ticks += 1
            line = _EDGE_TICKS.sub("", line)
        out.append(line)
    stripped = tuple(
        _count(what, n)
        for what, n in (
            ("markdown fences", fences),
            ("stray backticks", ticks),
            ("shell prompt lines", prompts),
            ("CRLF line ends", crlf),
            ("ANSI colour codes", ansi),
        )
        if n
    )
    return Paste(out, stripped)


def cleaned_lines(text: str) -> list[str]:
    """Every line of text, cleaned and stripped, with paste residue blanked (see read_paste);
    blank lines stay, so positions are line numbers."""
    return read_paste(text).lines


def norm(label: str) -> str:
    """A label lower-cased, its runs of white space made single spaces (how labels are compared)."""
    return " ".join(label.split()).lower()


# Agent-level keys: seeing one inside a Cache Info listing means the listing has ended.
AGENT_LABELS = {
    norm(x)
    for x in (
        "Name",
        "Uuid",
        "Marketing Name",
        "Vendor Name",
        "Feature",
        "Profile",
        "Float Round Mode",
        "Max Queue Number",
        "Queue Min Size",
        "Queue Max Size",
        "Queue Type",
        "Node",
        "Device Type",
        "Chip ID",
        "ASIC Revision",
        "Cacheline Size",
        "Max Clock Freq. (MHz)",
        "BDFID",
        "Internal Node ID",
        "Compute Unit",
        "SIMDs per CU",
        "Shader Engines",
        "Shader Arrs. per Eng.",
        "WatchPts on Addr. Ranges",
        "Coherent Host Access",
        "Memory Properties",
        "Features",
        "Fast F16 Operation",
        "Wavefront Size",
        "Max Waves Per CU",
        "Max Work-item Per CU",
        "Max fbarriers/Workgrp",
        "Packet Processor uCode",
        "SDMA engine uCode",
        "IOMMU Support",
    )
}

# Labels rocminfo prints (agent, pool, ISA and system keys). A line with one of these is data,
# never a problem report.
KNOWN_LABELS = AGENT_LABELS | {
    norm(x)
    for x in (
        "Runtime Version",
        "Runtime Ext Version",
        "System Timestamp Freq.",
        "Sig. Max Wait Duration",
        "Machine Model",
        "System Endianness",
        "Mwaitx",
        "XNACK enabled",
        "DMAbuf Support",
        "VMM Support",
        "Cache Info",
        "L1",
        "L2",
        "L3",
        "L4",
        "Workgroup Max Size",
        "Workgroup Max Size per Dimension",
        "Grid Max Size",
        "Grid Max Size per Dimension",
        "Pool Info",
        "Segment",
        "Size",
        "Allocatable",
        "Alloc Granule",
        "Alloc Recommended Granule",
        "Alloc Alignment",
        "Accessible by all",
        "ISA Info",
        "Machine Models",
        "Profiles",
        "Default Rounding Mode",
        "Fast f16",
        "FBarrier Max Size",
        "Level",
    )
}

_LABEL = re.compile(r"[A-Za-z][A-Za-z0-9 .()/_-]*")


def split_key(line: str) -> tuple[str, str] | None:
    """``  Marketing Name:   AMD Instinct MI210`` -> ("marketing name", "AMD Instinct MI210").
    The label ends at the first colon (values may hold colons: ISA names, CPU names)."""
    colon = line.find(":")
    if colon < 0:
        return None
    label = line[:colon].strip()
    if not _LABEL.fullmatch(label):
        return None
    return norm(label), line[colon + 1 :].lstrip(":").strip()


# Layout: banners, agent blocks and their sub-sections.
BANNERS = ("hsa system attributes", "hsa agents")
AGENT_HEADER = re.compile(r"^\s*Agent\s+(\d+)\s*$", re.I)
SUB_HEADER = re.compile(r"^\s*(Pool|ISA|Cache L)\s*(\d+)\s*$", re.I)
STARS = re.compile(r"^\s*\*{3,}\s*$")
DONE = re.compile(r"^\s*\*+\s*Done\s*\*+\s*$", re.I)
RULE = re.compile(r"^\s*={3,}\s*$")
PROMPT = re.compile(r"(?:^|[\s$#>%❯➜»:~\]])(?:sudo\s+)?(?:\S*/)?rocminfo(?:\.exe)?(?:\s+-{1,2}[\w-]+)*\s*$")

# Values.
ISA_NAME = re.compile(r"^[a-z0-9_]+-[a-z0-9_]*-[a-z0-9_]*-", re.I)  # target triple: amdgcn-amd-amdhsa--
GFX = re.compile(r"^gfx[0-9a-f]+(?:-generic)?(?::|$)", re.I)
LEADING_INT = re.compile(r"^\s*(\d+)")

# The driver, the environment and failures.
DRIVER_LOADED = re.compile(r"\bROCk module(?: version \S+)? is loaded\b", re.I)
DRIVER_NOT_LOADED = re.compile(r"\bROCk module(?: version \S+)? is NOT (?:loaded|live)\b", re.I)
WSL = re.compile(r"\bWSL environment detected\b", re.I)
PROBLEM = re.compile(
    r"hsa api call failure|call returned|hsa_init failed|unable to open|is not member of|"
    r"no wddm adapters|\bfailed\b|\bfailure\b|\berror\b|\bunable\b|\bcannot\b|permission denied|"
    r"no such file|segmentation fault|core dumped|\bnot (?:loaded|live)\b",
    re.I,
)
RUNTIME_FAILURE = re.compile(r"hsa api call failure|hsa_init failed|call returned hsa_status", re.I)
