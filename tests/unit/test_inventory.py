"""When an image's inventory needs no container: which layer names it reads, and the cache by
identity (both directions between an image and its base). The container itself is replaced by
a counter here; tests/integration/test_inventory.py runs the real one."""

from __future__ import annotations

import json

import pytest

from rocmforge.host.enginebase import Engine
from rocmforge.host.engineinfo import GRAPHDRIVER, EngineInfo
from rocmforge.verify import inventory

BASE, IMAGE = "sha256:" + "b" * 64, "sha256:" + "1" * 64
BASE_INV = {"dpkg": {"bash": "5.2"}, "python": {"numpy": "2.2.4"}, "prune_records": []}


@pytest.mark.parametrize(
    "name, read",
    [
        (b"opt/small", False),
        (b"opt/", False),
        (b"usr/", False),
        (b"usr/lib/", False),
        (b"opt/rocmforge/", False),
        (b"usr/share/doc/python3/", False),
        (b"opt/rocmforge/probes/gemm.py", False),
        (b"srv/app/main.py", False),
        (b"usr/bin/shasum", False),
        (b"tmp/.wh.foo", False),
        (b"opt/.wh.small", False),
        (b"usr/share/doc/x", False),
        (b"var/lib/dpkg/status", True),
        (b"var/lib/dpkg/info/bash.list", True),
        (b"etc/dpkg/dpkg.cfg.d/x", True),
        (b"usr/lib/python3.13/os.py", True),
        (b"usr/local/lib/python3.13/dist-packages/x.py", True),
        (b"usr/lib64/python3.11/json/__init__.py", True),
        (b"opt/conda/lib/python3.11/os.py", True),
        (b"opt/rocmforge/venv/bin/pip", True),
        (b"opt/rocmforge/prune/rocblas.json", True),
        (b"srv/app/numpy-2.2.4.dist-info/METADATA", True),
        (b"work/thing.egg-info/PKG-INFO", True),
        (b"root/.local/lib/python3.13/site-packages/a.pth", True),
        (b"opt/rocmforge/bin/python3", True),
        (b"usr/bin/sh", True),
        (b"usr/bin/timeout", True),
        (b"opt/rocmforge/bin/sleep", True),
        (b"usr/lib/x86_64-linux-gnu/libpython3.13.so.1.0", True),
        (b"usr/lib/x86_64-linux-gnu/libz.so.1", True),
        (b"lib64/ld-linux-x86-64.so.2", True),
        (b"etc/ld.so.preload", True),
        (b"etc/ld.so.cache", True),
        (b"etc/passwd", True),
        # removals: a whiteout stands for what it removes, an opaque marker for its whole folder
        (b"var/lib/.wh.dpkg", True),
        (b"usr/.wh..wh..opq", True),
        (b".wh..wh..opq", True),
        (b"opt/rocmforge/.wh..wh..opq", True),
        # a folder above a read root replaced by another node, or a directory kept over one (a changed
        # mode or owner, a symlink that was there): spelled without "/" (lowerrules._final_paths)
        (b"usr/lib", True),
        (b"var", True),
        (b"opt/rocmforge", True),
        (b"lib64/", True),
        (b"bin", True),
        (b"usr/local", True),
        (b"opt/conda", False),
    ],
)
def test_the_names_the_inventory_reads(name, read):
    assert inventory.read_by_inventory(name) is read


class Images(Engine):
    """Images by identity with their config; no engine behind."""

    def __init__(self, configs: dict[str, dict]):
        super().__init__(None, EngineInfo("Docker Engine", "28.5.2", "1.51", "overlay2", GRAPHDRIVER))
        self.configs = configs

    def identity(self, ref):
        return ref

    def inspect(self, ref):
        return {"Id": ref, "Config": self.configs[ref]}


