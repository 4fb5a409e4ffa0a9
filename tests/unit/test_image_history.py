"""History read from the Dockerfile: the same wording whichever builder ran the steps."""

from __future__ import annotations

import json

from rocmforge.assemble.image.config import normalise_config
from rocmforge.render.dockerfile import stage_steps

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
    assert stage_steps(DOCKERFILE) == [
        "RUN make     all",
        "ENV A=1",
        'SHELL ["/bin/bash", "-c"]',
        'LABEL a="b"       c="d"',
    ]


def test_docker_s_and_buildah_s_configs_of_one_build_are_one_config():
    layer = "sha256:" + "1" * 64
    docker = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Cmd": ["bash"], "Labels": {"a": "b"}},
        "history": [
            {"created_by": "base"},
            {"created_by": "/bin/bash -c #(nop)  LABEL a=b", "empty_layer": True},
            {"created_by": "|1 X=1 /bin/bash -c true"},
        ],
        "rootfs": {"diff_ids": [layer, layer]},
    }
    buildah = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Cmd": ["bash"],
            "Entrypoint": [],
            "OnBuild": [],
            "Volumes": {},
            "Labels": {"a": "b", "io.buildah.version": "1.43.2"},
        },
        "history": [
            {"created_by": "base"},
            {"created_by": '/bin/sh -c #(nop) LABEL "a"="b"', "empty_layer": True, "comment": "FROM base"},
            {"created_by": "|1 X=1 /bin/sh -c true"},
        ],
        "rootfs": {"diff_ids": [layer, layer]},
    }
    steps = ['LABEL a="b"', "RUN true"]
    a = normalise_config(docker, [layer, layer], epoch=0, steps=steps)
    b = normalise_config(buildah, [layer, layer], epoch=0, steps=steps)
    assert a == b
    assert [h["created_by"] for h in json.loads(a)["history"]] == ["base", 'LABEL a="b"', "RUN true"]


def test_without_steps_the_builder_s_wording_stays():
    cfg = {"config": {}, "history": [{"created_by": "x"}], "rootfs": {}}
    assert json.loads(normalise_config(cfg, [], epoch=0))["history"][0]["created_by"] == "x"


def test_trailing_labels_become_one_line_and_the_history_reads_as_before():
    from rocmforge.render.dockerfile import trailing_labels

    dockerfile = 'FROM base:1\nRUN true\nLABEL a="1" \\\n      b="two words"\n# between\nLABEL c=3\n'
    given = trailing_labels(dockerfile)
    assert given.count == 2 and given.labels == {"a": "1", "b": "two words", "c": "3"}
    assert given.dockerfile == "FROM base:1\nRUN true\n"
    sent = given.with_labels({"hash": "abc"})
    assert stage_steps(sent) == ["RUN true", 'LABEL a="1" b="two words" c="3" hash="abc"']
    # the builder's one entry for the line is spelled as the three steps the image's history names
    layer = "sha256:" + "1" * 64
    steps = ["RUN true", *stage_steps(dockerfile)[1:], "LABEL hash=abc"]
    ran = {
        "config": {"Labels": {"a": "1", "b": "two words", "c": "3", "hash": "abc"}},
        "history": [
            {"created_by": "base"},
            {"created_by": "/bin/sh -c true"},
            {"created_by": "/bin/sh -c #(nop)  LABEL a=1 b=two words c=3 hash=abc", "empty_layer": True},
        ],
        "rootfs": {},
    }
    one_by_one = {
        **ran,
        "history": ran["history"][:2]
        + [{"created_by": f"/bin/sh -c #(nop)  {s}", "empty_layer": True} for s in steps[1:]],
    }
    assert normalise_config(ran, [layer, layer], epoch=0, steps=steps, merged=2) == normalise_config(
        one_by_one, [layer, layer], epoch=0, steps=steps
    )


def test_labels_a_builder_might_read_otherwise_are_left_in_the_dockerfile():
    from rocmforge.render.dockerfile import trailing_labels

    for tail in (
        'LABEL a="$HOME"',
        "LABEL a='single'",
        'LABEL a="back\\\\slash"',
        "LABEL a b",
        'LABEL a="x"y',
        "LABEL",
        'LABEL "a"="b"',
    ):
        assert trailing_labels(f"FROM base\nRUN true\n{tail}\n") is None, tail
    assert trailing_labels("FROM base\nRUN true\n") is None
    assert trailing_labels('# escape=`\nFROM base\nRUN true\nLABEL a="b"\n') is None
    # only the LABELs after the last other step; one unreadable LABEL ends the run
    given = trailing_labels('FROM base\nLABEL x="1"\nRUN true\nLABEL a=\'q\'\nLABEL b="2"\n')
    assert given.count == 1 and given.labels == {"b": "2"}
    assert given.dockerfile == "FROM base\nLABEL x=\"1\"\nRUN true\nLABEL a='q'\n"


def test_a_label_value_a_line_cannot_hold_is_refused():
    import pytest

    from rocmforge.render.dockerfile import trailing_labels

    with pytest.raises(ValueError):
        trailing_labels('FROM base\nRUN true\nLABEL a="b"\n').with_labels({"h": 'x"y'})


def test_final_from_is_the_last_stages_image():
    from rocmforge.render.dockerfile import final_from

    text = (
        "# comment\nFROM rocmforge/hip-devel:content-1 AS hip-devel\nRUN make\n\n"
        "FROM --platform=linux/amd64 ${BASE}\nCOPY --from=hip-devel /x /x\n"
    )
    assert final_from(text) == "${BASE}"
    assert final_from("FROM scratch\nLABEL a=b\n") == "scratch"
    assert final_from("# no stage at all\n") == ""
