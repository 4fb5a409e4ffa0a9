"""A throw-away container is killed before it is removed: podman's forced removal stops it the
polite way (SIGTERM, then the 10 s stop timeout), and `sleep` as PID 1 ignores SIGTERM, so each
inventory or suite container cost 10 s there (measured: 10.2-11.5 s per removal, 0.3 s killed
first). Docker's forced removal kills at once either way."""

from __future__ import annotations

from rocmforge.host.container import TrackedContainer


class Container:
    def __init__(self, calls: list[str], running: bool = True):
        self.calls, self.running = calls, running
        self.id = "c" * 64

    def kill(self):
        self.calls.append("kill")
        if not self.running:
            raise RuntimeError("409 Conflict: container is not running")
        self.running = False

    def remove(self, force=False):
        self.calls.append(f"remove(force={force}, running={self.running})")


def test_a_tracked_container_is_killed_then_removed():
    calls: list[str] = []
    tc = TrackedContainer(client=None, image="img", container=Container(calls))
    tc.remove()
    assert calls == ["kill", "remove(force=True, running=False)"]
    assert tc.container is None


def test_a_container_that_already_ended_is_still_removed():
    calls: list[str] = []
    TrackedContainer(client=None, image="img", container=Container(calls, running=False)).remove()
    assert calls == ["kill", "remove(force=True, running=False)"]