@pytest.fixture()
def taken(monkeypatch, tmp_path):
    """The images a container was started for; each gives its own inventory."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def take(client, image):
        taken.append(image)
        return {**BASE_INV, "dpkg": {**BASE_INV["dpkg"], "marker": image[7:11]}}, taken.complete

    monkeypatch.setattr(inventory, "take", take)
    taken = Taken()
    return taken


class Taken(list):
    complete = True  # what the fake container says of its commands


def engine(image_env=("PATH=/usr/bin",)):
    return Images(
        {
            IMAGE: {"Env": list(image_env), "User": "", "WorkingDir": ""},
            BASE: {"Env": ["PATH=/usr/bin"], "User": "", "WorkingDir": ""},
        }
    )


def seen(client) -> inventory.BaseSeen:
    return inventory.BaseSeen.of(client, BASE)


def test_an_image_adding_nothing_the_inventory_reads_has_its_bases_once_one_was_taken(taken):
    client, lines = engine(), []
    first = inventory.inventory(client, IMAGE, base=seen(client), added_paths=[b"opt/", b"opt/small"], log=lines.append)
    assert taken == [IMAGE]
    assert "kept for its base" in lines[0] and "the container took" in lines[1]
    # the next small change on that base: no container, the base's inventory
    other = "sha256:" + "2" * 64
    client.configs[other] = client.configs[IMAGE]
    again = inventory.inventory(client, other, base=seen(client), added_paths=[b"opt/changed"], log=lines.append)
    assert taken == [IMAGE] and again == first
    assert "its base's" in lines[-1]
    # and the image itself, asked again without its build: its own entry
    assert inventory.inventory(client, other) == first and taken == [IMAGE]


@pytest.mark.parametrize(
    "added, env, why",
    [
        ([b"opt/small", b"var/lib/dpkg/status"], "PATH=/usr/bin", "var/lib/dpkg/status"),
        ([b"opt/small"], "PYTHONPATH=/srv", "differ from its base"),
    ],
)
def test_a_change_the_inventory_could_see_takes_a_container_and_is_never_the_bases(taken, added, env, why):
    client, lines = engine(image_env=(env,)), []
    inventory._keep(BASE, BASE_INV)
    inv = inventory.inventory(client, IMAGE, base=seen(client), added_paths=added, log=lines.append)
    assert taken == [IMAGE] and inv["dpkg"]["marker"] == IMAGE[7:11]
    assert why in lines[0]
    assert inventory._load(BASE) == BASE_INV  # the base's entry is not overwritten by it


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        json.dumps({"image": BASE, "inventory": {"dpkg": []}}),
        json.dumps({"image": "sha256:" + "c" * 64, "inventory": BASE_INV}),
    ],
)
def test_a_bad_or_misfiled_cache_entry_is_not_believed(taken, content):
    folder = inventory.cache_dir()
    folder.mkdir(parents=True)
    inventory._entry(BASE).write_text(content)
    client = engine()
    inventory.inventory(client, IMAGE, base=seen(client), added_paths=[b"opt/small"])
    assert taken == [IMAGE]


def test_without_its_build_an_uncached_image_takes_a_container(taken):
    inventory.inventory(engine(), IMAGE)
    assert taken == [IMAGE]


def test_an_inventory_a_command_failed_in_is_not_kept(taken):
    taken.complete = False
    client, lines = engine(), []
    inventory.inventory(client, IMAGE, base=seen(client), added_paths=[b"opt/small"], log=lines.append)
    assert "not kept" in lines[-1]
    assert inventory._load(IMAGE) is None and inventory._load(BASE) is None


def test_the_cache_is_named_by_the_commands_too(taken, monkeypatch):
    client = engine()
    inventory.inventory(client, IMAGE)
    monkeypatch.setattr(inventory, "COMMANDS", "0" * 12)  # what a changed command gives
    inventory.inventory(client, IMAGE)
    assert taken == [IMAGE, IMAGE]


def test_a_base_the_engine_cannot_name_takes_a_container(taken):
    client = engine()
    assert inventory.BaseSeen.of(client, None) is None
    inventory.inventory(client, IMAGE, base=None, added_paths=[b"opt/small"])
    assert taken == [IMAGE]


def test_the_cache_keeps_the_most_recently_used(taken, monkeypatch):
    import os

    monkeypatch.setattr(inventory, "KEEP", 2)
    ids = [f"sha256:{i:064x}" for i in range(1, 4)]
    for age, identity in enumerate(ids):
        inventory._keep(identity, BASE_INV)
        os.utime(inventory._entry(identity), (1000 + age, 1000 + age))
    assert inventory._load(ids[0]) is None  # the oldest went when the third came
    assert inventory._load(ids[1]) == BASE_INV  # read: now the most recent
    inventory._keep("sha256:" + "f" * 64, BASE_INV)
    assert inventory._load(ids[1]) == BASE_INV and inventory._load(ids[2]) is None
