#!/usr/bin/env python3
"""What one file holds for the GPU, each file read whole (wholefile.py): AMDGPU ELF code objects
(the target from their notes, which must agree with ``e_flags``), host files and standalone
bundles with offload bundles (every entry's code object read whole), Tensile catalogues (msgpack
to their last byte); a per-arch file's name must agree with its content; and the walk over files
and folders.

Standard library only; part of the architecture probe (archs.py)."""

from __future__ import annotations

import json
import mmap
import os
import stat
import struct
from dataclasses import dataclass

from bundles import BUNDLE_MAGIC, CCOB_MAGIC, find_bundles
from gfxnames import arch_of_target_id, archs_from_name, parse_target_id, sorted_archs, strip_features
from wholefile import TRUNCATED, catalogue_processors, code_object, elf_layout, name_disagrees

EM_X86_64 = 62
EM_AMDGPU = 224
ELF_MAGIC = b"\x7fELF"

#: Tensile files whose names may carry the architecture.
TENSILE_SUFFIXES = (".co", ".hsaco", ".dat", ".yaml", ".yml")
#: Files that hold GPU code by their name: nothing else may stand in their place.
CODE_SUFFIXES = (".co", ".hsaco")


# ---------------------------------------------------------------------------------------------
# Result type

@dataclass(frozen=True)
class FileArchs:
    """What one file holds for the GPU.

    kind: "host-bundles" (host ELF or other container with offload bundles), "host" (host
    ELF without GPU code), "code-object" (AMDGPU ELF, or a standalone offload bundle such as
    ``hipcc --genco`` writes, or a ``.co``/``.hsaco`` file that holds neither: then with an
    error), "tensile-name" (a per-arch catalogue: its architecture from the file name, checked
    against the processors it catalogues where it names any), "other".
    """

    path: str
    kind: str
    archs: tuple[str, ...]
    entries: tuple[str, ...]
    error: str | None = None

    def to_json(self) -> dict:
        return {"path": self.path, "kind": self.kind, "archs": list(self.archs),
                "entries": list(self.entries), "error": self.error}


# ---------------------------------------------------------------------------------------------
# Reading each file whole

def _entry_check(buf, entry_id: str, offset: int, size: int) -> str | None:
    """Why a bundle entry is not the whole code object its ID names (None when it is)."""
    if "-amdgcn-" not in entry_id or not size:     # the host entry, or another vendor's code
        return None
    if bytes(buf[offset:offset + 4]) != ELF_MAGIC:
        return f"{size} bytes that are no ELF code object"
    target, error = code_object(buf, offset, size)
    if error:
        return error
    # The runtime picks an entry by its ID and then loads its code object: code that names a
    # feature the ID leaves out, or another processor, fails on a device the ID promised to serve.
    named, held = parse_target_id(entry_id), parse_target_id(target or "")
    if named and held and (named[0] != held[0] or any(named[1].get(k) != v for k, v in held[1].items())):
        return f"corrupt: its ID names {entry_id.rsplit('--', 1)[-1]}, its code object is for {target}"
    return None


def _per_arch_name(path: str):
    """The one target a per-arch file of a Tensile folder serves by its name (``..._gfx90a-xnack-.hsaco``
    -> gfx90a:xnack-), or None for a file of every arch or of none. Only there do the libraries
    choose files by name (perarch.py has their rules); elsewhere a name is only a name."""
    base = os.path.basename(path)
    if not base.endswith(TENSILE_SUFFIXES) or not _in_library_folder(path):
        return None
    archs, targets = archs_from_name(base)
    return targets[0] if len(set(archs)) == 1 else None


def _judged(r: FileArchs, codes) -> FileArchs:
    """r with its name checked against the code it holds (codes: target IDs or processors)."""
    named = _per_arch_name(r.path)
    why = name_disagrees(named, codes) if named and not r.error else None
    return r if why is None else FileArchs(r.path, r.kind, r.archs, r.entries, why)


def _in_library_folder(path: str) -> bool:
    return os.path.basename(os.path.dirname(path)) == "library"


