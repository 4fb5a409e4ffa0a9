"""push trusts suite results only for what they were judged against (issue 38): the target, its
content hash, the matrix and the lock. Fake records in a state folder, no engine: the gate
(publish._require_passed) is what `push` runs before it touches the registry."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from rocmforge import __version__
from rocmforge.release import publish
from rocmforge.render.plan import TargetPlan, content_hash
from rocmforge.shared.errors import UserError
from rocmforge.verify import suites

IMAGE_ID = "sha256:" + "ab" * 32
FILES = {"Dockerfile": b"# rfjudged\n"}
TP = TargetPlan(
    name="rfjudged",
    stack="s",
    archs=("gfx1100",),
    deps=(),
    files=FILES,
    content_hash=content_hash(FILES),
    labels={},
    unresolved=(),
    bootstrap_stack=None,
)
TEST_CMD = "`python build.py test --target rfjudged`"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A matrix and its lock; returns the matrix path. The state folder is tmp_path/state."""
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("targets: {}\n")
    matrix.with_suffix(".lock").write_text("{}\n")
    return matrix


def write_record(matrix: Path, ok: bool = True, judged: bool = True, **other) -> dict:
    data = {
        "image": TP.content_tag,
        "image_id": IMAGE_ID,
        "target": TP.name,
        "pytest_exit": 0,
        "ok": ok,
        "suites": {"linkage": {"status": "passed" if ok else "failed", "detail": ""}},
        "tests": [],
    }
    if judged:
        data.update({**asdict(suites.judged_against(matrix, TP.name, TP.content_hash)), **other})
    suites.record(matrix.parent / "state", suites.SuitesReport.from_json(data))
    return data


def gate(matrix: Path):
    return publish._require_passed(matrix.parent / "state", TP, IMAGE_ID, TEST_CMD, matrix)


def refusal(matrix: Path) -> str:
    with pytest.raises(UserError) as err:
        gate(matrix)
    assert err.value.field == "--target"
    return str(err.value)


def test_matching_record_is_accepted_and_names_its_inputs(project):
    written = write_record(project)
    result = gate(project)
    assert result.ok and result.judged == suites.judged_against(project, TP.name, TP.content_hash)
    on_disk = json.loads(suites.results_path(project.parent / "state", IMAGE_ID).read_text())
    assert {k: on_disk[k] for k in suites.JUDGED_KEYS} == {k: written[k] for k in suites.JUDGED_KEYS}
    assert on_disk["rocmforge_version"] == __version__
    assert on_disk["matrix_sha256"] == suites.file_sha256(project) and len(on_disk["lock_sha256"]) == 64


def test_other_target_is_refused(project):
    write_record(project, target="hip-runtime")
    assert f"another target: 'hip-runtime', not '{TP.name}'" in refusal(project)


def test_other_content_hash_is_refused(project):
    write_record(project, content_hash="0" * 64)
    assert f"another content hash: {'0' * 64}, not {TP.content_hash}" in refusal(project)


def test_edited_matrix_is_refused(project):
    was = write_record(project)["matrix_sha256"]
    project.write_text("targets: {}\n# edited\n")
    message = refusal(project)
    assert f"another matrix: sha256 {was}, not {project}'s sha256 {suites.file_sha256(project)}" in message
    assert "lock" not in message.split("they say nothing")[0]


def test_edited_lock_is_refused(project):
    lock = project.with_suffix(".lock")
    was = write_record(project)["lock_sha256"]
    lock.write_text('{"edited": true}\n')
    assert f"another lock: sha256 {was}, not {lock}'s sha256 {suites.file_sha256(lock)}" in refusal(project)


def test_lock_removed_since_is_refused(project):
    lock = project.with_suffix(".lock")
    was = write_record(project)["lock_sha256"]
    lock.unlink()
    assert f"another lock: sha256 {was}, not {lock}'s no file" in refusal(project)


def test_every_difference_is_named_at_once(project):
    write_record(project, target="x", content_hash="1" * 64, matrix_sha256="2" * 64, lock_sha256="3" * 64)
    message = refusal(project)
    for what in ("another target", "another content hash", "another matrix", "another lock"):
        assert what in message
    assert f"Run {TEST_CMD} again" in message


def test_record_without_judgement_counts_as_not_judged(project):
    write_record(project, judged=False)
    message = refusal(project)
    assert "not judged" in message and IMAGE_ID in message and f"run {TEST_CMD} again" in message


def test_record_missing_one_judgement_field_counts_as_not_judged(project):
    data = write_record(project)
    del data["lock_sha256"]
    suites.record(project.parent / "state", suites.SuitesReport.from_json(data))
    assert "not judged" in refusal(project)


def test_failed_record_judged_here_is_still_refused(project):
    write_record(project, ok=False)
    assert "failed its suites" in refusal(project)
