#!/usr/bin/env python3
"""Load probe, run inside an image: proves that GPU libraries and programs *load*, which on a host
without a GPU is the strongest proof there is.

`load.py PATH...` (files or folders): each x86-64 shared library is opened with dlopen(RTLD_NOW) in a fresh
process (a fork of this interpreter, which has opened nothing), so every undefined symbol, version
error and missing dependency surfaces, naming the file and the symbol; on failure `ldd -r` says
what else is unresolved. Each program (an ELF with an interpreter, not named *.so*) is checked with
`ldd -r` (the loader maps and relocates it without running it) and, when the container has no
/dev/kfd (so no device work can happen), started with `--version` under LD_BIND_NOW=1: a loader
error (exit 127) fails, any other exit means it loaded. Prints one JSON object:
{path: {"kind": "library"|"program"|"gpu"|"bad-library"|"bad-gpu"|"other", "ok": bool, "error": str,
"ldd_r": str, ...}}. A file named as a shared library (*.so*) or a GPU code object (*.co, *.hsaco)
that is empty, shorter than an ELF header, or neither ELF nor (for code) an offload bundle is
"bad-library" / "bad-gpu" and not ok: nothing can load it, and its name alone must not pass it.

`load.py --entry-points LIB SYMBOL...` opens LIB with RTLD_NOW in a fresh process and resolves
each SYMBOL: {"path", "loaded", "error", "missing": [...]}. `--call-version LIB` also calls
hipRuntimeGetVersion and prints {"version": "M.m.p", "loaded_as": the file the loader mapped} or
the error; LIB may be a soname (libamdhip64.so.6), which the loader resolves as programs do.

`load.py --resolve PATH...` asks the loader which file each library's SONAME (read from its ELF
dynamic section) resolves to in this environment (LD_LIBRARY_PATH, ld.so.cache, the defaults), by
dlopen(SONAME) in a fresh process: {path: {"soname", "resolved" (realpath or null), "error",
"on_loader_path": whether the library's own folder is one the loader searches}}; files that are
not x86-64 libraries with a SONAME are left out.

By hand on a GPU host:  python3 /opt/rocmforge/probes/load.py /opt/rocmforge/bin /opt/rocm/lib
"""

import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile

EM_X86_64, EM_AMDGPU, PT_INTERP = 62, 224, 3
LOADER_ERRORS = ("error while loading shared libraries", "symbol lookup error", "version `", "undefined symbol")
BUNDLE_MAGICS = (b"__CLANG_OFFLOAD_BUNDLE__", b"CCOB")
# A linker script named like a library (libc.so) is text the linker reads, never loaded.
LINKER_SCRIPT_WORDS = (b"GNU ld script", b"INPUT(", b"GROUP(")
START_TIMEOUT_S = 10
LOAD_TIMEOUT_S = 120


