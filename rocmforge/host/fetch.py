"""Host-side fetching into a content-addressed cache, so Dockerfile builds need no network
beyond apt: pip wheels (by sha256) and git sources (by commit). A CA bundle, when given, is used
here on the host and never enters a build."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Protocol, cast

# Wheels that run on the stack's glibc: trixie has 2.41, jammy 2.35.
PLATFORMS = ["manylinux2014_x86_64"] + [f"manylinux_2_{n}_x86_64" for n in range(17, 36)] + ["linux_x86_64"]
WHEEL_RE = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)-")


class FetchError(Exception):
    pass


class LockedWheel(Protocol):
    """One locked wheel (resolve.lockmodel.PythonFile is one): its version, file name and sha256s."""

    version: str
    file: str
    sha256: list[str]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _pip_download(args: list[str], dest: Path, ca_bundle: Path | None) -> None:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "--no-cache-dir",
        "-q",
        "--only-binary=:all:",
        "-d",
        str(dest),
        *args,
    ]
    if ca_bundle:
        cmd += ["--cert", str(ca_bundle)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_FIND_LINKS")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise FetchError("pip download failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1])


def _target_args(python: str) -> list[str]:
    major, minor = python.split(".")[:2]
    args = [
        "--python-version",
        f"{major}.{minor}",
        "--implementation",
        "cp",
        "--abi",
        f"cp{major}{minor}",
        "--abi",
        "abi3",
        "--abi",
        "none",
    ]
    for p in PLATFORMS:
        args += ["--platform", p]
    return args + ["--platform", "any"]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def resolve_wheels(requirements: dict[str, str], python: str, work: Path, ca_bundle: Path | None = None) -> dict:
    """The full closure of `requirements` for CPython `python` as wheels: name → version, file, sha256."""
    with tempfile.TemporaryDirectory(dir=_mk(work), prefix="resolve-") as tmp:
        _pip_download(
            [f"{k}=={v}" for k, v in sorted(requirements.items())] + _target_args(python), Path(tmp), ca_bundle
        )
        out = {}
        for wheel in sorted(Path(tmp).glob("*.whl")):
            m = WHEEL_RE.match(wheel.name)
            if m is None:  # pip names every wheel it writes name-version-tags.whl
                raise FetchError(f"pip download left {wheel.name}, which is not a wheel's file name")
            out[_canonical(m.group("name"))] = {
                "version": m.group("version"),
                "file": wheel.name,
                "sha256": [_sha256(wheel)],
            }
            store(work, wheel)
        return dict(sorted(out.items()))


def _mk(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


def cache_dir(work: Path) -> Path:
    """The content-addressed cache under work (each file named by its sha256), created when missing."""
    return _mk(work / "cache" / "sha256")


def store(work: Path, path: Path) -> str:
    """Copy a file into the cache under its sha256. Written beside and renamed into place, so a
    concurrent build or an interrupted copy never leaves a partial file under a digest name; an
    entry whose bytes no longer match its name is replaced."""
    digest = _sha256(path)
    dest = cache_dir(work) / digest
    if not dest.exists() or _sha256(dest) != digest:
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{digest[:12]}-")
        try:
            with os.fdopen(fd, "wb") as out, open(path, "rb") as src:
                shutil.copyfileobj(src, out)
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return digest


def _cached_bytes(cached: Path, digest: str) -> tuple[bytes | None, str | None]:
    """(bytes, None) when the cache holds the wheel intact; (None, actual sha256) when its file is
    corrupt, which is then removed; (None, None) when it is not there. The hash is taken of the
    bytes returned, so what goes into the build is what was checked."""
    try:
        data = cached.read_bytes()
    except FileNotFoundError:
        return None, None
    actual = hashlib.sha256(data).hexdigest()
    if actual == digest:
        return data, None
    cached.unlink(missing_ok=True)
    return None, actual


def _download_wheel(name: str, entry: LockedWheel, python: str, work: Path, ca_bundle: Path | None) -> None:
    with tempfile.TemporaryDirectory(dir=_mk(work), prefix="fetch-") as tmp:
        _pip_download(["--no-deps", f"{name}=={entry.version}"] + _target_args(python), Path(tmp), ca_bundle)
        for wheel in Path(tmp).glob("*.whl"):
            if _sha256(wheel) in entry.sha256:
                store(work, wheel)


def wheels_for(
    locked: Mapping[str, LockedWheel], python: str, work: Path, ca_bundle: Path | None = None
) -> dict[str, bytes]:
    """The locked wheels as {file name: bytes}, from the cache or downloaded and verified. A cached
    wheel whose bytes do not match its sha256 is never used: it is removed and fetched again."""
    files: dict[str, bytes] = {}
    for name, entry in sorted(locked.items()):
        digest = entry.sha256[0]
        cached = cache_dir(work) / digest
        data, corrupt = _cached_bytes(cached, digest)
        if data is None:
            what = f"{name}=={entry.version}"
            why = (
                (
                    f"{what}: the cached wheel {cached} was corrupt (sha256 {corrupt}, expected {digest}) "
                    "and was removed; "
                )
                if corrupt
                else ""
            )
            try:
                _download_wheel(name, entry, python, work, ca_bundle)
            except FetchError as exc:
                raise FetchError(f"{why}fetching it again failed: {exc}" if why else str(exc)) from None
            data, _ = _cached_bytes(cached, digest)
            if data is None:
                raise FetchError(f"{why}{what}: no downloadable wheel has the locked sha256 {digest}")
        files[entry.file] = data
    return files


MIRRORS_ENV = "ROCMFORGE_GIT_MIRRORS"


def git_mirrors() -> list[tuple[str, str]]:
    """(upstream prefix, mirror prefix) pairs from $ROCMFORGE_GIT_MIRRORS ("UPSTREAM=MIRROR ...")."""
    pairs = []
    for item in os.environ.get(MIRRORS_ENV, "").replace(",", " ").split():
        upstream, sep, mirror = item.partition("=")
        if not sep or not upstream or not mirror:
            raise FetchError(
                f"${MIRRORS_ENV}: {item!r} is not UPSTREAM=MIRROR "
                "(e.g. https://github.com/=file:///srv/git/github.com/)"
            )
        pairs.append((upstream, mirror))
    return pairs


def git_env() -> dict[str, str]:
    """The environment for every git call: no prompts, and the mirrors as git's own
    url.<mirror>.insteadOf rewrites (a user's ~/.gitconfig rewrites apply as well), so URLs in
    the matrix, the lock and the manifest stay the upstream ones."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    pairs = git_mirrors()
    if pairs:
        base = int(env.get("GIT_CONFIG_COUNT", "0") or 0)
        for i, (upstream, mirror) in enumerate(pairs, start=base):
            env[f"GIT_CONFIG_KEY_{i}"] = f"url.{mirror}.insteadOf"
            env[f"GIT_CONFIG_VALUE_{i}"] = upstream
        env["GIT_CONFIG_COUNT"] = str(base + len(pairs))
    return env


def mirror_of(url: str) -> str | None:
    """Where git will really fetch `url` from, when a rocmforge mirror rewrites it."""
    best = max((p for p in git_mirrors() if url.startswith(p[0])), key=lambda p: len(p[0]), default=None)
    return best[1] + url[len(best[0]) :] if best else None


def _where(url: str) -> str:
    mirror = mirror_of(url)
    return f"{url} (through the mirror {mirror})" if mirror else url


def ls_remote(url: str, ref: str, timeout: int = 60) -> str:
    """The commit a branch or tag points at now."""
    env = git_env()
    try:
        proc = subprocess.run(
            ["git", "ls-remote", url, ref, f"{ref}^{{}}"], capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired:
        raise FetchError(f"{_where(url)} did not answer within {timeout}s") from None
    if proc.returncode != 0:
        why = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "git ls-remote failed"
        raise FetchError(f"{_where(url)} is not reachable: {why}")
    refs = {name: sha for sha, name in (line.split("\t") for line in proc.stdout.splitlines() if "\t" in line)}
    for candidate in (f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}", f"refs/heads/{ref}", ref):
        if candidate in refs:
            return refs[candidate]
    raise FetchError(f"{_where(url)} has no branch or tag {ref!r}")


def source_tree(url: str, commit: str, work: Path) -> dict[str, bytes]:
    """The files of `url` at exactly `commit` (verified), as {relative path: bytes}."""
    key = hashlib.sha256(url.encode()).hexdigest()[:16]
    repo = work / "cache" / "git" / key
    env = git_env()

    def git(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=check)

    if not repo.exists():
        _mk(repo.parent)
        proc = subprocess.run(
            ["git", "clone", "--bare", "--quiet", url, str(repo)], capture_output=True, text=True, env=env
        )
        if proc.returncode != 0:
            shutil.rmtree(repo, ignore_errors=True)
            raise FetchError(f"cannot clone {_where(url)}: {proc.stderr.strip()[-300:]}")
    if git("cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode != 0:
        git("fetch", "--quiet", "origin", "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*", check=False)
    if git("cat-file", "-e", f"{commit}^{{commit}}", check=False).returncode != 0:
        raise FetchError(f"{_where(url)} has no commit {commit}")
    with tempfile.TemporaryDirectory(dir=_mk(work), prefix="src-") as tmp:
        _unpack(repo, commit, Path(tmp))
        files = {p.relative_to(tmp).as_posix(): p.read_bytes() for p in sorted(Path(tmp).rglob("*")) if p.is_file()}
    files[".rocmforge-commit"] = (commit + "\n").encode()
    return files


def _unpack(repo: Path, commit: str, dest: Path) -> None:
    """`git archive | tar -x`, both processes our own: through a shell, a SIGTERM or Ctrl-C kills
    only the shell, and git and tar would go on writing into a folder being removed."""
    git = subprocess.Popen(["git", "-C", str(repo), "archive", "--format=tar", commit], stdout=subprocess.PIPE)
    archive = cast(IO[bytes], git.stdout)  # stdout=PIPE: Popen always opens it
    try:
        subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive, check=True)
    finally:
        archive.close()  # tar is done or gone: git must not wait on a full pipe
        if git.poll() is None and sys.exc_info()[0] is not None:
            git.kill()
        git.wait()
    if git.returncode != 0:
        raise subprocess.CalledProcessError(git.returncode, git.args)
