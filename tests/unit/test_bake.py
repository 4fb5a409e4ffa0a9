"""The bake file (render.bake, images/docker-bake.json) and what `normalise --target` checks of the
image it is given (workflow.baked); tests/integration/test_bake.py bakes and normalises for real."""

from __future__ import annotations

import dataclasses
import json

import pytest

from rocmforge.assemble import engine
from rocmforge.render import bake
from rocmforge.render.plan import PinnedImage, load_plan
from rocmforge.resolve import bases
from rocmforge.shared.errors import UserError
from rocmforge.workflow import baked
from rocmforge.workflow.project import Project
from tests.conftest import ROOT, copy_project, run_cli

PLAN = load_plan(ROOT / "matrix.yaml")
KEYS = [tp.key for name in PLAN.targets for tp in PLAN.images_of(name)]


def test_the_committed_bake_file_is_the_plans():
    assert (
        (ROOT / "images" / bake.FILE).read_bytes()
        == bake.bake_file(PLAN)
        == bake.bake_file(load_plan(ROOT / "matrix.yaml"))
    )


def test_every_image_is_a_target_built_from_its_context_with_the_builds_label():
    data = json.loads(bake.bake_file(PLAN))
    assert sorted(data["target"]) == sorted(KEYS)
    for key, entry in data["target"].items():
        tp = PLAN.by_key(key)
        assert entry["context"] == f".rocmforge/bake/{key}" and entry["dockerfile"] == "Dockerfile"
        assert entry["labels"] == engine.build_labels(tp)  # what rocmforge's own build sets
        assert entry["tags"] == [f"rocmforge-bake/{tp.name}:content-{tp.content_hash[:12]}"]
        assert tp.content_tag not in entry["tags"]  # that tag names the normalised image only
    # prerequisites first: bake itself knows no order
    keys = list(data["target"])
    assert keys.index("hip-devel") < keys.index("hip-runtime") < keys.index("hip-python")


def test_each_targets_prerequisites_are_the_images_its_from_lines_name():
    needs = json.loads(bake.bake_file(PLAN))["x-rocmforge"]["needs"]
    assert needs["hip-runtime"] == needs["hip-runtime-gfx1100"] == ["hip-devel"]
    assert needs["hip-python"] == ["hip-runtime"]
    assert needs["llama31-qlora-debian-gfx90a"] == ["hip64-devel", "hip64-torch-gfx90a"]
    assert "hip-devel" not in needs  # FROM the bootstrapped base only
    for key, deps in needs.items():
        dockerfile = PLAN.by_key(key).files["Dockerfile"].decode()
        assert all(PLAN.by_key(d).content_tag in dockerfile for d in deps)


def test_a_registry_base_is_passed_by_its_locked_digest():
    tp = dataclasses.replace(
        PLAN.targets["hip-runtime"], registry_base=PinnedImage("rocm/pytorch", "sha256:" + "a" * 64)
    )
    assert bake.target(tp)["args"] == {bases.BASE_ARG: "rocm/pytorch@sha256:" + "a" * 64}
    assert "args" not in bake.target(PLAN.targets["hip-runtime"])


def test_render_check_names_a_stale_bake_file(tmp_path):
    matrix = copy_project(tmp_path)
    assert run_cli("--matrix", str(matrix), "render").returncode == 0
    (tmp_path / "images" / bake.FILE).write_text("{}\n")
    proc = run_cli("--matrix", str(matrix), "render", "--check")
    assert proc.returncode == 1 and f"stale: {(tmp_path / 'images' / bake.FILE).as_posix()}" in proc.stdout


class History:
    """A stand-in engine: an image's labels and `docker history` (newest first)."""

    def __init__(self, labels: dict, history: list[dict]):
        self._labels, self._history = labels, history

    def labels(self, ref):
        return self._labels

    def history(self, ref):
        return self._history


TP = PLAN.targets["hip-runtime"]
OWN = {bake.HASH_LABEL: TP.content_hash}


@pytest.mark.parametrize(
    ("newest", "steps"),
    [
        ({"CreatedBy": 'LABEL io.rocmforge.archs="gfx90a,gfx1100"', "Size": 0}, 1),  # bake: the label has no entry
        ({"CreatedBy": f"/bin/sh -c #(nop)  LABEL {bake.HASH_LABEL}={TP.content_hash}", "Size": 0}, 0),  # a step
    ],
)
def test_the_last_label_stands_for_the_content_hash_label_where_bake_gave_it(newest, steps):
    assert baked.label_steps(History(OWN, [newest, {"CreatedBy": "RUN x", "Size": 5}]), TP, "img") == steps


@pytest.mark.parametrize(
    ("labels", "newest", "said"),
    [
        ({}, {"CreatedBy": "LABEL a=b", "Size": 0}, "label is missing"),
        ({bake.HASH_LABEL: "0" * 64}, {"CreatedBy": "LABEL a=b", "Size": 0}, "label is 000"),
        (OWN, {"CreatedBy": "RUN make", "Size": 10}, "last step is not the Dockerfile's last LABEL"),
    ],
)
def test_an_image_of_other_content_or_another_dockerfile_is_refused(labels, newest, said):
    with pytest.raises(UserError) as err:
        baked.label_steps(History(labels, [newest]), TP, "img")
    assert said in str(err.value)


def test_context_and_normalise_take_a_variants_key():
    project = Project(ROOT / "matrix.yaml")
    assert project.buildable_image("hip-runtime-gfx1100").variant == ("gfx1100",)
    main = project.buildable_image("hip-runtime")
    assert main.key == "hip-runtime" and main.variant == ()
    with pytest.raises(UserError, match="unknown target 'hip-runtime-gfx942'"):
        project.buildable_image("hip-runtime-gfx942")
