"""Naming the first difference between two images (rocmforge.assemble.image.diff), on synthetic layers."""

from __future__ import annotations

import hashlib
import io
import tarfile

from rocmforge.assemble.image.diff import compare_configs, compare_layers, describe_difference, summarise_layer
from rocmforge.shared.streams import ChunkStream
from tests.unit.image_samples import EPOCH, tar_bytes, ti


def test_compare_layers_names_the_first_difference():
    def summary(data):
        return summarise_layer(ChunkStream(io.BytesIO(data)))

    a = tar_bytes(
        [
            (ti("opt", tarfile.DIRTYPE), None),
            (ti("opt/stamp", mtime=EPOCH), b"1764547200123\n"),
            (ti("opt/z", mode=0o644), b"z"),
        ]
    )
    b = tar_bytes(
        [
            (ti("opt", tarfile.DIRTYPE), None),
            (ti("opt/stamp", mtime=EPOCH), b"1764547200999\n"),
            (ti("opt/z", mode=0o600), b"z"),
        ]
    )
    d = compare_layers(summary(a), summary(b))
    assert d == {
        "path": "/opt/stamp",
        "field": "content",
        "a": hashlib.sha256(b"1764547200123\n").hexdigest(),
        "b": hashlib.sha256(b"1764547200999\n").hexdigest(),
    }
    c = tar_bytes([(ti("opt", tarfile.DIRTYPE), None), (ti("opt/z", mode=0o600), b"z")])
    assert compare_layers(summary(a), summary(c))["field"] == "presence"
    assert compare_layers(summary(c), summary(b)) == {"path": "/opt/stamp", "field": "presence", "a": False, "b": True}
    assert compare_layers(summary(a), summary(a)) is None


def test_compare_configs_gives_a_json_path():
    a = {"config": {"Labels": {"org.opencontainers.image.created": "x"}, "Env": ["A=1", "B=2"]}}
    b = {"config": {"Labels": {"org.opencontainers.image.created": "y"}, "Env": ["A=1", "B=3"]}}
    assert compare_configs(a, b) == {"where": "config", "field": "config.Env[1]", "a": "B=2", "b": "B=3"}
    b["config"]["Env"] = a["config"]["Env"]
    assert compare_configs(a, b)["field"] == 'config.Labels["org.opencontainers.image.created"]'


def test_describe():
    line = describe_difference(
        {
            "where": "layer",
            "index": 4,
            "created_by": "/bin/sh -c date > /opt/stamp",
            "path": "/opt/stamp",
            "field": "content",
            "a": "1a2b" + "0" * 60,
            "b": "9f8e" + "1" * 60,
        }
    )
    assert line == (
        "layer 4 (RUN date > /opt/stamp): /opt/stamp content differs (sha256 1a2b00000000… vs 9f8e11111111…)"
    )
    line = describe_difference(
        {
            "where": "layer",
            "index": 1,
            "created_by": "|1 SOURCE_DATE_EPOCH=1764547200 /bin/bash -o pipefail -c apt-get update",
            "path": "/etc",
            "field": "mtime",
            "a": EPOCH,
            "b": EPOCH + 1,
        }
    )
    assert line == "layer 1 (RUN apt-get update): /etc mtime differs (2025-12-01T00:00:00Z vs 2025-12-01T00:00:01Z)"
    line = describe_difference(
        {
            "where": "layer",
            "index": 2,
            "created_by": "/bin/sh -c #(nop) COPY file:abc in /x ",
            "path": "/x",
            "field": "presence",
            "a": False,
            "b": True,
        }
    )
    assert line == "layer 2 (COPY file:abc in /x): /x exists only in the second image"
    assert (
        describe_difference(
            {"where": "layer", "index": 0, "created_by": None, "path": "/a", "field": "mode", "a": "0644", "b": "0600"}
        )
        == "layer 0: /a mode differs (0644 vs 0600)"
    )
    assert (
        describe_difference({"where": "config", "field": "config.Env[1]", "a": "B=2", "b": "B=3"})
        == "config config.Env[1] differs (B=2 vs B=3)"
    )
    assert describe_difference(None) == "the images are identical"
