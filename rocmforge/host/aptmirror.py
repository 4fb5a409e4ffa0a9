"""The one Debian mirror setting (ROCMFORGE_DEBIAN_MIRROR) for every apt access: debootstrap,
every apt step of a build, `lock` and `lock --check`.

Images name only the canonical archive (their sources say deb.debian.org), so the same pins
fetched through another mirror give the same image: the mirror reaches apt through a build
argument that the normaliser drops from the history, and apt reads a rewritten copy of the
sources from /tmp for the length of one RUN."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from rocmforge.shared.errors import UserError

if TYPE_CHECKING:
    from collections.abc import Mapping

ENV = "ROCMFORGE_DEBIAN_MIRROR"
CANONICAL = "http://deb.debian.org/debian"
ARG = ENV  # the build argument has the setting's name, so a Dockerfile run by hand reads the same way
RETRIES = 3  # apt's own retry count per file (with its backoff): bounded, then the build fails

_URL_RE = re.compile(r"^https?://[A-Za-z0-9._~:/%@+-]*[A-Za-z0-9._~/%+-]$")

# A POSIX shell fragment (no trailing newline) that points apt at $ROCMFORGE_DEBIAN_MIRROR when it
# is set: every source line naming the canonical archive is copied to /tmp with the mirror in its
# place and APT_CONFIG names the copy. The caller's RUN removes SCRATCH before it ends, so nothing
# of the mirror reaches a layer.
SCRATCH = "/tmp/rocmforge-apt"
SETUP = (
    f'if [ -n "${{{ENV}:-}}" ]; then'
    f" mkdir -p {SCRATCH}/parts"
    f" && for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do"
    f' if [ -f "$f" ]; then sed -E "s#https?://deb\\.debian\\.org/debian/?([[:space:]]|\\$)#${{{ENV}}}\\1#g"'
    f' "$f" > "{SCRATCH}/parts/${{f##*/}}"; fi; done'
    f' && printf \'Dir::Etc::SourceList "/dev/null";\\nDir::Etc::SourceParts "{SCRATCH}/parts";\\n\''
    f" > {SCRATCH}/apt.conf"
    f" && export APT_CONFIG={SCRATCH}/apt.conf; fi"
)
# `apt-get update` exits 0 when a source cannot be reached (it warns and keeps old lists); a pinned
# install must not go on without fresh lists.
UPDATE = f"apt-get update -o Acquire::Retries={RETRIES} --error-on=any"


def from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """The mirror URL, or None for the canonical archive. Raises UserError for a value apt or the
    shell could misread (spaces, quotes, no scheme)."""
    value = (os.environ if environ is None else environ).get(ENV, "").strip()
    if not value:
        return None
    if not _URL_RE.match(value):
        raise UserError(
            f"{value!r} is not a mirror URL (http://HOST[:PORT]/PATH or https://…; "
            "every build container must reach it)",
            field=f"${ENV}",
        )
    return value.rstrip("/")


def effective(environ: Mapping[str, str] | None = None) -> str:
    """The archive apt uses: the mirror, or the canonical one."""
    return from_env(environ) or CANONICAL


def container_env(environ: Mapping[str, str] | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """For apt in a throw-away container (lock's apt sessions): the environment of the one command that
    runs SETUP and UPDATE, and of every later apt command there."""
    mirror = from_env(environ)
    if not mirror:
        return {}, {}
    return {ENV: mirror}, {"APT_CONFIG": f"{SCRATCH}/apt.conf"}


def unreachable_hint(output: str) -> bool:
    """Whether apt's output says an archive did not answer (as opposed to a missing pin)."""
    return any(
        s in output
        for s in (
            "Could not connect",
            "Unable to connect",
            "Temporary failure resolving",
            "Could not resolve",
            "Connection failed",
            "Connection timed out",
        )
    )


def unreachable_message(mirror: str | None) -> str:
    """What to tell the user when apt could not reach the Debian archive, or the mirror set in its place."""
    where = f"the Debian mirror {mirror} (${ENV})" if mirror else f"the Debian archive {CANONICAL}"
    return (
        f"{where} did not answer after {RETRIES} retries per file; check the URL and the network, "
        f"or set ${ENV} to a mirror this machine reaches"
    )
