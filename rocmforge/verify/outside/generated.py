"""The files an image's build generates instead of unpacking: the one reviewed list, each with the
rule that checks it (regenerate and compare, or match a source). A generated file no rule accepts
is a finding; so is one outside this list. Keep it short: each entry says why it is here."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rocmforge.verify.outside.wheels import VENV


@dataclass(frozen=True)
class Verdict:
    rule: str
    ok: bool
    why: str = ""


@dataclass(frozen=True)
class Entry:
    pattern: re.Pattern
    rule: str  # its name in the figures and the README
    why: str  # why the build generates it, and what the rule checks
    check: str  # the Rules method that judges it


# What packages make instead of unpacking (their maintainer scripts, or their program when it runs
# in the build): path -> the package.
MADE_BY_SCRIPTS = {
    "var/log/apt": "apt",  # apt-get's log folder (normalisation drops the logs themselves)
    # path: the package whose maintainer script makes it (the rule reads that script)
    "etc/inputrc": "readline-common",
    "etc/modules": "kmod",
    "etc/networks": "netbase",
    "etc/python3": "python3",
    "etc/python3/debian_config": "python3",
    "usr/local/lib/python3.13": "python3.13-minimal",
    "usr/local/lib/python3.13/dist-packages": "python3.13-minimal",
    "usr/local/lib/python3.14": "python3.14-minimal",
    "usr/local/lib/python3.14/dist-packages": "python3.14-minimal",
    "var/lib/python": r"python3\.\d+-minimal",
    "var/lib/python/python3.13_installed": "python3.13-minimal",
    "var/lib/python/python3.14_installed": "python3.14-minimal",
    "usr/local/share/ca-certificates": "ca-certificates",
    "lib32": "base-files",  # its usrmerge trigger links /lib32 once /usr/lib32 exists
    "usr/lib/ld-linux.so.2": "libc6-i386",
    "var/cache/apt/archives/lock": "apt",
    "var/cache/apt/archives/partial": "apt",
    "var/cache/debconf/tmp.ci": "debconf",
}

# What every package-installing RUN removes from the base, and why.
# (patterns of paths, as regexes)
REMOVED_BY_BUILD = {
    r"var/lib/apt/lists/.+": "`rm -rf /var/lib/apt/lists/*` after apt-get: the package lists never ship",
    r"var/cache/apt/(archives/[^/]+\.deb|archives/partial/.+|[^/]+\.bin)": "`apt-get clean` after apt-get: a "
    "base that kept its downloaded .debs and apt's caches loses them",
}

GENERATED = (
    Entry(
        re.compile(r"^var/lib/dpkg/status(-old)?$"),
        "dpkg-status",
        "dpkg's database, written as packages install: regenerated from the .debs' control files (each package at "
        "the locked version, installed, its conffiles' md5s those of the .deb's files, its other fields the .deb's)",
        "dpkg_status",
    ),
    Entry(
        re.compile(r"^var/lib/dpkg/info/[^/]+$"),
        "dpkg-info",
        "dpkg's per-package files: <pkg>.list regenerated from the .deb's data.tar, every other one equal to the "
        ".deb's control member of that name",
        "dpkg_info",
    ),
    Entry(
        re.compile(r"^var/lib/dpkg/(triggers/[^/]+|available|lock(-frontend)?|triggers)$"),
        "dpkg-state",
        "dpkg's trigger and lock files: empty, or naming only trigger names and packages the image holds",
        "dpkg_state",
    ),
    Entry(
        re.compile(r"^etc/ld\.so\.cache$"),
        "ld.so.cache",
        "ldconfig's cache of the loader's folders: every entry names a file accounted for here, under its own name",
        "ld_so_cache",
    ),
    Entry(
        re.compile(r"(^|/)__pycache__/[^/]+\.pyc$"),
        "byte-compiled",
        "byte-compiled by a package's postinst (py3compile) or by pip: beside a source accounted for here, and its "
        "header names that source's size (its code is not recompiled here)",
        "pyc",
    ),
    Entry(
        re.compile(r"^var/lib/apt/extended_states$"),
        "apt-auto",
        "apt's record of automatically installed packages: each stanza names a package the image holds",
        "apt_states",
    ),
    Entry(
        re.compile(r"^var/cache/debconf/[^/]+\.dat(-old)?$"),
        "debconf",
        "debconf's database of the packages' configuration questions: each entry is owned by packages the image holds",
        "debconf",
    ),
    Entry(
        re.compile(r"^etc/alternatives/[^/]+$"),
        "alternatives",
        "update-alternatives' links, made by postinst: each points to a file accounted for here, as "
        "/var/lib/dpkg/alternatives/<name> registers",
        "alternative_link",
    ),
    Entry(
        re.compile(r"^var/lib/dpkg/alternatives/[^/]+$"),
        "alternatives",
        "update-alternatives' registry: each alternative it names is a file accounted for here",
        "alternative_admin",
    ),
    Entry(
        re.compile(r"^var/lib/dpkg/diversions$"),
        "diversions",
        "dpkg-divert's registry: each diversion names a package the image holds, and that package's maintainer "
        "scripts name both of its paths",
        "diversions",
    ),
    Entry(
        re.compile("^(" + "|".join(re.escape(p) for p in sorted(MADE_BY_SCRIPTS)) + ")$"),
        "maintainer-script",
        "made by a package's maintainer script, not unpacked: empty, a folder, a copy of one of that package's "
        "files, or text whose every line that script writes",
        "script_made",
    ),
    Entry(
        re.compile(r"^etc/(passwd|group|shadow|gshadow)-?$"),
        "users",
        "the user and group databases (and their backups): the base's entries unchanged, each added one a user or "
        "group a package declares (sysusers.d, its maintainer scripts)",
        "user_db",
    ),
    Entry(
        re.compile(r"^var/lib/systemd/catalog/database$"),
        "journal-catalog",
        "journalctl --update-catalog, run by systemd's postinst, compiles the packaged catalogs: binary, so only "
        "its header is checked",
        "journal_catalog",
    ),
    Entry(
        re.compile(
            rf"^{re.escape(VENV)}/lib/python3\.\d+/site-packages/[^/]+\.dist-info/(INSTALLER|REQUESTED|RECORD|direct_url\.json)$"
        ),
        "pip-install",
        "what pip writes into a distribution's .dist-info as it installs a wheel: for a wheel the lock pins (or the "
        "venv's own pip, from the wheel python3-pip-whl ships), INSTALLER is 'pip', REQUESTED empty, direct_url.json "
        "names the wheel's file and hash, and RECORD lists the wheel's every file with the hash and size read from "
        "the wheel (plus pip's own files and byte-compiled ones); another distribution (a builder stage's wheel): as "
        "its stage recorded it",
        "pip_written",
    ),
    Entry(
        re.compile(rf"^{re.escape(VENV)}/bin/[^/]+$"),
        "venv-bin",
        "the venv's bin, first on PATH: a console script pip writes for an entry point of a wheel the lock pins (or "
        "of the venv's own pip) is regenerated (pip's launcher, run as the venv's python) and compared; the rest "
        "(the venv's interpreter links and activate scripts, torch's twins) as the builder stage recorded it",
        "venv_bin",
    ),
    Entry(
        re.compile(r"^opt/rocmforge/prune/[^/]+\.json$"),
        "prune-record",
        "the prune step's record (perarch.py): regenerated on the host from the .debs' files and the archs kept",
        "prune_record",
    ),
)


def entry(rel: str) -> Entry | None:
    """The list's entry for rel, or None: not a generated file."""
    return next((e for e in GENERATED if e.pattern.search(rel)), None)
