"""Everything GPU the image ships is there and *loads*. "Ships" comes from what the target installs:
the ROCm packages of the lock's closure (their dpkg file lists), its components' outputs and its
Python distributions' RECORDs (conftest.gpu_inventory), never from a pattern list that may rightly
match nothing, nor from what is still installed.

Loading (probes/load.py): each x86-64 library is opened with dlopen(RTLD_NOW) in a fresh process,
so undefined symbols, symbol-version errors and missing dependencies fail, naming the file and
the symbol; each program is relocated by `ldd -r` and, in a container without /dev/kfd, started
with `--version` (no device work is possible there). bitsandbytes' ROCm library is opened by the
exact name bnb would load on a GPU host of the image's ROCm version and its entry points resolved:
bnb's own import falls back to its CPU library without a word, so it proves nothing.

These checks need no GPU: a library that cannot load is a failure, never "not GPU-verified"."""

import json

from rocmforge.data.suites.bitsandbytes_files import bitsandbytes_components, bnb_rocm_library_name, package_dirs
from rocmforge.data.suites.conftest import PROBES_IN_CONTAINER, missing_expected
from rocmforge.verify.readers import ldd

# A few of the entry points bitsandbytes' Python code calls in its ROCm library (csrc/pythonInterface.cpp
# at 4aad810): the contexts CudaBNBNativeLibrary sets up, and the 4-bit paths QLoRA uses.
BNB_ENTRY_POINTS = (
    "get_context",
    "get_hipsparse",
    "cget_managed_ptr",
    "cquantize_blockwise_bf16_nf4",
    "cdequantize_blockwise_bf16_nf4",
    "cgemm_4bit_inference_naive_bf16",
)
# Python extension modules need symbols of the interpreter that loads them: ldd -r lists those
# as undefined although dlopen from Python resolves them (only ldd's extra detail is filtered).
INTERPRETER_SYMBOL_PREFIXES = ("Py", "_Py")
MAX_DETAIL = 6  # ldd -r lines per file in a failure message


def test_expected_gpu_files_present(gpu_inventory, record_property):
    record_property(
        "figures",
        {
            "expected_gpu_files": len(gpu_inventory["files"]),
            "gpu_programs": len(gpu_inventory["programs"]),
            "rocm_packages": len(gpu_inventory["rocm_packages"]),
        },
    )
    problems = [
        f"{p}: in the lock's closure, not installed (its GPU files are gone with it)"
        for p in gpu_inventory["packages_not_installed"]
    ]
    problems += missing_expected(gpu_inventory) + missing_expected(gpu_inventory, "programs")
    assert not problems, (
        "GPU libraries and programs the image's packages and components install are missing:\n  "
        + "\n  ".join(problems)
    )


def _why(path: str, o: dict) -> list[str]:
    """What stops a library or program loading, naming the file and the library or symbol."""
    found = ldd.parse(o.get("ldd_r", ""))
    detail = [
        p if p.startswith("/") else f"{path}: {p}"
        for p in found.problems
        if not (
            ("site-packages" in path or "dist-packages" in path)
            and any(u in p for u in (f"undefined symbol {s}" for s in INTERPRETER_SYMBOL_PREFIXES))
        )
    ]
    more = [f"... and {len(detail) - MAX_DETAIL} more"] if len(detail) > MAX_DETAIL else []
    if o["kind"] == "program":
        start = o.get("start") or {}
        return (
            detail[:MAX_DETAIL]
            + more
            + (
                [f"{path}: does not start: {start.get('output', '').strip()[-400:]}"]
                if start and not start["loaded"]
                else []
            )
        )
    first = o["error"] if o["error"].startswith(path) else f"{path}: {o['error']}"
    return [first] + [d for d in detail[:MAX_DETAIL] if d not in first] + more


