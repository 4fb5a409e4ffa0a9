"""The ldd parser on outputs captured from real images (tests/fixtures/ldd)."""

from pathlib import Path

from rocmforge.readers import ldd

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "ldd"


def test_dynamic_with_vdso_and_absolute_loader():
    r = ldd.parse((FIX / "debian-gemm-smoke.txt").read_text())
    assert r.kind == "dynamic" and r.missing == []
    by = {d.name: d for d in r.deps}
    assert by["linux-vdso.so.1"].status == "vdso"
    assert by["/lib64/ld-linux-x86-64.so.2"].status == "found"
    assert by["librocblas.so.0"].path == "/lib/x86_64-linux-gnu/librocblas.so.0"


def test_not_found():
    r = ldd.parse((FIX / "debian-gemm-smoke-librocblas-removed.txt").read_text())
    assert r.missing == ["librocblas.so.0"]


def test_statically_linked():
    assert ldd.parse((FIX / "debian-ldconfig-static.txt").read_text()).kind == "static"


def test_not_a_dynamic_executable():
    r = ldd.parse((FIX / "debian-hsaco-not-dynamic.txt").read_text())
    assert r.kind == "not dynamic" and r.deps == ()


def test_crlf_and_garbage():
    r = ldd.parse("\tlibx.so.1 => not found\r\n\tlibc.so.6 => /lib/libc.so.6 (0x0000)\r\n")
    assert r.missing == ["libx.so.1"]
    assert ldd.parse("ldd: ./nope: No such file or directory\n").kind == "error"
    assert ldd.parse("").deps == ()
