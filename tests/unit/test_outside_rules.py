"""The outside check's pure parts: what an unaccounted path is said to do, how a difference from its
source is worded, and the formats the generated files' rules read (dpkg-divert calls, symlinks,
ld.so.cache, ELF SONAMEs, apt source lines)."""

from __future__ import annotations

import struct

import pytest

from rocmforge.verify.outside import account, aptsrc
from rocmforge.verify.outside.expected import Expected, Want
from rocmforge.verify.outside.formats import divert_calls, elf_soname, ld_cache_entries, resolve
from rocmforge.verify.outside.imagefs import Have


def _exp(paths: dict[str, Want]) -> Expected:
    return Expected(paths, {}, {}, {}, (), False)


PKG = Want("f", 0o755, 0, 0, "a" * 64, "package python3.13-minimal 3.13.5")
PERL = Have("f", 0o755, 0, 0, "p" * 64)


@pytest.mark.parametrize(
    "rel, said",
    [
        ("etc/ld.so.preload", "preloaded into every process"),
        ("etc/ld.so.conf.d/zz.conf", "adds folders to the dynamic loader's search path"),
        ("usr/lib/python3/dist-packages/x.pth", "a .pth file: its import lines run at every Python start"),
        ("usr/local/lib/python3.13/dist-packages/usercustomize.py", "imported at every Python start"),
        ("usr/local/lib/python3.13/dist-packages/x-1.0.dist-info/RECORD", "an extra Python distribution"),
        ("usr/local/bin/python3", "shadows the packaged /usr/bin/python3 on PATH"),
        ("opt/x/libnuma.so.1", "a library named like the packaged /usr/lib/x86_64-linux-gnu/libnuma.so.1"),
        ("opt/x/notes.txt", "no package, wheel or build step accounts for it"),
    ],
)
def test_an_unaccounted_path_says_what_it_does(rel, said):
    exp = _exp({"usr/bin/python3": PKG, "usr/lib/x86_64-linux-gnu/libnuma.so.1": PKG})
    have = Have("f", 0o755, 0, 0, "b" * 64)
    assert account.effect(rel, have, exp, ["usr/local/bin", "usr/bin"]) == said


def test_every_difference_from_the_source_is_named():
    assert "mode 4755 (setuid)" in account._differs(PKG, Have("f", 0o4755, 0, 0, "a" * 64))
    assert "owner 1000:0" in account._differs(PKG, Have("f", 0o755, 1000, 0, "a" * 64))
    assert "content differs" in account._differs(PKG, Have("f", 0o755, 0, 0, "c" * 64))
    assert "is a symlink" in account._differs(PKG, Have("l", 0o777, 0, 0, "x"))
    assert "extended attributes" in account._differs(PKG, Have("f", 0o755, 0, 0, "a" * 64, xattrs=b"cap"))
    assert account._differs(PKG, Have("f", 0o755, 0, 0, "a" * 64)) is None


def test_accounting_fails_an_extra_file_and_a_missing_one_and_keeps_the_base():
    files = {
        "usr": Have("d", 0o755, 0, 0, ""),
        "usr/bin": Have("d", 0o755, 0, 0, ""),
        "usr/bin/kept": Have("f", 0o644, 0, 0, "k" * 64),
        "usr/bin/extra": Have("f", 0o755, 0, 0, "e" * 64),
    }
    base = {k: v for k, v in files.items() if k != "usr/bin/extra"}
    exp = _exp({"usr/bin/python3": PKG})
    acc = account.account(files, base, exp, "/usr/bin")
    assert "/usr/bin/python3: missing; package python3.13-minimal 3.13.5 ships it" in acc.findings
    assert "/usr/bin/extra: a program on PATH" in acc.findings
    assert acc.checked.get("base") == 3


def test_a_hard_link_no_package_makes_names_both_paths():
    su = Have("f", 0o4755, 0, 0, "s" * 64)
    files = {"usr/bin/su": su, "tmp/su": Have("f", 0o4755, 0, 0, "s" * 64, link="usr/bin/su")}
    files |= {"usr/bin/perlbug": PERL, "usr/bin/perlthanks": Have("f", 0o755, 0, 0, "p" * 64, link="usr/bin/perlbug")}
    exp = _exp({"usr/bin/su": Want("f", 0o4755, 0, 0, "s" * 64, "package login 1")})
    exp.paths |= {
        p: Want("f", 0o755, 0, 0, "p" * 64, "package perl 5.40") for p in ("usr/bin/perlbug", "usr/bin/perlthanks")
    }
    exp.links = {"usr/bin/perlbug": "usr/bin/perlbug", "usr/bin/perlthanks": "usr/bin/perlbug"}
    acc = account.account(files, {}, exp, "/usr/bin")
    assert acc.checked.get("hard-link") == 1  # the package's own pair, in the other order than its tar
    assert "/tmp/su: a hard link of /usr/bin/su (one file, two names), which no package links" in acc.findings
    base = {"usr/bin/su": su, "tmp/su": files["tmp/su"]}
    assert not [f for f in account.account(files, base, exp, "/usr/bin").findings if "hard link" in f]


