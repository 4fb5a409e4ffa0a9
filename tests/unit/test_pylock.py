"""pip's --report turned into lock entries: wheels with sha256 only, names canonical."""

import pytest

from rocmforge.resolve import pylock


def _item(name, version, url, **archive):
    return {"metadata": {"name": name, "version": version}, "download_info": {"url": url, "archive_info": archive}}


def test_report_to_wheels_takes_file_and_sha256():
    report = {
        "install": [
            _item("peft", "0.21.2", "https://files.example/peft-0.21.2-py3-none-any.whl", hashes={"sha256": "a" * 64}),
            _item(
                "Some_Pkg",
                "1.0",
                "https://files.example/some_pkg-1.0-cp39-cp39-manylinux_2_17_x86_64.whl",
                hash="sha256=" + "b" * 64,
            ),
        ]
    }
    assert pylock.report_to_wheels(report) == {
        "peft": {"version": "0.21.2", "file": "peft-0.21.2-py3-none-any.whl", "sha256": ["a" * 64]},
        "some-pkg": {
            "version": "1.0",
            "file": "some_pkg-1.0-cp39-cp39-manylinux_2_17_x86_64.whl",
            "sha256": ["b" * 64],
        },
    }


def test_sdist_is_refused_by_name():
    report = {
        "install": [_item("oldpkg", "0.1", "https://files.example/oldpkg-0.1.tar.gz", hashes={"sha256": "c" * 64})]
    }
    with pytest.raises(pylock.PythonLockError, match=r"oldpkg==0.1 has no wheel .*oldpkg-0.1.tar.gz"):
        pylock.report_to_wheels(report)


def test_missing_hash_is_refused():
    report = {"install": [_item("x", "1", "https://files.example/x-1-py3-none-any.whl")]}
    with pytest.raises(pylock.PythonLockError, match="no sha256"):
        pylock.report_to_wheels(report)


def test_nothing_to_install_is_an_empty_closure():
    assert pylock.report_to_wheels({"install": []}) == {}
