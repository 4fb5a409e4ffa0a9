"""A registry base's own apt sources (the vendor lists AMD's rocm/pytorch images ship in
/etc/apt/sources.list.d, some pointing at hosts that no longer answer): what the stack's
`apt_sources` setting does to them, the `apt-get update` every apt step on such a base runs (the
same in a build and in `lock`'s probe), and the message naming the list and host when a source fails.

apt-get update exits 0 when a source does not answer (it warns and goes on), and Ubuntu 20.04's apt
has no `--error-on`: the update's output is read instead, and on a failure every source line is
printed with its file so that the message can name the list that holds the failing host."""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import Protocol

from rocmforge.host import aptmirror

LISTS_DIR = "/etc/apt/sources.list.d"
UPDATE_LOG = "/tmp/rocmforge-apt-update.log"
SOURCE_MARK = "rocmforge-apt-source: "
DEBIAN_HOSTS = ("deb.debian.org",)

# Lines of apt-get update's output that mean a source failed, and the URL each names.
_FAILED_RES = (
    re.compile(r"^Err:\d+ (https?://\S+)"),
    re.compile(r"Failed to fetch (https?://\S+)"),
    re.compile(r"The repository '(https?://\S+)"),
)
_REASON_RE = re.compile(
    r"(Temporary failure resolving '[^']*'|Could not resolve '[^']*'|Could not connect to \S+"
    r"|Connection timed out|Connection failed|\b[45]\d\d\s+[A-Za-z][A-Za-z ]*"
    r"|does not have a Release file|Unable to connect to \S+)"
)
_FAILURE_RE = re.compile(r"^(Err:\d|E: |W: Failed to fetch|W: Some index files failed)", re.M)


class SourcesPolicy(Protocol):
    """A stack's apt_sources as these functions read it (define.schema.AptSources is one)."""

    @property
    def keep(self) -> bool: ...

    @property
    def drop(self) -> list[str]: ...

    @property
    def replace(self) -> dict[str, str]: ...


def policy_script(policy: SourcesPolicy | None) -> str:
    """The shell commands that apply a stack's apt_sources (empty for none or keep)."""
    if policy is None or policy.keep:
        return ""
    parts = [f"rm -f {LISTS_DIR}/{name}" for name in policy.drop]
    for name, line in sorted(policy.replace.items()):
        parts.append(f"printf '%s\\n' '{line}' > {LISTS_DIR}/{name}")
    return " && ".join(parts)


def checked_update_lines(policy: SourcesPolicy | None) -> list[str]:
    """The shell commands (to be joined by &&): the apt_sources policy, then apt-get update failing
    on any failed source, with each source line and its file printed (marked) when one failed."""
    script = policy_script(policy)
    return ([script] if script else []) + [
        # `|| true`: apt-get update's own exit code (100 on some failures) must not stop the chain
        # before the lines below name the lists.
        f"{{ apt-get update -o Acquire::Retries={aptmirror.RETRIES} 2>&1 | tee {UPDATE_LOG} || true; }}",
        f"if grep -qE '^(Err:[0-9]|E: |W: Failed to fetch|W: Some index files failed)' {UPDATE_LOG}; then"
        f" grep -sH '^[[:space:]]*deb' /etc/apt/sources.list {LISTS_DIR}/*.list | sed 's/^/{SOURCE_MARK}/';"
        f" rm -f {UPDATE_LOG}; exit 100; fi",
        f"rm -f {UPDATE_LOG}",
    ]


def checked_update(policy: SourcesPolicy | None) -> str:
    """checked_update_lines as one shell command line."""
    return " && ".join(checked_update_lines(policy))


def describe(policy: SourcesPolicy | None) -> str:
    """The setting in words, for the lock's output and the manifest."""
    if policy is None:
        return "not stated"
    if policy.keep:
        return "keep the base's lists"
    said = [f"drop {', '.join(policy.drop)}"] if policy.drop else []
    said += [f"replace {name} with '{line}'" for name, line in sorted(policy.replace.items())]
    return "; ".join(said)


def record(policy: SourcesPolicy | None) -> dict:
    """What the lock and the manifest record of a policy."""
    if policy is None:
        return {}
    if policy.keep:
        return {"keep": True}
    out: dict = {}
    if policy.drop:
        out["drop"] = list(policy.drop)
    if policy.replace:
        out["replace"] = dict(sorted(policy.replace.items()))
    return out


@dataclass(frozen=True)
class FailedSource:
    url: str
    host: str
    reason: str
    file: str | None  # the list file holding the source, when the output names it


def failed_sources(output: str) -> list[FailedSource]:
    """Every source apt-get update's output reports as failed, once per host, in order."""
    files: dict[str, str] = {}
    for line in output.splitlines():
        if line.startswith(SOURCE_MARK):
            path, _, source = line[len(SOURCE_MARK) :].partition(":")
            for url in re.findall(r"https?://\S+", source):
                files.setdefault(urllib.parse.urlparse(url).hostname or "", path)
    out: dict[str, FailedSource] = {}
    lines = output.splitlines()
    for i, line in enumerate(lines):
        for rx in _FAILED_RES:
            m = rx.search(line)
            if not m:
                continue
            url = m.group(1).rstrip("'")
            host = urllib.parse.urlparse(url).hostname or url
            near = " ".join(lines[i : i + 2])
            reason = _REASON_RE.search(near)
            if host not in out or (reason and out[host].reason == "failed"):
                out[host] = FailedSource(url, host, reason.group(1).strip() if reason else "failed", files.get(host))
            break
    return list(out.values())


def update_failed(output: str) -> bool:
    """Whether apt-get update's output shows a failed source, though apt exits 0 for most."""
    return bool(_FAILURE_RE.search(output))


def failure_message(stack_name: str, output: str, *, mirror: str | None = None) -> str | None:
    """The message for a failed apt-get update on a stack, naming each failed list and host; the
    Debian mirror (and $ROCMFORGE_DEBIAN_MIRROR) only when it is the Debian archive that failed.
    None when the output shows no failed source."""
    failed = failed_sources(output)
    if not failed:
        return None
    debian = set(DEBIAN_HOSTS) | ({urllib.parse.urlparse(mirror).hostname} if mirror else set())
    vendor = [f for f in failed if f.host not in debian]
    if not vendor:
        return aptmirror.unreachable_message(mirror)
    said = []
    for f in vendor:
        where = f"in {f.file}" if f.file else "in the base's apt sources"
        said.append(f"{f.url} (host {f.host}, {where}): {f.reason}")
    names = sorted({(f.file or "").rsplit("/", 1)[-1] for f in vendor if f.file}) or ["<list>"]
    return (
        f"stack {stack_name}: apt source did not answer: {'; '.join(said)}. Set stacks.{stack_name}.apt_sources "
        f"in matrix.yaml: `drop: [{', '.join(names)}]` when no pinned package comes from it, or "
        f'`replace: {{{names[0]}: "deb <pinned URL> <suite> <component>"}}` (for AMD\'s packages e.g. '
        "https://repo.radeon.com/rocm/apt/<version>)"
    )
