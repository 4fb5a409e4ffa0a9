"""Where an image's packages come from, as sources the image cannot edit: a bootstrapped stack's
Debian suite (signed by the host's Debian archive keyring), or a registry base's own apt
configuration read from its layers (pinned by digest), after the stack's apt_sources policy, with
the keys that base trusts."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable

from rocmforge.define.schema import Stack
from rocmforge.host import aptsources
from rocmforge.shared.files import atomic_write
from rocmforge.verify.outside import debs

LISTS = re.compile(r"^etc/apt/(sources\.list|sources\.list\.d/[^/]+\.(list|sources))$")
KEYS = re.compile(
    r"^(etc/apt/trusted\.gpg|etc/apt/trusted\.gpg\.d/[^/]+\.(gpg|asc)|etc/apt/keyrings/[^/]+|usr/share/keyrings/[^/]+)$"
)


def dearmor(data: bytes) -> bytes:
    """An ASCII-armored OpenPGP key as the binary gpgv reads (apt does the same for .asc files)."""
    if not data.lstrip().startswith(b"-----BEGIN PGP"):
        return data
    lines = data.decode(errors="replace").splitlines()
    start = next(i for i, ln in enumerate(lines) if not ln.strip()) + 1  # after the armor headers
    body = [ln for ln in lines[start:] if ln and not ln.startswith(("=", "-----"))]
    return base64.b64decode("".join(body))


def _keyring_file(data: bytes) -> str:
    raw = dearmor(data)
    path = debs.cache_dir() / f"keyring-{hashlib.sha256(raw).hexdigest()[:16]}.gpg"
    if not path.is_file():
        atomic_write(path, raw)
    return str(path)


def _one_line(line: str) -> tuple[str, str, tuple[str, ...], str | None] | None:
    """(uri, suite, components, signed-by) of a `deb` line; None for anything else."""
    words = line.split("#", 1)[0].split()
    if not words or words[0] != "deb":
        return None
    signed_by = None
    if len(words) > 1 and words[1].startswith("["):
        opts = []
        while words[1:] and not words[1].endswith("]"):
            opts.append(words.pop(1))
        opts.append(words.pop(1))
        for o in " ".join(opts).strip("[]").split():
            if o.startswith("signed-by="):
                signed_by = o.split("=", 1)[1]
    if len(words) < 3:
        return None
    return words[1], words[2], tuple(words[3:]) or ("main",), signed_by


def _deb822(text: str) -> list[tuple[str, str, tuple[str, ...], str | None]]:
    out = []
    for block in text.split("\n\n"):
        fields = {
            k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in block.splitlines() if ":" in ln)
        }
        if "deb" not in fields.get("types", "").split():
            continue
        for uri in fields.get("uris", "").split():
            for suite in fields.get("suites", "").split():
                out.append((uri, suite, tuple(fields.get("components", "main").split()), fields.get("signed-by")))
    return out


def for_stack(
    stack: Stack, base_paths: list[str], read: Callable[[set[str]], dict[str, bytes]]
) -> list[debs.AptSource]:
    """The sources of a stack's packages. base_paths: every path of its pinned base; read(paths):
    the bytes of those files as the base holds them."""
    if stack.base.bootstrap:
        return [debs.debian(stack.base.bootstrap.suite)]
    policy = stack.apt_sources
    dropped = set(policy.drop) if policy and not policy.keep else set()
    replaced = dict(policy.replace) if policy and not policy.keep else {}
    wanted = {p for p in base_paths if LISTS.match(p) or KEYS.match(p)}
    files = read(wanted)
    lists: dict[str, str] = {}
    for rel, data in files.items():
        name = rel.rsplit("/", 1)[1]
        if LISTS.match(rel) and name not in dropped:
            lists[rel] = data.decode(errors="replace")
    for name, line in replaced.items():
        lists[f"{aptsources.LISTS_DIR.lstrip('/')}/{name}"] = line + "\n"
    trusted = [_keyring_file(d) for r, d in sorted(files.items()) if r.startswith("etc/apt/trusted.gpg")]
    out: list[debs.AptSource] = []
    for rel, text in sorted(lists.items()):
        entries = _deb822(text) if rel.endswith(".sources") else [e for ln in text.splitlines() if (e := _one_line(ln))]
        for uri, suite, components, signed_by in entries:
            key = signed_by.lstrip("/") if signed_by else None
            keyrings = [_keyring_file(files[key])] if key and key in files else trusted
            out.append(debs.AptSource(uri, suite, components, tuple(keyrings)))
    return out
