"""The signed index's .deb hashes against the ones matrix.lock records (host.debarchive): the outside
check and `lock --check` take a .deb only when both agree."""

from __future__ import annotations

import json

import pytest

from rocmforge.host import debarchive
from rocmforge.shared.errors import BuildError

SHA = "a" * 64


@pytest.fixture
def indexed(tmp_path, monkeypatch):
    """Debian's trixie source whose verified index entries are already kept in the cache: nothing is fetched."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    src = debarchive.debian("trixie")
    entry = {"Filename": "pool/main/b/bash/bash_5.2_amd64.deb", "SHA256": SHA}
    debarchive.cache_dir().mkdir(parents=True)
    (debarchive.cache_dir() / f"index-{src.key}.json").write_text(json.dumps({"bash=5.2=amd64": entry}))
    return src


def test_a_deb_the_lock_records_as_the_index_gives_it_is_located(indexed):
    found = debarchive.locate([indexed], {"bash": "5.2"}, {debarchive.deb_key("bash", "5.2"): SHA})
    assert found["bash"][1:] == ("pool/main/b/bash/bash_5.2_amd64.deb", SHA)
    assert debarchive.locate([indexed], {"bash": "5.2"}, {})["bash"][2] == SHA  # no hash locked: the index's


def test_a_deb_whose_index_hash_is_not_the_locks_is_refused_by_name(indexed):
    with pytest.raises(BuildError, match=r"another \.deb than matrix\.lock records for bash=5\.2 \(index aaaaaaaaaaaa"):
        debarchive.locate([indexed], {"bash": "5.2"}, {"bash=5.2": "b" * 64})


def test_lock_check_names_a_pinned_deb_without_a_hash_and_one_the_index_does_not_give(indexed):
    from rocmforge.define.matrix import load_matrix  # the committed matrix: a real bootstrapped stack
    from rocmforge.resolve import debhashes
    from rocmforge.resolve.lockmodel import BaseEntry, Lock
    from tests.conftest import ROOT

    m = load_matrix(ROOT / "matrix.yaml")
    lock = Lock(bases={"debian13-rocm5.7": BaseEntry(packages={"bash": "5.2"})})
    assert debhashes.check(lock, m, ["debian13-rocm5.7"]) == [
        "debs debian13-rocm5.7: no .deb hash for bash=5.2 (run `python build.py lock`)"
    ]
    lock.debs["debian13-rocm5.7"] = {"bash=5.2": "b" * 64}
    assert "another .deb than matrix.lock records for bash=5.2" in debhashes.check(lock, m, ["debian13-rocm5.7"])[0]
