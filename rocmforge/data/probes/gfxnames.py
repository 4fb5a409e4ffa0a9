#!/usr/bin/env python3
"""AMD GPU architecture names: the processor table of AMDGPU ELF files, the generic targets and
their members, gfx names in target IDs and file names, and the HIP runtime's rule for which code a
device runs.

Standard library only: images carry this file beside archs.py and perarch.py, which import it by
its bare name (their folder is on sys.path when they run as scripts)."""

from __future__ import annotations

import re
from typing import Iterable

# ---------------------------------------------------------------------------------------------
# Tables

#: EF_AMDGPU_MACH values (``e_flags & 0xff`` of an AMDGPU ELF) -> processor name, from LLVM's
#: AMDGPUUsage "EF_AMDGPU_MACH Values" table / llvm/BinaryFormat/ELF.h. The values for every
#: processor clang-17 knows were checked against what llc-17 emits (see the tests).
#: 0x040 gfx940 and 0x04b gfx941 were dropped from LLVM 20 but exist in shipped binaries.
EF_AMDGPU_MACH: dict[int, str] = {
    # R600-based processors (not GCN; no HIP code objects, listed for completeness).
    0x001: "r600", 0x002: "r630", 0x003: "rs880", 0x004: "rv670", 0x005: "rv710",
    0x006: "rv730", 0x007: "rv770", 0x008: "cedar", 0x009: "cypress", 0x00A: "juniper",
    0x00B: "redwood", 0x00C: "sumo", 0x00D: "barts", 0x00E: "caicos", 0x00F: "cayman",
    0x010: "turks",
    # AMDGCN-based processors.
    0x020: "gfx600", 0x021: "gfx601", 0x022: "gfx700", 0x023: "gfx701", 0x024: "gfx702",
    0x025: "gfx703", 0x026: "gfx704",
    0x028: "gfx801", 0x029: "gfx802", 0x02A: "gfx803", 0x02B: "gfx810",
    0x02C: "gfx900", 0x02D: "gfx902", 0x02E: "gfx904", 0x02F: "gfx906", 0x030: "gfx908",
    0x031: "gfx909", 0x032: "gfx90c",
    0x033: "gfx1010", 0x034: "gfx1011", 0x035: "gfx1012",
    0x036: "gfx1030", 0x037: "gfx1031", 0x038: "gfx1032", 0x039: "gfx1033",
    0x03A: "gfx602", 0x03B: "gfx705", 0x03C: "gfx805",
    0x03D: "gfx1035", 0x03E: "gfx1034", 0x03F: "gfx90a", 0x040: "gfx940",
    0x041: "gfx1100", 0x042: "gfx1013", 0x043: "gfx1150", 0x044: "gfx1103",
    0x045: "gfx1036", 0x046: "gfx1101", 0x047: "gfx1102", 0x048: "gfx1200",
    0x049: "gfx1250", 0x04A: "gfx1151", 0x04B: "gfx941", 0x04C: "gfx942",
    0x04E: "gfx1201", 0x04F: "gfx950", 0x050: "gfx1310",
    0x051: "gfx9-generic", 0x052: "gfx10-1-generic", 0x053: "gfx10-3-generic",
    0x054: "gfx11-generic", 0x055: "gfx1152", 0x057: "gfx1154", 0x058: "gfx1153",
    0x059: "gfx12-generic", 0x05A: "gfx1251", 0x05B: "gfx12-5-generic",
    0x05C: "gfx1172", 0x05D: "gfx1170", 0x05E: "gfx1171", 0x05F: "gfx9-4-generic",
    0x062: "gfx11-7-generic", 0x063: "gfx13-generic",
}

#: Generic targets -> the processors their code objects run on (AMDGPUUsage "AMDGPU Generic
#: Processors"). Used by library_coverage: gfx11-generic code covers a declared gfx1101.
GENERIC_TARGETS: dict[str, frozenset[str]] = {
    "gfx9-generic": frozenset({"gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"}),
    "gfx9-4-generic": frozenset({"gfx940", "gfx941", "gfx942", "gfx950"}),
    "gfx10-1-generic": frozenset({"gfx1010", "gfx1011", "gfx1012", "gfx1013"}),
    "gfx10-3-generic": frozenset({"gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034",
                                  "gfx1035", "gfx1036"}),
    "gfx11-generic": frozenset({"gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150",
                                "gfx1151", "gfx1152", "gfx1153"}),
    "gfx11-7-generic": frozenset({"gfx1170", "gfx1171", "gfx1172"}),
    "gfx12-generic": frozenset({"gfx1200", "gfx1201"}),
    "gfx12-5-generic": frozenset({"gfx1250", "gfx1251"}),
    "gfx13-generic": frozenset({"gfx1310"}),
}

# A gfx processor at the end of a target ID (features after ':'), e.g. "gfx90a:xnack-".
_ID_ARCH_RE = re.compile(r"(?:^|-)(gfx[0-9a-z]+(?:-[0-9a-z]+)*?)((?::[a-z0-9_]+[+-]?)*)$")
# A gfx processor inside a file name; Tensile spells features with '-', e.g. gfx90a-xnack+.
_NAME_ARCH_RE = re.compile(
    r"(?<![0-9a-zA-Z])(gfx(?:\d+(?:-\d+)*-generic|\d{1,2}\d[0-9a-f]))(?![0-9a-zA-Z])"
    r"((?:[-:_](?:xnack|sramecc)[+-])*)")
