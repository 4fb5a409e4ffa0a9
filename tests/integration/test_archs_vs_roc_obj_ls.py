"""probes/archs.py against ROCm's own roc-obj-ls on Debian's real ROCm 5.7 libraries.

Runs inside rocmforge/hip-devel:debian13-rocm5.7 (built here first when it is missing): the probe
is copied into a container and run with the container's python3, as in production.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from rocmforge.render import archprune
from rocmforge.shared.packagedata import PROBES
from rocmforge.verify.readers import archs

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
PROBE = PROBES / "archs.py"
IMAGE = "rocmforge/hip-devel:debian13-rocm5.7"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
HOST_LIBS = ("librocblas.so", "librocsolver.so.0", "libamdhip64.so.5")
GFX_RE = re.compile(r"--(gfx[0-9a-z-]+?)(?::|$)")


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _exec(container, cmd: list[str]) -> tuple[int, str, str]:
    rc, (out, err) = container.exec_run(cmd, demux=True)
    return rc, (out or b"").decode(errors="replace"), (err or b"").decode(errors="replace")


@pytest.fixture(scope="module")
def container(docker_client, request):
    import docker

    try:
        docker_client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        request.getfixturevalue("session_images")  # remove what this session builds
        proc = subprocess.run(
            [sys.executable, "build.py", "build", "--target", "hip-devel"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=3600,
        )
        assert proc.returncode == 0, f"building {IMAGE} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        docker_client.images.get(IMAGE)
    c = docker_client.containers.run(
        IMAGE, ["sleep", "infinity"], detach=True, network_disabled=True, labels={"io.rocmforge.test": "archs"}
    )
    try:
        c.put_archive("/tmp", _tar({part: (PROBES / part).read_bytes() for part in archs.PARTS}))
        yield c
    finally:
        c.remove(force=True)


@pytest.fixture(scope="module")
def real_files(container) -> dict[str, str]:
    """Library name -> the real file behind the symlinks; plus the rocBLAS kernel folder."""
    script = (
        "for f in " + " ".join(f"{LIBDIR}/{n}" for n in HOST_LIBS) + "; do readlink -f $f; done; "
        f"ls -d {LIBDIR}/rocblas/*/library"
    )
    rc, out, err = _exec(container, ["bash", "-c", script])
    assert rc == 0, err
    lines = out.split()
    assert len(lines) == len(HOST_LIBS) + 1, out
    files = dict(zip(HOST_LIBS, lines))
    files["rocblas-library"] = lines[-1]
    return files


def _probe(container, *paths: str) -> tuple[list[archs.FileArchs], float]:
    start = time.monotonic()
    rc, out, err = _exec(container, ["python3", "/tmp/archs.py", "--json", *paths])
    elapsed = time.monotonic() - start
    assert rc == 0, f"probe failed ({rc}): {err}\n{out[-2000:]}"
    results = [
        archs.FileArchs(d["path"], d["kind"], tuple(d["archs"]), tuple(d["entries"]), d["error"])
        for d in json.loads(out)
    ]
    return results, elapsed


def _roc_obj_ls(container, path: str) -> tuple[set[str], set[str]]:
    """(entry IDs, gfx names) that roc-obj-ls lists; it exits 255 "No kernel section found" for
    a library without a .hip_fatbin section (libamdhip64)."""
    rc, out, err = _exec(container, ["roc-obj-ls", path])
    text = out + err
    if rc != 0:
        assert "No kernel section found" in text, f"roc-obj-ls {path}: rc {rc}: {text}"
        return set(), set()
    ids = {line.split()[1] for line in out.splitlines() if line.strip()}
    gfx = {m.group(1) for i in ids for m in [GFX_RE.search(i)] if m}
    return ids, gfx


def test_host_libraries_match_roc_obj_ls(container, real_files):
    results, elapsed = _probe(container, *(real_files[n] for n in HOST_LIBS))
    by_path = {r.path: r for r in results}
    print(f"\nprobe on {', '.join(HOST_LIBS)}: {elapsed:.2f} s")
    for name in HOST_LIBS:
        r = by_path[real_files[name]]
        ids, gfx = _roc_obj_ls(container, real_files[name])
        assert r.error is None, (name, r.error)
        assert set(r.archs) == gfx, name
        assert set(r.entries) == ids, name
        if name == "libamdhip64.so.5":
            assert (r.kind, r.archs, gfx) == ("host", (), set())
        else:
            assert r.kind == "host-bundles"
            assert {"gfx906", "gfx90a", "gfx1100"} <= gfx, name  # WORLD.md's measured list


def test_rocblas_library_folder(container, real_files):
    folder = real_files["rocblas-library"]
    results, elapsed = _probe(container, folder)
    print(f"\nprobe on {folder}: {elapsed:.2f} s")
    _ids, rocblas_gfx = _roc_obj_ls(container, real_files["librocblas.so"])
    union = set()
    for r in results:
        assert r.error is None, (r.path, r.error)  # e_flags agree with every file name
        union.update(r.archs)
        if r.path.endswith((".co", ".hsaco")):
            assert r.kind == "code-object", r.path
    # A pruned image (prune_archs) keeps the folder's files of its own archs only; the fat binary
    # inside librocblas.so is never pruned.
    labels = container.image.labels
    kept = set(labels["io.rocmforge.archs"].split(",")) if labels.get(archprune.LABEL) == "true" else rocblas_gfx
    assert union == kept and kept <= rocblas_gfx, (union, kept, rocblas_gfx)
    dat = [r for r in results if r.path.endswith("/TensileLibrary.dat")]
    assert dat and dat[0].kind == "other"

    host, _ = _probe(container, real_files["librocblas.so"])
    assert archs.library_coverage(results + host, sorted(kept)) == {}
    assert archs.library_coverage(results + host, ["gfx90a", "gfx942"]) == {
        folder: ["gfx942"],
        real_files["librocblas.so"]: ["gfx942"],
    }


def test_probe_time_on_librocblas(container, real_files):
    timings = []
    for _ in range(2):  # the first run may read from disk, the second from cache
        (r,), elapsed = _probe(container, real_files["librocblas.so"])
        timings.append(elapsed)
        assert r.archs
    print(f"\npython3 archs.py --json librocblas: {timings[0]:.2f} s, again {timings[1]:.2f} s")
    assert min(timings) < 60


def test_e_flags_table_against_llc17(container):
    """Every gfx processor llc-17 knows, compiled to a code object and read back by the probe."""
    kernel = b"define amdgpu_kernel void @k(ptr addrspace(1) %p) {\n  store i32 1, ptr addrspace(1) %p\n  ret void\n}\n"
    container.put_archive("/tmp", _tar({"k.ll": kernel}))
    script = (
        "set -e; mkdir -p /tmp/co; cd /tmp/co; "
        "for c in $(llc-17 -march=amdgcn -mcpu=help 2>&1 | awk '/Available CPUs/{f=1;next} "
        "/Available features/{f=0} f && $1 ~ /^gfx/ {print $1}'); do "
        "llc-17 -mtriple=amdgcn-amd-amdhsa -mcpu=$c -filetype=obj /tmp/k.ll -o $c.o; done; ls"
    )
    rc, out, err = _exec(container, ["bash", "-c", script])
    assert rc == 0, err
    cpus = [n[:-2] for n in out.split()]
    assert len(cpus) >= 40 and "gfx942" in cpus and "gfx1100" in cpus
    results, _ = _probe(container, "/tmp/co")
    got = {Path(r.path).name[:-2]: r.archs for r in results}
    assert got == {c: (c,) for c in cpus}
