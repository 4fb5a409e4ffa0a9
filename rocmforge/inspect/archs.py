"""GPU architectures compiled into files: a thin shim over ``probes/archs.py``.

The implementation lives in ``probes/archs.py`` because it is also copied into containers and
run there with the container's python3 (standard library only); this module loads that file
from the repository root and re-exports its public API.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

PROBE_PATH = Path(__file__).resolve().parents[2] / "probes" / "archs.py"
_MODULE_NAME = "rocmforge.inspect._probe_archs"


def _load():
    if _MODULE_NAME in sys.modules:
        return sys.modules[_MODULE_NAME]
    if not PROBE_PATH.is_file():   # an installed rocmforge without its checkout
        from ..errors import UserError

        raise UserError(f"the architecture probe {PROBE_PATH} is not there: `archs` runs from a rocmforge "
                        "checkout (probes/ is not installed with the package)")
    spec = importlib.util.spec_from_file_location(_MODULE_NAME, PROBE_PATH)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the architecture probe from {PROBE_PATH}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE_NAME] = module  # dataclasses look their module up while executing it
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(_MODULE_NAME, None)
        raise
    return module


_probe = _load()

EF_AMDGPU_MACH = _probe.EF_AMDGPU_MACH
GENERIC_TARGETS = _probe.GENERIC_TARGETS
FileArchs = _probe.FileArchs
arch_sort_key = _probe.arch_sort_key
library_coverage = _probe.library_coverage
main = _probe.main
scan_bytes = _probe.scan_bytes
scan_file = _probe.scan_file
scan_paths = _probe.scan_paths

__all__ = [
    "EF_AMDGPU_MACH",
    "GENERIC_TARGETS",
    "PROBE_PATH",
    "FileArchs",
    "arch_sort_key",
    "library_coverage",
    "main",
    "scan_bytes",
    "scan_file",
    "scan_paths",
]