def _scan_buffer(buf, path: str) -> FileArchs:
    """``buf`` supports len, slicing and find (bytes, bytearray or mmap)."""
    is_elf = buf[:4] == ELF_MAGIC
    e_machine = None
    if is_elf and len(buf) >= 20:
        e_machine, = struct.unpack("<H", buf[18:20])
        if buf[5] == 2:  # big-endian ELF (not a ROCm file, but read it right)
            e_machine, = struct.unpack(">H", buf[18:20])
    if e_machine == EM_AMDGPU:
        target, error = code_object(buf)
        archs = (strip_features(target),) if target else ()
        return _judged(FileArchs(path, "code-object", archs, (target,) if target else (), error),
                       [target] if target else [])

    base = os.path.basename(path)
    if is_elf and e_machine is None:           # too short to say what machine it is for
        kind = "code-object" if base.endswith(CODE_SUFFIXES) else "other"
        return FileArchs(path, kind, (), (), elf_layout(buf)[0] or f"{TRUNCATED} ELF header")
    layout_error = elf_layout(buf)[0] if is_elf else None
    ids, errors = find_bundles(buf, _entry_check)
    if layout_error:
        errors.insert(0, layout_error)
    error = "; ".join(errors) if errors else None
    if ids or (errors and not layout_error):
        archs = sorted_archs(a for a in map(arch_of_target_id, ids) if a)
        entries = tuple(dict.fromkeys(ids))
        if is_elf:
            kind = "host-bundles"
        elif buf[:len(BUNDLE_MAGIC)] == BUNDLE_MAGIC or buf[:4] == CCOB_MAGIC:
            kind = "code-object"  # a standalone bundle, as `hipcc --genco` writes
        else:
            kind = "host-bundles"  # e.g. a static archive of HIP objects
        return _judged(FileArchs(path, kind, archs, entries, error), ids)
    if is_elf:
        return FileArchs(path, "host", (), (), error)
    if base.endswith(CODE_SUFFIXES):
        head = bytes(buf[:len(BUNDLE_MAGIC)])
        if len(head) >= 4 and (BUNDLE_MAGIC.startswith(head) or head.startswith((BUNDLE_MAGIC, CCOB_MAGIC))):
            return FileArchs(path, "code-object", (), (),
                             f"{TRUNCATED} or corrupt offload bundle: no whole entry in its {len(buf)} bytes")
        what = "an empty file" if not len(buf) else f"{len(buf)} bytes that are no ELF code object or offload bundle"
        return FileArchs(path, "code-object", (), (), f"{what} where a GPU code object is expected")
    if base.endswith(".dat") and _in_library_folder(path):
        processors, error = catalogue_processors(buf)
        archs, targets = archs_from_name(base)
        kind = "tensile-name" if archs else "other"
        r = FileArchs(path, kind, sorted_archs(archs), tuple(dict.fromkeys(targets)), error)
        named = _per_arch_name(path)
        if named and not error and processors - {strip_features(named)}:
            return FileArchs(path, kind, r.archs, r.entries,
                             f"its name says {strip_features(named)} but it catalogues code for "
                             f"{', '.join(sorted_archs(processors))}")
        return r
    if base.endswith(TENSILE_SUFFIXES):
        archs, targets = archs_from_name(base)
        if archs:
            return FileArchs(path, "tensile-name", sorted_archs(archs),
                             tuple(dict.fromkeys(targets)))
    return FileArchs(path, "other", (), ())


def scan_bytes(data: bytes, path: str = "") -> FileArchs:
    """Scan an in-memory file image; ``path`` is reported and used for name-based archs."""
    if isinstance(data, memoryview):
        data = data.tobytes()
    return _scan_buffer(data, str(path))


