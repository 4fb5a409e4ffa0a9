"""An exec whose answer comes back empty is asked once more on an engine that can lose a finished
exec's output (podman's compatible API: containers/podman-py#506), and only there: on Docker an
empty answer is the command's own."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rocmforge.host.container import TrackedContainer
from rocmforge.host.enginebase import Engine


class Api:
    def __init__(self, answers: list[tuple[bytes | None, bytes | None]], rc: int = 0):
        self.answers, self.rc, self.started = list(answers), rc, 0

    def exec_create(self, container_id, argv, environment=None, stdout=True, stderr=True):
        return {"Id": f"exec-{self.started}"}

    def exec_start(self, exec_id, demux=True):
        self.started += 1
        return self.answers.pop(0)

    def exec_inspect(self, exec_id):
        return {"ExitCode": self.rc}


def tracked(api: Api, lossy: bool) -> TrackedContainer:
    engine = Engine(SimpleNamespace(api=api), None)  # type: ignore[arg-type]  # the boundary's own exec_in
    engine.exec_output_may_be_lost = lossy
    return TrackedContainer(client=engine, image="img", container_id="c" * 64)


def test_an_empty_answer_is_asked_again_where_output_can_be_lost():
    api = Api([(None, None), (b"dpkg 1.22\n", None)])
    assert tracked(api, lossy=True).exec(["dpkg-query", "-W"]).stdout == "dpkg 1.22\n"
    assert api.started == 2


@pytest.mark.parametrize(
    ("lossy", "answers", "rc"),
    [
        (False, [(None, None)], 0),  # Docker: empty is the command's answer
        (True, [(b"x\n", None)], 0),  # an answer came
        (True, [(None, b"warning\n")], 0),  # on stderr
        (True, [(None, None)], 1),  # a failure is its own answer
    ],
)
def test_otherwise_one_exec(lossy, answers, rc):
    api = Api(answers, rc)
    tracked(api, lossy).exec(["true"])
    assert api.started == 1
