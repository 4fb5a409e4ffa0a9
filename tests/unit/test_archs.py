"""GPU architecture listing (probes/archs.py through the rocmforge.verify.readers.archs shim).

Fixtures in tests/fixtures/archs/ were made with Debian's hipcc 5.7 / clang 17 (generate.sh);
compressed bundles, stray magic strings and corrupt inputs are built here in Python.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import random
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from rocmforge.shared import packagedata
from rocmforge.shared.packagedata import PROBES
from rocmforge.verify.readers import archs

ROOT = Path(__file__).resolve().parents[2]
PROBE = PROBES / "archs.py"
FIX = ROOT / "tests" / "fixtures" / "archs"
PROBE_MODULE = packagedata.probe("archs")
BUNDLES = packagedata.probe("bundles")
WHOLE = packagedata.probe("wholefile")
KINDS = {"host-bundles", "host", "code-object", "tensile-name", "other"}

HOST_ID = "host-x86_64-unknown-linux--"


def fixture_bytes(name: str) -> bytes:
    return (FIX / name).read_bytes()


def host_elf(payload: bytes = b"", pad: int = 256) -> bytes:
    """An x86-64 ELF header followed by ``payload`` (enough for the scanner's purposes)."""
    header = bytearray(64)
    header[:4] = b"\x7fELF"
    header[4:7] = b"\x02\x01\x01"  # ELF64, little-endian, version 1
    struct.pack_into("<HHI", header, 16, 3, 62, 1)  # ET_DYN, EM_X86_64
    return bytes(header) + b"\0" * pad + payload + b"\0" * pad


def make_bundle(entries: list[tuple[str, bytes]]) -> bytes:
    """An uncompressed clang offload bundle (layout of clang's BinaryFileHandler)."""
    header_len = 24 + 8 + sum(24 + len(i) for i, _ in entries)
    header = bytearray(b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", len(entries)))
    body = bytearray()
    for entry_id, blob in entries:
        offset = header_len + len(body) if blob else header_len
        header += struct.pack("<QQQ", offset, len(blob), len(entry_id)) + entry_id.encode()
        body += blob
    assert len(header) == header_len
    return bytes(header + body)


def make_ccob(bundle: bytes, version: int, method: str = "zlib", stream: bytes | None = None) -> bytes:
    """A CCOB blob as clang's CompressedOffloadBundle::compress writes it (versions 1-3)."""
    if stream is None:
        if method == "zlib":
            stream = zlib.compress(bundle, 9)
        else:
            stream = zstd_compress(bundle)
    method_id = {"zlib": 0, "zstd": 1}[method]
    md5_low = struct.unpack("<Q", hashlib.md5(bundle).digest()[:8])[0]
    if version == 1:
        header = b"CCOB" + struct.pack("<HHIQ", 1, method_id, len(bundle), md5_low)
    elif version == 2:
        total = 4 + 2 + 2 + 4 + 4 + 8 + len(stream)
        header = b"CCOB" + struct.pack("<HHIIQ", 2, method_id, total, len(bundle), md5_low)
    else:
        total = 4 + 2 + 2 + 8 + 8 + 8 + len(stream)
        header = b"CCOB" + struct.pack("<HHQQQ", 3, method_id, total, len(bundle), md5_low)
    return header + stream


def zstd_module():
    try:
        from compression import zstd  # type: ignore[import-not-found]  # Python >= 3.14

        return zstd
    except ImportError:
        pass
    try:
        import zstandard

        return zstandard
    except ImportError:
        return None


def zstd_compress(data: bytes) -> bytes:
    mod = zstd_module()
    if mod is None:
        pytest.skip("neither compression.zstd nor zstandard is installed")
    if hasattr(mod, "ZstdCompressor") and hasattr(mod.ZstdCompressor(), "compress"):
        return mod.ZstdCompressor().compress(data)
    return mod.compress(data)


@pytest.fixture(scope="module")
def co942() -> bytes:
    return fixture_bytes("co_gfx942.hsaco")


@pytest.fixture(scope="module")
def co1100() -> bytes:
    return fixture_bytes("co_gfx1100.hsaco")


@pytest.fixture(scope="module")
def two_arch_bundle(co942, co1100) -> bytes:
    return make_bundle(
        [
            (HOST_ID, b""),
            ("hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", co942),
            ("hipv4-amdgcn-amd-amdhsa--gfx1100", co1100),
        ]
    )


def with_flags(code_object: bytes, e_flags: int, abi_version: int | None = None) -> bytes:
    b = bytearray(code_object)
    struct.pack_into("<I", b, 48, e_flags)
    if abi_version is not None:
        b[8] = abi_version
    return bytes(b)


# ---------------------------------------------------------------------------------------------
# Offload bundles produced by hipcc


def test_multi_arch_executable_matches_roc_obj_ls():
    r = archs.scan_file(FIX / "multi_arch_exe")
    assert r.kind == "host-bundles"
    assert r.archs == ("gfx906", "gfx90a", "gfx1100")
    assert r.error is None
    recorded = {
        line.split()[1] for line in (FIX / "multi_arch_exe.roc-obj-ls.txt").read_text().splitlines() if line.strip()
    }
    assert set(r.entries) == recorded
    assert "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-" in r.entries
    assert HOST_ID in r.entries


def test_scan_bytes_equals_scan_file():
    path = FIX / "multi_arch_exe"
    assert archs.scan_bytes(path.read_bytes(), str(path)) == archs.scan_file(path)
    assert archs.scan_bytes(memoryview(path.read_bytes()), str(path)) == archs.scan_file(path)


def test_standalone_bundle_from_genco_is_a_code_object():
    r = archs.scan_file(FIX / "genco_bundle.hsaco")
    assert (r.kind, r.archs, r.error) == ("code-object", ("gfx906", "gfx1030"), None)
    assert "hipv4-amdgcn-amd-amdhsa--gfx1030" in r.entries


def test_bundles_anywhere_in_a_file_are_all_found(two_arch_bundle, co942):
    other = make_bundle([(HOST_ID, b""), ("hip-amdgcn-amd-amdhsa-gfx906", co942)])  # old-style ID
    data = host_elf(two_arch_bundle + b"\0" * 4096 + other)
    r = archs.scan_bytes(data, "libfoo.so")
    assert r.kind == "host-bundles"
    assert r.archs == ("gfx906", "gfx942", "gfx1100")
    assert r.entries == (
        HOST_ID,
        "hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-",
        "hipv4-amdgcn-amd-amdhsa--gfx1100",
        "hip-amdgcn-amd-amdhsa-gfx906",
    )


def test_generic_and_openmp_entry_ids(co942):
    data = host_elf(
        make_bundle(
            [
                ("hipv4-amdgcn-amd-amdhsa--gfx9-4-generic:sramecc+:xnack-", co942),
                ("openmp-amdgcn-amd-amdhsa--gfx90a", co942),
                ("openmp-nvptx64-nvidia-cuda--sm_70", b"ptx"),
            ]
        )
    )
    r = archs.scan_bytes(data, "x.so")
    assert r.archs == ("gfx90a", "gfx9-4-generic")  # by generation: 9.0 before 9.4
    assert len(r.entries) == 3


# ---------------------------------------------------------------------------------------------
# AMDGPU code objects and the EF_AMDGPU_MACH table


@pytest.mark.parametrize(
    "name,target",
    [
        ("co_gfx942.hsaco", "gfx942"),
        ("co_gfx1100.hsaco", "gfx1100"),
        ("co_gfx90a_xnack_on.hsaco", "gfx90a:xnack+"),
    ],
)
def test_code_objects_from_e_flags(name, target):
    r = archs.scan_file(FIX / name)
    assert (r.kind, r.archs, r.entries, r.error) == ("code-object", (target.split(":")[0],), (target,), None)


def test_ef_amdgpu_mach_spot_checks():
    t = archs.EF_AMDGPU_MACH
    expected = {
        0x02A: "gfx803",
        0x02C: "gfx900",
        0x02F: "gfx906",
        0x030: "gfx908",
        0x03F: "gfx90a",
        0x040: "gfx940",
        0x04B: "gfx941",
        0x04C: "gfx942",
        0x04F: "gfx950",
        0x036: "gfx1030",
        0x041: "gfx1100",
        0x046: "gfx1101",
        0x047: "gfx1102",
        0x048: "gfx1200",
        0x04E: "gfx1201",
        0x051: "gfx9-generic",
        0x052: "gfx10-1-generic",
        0x053: "gfx10-3-generic",
        0x054: "gfx11-generic",
        0x059: "gfx12-generic",
        0x05F: "gfx9-4-generic",
    }
    for mach, name in expected.items():
        assert t[mach] == name, hex(mach)
    assert len(set(t.values())) == len(t), "a processor name appears twice"
    assert all(0 < k <= 0xFF for k in t)


def test_ef_amdgpu_mach_matches_llc17():
    """Every gfx processor clang-17 knows, with the e_flags llc-17 wrote (generate.sh)."""
    rows = [
        line.split("\t")
        for line in (FIX / "llc17_e_flags.tsv").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert len(rows) >= 40
    for processor, flags, _abi in rows:
        assert archs.EF_AMDGPU_MACH[int(flags, 16) & 0xFF] == processor


@pytest.mark.parametrize(
    "mach,name", sorted((m, n) for m, n in PROBE_MODULE.EF_AMDGPU_MACH.items() if n.startswith("gfx"))
)
def test_every_table_entry_decodes(co942, mach, name):
    assert WHOLE.flags_target(with_flags(co942, mach | 0x500)) == name
    # the fixture's note still says gfx942: a code object whose e_flags disagree is corrupt
    r = archs.scan_bytes(with_flags(co942, mach | 0x500), "k.hsaco")
    if name == "gfx942":
        assert (r.kind, r.archs, r.error) == ("code-object", ("gfx942",), None)
    else:
        assert r.kind == "code-object" and f"its note says gfx942, its e_flags say {name}" in r.error


def test_generic_code_object_with_generic_version(co942):
    assert WHOLE.flags_target(with_flags(co942, (1 << 24) | 0x054, abi_version=4)) == "gfx11-generic"


@pytest.mark.parametrize(
    "e_flags,abi,target",
    [
        (0x53F, 2, "gfx90a"),  # V4 xnack any, sramecc any
        (0x73F, 2, "gfx90a:xnack+"),  # rocBLAS Kernels.so-000-gfx90a-xnack+.hsaco
        (0x63F, 2, "gfx90a:xnack-"),
        (0xE4C, 2, "gfx942:sramecc+:xnack-"),
        (0x94C, 3, "gfx942:sramecc-"),  # V5
        (0x041, 3, "gfx1100"),
        (0x32F, 1, "gfx906:sramecc+:xnack+"),  # V3: single bits
        (0x02F, 1, "gfx906"),
    ],
)
def test_feature_bits(co942, e_flags, abi, target):
    assert WHOLE.flags_target(with_flags(co942, e_flags, abi)) == target


def test_unknown_mach_falls_back_to_notes_then_reports_an_error(co942):
    # A processor newer than the table: the target string in the metadata note names it.
    r = archs.scan_bytes(with_flags(co942, 0x0FF), "k.hsaco")
    assert (r.kind, r.archs, r.error) == ("code-object", ("gfx942",), None)
    # Whole, but no note names a target and e_flags name an unknown processor: an error, not a guess.
    b = bytearray(with_flags(co942, 0x0FF))
    b = bytes(b).replace(b"\xadamdhsa.target", b"\xadamdhsa.tarxet")
    r = archs.scan_bytes(b, "k.hsaco")
    assert r.kind == "code-object" and r.archs == ()
    assert "unknown EF_AMDGPU_MACH 0xff" in r.error
    # A bare header: its sections lie past its end; the file name never stands in for the code.
    for name in ("k.hsaco", "library/TensileLibrary_gfx942.co"):
        r = archs.scan_bytes(co942[:64], name)
        assert (r.kind, r.archs) == ("code-object", ()) and r.error.startswith("truncated ELF file")


def test_file_name_disagreeing_with_e_flags(co942):
    r = archs.scan_bytes(co942, "library/TensileLibrary_gfx90a.co")
    assert r.archs == ("gfx942",)
    assert "gfx90a" in r.error and "gfx942" in r.error


# ---------------------------------------------------------------------------------------------
# Tensile file names

CATALOGUE = b"\x82\xa9solutions\x90\xa7library\x80"  # {"solutions": [], "library": {}}


@pytest.mark.parametrize(
    "name,kind,found,entries",
    [
        ("library/TensileLibrary_lazy_gfx90a.dat", "tensile-name", ("gfx90a",), ("gfx90a",)),
        ("library/TensileLibrary_Type_HH_Contraction_gfx942.yaml", "tensile-name", ("gfx942",), ("gfx942",)),
        ("library/TensileLibrary.dat", "other", (), ()),
        ("docs/notes_gfx90a.txt", "other", (), ()),
    ],
)
def test_tensile_catalogue_names(name, kind, found, entries):
    r = archs.scan_bytes(CATALOGUE, name)
    assert (r.kind, r.archs, r.entries, r.error) == (kind, found, entries, None)


@pytest.mark.parametrize(
    "name",
    [
        "library/Kernels.so-000-gfx90a-xnack-.hsaco",
        "library/TensileLibrary_gfx1100.co",
        "library/gfx90abc.co",
        "elsewhere/k_gfx90a.hsaco",
    ],
)
def test_a_code_object_name_never_stands_for_code(name):
    r = archs.scan_bytes(CATALOGUE, name)  # msgpack where code belongs
    assert (r.kind, r.archs, r.entries) == ("code-object", (), ())
    assert (
        r.error
        == f"{len(CATALOGUE)} bytes that are no ELF code object or offload bundle where a GPU code object is expected"
    )


# ---------------------------------------------------------------------------------------------
# False positives: the magic string without a bundle (as in libamdhip64)

MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"


@pytest.mark.parametrize(
    "payload",
    [
        MAGIC + b"\0",  # C string in .rodata
        b"Invalid offload bundle: " + MAGIC + b" not found\0" * 3,
        MAGIC + struct.pack("<Q", 0),  # zero entries
        MAGIC + struct.pack("<Q", 10**6),  # absurd count
        MAGIC + struct.pack("<QQQQ", 1, 10**9, 16, 8) + b"hipv4-xx",  # entry past the end
        MAGIC + struct.pack("<QQQQ", 1, 0, 0, 10) + b"garbage-id",  # unknown offload kind
        MAGIC + struct.pack("<QQQQ", 1, 0, 0, 9) + b"hip\xff-amdg",  # not ASCII
        MAGIC + struct.pack("<QQQQ", 1, 0, 0, 10**6),  # id longer than the file
        MAGIC,  # magic at the very end
        b"CCOB\0" + b"CCOB" + struct.pack("<HH", 1, 0) + b"\0" * 64,  # CCOB strings, no stream
        b"CCOB" + struct.pack("<HHI", 7, 0, 100),  # unknown version
    ],
)
def test_stray_magic_is_not_a_bundle(payload):
    for data in (host_elf(payload), host_elf(payload, pad=0)[:64] + payload):
        r = archs.scan_bytes(data, "libamdhip64.so.5")
        assert (r.kind, r.archs, r.entries, r.error) == ("host", (), (), None)


# ---------------------------------------------------------------------------------------------
# Compressed bundles (CCOB)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_ccob_zlib(two_arch_bundle, version):
    blob = make_ccob(two_arch_bundle, version)
    # version 1 has no total size: the stream's own end must be found among trailing bytes
    r = archs.scan_bytes(host_elf(b"\0" * 100 + blob + b"junk" * 50), "libfoo.so")
    assert (r.kind, r.archs, r.error) == ("host-bundles", ("gfx942", "gfx1100"), None)
    assert "hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-" in r.entries
    standalone = archs.scan_bytes(blob, "Kernels.so-000-gfx942.hsaco")
    assert (standalone.kind, standalone.archs) == ("code-object", ("gfx942", "gfx1100"))


def test_ccob_many_blobs_and_plain_bundles_together(two_arch_bundle, co942):
    plain = make_bundle([(HOST_ID, b""), ("hipv4-amdgcn-amd-amdhsa--gfx908", co942)])
    other = make_bundle([(HOST_ID, b""), ("hipv4-amdgcn-amd-amdhsa--gfx1030", co942)])
    data = host_elf(make_ccob(two_arch_bundle, 2) + b"\0" * 333 + plain + make_ccob(other, 3))
    r = archs.scan_bytes(data, "libfoo.so")
    assert r.archs == ("gfx908", "gfx942", "gfx1030", "gfx1100")
    # every entry's code object is read, inside the compressed one too: gfx942 code under other IDs
    assert "bundle entry hipv4-amdgcn-amd-amdhsa--gfx908 at offset" in r.error
    assert (
        "compressed offload bundle at offset" in r.error
        and "its ID names gfx1030, its code object is for gfx942" in r.error
    )
    assert "--gfx1100" not in r.error and "gfx942:sramecc+" not in r.error


@pytest.mark.parametrize("version", [2, 3])
def test_ccob_zstd(two_arch_bundle, version):
    if zstd_module() is None:
        pytest.skip(
            "zstd: neither compression.zstd (Python >= 3.14) nor zstandard is installed; "
            "the not-installed path is tested by test_ccob_zstd_without_module"
        )
    r = archs.scan_bytes(host_elf(make_ccob(two_arch_bundle, version, "zstd")), "libfoo.so")
    assert (r.kind, r.archs, r.error) == ("host-bundles", ("gfx942", "gfx1100"), None)


def test_ccob_zstd_without_module(two_arch_bundle, monkeypatch):
    def no_zstd():
        raise BUNDLES._NoZstd()

    monkeypatch.setattr(BUNDLES, "_zstd_decompressor", no_zstd)
    fake_stream = b"\x28\xb5\x2f\xfd" + b"\x00" * 40  # a zstd frame magic is all the header check needs
    blob = make_ccob(two_arch_bundle, 3, "zstd", stream=fake_stream)
    r = archs.scan_bytes(host_elf(blob + blob), "librocblas.so.4")
    assert r.kind == "host-bundles" and r.archs == ()
    assert r.error == "zstd-compressed bundle but the zstandard module is not installed"


def test_ccob_corrupt_stream_is_reported_not_raised(two_arch_bundle):
    good = make_ccob(two_arch_bundle, 2)
    corrupt = bytearray(good)
    corrupt[40:80] = b"\xff" * 40  # damage the deflate data after the zlib header
    r = archs.scan_bytes(host_elf(bytes(corrupt)), "libfoo.so")
    assert r.archs == () and "corrupt compressed offload bundle" in r.error
    not_a_bundle = make_ccob(b"x" * 100, 2)  # decompresses fine, holds no bundle
    r = archs.scan_bytes(host_elf(not_a_bundle), "libfoo.so")
    assert r.archs == () and "holds no valid bundle" in r.error


def test_ccob_size_lies_are_reported(two_arch_bundle):
    blob = bytearray(make_ccob(two_arch_bundle, 3))
    struct.pack_into("<Q", blob, 16, len(two_arch_bundle) - 10)  # uncompressed size too small
    r = archs.scan_bytes(host_elf(bytes(blob)), "libfoo.so")
    assert r.archs == () and "corrupt compressed offload bundle" in r.error


# ---------------------------------------------------------------------------------------------
# Truncated and corrupt input never raises


@pytest.mark.parametrize("name", ["multi_arch_exe", "genco_bundle.hsaco", "co_gfx942.hsaco"])
def test_truncated_input(name):
    data = fixture_bytes(name)
    cuts = {0, 1, 3, 4, 5, 10, 19, 20, 47, 52, 63, 64, 100, 1000, len(data) // 2, len(data) - 1}
    magic_at = data.find(MAGIC)
    if magic_at >= 0:
        cuts |= {magic_at + n for n in (1, 24, 30, 32, 60, 100, 200)}
    whole = archs.scan_bytes(data, name)
    assert whole.error is None and whole.archs
    for cut in sorted(c for c in cuts if c < len(data)):
        r = archs.scan_bytes(data[:cut], name)
        json.dumps(r.to_json())
        if cut < 4:  # not even the magic: only a code object's name says code belongs here
            if name.endswith(".hsaco"):
                assert (r.kind, r.archs) == ("code-object", ()) and "GPU code object is expected" in r.error
            else:
                assert (r.kind, r.archs, r.error) == ("other", (), None), cut
            continue
        # the kind the whole file has (a host ELF cut before its bundles: host), marked as cut
        # short, and no arch it does not hold
        short = {"other"} if cut < 20 and whole.kind == "host-bundles" else set()  # no e_machine yet
        assert r.kind in {whole.kind, "host" if whole.kind == "host-bundles" else whole.kind} | short, (cut, r)
        assert set(r.archs) <= set(whole.archs), (cut, r)
        assert r.error and ("truncated" in r.error or "no valid bundle" in r.error or "no whole entry" in r.error), (
            cut,
            r.error,
        )


def test_random_corruption(two_arch_bundle):
    rng = random.Random(1234)
    samples = [
        fixture_bytes("multi_arch_exe"),
        fixture_bytes("co_gfx942.hsaco"),
        host_elf(make_ccob(two_arch_bundle, 1)),
        host_elf(make_ccob(two_arch_bundle, 3)),
    ]
    # every arch a flipped byte could still spell from a real entry or table (e.g. gfx9xx -> another)
    known = set(archs.EF_AMDGPU_MACH.values())
    damaged = 0
    for data in samples:
        for _ in range(150):
            b = bytearray(data)
            for _ in range(rng.randint(1, 12)):
                pos = rng.randrange(len(b))
                b[pos] = rng.randrange(256)
            if rng.random() < 0.3:
                b = b[: rng.randrange(len(b))]
            r = archs.scan_bytes(bytes(b), "x")  # never raises
            assert r.kind in KINDS
            # a corrupted file is never reported with code it does not carry
            assert set(r.archs) <= known, (r.archs, r.error)
            json.dumps(r.to_json())
            damaged += bytes(b) != data and r.error is not None
    assert damaged > 100, "the corruptions were nearly all missed"


def test_empty_and_unreadable_files(tmp_path):
    empty = tmp_path / "empty.co"
    empty.write_bytes(b"")
    assert archs.scan_file(empty) == archs.FileArchs(
        str(empty), "code-object", (), (), "an empty file where a GPU code object is expected"
    )
    (tmp_path / "empty.txt").write_bytes(b"")
    assert archs.scan_file(tmp_path / "empty.txt") == archs.FileArchs(str(tmp_path / "empty.txt"), "other", (), ())
    r = archs.scan_file(tmp_path / "missing.so")
    assert r.kind == "other" and r.error.startswith("cannot read")


# ---------------------------------------------------------------------------------------------
# Folders, symlinks and coverage


@pytest.fixture
def fake_prefix(tmp_path, co942) -> Path:
    lib = tmp_path / "lib"
    (lib / "rocblas" / "library").mkdir(parents=True)
    (lib / "libfoo.so.1.2").write_bytes(fixture_bytes("multi_arch_exe"))
    (lib / "libfoo.so.1").symlink_to("libfoo.so.1.2")
    (lib / "libfoo.so").symlink_to("libfoo.so.1")
    (lib / "libamdhip64.so.5").write_bytes(host_elf(MAGIC + b"\0"))
    (lib / "rocblas" / "library" / "TensileLibrary_gfx942.co").write_bytes(co942)
    (lib / "rocblas" / "library" / "TensileLibrary_lazy_gfx1100.dat").write_bytes(CATALOGUE)
    (lib / "rocblas" / "library" / "TensileLibrary.dat").write_bytes(CATALOGUE)
    (lib / "rocblas" / "loop").symlink_to("..")  # a directory link: not followed
    (lib / "dangling").symlink_to("nowhere")
    os.mkfifo(lib / "fifo")
    return lib


def test_scan_paths_recurses_sorted_and_deduplicates(fake_prefix):
    results = archs.scan_paths([fake_prefix])
    rel = [os.path.relpath(r.path, fake_prefix) for r in results]
    assert rel == [
        "libamdhip64.so.5",
        "libfoo.so.1.2",
        "rocblas/library/TensileLibrary.dat",
        "rocblas/library/TensileLibrary_gfx942.co",
        "rocblas/library/TensileLibrary_lazy_gfx1100.dat",
    ]
    kinds = {os.path.basename(r.path): r.kind for r in results}
    assert kinds == {
        "libamdhip64.so.5": "host",
        "libfoo.so.1.2": "host-bundles",
        "TensileLibrary.dat": "other",
        "TensileLibrary_gfx942.co": "code-object",
        "TensileLibrary_lazy_gfx1100.dat": "tensile-name",
    }


def test_scan_paths_keeps_a_given_symlink_once(fake_prefix):
    link = fake_prefix / "libfoo.so"
    results = archs.scan_paths([link, fake_prefix, link])
    paths = [r.path for r in results]
    assert paths.count(str(link)) == 1
    assert str(fake_prefix / "libfoo.so.1.2") not in paths  # same file, given as the link
    assert results[0].path == str(link) and results[0].archs == ("gfx906", "gfx90a", "gfx1100")


def test_scan_paths_reports_missing_paths(tmp_path):
    (r,) = archs.scan_paths([tmp_path / "nope"])
    assert r.kind == "other" and r.error == "no such file or directory"


def test_library_coverage_names_library_and_missing_arch(fake_prefix):
    results = archs.scan_paths([fake_prefix])
    cov = archs.library_coverage(results, ["gfx90a:xnack-", "gfx942", "gfx1100"])
    assert cov == {
        str(fake_prefix / "libfoo.so.1.2"): ["gfx942"],
        str(fake_prefix / "rocblas" / "library"): ["gfx90a:xnack-"],
    }
    assert archs.library_coverage(results, ["gfx1100"]) == {}  # covered libraries are left out
    assert archs.library_coverage(results, []) == {}


def test_library_coverage_generic_targets_and_bare_hosts():
    results = [
        archs.FileArchs("/opt/lib/libgen.so", "host-bundles", ("gfx11-generic",), ()),
        archs.FileArchs("/opt/lib/libhost.so", "host", (), ()),
        archs.FileArchs(
            "/opt/lib/broken.so",
            "host-bundles",
            (),
            (),
            "zstd-compressed bundle but the zstandard module is not installed",
        ),
    ]
    cov = archs.library_coverage(results, ["gfx1101", "gfx1151", "gfx1201"])
    assert cov == {"/opt/lib/libgen.so": ["gfx1201"], "/opt/lib/broken.so": ["gfx1101", "gfx1151", "gfx1201"]}


# ---------------------------------------------------------------------------------------------
# Command line, JSON, and the probe's independence from the rocmforge package


def test_cli_json(tmp_path):
    for part in archs.PARTS:  # as in a container: no rocmforge
        (tmp_path / part).write_bytes((PROBES / part).read_bytes())
    proc = subprocess.run(
        [
            sys.executable,
            "-E",
            "-s",
            str(tmp_path / "archs.py"),
            "--json",
            str(FIX / "multi_arch_exe"),
            str(FIX / "co_gfx90a_xnack_on.hsaco"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out == [
        archs.scan_file(FIX / "multi_arch_exe").to_json(),
        {
            "path": str(FIX / "co_gfx90a_xnack_on.hsaco"),
            "kind": "code-object",
            "archs": ["gfx90a"],
            "entries": ["gfx90a:xnack+"],
            "error": None,
        },
    ]
    assert out[0]["archs"] == ["gfx906", "gfx90a", "gfx1100"]


def test_cli_table_and_exit_codes(capsys, tmp_path):
    assert archs.main([str(FIX / "genco_bundle.hsaco")]) == 0
    out = capsys.readouterr().out
    assert "genco_bundle.hsaco" in out and "gfx906,gfx1030" in out and "code-object" in out
    assert archs.main([str(tmp_path / "missing")]) == 1
    assert "no such file or directory" in capsys.readouterr().out
    assert archs.main([]) == 2
    assert archs.main(["--help"]) == 0


def test_to_json_round_trip():
    r = archs.scan_file(FIX / "co_gfx942.hsaco")
    assert json.loads(json.dumps(r.to_json())) == {
        "path": str(FIX / "co_gfx942.hsaco"),
        "kind": "code-object",
        "archs": ["gfx942"],
        "entries": ["gfx942"],
        "error": None,
    }


def test_probe_imports_only_the_standard_library_and_its_parts():
    modules = set()
    for node in (n for part in archs.PARTS for n in ast.walk(ast.parse((PROBES / part).read_text()))):
        if isinstance(node, ast.Import):
            modules |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            modules.add(node.module.split(".")[0])
    allowed = set(sys.stdlib_module_names) | {"zstandard", "compression"} | {p.removesuffix(".py") for p in archs.PARTS}
    assert modules <= allowed, modules - allowed
    assert "rocmforge" not in modules


def test_shim_reexports_the_probe():
    assert archs.PROBE_PATH == PROBE
    for name in ("FileArchs", "scan_bytes", "scan_file", "scan_paths", "library_coverage", "main", "EF_AMDGPU_MACH"):
        assert getattr(archs, name) is getattr(PROBE_MODULE, name)


# ---------------------------------------------------------------------------------------------
# What `build.py archs` adds: refusing files that cannot hold GPU code, marking files cut short
# (the bad files themselves are the corpus in tests/unit/bad_inputs/archs/)


@pytest.mark.parametrize(
    "name", ["multi_arch_exe", "genco_bundle.hsaco", "co_gfx942.hsaco", "co_gfx1100.hsaco", "co_gfx90a_xnack_on.hsaco"]
)
def test_whole_fixtures_are_not_damaged(name):
    assert archs.not_scannable(FIX / name) is None
    assert archs.elf_truncation(FIX / name) is None
    (r,) = archs.scan_checked([FIX / name])
    assert r == archs.scan_file(FIX / name) and not archs.damaged(r)


@pytest.mark.parametrize("name", ["multi_arch_exe", "co_gfx942.hsaco"])
def test_every_cut_of_an_elf_is_truncated(name, tmp_path):
    data = fixture_bytes(name)
    cut = tmp_path / name
    for size in sorted({16, 20, 63, 64, 100, 1000, len(data) // 2, len(data) - 1}):
        cut.write_bytes(data[:size])
        (r,) = archs.scan_checked([cut])
        assert archs.damaged(r) and r.error.startswith("truncated"), (size, r.error)


@pytest.mark.parametrize("order", ["<", ">"], ids=["little-endian", "big-endian"])
def test_32_bit_headers_are_read_in_their_byte_order(order, tmp_path):
    elf32 = bytearray(52)
    elf32[:6] = b"\x7fELF\x01" + (b"\x01" if order == "<" else b"\x02")
    struct.pack_into(order + "IIIHHHHHH", elf32, 0x1C, 52, 0, 0, 52, 32, 1, 40, 0, 0)  # one phdr at 52
    f = tmp_path / "a32.so"
    f.write_bytes(bytes(elf32))
    assert "program headers end at byte 84" in archs.elf_truncation(f)
    f.write_bytes(bytes(elf32) + struct.pack(order + "IIIIIIII", 1, 0, 0, 0, 84, 84, 5, 4))
    assert archs.elf_truncation(f) is None
    f.write_bytes(bytes(elf32) + struct.pack(order + "IIIIIIII", 1, 0, 0, 0, 4096, 4096, 5, 4))
    assert "segment 0 ends at byte 4096" in archs.elf_truncation(f)


def test_text_and_empty_files_are_not_scannable(tmp_path):
    (tmp_path / "notes.txt").write_text("gfx90a\n")
    (tmp_path / "empty.so").write_bytes(b"")
    assert "can hold no GPU code" in archs.not_scannable(tmp_path / "notes.txt")
    assert archs.not_scannable(tmp_path / "empty.so").startswith("empty file")
    assert archs.not_scannable(tmp_path) is None  # a folder is walked
    (tmp_path / "TensileLibrary_gfx90a.dat").write_bytes(b"\x82lazy")
    assert archs.not_scannable(tmp_path / "TensileLibrary_gfx90a.dat") is None
    (tmp_path / "libx.a").write_bytes(b"!<arch>\n")
    assert archs.not_scannable(tmp_path / "libx.a") is None


# ---------------------------------------------------------------------------------------------
# Full target IDs: coverage as the HIP runtime matches code to a device (issue 25 item 4)


@pytest.mark.parametrize(
    "code, device, runs",
    [
        ("gfx90a", "gfx90a:sramecc+:xnack-", True),  # no feature named: runs either way
        ("gfx90a:xnack-", "gfx90a:sramecc+:xnack-", True),
        ("gfx90a:xnack+", "gfx90a:sramecc+:xnack-", False),  # hipErrorNoBinaryForGpu on a default MI210
        ("gfx90a:xnack+", "gfx90a:sramecc+:xnack+", True),  # the same MI210 under HSA_XNACK=1
        ("gfx90a:sramecc-", "gfx90a:sramecc+:xnack-", False),
        ("hipv4-amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-", "gfx90a:sramecc+:xnack-", True),
        ("gfx908:xnack-", "gfx90a:sramecc+:xnack-", False),  # another processor
        ("gfx11-generic", "gfx1101", True),
        ("gfx11-generic", "gfx1201", False),
        ("gfx1100:xnack+", "gfx1100", False),  # a device without the feature
    ],
)
def test_runs_on_is_the_runtimes_rule(code, device, runs):
    assert archs.runs_on(code, device) is runs


def test_device_targets_take_the_default_modes():
    assert archs.device_targets("gfx90a") == ["gfx90a:sramecc+:xnack-", "gfx90a:sramecc-:xnack-"]
    assert archs.device_targets("gfx90a:xnack+") == ["gfx90a:sramecc+:xnack+", "gfx90a:sramecc-:xnack+"]
    assert archs.device_targets("gfx90a:sramecc+:xnack-") == ["gfx90a:sramecc+:xnack-"]
    assert archs.device_targets("gfx1100") == ["gfx1100"]
    assert archs.device_targets("gfx900") == ["gfx900:xnack-"]


def _xnack_on_only(tmp_path):
    """multi_arch_exe (hipcc 5.7: gfx1100, gfx906, gfx90a:xnack-) with its gfx90a entry renamed
    to xnack+ in place: the same bytes, a bundle the runtime gives a default MI210 nothing from."""
    data = (FIX / "multi_arch_exe").read_bytes()
    assert data.count(b"gfx90a:xnack-") == 2  # the bundle entry ID and the code object's own target
    out = tmp_path / "libonly_xnack_on.so"
    data = bytearray(data.replace(b"gfx90a:xnack-", b"gfx90a:xnack+"))
    for entry_id, offset, _size in BUNDLES.bundle_entries(data, data.find(MAGIC))[0]:
        if entry_id.endswith("gfx90a:xnack+"):  # its e_flags too: XNACK selector 3, on
            (flags,) = struct.unpack_from("<I", data, offset + 48)
            struct.pack_into("<I", data, offset + 48, flags | 0x300)
    out.write_bytes(bytes(data))
    assert archs.scan_file(out).error is None
    return out


def test_code_only_for_xnack_on_does_not_cover_a_default_gfx90a(tmp_path):
    lib = _xnack_on_only(tmp_path)
    (r,) = archs.scan_paths([lib])
    assert r.archs == ("gfx906", "gfx90a", "gfx1100")  # the arch list alone looks fine
    cov = archs.library_coverage([r], ["gfx90a", "gfx1100"])
    assert list(cov) == [str(lib)] and len(cov[str(lib)]) == 1
    gap = cov[str(lib)][0]
    assert gap.startswith("gfx90a for a gfx90a:sramecc+:xnack- or gfx90a:sramecc-:xnack- device")
    assert "only for gfx90a:xnack+" in gap
    assert archs.library_coverage([r], ["gfx90a:xnack+", "gfx1100"]) == {}  # a declared XNACK-on device is served
    real = archs.scan_paths([FIX / "multi_arch_exe"])
    assert archs.library_coverage(real, ["gfx90a", "gfx1100"]) == {}  # the unmodified build covers both


def test_a_tensile_folder_is_judged_on_target_ids(tmp_path):
    lib = tmp_path / "rocblas" / "library"
    lib.mkdir(parents=True)
    (lib / "Kernels.so-000-gfx90a-xnack+.hsaco").write_bytes(fixture_bytes("co_gfx90a_xnack_on.hsaco"))
    (lib / "Kernels.so-000-gfx1100.hsaco").write_bytes(fixture_bytes("co_gfx1100.hsaco"))
    results = archs.scan_paths([lib])
    assert [r.error for r in results] == [None, None]
    cov = archs.library_coverage(results, ["gfx90a", "gfx1100"])
    assert list(cov) == [str(lib)] and "only for gfx90a:xnack+" in cov[str(lib)][0]
    (lib / "Kernels.so-000-gfx90a-xnack-.hsaco").write_bytes(fixture_bytes("co_gfx90a_xnack_off.hsaco"))
    assert archs.library_coverage(archs.scan_paths([lib]), ["gfx90a", "gfx1100"]) == {}


def test_a_library_that_must_carry_gpu_code_and_has_none_fails(tmp_path):
    host = tmp_path / "libbitsandbytes_rocm64.so"
    host.write_bytes((FIX / "multi_arch_exe").read_bytes()[:64] + b"\0" * 64)  # an ELF, no bundle
    hip = tmp_path / "libamdhip64.so.6"
    hip.write_bytes(host.read_bytes())
    results = [archs.FileArchs(str(host), "host", (), ()), archs.FileArchs(str(hip), "host", (), ())]
    cov = archs.library_coverage(results, ["gfx90a", "gfx1100"], must_carry=[str(host), str(hip)])
    assert list(cov) == [str(host)]  # the HIP runtime is host code by design
    assert cov[str(host)][0].startswith("gfx90a, gfx1100: it carries no GPU code at all")
    assert archs.library_coverage(results, ["gfx90a"]) == {}  # not expected to carry any: not judged


@pytest.mark.parametrize(
    "name, host_only",
    [
        ("libamdhip64.so.6.4.43484", True),
        ("libhsa-runtime64.so.1.15.0", True),
        ("libhipblas.so.2", True),
        ("libamd_comgr.so.3", True),
        ("libbitsandbytes_cpu.so", True),
        ("librocblas.so.4.4", False),
        ("libbitsandbytes_rocm64.so", False),
        ("rocblas-gemm-smoke", False),
        ("libhipblaslt.so.1", True),
        ("librocsolver.so.0.1", False),
    ],
)
def test_host_only_list(name, host_only):
    assert bool(archs.host_only_reason(f"/usr/lib/x86_64-linux-gnu/{name}")) is host_only
