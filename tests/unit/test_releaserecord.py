"""The release record's pure logic: made and read back, a cut-off record refused with a clear
message, expiry and rollback against the highest serial seen, roles and index entries judged."""

from __future__ import annotations

import pytest

from rocmforge.release import releaserecord as rr
from rocmforge.shared.errors import BuildError, UserError

D = {n: "sha256:" + f"{n}" * 64 for n in "abcdef"}
NOW = 1_800_000_000.0
PUBLISHED = {
    "digest": D["a"],
    "archs": ["gfx90a", "gfx1100"],
    "tags": ["content-aaaaaaaaaaaa", "debian13-rocm5.7"],
    "index": {"digest": D["d"], "tag": "debian13-rocm5.7"},
    "variants": [
        {"digest": D["b"], "archs": ["gfx90a"], "tags": ["content-bbbbbbbbbbbb", "debian13-rocm5.7-gfx90a"]},
        {"digest": D["c"], "archs": ["gfx1100"], "tags": ["content-cccccccccccc", "debian13-rocm5.7-gfx1100"]},
    ],
}
MAIN = rr.Image(D["a"], "main", ("gfx90a", "gfx1100"))
GFX90A = rr.Image(D["b"], "variant", ("gfx90a",))
GFX1100 = rr.Image(D["c"], "variant", ("gfx1100",))


def record(serial: int = 7, valid_for: int = 30 * 86400) -> rr.Record:
    return rr.make("reg:5000/ns/hip-runtime", serial, rr.tags_of(PUBLISHED), now=NOW, valid_for=valid_for)


def test_a_record_reads_back_as_written_and_names_every_tag_with_its_role():
    rec = record()
    back = rr.parse(rec.dumps(), "here")
    assert back == rec
    assert back.tags["debian13-rocm5.7"].role == "index"
    assert back.tags["debian13-rocm5.7"].entries == (MAIN, GFX90A, GFX1100)
    assert back.tags["debian13-rocm5.7-gfx90a"] == rr.Tagged(D["b"], "variant", ("gfx90a",))
    assert back.tags["content-aaaaaaaaaaaa"].role == "main"
    assert back.expires == rr.iso(NOW + 30 * 86400)


@pytest.mark.parametrize("cut", [1, 40, -1])
def test_a_cut_off_record_is_refused_naming_it(cut):
    text = record().dumps()
    with pytest.raises(rr.BadRecord, match="cut off or not JSON"):
        rr.parse(text[:cut], "reg/x:rocmforge-release")


@pytest.mark.parametrize(
    "change, field",
    [({"serial": 0}, "serial"), ({"serial": True}, "serial"), ({"expires": "soon"}, "expires"), ({"tags": {}}, "tags")],
)
def test_a_field_of_the_wrong_kind_is_named(change, field):
    import json

    data = {**record().to_json(), **change}
    with pytest.raises(rr.BadRecord, match=f"no valid '{field}'"):
        rr.parse(json.dumps(data), "here")


def test_expired_and_rolled_back_records_are_stale():
    rec = record(valid_for=60)
    rr.fresh(rec, NOW + 59, None)
    with pytest.raises(rr.Stale, match=f"expired on {rec.expires}"):
        rr.fresh(rec, NOW + 61, None)
    older = record(serial=4)
    seen = {"serial": 7, "issued": "2026-12-01T00:00:00Z", "seen": "2026-12-02T00:00:00Z"}
    with pytest.raises(rr.Stale) as exc:
        rr.fresh(older, NOW, seen)
    assert str(exc.value).startswith(
        f"rolled back: the release record of reg:5000/ns/hip-runtime is serial 4 ({older.issued})"
    )
    assert "older than serial 7 (2026-12-01T00:00:00Z), seen on 2026-12-02T00:00:00Z" in str(exc.value)
    rr.fresh(record(serial=7), NOW, seen)
    rr.fresh(record(serial=8), NOW, seen)


def test_durations():
    assert rr.parse_duration("30d") == 30 * 86400 and rr.parse_duration("90m") == 5400
    for bad in ("0d", "1w", "", "-1d", "d"):
        with pytest.raises(UserError):
            rr.parse_duration(bad)


def test_the_current_tag_and_index_pass():
    rec = record()
    assert rr.judge(rec, "debian13-rocm5.7", D["d"], [MAIN, GFX90A, GFX1100], True) == "current"
    assert rr.judge(rec, "debian13-rocm5.7-gfx90a", D["b"], [GFX90A], False) == "current"
    assert rr.judge(rec, None, D["b"], [GFX90A], False) == "current"
    assert rr.judge(rec, None, D["e"], [rr.Image(D["e"], "main", ())], False) == "superseded"


def test_a_variant_under_the_main_tag_is_named():
    with pytest.raises(
        BuildError, match="the image reached through the main tag debian13-rocm5.7 is the gfx90a variant"
    ):
        rr.judge(record(), "debian13-rocm5.7", D["b"], [GFX90A], False)
    with pytest.raises(
        BuildError, match="through the gfx1100 variant tag debian13-rocm5.7-gfx1100 is the gfx90a variant"
    ):
        rr.judge(record(), "debian13-rocm5.7-gfx1100", D["b"], [GFX90A], False)


def test_a_tag_rolled_back_to_another_signed_image_is_refused():
    old = rr.Image(D["e"], "main", ("gfx90a", "gfx1100"))
    with pytest.raises(BuildError, match=f"tag content-aaaaaaaaaaaa serves {D['e']}, but the release record"):
        rr.judge(record(), "content-aaaaaaaaaaaa", D["e"], [old], False)


@pytest.mark.parametrize(
    "images, needle",
    [
        ([MAIN, GFX90A], "missing: " + D["c"][:19]),
        ([MAIN, MAIN, GFX1100], "listed twice"),
        ([MAIN, rr.Image(D["b"], "variant", ("gfx1100",)), rr.Image(D["c"], "variant", ("gfx90a",))], "annotated"),
    ],
    ids=["dropped", "duplicated", "swapped"],
)
def test_an_index_that_differs_from_the_record_is_refused(images, needle):
    with pytest.raises(BuildError, match="does not list what the release record names") as exc:
        rr.judge(record(), "debian13-rocm5.7", D["e"], images, True)  # a rewritten index has its own digest
    assert needle in str(exc.value)
