"""The HIP runtime, torch (its version and its HIP), the bitsandbytes library that will load,
every declared Python component and every pinned package agree with each other and with the
matrix. Each disagreement names both values; a declared component that is missing or does not
import is a failure naming it, never a skip.

torch versions are compared by their release numbers: "2.14.1+debian" and "2.3.0a0+git96dd291"
(a vendor build from the release branch, as AMD's rocm/pytorch images carry) agree with the
matrix's "2.14.1" and "2.3.0"; any other difference in major, minor or patch is a failure.

HIP versions come in two kinds, and only versions of one kind are compared in full (M.m.p):
- the runtime's own number, M.m.<build>: the file name libamdhip64.so.5.7.31921, what
  hipRuntimeGetVersion() returns from the library the loader picks for libamdhip64.so.<major>
  (5.7.31921), `hipconfig --version` (5.7.31921-0, read from libamdhip64-dev's share/hip/version)
  and the first three fields of AMD's hip-runtime-amd package (5.7.31921.50700-63): all equal in full;
- the ROCm release, M.m.p: Debian's libamdhip64-N/-dev upstream version (5.7.1-6+deb13u1 -> 5.7.1),
  the release AMD's hip-runtime-amd encodes (50700 -> 5.7.0) and /opt/rocm/.info/version: each
  equal in full to the stack's `rocm` in matrix.yaml.
Across kinds only major.minor can agree: the runtime's build number (31921) is no ROCm patch
level. Seen on hip-runtime (5.7.31921 vs Debian 5.7.1) and llama31-qlora-debian (6.4.43484 vs 6.4.3)."""

import json
import re

import pytest
from packaging.version import InvalidVersion, Version

from rocmforge.data.suites.bitsandbytes_files import bitsandbytes_components, bnb_rocm_library_name, package_dirs
from rocmforge.data.suites.conftest import PROBES_IN_CONTAINER, target_chain
from rocmforge.host.container import IMAGE_PYTHON
from rocmforge.resolve.image_packages import DPKG_STATUS, compare, parse_dpkg_status

LIB_DIRS = "/usr/lib/x86_64-linux-gnu /opt/rocm/lib /opt/rocm*/lib"
HIP_PACKAGES = ("libamdhip64-*", "hip-runtime-amd")
# For each distribution: installed version and whether its top-level modules import.
DIST_PROBE = r"""
import importlib, importlib.metadata as md, json, sys
out = {}
for name in json.loads(sys.argv[1]):
    try:
        d = md.distribution(name)
    except md.PackageNotFoundError:
        out[name] = {"version": None, "error": "not installed"}
        continue
    tops = (d.read_text("top_level.txt") or "").split()
    if not tops:
        tops = sorted({str(f).split("/")[0].removesuffix(".py") for f in (d.files or [])
                       if "/" in str(f) and str(f).split("/")[1] == "__init__.py" or
                       ("/" not in str(f) and str(f).endswith(".py"))})
    err = None
    for mod in [t for t in tops if t.isidentifier() and not t.startswith("_")][:3]:
        try:
            importlib.import_module(mod)
        except BaseException as exc:
            err = f"import {mod}: {type(exc).__name__}: {exc}"
            break
    out[name] = {"version": d.version, "error": err, "modules": tops}
print(json.dumps(out))
"""


def major_minor(v: str | None) -> str | None:
    m = re.match(r"^(\d+)\.(\d+)", v or "")
    return f"{m.group(1)}.{m.group(2)}" if m else None


def same_release(a: str, b: str) -> bool:
    try:
        return Version(a).release == Version(b).release
    except InvalidVersion:
        return a.split("+")[0] == b.split("+")[0]


