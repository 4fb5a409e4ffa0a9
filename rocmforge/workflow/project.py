"""A checkout as the commands see it: the matrix, its lock, its state folder and the plan they make."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable
from functools import cached_property
from pathlib import Path

from rocmforge.render.plan import load_plan, require_resolved
from rocmforge.resolve.lockmodel import Lock
from rocmforge.shared.errors import MACHINE_ERRNOS, BuildError, UserError
from rocmforge.shared.files import append_line
from rocmforge.shared.statedir import StateDir

CA_ENV = ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")


class Project:
    def __init__(self, matrix_path: Path, state_dir: Path | None = None) -> None:
        self.matrix_path = Path(matrix_path)
        self.root = self.matrix_path.resolve().parent
        self.state = Path(state_dir) if state_dir else self.root / ".rocmforge"

    @property
    def lock_path(self) -> Path:
        return self.matrix_path.with_suffix(".lock")

    @property
    def record_dir(self) -> Path:
        """Publish records are committed beside the matrix, not kept in the state folder."""
        return self.root / "published"

    @cached_property
    def plan(self):
        return load_plan(self.matrix_path)

    def lock(self) -> Lock:
        """matrix.lock as the plan read it: once per command."""
        return self.plan.lock

    def target(self, name: str, flag: str = "--target"):
        if name not in self.plan.targets:
            raise UserError(f"unknown target {name!r}; known: {', '.join(sorted(self.plan.targets))}", field=flag)
        return self.plan.targets[name]

    def buildable_image(self, key: str):
        """A target's main image by its name, or a variant by its key (hip-runtime-gfx1100), as
        buildable_target: for the commands that take one image (context, normalise)."""
        variants = {v.key: v for vs in self.plan.variants.values() for v in vs}
        if key in self.plan.targets or key not in variants:
            return self.buildable_target(key)
        require_resolved(variants[key])
        return variants[key]

    def buildable_target(self, name: str):
        """A target a command will build or needs built: refused while unresolved, without the engine."""
        tp = self.target(name)
        require_resolved(tp)
        return tp

    def writable_state(self) -> None:
        writable_dir(self.state, "--state-dir")

    def log(self, name: str) -> Callable[[str], None]:
        """A writer of whole lines to logs/<name>.log."""
        path = StateDir(self.state).log(name)
        return lambda msg: append_line(path, msg)

    def revision(self) -> str:
        """The commit of the checkout the matrix is in; empty outside git."""
        try:
            out = subprocess.run(["git", "-C", str(self.root), "rev-parse", "HEAD"], capture_output=True, text=True)
            return out.stdout.strip() if out.returncode == 0 else ""
        except OSError:
            return ""


def ca_bundle(explicit: str | None) -> Path | None:
    """The CA bundle builder stages use behind a TLS-intercepting proxy: the option, else the usual variables."""
    value, source = explicit, "--ca-bundle"
    if value is None:
        for var in CA_ENV:
            if os.environ.get(var):
                value, source = os.environ[var], f"${var}"
                break
    if not value:
        return None
    path = Path(value)
    if not path.is_file():
        raise UserError(f"CA bundle {value!r} is not a readable file", field=source)
    return path


def writable_dir(path: Path, field: str | None, shown: Path | None = None) -> None:
    """Refuse, before any work, a folder that cannot be made or written: a file in the way, /proc, a
    read-only mount. Root ignores permission bits, so only creating something there tells."""
    shown = shown or path
    existing = path.absolute()
    while not existing.exists():
        if existing.is_symlink():
            raise UserError(f"{existing} is a symbolic link to nothing", file=str(shown), field=field)
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"{existing} is a file, not a folder", file=str(shown), field=field)
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".rocmforge-probe-", dir=existing))
    except OSError as exc:
        if exc.errno in MACHINE_ERRNOS:  # a full disk is the machine's state, not a wrong path
            raise BuildError(f"{shown}: cannot create anything in {existing}: {exc.strerror}") from None
        raise UserError(f"cannot create anything in {existing}: {exc.strerror}", file=str(shown), field=field) from None


def writable_file(path: Path, field: str | None, replaced: bool = True) -> None:
    """replaced: the file is written beside itself and renamed over (its folder must take new files);
    otherwise it is opened in place, and an existing one needs only to take appends."""
    if path.is_dir():
        raise UserError("is a folder, not a file", file=str(path), field=field)
    if replaced or not path.exists():
        writable_dir(path.parent, field, shown=path)
        return
    try:
        open(path, "ab").close()
    except OSError as exc:
        raise UserError(f"cannot write: {exc.strerror}", file=str(path), field=field) from None
