"""The signed/attested column: what a publish record says of `push --sign-key` (publication.signed),
how the report page draws it next to the other columns, and the same field in `list --json` and
`report --json`, read from published/<target>.json of a scratch project (no engine needed: the
commands run with DOCKER_HOST at a dead socket)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rocmforge.release import attestations as att
from rocmforge.release import publication, report_page
from rocmforge.release.matrix_report import Report, SuiteCell, TargetRow
from rocmforge.shared import records
from rocmforge.verify.suites import SuiteStatus
from tests.conftest import BUILD_PY, copy_project

KEY = "0123456789abcdef" * 4
DIGEST = "sha256:" + "ab" * 32
STATEMENTS = sorted((att.SBOM, att.PROVENANCE, att.TEST_RESULT))
DEAD_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/rocmforge-no-engine.sock", "COLUMNS": "200"}


def signed_block(**changes) -> dict:
    """What signing.Signer.attach returns for the three statements, changed as asked."""
    return {
        "cosign": "2.5.0",
        "public_key_sha256": KEY,
        "attestations": STATEMENTS,
        "predicate_bytes": {k: 1000 + i for i, k in enumerate(STATEMENTS)},
        **changes,
    }


def publish_record(target: str, **extra) -> dict:
    return {
        "target": target,
        "registry": "registry.example.org:5000",
        "digest": DIGEST,
        "repository": f"registry.example.org:5000/rocmforge/{target}",
        "image_id": "sha256:" + "12" * 32,
        "content_hash": "c" * 64,
        "suites": {},
        "tags": ["content-cccccccccccc"],
        **extra,
    }


# -- publication.signed --------------------------------------------------------------------------
def test_signed_record_names_the_statements_and_the_key():
    s = publication.signed(publish_record("t", signed=signed_block()))
    assert s["state"] == "signed"
    assert s["text"] == f"signed + 3 attestations (key sha256 {KEY[:12]}…)"
    assert s["key_sha256"] == KEY and s["cosign"] == "2.5.0" and s["digest"] == DIGEST
    assert {a["name"] for a in s["attestations"]} == {"SBOM", "SLSA provenance", "test result"}
    assert {a["type"]: a["bytes"] for a in s["attestations"]} == signed_block()["predicate_bytes"]


def test_one_attestation_is_singular_and_an_unknown_type_keeps_its_uri():
    s = publication.signed(
        publish_record("t", signed=signed_block(attestations=["urn:other"], predicate_bytes={"urn:other": 5}))
    )
    assert s["text"].startswith("signed + 1 attestation (key")
    assert s["attestations"] == [{"type": "urn:other", "name": "urn:other", "bytes": 5}]


def test_unsigned_and_not_published():
    assert publication.signed(publish_record("t")) == {"state": "unsigned", "text": "unsigned", "digest": DIGEST}
    assert publication.signed(None) == {"state": "not published", "text": "not published"}


@pytest.mark.parametrize(
    "block, why",
    [
        (None, "a JSON null, not an object"),
        ("yes", "a JSON string, not an object"),
        (signed_block(cosign=2), "'cosign'"),
        (signed_block(public_key_sha256="ABCD"), "'public_key_sha256'"),
        (signed_block(public_key_sha256=KEY.upper()), "'public_key_sha256'"),
        (signed_block(attestations="all"), "'attestations'"),
        (signed_block(attestations=STATEMENTS + STATEMENTS[:1]), "'attestations'"),
        (signed_block(predicate_bytes={}), "'predicate_bytes'"),
        (signed_block(predicate_bytes={k: True for k in STATEMENTS}), "'predicate_bytes'"),
    ],
    ids=["null", "string", "cosign", "short-key", "upper-key", "kinds", "repeated-kind", "no-sizes", "bool-sizes"],
)
def test_a_signing_block_push_did_not_write_is_not_a_signature(block, why):
    s = publication.signed(publish_record("t", signed=block))
    assert s["state"] == "unreadable" and s["text"] == "signing record unreadable"
    assert why in s["problem"] and s["digest"] == DIGEST


def test_record_reads_absent_good_and_damaged_files(tmp_path, capsys):
    records._warned.clear()
    assert publication.record(tmp_path, "t") == (None, None)
    (tmp_path / "t.json").write_text(json.dumps(publish_record("t")))
    assert publication.record(tmp_path, "t")[0]["digest"] == DIGEST
    (tmp_path / "t.json").write_text('{"target": "t", "digest": ')
    rec, why = publication.record(tmp_path, "t")
    assert rec is None and "cut short" in why
    assert publication.signed(rec, why)["state"] == "unreadable"
    err = capsys.readouterr().err
    assert err.startswith(f"warning: {tmp_path / 't.json'}:1: cut short") and "; ignored;" in err
    (tmp_path / "u.json").write_text(json.dumps(publish_record("other")))
    assert publication.record(tmp_path, "u") == (None, "not a publish record of u")


# -- the page -------------------------------------------------------------------------------------
def row(name: str, published: dict | None, signed: dict, **changes) -> TargetRow:
    fields = dict(
        name=name,
        description="a target " * 30,
        stack="debian13-rocm5.7",
        rocm="5.7.1",
        archs=["gfx90a", "gfx1100"],
        state="built",
        why_unresolved=[],
        content_tag=f"rocmforge/{name}:content-0123456789ab",
        image_id="sha256:" + "fe" * 32,
        size_bytes=1_650_000_000,
        suites={
            "linkage": SuiteCell(SuiteStatus.PASSED, "1 check(s)"),
            "gemm": SuiteCell(SuiteStatus.NOT_GPU_VERIFIED, "no /dev/kfd on this host"),
        },
        pins={"apt": 34, "pip": 0, "git": 0},
        drift=[],
        drift_checked="2026-12-01T00:00:00Z",
        repro=None,
        published=published,
        manifest="../artifacts/x/manifest.json",
        sbom=None,
        signed=signed,
    )
    fields.update(changes)
    return TargetRow(**fields)


def page(*rows: TargetRow) -> str:
    return report_page.to_html(
        Report(
            generated="2026-12-05 12:00 UTC",
            matrix="matrix.yaml",
            host_gpu=False,
            suites=["linkage", "gemm"],
            targets=list(rows),
        )
    )


def td(text: str, target: str, label: str) -> str:
    tr = re.search(rf'<tr data-target="{target}"[^>]*>(.*?)</tr>', text).group(1)
    return re.search(rf'<td[^>]*data-label="{label}"[^>]*>.*?</td>', tr).group(0)


def test_the_signed_column_is_last_and_shows_each_state():
    rec = publish_record("a", signed=signed_block())
    text = page(
        row("a", rec, publication.signed(rec)),
        row("b", publish_record("b"), publication.signed(publish_record("b"))),
        row("c", None, publication.signed(None)),
        row("d", None, publication.signed(None, "cut short: the JSON stops at line 1")),
    )
    assert re.findall(r"<th[^>]*>([^<]*)</th>", text)[-1] == "signed"
    cell = td(text, "a", "signed")
    assert 'data-signed="signed"' in cell and 'class="ok"' in cell
    assert f"signed + 3 attestations (key sha256 {KEY[:12]}…)" in cell
    assert f"public key sha256 {KEY}" in cell and "cosign 2.5.0" in cell and "SBOM (1000 bytes)" in cell
    assert 'data-signed="unsigned"' in td(text, "b", "signed") and ">unsigned<" in td(text, "b", "signed")
    assert ">not published<" in td(text, "c", "signed") and 'class="none"' in td(text, "c", "signed")
    d = td(text, "d", "signed")
    assert 'class="bad"' in d and "publish record unreadable: cut short" in d


def test_long_references_are_shortened_in_the_cell_and_whole_in_a_title_or_details():
    rec = publish_record("a", signed=signed_block())
    text = page(
        row("a", {k: rec[k] for k in ("digest", "registry", "repository", "image_id")}, publication.signed(rec))
    )
    pub = td(text, "a", "published")
    whole = f"registry.example.org:5000/rocmforge/a@{DIGEST}"
    assert f'title="{whole}"' in pub and f'<div class="why">{whole}</div></details>' in pub
    assert "<code>abababababab…</code>" in pub
    image = td(text, "a", "image")
    # the repository and the image ID in the tag's title: the cell keeps three lines
    assert (
        f'<div class="line" title="rocmforge/a:content-0123456789ab; image ID sha256:{"fe" * 32}">'
        "<code>content-0123456789ab</code></div>"
    ) in image
    # A reason is folded: the cell is one line until it is opened.
    assert '<details><summary class="cell">not GPU-veri\u00adfied</summary>' in td(text, "a", "gemm")


def test_the_table_is_laid_out_at_the_window_width():
    text = page(row("a", None, publication.signed(None)))
    assert "table-layout:fixed" in text and "overflow-wrap:anywhere" in text
    shares = [float(w) for w in re.findall(r'<col style="width:([0-9.]+)%">', text)]
    assert len(shares) == 3 + 2 + 3 and sum(shares) == pytest.approx(100, abs=0.05)
    assert "<script" not in text and "http://" not in text and "https://" not in text


def test_markdown_summary_carries_the_signed_text():
    rec = publish_record("a", signed=signed_block())
    md = report_page.to_markdown(
        Report(
            generated="g",
            matrix="m",
            host_gpu=False,
            suites=["linkage", "gemm"],
            targets=[row("a", None, publication.signed(rec))],
        )
    )
    assert md.splitlines()[2].endswith("| signed |")
    assert md.splitlines()[4].endswith(f"| signed + 3 attestations (key sha256 {KEY[:12]}…) |")


# -- list --json and report --json ------------------------------------------------------------------
@pytest.fixture(scope="module")
def published_project(tmp_path_factory) -> Path:
    root = copy_project(tmp_path_factory.mktemp("signed")).parent
    folder = root / "published"
    folder.mkdir()
    (folder / "hip-runtime.json").write_text(json.dumps(publish_record("hip-runtime", signed=signed_block())))
    (folder / "hip-python.json").write_text(json.dumps(publish_record("hip-python")))
    (folder / "hip-devel.json").write_text("{not json")
    return root


def cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            str(BUILD_PY),
            "--matrix",
            str(root / "matrix.yaml"),
            "--state-dir",
            str(root / ".rocmforge"),
            *args,
        ],
        cwd=root,
        env={**os.environ, **DEAD_ENGINE},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_list_json_has_each_targets_signed_state(published_project):
    proc = cli(published_project, "list", "--json")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    by = {r["name"]: r["signed"] for r in json.loads(proc.stdout)}
    assert by["hip-runtime"]["state"] == "signed" and by["hip-runtime"]["key_sha256"] == KEY
    assert by["hip-runtime"]["text"] == f"signed + 3 attestations (key sha256 {KEY[:12]}…)"
    assert by["hip-python"] == {"state": "unsigned", "text": "unsigned", "digest": DIGEST}
    assert by["hip-devel"]["state"] == "unreadable" and "not JSON" in by["hip-devel"]["problem"]
    assert {s["state"] for n, s in by.items() if n not in ("hip-runtime", "hip-python", "hip-devel")} == {
        "not published"
    }
    warned = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 1 and "hip-devel.json:1: not JSON" in warned[0]


def test_report_json_shows_the_same_signed_field_as_list(published_project, tmp_path):
    listed = {r["name"]: r["signed"] for r in json.loads(cli(published_project, "list", "--json").stdout)}
    proc = cli(published_project, "report", "--json", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    reported = {r["name"]: r["signed"] for r in json.loads(proc.stdout)["targets"]}
    assert {n: s for n, s in reported.items() if n in listed} == listed
    # The report has a row per variant too; a variant is published only inside its target's index.
    variants = set(reported) - set(listed)
    assert variants == {
        f"{t}-{a}" for t in ("hip-runtime", "hip64-torch", "llama31-qlora-debian") for a in ("gfx90a", "gfx1100")
    }
    assert {reported[v]["state"] for v in variants} == {"not published"}
    html = (tmp_path / "out" / "index.html").read_text()
    assert f"signed + 3 attestations (key sha256 {KEY[:12]}…)" in html and 'data-signed="unreadable"' in html


def test_a_variant_published_in_its_targets_index_shows_its_own_signature(tmp_path):
    root = copy_project(tmp_path).parent
    (root / "published").mkdir()
    rec = publish_record("hip-runtime", signed=signed_block())
    gfx1100 = {
        **publish_record("hip-runtime", signed=signed_block()),
        "archs": ["gfx1100"],
        "digest": "sha256:" + "7" * 64,
    }
    rec.update(index={"digest": "sha256:" + "9" * 64, "tag": rec["tags"][-1]}, variants=[gfx1100])
    (root / "published" / "hip-runtime.json").write_text(json.dumps(rec))
    proc = cli(root, "report", "--json", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)["targets"]}
    assert rows["hip-runtime-gfx1100"]["signed"]["state"] == "signed"
    assert rows["hip-runtime-gfx1100"]["signed"]["digest"] == "sha256:" + "7" * 64
    assert rows["hip-runtime-gfx1100"]["published"]["repository"] == rec["repository"]
    assert rows["hip-runtime-gfx90a"]["signed"]["state"] == "not published"  # not in the index
