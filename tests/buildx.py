"""The pinned buildx (tests/fixtures/tools/docker-buildx-sid.json: Debian sid's docker-buildx, a
static binary, with the .deb's size and sha256) as a docker CLI plugin, for the tests that build with
BuildKit. It is fetched the way the tools image fetches its pin (nothing is used unless the size and
sha256 match) and unpacked into a docker config folder of its own, `<folder>/cli-plugins/`: a test
points DOCKER_CONFIG there, so nothing of the host's docker set-up changes and a build that names no
builder still finds none. CI installs it before the tests (`.ci/run`):

    python3 -m tests.buildx            # prints the folder (default: the user's cache)
"""

from __future__ import annotations

import io
import os
import sys
import tarfile
import tempfile
from pathlib import Path

from rocmforge.release import toolsimage
from rocmforge.shared.files import user_cache

PIN = Path(__file__).resolve().parent / "fixtures" / "tools" / "docker-buildx-sid.json"


def folder() -> Path:
    """Where the pinned buildx is kept: one folder per pinned .deb, shared by every checkout."""
    pin = toolsimage.load_pin(PIN)
    return user_cache("tools") / f"docker-config-buildx-{pin.debs[0].sha256[:16]}"


def install(log=lambda msg: None) -> Path:
    """The docker config folder whose cli-plugins/ holds the pinned buildx (fetched when absent)."""
    pin = toolsimage.load_pin(PIN)
    config = folder()
    plugin = config / "cli-plugins" / "docker-buildx"
    if plugin.is_file() and os.access(plugin, os.X_OK):
        return config
    plugin.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rocmforge-buildx-", dir=plugin.parent) as tmp:
        deb = toolsimage.fetch_deb(pin.debs[0], Path(tmp) / "buildx.deb", log)
        with tarfile.open(fileobj=io.BytesIO(toolsimage.deb_data(deb))) as tar:
            member = tar.extractfile(f"./{pin.binary}")
            assert member is not None, f"{pin.binary} is not in {deb}"
            staged = Path(tmp) / "docker-buildx"
            staged.write_bytes(member.read())
        staged.chmod(0o755)
        staged.replace(plugin)  # whole or not at all: a run stopped half-way leaves nothing
    log(f"buildx {pin.version} installed in {plugin}")
    return config


if __name__ == "__main__":
    print(install(lambda msg: print(msg, file=sys.stderr)))
