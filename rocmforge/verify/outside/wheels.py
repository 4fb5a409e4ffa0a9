"""Python distributions, wheel by wheel: each wheel a python-env component's venv installs, fetched
on the host by the SHA-256 matrix.lock records for it (host.fetch, as a build fetches it), and read
from the wheel's own zip, never from the RECORD the install wrote or the wheel carries. What the
image must hold for it: each file of the wheel where pip installs it into the venv (pip's scheme
for a venv, its shebang fix for scripts, 0755 for what the zip marks executable, else 0644), plus
what pip writes itself: INSTALLER, RECORD, the console scripts the wheel's entry points name
(pip's launcher text, run as the venv's python) and, where it writes them, REQUESTED and
direct_url.json (generated.py lists those, and piprules.py judges them against the wheel). The
venv's own pip, which `python -m venv` installs with ensurepip, is read the same way from the
wheel its Debian package ships (python3-pip-whl, fetched by the lock's hash like any .deb).

Only each wheel's file list is kept in the user's cache (by the wheel's SHA-256); the wheels
themselves are kept where host.fetch keeps what it downloads."""

from __future__ import annotations

import ast
import base64
import configparser
import hashlib
import io
import json
import posixpath
import re
import textwrap
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field

from rocmforge.host import fetch
from rocmforge.shared.errors import BuildError
from rocmforge.shared.files import atomic_write, user_cache
from rocmforge.verify.outside import debs

VENV = "opt/rocmforge/venv"  # where python-env's builder stage makes the venv (templates/kinds/python-env.j2)
PYTHON = f"/{VENV}/bin/python"  # the interpreter pip runs as there: what it writes into shebangs
FORMAT = 2  # bump when what a cached file list holds changes
INSTALLER = b"pip\n"


@dataclass(frozen=True)
class Wheel:
    """One locked wheel as its zip has it."""

    name: str
    version: str
    file: str  # the wheel's file name
    sha256: str  # of the wheel
    files: dict[str, tuple[str, int, bool]]  # zip path -> (sha256 as installed, size, executable)
    scripts: dict[str, str]  # console and gui scripts: name -> "module:attr"
    shebang: str = PYTHON  # the interpreter pip ran as
    origin: str = ""  # where the wheel came from when not the lock's python section
    template: str | None = None  # a pip wheel's: the launcher template that pip writes scripts with

    @property
    def what(self) -> str:
        return f"wheel {self.name} {self.version}" + (f" ({self.origin})" if self.origin else "")


@dataclass
class Installed:
    """What the image must hold for the locked wheels of its venvs."""

    paths: dict[str, tuple[str, int, str, str]] = field(default_factory=dict)  # rel -> (type, mode, sha256, source)
    roots: set[str] = field(default_factory=set)  # the wheels' top-level paths: nothing else may be below them
    records: dict[str, tuple[Wheel, str, dict[str, str]]] = field(default_factory=dict)
    # ^ a dist-info's RECORD path -> (its wheel, its site-packages, RECORD row path -> "sha256=...,size",
    #   or "": the image's own file's, for a script no known pip template regenerates)


def record_hash(sha256_hex: str) -> str:
    """A sha256 as RECORD writes it (urlsafe base64, unpadded)."""
    return "sha256=" + base64.urlsafe_b64encode(bytes.fromhex(sha256_hex)).rstrip(b"=").decode()


def launcher(entry: str, template: str, python: str = PYTHON) -> bytes:
    """The console script pip writes for an entry point ("module:attr [extras]") with its launcher
    template (distlib's way: the shebang naming the interpreter pip ran as, then the template)."""
    module, _, attr = entry.split("[", 1)[0].strip().partition(":")
    attr = attr.strip() or "main"
    return (
        f"#!{python}\n" + template % {"module": module.strip(), "import_name": attr.split(".")[0], "func": attr}
    ).encode()


def _assigned(tree: ast.AST, name: str) -> ast.expr | None:
    return next(
        (
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == name for t in n.targets)
        ),
        None,
    )


