"""probes/contents.py's pure parts (md5sums, dpkg status, RECORD and outputs lists, dpkg's
path filters, the exception table) and one whole check over a fake dpkg database and site folder:
a changed, an emptied and a missing file fail naming their source; only the table excuses."""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile

import pytest

from rocmforge.shared import packagedata

contents = packagedata.probe("contents")
wheel_outputs = packagedata.probe("wheel_outputs")


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


def test_md5sums_lines_become_absolute_paths():
    text = f"{'a' * 32}  usr/bin/rocminfo\n{'b' * 32}  usr/share/doc/x y/copyright\nnot a line\n\n"
    assert contents.parse_md5sums(text) == [("/usr/bin/rocminfo", "a" * 32), ("/usr/share/doc/x y/copyright", "b" * 32)]


def test_status_conffiles_by_package_with_their_flags():
    text = (
        "Package: binutils\nStatus: install ok installed\nConffiles:\n"
        " /etc/gprofng.rc newconffile remove-on-upgrade\nDescription: x\n continued line\n\n"
        "Package: binutils-common\nConffiles:\n /etc/gprofng.rc 9ef0ad52fe3e0ad424927ad653d29983\n"
        " /etc/old.conf 0123456789abcdef0123456789abcdef obsolete\n\nPackage: bash\nVersion: 5\n"
    )
    assert contents.parse_status(text) == {
        "binutils": [("/etc/gprofng.rc", "newconffile", "remove-on-upgrade")],
        "binutils-common": [
            ("/etc/gprofng.rc", "9ef0ad52fe3e0ad424927ad653d29983", ""),
            ("/etc/old.conf", "0123456789abcdef0123456789abcdef", "obsolete"),
        ],
    }


def test_record_lines_hash_size_and_unhashed_ones():
    data = b"print('peft')\n"
    text = (
        f"peft/__init__.py,{record_hash(data)},{len(data)}\n"
        "peft-0.21.2.dist-info/RECORD,,\n"
        "peft/__pycache__/__init__.cpython-314.pyc,,\n"
        f"../../../bin/peft,{record_hash(b'#!')},2\n"
        '"peft/a,b.py",sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0\n'
    )
    site = "/opt/rocmforge/venv/lib/python3.14/site-packages"
    rows = contents.parse_record(text, site)
    assert rows[0] == (f"{site}/peft/__init__.py", "sha256", hashlib.sha256(data).hexdigest(), len(data))
    assert rows[1] == (f"{site}/peft-0.21.2.dist-info/RECORD", None, None, None)
    assert rows[2][1] is None
    assert rows[3][0] == "/opt/rocmforge/venv/bin/peft"
    assert rows[4] == (f"{site}/peft/a,b.py", "sha256", hashlib.sha256(b"").hexdigest(), 0)


def test_outputs_list_header_and_wheel_data_prefix():
    digest = "c" * 64
    root, files = contents.parse_outputs(
        f"# rocmforge-outputs bitsandbytes-hip dist:bitsandbytes\n{digest}  bitsandbytes/x.so\n"
        f"{digest}  bitsandbytes-0.43.3.dev0.data/platlib/bitsandbytes/y.so\n",
        "bitsandbytes-hip",
    )
    assert root == "dist:bitsandbytes"
    assert files == [("bitsandbytes/x.so", digest), ("bitsandbytes/y.so", digest)]


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "first line is not"),
        ("# rocmforge-outputs other-component /opt/rocmforge/bin\n" + "c" * 64 + "  x\n", "first line is not"),
        ("# rocmforge-outputs smoke /opt/rocmforge/bin\n", "lists no file"),
        ("# rocmforge-outputs smoke /opt/rocmforge/bin\nnot-a-digest  smoke\n", "not a sha256sum line"),
    ],
)
def test_outputs_list_malformed(text, message):
    with pytest.raises(ValueError, match=message):
        contents.parse_outputs(text, "smoke")


def test_dpkg_path_filters_last_match_decides(tmp_path):
    (tmp_path / "dpkg.cfg.d").mkdir()
    (tmp_path / "dpkg.cfg.d" / "excludes").write_text(
        "# docs\npath-exclude=/usr/share/doc/*\npath-include=/usr/share/doc/*/copyright\npath-exclude /not/an/option\n"
    )
    filters = contents.path_filters((str(tmp_path / "dpkg.cfg"), str(tmp_path / "dpkg.cfg.d" / "*")))
    assert filters == [(True, "/usr/share/doc/*"), (False, "/usr/share/doc/*/copyright")]
    assert contents.dpkg_filtered("/usr/share/doc/rocminfo/changelog.gz", filters)
    assert contents.dpkg_filtered("/usr/share/doc/a/b/README", filters)  # `*` crosses `/`, as in dpkg
    assert not contents.dpkg_filtered("/usr/share/doc/rocminfo/copyright", filters)
    assert not contents.dpkg_filtered("/usr/bin/rocminfo", filters)


