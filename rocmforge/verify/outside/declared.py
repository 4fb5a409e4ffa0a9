"""Paths a package declares in its own configuration rather than shipping: what systemd-tmpfiles
lines create (folders, symlinks, empty files), the users and groups sysusers.d lines, update-passwd
or maintainer scripts add, the links update-alternatives registers, the certificate store
update-ca-certificates builds, and the unit links deb-systemd-helper enables. Each rule reads the
declaration from the packages the image holds (as their .debs ship them) and the path must be
exactly what it declares."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from rocmforge.verify.outside.formats import elf_soname, resolve

if TYPE_CHECKING:
    from rocmforge.verify.outside.expected import Expected
    from rocmforge.verify.outside.imagefs import Have

_RC_LINK = re.compile(r"^etc/rc[0-6S]\.d/[SK]\d\d(.+)$")
SONAME_LINK = re.compile(r"^(usr/)?lib(64)?(/x86_64-linux-gnu)?/[^/]+\.so(\.\d+)+$")
USER_FILES = re.compile(r"^etc/(passwd|group|shadow|gshadow)-?$")
# What the rules here read from the image (each a file a package ships or a rule checks).
READS = re.compile(
    r"^((usr/lib|etc)/(tmpfiles|sysusers)\.d/[^/]+\.conf|var/lib/dpkg/alternatives/[^/]+|etc/ca-certificates\.conf"
    r"|etc/ssl/certs/ca-certificates\.crt|usr/share/ca-certificates/.+|etc/(passwd|group|shadow|gshadow)-?)$"
)
_TMPFILES = re.compile(r"^(usr/lib|etc)/tmpfiles\.d/[^/]+\.conf$")
_SYSUSERS = re.compile(r"^(usr/lib|etc)/sysusers\.d/[^/]+\.conf$")
_ADDS_USER = re.compile(r"\b(?:adduser|useradd|addgroup|groupadd)\b[^\n]*?\s([a-z_][a-z0-9_-]*)\s*(?:\n|$|;|&|\|)")


class Declared:
    """The declarations of the packages in exp, over the image's files; read(rel) gives a small
    file's bytes from the image's layers."""

    def __init__(self, files: dict[str, Have], exp: Expected, read: Callable[[str], bytes | None]):
        self.files, self.exp, self.read = files, exp, read
        self.tmpfiles: dict[str, tuple[str, str, str]] = {}  # path -> (type, mode, argument)
        self.users: set[str] = set()
        for deb in self._debs():
            for rel, f in deb.files.items():
                if f.type == "f" and (_TMPFILES.match(rel) or _SYSUSERS.match(rel)):
                    self._declarations(rel, self.read(rel))
            scripts = b"\n".join(deb.control.get(k, b"") for k in ("preinst", "postinst", "config"))
            self.users |= set(_ADDS_USER.findall(scripts.decode(errors="replace")))
        self.alternative_links = self._alternative_links()

    def _debs(self):
        return [self.exp.deb(n) for n in sorted(self.exp.all_packages) if self._shipped_here(n)]

    def _shipped_here(self, name: str) -> bool:
        """Packages installed above the base (their .debs are already read); the base's own are
        the base's business, its files being pinned."""
        return name in self.exp.packages

    def _declarations(self, rel: str, data: bytes | None) -> None:
        for line in (data or b"").decode(errors="replace").splitlines():
            words = line.split()
            if not words or words[0].startswith("#"):
                continue
            if _SYSUSERS.match(rel) and len(words) >= 2 and words[0] in ("u", "u!", "g", "m"):
                self.users.add(words[1])
            elif _TMPFILES.match(rel) and len(words) >= 2 and "%" not in words[1] and "*" not in words[1]:
                kind = words[0].rstrip("!-+=~^$")
                mode = words[2].lstrip(":~") if len(words) > 2 else "-"
                self.tmpfiles[words[1].strip("/")] = (kind, mode, words[6] if len(words) > 6 else "-")

    def _alternative_links(self) -> dict[str, str]:
        """Every link path update-alternatives registered (master and slaves) -> its name."""
        out: dict[str, str] = {}
        for rel in self.files:
            if not rel.startswith("var/lib/dpkg/alternatives/"):
                continue
            lines = (self.read(rel) or b"").decode(errors="replace").split("\n")
            name = rel.rsplit("/", 1)[1]
            if len(lines) > 1:
                out[lines[1].strip("/")] = name
            i = 2
            while i + 1 < len(lines) and lines[i]:  # slave (name, link) pairs up to the blank line
                out[lines[i + 1].strip("/")] = lines[i]
                i += 2
        return out

    # -- the rules ----------------------------------------------------------------------------

    def judge(self, rel: str, have: Have) -> tuple[str, str | None] | None:
        """(rule, None when accepted, else why not) for a path some declaration covers; None: none does."""
        link = self._ldconfig_link(rel, have)
        if link is not None:
            return "ldconfig", link or None
        if rel in self.alternative_links:
            want = f"/etc/alternatives/{self.alternative_links[rel]}"
            ok = have.type == "l" and have.data == want
            return "alternatives", None if ok else f"is not the link to {want} update-alternatives registered"
        if rel in self.tmpfiles:
            return "tmpfiles.d", self._tmpfile(rel, have)
        if rel.startswith("etc/ssl/certs/") or rel in ("etc/ca-certificates.conf", "usr/local/share/ca-certificates"):
            return "ca-certificates", self._certificate(rel, have)
        rc = _RC_LINK.match(rel)
        if rc:
            ok = (
                have.type == "l"
                and have.data == f"../init.d/{rc.group(1)}"
                and f"etc/init.d/{rc.group(1)}" in self.exp.paths
            )
            return "update-rc.d", None if ok else f"is not update-rc.d's link to a packaged /etc/init.d/{rc.group(1)}"
        if rel.startswith("etc/systemd/system/"):
            return "systemd-enable", self._unit_link(rel, have)
        if rel.startswith("var/lib/systemd/deb-systemd-helper-enabled/"):
            return "systemd-enable", None if have.type in "fd" else "is not deb-systemd-helper's state file"
        return None

    def _ldconfig_link(self, rel: str, have: Have) -> str | None:
        """ "" when rel is the link ldconfig makes for a library's SONAME: in the library's folder, named
        as the SONAME the packaged library it points to declares; a reason when it claims to be one and
        is not; None when it is no library link."""
        if have.type != "l" or "/" in have.data or not SONAME_LINK.search(rel):
            return None
        folder, _, name = rel.rpartition("/")
        target = f"{folder}/{have.data}"
        if target not in self.exp.paths or self.files.get(target) is None:
            return None
        data = self.read(target)
        if data is None:
            return None
        soname = elf_soname(data)
        return "" if soname == name else f"points to {have.data}, whose SONAME is {soname}, not {name}"

    def declares_below(self, rel: str) -> bool:
        """Whether a tmpfiles.d line declares something inside the folder rel."""
        return any(p.startswith(rel + "/") for p in self.tmpfiles)

    def tmpfiles_mode(self, rel: str, have: Have) -> bool:
        """Whether a packaged path's changed mode is the one a tmpfiles.d line sets on it."""
        return rel in self.tmpfiles and self._tmpfile(rel, have) is None

    def _tmpfile(self, rel: str, have: Have) -> str | None:
        kind, mode, arg = self.tmpfiles[rel]
        if kind in ("d", "D", "e", "v", "q", "Q") and have.type != "d":
            return f"a tmpfiles.d line declares a folder ({kind}), the image has {have.type}"
        if kind == "L" and (have.type != "l" or (arg != "-" and have.data != arg)):
            return f"a tmpfiles.d line declares a symlink to {arg}, the image has {have.type} {have.data!r}"
        if kind in ("f", "F", "w") and (have.type != "f" or have.size not in (0, len(arg.encode()))):
            return "a tmpfiles.d line declares an empty or given file"
        if mode not in ("-", "") and have.type != "l" and int(mode, 8) & 0o7777 != have.mode & 0o7777:
            return f"mode {have.mode:04o}, its tmpfiles.d line says {mode}"
        return None

    def _certificate(self, rel: str, have: Have) -> str | None:
        """update-ca-certificates' store: links to certificates a package ships, and the bundle and
        list made from them."""
        if have.type == "d":
            return None
        if have.type == "l":
            target = resolve(self.files, rel)
            if target and target.startswith("usr/share/ca-certificates/") and target in self.exp.paths:
                return None
            return f"points to {have.data}, not to a certificate a package ships"
        text = (self.read(rel) or b"").decode(errors="replace")
        if rel == "etc/ca-certificates.conf":
            listed = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
            bad = [c for c in listed if f"usr/share/ca-certificates/{c.lstrip('!')}" not in self.exp.paths]
            return f"lists {bad[0]}, which no package ships" if bad else None
        if rel == "etc/ssl/certs/ca-certificates.crt":
            return self._bundle(text)
        return "is a file update-ca-certificates does not make"

    def _bundle(self, text: str) -> str | None:
        conf = (self.read("etc/ca-certificates.conf") or b"").decode(errors="replace").splitlines()
        want = ""
        for c in conf:
            if c and not c.startswith(("#", "!")):
                pem = (self.read(f"usr/share/ca-certificates/{c}") or b"").decode(errors="replace")
                want += pem if pem.endswith("\n") else pem + "\n"
        return None if text == want else "is not the concatenation of the certificates ca-certificates.conf lists"

    def _unit_link(self, rel: str, have: Have) -> str | None:
        if have.type == "d":
            return None
        target = resolve(self.files, rel)
        if have.type == "l" and target and target.startswith("usr/lib/systemd/system/") and target in self.exp.paths:
            return None
        return f"points to {have.data}, not to a unit file a package ships"

    def user_lines(self, rel: str, base_text: str | None, text: str) -> str | None:
        """A user database: the base's lines unchanged, each added one for a user or group a package
        declares (sysusers.d, its maintainer scripts, or base-passwd's master files)."""
        old = {ln.split(":", 1)[0]: ln for ln in (base_text or "").splitlines() if ln}
        for line in text.splitlines():
            name = line.split(":", 1)[0]
            if name in old:
                if old[name] != line:
                    return f"changes the base's entry for {name}"
                continue
            if name not in self.users:
                return f"adds {name}, which no package the build installs declares"
        return None