def script_template(z: zipfile.ZipFile) -> str | None:
    """The launcher template a pip wheel's pip writes console scripts with, read from its own source
    (the way pip's version does it, never a guess from the number): PipScriptMaker's script_template
    where pip sets one (a string, or textwrap.dedent of one), else its vendored distlib's
    SCRIPT_TEMPLATE. None for a wheel that is not pip's."""
    for path, cls, name in (
        ("pip/_internal/operations/install/wheel.py", "PipScriptMaker", "script_template"),
        ("pip/_vendor/distlib/scripts.py", None, "SCRIPT_TEMPLATE"),
    ):
        try:
            tree: ast.AST = ast.parse(z.read(path))
        except (KeyError, SyntaxError):
            continue
        if cls is not None:
            tree = next(
                (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls), ast.Module([], [])
            )
        value = _assigned(tree, name)
        if isinstance(value, ast.Call) and getattr(value.func, "attr", "") == "dedent" and value.args:
            return textwrap.dedent(ast.literal_eval(value.args[0]))
        if value is not None:
            return ast.literal_eval(value)
    return None


def _read(raw: bytes, name: str, version: str, file: str, sha256: str) -> Wheel:
    files: dict[str, tuple[str, int, bool]] = {}
    scripts: dict[str, str] = {}
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        for info in z.infolist():
            if info.is_dir():
                continue
            data = z.read(info)
            parts = info.filename.split("/")
            if (
                len(parts) == 3
                and parts[0].endswith(".data")
                and parts[1] == "scripts"
                and data.startswith(b"#!python")
            ):
                data = f"#!{PYTHON}\n".encode() + data.split(b"\n", 1)[-1]  # pip's fix_script
            files[info.filename] = (
                hashlib.sha256(data).hexdigest(),
                len(data),
                bool((info.external_attr >> 16) & 0o111),
            )
            if len(parts) == 2 and parts[0].endswith(".dist-info") and parts[1] == "entry_points.txt":
                points = configparser.ConfigParser(delimiters=("=",), interpolation=None, strict=False)
                points.optionxform = str  # type: ignore[assignment,method-assign]  # names keep their case
                points.read_string(data.decode())
                for section in ("console_scripts", "gui_scripts"):
                    scripts.update(points[section] if points.has_section(section) else {})
        template = script_template(z)
    return Wheel(name, version, file, sha256, files, scripts, template=template)