LIB = "/usr/lib/x86_64-linux-gnu/rocblas/2.47.0/library"


@pytest.mark.parametrize(
    "path, problem, key",
    [
        (f"{LIB}/TensileLibrary_gfx908.co", "missing", "pruned"),
        (f"{LIB}/TensileLibrary_gfx90a.co", "missing", None),  # a kept arch's file is never excused
        (f"{LIB}/TensileLibrary_gfx908.co", "changed", None),  # pruning removes, it never edits
        (f"{LIB}/TensileLibrary.dat", "missing", None),  # for every arch: kept by prune
        ("/usr/share/doc/rocminfo/changelog.gz", "missing", "path-exclude"),
        ("/usr/share/doc/rocminfo/changelog.gz", "changed", None),
        ("/etc/hostname", "changed", "bootstrap"),
        ("/etc/apt/sources.list.d/rocm.list", "missing", "apt-sources"),
        ("/usr/bin/rocminfo", "changed", None),
        ("/usr/bin/rocminfo", "missing", None),
    ],
)
def test_exception_table(path, problem, key):
    host = {"bootstrap": ["/etc/hostname"], "apt-sources": ["/etc/apt/sources.list.d/rocm.list"]}
    filters = [(True, "/usr/share/doc/*")]
    assert contents.excused_by(path, problem, host, {"gfx90a", "gfx1100"}, filters) == key
    assert key is None or key in contents.EXCEPTIONS


def test_unpruned_image_excuses_no_kernel_file():
    assert contents.excused_by(f"{LIB}/TensileLibrary_gfx908.co", "missing", {}, None, []) is None


def test_base_as_shipped_excuses_only_the_base_exact_bytes(tmp_path):
    """A registry base's own difference from its package is excused only while the image holds
    exactly the bytes the base shipped (or lacks the file, as the base did)."""
    same, edited, gone = tmp_path / "same", tmp_path / "edited", tmp_path / "gone"
    same.write_bytes(b"vendor's edit\n")
    edited.write_bytes(b"our edit on top\n")
    shipped = {
        str(same): hashlib.sha256(b"vendor's edit\n").hexdigest(),
        str(edited): hashlib.sha256(b"vendor's edit\n").hexdigest(),
        str(gone): None,
    }
    host = {"base-as-shipped": shipped}
    assert contents.excused_by(str(same), "changed", host, None, []) == "base-as-shipped"
    assert contents.excused_by(str(gone), "missing", host, None, []) == "base-as-shipped"
    assert contents.excused_by(str(edited), "changed", host, None, []) is None
    assert contents.excused_by(str(tmp_path / "other"), "missing", host, None, []) is None


def test_wheel_list_hashes_every_file_inside(tmp_path):
    wheel = tmp_path / "bitsandbytes-0.43.3.dev0-cp314-cp314-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("bitsandbytes/__init__.py", b"x = 1\n")
        zf.writestr("bitsandbytes/", b"")
        zf.writestr("bitsandbytes-0.43.3.dev0.dist-info/RECORD", b"")
    root, files = contents.parse_outputs(wheel_outputs.wheel_list("bitsandbytes-hip", str(wheel)), "bitsandbytes-hip")
    assert root == "dist:bitsandbytes"
    assert files == [
        ("bitsandbytes-0.43.3.dev0.dist-info/RECORD", hashlib.sha256(b"").hexdigest()),
        ("bitsandbytes/__init__.py", hashlib.sha256(b"x = 1\n").hexdigest()),
    ]