def elf_header(path):
    """(e_machine, has an interpreter) of an ELF file, or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2:   # 64-bit ELF only
                return None
            order = "little" if head[5] == 1 else "big"
            machine = int.from_bytes(head[18:20], order)
            phoff, phentsize, phnum = (int.from_bytes(head[32:40], order), int.from_bytes(head[54:56], order),
                                       int.from_bytes(head[56:58], order))
            interp = False
            for i in range(min(phnum, 256)):
                f.seek(phoff + i * phentsize)
                if int.from_bytes(f.read(4), order) == PT_INTERP:
                    interp = True
                    break
            return machine, interp
    except OSError:
        return None


def in_fresh_process(work):
    """Run work() -> dict in a fork of this interpreter; its output to the terminal is kept apart.
    A crash or a hang during loading is an error too."""
    r, w = os.pipe()
    log = tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            signal.alarm(LOAD_TIMEOUT_S)
            data = json.dumps(work()).encode()
        except BaseException as exc:   # noqa: BLE001 - everything goes back to the parent as text
            data = json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode()
        os.write(w, data)
        os._exit(0)
    os.close(w)
    chunks = []
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    log.seek(0)
    output = log.read()[-2000:].decode(errors="replace")
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        why = "did not finish loading within %d s" % LOAD_TIMEOUT_S if sig == signal.SIGALRM else \
            "crashed while loading (signal %d)" % sig
        return {"error": why + (": " + output.strip() if output.strip() else "")}
    try:
        return json.loads(b"".join(chunks) or b"{}")
    except ValueError:
        return {"error": "the loading process wrote no result: " + output.strip()}


def open_now(path):
    try:
        ctypes.CDLL(path, mode=os.RTLD_NOW)
    except OSError as exc:
        return {"error": str(exc) or "dlopen failed"}
    return {}


def entry_points(path, symbols):
    def work():
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOW)
        except OSError as exc:
            return {"loaded": False, "error": str(exc), "missing": list(symbols)}
        missing = [s for s in symbols if not hasattr(lib, s)]
        return {"loaded": True, "error": "", "missing": missing}
    out = in_fresh_process(work)
    out.setdefault("loaded", False)
    out.setdefault("missing", list(symbols))
    return {"path": path, **out}


def hip_runtime_version(path):
    def work():
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOW)
        except OSError as exc:
            return {"error": str(exc)}
        try:
            fn = lib.hipRuntimeGetVersion
        except AttributeError as exc:
            return {"error": f"{path}: hipRuntimeGetVersion not found ({exc})"}
        v = ctypes.c_int()
        rc = fn(ctypes.byref(v))
        if rc != 0:
            return {"error": f"hipRuntimeGetVersion returned error {rc}"}
        return {"version": f"{v.value // 10000000}.{v.value // 100000 % 100}.{v.value % 100000}",
                "loaded_as": os.path.realpath(mapped_file(lib) or path)}
    return {"path": path, **in_fresh_process(work)}


# -- the loader's choice: which file a SONAME resolves to -------------------------------------
PT_LOAD, PT_DYNAMIC, DT_NULL, DT_STRTAB, DT_SONAME = 1, 2, 0, 5, 14
RTLD_DI_LINKMAP = 2
# Folders the loader searches without being told (glibc's trusted directories on x86-64).
DEFAULT_LOADER_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu")


def elf_soname(path):
    """A 64-bit ELF library's DT_SONAME, or None (no dynamic section, no SONAME, not 64-bit ELF).
    The string table's address is a virtual one: it is mapped to a file offset through PT_LOAD."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2:
                return None
            order = "little" if head[5] == 1 else "big"
            num = lambda b: int.from_bytes(b, order)   # noqa: E731
            phoff, phentsize, phnum = num(head[32:40]), num(head[54:56]), num(head[56:58])
            loads, dynamic = [], None
            for i in range(min(phnum, 256)):
                f.seek(phoff + i * phentsize)
                ph = f.read(56)
                if len(ph) < 56:
                    return None
                kind, offset, vaddr, filesz = num(ph[0:4]), num(ph[8:16]), num(ph[16:24]), num(ph[32:40])
                if kind == PT_LOAD:
                    loads.append((vaddr, filesz, offset))
                elif kind == PT_DYNAMIC:
                    dynamic = (offset, filesz)
            if dynamic is None:
                return None
            f.seek(dynamic[0])
            table = f.read(min(dynamic[1], 1 << 20))
            strtab = soname = None
            for i in range(0, len(table) - 15, 16):
                tag, val = num(table[i:i + 8]), num(table[i + 8:i + 16])
                if tag == DT_NULL:
                    break
                if tag == DT_STRTAB:
                    strtab = val
                elif tag == DT_SONAME:
                    soname = val
            if strtab is None or soname is None:
                return None
            base = next((off + strtab - va for va, size, off in loads if va <= strtab < va + size), None)
            if base is None:
                return None
            f.seek(base + soname)
            raw = f.read(4096).split(b"\0", 1)[0]
            return raw.decode(errors="replace") or None
    except OSError:
        return None


def mapped_file(lib):
    """The file the loader mapped for a ctypes library (its link map's l_name), or ""."""
    class LinkMap(ctypes.Structure):
        _fields_ = [("l_addr", ctypes.c_void_p), ("l_name", ctypes.c_char_p)]
    for source in (None, "libdl.so.2"):      # dlinfo moved into libc with glibc 2.34
        try:
            dlinfo = ctypes.CDLL(source).dlinfo
        except (OSError, AttributeError):
            continue
        lm = ctypes.POINTER(LinkMap)()
        if dlinfo(ctypes.c_void_p(lib._handle), RTLD_DI_LINKMAP, ctypes.byref(lm)) == 0 and lm:
            return (lm.contents.l_name or b"").decode(errors="replace")
    return ""


