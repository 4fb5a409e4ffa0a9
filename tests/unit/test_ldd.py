"""The ldd parser on outputs captured from real images (tests/fixtures/ldd)."""

from pathlib import Path

from rocmforge.verify.readers import ldd

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


def test_ldd_r_names_the_version_and_the_undefined_symbol():
    # Captured on this host: libhipx.so.6 replaced by a library without the HIP_4.2 version node.
    # Plain ldd resolves every dependency here; only -r's relocation pass finds the symbol missing.
    r = ldd.parse((FIX / "host-r-version-not-found.txt").read_text())
    assert r.kind == "dynamic" and r.missing == []
    assert [(v.library, v.version) for v in r.version_errors] == [("/tmp/lt25a/libhipx.so.6", "HIP_4.2")]
    assert [(u.symbol, u.version, u.file) for u in r.undefined] == [("hipFoo", "HIP_4.2", "/tmp/lt/libuser.so")]
    assert r.problems == [
        "/tmp/lt/libuser.so: needs version HIP_4.2 of /tmp/lt25a/libhipx.so.6, which does not define it",
        "/tmp/lt/libuser.so: undefined symbol hipFoo (version HIP_4.2)",
    ]


def test_ldd_r_undefined_symbol_in_a_library_without_dependencies():
    # ldd says "statically linked" for a shared object with no DT_NEEDED; its undefined symbol still counts.
    r = ldd.parse((FIX / "host-r-undefined-no-deps.txt").read_text())
    assert r.kind == "static"
    assert r.problems == ["./libund.so: undefined symbol foo"]


def test_plain_outputs_have_no_problems():
    assert ldd.parse((FIX / "debian-gemm-smoke.txt").read_text()).problems == []
    assert ldd.parse((FIX / "debian-gemm-smoke-librocblas-removed.txt").read_text()).problems == [
        "librocblas.so.0 not found"
    ]
    assert (
        ldd.parse(
            "x: /l/libz.so.1: no version information available (required by x)\n\tlibz.so.1 => /l/libz.so.1 (0x1)\n"
        ).problems
        == []
    )


def test_ldd_r_on_rocblas_with_the_hip_runtime_replaced():
    # Captured in llama31-qlora-debian with libamdhip64.so.6's file replaced by libz (the fault
    # table's "hip-runtime-replaced" row): every dependency is "found", every HIP symbol is not.
    r = ldd.parse((FIX / "debian-sid-r-rocblas-hip-runtime-replaced.txt").read_text())
    assert r.missing == [] and r.kind == "dynamic"
    assert {v.version for v in r.version_errors} == {"hip_4.2", "hip_4.3", "hip_5.1", "hip_6.0"}
    assert all(v.library == "/usr/lib/x86_64-linux-gnu/libamdhip64.so.6" for v in r.version_errors)
    assert r.undefined and all(
        u.symbol.lstrip("_").startswith("hip") and u.file == "/usr/lib/x86_64-linux-gnu/librocblas.so.4"
        for u in r.undefined
    )
