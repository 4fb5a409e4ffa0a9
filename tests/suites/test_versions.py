"""The HIP runtime, torch's HIP, the bitsandbytes library that will load, and every pinned
package agree with each other and with the matrix. Each disagreement names both values."""

import json
import re

import pytest

LIB_DIRS = "/usr/lib/x86_64-linux-gnu /opt/rocm/lib /opt/rocm*/lib"


def major_minor(v: str | None) -> str | None:
    m = re.match(r"^(\d+)\.(\d+)", v or "")
    return f"{m.group(1)}.{m.group(2)}" if m else None


@pytest.fixture(scope="module")
def hip_versions(container):
    """HIP runtime version as each source in the image reports it."""
    found = {}
    r = container.exec(f"shopt -s nullglob; for d in {LIB_DIRS}; do ls $d/libamdhip64.so.*.*; done", timeout=60)
    for path in r.stdout.split():
        m = re.search(r"libamdhip64\.so\.(\d+\.\d+[\d.]*)$", path)
        if m:
            found[f"libamdhip64 file name ({path})"] = m.group(1)
    r = container.exec("command -v hipconfig >/dev/null && hipconfig --version", timeout=60)
    if r.rc == 0 and r.stdout.strip():
        found["hipconfig --version"] = r.stdout.strip().splitlines()[-1]
    r = container.exec("cat /opt/rocm/.info/version 2>/dev/null", timeout=30)
    if r.rc == 0 and r.stdout.strip():
        found["/opt/rocm/.info/version"] = r.stdout.strip()
    return found


def test_hip_runtime_matches_stack(hip_versions, stack, record_property):
    assert hip_versions, "no HIP runtime found (libamdhip64.so.* in the library folders)"
    record_property("figures", hip_versions)
    if stack is None:
        pytest.skip("image not from a matrix target: only internal consistency checked")
    want = major_minor(stack.rocm)
    wrong = {src: v for src, v in hip_versions.items() if major_minor(v) != want}
    assert not wrong, "HIP runtime disagrees with the stack's ROCm " + stack.rocm + ": " + \
        "; ".join(f"{src} says {v}" for src, v in wrong.items())


def test_hip_sources_agree(hip_versions):
    seen = {major_minor(v) for v in hip_versions.values()}
    assert len(seen) <= 1, "HIP runtime versions disagree: " + "; ".join(f"{s}={v}" for s, v in hip_versions.items())


def test_torch_hip_matches_runtime(torch_info, hip_versions):
    if torch_info is None:
        pytest.skip("no torch in this image")
    runtime = {major_minor(v) for v in hip_versions.values()}
    assert torch_info["hip"], f"torch {torch_info['version']} is not a ROCm build (torch.version.hip is None)"
    assert major_minor(torch_info["hip"]) in runtime, \
        f"torch.version.hip {torch_info['hip']} vs HIP runtime {sorted(runtime)}"


def test_bitsandbytes_library_matches_torch(container, torch_info, gpu_library_paths):
    dirs = " ".join(p for p in gpu_library_paths if p.endswith("/bitsandbytes"))
    r = container.exec(f"shopt -s nullglob; ls -1 {dirs} 2>/dev/null | grep -E '^libbitsandbytes_' || true")
    libs = sorted(set(r.stdout.split()))
    if not libs:
        pytest.skip("no bitsandbytes in this image")
    assert torch_info and torch_info["hip"], f"bitsandbytes libraries {libs} but no ROCm torch to load them"
    mm = major_minor(torch_info["hip"]).replace(".", "")
    wanted = [f"libbitsandbytes_rocm{mm}.so", f"libbitsandbytes_rocm{mm}_nohipblaslt.so"]
    assert any(w in libs for w in wanted), \
        f"torch.version.hip {torch_info['hip']} loads {wanted[0]}, but the image has {libs}"


def test_pinned_packages_installed_exactly(container, matrix, target):
    if target is None:
        pytest.skip("image not from a matrix target: no pins to compare")
    stack = matrix.stacks[target.stack]
    names, t = [], target
    while t is not None:     # a target built on another carries that target's pins too
        names += t.apt
        t = matrix.targets.get(t.from_target) if t.from_target else None
    r = container.exec(["dpkg-query", "-W", "-f", "${Package}=${Version}\\n", *sorted(set(names))])
    installed = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    wrong = [f"{p}: pinned {stack.apt[p]}, installed {installed.get(p, 'nothing')}"
             for p in sorted(set(names)) if installed.get(p) != stack.apt[p]]
    reqs = {}
    for c in target.components:
        reqs.update(matrix.components[c].requirements)
    if reqs:
        r = container.exec(["/opt/rocmforge/venv/bin/python", "-m", "pip", "list", "--format=json",
                            "--disable-pip-version-check"], timeout=120)
        assert r.rc == 0, f"pip list failed in the image's venv: {r.output[-500:]}"
        have = {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(r.stdout)}
        wrong += [f"{n}: pinned {v}, installed {have.get(n.lower(), 'nothing')}"
                  for n, v in sorted(reqs.items()) if have.get(n.lower()) != v]
    assert not wrong, "installed versions differ from the matrix:\n  " + "\n  ".join(wrong)
