"""An engine as the tests hold it: what rocmforge is given (an Engine, host/enginebase.py), through
which a test may also look at the engine itself with docker-py (its `api`, `images`, `containers`),
as an observer independent of the code under test."""

from __future__ import annotations

from rocmforge.host import engines


class ObservedEngine:
    def __init__(self, engine: engines.Engine):
        self.__dict__["engine"] = engine

    def __getattr__(self, name: str):
        try:
            return getattr(self.engine, name)
        except AttributeError:
            return getattr(self.engine.docker, name)


def connect(timeout: int = 600, base_url: str | None = None) -> ObservedEngine:
    """The engine of DOCKER_HOST (or base_url), whatever rocmforge thinks of it."""
    return ObservedEngine(engines.connect(timeout, base_url=base_url, check=False))