def same_version(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return False
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


RUNTIME, RELEASE = "runtime", "release"


def release_numbers(v: str | None, n: int = 3) -> tuple[int, ...] | None:
    """The first n numbers of a version (missing ones are 0): "5.7.1-6+deb13u1" -> (5, 7, 1)."""
    m = re.match(r"^(?:\d+:)?(\d+(?:\.\d+)*)", v or "")
    if not m:
        return None
    nums = [int(x) for x in m.group(1).split(".")][:n]
    return tuple(nums + [0] * (n - len(nums)))


def dpkg_hip_versions(package: str, version: str) -> dict[str, tuple[str, str]]:
    """What a HIP package's dpkg version says, by kind. Debian's libamdhip64-N is the ROCm
    release (5.7.1-6+deb13u1); AMD's hip-runtime-amd is the runtime's number followed by the ROCm
    release as one code (5.7.31921.50701-98~20.04: runtime 5.7.31921, ROCm 5.7.1)."""
    upstream = re.sub(r"^\d+:", "", version)
    m = re.match(r"^(\d+\.\d+\.\d+)\.(\d)(\d\d)(\d\d)\b", upstream)
    if package == "hip-runtime-amd" and m:
        rel = f"{int(m.group(2))}.{int(m.group(3))}.{int(m.group(4))}"
        return {f"dpkg {package}": (m.group(1), RUNTIME), f"dpkg {package} (ROCm release)": (rel, RELEASE)}
    return {f"dpkg {package}": (upstream.rsplit("-", 1)[0] if "-" in upstream else upstream, RELEASE)}


@pytest.fixture(scope="module")
def hip_sourced(container, has_python, stack):
    """HIP version as each independent source in the image reports it: {source: (version, kind)}.
    The runtime's own answer comes from the library the loader picks for the soname
    libamdhip64.so.<major> (the stack's ROCm major), as a program linking HIP gets it, not from a
    path we chose; it must be there: a runtime that does not load or lacks hipRuntimeGetVersion is
    a failure naming the soname, never one source fewer."""
    found: dict[str, tuple[str, str]] = {}
    r = container.exec(f"shopt -s nullglob; for d in {LIB_DIRS}; do ls $d/libamdhip64.so.*.*; done", timeout=60)
    libs = sorted(set(r.stdout.split()))
    majors = []
    for path in libs:
        m = re.search(r"libamdhip64\.so\.((\d+)\.\d+[\d.]*)$", path)
        if m:
            found[f"libamdhip64 file name ({path})"] = (m.group(1), RUNTIME)
            majors.append(m.group(2))
    major = stack.rocm.split(".")[0] if stack else (majors[0] if majors else None)
    if major and (libs or stack) and has_python:
        soname = f"libamdhip64.so.{major}"
        r = container.exec(["python3", f"{PROBES_IN_CONTAINER}/load.py", "--call-version", soname], timeout=120)
        assert r.rc == 0 and r.stdout.strip(), f"load probe failed on {soname}: {r.output[-1500:]}"
        res = json.loads(r.stdout.strip().splitlines()[-1])
        assert "version" in res, (
            f"hipRuntimeGetVersion() of {soname} (as the loader resolves it) cannot be called: {res.get('error')}"
        )
        found[f"hipRuntimeGetVersion() ({soname} -> {res.get('loaded_as')})"] = (res["version"], RUNTIME)
    r = container.exec(["dpkg-query", "-W", "-f", "${Package}=${Version}\\n", *HIP_PACKAGES], timeout=60)
    for line in r.stdout.splitlines():
        pkg, _, ver = line.partition("=")
        if ver:
            found.update(dpkg_hip_versions(pkg, ver))
    r = container.exec("command -v hipconfig >/dev/null && hipconfig --version", timeout=60)
    if r.rc == 0 and r.stdout.strip():
        found["hipconfig --version"] = (r.stdout.strip().splitlines()[-1], RUNTIME)
    r = container.exec("cat /opt/rocm/.info/version 2>/dev/null", timeout=30)
    if r.rc == 0 and r.stdout.strip():
        found["/opt/rocm/.info/version"] = (r.stdout.strip(), RELEASE)
    return found


@pytest.fixture(scope="module")
def hip_versions(hip_sourced):
    return {src: v for src, (v, _) in hip_sourced.items()}


def test_hip_runtime_matches_stack(hip_versions, stack, record_property):
    assert hip_versions, "no HIP runtime found (libamdhip64.so.* in the library folders)"
    record_property("figures", hip_versions)
    if stack is None:
        pytest.skip("image not from a matrix target: only internal consistency checked")
    want = major_minor(stack.rocm)
    wrong = {src: v for src, v in hip_versions.items() if major_minor(v) != want}
    assert not wrong, (
        "HIP runtime disagrees with the stack's ROCm "
        + stack.rocm
        + ": "
        + "; ".join(f"{src} says {v}" for src, v in wrong.items())
    )


def test_hip_release_matches_stack_fully(hip_sourced, stack):
    """The ROCm release the packages state equals the stack's `rocm` at major.minor.patch."""
    if stack is None:
        pytest.skip("image not from a matrix target: no ROCm release to compare with")
    release = {src: v for src, (v, kind) in hip_sourced.items() if kind == RELEASE}
    if not release:
        pytest.skip(
            "not applicable: no source in this image states the ROCm release (no HIP package in dpkg, "
            "no /opt/rocm/.info/version)"
        )
    want = release_numbers(stack.rocm)
    wrong = {src: v for src, v in release.items() if release_numbers(v) != want}
    assert not wrong, f"the ROCm release differs from the stack's rocm {stack.rocm} (major.minor.patch): " + "; ".join(
        f"{src} says {v}" for src, v in wrong.items()
    )


def test_hip_sources_agree(hip_sourced):
    assert hip_sourced, "no HIP runtime found (libamdhip64.so.* in the library folders)"
    if len(hip_sourced) < 2:
        pytest.skip(f"not applicable: only one source of the HIP version in this image ({next(iter(hip_sourced))})")
    seen = {major_minor(v) for v, _ in hip_sourced.values()}
    assert len(seen) == 1, "HIP runtime versions disagree: " + "; ".join(
        f"{s}={v}" for s, (v, _) in hip_sourced.items()
    )
    runtime = {src: v for src, (v, kind) in hip_sourced.items() if kind == RUNTIME}
    full = {release_numbers(v) for v in runtime.values()}
    assert len(full) <= 1, "HIP runtime versions disagree at major.minor.build: " + "; ".join(
        f"{s}={v}" for s, v in runtime.items()
    )


def test_torch_matches_stack(torch_expected, torch_info, stack, target_name, record_property):
    if torch_expected is None:
        pytest.skip(
            f"not applicable: target {target_name} declares no torch"
            + (f" (the image has torch {torch_info['version']})" if torch_info else "")
        )
    want, build = torch_expected
    assert torch_info is not None, f"target {target_name} declares torch {want} but the image has none"
    record_property("figures", {"torch": torch_info["version"], "torch.version.hip": torch_info["hip"]})
    problems = []
    if not same_release(torch_info["version"], want):
        problems.append(f"torch {torch_info['version']} in the image, {want} in the matrix")
    if build == "rocm":
        if not torch_info["hip"]:
            problems.append(f"torch {torch_info['version']} is not a ROCm build (torch.version.hip is None)")
        elif major_minor(torch_info["hip"]) != major_minor(stack.rocm):
            problems.append(f"torch.version.hip {torch_info['hip']} vs the stack's ROCm {stack.rocm}")
    elif torch_info["hip"]:
        problems.append(f"the matrix declares a CPU build of torch, but torch.version.hip is {torch_info['hip']}")
    assert not problems, "; ".join(problems)


def test_bitsandbytes_library_matches_torch(
    container, matrix, declared_components, torch_expected, request, stack, record_property
):
    comps = bitsandbytes_components(declared_components)
    torch_info = request.getfixturevalue("torch_info")
    want_version = matrix.components[comps[0]].version
    dirs = package_dirs(container, comps[0])
    r = container.exec(
        [
            "bash",
            "-c",
            'shopt -s nullglob; for d in "$@"; do for f in "$d"/libbitsandbytes_*; do basename "$f"; done; done',
            "_",
            *dirs,
        ]
    )
    libs = sorted(set(r.stdout.split()))
    if torch_expected and torch_expected[1] == "rocm":
        assert torch_info and torch_info["hip"], (
            "bitsandbytes needs torch.version.hip to pick its library, but it is None"
        )
        hip, why = torch_info["hip"], f"torch.version.hip {torch_info['hip']}"
    else:
        hip, why = stack.rocm, f"the stack's ROCm {stack.rocm} (torch is not a ROCm build)"
    wanted = bnb_rocm_library_name(hip)
    record_property("figures", {"bitsandbytes_libraries": libs})
    assert wanted in libs, f"{why}: bitsandbytes loads {wanted}, but the image has {libs or 'none'}"
    r = container.exec([IMAGE_PYTHON, "-c", "import bitsandbytes; print(bitsandbytes.__version__)"], timeout=300)
    assert r.rc == 0, f"bitsandbytes does not import: {(r.stderr.strip() or r.stdout.strip()).splitlines()[-1:]}"
    got = r.stdout.strip().splitlines()[-1]
    assert same_version(got, want_version), f"bitsandbytes reports {got}, component {comps[0]} pins {want_version}"


def test_declared_python_components_import(container, matrix, declared_components, has_python, record_property):
    reqs = {}
    for c in declared_components:
        if matrix.components[c].kind == "python-env":
            reqs.update({k: (c, v) for k, v in matrix.components[c].requirements.items()})
    if not reqs:
        pytest.skip("not applicable: the target declares no Python environment")
    assert has_python, "python environments are declared but the image has no python3"
    r = container.exec([IMAGE_PYTHON, "-c", DIST_PROBE, json.dumps(sorted(reqs))], timeout=900)
    assert r.rc == 0, f"component probe failed: {r.output[-1500:]}"
    got = json.loads(r.stdout.strip().splitlines()[-1])
    bad = []
    for name, (comp, pinned) in sorted(reqs.items()):
        g = got[name]
        if g["version"] is None:
            bad.append(f"{name} ({comp}): pinned {pinned}, not installed")
        elif not same_version(g["version"], pinned):
            bad.append(f"{name} ({comp}): pinned {pinned}, installed {g['version']}")
        if g.get("error") and g["version"] is not None:
            bad.append(f"{name} ({comp}): {g['error']}")
    record_property("figures", {"python_packages": len(reqs)})
    assert not bad, "declared Python components are broken:\n  " + "\n  ".join(bad)


def test_pinned_packages_installed_exactly(container, matrix, target, target_name):
    if target is None:
        pytest.skip("image not from a matrix target: no pins to compare")
    stack = matrix.stacks[target.stack]
    chain = target_chain(matrix, target_name)
    names = sorted({p for t in chain for p in t.apt})
    wrong = []
    if names:
        r = container.exec(["dpkg-query", "-W", "-f", "${Package}=${Version}\\n", *names])
        installed = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
        wrong = [
            f"{p}: pinned {stack.apt[p]}, installed {installed.get(p, 'nothing')}"
            for p in names
            if installed.get(p) != stack.apt[p]
        ]
    reqs = {}
    for c in dict.fromkeys(c for t in chain for c in t.components):
        if matrix.components[c].kind == "python-env":  # the one kind that pins pip packages
            reqs.update(matrix.components[c].requirements)
    if not names and not reqs:
        pytest.skip("not applicable: the target pins no apt or pip package")
    if reqs:
        r = container.exec(
            ["/opt/rocmforge/venv/bin/python", "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
            timeout=120,
        )
        assert r.rc == 0, f"pip list failed in the image's venv: {r.output[-500:]}"
        have = {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(r.stdout)}
        wrong += [
            f"{n}: pinned {v}, installed {have.get(n.lower().replace('_', '-'), 'nothing')}"
            for n, v in sorted(reqs.items())
            if not same_version(have.get(n.lower().replace("_", "-")), v)
        ]
    assert not wrong, "installed versions differ from the matrix:\n  " + "\n  ".join(wrong)


def test_installed_packages_equal_locked_closure(container, locked_packages, target_name, record_property):
    """The installed dpkg set is the lock's closure for this image at exact versions: its base's
    packages (bootstrapped here, or read from a registry base at lock time) plus the locked apt
    closure of every step of its chain. A package removed, added or at another version is named."""
    if locked_packages is None:
        pytest.skip("not applicable: image not from a matrix target, so no lock to compare with")
    assert not locked_packages.unlocked_steps, (
        f"the lock has no apt closure for {', '.join(locked_packages.unlocked_steps)} (run `python build.py lock`)"
    )
    r = container.exec(DPKG_STATUS, timeout=120)
    assert r.rc == 0, f"dpkg-query failed: {r.output[-500:]}"
    installed = parse_dpkg_status(r.stdout)
    diff = compare(locked_packages, installed)
    record_property(
        "figures",
        {
            "locked_packages": len(locked_packages.packages),
            "installed_packages": len(installed),
            "base_packages_locked": locked_packages.base_locked,
        },
    )
    assert not diff, f"installed packages differ from the lock's closure for {target_name}:\n  " + "\n  ".join(
        diff.lines()
    )
