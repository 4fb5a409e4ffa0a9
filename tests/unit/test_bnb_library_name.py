"""The library file each bitsandbytes component's builder stage must leave (built_library, checked
exactly in the rendered stage) is the file the fork's own loader opens on that stack's HIP version.

The loader's naming code is run, not copied: bitsandbytes/consts.py and, from
bitsandbytes/cextension.py at the locked commit, the module-level block that derives
BNB_HIP_VERSION / BNB_HIP_VERSION_SHORT from torch.version.hip and get_cuda_bnb_library_path(),
are executed with a stand-in `torch` whose version.hip is the stack's (torch reports it as
MAJOR.MINOR.BUILD-SHA). A loader that finds no file under that name falls back to its CPU library
without a word, which is why a glob over the built files would not do."""

from __future__ import annotations

import ast
import os
import subprocess
import types
from pathlib import Path

import pytest

from rocmforge.define.matrix import load_matrix
from rocmforge.resolve import lockfile

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = Path(os.environ.get("ROCMFORGE_SOURCES", ROOT.parent / "shared" / "sources")) / "bitsandbytes-rocm.bundle"
MATRIX = load_matrix(ROOT / "matrix.yaml")
LOCK = lockfile.load(ROOT / "matrix.lock")
CASES = sorted(
    {
        (cname, t.stack)
        for t in MATRIX.targets.values()
        for cname in t.components
        if getattr(MATRIX.components[cname], "built_library", None)
    }
)


@pytest.fixture(scope="module")
def fork(tmp_path_factory):
    """A bare repository holding the bundle's branches; the commit of each component is read from it."""
    if not BUNDLE.exists():
        message = f"the source bundle {BUNDLE} is missing (set ROCMFORGE_SOURCES to its folder)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    repo = tmp_path_factory.mktemp("bnb") / "repo.git"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "fetch", "-q", str(BUNDLE), "+refs/heads/*:refs/heads/*"], check=True)
    return repo


def _show(repo: Path, commit: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "show", f"{commit}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def loader_library_name(repo: Path, commit: str, torch_hip: str) -> str:
    """What the fork's loader at commit opens when torch.version.hip is torch_hip, relative to the
    package's parent folder (bitsandbytes/<file>)."""
    package_dir = Path("/fork/bitsandbytes")
    consts: dict = {"__file__": str(package_dir / "consts.py"), "__name__": "bitsandbytes.consts"}
    exec(compile(_show(repo, commit, "bitsandbytes/consts.py"), "bitsandbytes/consts.py", "exec"), consts)
    tree = ast.parse(_show(repo, commit, "bitsandbytes/cextension.py"), "bitsandbytes/cextension.py")
    naming = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_cuda_bnb_library_path"]
    # The block in the module's try: that sets BNB_HIP_VERSION from torch.version.hip.
    versions = [
        s
        for n in tree.body
        if isinstance(n, ast.Try)
        for s in n.body
        if isinstance(s, ast.If) and "BNB_HIP_VERSION" in ast.unparse(s)
    ]
    assert len(naming) == 1 and len(versions) == 1, "the fork's loader changed shape: read cextension.py again"
    torch = types.SimpleNamespace(version=types.SimpleNamespace(hip=torch_hip, cuda=None))
    scope = {
        "torch": torch,
        "os": os,
        "logger": None,
        "PACKAGE_DIR": consts["PACKAGE_DIR"],
        "DYNAMIC_LIBRARY_SUFFIX": consts["DYNAMIC_LIBRARY_SUFFIX"],
    }
    exec(compile(ast.Module(body=versions + naming, type_ignores=[]), "bitsandbytes/cextension.py", "exec"), scope)
    path = scope["get_cuda_bnb_library_path"](None)
    return path.relative_to(package_dir.parent).as_posix()


def torch_hip_of(rocm: str) -> str:
    """torch.version.hip as ROCm builds of torch report it, e.g. 5.7.31921-d1770ee1b for ROCm 5.7."""
    major, minor = rocm.split(".")[:2]
    return f"{major}.{minor}.31921-d1770ee1b"


def test_every_bitsandbytes_stack_is_checked():
    assert {s for _, s in CASES} >= {"rocm5.7-ubuntu20.04", "rocm6.2-ubuntu22.04", "debian-sid-rocm6.4"}, CASES


@pytest.mark.parametrize("component,stack", CASES, ids=[f"{c}@{s}" for c, s in CASES])
def test_built_library_is_the_name_the_forks_loader_opens(fork, component, stack):
    comp = MATRIX.components[component]
    commit = comp.source.pinned_commit(lockfile.component_lock(LOCK, component))
    assert commit, f"{component} has no locked commit (run `build.py lock`)"
    rocm = MATRIX.stacks[stack].rocm
    assert comp.library_for(rocm) == loader_library_name(fork, commit, torch_hip_of(rocm))


def test_the_loader_code_is_what_tells_the_names_apart(fork):
    """The executed code, not this test, decides: 6.0 and 6.1 straddle the fork's hipBLASLt cut."""
    commit = LOCK.git["bitsandbytes-hip"].commit
    assert (
        loader_library_name(fork, commit, "6.0.32830-d62f6a171") == "bitsandbytes/libbitsandbytes_rocm60_nohipblaslt.so"
    )
    assert loader_library_name(fork, commit, "6.1.40091-a8dbc0c19") == "bitsandbytes/libbitsandbytes_rocm61.so"
