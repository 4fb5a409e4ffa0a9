"""The parser: rocminfo output (or a paste of it) -> :class:`RocmInfo`. No I/O, never raises.

It walks the lines once. Driver and environment lines count wherever they are; banners and
``Agent N`` headers open and close agent blocks; inside a block, ``Cache Info``, ``Pool Info``
and ``ISA Info`` open sub-sections whose keys (an ISA entry's own ``Name:``, pool sizes) must
not be taken for the agent's. A paste that lost the headers (``rocminfo -g``, or one that starts
mid-way) still splits into agents at each agent ``Name:`` line.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from rocmforge.verify.readers.rocminfo import lines as ln
from rocmforge.verify.readers.rocminfo.model import DEVICE_TYPES, INTEGRATED_GFX, Agent, RocmInfo, gfx_base

_SUB_SECTIONS = {"cache info": "cache", "pool info": "pool", "isa info": "isa"}
_PROBLEM_LEN = 300


@dataclass
class _AgentBuf:
    """An agent while its lines are read."""

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

    def set_field(self, label: str, value: str) -> None:
        if label == "uuid":
            self.uuid = value or None
        elif label == "marketing name":
            self.marketing_name = value
        elif label == "vendor name":
            self.vendor = value
        elif label == "device type":
            self.device_type = value.split()[0].upper() if value else ""
        elif label == "compute unit":
            m = ln.LEADING_INT.match(value)
            self.compute_units = int(m.group(1)) if m else None
        elif label == "memory properties":
            self.memory_properties = value

    def freeze(self) -> Agent:
        name = self.name or ""
        dtype = self.device_type.upper()
        if dtype not in DEVICE_TYPES:
            dtype = _infer_type(name, self.uuid, self.vendor, self.isas)
        return Agent(
            index=self.index,
            name=name,
            marketing_name=self.marketing_name,
            device_type=dtype,
            compute_units=self.compute_units,
            is_apu=dtype == "GPU" and self._integrated(name),
            isas=tuple(self.isas),
            uuid=self.uuid,
        )

    def _integrated(self, name: str) -> bool:
        flagged = self.memory_properties is not None and "APU" in self.memory_properties.upper()
        base = gfx_base(name) if ln.GFX.match(name.strip()) else ""
        return flagged or base in INTEGRATED_GFX or (not base and any(gfx_base(i) in INTEGRATED_GFX for i in self.isas))


def _infer_type(name: str, uuid: str | None, vendor: str, isas: list[str]) -> str:
    if ln.GFX.match(name.strip()) or (uuid or "").upper().startswith("GPU-") or isas:
        return "GPU"
    if (uuid or "").upper().startswith("CPU-") or vendor.upper() == "CPU":
        return "CPU"
    return ""


class _Parser:
    def __init__(self) -> None:
        self.agents: list[_AgentBuf] = []
        self.cur: _AgentBuf | None = None
        self.problems: list[str] = []
        self.runtime: str | None = None
        self.driver: bool | None = None
        self.wsl = False
        self.pending_index: int | None = None  # from an "Agent N" line, for the agent that follows

    def start(self, index: int | None) -> _AgentBuf:
        if index is None:
            index = self.agents[-1].index + 1 if self.agents else 1
        self.cur = _AgentBuf(index=index)
        self.agents.append(self.cur)
        return self.cur

    def note(self, msg: str) -> None:
        msg = msg.strip()[:_PROBLEM_LEN]
        if msg and msg not in self.problems:
            self.problems.append(msg)

    def feed(self, line: str) -> None:
        """One cleaned, stripped, non-blank line."""
        if not (self.environment_line(line) or self.layout_line(line)):
            self.key_line(line)

    def environment_line(self, line: str) -> bool:
        """Driver and WSL lines, and the shell prompt a paste starts with."""
        if ln.DRIVER_NOT_LOADED.search(line):
            self.driver = False
            self.note(line)
        elif ln.DRIVER_LOADED.search(line):
            self.driver = True if self.driver is None else self.driver
        elif ln.WSL.search(line):
            self.wsl = True
            self.note("WSL environment detected.")
        else:
            return "rocminfo" in line and bool(ln.PROMPT.search(line))
        return True

    def layout_line(self, line: str) -> bool:
        """Rules, banners, star lines, ``Agent N`` headers and ``*** Done ***``."""
        lower = line.lower()
        if ln.RULE.match(line) or ln.STARS.match(line):
            return True
        if lower == "hsa system attributes" and self.agents:
            self.agents.clear()  # a second run pasted after the first one: keep the last
        if lower in ln.BANNERS or ln.DONE.match(line):
            self.cur, self.pending_index = None, None
            return True
        m = ln.AGENT_HEADER.match(line)
        if m:
            self.pending_index, self.cur = int(m.group(1)), None
            return True
        return False

    def key_line(self, line: str) -> None:
        key = ln.split_key(line)
        if not key or key[0] not in ln.KNOWN_LABELS:
            self.other_line(line)
            return
        label, value = key
        if label == "runtime version":
            self.runtime = value or self.runtime
        elif label == "name":
            self.name_line(value)
        elif (cur := self.agent_for(label)) is not None:
            self.agent_key(cur, label, value)

    def other_line(self, line: str) -> None:
        """A line that is no rocminfo key: a problem report, a sub-section header, or noise."""
        if ln.PROBLEM.search(line):
            self.note(line)
            return
        if self.cur is not None and (m := ln.SUB_HEADER.match(line)):
            self.cur.section = {"pool": "pool", "isa": "isa"}.get(m.group(1).lower(), "cachedump")

    def name_line(self, value: str) -> None:
        """``Name:`` begins an agent (even when no ``Agent N`` header came first: rocminfo -c / -g,
        or a paste that starts mid-way), unless it is an ISA entry's name."""
        isa_like = bool(ln.ISA_NAME.match(value))
        cur = self.cur
        if cur is None:
            if self.pending_index is None and isa_like:
                return  # a stray ISA name with no agent to belong to
            cur = self.start(self.pending_index)
            self.pending_index = None
        elif cur.section == "isa" and isa_like:
            cur.isas.append(value)
            return
        elif cur.section == "cachedump":
            return
        elif cur.section in ("isa", "pool") or cur.name is not None:
            cur = self.start(None)  # next agent, printed without a header
        cur.name = value
        cur.section = "agent"

    def agent_for(self, label: str) -> _AgentBuf | None:
        """The agent a key belongs to; an ``Agent N`` block whose Name line was lost starts at its
        first agent key."""
        if self.cur is None and self.pending_index is not None and label in ln.AGENT_LABELS:
            self.start(self.pending_index)
            self.pending_index = None
        return self.cur

    def agent_key(self, cur: _AgentBuf, label: str, value: str) -> None:
        if label in _SUB_SECTIONS:
            section = _SUB_SECTIONS[label]
            cur.section = "cachedump" if section == "cache" and cur.section in ("pool", "isa") else section
            return
        if cur.section in ("pool", "isa", "cachedump"):
            return  # pool, ISA and cache-dump keys other than ISA names
        if label in ln.AGENT_LABELS:
            cur.section = "agent"
        cur.set_field(label, value)

    def result(self) -> RocmInfo:
        agents = tuple(a.freeze() for a in self.agents)
        driver = self.driver
        if driver is None:
            # No driver line (WSL, or a paste that starts later): the runtime came up if it printed
            # its attributes or enumerated a GPU; on WSL, where rocminfo skips its driver check,
            # only an enumerated GPU does.
            any_gpu = any(a.device_type == "GPU" for a in agents)
            driver = any_gpu if self.wsl else (self.runtime is not None or any_gpu)
        return RocmInfo(
            driver_loaded=driver, runtime_version=self.runtime, agents=agents, problems=tuple(self.problems)
        )


def parse(text: str) -> RocmInfo:
    """Parse rocminfo output (or a paste of it). Never raises on odd input."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    elif not isinstance(text, str):
        text = str(text or "")
    parser = _Parser()
    paste = ln.read_paste(text)
    for line in paste.lines:
        if line:
            parser.feed(line)
    return dataclasses.replace(parser.result(), stripped=paste.stripped)
