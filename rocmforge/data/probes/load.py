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
{path: {"kind": "library"|"program"|"gpu"|"other", "ok": bool, "error": str, "ldd_r": str, ...}}.

`load.py --entry-points LIB SYMBOL...` opens LIB with RTLD_NOW in a fresh process and resolves
each SYMBOL: {"path", "loaded", "error", "missing": [...]}. `--call-version LIB` also calls
hipRuntimeGetVersion and prints {"version": "M.m.p"} or the error.

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
        return {"version": f"{v.value // 10000000}.{v.value // 100000 % 100}.{v.value % 100000}"}
    return {"path": path, **in_fresh_process(work)}


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


def check(path, start_programs):
    head = elf_header(path)
    if head is None:
        return {"kind": "other", "ok": True, "error": ""}
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
