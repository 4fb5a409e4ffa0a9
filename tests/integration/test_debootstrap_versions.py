"""One recipe, one base, whichever debootstrap the host has: the Debian 13 stack's base bootstrapped
with the host's own debootstrap (1.0.128 on Debian 12) and with trixie's and sid's (fetched from
the Debian archive, run in place) gives one layer and one image ID."""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

from rocmforge.define.matrix import load_matrix
from rocmforge.host import aptmirror
from rocmforge.resolve import bootstrap
from tests.conftest import ROOT
from tests.integration.conftest import _need

STACK = "debian13-rocm5.7"
# Debian 13's and sid's (frozen snapshot) debootstrap; the host's own is the third.
FETCHED = ("1.0.141", "1.0.145")


def _quiet(_line: str) -> None:
    pass


def _host_version() -> str:
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "debootstrap"], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def _fetched_debootstrap(version: str, into: Path) -> Path:
    """A bin directory whose `debootstrap` is that version, unpacked from the archive's .deb."""
    deb = into / f"debootstrap_{version}_all.deb"
    url = f"{aptmirror.effective()}/pool/main/d/debootstrap/{deb.name}"
    with urllib.request.urlopen(url, timeout=120) as resp, open(deb, "wb") as f:
        shutil.copyfileobj(resp, f)
    tree = into / version
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
    bindir = into / f"bin-{version}"
    bindir.mkdir()
    wrapper = bindir / "debootstrap"
    wrapper.write_text(
        f'#!/bin/sh\nDEBOOTSTRAP_DIR={tree}/usr/share/debootstrap exec {tree}/usr/sbin/debootstrap "$@"\n'
    )
    wrapper.chmod(0o755)
    return bindir


def test_the_base_is_one_image_under_three_debootstraps(tmp_path, monkeypatch):
    if shutil.which("debootstrap") is None or os.geteuid() != 0:
        _need("bootstrapping a base needs debootstrap and root")
    stack = load_matrix(ROOT / "matrix.yaml").stacks[STACK]
    runs = {f"host {_host_version()}": None}
    runs.update({v: _fetched_debootstrap(v, tmp_path) for v in FETCHED})
    results = {}
    host_path = os.environ["PATH"]
    for name, bindir in runs.items():
        monkeypatch.setenv("PATH", f"{bindir}:{host_path}" if bindir else host_path)
        work = tmp_path / f"work-{len(results)}"
        work.mkdir()
        with bootstrap._scratch_dir(work, _quiet) as scratch:
            _, image_id, diff_id = bootstrap.bootstrap_archive(STACK, stack, Path(scratch), _quiet)
        results[name] = (image_id, diff_id)
    print("base per debootstrap:", {k: v[0][:19] for k, v in results.items()})
    assert len(set(results.values())) == 1, results