def scan_file(path) -> FileArchs:
    """Scan one file through mmap (large libraries are not copied into memory)."""
    spath = os.fspath(path)
    try:
        with open(spath, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                return _scan_buffer(b"", spath)
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                if hasattr(mm, "madvise") and hasattr(mmap, "MADV_SEQUENTIAL"):
                    try:
                        mm.madvise(mmap.MADV_SEQUENTIAL)
                    except OSError:
                        pass
                return _scan_buffer(mm, spath)
    except (OSError, ValueError) as exc:
        return FileArchs(spath, "other", (), (), f"cannot read: {exc}")


def _candidates(paths) -> list[str]:
    """Regular files under ``paths``: directories recursively and sorted, symlinks to files
    resolved and deduplicated (a given path or a real file wins over a symlink to it)."""
    chosen: dict[tuple[int, int], tuple[int, int, str]] = {}   # inode -> (rank, order, path)
    missing: list[tuple[int, str]] = []
    order = 0

    def offer(p: str, rank: int) -> None:
        nonlocal order
        try:
            st = os.stat(p)
        except OSError:
            return
        if not stat.S_ISREG(st.st_mode):
            return
        key = (st.st_dev, st.st_ino)
        order += 1
        if key not in chosen or rank < chosen[key][0]:
            chosen[key] = (rank, order, p)

    for raw in paths:
        p = os.fspath(raw)
        try:
            st = os.stat(p)
        except OSError:
            order += 1
            missing.append((order, p))
            continue
        if stat.S_ISDIR(st.st_mode):
            for root, dirs, files in os.walk(p, followlinks=False):
                dirs.sort()
                for name in sorted(files):
                    full = os.path.join(root, name)
                    offer(full, 2 if os.path.islink(full) else 1)
        else:
            offer(p, 0)
    ordered = sorted([(o, p) for _r, o, p in chosen.values()] + missing)
    return [p for _o, p in ordered]


def _scan_one(p: str) -> FileArchs:
    if not os.path.exists(p):
        return FileArchs(p, "other", (), (), "no such file or directory")
    return scan_file(p)


#: Most processes a scan of many files is spread over: reading every byte of an image's GPU files
#: (gigabytes of libraries, hundreds of megabytes of catalogues walked in Python) is CPU-bound.
MAX_WORKERS = 4
_FILES_PER_WORKER = 32


def _share(paths: list[str], n: int) -> list[list[int]]:
    """Indexes of paths dealt to n workers, largest files first, each to the least loaded."""
    def size(p):
        try:
            return os.path.getsize(p)
        except OSError:
            return 0
    loads = [[0, []] for _ in range(n)]
    for i in sorted(range(len(paths)), key=lambda i: -size(paths[i])):
        least = min(loads, key=lambda w: w[0])
        least[0] += size(paths[i])
        least[1].append(i)
    return [sorted(w[1]) for w in loads]


def _in_child(work: list[str]):
    """(pid, read end of a pipe) of a forked process that scans work and writes its JSON there."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(r)
            data = json.dumps([_scan_one(p).to_json() for p in work]).encode()
            with os.fdopen(w, "wb") as out:
                out.write(data)
        except BaseException:   # noqa: BLE001 - the parent scans this share itself
            code = 1
        os._exit(code)
    os.close(w)
    return pid, r


def _gather(pid: int, fd: int, work: list[str]) -> list[FileArchs]:
    with os.fdopen(fd, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    try:
        if status == 0:
            got = [FileArchs(**{**d, "archs": tuple(d["archs"]), "entries": tuple(d["entries"])})
                   for d in json.loads(data)]
            if [g.path for g in got] == work:
                return got
    except (ValueError, TypeError, KeyError):
        pass
    return [_scan_one(p) for p in work]     # the worker died: its share is scanned here


def scan_paths(paths, workers: int | None = None) -> list[FileArchs]:
    """Scan files and directories (recursively). A path that does not exist gives a result with
    an error; non-regular files (devices, sockets, broken links) are skipped. Many files are
    spread over up to ``workers`` processes (default: the CPUs, at most MAX_WORKERS)."""
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    todo = _candidates(paths)
    if workers is None:
        workers = min(os.cpu_count() or 1, MAX_WORKERS)
    workers = max(1, min(workers, len(todo) // _FILES_PER_WORKER))
    if workers == 1 or not hasattr(os, "fork"):
        return [_scan_one(p) for p in todo]
    shares = _share(todo, workers)
    children = [(_in_child([todo[i] for i in share]), share) for share in shares[1:]]
    results: list[FileArchs | None] = [None] * len(todo)
    for i in shares[0]:
        results[i] = _scan_one(todo[i])
    for (pid, fd), share in children:
        for i, r in zip(share, _gather(pid, fd, [todo[i] for i in share])):
            results[i] = r
    return results
