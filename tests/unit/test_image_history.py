"""History read from the Dockerfile: the same wording whichever builder ran the steps."""

from __future__ import annotations

import json

from rocmforge.build.image.config import normalise_config
from rocmforge.build.image.history import stage_steps

DOCKERFILE = """# a comment
FROM base:1 AS builder
RUN make \\
    all
FROM builder AS mid
ENV A=1
FROM other:2 AS unrelated
RUN true
FROM mid
SHELL ["/bin/bash", "-c"]
# inside the stage
LABEL a="b" \\
      c="d"
"""


def test_the_last_stage_with_the_stages_it_starts_from():
    assert stage_steps(DOCKERFILE) == ["RUN make     all", "ENV A=1", 'SHELL ["/bin/bash", "-c"]',
                                       'LABEL a="b"       c="d"']


def test_docker_s_and_buildah_s_configs_of_one_build_are_one_config():
    layer = "sha256:" + "1" * 64
    docker = {"architecture": "amd64", "os": "linux",
              "config": {"Cmd": ["bash"], "Labels": {"a": "b"}},
              "history": [{"created_by": "base"},
                          {"created_by": "/bin/bash -c #(nop)  LABEL a=b", "empty_layer": True},
                          {"created_by": "|1 X=1 /bin/bash -c true"}],
              "rootfs": {"diff_ids": [layer, layer]}}
    buildah = {"architecture": "amd64", "os": "linux",
               "config": {"Cmd": ["bash"], "Entrypoint": [], "OnBuild": [], "Volumes": {},
                          "Labels": {"a": "b", "io.buildah.version": "1.43.2"}},
               "history": [{"created_by": "base"},
                           {"created_by": '/bin/sh -c #(nop) LABEL "a"="b"', "empty_layer": True,
                            "comment": "FROM base"},
                           {"created_by": "|1 X=1 /bin/sh -c true"}],
               "rootfs": {"diff_ids": [layer, layer]}}
    steps = ['LABEL a="b"', "RUN true"]
    a = normalise_config(docker, [layer, layer], epoch=0, steps=steps)
    b = normalise_config(buildah, [layer, layer], epoch=0, steps=steps)
    assert a == b
    assert [h["created_by"] for h in json.loads(a)["history"]] == ["base", 'LABEL a="b"', "RUN true"]


def test_without_steps_the_builder_s_wording_stays():
    cfg = {"config": {}, "history": [{"created_by": "x"}], "rootfs": {}}
    assert json.loads(normalise_config(cfg, [], epoch=0))["history"][0]["created_by"] == "x"