def wheel(name: str, entry: fetch.LockedWheel, python: str) -> Wheel:
    """The locked wheel's file list: kept in the user's cache, else read from the wheel fetched by
    its locked SHA-256 (host.fetch checks the bytes against it)."""
    digest = entry.sha256[0]
    listed = user_cache("wheels") / f"{digest}.v{FORMAT}.json"
    try:
        d = json.loads(listed.read_text())
        files = {k: tuple(v) for k, v in d["files"].items()}
        return Wheel(name, entry.version, d["file"], digest, files, d["scripts"], template=d["template"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        raw = fetch.wheels_for({name: entry}, python, user_cache("wheels"))
    except fetch.FetchError as exc:
        raise BuildError(f"the locked wheel {name}=={entry.version} cannot be had: {exc}") from None
    file = next(iter(raw))
    found = _read(raw[file], name, entry.version, file, digest)
    doc = {"file": file, "files": found.files, "scripts": found.scripts, "template": found.template}
    atomic_write(listed, json.dumps(doc).encode())
    return found


def _scheme(w: Wheel, site: str, python: str) -> dict[str, str]:
    """zip path -> the image path pip installs it to (the .dist-info's own RECORD is not copied)."""
    out = {}
    for path in w.files:
        top, _, rest = path.partition("/")
        if top.endswith(".dist-info") and rest == "RECORD":
            continue
        if top.endswith(".data"):
            kind, _, below = rest.partition("/")
            into = {
                "purelib": site,
                "platlib": site,
                "scripts": f"{VENV}/bin",
                "headers": f"{VENV}/include/site/python{python}/{w.name}",
                "data": VENV,
            }.get(kind)
            if into is None:
                raise BuildError(f"{w.file} has {path}: a .data folder pip does not know")
            out[path] = f"{into}/{below}"
        else:
            out[path] = f"{site}/{path}"
    return out


def _console_scripts(w: Wheel, python: str) -> dict[str, str]:
    """The console scripts pip writes for w: its entry points, except that pip names its own after
    the interpreter (pip's get_console_script_specs, as `python -m venv`'s ensurepip --default-pip
    and a plain install both run it): pip, pipX and pipX.Y, its other pipN entries dropped."""
    entry = w.scripts.get("pip")
    if w.name != "pip" or entry is None:
        return w.scripts
    kept = {k: v for k, v in w.scripts.items() if not re.fullmatch(r"pip(\d+(\.\d+)?)?", k)}
    return kept | {"pip": entry, f"pip{python.split('.')[0]}": entry, f"pip{python}": entry}


def installed(wheels: list[Wheel], python: str, template: str | None = None) -> Installed:
    """What pip installing wheels into the venv (CPython python, "3.13") makes. template: the
    launcher template of the pip that runs the install (the venv's own, read from its wheel), which
    regenerates the console scripts; without it (a venv whose pip rocmforge cannot read) the
    scripts are left to the builder stage's record, and RECORD's rows for them must name the
    image's own files."""
    site = f"{VENV}/lib/python{python}/site-packages"
    out = Installed()
    for w in wheels:
        rows: dict[str, str] = {}
        dist_info = ""
        for path, into in _scheme(w, site, python).items():
            sha, size, executable = w.files[path]
            scripts = into.startswith(f"{VENV}/bin/")
            out.paths[into] = ("f", 0o755 if executable or scripts else 0o644, sha, w.what)
            rows[posixpath.relpath(into, site)] = f"{record_hash(sha)},{size}"
            if into.startswith(site + "/"):
                out.roots.add(f"{site}/{into[len(site) + 1 :].split('/')[0]}")
            if path.split("/")[0].endswith(".dist-info"):
                dist_info = f"{site}/{path.split('/')[0]}"
        if not dist_info:
            raise BuildError(f"{w.file} has no .dist-info folder: not a wheel")
        pip = f"pip (installing {w.what})"
        out.paths[f"{dist_info}/INSTALLER"] = ("f", 0o644, hashlib.sha256(INSTALLER).hexdigest(), pip)
        rows[posixpath.relpath(f"{dist_info}/INSTALLER", site)] = (
            f"{record_hash(hashlib.sha256(INSTALLER).hexdigest())},{len(INSTALLER)}"
        )
        out.paths[f"{dist_info}/RECORD"] = ("f", 0o644, "", pip)  # its rows: the rule regenerates them
        for script, entry in sorted(_console_scripts(w, python).items()):
            if template is None:
                rows[posixpath.relpath(f"{VENV}/bin/{script}", site)] = ""
                continue
            text = launcher(entry, template, w.shebang)
            sha = hashlib.sha256(text).hexdigest()
            out.paths[f"{VENV}/bin/{script}"] = ("f", 0o755, sha, f"{pip} (its entry point {script} = {entry})")
            rows[posixpath.relpath(f"{VENV}/bin/{script}", site)] = f"{record_hash(sha)},{len(text)}"
        out.records[f"{dist_info}/RECORD"] = (w, site, rows)
    for rel in list(out.paths):  # the folders pip makes for them, below the venv's own
        parent = rel.rpartition("/")[0]
        while parent.startswith(site + "/") or parent.startswith(f"{VENV}/include/site/"):
            out.paths.setdefault(parent, ("d", 0o755, "", out.paths[rel][3]))
            parent = parent.rpartition("/")[0]
    return out


def venv_pip(deb: debs.DebContents, raw: Callable[[], bytes]) -> Wheel | None:
    """The pip `python -m venv` puts into the venv (ensurepip, from the wheel deb ships in
    usr/share/python-wheels; raw() gives the .deb's bytes), as ensurepip installs it: by that
    pip itself, run as the venv's python3 (venv's own interpreter path, which the scripts' shebang
    names). None when deb ships no pip wheel."""
    name = next((p for p in deb.files if re.fullmatch(r"usr/share/python-wheels/pip-[^/]+\.whl", p)), None)
    if name is None:
        return None
    file = name.rsplit("/", 1)[1]
    listed = user_cache("wheels") / f"{deb.sha256}.{file}.v{FORMAT}.json"
    try:
        d = json.loads(listed.read_text())
        files, scripts, template = {k: tuple(v) for k, v in d["files"].items()}, d["scripts"], d["template"]
    except (OSError, ValueError, KeyError, TypeError):
        members = debs.ar_members(raw())
        data = next(n for n in members if n.startswith("data.tar"))
        with debs.open_tar(data, members[data]) as tf:
            member = next((m for m in tf if debs.rel_path(m.name) == name), None)
            held = tf.extractfile(member) if member is not None else None
            if held is None:
                raise BuildError(f"{deb.package}'s .deb lists {name} and holds no such file") from None
            found = _read(held.read(), "pip", "", file, deb.files[name].sha256)
        files, scripts, template = found.files, found.scripts, found.template
        atomic_write(listed, json.dumps({"files": files, "scripts": scripts, "template": template}).encode())
    version = file.split("-")[1]
    origin = f"in package {deb.package} {deb.version}, installed by ensurepip"
    return Wheel("pip", version, file, deb.files[name].sha256, files, scripts, f"{PYTHON}3", origin, template)
