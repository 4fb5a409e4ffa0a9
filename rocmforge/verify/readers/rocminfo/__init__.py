"""Parse the text that ROCm's ``rocminfo`` prints, including pastes copied from bug reports.

Only the standard library is used, and :func:`parse` does no I/O: callers read the text.
:func:`parse` accepts anything; :func:`read_saved` is for a saved output a user hands us.

How ``rocminfo`` (ROCm/rocminfo, ``rocminfo.cc``) lays out its output, which is what the parser
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

Modules: :mod:`.model` (agents and what they say), :mod:`.lines` (cleaning pasted lines, labels
and layout patterns), :mod:`.parser`, :mod:`.saved` (files handed to us), :mod:`.table` (the
plain-text summary).
"""

from rocmforge.verify.readers.rocminfo.model import (
    INTEGRATED_GFX,
    Agent,
    RocmInfo,
    discrete_only_visible_devices,
    gfx_base,
)
from rocmforge.verify.readers.rocminfo.parser import parse
from rocmforge.verify.readers.rocminfo.saved import NotRocminfo, decode, read_saved, recognise
from rocmforge.verify.readers.rocminfo.table import format_table

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
