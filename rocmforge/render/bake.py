"""images/docker-bake.json: every image of the matrix as a `docker buildx bake` target, so that a
user's own builders (remote, Kubernetes, cloud) can build them; `build.py normalise --target KEY`
then gives the image rocmforge's own build gives (workflow.baked).

Each bake target builds the folder `build.py context --target KEY --out .rocmforge/bake/KEY` writes
(bake reads paths from the folder it is run in: the project's, beside matrix.yaml) with the
committed Dockerfile, sets the content-hash label rocmforge's build sets, passes a registry base by
its locked digest, and tags the result `rocmforge-bake/NAME:content-HASH`, which `normalise` looks
for. Bake knows no ordering but through named contexts (`target:`), which would hand a later target
the raw, not yet normalised, image of its prerequisite (and need BuildKit 0.10: Docker 20.10 has
0.8); so each target's prerequisites, whose normalised images its FROM lines name by content tag,
are listed under `x-rocmforge`, which bake ignores: build and normalise them first."""

from __future__ import annotations

import json

from rocmforge.render.plan import BuildPlan, TargetPlan
from rocmforge.resolve import bases

FILE = "docker-bake.json"  # under images/
HASH_LABEL = "io.rocmforge.content-hash"  # the label every build sets (assemble.engine.build_labels)
REPOSITORY = "rocmforge-bake"  # where a bake build leaves its image for normalise
CONTEXTS = ".rocmforge/bake"  # each target's context folder, from the project's folder


def tag(tp: TargetPlan) -> str:
    """Where a bake build of tp leaves its raw image: one tag per content, never the content tag
    (that names the normalised image)."""
    return f"{REPOSITORY}/{tp.name}:content-{tp.content_hash[:12]}"


def context_dir(tp: TargetPlan) -> str:
    return f"{CONTEXTS}/{tp.key}"


def images(plan: BuildPlan) -> list[TargetPlan]:
    """Every image of the plan, prerequisites first (each target's main image, then its variants)."""
    return [tp for name in plan.order() for tp in plan.images_of(name)]


def needs(plan: BuildPlan, tp: TargetPlan) -> list[str]:
    """The keys of the images tp's Dockerfile names by content tag (its FROMs), in build order."""
    dockerfile = tp.files["Dockerfile"].decode()
    return [other.key for other in images(plan) if other is not tp and other.content_tag in dockerfile]


def target(tp: TargetPlan) -> dict:
    entry: dict = {"context": context_dir(tp), "dockerfile": "Dockerfile"}
    if tp.registry_base:
        entry["args"] = {bases.BASE_ARG: f"{tp.registry_base.image}@{tp.registry_base.digest}"}
    entry["labels"] = {HASH_LABEL: tp.content_hash}
    entry["tags"] = [tag(tp)]
    return entry


def bake_file(plan: BuildPlan) -> bytes:
    """The bake file's bytes: the same plan gives the same bytes."""
    ordered = images(plan)
    data = {
        "target": {tp.key: target(tp) for tp in ordered},
        "x-rocmforge": {
            "about": "rocmforge's images as bake targets; bake ignores this section (docs/engines.md, Bake)",
            "steps": [
                "python build.py context --target KEY --out .rocmforge/bake/KEY",
                "docker buildx bake --file images/docker-bake.json KEY  (from the project's folder)",
                "python build.py normalise --target KEY",
            ],
            "needs": {tp.key: needs(plan, tp) for tp in ordered if needs(plan, tp)},
        },
    }
    return (json.dumps(data, indent=2, sort_keys=False) + "\n").encode()
