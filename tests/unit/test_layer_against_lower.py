"""Layers made canonical against the filesystem below them (rocmforge.assemble.image.lowerrules and
lowerindex) on synthetic tars: each rule, that what a container sees is unchanged (a small merge
written here, apart from the code under test), idempotence, the cached lower index, normalise's
second pass; and, on layers two real engines recorded (tests/fixtures/layers), that every engine's
RUN layer comes out the same."""

from __future__ import annotations

import hashlib
import io
import re
import sqlite3
import tarfile
from pathlib import Path

import pytest

from rocmforge.assemble.image import lowerindex
from rocmforge.assemble.image.archive import archive_chunks
from rocmforge.assemble.image.layers import normalise_layer
from rocmforge.assemble.image.lowerindex import LowerIndex, open_lower
from rocmforge.assemble.image.lowerrules import canonicalise
from rocmforge.assemble.image.rewrite import rewrite_archive
from rocmforge.host.layerstore import chain_ids
from tests.unit.image_samples import EPOCH, LATER, OLD, save_archive, tar_bytes, ti

D, F, L, H = tarfile.DIRTYPE, tarfile.REGTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE


def gnu(members) -> bytes:
    return tar_bytes(members, fmt=tarfile.GNU_FORMAT)


def bt(name, kind=F, **kw):
    """An entry of a base already in canonical form (as bootstrap writes it)."""
    return ti(name, kind, mtime=0, uname="", gname="", **kw)


BASE = gnu(
    [
        (bt("etc", D, mode=0o755), None),
        (bt("etc/conf"), b"conf=1\n"),
        (bt("etc/link", L, linkname="conf"), None),
        (bt("opt", D, mode=0o755), None),
        (bt("opt/app", D, mode=0o755), None),
        (bt("opt/app/a"), b"a\n"),
        (bt("opt/app/b"), b"b\n"),
        (bt("opt/app/sub", D, mode=0o755), None),
        (bt("opt/app/sub/x"), b"x\n"),
        (bt("opt/app/sub/y"), b"y\n"),
        (bt("opt/empty", D, mode=0o755), None),
        (bt("tmp", D, mode=0o1777), None),
        (bt("var", D, mode=0o755), None),
        (bt("var/state", mode=0o600), b"state\n"),
    ]
)


# --- what a container sees: a merge written apart from the code under test ---------------------


def merge(layers: list[bytes]) -> dict[str, tuple]:
    """path -> what a container sees there. A layer's whiteouts and opaque markers hide what the
    layers below made; directory mtimes are left out (rule C keeps the lower's)."""
    fs: dict[str, tuple] = {}
    for data in layers:
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            members = t.getmembers()
            below = dict(fs)
            for m in members:
                name = m.name.removeprefix("./").rstrip("/")
                parent, _, base = name.rpartition("/")
                if base == ".wh..wh..opq":
                    for p in [p for p in below if p.startswith(parent + "/" if parent else "")]:
                        fs.pop(p, None)
                elif base.startswith(".wh."):
                    gone = (parent + "/" if parent else "") + base[4:]
                    for p in [p for p in below if p == gone or p.startswith(gone + "/")]:
                        fs.pop(p, None)
            for m in members:
                name = m.name.removeprefix("./").rstrip("/")
                base = name.rpartition("/")[2]
                if base.startswith(".wh.") or not name or name == ".":
                    continue
                if m.islnk():
                    fs[name] = fs[m.linkname.removeprefix("./")]
                    continue
                if not m.isdir():
                    for p in [p for p in fs if p.startswith(name + "/")]:
                        del fs[p]
                body = t.extractfile(m).read() if m.isfile() else m.linkname
                fs[name] = (
                    m.type,
                    m.mode & 0o7777,
                    m.uid,
                    m.gid,
                    None if m.isdir() else m.mtime,
                    body,
                    tuple(sorted((k, v) for k, v in m.pax_headers.items() if k.startswith("SCHILY.xattr."))),
                )
    return fs


