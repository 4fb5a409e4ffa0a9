#!/usr/bin/env python3
"""Clang offload bundles inside a file: plain ones (``__CLANG_OFFLOAD_BUNDLE__``) and compressed
ones (``CCOB``, header versions 1/2/3, zlib or zstd), each validated before its entry IDs are
believed, so a stray magic string is not taken for a bundle.

Standard library only, plus the optional ``zstandard`` module (``compression.zstd`` on Python >=
3.14) for zstd-compressed bundles; part of the architecture probe (archs.py)."""

from __future__ import annotations

import struct
import zlib

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
CCOB_MAGIC = b"CCOB"
BUNDLE_KINDS = frozenset({"hip", "hipv4", "host", "openmp", "hcc"})
MAX_BUNDLE_ENTRIES = 4096
MAX_ENTRY_ID_LEN = 1024
MAX_UNCOMPRESSED = 1 << 34          # 16 GiB: far above any real bundle, guards the allocator
_CCOB_HEADER_SIZE = {1: 4 + 2 + 2 + 4 + 8, 2: 4 + 2 + 2 + 4 + 4 + 8, 3: 4 + 2 + 2 + 8 + 8 + 8}
_CCOB_ZLIB, _CCOB_ZSTD = 0, 1       # llvm::compression::Format
_ZSTD_FRAME_MAGIC = b"\x28\xb5\x2f\xfd"

ZSTD_MISSING = "zstd-compressed bundle but the zstandard module is not installed"


# ---------------------------------------------------------------------------------------------
# Offload bundles

def _u64(buf, off: int) -> int:
    return struct.unpack("<Q", buf[off:off + 8])[0]


def parse_bundle(buf, start: int = 0) -> tuple[list[str], int] | None:
    """Parse the uncompressed offload bundle at ``buf[start]``.

    Returns (entry IDs, offset just past the header) or None when the bytes there are not a
    valid bundle. Entry offsets are relative to the bundle start and must lie inside ``buf``.
    """
    parsed = bundle_entries(buf, start)
    return None if parsed is None else ([e[0] for e in parsed[0]], parsed[1])


def bundle_entries(buf, start: int = 0) -> tuple[list[tuple[str, int, int]], int] | None:
    """parse_bundle with each entry's place: ([(ID, offset in buf, size)], offset past the header)."""
    end = len(buf)
    pos = start + len(BUNDLE_MAGIC)
    if buf[start:pos] != BUNDLE_MAGIC or pos + 8 > end:
        return None
    count = _u64(buf, pos)
    pos += 8
    if not 1 <= count <= MAX_BUNDLE_ENTRIES:
        return None
    entries = []
    for _ in range(count):
        if pos + 24 > end:
            return None
        offset, size, id_len = struct.unpack("<QQQ", buf[pos:pos + 24])
        pos += 24
        if not 1 <= id_len <= MAX_ENTRY_ID_LEN or pos + id_len > end:
            return None
        if start + offset + size > end:
            return None
        raw = bytes(buf[pos:pos + id_len])
        pos += id_len
        if not all(0x21 <= b < 0x7F for b in raw):
            return None
        entry_id = raw.decode("ascii")
        if entry_id.split("-", 1)[0] not in BUNDLE_KINDS or "-" not in entry_id:
            return None
        entries.append((entry_id, start + offset, size))
    return entries, pos


class _NoZstd(Exception):
    pass


def _zstd_decompressor():
    """A zstd decompressobj-like object (stream API), or raise _NoZstd."""
    try:  # Python >= 3.14
        from compression import zstd as _stdlib_zstd  # type: ignore[import-not-found]
        return _stdlib_zstd.ZstdDecompressor()
    except ImportError:
        pass
    try:
        import zstandard  # type: ignore[import-not-found]
    except ImportError:
        raise _NoZstd() from None
    return zstandard.ZstdDecompressor().decompressobj()