def test_digest_file_reads_in_chunks_and_refuses_links(tmp_path):
    data = b"\x01" * (contents.CHUNK + 7)
    (tmp_path / "f").write_bytes(data)
    (tmp_path / "link").symlink_to(tmp_path / "f")
    path, size, digests, err = contents.digest_file((str(tmp_path / "f"), ["md5", "sha256"]))
    assert (size, err) == (len(data), None)
    assert digests == {"md5": md5(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert contents.digest_file((str(tmp_path / "link"), ["md5"]))[3]


@pytest.fixture
def fake_image(tmp_path, monkeypatch):
    """A dpkg database of one package (three files and a conffile) and one venv distribution."""
    root = tmp_path / "root"
    info = tmp_path / "info"
    info.mkdir()
    files = {
        "usr/bin/rocminfo": b"\x7fELF rocminfo",
        f"{LIB[1:]}/TensileLibrary_gfx908.co": b"co",
        f"{LIB[1:]}/TensileLibrary_gfx90a.co": b"kernels",
        "etc/rocm.conf": b"conf",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / LIB[1:] / "TensileLibrary_gfx908.co").unlink()  # the prune step's
    listed = [r for r in files if r != "etc/rocm.conf"]
    (info / "rocminfo.list").write_text("".join(f"{root}/{r}\n" for r in files))
    (info / "rocminfo.md5sums").write_text("".join(f"{md5(files[r])}  {str(root)[1:]}/{r}\n" for r in listed))
    (tmp_path / "status").write_text(f"Package: rocminfo\nConffiles:\n {root}/etc/rocm.conf {md5(b'conf')}\n")
    site = root / "venv/site-packages"
    (site / "peft-0.21.2.dist-info").mkdir(parents=True)
    (site / "peft").mkdir()
    (site / "peft/__init__.py").write_bytes(b"peft\n")
    (site / "peft-0.21.2.dist-info/METADATA").write_text("Metadata-Version: 2.1\nName: peft\nVersion: 0.21.2\n\nbody\n")
    (site / "peft-0.21.2.dist-info/RECORD").write_text(
        f"peft/__init__.py,{record_hash(b'peft' + bytes([10]))},5\npeft-0.21.2.dist-info/RECORD,,\n"
    )
    monkeypatch.setattr(contents, "DPKG_INFO", str(info))
    monkeypatch.setattr(contents, "DPKG_STATUS", str(tmp_path / "status"))
    monkeypatch.setattr(contents, "DPKG_DIVERSIONS", str(tmp_path / "none"))
    monkeypatch.setattr(contents, "kept_archs", lambda: {"gfx90a", "gfx1100"})
    monkeypatch.setattr(contents, "path_filters", lambda: [])
    index = {contents.VENV_PYTHON: [("peft", "0.21.2", str(site / "peft-0.21.2.dist-info"))]}
    monkeypatch.setattr(contents, "dist_index", lambda patterns: index)
    return root, site


def run_check(expected):
    report = contents.check(expected)
    json.dumps(report)  # what the suite reads back
    return report


def test_clean_fake_image_passes_and_names_what_it_excused(fake_image):
    report = run_check({"packages": ["rocminfo"], "python": {"peft": ["0.21.2", "matrix.lock python.env"]}})
    assert report["problems"] == []
    assert [f.split(" (")[0].rsplit("/", 1)[1] for f in report["excused"]["pruned"]["files"]] == [
        "TensileLibrary_gfx908.co"
    ]
    assert report["checked"]["dpkg_files"] == 3 and report["checked"]["python_files"] == 1


def test_changed_emptied_and_missing_files_fail_naming_their_source(fake_image):
    root, site = fake_image
    (root / "usr/bin/rocminfo").write_bytes(b"#!/bin/sh\necho 'ROCk module is NOT loaded'\n")
    (root / LIB[1:] / "TensileLibrary_gfx90a.co").write_bytes(b"")
    (root / "etc/rocm.conf").unlink()
    (site / "peft/__init__.py").write_bytes(b"pefT\n")
    report = run_check(
        {
            "packages": ["rocminfo", "librocblas0"],
            "python": {"peft": ["0.21.2", "matrix.lock python.env"], "mpmath": ["1.3.0", "lock"]},
        }
    )
    problems = "\n".join(report["problems"])
    assert f"{root}/usr/bin/rocminfo (dpkg rocminfo): md5 differs from" in problems
    assert f"{root}{LIB}/TensileLibrary_gfx90a.co (dpkg rocminfo): empty, md5 differs" in problems
    assert f"{root}/etc/rocm.conf (dpkg rocminfo): missing" in problems
    assert "dpkg librocblas0: in the lock's closure but not installed" in problems
    assert f"{site}/peft/__init__.py (python peft 0.21.2): sha256 differs from" in problems
    assert "python mpmath: lock records 1.3.0, not installed" in problems


def test_locked_version_differs(fake_image, monkeypatch):
    _root, site = fake_image
    monkeypatch.setattr(
        contents,
        "dist_index",
        lambda patterns: {contents.VENV_PYTHON: [("mpmath", "1.3.1", str(site / "mpmath-1.3.0.dist-info"))]},
    )
    report = run_check({"python": {"mpmath": ["1.3.0", "matrix.lock python.env"]}})
    assert report["problems"] == [
        f"python mpmath: matrix.lock python.env records 1.3.0, installed 1.3.1 ({site}/mpmath-1.3.0.dist-info/METADATA)"
    ]


def test_component_outputs_against_their_list(fake_image, tmp_path, monkeypatch):
    _root, site = fake_image
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    monkeypatch.setattr(contents, "OUTPUTS", str(outputs))
    (outputs / "peft-built.sha256").write_text(
        f"# rocmforge-outputs peft-built dist:peft\n{hashlib.sha256(b'other').hexdigest()}  peft/__init__.py\n"
        f"{hashlib.sha256(b'wheel record').hexdigest()}  peft-0.21.2.dist-info/RECORD\n"
    )
    report = run_check({"outputs": ["peft-built", "rocblas-gemm-smoke"]})
    assert sorted(report["problems"]) == [
        f"{outputs}/rocblas-gemm-smoke.sha256 (component rocblas-gemm-smoke): missing: the builder stage's list "
        "of what it built is not in the image (built from templates older than that list?)",
        f"{site}/peft/__init__.py (component peft-built): sha256 differs from {outputs}/peft-built.sha256",
    ]
    assert list(report["excused"]) == ["pip-record"]
