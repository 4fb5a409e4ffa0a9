"""Per-arch variants in the plan: rendered for fewer archs, built on their parent's variant, and
judged as the same target."""

from __future__ import annotations

import yaml

from rocmforge.render.plan import load_plan
from tests.conftest import ROOT, copy_project

PLAN = load_plan(ROOT / "matrix.yaml")


def _with_child_variants(tmp_path, groups):
    matrix = copy_project(tmp_path)
    data = yaml.safe_load(matrix.read_text())
    data["targets"]["hip-python"]["variants"] = groups
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_plan(matrix)


def test_a_variant_is_its_target_rendered_for_its_archs_only():
    main, v = PLAN.targets["hip-runtime"], PLAN.variant("hip-runtime", ["gfx1100"])
    assert v.name == main.name and v.key == "hip-runtime-gfx1100" and v.archs == ("gfx1100",)
    assert v.content_hash != main.content_hash and v.readable_tag == main.readable_tag + "-gfx1100"
    dockerfile = v.files["Dockerfile"].decode()
    assert "--keep gfx1100 " in dockerfile and "gfx90a" not in dockerfile
    assert "--offload-arch=gfx1100" in dockerfile and v.labels["io.rocmforge.archs"] == "gfx1100"
    # Everything but the archs is the target's own: same labels otherwise, same deps.
    same = {k: val for k, val in main.labels.items() if k != "io.rocmforge.archs"}
    assert {k: val for k, val in v.labels.items() if k != "io.rocmforge.archs"} == same
    assert v.deps == main.deps


def test_the_main_image_is_unchanged_by_declaring_variants(tmp_path):
    matrix = copy_project(tmp_path)
    data = yaml.safe_load(matrix.read_text())
    del data["targets"]["hip-runtime"]["variants"]
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    assert load_plan(matrix).targets["hip-runtime"].content_hash == PLAN.targets["hip-runtime"].content_hash


def test_a_childs_variant_is_built_on_its_parents_variant(tmp_path):
    plan = _with_child_variants(tmp_path, [["gfx1100"]])
    child = plan.variant("hip-python", ["gfx1100"])
    parent = plan.variant("hip-runtime", ["gfx1100"])
    assert f"FROM {parent.content_tag}" in child.files["Dockerfile"].decode()
    assert plan.targets["hip-runtime"].content_tag not in child.files["Dockerfile"].decode()
    # A build of the child makes the parent's variant first, and only the one it needs.
    assert [v.key for v in plan.variants_needed("hip-python")] == ["hip-runtime-gfx1100", "hip-python-gfx1100"]
    assert plan.image_for("hip-python", ("gfx1100",)) is child
    assert plan.image_for("hip-devel", ("gfx1100",)) is plan.targets["hip-devel"]


def test_every_variant_has_its_own_images_folder_and_key():
    keys = [tp.key for name in PLAN.targets for tp in PLAN.images_of(name)]
    assert len(keys) == len(set(keys))
    for key in keys:
        assert (ROOT / "images" / key / "Dockerfile").is_file(), key
        assert PLAN.by_key(key).key == key