def test_dpkg_divert_calls_are_read_in_any_option_order_with_variables():
    calls = divert_calls(
        'dpkg-divert --quiet --add --no-rename --divert "/lib64/ld.so.2.usr-is-merged" "/lib64/ld.so.2"\n'
        'dpkg-divert --package p --no-rename --divert "/lib/x/$lib.usr-is-merged" --add "/lib/x/$lib" || true\n'
        "dpkg-divert --remove /not/added\n"
    )
    assert len(calls) == 2
    assert calls[0][0].fullmatch("/lib64/ld.so.2") and calls[0][1].fullmatch("/lib64/ld.so.2.usr-is-merged")
    assert calls[1][0].fullmatch("/lib/x/libreadline.so.8") and calls[1][1].fullmatch(
        "/lib/x/libreadline.so.8.usr-is-merged"
    )


def test_symlinks_are_followed_inside_the_image():
    files = {
        "lib": Have("l", 0o777, 0, 0, "usr/lib"),
        "usr": Have("d", 0o755, 0, 0, ""),
        "usr/lib": Have("d", 0o755, 0, 0, ""),
        "usr/lib/a.so.1": Have("l", 0o777, 0, 0, "a.so.1.2"),
        "usr/lib/a.so.1.2": Have("f", 0o644, 0, 0, "x"),
        "loop": Have("l", 0o777, 0, 0, "loop"),
    }
    assert resolve(files, "lib/a.so.1") == "usr/lib/a.so.1.2"
    assert resolve(files, "lib/missing.so") is None
    assert resolve(files, "loop") is None


def _ld_cache(entries: list[tuple[str, str]]) -> bytes:
    strings, offsets = b"", []
    header = 48 + 24 * len(entries)
    for key, value in entries:
        offsets.append((header + len(strings), header + len(strings) + len(key) + 1))
        strings += key.encode() + b"\0" + value.encode() + b"\0"
    body = b"".join(struct.pack("<iIIIQ", 0x303, k, v, 0, 0) for k, v in offsets)
    head = b"glibc-ld.so.cache1.1" + struct.pack("<II", len(entries), len(strings)) + bytes(20)
    return head + body + strings


def test_ld_so_cache_entries_are_read():
    data = _ld_cache([("libnuma.so.1", "/usr/lib/x86_64-linux-gnu/libnuma.so.1")])
    assert ld_cache_entries(data) == [("libnuma.so.1", "/usr/lib/x86_64-linux-gnu/libnuma.so.1")]
    assert ld_cache_entries(b"not a cache") is None


def _elf_with_soname(name: bytes) -> bytes:
    strtab = b"\0" + name + b"\0"
    phoff, dyn_off, str_off = 64, 64 + 2 * 56, 64 + 2 * 56 + 48
    head = (
        b"\x7fELF"
        + bytes([2, 1, 1])
        + bytes(9)
        + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, phoff, 0, 0, 64, 56, 2, 0, 0, 0)
    )
    load = struct.pack("<IIQQQQQQ", 1, 4, 0, 0, 0, 4096, 4096, 4096)
    dynamic = struct.pack("<IIQQQQQQ", 2, 4, dyn_off, dyn_off, dyn_off, 48, 48, 8)
    dyn = struct.pack("<qQqQqQ", 5, str_off, 14, 1, 0, 0)
    return head + load + dynamic + dyn + strtab


def test_elf_soname_is_read_from_the_dynamic_section():
    assert elf_soname(_elf_with_soname(b"libmpi_abi.so.1")) == "libmpi_abi.so.1"
    assert elf_soname(b"#!/bin/sh\n") is None


def test_apt_source_lines_and_armored_keys():
    assert aptsrc._one_line(
        "deb [arch=amd64 signed-by=/usr/share/keyrings/rocm.gpg] https://repo.radeon.com/rocm/apt/6.4 jammy main"
    ) == (
        "https://repo.radeon.com/rocm/apt/6.4",
        "jammy",
        ("main",),
        "/usr/share/keyrings/rocm.gpg",
    )
    assert aptsrc._one_line("# deb http://x y z") is None
    assert aptsrc._deb822("Types: deb\nURIs: http://deb.debian.org/debian\nSuites: sid\nComponents: main\n") == [
        ("http://deb.debian.org/debian", "sid", ("main",), None)
    ]
    armored = b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nAAEC\n=abcd\n-----END PGP PUBLIC KEY BLOCK-----\n"
    assert aptsrc.dearmor(armored) == b"\x00\x01\x02"
