"""The canonical image config (rocmforge.assemble.image.config): only what describes the image, with
epoch times."""

from __future__ import annotations

import json

from rocmforge.assemble.image.config import normalise_config
from rocmforge.resolve.bases import canonical_json
from tests.unit.image_samples import EPOCH, docker_config


def test_config_is_canonical_with_epoch_times():
    a, b = (
        normalise_config(docker_config(stamp, ["sha256:old"]), ["sha256:new"], epoch=EPOCH)
        for stamp in ("aaaa", "bbbbbbbb")
    )
    assert a == b  # only times, containers and host names differed
    normalised = a
    cfg = json.loads(normalised)
    assert normalised == json.dumps(cfg, sort_keys=True, separators=(",", ":")).encode()
    assert cfg["created"] == "2025-12-01T00:00:00Z"
    assert {h["created"] for h in cfg["history"]} == {"2025-12-01T00:00:00Z"}
    assert cfg["history"][1] == {
        "created": "2025-12-01T00:00:00Z",
        "created_by": "/bin/sh -c #(nop)  ARG A=1",
        "empty_layer": True,
    }
    assert not {"container", "container_config", "docker_version"} & cfg.keys()
    assert cfg["config"] == {
        "Env": ["PATH=/usr/bin:/bin"],
        "Cmd": ["bash"],
        "Labels": {"org.opencontainers.image.title": "x"},
    }
    assert cfg["rootfs"] == {"type": "layers", "diff_ids": ["sha256:new"]}


def test_bootstrap_config_round_trips():
    cfg = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {"Env": ["PATH=/usr/bin"], "Cmd": ["bash"], "Labels": {"io.rocmforge.base": "s"}},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:abc"]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "rocmforge bootstrap: x"}],
    }
    assert normalise_config(cfg, ["sha256:abc"], epoch=0) == canonical_json(cfg)


def test_copy_source_checksums_in_history_become_layer_content():
    """The classic builder's `COPY dir:<sum>` includes file mtimes; two builds of identical layers
    must get identical history, named by the layer's diff ID instead."""

    def cfg(sum_):
        return {
            "architecture": "amd64",
            "os": "linux",
            "history": [
                {"created_by": "bootstrap"},
                {"created_by": "/bin/sh -c #(nop)  ENV A=1", "empty_layer": True},
                {"created_by": f"/bin/bash -o pipefail -c #(nop) COPY dir:{sum_} in /opt/rocmforge/venv "},
            ],
        }

    diff_ids = ["sha256:" + "1" * 64, "sha256:" + "2" * 64]
    a = normalise_config(cfg("a" * 64), diff_ids, epoch=0)
    b = normalise_config(cfg("b" * 64), diff_ids, epoch=0)
    assert a == b
    assert f"COPY dir:{'2' * 64} in /opt/rocmforge/venv" in a.decode()
    # a different layer content still gives a different config
    assert normalise_config(cfg("a" * 64), [diff_ids[0], "sha256:" + "3" * 64], epoch=0) != a
