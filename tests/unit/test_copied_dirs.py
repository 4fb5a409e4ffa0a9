"""The folders a COPY takes from the context carry a time after every epoch (render.dockerfile,
assemble.buildstream.context_tar): Docker 28's BuildKit gives the folder the COPY makes the source
folder's time, the classic builder the build's, and normalisation clamps both to the epoch
(tests/integration/test_bake.py bakes on Docker 28's BuildKit and gets the classic build's ID)."""

from __future__ import annotations

import tarfile

from rocmforge.assemble.buildstream import context_tar
from rocmforge.render.dockerfile import COPIED_DIR_MTIME, copied_dirs
from rocmforge.render.plan import load_plan
from tests.conftest import ROOT

DOCKERFILE = """FROM base AS build
COPY sources/lib/ /src/lib/
COPY --from=build /out/ /opt/out/
FROM base
COPY probes/ /opt/rocmforge/probes/
COPY --chown=0:0 ./settings/a \\
     settings/b/ /opt/config/
COPY probes/one.py /tmp/one.py
ADD wheels /tmp/wheels
RUN cp -r probes /x
"""
FILES = [
    "Dockerfile",
    "probes/one.py",
    "probes/sub/two.py",
    "settings/a/x.json",
    "settings/b/y.json",
    "sources/lib/deep/z.c",
    "wheels/w.whl",
    "out/not-a-context-folder",
]


def test_the_folders_copy_and_add_take_from_the_context():
    assert copied_dirs(DOCKERFILE, FILES) == {"sources/lib", "probes", "settings/a", "settings/b", "wheels"}


def test_every_other_entry_of_the_context_carries_time_zero():
    files = {f: b"x" for f in FILES} | {"Dockerfile": DOCKERFILE.encode()}
    with tarfile.open(fileobj=context_tar(files, None)) as tar:
        times = {m.name: m.mtime for m in tar.getmembers()}
    copied = {"sources/lib", "probes", "settings/a", "settings/b", "wheels"}
    assert {n: t for n, t in times.items() if t} == dict.fromkeys(copied, COPIED_DIR_MTIME)
    assert times["probes/sub"] == times["sources/lib/deep"] == times["sources"] == 0  # below or above: 0


def test_the_time_is_after_every_targets_epoch():
    plan = load_plan(ROOT / "matrix.yaml")
    assert all(t.source_date_epoch < COPIED_DIR_MTIME for t in plan.matrix.targets.values())