def _ccob_header(buf, start: int):
    """Validate a CCOB header; returns (version, method, header size, compressed end or None,
    uncompressed size) or None when these bytes are not a compressed bundle."""
    end = len(buf)
    if start + 8 > end:
        return None
    version, method = struct.unpack("<HH", buf[start + 4:start + 8])
    hsize = _CCOB_HEADER_SIZE.get(version)
    if hsize is None or method not in (_CCOB_ZLIB, _CCOB_ZSTD) or start + hsize > end:
        return None
    if version == 1:
        (usize,) = struct.unpack("<I", buf[start + 8:start + 12])
        total = None
    elif version == 2:
        total, usize = struct.unpack("<II", buf[start + 8:start + 16])
    else:
        total, usize = struct.unpack("<QQ", buf[start + 8:start + 24])
    if not len(BUNDLE_MAGIC) + 8 <= usize <= MAX_UNCOMPRESSED:
        return None
    stream_end = None
    if total is not None:
        if total <= hsize or start + total > end:
            return None
        stream_end = start + total
    head = bytes(buf[start + hsize:start + hsize + 4])
    if method == _CCOB_ZLIB:
        if len(head) < 2 or head[0] & 0x0F != 8 or (head[0] << 8 | head[1]) % 31:
            return None
    elif head != _ZSTD_FRAME_MAGIC:
        return None
    return version, method, hsize, stream_end, usize


def decompress_ccob(buf, start: int = 0) -> bytes | None:
    """Decompress the CCOB blob at ``buf[start]``.

    Returns the uncompressed bundle, or None when the bytes are not a valid compressed bundle.
    Raises _NoZstd for a zstd blob without a zstd module, ValueError for a corrupt stream.
    """
    header = _ccob_header(buf, start)
    if header is None:
        return None
    _version, method, hsize, stream_end, usize = header
    decomp = zlib.decompressobj() if method == _CCOB_ZLIB else _zstd_decompressor()
    pos = start + hsize
    limit = stream_end if stream_end is not None else len(buf)
    out = []
    got = 0
    chunk = 1 << 20
    try:
        while pos < limit and got < usize:
            piece = bytes(buf[pos:min(pos + chunk, limit)])
            pos += len(piece)
            data = decomp.decompress(piece)
            got += len(data)
            out.append(data)
            if got > usize:
                raise ValueError(f"more than the {usize} bytes the header announces")
            if getattr(decomp, "eof", False):
                break
    except (zlib.error, ValueError) as exc:
        raise ValueError(str(exc)) from None
    except Exception as exc:  # zstandard.ZstdError / compression.zstd.ZstdError
        raise ValueError(str(exc)) from None
    result = b"".join(out)
    if len(result) != usize:
        raise ValueError(f"decompressed {len(result)} bytes, header announces {usize}")
    return result


def find_bundles(buf, check=None) -> tuple[list[str], list[str]]:
    """Every offload bundle entry ID in ``buf`` (uncompressed and CCOB), and errors met.
    check(buffer, entry ID, offset, size) -> error or None reads each entry (in the decompressed
    bytes for a CCOB); its errors are listed with the entry's ID."""
    ids: list[str] = []
    errors: list[str] = []
    pos = buf.find(BUNDLE_MAGIC)
    while pos != -1:
        parsed = bundle_entries(buf, pos)
        if parsed:
            for entry_id, offset, size in parsed[0]:
                ids.append(entry_id)
                why = check(buf, entry_id, offset, size) if check else None
                if why:
                    errors.append(f"bundle entry {entry_id} at offset {offset:#x}: {why}")
            pos = buf.find(BUNDLE_MAGIC, parsed[1])
        else:
            pos = buf.find(BUNDLE_MAGIC, pos + 1)
    pos = buf.find(CCOB_MAGIC)
    while pos != -1:
        nxt = pos + 1
        try:
            data = decompress_ccob(buf, pos)
        except _NoZstd:
            if ZSTD_MISSING not in errors:
                errors.append(ZSTD_MISSING)
            data = None
        except ValueError as exc:
            errors.append(f"corrupt compressed offload bundle at offset {pos:#x}: {exc}")
            data = None
        if data is not None:
            inner_ids, inner_err = find_bundles(data, check) if data[:4] != CCOB_MAGIC else ([], [])
            if inner_ids:
                ids.extend(inner_ids)
            else:
                errors.append(f"compressed offload bundle at offset {pos:#x} holds no valid "
                              "bundle")
            errors.extend(f"compressed offload bundle at offset {pos:#x}: {e}" for e in inner_err)
        pos = buf.find(CCOB_MAGIC, nxt)
    return ids, errors