def loader_dirs():
    """Every folder the loader searches here, as real paths: LD_LIBRARY_PATH's, those ld.so.cache
    holds libraries from (ld.so.conf and ld.so.conf.d after ldconfig), and the trusted defaults."""
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").replace(";", ":").split(":") if d]
    for ldconfig in ("/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"):
        try:
            out = subprocess.run([ldconfig, "-p"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                 errors="replace").stdout
        except OSError:
            continue
        dirs += [os.path.dirname(line.rsplit("=> ", 1)[1].strip()) for line in out.splitlines() if "=> " in line]
        break
    return {os.path.realpath(d) for d in list(dirs) + list(DEFAULT_LOADER_DIRS)}


def loader_choices(paths):
    searched = loader_dirs()
    out = {}
    for path in dict.fromkeys(os.path.realpath(p) for p in files_under(paths)):
        head = elf_header(path) if os.path.isfile(path) else None
        soname = elf_soname(path) if head and head[0] == EM_X86_64 and not head[1] else None
        if not soname:
            continue

        def work(soname=soname):
            # RTLD_LAZY: which file is picked, not whether its symbols bind (the load check's job)
            try:
                lib = ctypes.CDLL(soname, mode=os.RTLD_LAZY)
            except OSError as exc:
                return {"error": str(exc) or "dlopen failed"}
            return {"loaded_as": mapped_file(lib)}
        res = in_fresh_process(work)
        mapped = res.get("loaded_as")
        out[path] = {"soname": soname, "resolved": os.path.realpath(mapped) if mapped else None,
                     "error": res.get("error", "" if mapped else "the loader named no file for it"),
                     "on_loader_path": os.path.dirname(path) in searched}
    return out


def ldd_r(path):
    proc = subprocess.run(["ldd", "-r", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace")
    return proc.returncode, proc.stdout


def start(path):
    env = {**os.environ, "LD_BIND_NOW": "1"}
    try:
        proc = subprocess.run([path, "--version"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, env=env, timeout=START_TIMEOUT_S, errors="replace", text=True)
    except subprocess.TimeoutExpired:
        return {"rc": None, "loaded": True, "note": f"still running after {START_TIMEOUT_S} s (past the loader)"}
    except OSError as exc:
        return {"rc": None, "loaded": False, "output": str(exc)}
    loader_failed = proc.returncode == 127 and any(e in proc.stdout for e in LOADER_ERRORS)
    return {"rc": proc.returncode, "loaded": not loader_failed, "output": proc.stdout[-1500:]}


def expected_kind(path):
    """What a file's name says it is: "gpu" (a code object), "library" (a shared object) or None."""
    name = os.path.basename(path)
    if name.endswith((".co", ".hsaco")):
        return "gpu"
    return "library" if ".so" in name else None


def not_loadable(path, want):
    """Why a file named as a library or code object cannot be one (None when it may be)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
            size = os.fstat(f.fileno()).st_size
    except OSError as exc:
        return f"cannot read: {exc}"
    what = "a shared library" if want == "library" else "a GPU code object"
    if not size:
        return f"empty file (0 bytes) where {what} is expected"
    if head[:4] == b"\x7fELF":
        return f"truncated ELF file: {size} bytes, shorter than its 64-byte header" if size < 64 else None
    if want == "gpu" and head.startswith(BUNDLE_MAGICS):
        return None           # an offload bundle: archs reads it whole
    if want == "library" and any(w in head for w in LINKER_SCRIPT_WORDS):
        return None
    return f"not an ELF file ({size} bytes) where {what} is expected"


def check(path, start_programs):
    head = elf_header(path)
    want = expected_kind(path)
    why = not_loadable(path, want) if want and head is None else None
    if why:
        return {"kind": "bad-" + want, "ok": False, "error": f"{path}: {why}"}
    if head is None:
        return {"kind": "gpu" if want == "gpu" else "other", "ok": True, "error": ""}
    machine, interp = head
    if machine == EM_AMDGPU:
        return {"kind": "gpu", "ok": True, "error": ""}
    if machine != EM_X86_64:
        return {"kind": "other", "ok": True, "error": ""}
    if interp and ".so" not in os.path.basename(path):
        rc, text = ldd_r(path)
        out = {"kind": "program", "ldd_r": text, "ldd_rc": rc, "ok": True, "error": ""}
        if start_programs:
            out["start"] = start(path)
            if not out["start"]["loaded"]:
                out.update(ok=False, error=out["start"].get("output", "").strip())
        return out
    res = in_fresh_process(lambda: open_now(path))
    if not res.get("error"):
        return {"kind": "library", "ok": True, "error": ""}
    return {"kind": "library", "ok": False, "error": res["error"], "ldd_r": ldd_r(path)[1][-4000:]}


def files_under(paths):
    for top in paths:
        if os.path.isdir(top):
            for d, _, names in sorted(os.walk(top)):
                yield from (os.path.join(d, n) for n in sorted(names))
        else:
            yield top


def main(argv):
    if argv[:1] == ["--entry-points"] and len(argv) >= 2:
        json.dump(entry_points(argv[1], argv[2:]), sys.stdout)
    elif argv[:1] == ["--call-version"] and len(argv) == 2:
        json.dump(hip_runtime_version(argv[1]), sys.stdout)
    elif argv[:1] == ["--resolve"]:
        json.dump(loader_choices(argv[1:]), sys.stdout, indent=1, sort_keys=True)
    else:
        start_programs = not os.path.exists("/dev/kfd")
        result = {}
        for path in files_under(argv):
            real = os.path.realpath(path)
            if real not in result and os.path.isfile(real):
                result[real] = check(real, start_programs)
        json.dump(result, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
