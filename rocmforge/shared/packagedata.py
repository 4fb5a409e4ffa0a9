"""What the package ships besides its modules, under rocmforge/data/: the Jinja templates, the
probes copied into every image, and the suites that run against a container of one. They travel
with the package (a non-editable install has them), so no command reads the checkout's tests/.

A project folder (the matrix file's) may hold its own templates/ or probes/; each then replaces
the package's folder of that name for that project."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

DATA = Path(__file__).resolve().parents[1] / "data"
TEMPLATES = DATA / "templates"
PROBES = DATA / "probes"
SUITES = DATA / "suites"
SCRIPTS = DATA / "scripts"


def folder(project: Path, name: str) -> Path:
    """The project's own templates/ or probes/ when it has one, else the package's."""
    own = project / name
    return own if own.is_dir() else DATA / name


def shown(path: Path, project: Path) -> str:
    """A file of either as messages name it: relative to the project, or as rocmforge/data/... ."""
    path = Path(path)
    for base in (project, DATA.parents[1]):
        if path.is_relative_to(base):
            return path.relative_to(base).as_posix()
    return str(path)


def probe(name: str) -> ModuleType:
    """The package's probe `name`, imported here (the archs reader and the tests use their code).
    Probes import their parts by bare name, as they do when an image runs them as scripts from one
    folder, so that folder joins sys.path: at its end, and a name an installed module already
    holds is refused rather than taken for the probe."""
    if str(PROBES) not in sys.path:
        sys.path.append(str(PROBES))
    module = importlib.import_module(name)
    if Path(module.__file__ or "").resolve().parent != PROBES:
        raise ImportError(
            f"probe {name!r}: the name is an installed module's ({module.__file__}), not {PROBES / (name + '.py')}"
        )
    return module
