"""A throw-away container is killed before it is removed: podman's forced removal stops it the
polite way (SIGTERM, then the 10 s stop timeout), and `sleep` as PID 1 ignores SIGTERM, so each
inventory or suite container cost 10 s there (measured: 10.2-11.5 s per removal, 0.3 s killed
first). Docker's forced removal kills at once either way."""

from __future__ import annotations

from types import SimpleNamespace

import docker.errors

from rocmforge.host.container import TrackedContainer
from rocmforge.host.enginebase import Engine


class Api:
    """docker-py's low-level API as the engine boundary calls it for one container."""

    def __init__(self, calls: list[str], running: bool = True):
        self.calls, self.running = calls, running

    def kill(self, container_id):
        self.calls.append("kill")
        if not self.running:
            raise docker.errors.APIError("409 Conflict: container is not running")
        self.running = False

    def remove_container(self, container_id, force=False):
        self.calls.append(f"remove(force={force}, running={self.running})")


def tracked(calls: list[str], running: bool = True) -> TrackedContainer:
    engine = Engine(SimpleNamespace(api=Api(calls, running)), None)  # type: ignore[arg-type]
    return TrackedContainer(client=engine, image="img", container_id="c" * 64)


def test_a_tracked_container_is_killed_then_removed():
    calls: list[str] = []
    tc = tracked(calls)
    tc.remove()
    assert calls == ["kill", "remove(force=True, running=False)"]
    assert tc.container_id is None


def test_a_container_that_already_ended_is_still_removed():
    calls: list[str] = []
    tracked(calls, running=False).remove()
    assert calls == ["kill", "remove(force=True, running=False)"]
