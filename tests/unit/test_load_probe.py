"""The load probe (probes/load.py) on small ELF files built for it (tests/fixtures/load,
generate.sh), and the linkage suite's messages from its results: every way an image's library or
program fails to load is a failure naming the file and the symbol or library; plain ldd would
have passed the replaced runtime."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

from rocmforge.shared.packagedata import PROBES
from rocmforge.verify.readers import ldd
from tests.conftest import ROOT

with warnings.catch_warnings():  # its markers are registered by the suites' conftest, not here
    warnings.simplefilter("ignore")
    from rocmforge.data.suites import test_linkage

PROBE = PROBES / "load.py"
FIX = ROOT / "tests" / "fixtures" / "load"


def probe(*args) -> dict:
    proc = subprocess.run([sys.executable, str(PROBE), *map(str, args)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_healthy_libraries_load():
    out = probe(FIX / "good")
    assert {o["kind"] for o in out.values()} == {"library"} and all(o["ok"] for o in out.values()), out


def test_runtime_replaced_at_the_same_path_fails_where_plain_ldd_passes():
    user = FIX / "replaced" / "libuser.so"
    plain = subprocess.run(["ldd", str(user)], capture_output=True, text=True).stdout
    assert ldd.parse(plain).missing == [], "plain ldd resolves every dependency here"
    o = probe(user)[str(user)]
    assert not o["ok"] and "hipFoo" in o["error"] and "HIP_4.2" in o["error"]
    lines = test_linkage._why(str(user), o)
    assert lines[0] == f"{user}: undefined symbol: hipFoo, version HIP_4.2"
    assert f"{user}: undefined symbol hipFoo (version HIP_4.2)" in lines  # ldd -r, the same symbol


def test_undefined_symbol_and_missing_dependency_are_named():
    out = probe(FIX / "libundefined.so", FIX / "libneeds-gone.so")
    und, gone = out[str(FIX / "libundefined.so")], out[str(FIX / "libneeds-gone.so")]
    assert not und["ok"] and und["error"].endswith("libundefined.so: undefined symbol: foo")
    assert not gone["ok"] and "libgone.so.1: cannot open shared object file" in gone["error"]
    assert f"{FIX / 'libneeds-gone.so'}: libgone.so.1 not found" in test_linkage._why(
        str(FIX / "libneeds-gone.so"), gone
    )


def test_program_that_cannot_start():
    path = str(FIX / "prog-needs-gone")
    o = probe(path)[path]
    assert o["kind"] == "program" and o["start"]["rc"] == 127 and not o["start"]["loaded"] and not o["ok"]
    lines = test_linkage._why(path, o)
    assert lines[0] == f"{path}: libgone.so.1 not found"
    assert lines[-1].startswith(f"{path}: does not start: ") and "error while loading shared libraries" in lines[-1]


def test_a_program_that_starts_is_loaded():
    o = probe("/bin/true")
    (only,) = o.values()
    assert only["kind"] == "program" and only["ok"] and only["start"]["loaded"] and only["start"]["rc"] == 0
    assert test_linkage._why("/bin/true", only) == []


def test_entry_points_resolved_by_name():
    ok = probe("--entry-points", FIX / "libentry.so", "get_context")
    assert ok["loaded"] and ok["missing"] == []
    host_only = probe("--entry-points", FIX / "good" / "libhipx.so.6", "get_context", "cgemm_4bit_inference_naive_bf16")
    assert host_only["loaded"] and host_only["missing"] == ["get_context", "cgemm_4bit_inference_naive_bf16"]
    broken = probe("--entry-points", FIX / "replaced" / "libuser.so", "use")
    assert not broken["loaded"] and "hipFoo" in broken["error"] and broken["missing"] == ["use"]


def test_hip_runtime_version_that_does_not_resolve_is_an_error():
    out = probe("--call-version", FIX / "good" / "libhipx.so.6")
    assert "version" not in out and "hipRuntimeGetVersion not found" in out["error"]
