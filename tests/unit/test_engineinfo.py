"""Which engine and store: read from what each engine's API answers (shapes seen on Docker 20.10
with overlay2, Docker 28 with the containerd image store, podman 5's compatible API)."""

from __future__ import annotations

import pytest

from rocmforge.host import engineinfo, engines
from rocmforge.shared.errors import UserError


class FakeClient:
    def __init__(self, version: dict, info: dict):
        self._version, self._info = version, info

    def version(self):
        return self._version

    def info(self):
        return self._info


DOCKER20 = FakeClient(
    {
        "Version": "20.10.24+dfsg1",
        "ApiVersion": "1.41",
        "Components": [{"Name": "Engine", "Version": "20.10.24+dfsg1"}],
    },
    {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "extfs"]]},
)
DOCKER28_CONTAINERD = FakeClient(
    {"Version": "28.5.2+dfsg3", "ApiVersion": "1.51", "Components": [{"Name": "Engine"}, {"Name": "containerd"}]},
    {"Driver": "overlayfs", "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]},
)
PODMAN5 = FakeClient(
    {
        "Version": "5.8.6",
        "ApiVersion": "1.41",
        "Platform": {"Name": "linux/amd64/debian-unknown"},
        "Components": [{"Name": "Podman Engine", "Version": "5.8.6"}],
    },
    {"Driver": "overlay", "DriverStatus": [["Backing Filesystem", "extfs"]]},
)


@pytest.mark.parametrize(
    "client, store, shown",
    [
        (DOCKER20, engineinfo.GRAPHDRIVER, "Docker Engine 20.10.24+dfsg1 (API 1.41), overlay2"),
        (
            DOCKER28_CONTAINERD,
            engineinfo.CONTAINERD,
            "Docker Engine 28.5.2+dfsg3 (API 1.51), containerd image store (overlayfs)",
        ),
        (PODMAN5, engineinfo.PODMAN, "Podman Engine 5.8.6 (API 1.41), podman storage (overlay)"),
    ],
)
def test_each_engine_and_store_is_told_apart(client, store, shown):
    engine = engines.wrap(client).require()
    assert engine.store == store
    assert engine.describe() == shown


def test_too_old_an_api_is_refused_in_one_line_naming_the_engine():
    old = FakeClient({"Version": "19.03.15", "ApiVersion": "1.40"}, {"Driver": "overlay2"})
    with pytest.raises(UserError) as err:
        engines.wrap(old).require()
    assert str(err.value) == (
        "Docker Engine 19.03.15 (API 1.40), overlay2: rocmforge needs Docker Engine API 1.41 or newer"
    )


def test_an_unknown_store_is_refused_naming_what_works():
    odd = FakeClient({"Version": "28.0.0", "ApiVersion": "1.48"}, {"Driver": "windowsfilter"})
    with pytest.raises(UserError) as err:
        engines.wrap(odd).require()
    assert "unknown storage driver 'windowsfilter'" in str(err.value)
    assert "containerd image store" in str(err.value)


@pytest.mark.parametrize(
    "client, kind, by_manifest, added_only",
    [
        (DOCKER20, engines.GraphDriverEngine, False, True),
        (DOCKER28_CONTAINERD, engines.ContainerdEngine, True, True),
        (PODMAN5, engines.PodmanEngine, False, False),
    ],
)
def test_each_store_gets_its_own_engine_read_once(client, kind, by_manifest, added_only):
    client = FakeClient(client._version, dict(client._info))
    engine = engines.wrap(client)
    assert type(engine) is kind
    assert (engine.loads_by_manifest, engine.loads_added_layers_only) == (by_manifest, added_only)
    first = engine.described
    client._info = {"Driver": "vfs"}
    assert engine.described is first and engine.require() is first
