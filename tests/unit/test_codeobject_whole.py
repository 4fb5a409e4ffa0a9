"""Code objects, bundles and catalogues read whole (probes/wholefile.py through archs, issue 38).

The code objects are tests/fixtures/archs (generate.sh: llc-17 / hipcc 5.7 in the hip-devel image):
co_gfx90a_xnack_{on,off,any}.hsaco differ only in the XNACK selector, genco_gfx90a_xnack_on.hsaco
is a standalone bundle of XNACK-on code. A file of a Tensile folder (…/library/) is judged by
its name as the libraries choose it; elsewhere a name is only a name."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from rocmforge.shared import packagedata
from rocmforge.verify.readers import archs

FIX = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "archs"
WHOLE = packagedata.probe("wholefile")
LOAD = packagedata.probe("load")


def fx(name: str) -> bytes:
    return (FIX / name).read_bytes()


def in_library(tmp_path, name: str, data: bytes) -> Path:
    lib = tmp_path / "rocblas" / "library"
    lib.mkdir(parents=True, exist_ok=True)
    (lib / name).write_bytes(data)
    return lib / name


# -- the target comes from the code, never from the name ------------------------------------------


@pytest.mark.parametrize(
    "fixture, target",
    [
        ("co_gfx90a_xnack_on.hsaco", "gfx90a:xnack+"),
        ("co_gfx90a_xnack_off.hsaco", "gfx90a:xnack-"),
        ("co_gfx90a_xnack_any.hsaco", "gfx90a"),
        ("co_gfx1100.hsaco", "gfx1100"),
        ("co_gfx942.hsaco", "gfx942"),
    ],
)
def test_target_from_note_and_e_flags_agree(fixture, target):
    data = fx(fixture)
    error, sections = WHOLE.elf_layout(data)
    assert error is None and sections
    assert WHOLE.notes_target(data, 0, sections) == target  # amdhsa.target of the metadata note
    assert WHOLE.flags_target(data) == target
    assert WHOLE.code_object(data) == (target, None)


def test_note_and_e_flags_that_disagree_are_corrupt():
    data = bytearray(fx("co_gfx90a_xnack_on.hsaco"))
    (flags,) = struct.unpack_from("<I", data, 48)
    struct.pack_into("<I", data, 48, (flags & ~0x300) | 0x200)  # e_flags: XNACK off, the note: on
    target, error = WHOLE.code_object(bytes(data))
    assert error == "corrupt AMDGPU code object: its note says gfx90a:xnack+, its e_flags say gfx90a:xnack-"


@pytest.mark.parametrize("cut", [0, 10, 63, 64, 200, 1000, -1])
def test_a_cut_code_object_is_truncated_never_named(cut, tmp_path):
    data = fx("co_gfx1100.hsaco")
    f = in_library(tmp_path, "TensileLibrary_gfx1100.co", data[:cut])
    r = archs.scan_file(f)
    assert (r.kind, r.archs, r.entries) == ("code-object", (), ())  # the name gives no gfx1100
    assert r.error.startswith(("truncated", "an empty file")), r.error


def test_section_headers_past_the_end_and_a_cut_note(tmp_path):
    data = bytearray(fx("co_gfx942.hsaco"))
    (shoff,) = struct.unpack_from("<Q", data, 40)
    struct.pack_into("<Q", data, 40, len(data))  # section headers after the end
    assert WHOLE.code_object(bytes(data))[1].startswith("truncated ELF file: its section headers end at byte")
    # a note whose descriptor runs past its section: corrupt, the target is not believed from it
    data = bytearray(fx("co_gfx942.hsaco"))
    error, sections = WHOLE.elf_layout(bytes(data))
    note_off = next(off for t, off, _size in sections if t == WHOLE.SHT_NOTE)
    struct.pack_into("<I", data, note_off + 4, 1 << 20)  # descsz of the first note
    assert "a note runs past its section" in WHOLE.code_object(bytes(data))[1]


# -- bundles: every entry read whole, uncompressed and compressed ---------------------------------


def test_standalone_bundle_entries_are_read_whole(tmp_path):
    data = fx("genco_gfx90a_xnack_on.hsaco")
    r = archs.scan_bytes(data, "k.hsaco")
    assert (r.kind, r.archs, r.error) == ("code-object", ("gfx90a",), None)
    assert "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+" in r.entries
    # damage the entry's code object past its header: its section headers now lie past its end
    entries, _ = archs_bundles().bundle_entries(data, 0)
    _id, off, size = next(e for e in entries if "gfx90a" in e[0])
    broken = bytearray(data)
    struct.pack_into("<Q", broken, off + 40, size)
    r = archs.scan_bytes(bytes(broken), "k.hsaco")
    assert "bundle entry hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+" in r.error and "section headers" in r.error


def archs_bundles():
    return packagedata.probe("bundles")


def test_compressed_bundle_entries_are_read_whole():
    data = fx("genco_gfx90a_xnack_on.hsaco")
    body = zlib.compress(data, 9)
    blob = b"CCOB" + struct.pack("<HHIIQ", 2, 0, 24 + len(body), len(data), 0) + body
    assert archs.scan_bytes(blob, "k.hsaco").error is None
    entries, _ = archs_bundles().bundle_entries(data, 0)
    _id, off, _size = next(e for e in entries if "gfx90a" in e[0])
    wrong = bytearray(data)
    struct.pack_into("<I", wrong, off + 48, 0x041)  # e_flags: gfx1100 under a gfx90a ID
    body = zlib.compress(bytes(wrong), 9)
    blob = b"CCOB" + struct.pack("<HHIIQ", 2, 0, 24 + len(body), len(wrong), 0) + body
    r = archs.scan_bytes(blob, "k.hsaco")
    assert r.error.startswith("compressed offload bundle at offset 0x0: bundle entry hipv4-amdgcn-amd-amdhsa--gfx90a")
    assert "e_flags say gfx1100" in r.error


# -- a per-arch file's name against its content, each file on its own -----------------------------


@pytest.mark.parametrize(
    "name, fixture, ok",
    [
        ("Kernels.so-000-gfx90a-xnack-.hsaco", "co_gfx90a_xnack_off.hsaco", True),
        ("Kernels.so-000-gfx90a-xnack+.hsaco", "co_gfx90a_xnack_on.hsaco", True),
        ("TensileLibrary_gfx90a.co", "co_gfx90a_xnack_any.hsaco", True),
        ("Kernels.so-000-gfx90a-xnack-.hsaco", "co_gfx90a_xnack_any.hsaco", True),  # "any" runs on XNACK off
        ("Kernels.so-000-gfx90a-xnack-.hsaco", "co_gfx90a_xnack_on.hsaco", False),
        ("TensileLibrary_gfx90a.co", "co_gfx90a_xnack_on.hsaco", False),  # loaded on every gfx90a device
        ("TensileLibrary_gfx90a.co", "co_gfx1100.hsaco", False),
        ("TensileLibrary_gfx1100.co", "co_gfx1100.hsaco", True),
        ("x_gfx90a-xnack-.hsaco", "genco_gfx90a_xnack_on.hsaco", False),  # a bundle of XNACK-on code only
    ],
)
def test_per_arch_name_against_content(name, fixture, ok, tmp_path):
    r = archs.scan_file(in_library(tmp_path, name, fx(fixture)))
    if ok:
        assert r.error is None, r.error
        return
    assert r.error.startswith("its name says gfx90a"), r.error
    assert ("gfx1100" if "1100" in fixture else "gfx90a:xnack+") in r.error


def test_a_name_outside_a_tensile_folder_is_not_judged(tmp_path):
    f = tmp_path / "co_gfx90a_xnack_on.hsaco"  # the fixture's own name: XNACK spelt "_xnack_on"
    f.write_bytes(fx("co_gfx90a_xnack_on.hsaco"))
    assert archs.scan_file(f).error is None


def test_a_folder_of_good_files_and_one_bad_fails_on_that_file(tmp_path):
    in_library(tmp_path, "Kernels.so-000-gfx90a-xnack+.hsaco", fx("co_gfx90a_xnack_on.hsaco"))
    in_library(tmp_path, "Kernels.so-000-gfx90a-xnack-.hsaco", fx("co_gfx90a_xnack_on.hsaco"))
    bad = in_library(tmp_path, "TensileLibrary_gfx90a.co", fx("co_gfx90a_xnack_any.hsaco"))
    results = archs.scan_paths([bad.parent])
    # the folder as a whole covers gfx90a (the plain file), yet the xnack- file is named wrong
    assert archs.library_coverage(results, ["gfx90a"]) == {}
    assert [Path(r.path).name for r in results if r.error] == ["Kernels.so-000-gfx90a-xnack-.hsaco"]


# -- catalogues: msgpack to their last byte, their processors against their name ------------------

LAZY = (
    b"\x82\xa9solutions\x90\xa7library\x82\xa4type\xa8Hardware\xa4rows\x91\x82\xa9predicate"
    b"\x82\xa4type\xa9Processor\xa5value\xa6gfx90a\xa7library\x80"
)


def test_catalogue_parses_to_its_end_and_names_its_processor(tmp_path):
    assert WHOLE.catalogue_processors(LAZY) == ({"gfx90a"}, None)
    assert archs.scan_file(in_library(tmp_path, "TensileLibrary_lazy_gfx90a.dat", LAZY)).error is None
    r = archs.scan_file(in_library(tmp_path, "TensileLibrary_lazy_gfx1100.dat", LAZY))
    assert r.error == "its name says gfx1100 but it catalogues code for gfx90a"
    for cut in (0, 1, len(LAZY) // 2, len(LAZY) - 1):
        r = archs.scan_file(in_library(tmp_path, "TensileLibrary_lazy_gfx90a.dat", LAZY[:cut]))
        assert r.error and ("empty catalogue" in r.error or "truncated msgpack" in r.error), (cut, r.error)
    r = archs.scan_file(in_library(tmp_path, "TensileLibrary.dat", LAZY + b"\x00"))
    assert r.error == "corrupt msgpack catalogue: 1 bytes after the msgpack value"


def test_catalogue_kernel_names_give_the_isa_and_isa000_is_any():
    names = b"\x91\xd9\x20Cijk_Ailk_Bjlk_HHS_BH_ISA1100_MT"  # 32-byte str
    assert WHOLE.catalogue_processors(names) == ({"gfx1100"}, None)
    assert WHOLE.catalogue_processors(b"\x91\xd9\x1fCijk_Ailk_Bjlk_HHS_BH_ISA000_MT") == (set(), None)


@pytest.mark.parametrize("data", [b"\xc1", b"\x92\x01", b"\xdc\x00\x05\x01", b"\xd9\x10abc", b"\x81\xa1k"])
def test_msgpack_walker_refuses_bad_data(data):
    with pytest.raises(ValueError):
        WHOLE.msgpack_whole(data)


# -- the load probe: a name alone never passes -------------------------------------------------------


@pytest.mark.parametrize(
    "name, data, kind",
    [
        ("TensileLibrary_gfx1100.co", b"", "bad-gpu"),
        ("Kernels.so-000-gfx1100.hsaco", b"not a code object\n", "bad-gpu"),
        ("librocblas.so.0.1", b"", "bad-library"),
        ("librocblas.so.0.1", b"\x7fELF\x02\x01\x01" + b"\0" * 20, "bad-library"),
    ],
)
def test_load_probe_refuses_what_cannot_be_code(name, data, kind, tmp_path):
    f = tmp_path / name
    f.write_bytes(data)
    out = LOAD.check(str(f), start_programs=False)
    assert (out["kind"], out["ok"]) == (kind, False)
    assert out["error"].startswith(f"{f}: ") and ("empty" in out["error"] or "ELF" in out["error"])


@pytest.mark.parametrize(
    "name, data, kind",
    [
        ("hipblasltTransform.hsaco", None, "gpu"),
        ("libc.so", b"/* GNU ld script */\nGROUP ( libc.so.6 )\n", "other"),
        ("TensileLibrary.dat", b"\x80", "other"),
    ],
)
def test_load_probe_passes_bundles_linker_scripts_and_data(name, data, kind, tmp_path):
    f = tmp_path / name
    f.write_bytes(fx("genco_gfx90a_xnack_on.hsaco") if data is None else data)
    out = LOAD.check(str(f), start_programs=False)
    assert (out["kind"], out["ok"]) == (kind, True)