def names(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return t.getnames()


def entry(data: bytes, name: str) -> tarfile.TarInfo:
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return t.getmember(name)


def index_of(tmp_path: Path, lowers: list[bytes], name="lower.sqlite") -> LowerIndex:
    idx = LowerIndex(tmp_path / name, create=True)
    for data in lowers:
        idx.apply([data])
    return idx


def canon(tmp_path: Path, layer: bytes, lowers: list[bytes] | None, name="l.tar"):
    """(result, canonical bytes) of layer after rewrite_layer and lowerrules against lowers, checking
    the diff ID, that a container sees the same and that a second pass changes nothing."""
    src = tmp_path / (name + ".in")
    src.write_bytes(layer)
    with open(src, "rb") as f:
        first = normalise_layer(f, tmp_path / name, epoch=EPOCH, log=lambda m: None)
    normalised = (tmp_path / name).read_bytes()
    idx = index_of(tmp_path, lowers, name + ".sqlite") if lowers is not None else None
    try:
        res = canonicalise(tmp_path / name, idx, first)
        out = (tmp_path / name).read_bytes()
        assert res.diff_id == "sha256:" + hashlib.sha256(out).hexdigest() and res.size == len(out)
        assert res.entries == len(names(out))
        if lowers is not None:
            assert merge(lowers + [out]) == merge(lowers + [normalised])
        again = canonicalise(tmp_path / name, idx, res)
        assert again.diff_id == res.diff_id and not again.changed_by_lower
    finally:
        if idx:
            idx.close()
    with open(tmp_path / name, "rb") as f:  # rewrite_layer leaves the canonical form alone
        assert normalise_layer(f, tmp_path / (name + ".again"), epoch=EPOCH, log=lambda m: None).unchanged
    return res, out


# --- the rules ----------------------------------------------------------------------------------


def test_w_whiteouts_get_fixed_metadata(tmp_path):
    layer = gnu(
        [
            (ti("var", D, mode=0o755, mtime=0), None),
            (ti("var/.wh.state", mode=0o600, uid=1000, gid=1000, pax=None), None),
        ]
    )
    res, out = canon(tmp_path, layer, [BASE])
    wh = entry(out, "var/.wh.state")
    assert (wh.type, wh.mode, wh.uid, wh.gid, wh.mtime, wh.size, wh.uname) == (F, 0, 0, 0, 0, 0, "")
    assert res.whiteouts_fixed == 1 and "var/.wh.state" in names(out)


def test_w_whiteout_xattrs_dropped(tmp_path):
    layer = tar_bytes([(ti("var/.wh.state", mode=0, mtime=0, pax={"SCHILY.xattr.user.x": "1"}), None)])
    _, out = canon(tmp_path, layer, [BASE])
    assert entry(out, "var/.wh.state").pax_headers == {}


def test_first_layer_gets_w_alone(tmp_path):
    layer = gnu(
        [
            (ti("new", D, mode=0o755), None),
            (ti("new/.wh..wh..opq", mode=0o600), None),
            (ti("new/.wh.nothing", mode=0o600), None),
            (ti("new/f"), b"f"),
        ]
    )
    res, out = canon(tmp_path, layer, None)
    assert names(out) == ["new", "new/.wh..wh..opq", "new/.wh.nothing", "new/f"]
    assert {entry(out, n).mode for n in ("new/.wh..wh..opq", "new/.wh.nothing")} == {0}
    assert (res.whiteouts_fixed, res.opaque_dropped, res.whiteouts_dropped) == (2, 0, 0)


def test_a_opaque_marker_on_a_new_directory_dropped(tmp_path):
    layer = gnu(
        [
            (ti("opt", D, mode=0o755, mtime=0), None),
            (ti("opt/new", D, mode=0o755), None),
            (ti("opt/new/.wh..wh..opq", mode=0o600), None),
            (ti("opt/new/f"), b"f\n"),
            (ti("opt/empty", D, mode=0o700), None),
            (ti("opt/empty/.wh..wh..opq", mode=0o600), None),
        ]
    )
    res, out = canon(tmp_path, layer, [BASE])
    assert names(out) == ["opt/empty", "opt/new", "opt/new/f"]  # opt: equal to the base's
    assert (res.opaque_dropped, res.whiteouts_added) == (2, 0)


def test_b_opaque_marker_becomes_whiteouts_of_what_is_not_made_again(tmp_path):
    layer = gnu(
        [
            (ti("opt", D, mode=0o755, mtime=0), None),
            (ti("opt/app", D, mode=0o755), None),
            (ti("opt/app/.wh..wh..opq", mode=0o600), None),
            (ti("opt/app/b"), b"new b\n"),
            (ti("opt/app/sub", D, mode=0o755), None),  # made again: hides its own lower children
            (ti("opt/app/sub/y", mtime=0), b"y\n"),
        ]
    )  # equal to the base's: dropped
    res, out = canon(tmp_path, layer, [BASE])
    assert names(out) == ["opt/app/.wh.a", "opt/app/b", "opt/app/sub/.wh.x"]
    assert (res.opaque_dropped, res.whiteouts_added, res.copyups_dropped) == (1, 2, 4)
    assert entry(out, "opt/app/.wh.a").mode == 0
    assert "opt/app/a" not in merge([BASE, out]) and merge([BASE, out])["opt/app/sub/y"][5] == b"y\n"


def test_b_opaque_root_spelled_with_dot_slash(tmp_path):
    layer = gnu(
        [
            (ti("./opt", D, mode=0o755, mtime=0), None),
            (ti("./opt/.wh..wh..opq", mode=0), None),
            (ti("./opt/app", D, mode=0o700), None),
        ]
    )
    res, out = canon(tmp_path, layer, [BASE])
    assert names(out) == ["./opt/.wh.empty", "./opt/app", "./opt/app/.wh.a", "./opt/app/.wh.b", "./opt/app/.wh.sub"]
    assert res.whiteouts_added == 4


def test_c_files_equal_to_the_lower_dropped_others_kept(tmp_path):
    layer = gnu(
        [
            (ti("etc", D, mode=0o755), None),
            (ti("etc/conf", mtime=0), b"conf=1\n"),  # a copy-up: dropped
            (ti("etc/link", L, mtime=0, linkname="conf"), None),  # the same symlink: dropped
            (ti("opt", D, mode=0o700, mtime=0), None),  # mode differs: kept
            (ti("opt/app", D, mode=0o755, uid=5), None),  # owner differs: kept
            (ti("opt/app/a", mtime=0), b"A\n"),  # content differs, same size
            (ti("opt/app/b", mtime=0, mode=0o600), b"b\n"),  # mode differs
            (ti("opt/app/sub", D, mode=0o755), None),  # equal: dropped, children kept
            (ti("opt/app/sub/x", mtime=OLD), b"x\n"),  # mtime differs
            (ti("opt/app/sub/y", L, mtime=0, linkname="x"), None),  # a symlink where a file was
            (ti("tmp", D, mode=0o1777, mtime=LATER), None),  # mtime alone differs: dropped
            (ti("var", D, mode=0o755), None),
            (ti("var/state", mtime=0, mode=0o600, uid=1), b"state\n"),
        ]
    )  # owner differs
    res, out = canon(tmp_path, layer, [BASE])
    assert names(out) == ["opt", "opt/app", "opt/app/a", "opt/app/b", "opt/app/sub/x", "opt/app/sub/y", "var/state"]
    assert res.copyups_dropped == 6
    # the names the canonical layer holds, for its readers (verify/inventory): directories kept over
    # a changed one below are spelled as replacements, without "/"
    assert res.paths == [
        b"opt",
        b"opt/app",
        b"opt/app/a",
        b"opt/app/b",
        b"opt/app/sub/x",
        b"opt/app/sub/y",
        b"var/state",
    ]


def test_the_names_of_the_canonical_layer_mark_new_directories_and_added_whiteouts(tmp_path):
    layer = gnu(
        [
            (ti("opt", D, mode=0o755), None),  # equal: dropped
            (ti("opt/app", D, mode=0o755), None),
            (ti("opt/app/.wh..wh..opq", mtime=0), b""),  # B: whiteouts of a, b, sub
            (ti("opt/new", D, mode=0o755), None),  # new: a listed directory
            (ti("opt/new/f"), b"f\n"),
            (ti("etc", D, mode=0o755), None),
            (ti("etc/link", D, mode=0o755), None),
        ]
    )  # a directory where a symlink was
    res, _ = canon(tmp_path, layer, [BASE])
    assert b"opt/" not in res.paths and b"opt" not in res.paths
    assert b"opt/new/" in res.paths and b"opt/new/f" in res.paths
    assert b"etc/link" in res.paths
    assert {b"opt/app/.wh.a", b"opt/app/.wh.b", b"opt/app/.wh.sub"} <= set(res.paths)


def test_c_entries_whose_xattrs_differ_kept(tmp_path):
    layer = tar_bytes(
        [
            (ti("etc", D, mode=0o755), None),
            (ti("etc/conf", mtime=0, pax={"SCHILY.xattr.security.capability": "\x01"}), b"conf=1\n"),
            (ti("opt", D, mode=0o755, pax={"SCHILY.xattr.user.k": "v"}), None),
        ]
    )
    res, out = canon(tmp_path, layer, [BASE])
    assert names(out) == ["etc/conf", "opt"] and res.copyups_dropped == 1


def test_c_symlink_with_another_target_kept(tmp_path):
    layer = gnu([(ti("etc/link", L, mtime=0, linkname="other"), None), (ti("etc/conf", mtime=0), b"conf=2\n")])
    res, out = canon(tmp_path, layer, [BASE])
    assert names(out) == ["etc/conf", "etc/link"] and res.copyups_dropped == 0


def test_c_hard_link_target_kept_when_equal(tmp_path):
    layer = gnu([(ti("etc/conf", mtime=0), b"conf=1\n"), (ti("etc/conf2", H, mtime=0, linkname="etc/conf"), None)])
    res, out = canon(tmp_path, layer, [BASE])
    assert names(out) == ["etc/conf", "etc/conf2"]
    assert entry(out, "etc/conf2").islnk() and (res.targets_kept, res.copyups_dropped) == (1, 0)


def test_d_whiteout_of_nothing_dropped(tmp_path):
    layer = gnu(
        [
            (ti("etc/.wh.conf", mode=0, mtime=0), None),
            (ti("etc/.wh.never", mode=0), None),
            (ti("nowhere/.wh.x", mode=0), None),
            (ti("opt/app/sub/.wh.x", mode=0o600), None),
        ]
    )
    res, out = canon(tmp_path, layer, [BASE])
    assert names(out) == ["etc/.wh.conf", "opt/app/sub/.wh.x"]
    assert (res.whiteouts_dropped, res.whiteouts_fixed) == (2, 1)


def test_layer_over_several_lowers(tmp_path):
    second = gnu(
        [
            (ti("opt/app/.wh.sub", mode=0), None),
            (ti("srv", D, mode=0o755, mtime=0), None),
            (ti("srv/s", mtime=0), b"s\n"),
        ]
    )
    layer = gnu(
        [
            (ti("opt/app/.wh.sub", mode=0), None),  # already gone: dropped
            (ti("srv/s", mtime=0), b"s\n"),
        ]
    )  # made by the layer below: dropped
    res, out = canon(tmp_path, layer, [BASE, second])
    assert names(out) == [] and out == bytes(1024)  # Docker's empty layer
    assert (res.whiteouts_dropped, res.copyups_dropped) == (1, 1)


# --- engines' differs agree -----------------------------------------------------------------


def test_overlay2_and_containerd_style_layers_agree(tmp_path):
    """The same step as Docker's overlay2 differ writes it (copy-ups, opaque markers, whiteouts
    with the upper's metadata) and as containerd's (only what differs, whiteouts of mode 0)."""
    common = [
        (ti("opt", D, mode=0o755), None),
        (ti("opt/new", D, mode=0o755), None),
        (ti("opt/new/tool", mode=0o755), b"#!/bin/sh\n"),
    ]
    overlay2 = gnu(
        common[:2]
        + [(ti("opt/new/.wh..wh..opq", mode=0o600), None)]
        + common[2:]
        + [
            (ti("tmp", D, mode=0o1777), None),
            (ti("var", D, mode=0o755), None),
            (ti("var/.wh.state", mode=0o600, mtime=LATER), None),
        ]
    )
    containerd = gnu(common + [(ti("var", D, mode=0o755), None), (ti("var/.wh.state", mode=0, mtime=0), None)])
    (a, out_a), (b, out_b) = canon(tmp_path, overlay2, [BASE], "a.tar"), canon(tmp_path, containerd, [BASE], "b.tar")
    assert out_a == out_b and a.diff_id == b.diff_id
    assert names(out_a) == ["opt/new", "opt/new/tool", "var/.wh.state"]


# --- the cached index ---------------------------------------------------------------------------


def diff_id(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_index_built_once_then_read_from_the_cache(tmp_path):
    cache, reads, logs = tmp_path / "lower-index", [], []
    second = gnu([(ti("srv", D, mode=0o755), None)])
    layers = [BASE, second]
    ids = [diff_id(x) for x in layers]

    def layer(i):
        reads.append(i)
        return [layers[i]]

    idx = open_lower(tmp_path / "w1.sqlite", ids, layer, cache=cache, log=logs.append)
    assert reads == [0, 1] and idx.get(b"opt/app/sub/x").type == F and idx.get(b"srv") is not None
    idx.apply([gnu([(ti("more"), b"m")])])  # the working copy, not the cache
    idx.close()
    cached = lowerindex.cache_file(cache, chain_ids(ids)[-1])
    assert cached.name == f"{chain_ids(ids)[-1][7:]}.v{lowerindex.FORMAT}.sqlite"
    assert cached.exists() and list(cache.iterdir()) == [cached]
    idx = open_lower(tmp_path / "w2.sqlite", ids, layer, cache=cache, log=logs.append)
    assert reads == [0, 1] and idx.get(b"more") is None and idx.get(b"srv") is not None
    idx.close()
    assert lowerindex.is_cached(cache, ids) and not lowerindex.is_cached(cache, ids[:1])


def test_index_keeps_the_hard_links_a_later_layer_leaves_alone(tmp_path):
    """A tar hard link names its partner; a later layer that rewrites one of its names (overlay's
    copy-up) leaves two files, and one that removes it leaves one."""
    linked = gnu(
        [
            (ti("srv", D, mode=0o755), None),
            (ti("srv/a"), b"one file\n"),
            (ti("srv/b", H, linkname="srv/a"), None),
            (ti("srv/c", H, linkname="srv/a"), None),
            (ti("srv/d", H, linkname="srv/a"), None),
        ]
    )
    later = gnu([(ti("srv/c", mode=0o4755), b"one file\n"), (ti("srv/.wh.d"), b"")])
    idx = index_of(tmp_path, [BASE, linked])
    assert idx.hardlinks() == [(b"srv/b", b"srv/a"), (b"srv/c", b"srv/a"), (b"srv/d", b"srv/a")]
    assert idx.get(b"srv/b") == idx.get(b"srv/a")
    idx.apply([later])
    assert idx.hardlinks() == [(b"srv/b", b"srv/a")]


def test_longer_chain_starts_from_the_cached_prefix(tmp_path):
    cache, reads = tmp_path / "c", []
    layers = [BASE, gnu([(ti("srv", D, mode=0o755), None)])]
    ids = [diff_id(x) for x in layers]

    def layer(i):
        reads.append(i)
        return [layers[i]]

    open_lower(tmp_path / "w.sqlite", ids[:1], layer, cache=cache, log=lambda m: None).close()
    open_lower(tmp_path / "w.sqlite", ids, layer, cache=cache, log=lambda m: None).close()
    assert reads == [0, 1]


@pytest.mark.parametrize("damage", ["garbage", "truncated", "other chain", "half built"])
def test_damaged_cache_rebuilt(tmp_path, damage):
    cache, reads, logs = tmp_path / "c", [], []
    ids = [diff_id(BASE)]

    def layer(i):
        reads.append(i)
        return [BASE]

    open_lower(tmp_path / "w.sqlite", ids, layer, cache=cache, log=logs.append).close()
    cached = lowerindex.cache_file(cache, chain_ids(ids)[-1])
    data = cached.read_bytes()
    if damage == "garbage":
        cached.write_bytes(b"\0garbage" * 999)
    elif damage == "truncated":
        cached.write_bytes(data[: len(data) // 2])
    else:
        db = sqlite3.connect(cached)
        if damage == "other chain":
            db.execute("UPDATE meta SET value = 'sha256:00' WHERE key = 'chain'")
        else:
            db.execute("DELETE FROM node WHERE name = x'61'")  # a row lost: the count disagrees
        db.commit()
        db.close()
    idx = open_lower(tmp_path / "w.sqlite", ids, layer, cache=cache, log=logs.append)
    assert reads == [0, 0] and idx.get(b"opt/app/a") is not None
    idx.close()
    assert any("damaged or incomplete, rebuilt" in m for m in logs)
    assert lowerindex.is_cached(cache, ids)


def test_index_refuses_a_layer_that_is_not_what_it_claims(tmp_path):
    from rocmforge.assemble.image import ImageArchiveError

    with pytest.raises(ImageArchiveError, match="hashes to"):
        open_lower(
            tmp_path / "w.sqlite", ["sha256:" + "0" * 64], lambda i: [BASE], cache=tmp_path / "c", log=lambda m: None
        )
    assert not (tmp_path / "c").exists()


# --- normalise's second pass --------------------------------------------------------------------


def step_layer(variant: str) -> bytes:
    if variant == "overlay2":
        return gnu(
            [
                (ti("etc", D, mode=0o755), None),
                (ti("etc/conf", mtime=0), b"conf=1\n"),
                (ti("opt", D, mode=0o755), None),
                (ti("opt/new", D, mode=0o755), None),
                (ti("opt/new/.wh..wh..opq", mode=0o600), None),
                (ti("opt/new/f"), b"f\n"),
                (ti("var", D, mode=0o755), None),
                (ti("var/.wh.state", mode=0o600, mtime=LATER), None),
            ]
        )
    return gnu(
        [
            (ti("opt", D, mode=0o755), None),
            (ti("opt/new", D, mode=0o755), None),
            (ti("opt/new/f"), b"f\n"),
            (ti("var", D, mode=0o755), None),
            (ti("var/.wh.state", mode=0), None),
        ]
    )


@pytest.mark.parametrize("keep_inherited", [False, True])
def test_rewrite_archive_canonicalises_own_layers_against_the_base(tmp_path, keep_inherited):
    ids, logs = [], []
    index_dir = tmp_path / "lower-index"
    top = gnu([(ti("opt/new/f"), b"f\n"), (ti("opt/new/g"), b"g\n")])  # f: the layer below's, again
    for k, variant in enumerate(("overlay2", "containerd")):
        work = tmp_path / variant
        work.mkdir()
        layers = [BASE, step_layer(variant), top]
        hint = [diff_id(x) for x in layers] if k else None
        rw = rewrite_archive(
            io.BytesIO(save_archive(layers, "s" * (k + 4))),
            work,
            epoch=EPOCH,
            log=logs.append,
            inherited=1,
            keep_inherited=keep_inherited,
            index_dir=index_dir,
            diff_ids=hint,
        )
        ids.append(rw.image_id)
        assert [r.diff_id for r in rw.results] == [d for d, _, _ in rw.layers]
        assert list(work.glob("*.raw")) == [] and list(work.glob("*.sqlite")) == []
        for (d, path, size), res in zip(rw.layers[1:], rw.results[1:]):
            assert diff_id(path.read_bytes()) == d and path.stat().st_size == size == res.size
        assert rw.results[2].copyups_dropped == 1
        b"".join(archive_chunks(rw, []))
    assert ids[0] == ids[1]
    assert any("opaque markers dropped" in m and "copy-ups dropped" in m for m in logs)
    assert lowerindex.is_cached(index_dir, [diff_id(BASE)])


def test_rewrite_archive_reads_the_base_as_the_engine_has_it(tmp_path):
    """A base not in canonical form (its rewrite drops a log): the index must still hold the log,
    or a whiteout of it (D) would be dropped and the log come back."""
    base = gnu(
        [
            (ti("var", D, mode=0o755, mtime=0), None),
            (ti("var/log", D, mode=0o755, mtime=0), None),
            (ti("var/log/apt.log", mtime=0), b"log\n"),
        ]
    )
    step = gnu([(ti("var/log", D, mode=0o755, mtime=LATER), None), (ti("var/log/.wh.apt.log", mode=0), None)])
    work = tmp_path / "w"
    work.mkdir()
    rw = rewrite_archive(
        io.BytesIO(save_archive([base, step], "abcd")),
        work,
        epoch=EPOCH,
        log=lambda m: None,
        inherited=1,
        index_dir=tmp_path / "idx",
    )
    assert names(rw.layers[1][1].read_bytes()) == ["var/log/.wh.apt.log"]
    assert rw.results[1].whiteouts_dropped == 0 and rw.results[1].copyups_dropped == 1


def test_first_own_layer_of_an_image_without_base_keeps_its_bytes(tmp_path):
    work = tmp_path / "w"
    work.mkdir()
    step = step_layer("containerd")
    rw = rewrite_archive(
        io.BytesIO(save_archive([BASE, step], "abcd")),
        work,
        epoch=EPOCH,
        log=lambda m: None,
        index_dir=tmp_path / "idx",
    )
    assert rw.results[0].diff_id == diff_id(BASE)  # canonical already, and W finds nothing
    assert rw.results[1].copyups_dropped == 2  # opt and var, as in BASE
    assert not (tmp_path / "idx").exists()  # no base: nothing to cache


class FakeStore:
    """The engine's store as rewrite_from_store reads it; counts the layers read."""

    def __init__(self, layers: list[bytes], config: bytes):
        self.layers, self.cfg, self.reads = layers, config, []

    def config(self, image_id):
        return self.cfg

    def layer(self, diff_ids, i):
        data, store = self.layers[i], self

        class Layer:
            diff_id, size = diff_ids[i], len(data)
            tar_size = size

            def chunks(self):
                store.reads.append(i)
                return iter([data[:700], data[700:]])

        return Layer()


def test_store_and_archive_give_one_image_and_the_base_is_read_once(tmp_path):
    import json

    from rocmforge.assemble.image.rewrite import rewrite_from_store
    from tests.unit.image_samples import docker_config

    base = gnu(
        [
            (bt("var", D, mode=0o755), None),
            (bt("var/log", D, mode=0o755), None),
            (ti("var/log/apt.log", mtime=0), b"log\n"),
        ]
    )  # not canonical: the rewrite drops the log
    step = step_layer("overlay2")
    layers = [BASE, base, step]
    cfg = json.dumps(docker_config("abcd", [diff_id(x) for x in layers])).encode()
    index_dir, ids = tmp_path / "idx", []
    store = FakeStore(layers, cfg)
    for k in range(2):
        work = tmp_path / f"s{k}"
        work.mkdir()
        rw = rewrite_from_store(
            store, "sha256:x", work, epoch=EPOCH, inherited=2, log=lambda m: None, index_dir=index_dir
        )
        ids.append(rw.image_id)
        assert rw.results[2].opaque_dropped == 1
    assert store.reads == [2, 0, 1, 2]  # the base's layers once, for the index
    work = tmp_path / "a"
    work.mkdir()
    rw = rewrite_archive(
        io.BytesIO(save_archive(layers, "abcd")),
        work,
        epoch=EPOCH,
        log=lambda m: None,
        inherited=2,
        index_dir=tmp_path / "other",
    )
    assert rw.image_id == ids[0] == ids[1]


# --- the engines' recorded layers --------------------------------------------------------------

# One base and one RUN step on it, as two real differs of one host wrote them (generate.sh there):
# Docker 20.10 on overlay2 and containerd 1.6's walking differ over overlayfs. <engine>-layer0.tar is
# the base as that engine holds it, <engine>-layer1.tar the step's layer.
RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "layers"


def test_recorded_engine_layers_agree_once_canonical(tmp_path):
    engines = sorted({re.sub(r"-layer1\.tar$", "", p.name) for p in RECORDED.glob("*-layer1.tar")})
    assert len(engines) >= 2, f"{RECORDED}: fewer than two engines' layers"
    raw, digests = {}, {}
    for eng in engines:
        raw[eng] = hashlib.sha256((RECORDED / f"{eng}-layer1.tar").read_bytes()).hexdigest()
        work = tmp_path / eng
        work.mkdir()
        with open(RECORDED / f"{eng}-layer1.tar", "rb") as f:
            first = normalise_layer(f, work / "l1.tar", epoch=EPOCH, log=lambda m: None)
        idx = LowerIndex(work / "lower.sqlite", create=True)
        idx.apply(RECORDED / f"{eng}-layer0.tar")
        digests[eng] = canonicalise(work / "l1.tar", idx, first).diff_id
        idx.close()
    # The differs disagree (opaque marker or one whiteout per child, unchanged copied-up files,
    # whiteout modes): were the recorded layers alike, agreeing afterwards would prove nothing.
    assert len(set(raw.values())) == len(engines), raw
    for eng in engines:  # nor does normalising alone make them agree
        with open(RECORDED / f"{eng}-layer1.tar", "rb") as f:
            raw[eng] = normalise_layer(f, tmp_path / f"{eng}-plain.tar", epoch=EPOCH, log=lambda m: None).diff_id
    assert len(set(raw.values())) == len(engines), raw
    assert len(set(digests.values())) == 1, digests
