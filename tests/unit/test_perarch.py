"""probes/perarch.py: which files are per-arch, pruning a folder to the declared archs, and the
check that every file a declared-arch device opens is still there, on folders laid out like
Debian's librocblas0 (eager, one TensileLibrary.dat), librocblas4 and libhipblaslt1 (lazy
catalogues, msgpack) and MIOpen's databases."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from rocmforge.shared import packagedata

ROOT = Path(__file__).resolve().parents[2]
perarch = packagedata.probe("perarch")


def msgpack(v) -> bytes:
    """The subset Tensile writes: maps, arrays, strings, small ints, bools."""
    if isinstance(v, bool):
        return b"\xc3" if v else b"\xc2"
    if isinstance(v, int):
        return bytes([v]) if 0 <= v < 128 else b"\xd2" + struct.pack(">i", v)
    if isinstance(v, str):
        b = v.encode()
        return (
            bytes([0xA0 | len(b)])
            if len(b) < 32
            else b"\xd9" + bytes([len(b)])
            if len(b) < 256
            else b"\xda" + struct.pack(">H", len(b))
        ) + b
    if isinstance(v, list):
        return b"\xdc" + struct.pack(">H", len(v)) + b"".join(msgpack(x) for x in v)
    if isinstance(v, dict):
        return b"\xde" + struct.pack(">H", len(v)) + b"".join(msgpack(k) + msgpack(x) for k, x in v.items())
    raise TypeError(v)


def placeholder(stem: str) -> dict:
    return {"predicate": {"type": "TruePred"}, "library": {"type": "Placeholder", "value": stem}}


def lazy_catalogue(arch: str, stems: list[str]) -> bytes:
    return msgpack(
        {
            "solutions": [],
            "library": {
                "type": "Hardware",
                "rows": [
                    {
                        "predicate": {"type": "AMDGPU", "value": {"type": "Processor", "value": arch}},
                        "library": {"type": "Problem", "rows": [placeholder(s) for s in stems]},
                    }
                ],
            },
        }
    )


ARCHS = ("gfx90a", "gfx1100", "gfx908")


def rocblas4(root: Path) -> Path:
    d = root / "usr/lib/x86_64-linux-gnu/rocblas/4.4.1/library"
    d.mkdir(parents=True)
    fallback = "TensileLibrary_Type_SS_Contraction_l_Alik_Bljk_Cijk_Dijk_fallback"
    (d / f"{fallback}.dat").write_bytes(msgpack({"solutions": []}))
    for a in ARCHS:
        stem = f"TensileLibrary_Type_SS_Contraction_l_Alik_Bljk_Cijk_Dijk_{a}"
        (d / f"TensileLibrary_lazy_{a}.dat").write_bytes(lazy_catalogue(a, [stem, fallback]))
        (d / f"{stem}.dat").write_bytes(msgpack({"solutions": []}))
        (d / f"{stem}.co").write_bytes(b"\x7fELF" + a.encode() * 100)
        for v in ["-xnack+", "-xnack-"] if a == "gfx90a" else [""]:
            (d / f"{fallback}_{a}{v}.hsaco").write_bytes(b"\x7fELF" + a.encode() * 10)
            (d / f"Kernels.so-000-{a}{v}.hsaco").write_bytes(b"\x7fELF" + a.encode() * 10)
    return d


def hipblaslt(root: Path) -> Path:
    d = root / "usr/lib/x86_64-linux-gnu/hipblaslt/library"
    d.mkdir(parents=True)
    stems = {a: f"TensileLibrary_SS_SS_UA_Type_SS_Contraction_l_Alik_Bljk_Cijk_Dijk_{a}" for a in ARCHS}
    for a, stem in stems.items():
        (d / f"TensileLibrary_lazy_{a}.dat").write_bytes(lazy_catalogue(a, [stem]))
        (d / f"{stem}.dat").write_bytes(msgpack({"solutions": []}))
        (d / f"{stem}.co").write_bytes(b"co" * 50)
        (d / f"extop_{a}.co").write_bytes(b"co" * 20)
        (d / f"Kernels.so-000-{a}.hsaco").write_bytes(b"co" * 20)
    (d / "TensileLiteLibrary_lazy_Mapping.dat").write_bytes(msgpack({str(i): s for i, s in enumerate(stems.values())}))
    (d / "hipblasltExtOpLibrary.dat").write_bytes(
        msgpack({a: {"AMax": {"S": [{"co_path": f"extop_{a}.co"}]}} for a in ARCHS})
    )
    (d / "hipblasltTransform.hsaco").write_bytes(b"all archs")
    return d


def rocblas0(root: Path) -> Path:
    d = root / "usr/lib/x86_64-linux-gnu/rocblas/2.47.0/library"
    d.mkdir(parents=True)
    (d / "TensileLibrary.dat").write_bytes(msgpack({"solutions": []}))
    for a in ARCHS:
        (d / f"TensileLibrary_{a}.co").write_bytes(a.encode() * 100)
        (d / f"Kernels.so-000-{a}.hsaco").write_bytes(a.encode() * 10)
    return d


@pytest.mark.parametrize(
    "name, kind, arch",
    [
        ("Kernels.so-000-gfx90a-xnack+.hsaco", "tensile", "gfx90a"),
        (
            "TensileLibrary_BB_BB_HA_Bias_SAV_Type_BB_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_CU104_gfx90a.co",
            "tensile",
            "gfx90a",
        ),
        ("TensileLibrary_lazy_gfx1201.dat", "tensile", "gfx1201"),
        ("extop_gfx1100.co", "tensile", "gfx1100"),
        ("TensileLibrary.dat", "tensile", None),  # every arch's catalogue: kept
        ("TensileLibrary_Type_SS_Contraction_l_Alik_Bljk_Cijk_Dijk_fallback.dat", "tensile", None),
        ("TensileLiteLibrary_lazy_Mapping.dat", "tensile", None),
        ("hipblasltTransform.hsaco", "tensile", None),
        ("gfx11-generic.co", "tensile", None),  # not a processor
        ("a_gfx90a_gfx908.co", "tensile", None),  # two archs: not one arch's file
        ("gfx90a6e.kdb", "miopen", "gfx90a"),  # 110 CUs, hex
        ("gfx1030_36.kdb", "miopen", "gfx1030"),  # 36 CUs, decimal
        ("gfx90a_xnack6e.db", "miopen", "gfx90a"),
        ("gfx942130.HIP.fdb.txt", "miopen", "gfx942"),
        ("gfx110060.db.txt", "miopen", "gfx1100"),
        ("gfx90a.kdb", "miopen", "gfx90a"),
        ("miopen_kernels.txt", "miopen", None),
    ],
)
def test_file_arch(name, kind, arch):
    assert perarch.file_arch(name, kind) == arch


def test_msgpack_reader_round_trips_what_tensile_writes():
    value = {"a": [1, -3, True, False, "x" * 40, "y" * 300], "b": {"c": 2**20}}
    assert perarch.msgpack_load(msgpack(value)) == value


def test_prune_keeps_declared_and_cross_arch_files_and_the_check_passes(tmp_path):
    dirs = [rocblas4(tmp_path), hipblaslt(tmp_path), rocblas0(tmp_path)]
    before = {d: sorted(p.name for p in d.iterdir()) for d in dirs}
    record = perarch.prune([str(tmp_path)], {"gfx90a", "gfx1100"})
    for d in dirs:
        left = sorted(p.name for p in d.iterdir())
        assert not [n for n in left if "gfx908" in n]
        assert [n for n in before[d] if "gfx908" not in n] == left  # nothing else went
        assert record["dirs"][str(d)]["archs_shipped"] == ["gfx1100", "gfx908", "gfx90a"]
    assert record["removed_files"] == sum(len(before[d]) - len(list(d.iterdir())) for d in dirs)
    assert record["removed_bytes"] > 0
    results = perarch.check([str(tmp_path)], ["gfx90a", "gfx1100"], pruned=True)
    assert [r.problems for r in results] == [[], [], []]
    assert all(r.opened["gfx90a"] > 2 for r in results)


def test_check_names_what_a_declared_device_would_miss(tmp_path):
    d = rocblas4(tmp_path)
    (d / "TensileLibrary_Type_SS_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx90a.co").unlink()
    (d / "TensileLibrary_Type_SS_Contraction_l_Alik_Bljk_Cijk_Dijk_fallback_gfx1100.hsaco").unlink()
    h = hipblaslt(tmp_path)
    (h / "extop_gfx1100.co").unlink()
    problems = {r.path: r.problems for r in perarch.check([str(tmp_path)], ["gfx90a", "gfx1100"], pruned=False)}
    assert "TensileLibrary_Type_SS_Contraction_l_Alik_Bljk_Cijk_Dijk_gfx90a.co" in problems[str(d)][0]
    assert "fallback_gfx1100*.hsaco" in problems[str(d)][1]
    assert "extop_gfx1100.co" in problems[str(h)][0]


def test_check_fails_a_pruned_image_with_other_archs_files_and_an_arch_with_none(tmp_path):
    rocblas0(tmp_path)
    (r,) = perarch.check([str(tmp_path)], ["gfx90a", "gfx1030"], pruned=True)
    assert r.problems[0].startswith("declared gfx1030 has no files here (shipped: gfx1100, gfx908, gfx90a)")
    assert r.problems[1] == "pruned, yet files of undeclared archs remain: gfx1100 (2), gfx908 (2)"


def test_lazy_catalogue_missing_for_a_declared_arch(tmp_path):
    d = rocblas4(tmp_path)
    (d / "TensileLibrary_lazy_gfx1100.dat").unlink()
    (r,) = perarch.check([str(tmp_path)], ["gfx1100"], pruned=False)
    assert r.problems == ["a gfx1100 device opens 1 missing file(s): TensileLibrary_lazy_gfx1100.dat"]


def test_command_line_prune_writes_a_one_line_record_and_refuses_unknown_archs(tmp_path, capsys):
    rocblas0(tmp_path)
    rec = tmp_path / "prune" / "t.json"
    assert perarch.main(["prune", "--keep", "gfx90a", "--record", str(rec), str(tmp_path)]) == 0
    assert len(rec.read_text().splitlines()) == 1 and json.loads(rec.read_text())["keep"] == ["gfx90a"]
    assert "removed 4 files" in capsys.readouterr().out
    assert perarch.main(["prune", "--keep", "gfx1110", str(tmp_path)]) == 2
    assert perarch.main(["check", "--archs", "gfx90a", "--pruned", str(tmp_path)]) == 0


def test_the_inventory_expects_no_file_a_prune_record_says_was_removed(tmp_path):
    linkage = packagedata.probe("linkage")
    records = tmp_path / "prune"
    records.mkdir()
    assert linkage._kept_archs(str(records / "*.json")) is None
    (records / "parent.json").write_text(json.dumps({"keep": ["gfx1100", "gfx90a"]}))
    (records / "child.json").write_text(json.dumps({"keep": ["gfx90a"]}))
    kept = linkage._kept_archs(str(records / "*.json"))
    assert kept == {"gfx90a"}
    lib = "/usr/lib/x86_64-linux-gnu/rocblas/4.4.1/library"
    assert linkage._pruned(f"{lib}/TensileLibrary_lazy_gfx1100.dat", kept)
    assert not linkage._pruned(f"{lib}/Kernels.so-000-gfx90a-xnack-.hsaco", kept)
    assert not linkage._pruned(f"{lib}/TensileLibrary.dat", kept)
    assert not linkage._pruned("/usr/lib/x86_64-linux-gnu/librocblas.so.4.4", kept)