def test_gpu_libraries_and_programs_load(container, gpu_inventory, gpu_library_paths, record_property):
    programs = [p for p, f in gpu_inventory["programs"].items() if f["exists"]]
    r = container.exec(["python3", f"{PROBES_IN_CONTAINER}/load.py", *gpu_library_paths, *programs], timeout=900)
    assert r.rc == 0 and r.stdout.strip().startswith("{"), f"load probe failed: {r.output[-2000:]}"
    objects = json.loads(r.stdout)
    libraries = {p: o for p, o in objects.items() if o["kind"] == "library"}
    progs = {p: o for p, o in objects.items() if o["kind"] == "program"}
    assert libraries, f"no x86-64 library among the image's GPU files ({len(gpu_library_paths)} files)"
    # A file named as a library or code object that is empty, short or not ELF (load.py's bad-* kinds).
    unloadable = {p: o for p, o in objects.items() if o["kind"].startswith("bad-")}
    broken = {}
    for path, o in sorted({**libraries, **progs, **unloadable}.items()):
        why = _why(path, o) if not o["ok"] or o["kind"] == "program" else []  # a program's ldd -r is judged here
        if why:
            broken[path] = why
    record_property(
        "figures",
        {
            "libraries_loaded": len(libraries),
            "programs_checked": len(progs),
            "programs_started": sum(1 for o in progs.values() if o.get("start")),
            "gpu_code_objects": sum(1 for o in objects.values() if o["kind"] == "gpu"),
        },
    )
    assert not broken, "GPU libraries or programs that cannot load:\n" + "\n".join(
        "  " + "\n    ".join(lines) for lines in broken.values()
    )


def test_bitsandbytes_rocm_library_loads(
    container, matrix, declared_components, stack, torch_expected, request, record_property
):
    comps = bitsandbytes_components(declared_components)
    dirs = package_dirs(container, comps[0])
    # On a GPU host bnb takes the HIP version from torch.version.hip; a ROCm torch of this image
    # reports the stack's ROCm, and so does the image's own (CPU) torch's target.
    hip = stack.rocm
    if torch_expected and torch_expected[1] == "rocm":
        info = request.getfixturevalue("torch_info")
        hip = (info or {}).get("hip") or hip
    path = f"{dirs[0]}/{bnb_rocm_library_name(hip)}"
    r = container.exec(
        ["python3", f"{PROBES_IN_CONTAINER}/load.py", "--entry-points", path, *BNB_ENTRY_POINTS], timeout=300
    )
    assert r.rc == 0 and r.stdout.strip(), f"load probe failed on {path}: {r.output[-1500:]}"
    res = json.loads(r.stdout.strip().splitlines()[-1])
    record_property("figures", {"bitsandbytes_library": path, "entry_points": len(BNB_ENTRY_POINTS)})
    assert res["loaded"], f"{path} (the library bitsandbytes loads for HIP {hip}) does not load: {res['error']}"
    assert not res["missing"], f"{path}: " + ", ".join(f"entry point {s} not found" for s in res["missing"])


def loader_problems(choices: dict) -> list[str]:
    """What the loader's choices (load.py --resolve) say is wrong: a library whose folder the loader
    searches but whose SONAME resolves to another file (a copy earlier on LD_LIBRARY_PATH or in an
    ld.so.conf.d folder listed first: every program then runs that copy), or does not resolve at
    all (no SONAME link: every program linking it fails to start). A library kept in a private
    folder (found through its users' RUNPATH) is not the loader's to choose."""
    out = []
    for path, c in sorted(choices.items()):
        if not c["on_loader_path"]:
            continue
        if c["resolved"] is None:
            out.append(
                f"{c['soname']}: the loader cannot open it by its SONAME although {path} is in a folder it "
                f"searches: {c['error']}"
            )
        elif c["resolved"] != path:
            out.append(f"{c['soname']}: the loader picks {c['resolved']}, but the image's package installed {path}")
    return out


def test_loader_picks_the_packaged_file_for_each_soname(container, gpu_library_paths, record_property):
    """dlopen(SONAME) in the image's environment, as a program linking the library would: the
    file it maps must be the package's (ldconfig -p alone would miss LD_LIBRARY_PATH)."""
    r = container.exec(["python3", f"{PROBES_IN_CONTAINER}/load.py", "--resolve", *gpu_library_paths], timeout=900)
    assert r.rc == 0 and r.stdout.strip().startswith("{"), f"load probe --resolve failed: {r.output[-2000:]}"
    choices = json.loads(r.stdout)
    assert choices, f"none of the image's {len(gpu_library_paths)} GPU files is an x86-64 library with a SONAME"
    record_property(
        "figures",
        {
            "sonames_resolved": sum(1 for c in choices.values() if c["on_loader_path"]),
            "private_libraries": sum(1 for c in choices.values() if not c["on_loader_path"]),
        },
    )
    problems = loader_problems(choices)
    assert not problems, "the loader does not pick the image's GPU libraries:\n  " + "\n  ".join(problems)