_SPECIFIC_RE = re.compile(r"gfx(\d{1,2})(\d)([0-9a-f])")
_GENERIC_RE = re.compile(r"gfx(\d+)(?:-(\d+))?-generic")


# ---------------------------------------------------------------------------------------------
# Architecture names

def arch_sort_key(name: str) -> tuple:
    """Order gfx names by generation: gfx803 < gfx900 < gfx90a < gfx1010 < gfx1100."""
    m = _SPECIFIC_RE.fullmatch(name)
    if m:
        return (int(m.group(1)), int(m.group(2)), int(m.group(3), 16), name)
    m = _GENERIC_RE.fullmatch(name)
    if m:
        return (int(m.group(1)), int(m.group(2) or 0), -1, name)
    return (1 << 20, 0, 0, name)


def sorted_archs(archs: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(archs), key=arch_sort_key))


def arch_of_target_id(target: str) -> str | None:
    """``hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-`` or ``gfx90a:xnack-`` -> ``gfx90a``."""
    m = _ID_ARCH_RE.search(target)
    return m.group(1) if m else None


def strip_features(arch: str) -> str:
    """``gfx90a:xnack-`` -> ``gfx90a`` (declared archs may carry features)."""
    return arch.strip().split(":", 1)[0]


def archs_from_name(name: str) -> tuple[list[str], list[str]]:
    archs, targets = [], []
    for m in _NAME_ARCH_RE.finditer(name):
        archs.append(m.group(1))
        feats = [f[1:] for f in re.findall(r"[-:_](?:xnack|sramecc)[+-]", m.group(2))]
        targets.append(":".join([m.group(1), *sorted(feats)]))
    return archs, targets


# ---------------------------------------------------------------------------------------------
# Target IDs: which code a device runs

#: Processors with the xnack / sramecc target features (LLVM AMDGPUUsage, "AMDGPU Processors",
#: column "Target Features"). A device of any other processor reports its bare name.
XNACK_PROCESSORS = frozenset({
    "gfx801", "gfx810", "gfx900", "gfx902", "gfx904", "gfx906", "gfx908", "gfx909", "gfx90a", "gfx90c",
    "gfx940", "gfx941", "gfx942", "gfx950", "gfx1010", "gfx1011", "gfx1012", "gfx1013",
    "gfx9-generic", "gfx9-4-generic", "gfx10-1-generic"})
SRAMECC_PROCESSORS = frozenset({"gfx906", "gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950",
                                "gfx9-4-generic"})


def parse_target_id(target: str) -> tuple[str, dict[str, str]] | None:
    """``hipv4-amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-`` or ``gfx90a:xnack-`` -> ("gfx90a",
    {"sramecc": "+", "xnack": "-"}); a feature left out is absent ("any"). None: no gfx target."""
    m = _ID_ARCH_RE.search(target.strip())
    if not m:
        return None
    feats = {}
    for f in m.group(2).split(":")[1:]:
        if f[-1:] in "+-" and f[:-1] in ("xnack", "sramecc"):
            feats[f[:-1]] = f[-1]
    return m.group(1), feats


def device_targets(declared: str) -> list[str]:
    """The devices a declared arch stands for, as target IDs the runtime reports for them. A
    feature the declaration leaves out takes the device's default: XNACK off (the driver turns
    it on only for processes run with HSA_XNACK=1), SRAM ECC either way (a board setting:
    MI210s ship with it on, Radeon Pro VIIs with it off). ``gfx90a`` -> gfx90a:sramecc+:xnack-
    and gfx90a:sramecc-:xnack-; ``gfx1100`` -> gfx1100."""
    parsed = parse_target_id(declared)
    if parsed is None:
        return [declared.strip()]
    proc, feats = parsed
    xnack = feats.get("xnack", "-") if proc in XNACK_PROCESSORS else None
    eccs = [feats["sramecc"]] if "sramecc" in feats else ["+", "-"]
    eccs = eccs if proc in SRAMECC_PROCESSORS else [None]
    return [":".join([proc] + ([f"sramecc{e}"] if e else []) + ([f"xnack{xnack}"] if xnack else []))
            for e in eccs]


def runs_on(code_target: str, device_target: str) -> bool:
    """Whether a device runs code built for code_target, by the HIP runtime's rule (ROCm/clr,
    hipamd/src/hip_comgr_helper.cpp, isCodeObjectCompatibleWithDevice; hip_code_object.cpp in
    older releases): the same processor (or a generic target that includes it), and every
    feature the code names ('+' or '-') equal to the device's; a feature the code leaves out
    runs either way. So code only for gfx90a:xnack+ runs on no default-mode (XNACK off) MI210."""
    code, dev = parse_target_id(code_target), parse_target_id(device_target)
    if code is None or dev is None:
        return False
    (cproc, cfeats), (dproc, dfeats) = code, dev
    if cproc != dproc and dproc not in GENERIC_TARGETS.get(cproc, ()):
        return False
    return all(dfeats.get(k) == v for k, v in cfeats.items())

