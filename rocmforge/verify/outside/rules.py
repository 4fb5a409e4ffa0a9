"""The rules of the generated files' list (generated.py), over one image: each judges a file by
regenerating it from the image's sources and comparing, or by matching it to a source."""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from rocmforge.shared import packagedata
from rocmforge.verify.outside.declared import Declared
from rocmforge.verify.outside.formats import control_fields, divert_calls, ld_cache_entries, resolve
from rocmforge.verify.outside.generated import MADE_BY_SCRIPTS, REMOVED_BY_BUILD, Verdict, entry
from rocmforge.verify.outside.piprules import PipRules

if TYPE_CHECKING:
    from rocmforge.verify.outside.expected import Expected, Want
    from rocmforge.verify.outside.imagefs import Have


class Rules(PipRules):
    """The generated files' rules over one image: files (what it holds), base (what its base holds),
    exp (what its sources say); contents(rel) reads a small generated file from the image's layers."""

    def __init__(
        self,
        files: dict[str, Have],
        base: dict[str, Have],
        exp: Expected,
        contents: Callable[[str], bytes | None] = lambda rel: None,
        base_contents: Callable[[str], bytes | None] = lambda rel: None,
    ):
        self.files, self.base, self.exp, self.contents = files, base, exp, contents
        self.base_contents = base_contents
        self._later: list[str] = []
        self._declared: Declared | None = None

    @property
    def declared(self) -> Declared:
        if self._declared is None:  # reads the packages' declarations: only when a path needs them
            self._declared = Declared(self.files, self.exp, self.contents)
        return self._declared

    # -- what the accounting asks ----------------------------------------------------------------

    def owned_by_rule(self, rel: str) -> bool:
        return entry(rel) is not None

    def judge(self, rel: str, have: Have) -> Verdict | None:
        e = entry(rel)
        if e is None:
            found = self.declared.judge(rel, have)
            return Verdict(found[0], found[1] is None, found[1] or "") if found else None
        why = getattr(self, e.check)(rel, have)
        return Verdict(e.rule, why is None, why or "")

    def implied_folder(self, rel: str, have: Have) -> bool:
        """A folder no source lists that holds something accounted for (a COPY or a package makes
        its parents; byte-compiling makes __pycache__), root's and 0755."""
        if (have.uid, have.gid, have.mode) != (0, 0, 0o755):
            return False
        return (
            rel.endswith("/__pycache__")
            or any(p.startswith(rel + "/") for p in self.exp.paths)
            or self.declared.declares_below(rel)
            or any(p.startswith(rel + "/") and entry(p) is not None for p in self.files)
        )

    def mode_set_by_declaration(self, rel: str, have: Have) -> bool:
        """A packaged path whose mode a tmpfiles.d line of an installed package sets."""
        return self.declared.tmpfiles_mode(rel, have)

    def absence_excused(self, rel: str, want: Want) -> str | None:
        """Why a packaged path may be missing: the prune step removes it (decided here by its own
        logic over the .deb's names, never by the image's record)."""
        if not self.exp.pruned or not self.exp.keep_archs:
            return None
        perarch = packagedata.probe("perarch")  # the prune step's own logic, run on the host's copy
        folder, _, name = rel.rpartition("/")
        kind = perarch.data_dir_kind("/" + folder)
        if kind is None:
            return None
        arch = perarch.file_arch(name, kind)
        return "pruned" if arch is not None and arch not in self.exp.keep_archs else None

    def removal_excused(self, rel: str) -> bool:
        return any(re.fullmatch(p, rel) for p in REMOVED_BY_BUILD) or rel in self.exp.removed

    def whole_image_findings(self) -> list[str]:
        return self._later

    # -- the rules ---------------------------------------------------------------------------------

    def _text(self, rel: str) -> str | None:
        data = self.contents(rel)
        return None if data is None else data.decode(errors="replace")

    def dpkg_status(self, rel: str, have: Have) -> str | None:
        text = self._text(rel)
        if text is None:
            return "cannot be read from the image's layers"
        seen: dict[str, str] = {}
        for block in text.strip("\n").split("\n\n"):
            fields = control_fields(block)
            name, version, status = fields.get("Package", ""), fields.get("Version", ""), fields.get("Status", "")
            if status != "install ok installed":
                continue
            seen[name] = version
            deb = self.exp.packages.get(name)
            if deb is None:
                if rel.endswith("-old"):
                    continue
                if self.exp.all_packages.get(name) != version:
                    return f"lists {name} {version}, which the lock does not install"
                continue  # a package of the base at its base version: the base's stanza
            control = control_fields(deb.control.get("control", b"").decode(errors="replace"))
            for k, v in control.items():
                if fields.get(k) != v:
                    return f"{name}'s {k} is {fields.get(k)!r}, its .deb says {v!r}"
            for line in fields.get("Conffiles", "").splitlines():
                parts = line.split()
                if len(parts) < 2 or parts[1] in ("newconffile",) or "obsolete" in parts[2:]:
                    continue
                f = deb.files.get(parts[0].lstrip("/"))
                if f is None or f.type != "f":
                    return f"{name} lists conffile {parts[0]}, which its .deb does not ship"
                if parts[1] != f.md5:
                    return f"{name}'s conffile {parts[0]}: md5 {parts[1]} is not the .deb's"
        if not rel.endswith("-old"):
            wrong = sorted(f"{n} {v}" for n, v in self.exp.all_packages.items() if seen.get(n) != v) + sorted(
                f"{n} {v} (extra)" for n, v in seen.items() if n not in self.exp.all_packages
            )
            if wrong:
                return "installed packages differ from the lock: " + ", ".join(wrong[:10])
        return None

    def dpkg_info(self, rel: str, have: Have) -> str | None:
        name = rel.rsplit("/", 1)[1]
        pkg, _, ext = name.rpartition(".")
        pkg = pkg.split(":", 1)[0]
        deb = self.exp.packages.get(pkg)
        if deb is None:
            old = self.base.get(rel)
            if old is not None and old.brief() == have.brief():
                return None
            if pkg in self.exp.base_packages and self.exp.all_packages.get(pkg) == self.exp.base_packages[pkg]:
                return f"changed from the base's, and {pkg} was not reinstalled"
            return f"belongs to no package the build installs ({pkg})"
        if ext == "list":
            text = self._text(rel)
            want = {"/."} | {"/" + p for p in deb.files}
            got = set((text or "").splitlines())
            return None if got == want else f"does not list {pkg}'s files as its .deb has them"
        member = deb.control.get(ext)
        if member is None:
            return f"{pkg}'s .deb has no control member {ext}"
        return None if hashlib.sha256(member).hexdigest() == have.data else f"differs from {pkg}'s .deb control {ext}"

    def dpkg_state(self, rel: str, have: Have) -> str | None:
        text = self._text(rel) if have.type == "f" else ""
        for line in (text or "").splitlines():
            words = line.split()
            pkgs = [w.split("/", 1)[0].split(":", 1)[0] for w in words[1:]]  # "base-files/noawait"
            if any(p not in self.exp.all_packages for p in pkgs):
                return f"names a package the image does not hold: {line!r}"
        return None

    def ld_so_cache(self, rel: str, have: Have) -> str | None:
        data = self.contents(rel)
        if data is None:
            return "cannot be read from the image's layers"
        entries = ld_cache_entries(data)
        if entries is None:
            return "is not a glibc ld.so.cache the rule can read"
        for key, path in entries:
            target = path.lstrip("/")
            if resolve(self.files, target) is None:
                return f"maps {key} to {path}, which the image does not hold"
            if target.rsplit("/", 1)[1] != key:
                return f"maps {key} to {path}, a file of another name"
        return None

    def pyc(self, rel: str, have: Have) -> str | None:
        folder, _, name = rel.rpartition("/__pycache__/")
        source = f"{folder}/{name.split('.', 1)[0]}.py"
        src = self.files.get(resolve(self.files, source) or "")
        if src is None or src.type != "f":
            return f"has no source {source} beside it"
        data = self.contents(rel)
        if data is None or len(data) < 16:
            return "cannot be read from the image's layers"
        (flags,) = struct.unpack("<I", data[4:8])
        if flags & 1:
            return None  # hash-based: its header holds the source's hash, which the loader checks
        (size,) = struct.unpack("<I", data[12:16])
        return None if size == src.size & 0xFFFFFFFF else f"records a source of {size} bytes; /{source} has {src.size}"

    def apt_states(self, rel: str, have: Have) -> str | None:
        for block in (self._text(rel) or "").strip("\n").split("\n\n"):
            name = control_fields(block).get("Package")
            if name and name not in self.exp.all_packages:
                return f"names {name}, which the image does not hold"
        return None

    def debconf(self, rel: str, have: Have) -> str | None:
        for block in (self._text(rel) or "").strip("\n").split("\n\n"):
            owners = control_fields(block).get("Owners", "")
            name = control_fields(block).get("Name")
            for owner in filter(None, (o.strip() for o in owners.split(","))):
                # a package (libc6:amd64), a question its package registered (base-passwd/group-add), or
                # the question a template is registered for (its own name)
                if owner != name and owner.split("/", 1)[0].split(":", 1)[0] not in self.exp.all_packages:
                    return f"{control_fields(block).get('Name')} is owned by {owner}, which the image does not hold"
        return None

    def alternative_link(self, rel: str, have: Have) -> str | None:
        if have.type != "l":
            return "is not a symlink"
        target = have.data.lstrip("/")
        if target not in self.files or self.files[target].type == "d":
            return f"points to {have.data}, which the image does not hold"
        admin = self._text("var/lib/dpkg/alternatives/" + rel.rsplit("/", 1)[1]) or ""
        return (
            None
            if have.data in admin.splitlines()
            else f"points to {have.data}, which update-alternatives never registered"
        )

    def alternative_admin(self, rel: str, have: Have) -> str | None:
        for line in (self._text(rel) or "").splitlines():
            if line.startswith("/") and line.lstrip("/") not in self.files and not line.startswith("/etc/alternatives"):
                return f"registers {line}, which the image does not hold"
        return None

    def diversions(self, rel: str, have: Have) -> str | None:
        lines = (self._text(rel) or "").splitlines()
        old = (self.base_contents(rel) or b"").decode(errors="replace").splitlines()
        kept = {tuple(old[i : i + 3]) for i in range(0, len(old) - 2, 3)}
        for i in range(0, len(lines) - 2, 3):
            path, to, pkg = lines[i : i + 3]
            if (path, to, pkg) in kept:
                continue  # the base's own diversion
            if pkg not in self.exp.all_packages:
                return f"diverts {path} for {pkg}, which the image does not hold"
            scripts = self._scripts(pkg)
            if not any(d.fullmatch(path) and t.fullmatch(to) for d, t in divert_calls(scripts)):
                return f"diverts {path} to {to} for {pkg}, which none of {pkg}'s maintainer scripts does"
        return None

    def script_made(self, rel: str, have: Have) -> str | None:
        pattern = MADE_BY_SCRIPTS[rel]
        pkg = next((p for p in sorted(self.exp.all_packages) if re.fullmatch(pattern, p)), None)
        if pkg is None:
            return f"is made by {pattern}'s maintainer scripts, and the image holds no such package"
        if have.uid != 0 and have.type != "d":
            return f"owner {have.uid}:{have.gid}, a maintainer script of {pkg} makes it root's"
        if have.type == "d" or (have.type == "f" and have.size == 0):
            return None
        if have.type == "l":
            text = self._scripts(pkg)
            # the link's target as the script writes it, or a usr-merge link (lib32 -> usr/lib32) of a
            # folder the script names
            merged = have.data == f"usr/{rel}" and re.search(rf"\b{re.escape(rel)}\b", text) is not None
            named = have.data in text or merged
            return None if named else f"points to {have.data}, which no maintainer script of {pkg} names"
        if have.type != "f":
            return f"is not a file or folder as {pkg}'s maintainer scripts make it"
        deb = self.exp.deb(pkg)
        if any(f.sha256 == have.data for f in deb.files.values()):
            return None
        written = {line.strip() for line in self._scripts(pkg).splitlines()}
        text = self._text(rel) or ""
        missing = [line for line in text.splitlines() if line.strip() and line.strip() not in written]
        return f"holds lines no maintainer script of {pkg} writes: {missing[0]!r}" if missing else None

    def user_db(self, rel: str, have: Have) -> str | None:
        text = self._text(rel)
        if text is None:
            return "cannot be read from the image's layers"
        # a backup (passwd-) holds an earlier state of its file: it started from the base's primary
        old = self.base_contents(rel.rstrip("-"))
        return self.declared.user_lines(rel, old.decode(errors="replace") if old else None, text)

    def journal_catalog(self, rel: str, have: Have) -> str | None:
        if "systemd" not in self.exp.all_packages:
            return "is made by systemd's postinst, and the image does not hold systemd"
        data = self.contents(rel) or b""
        return None if data.startswith(b"RHHHKSLP") else "is not a journal catalog database"

    def _scripts(self, pkg: str) -> str:
        """The maintainer scripts of pkg as its .deb ships them, one text."""
        deb = self.exp.deb(pkg)
        return "\n".join(
            deb.control.get(k, b"").decode(errors="replace")
            for k in ("preinst", "postinst", "prerm", "postrm", "config")
        )

    def prune_record(self, rel: str, have: Have) -> str | None:
        text = self._text(rel)
        try:
            record = json.loads(text or "")
        except ValueError:
            return "is not the prune step's JSON"
        if sorted(record.get("keep") or []) != sorted(self.exp.keep_archs):
            return f"keeps {record.get('keep')}, the target keeps {list(self.exp.keep_archs)}"
        return None
