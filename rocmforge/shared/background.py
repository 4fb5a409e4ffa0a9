"""Work started early in a daemon thread, for the time the main thread waits on the engine. A
daemon: a command that fails first never waits for it."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Background(Generic[T]):
    """fn() running beside the caller; result() waits for it and returns or raises what it did."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._fn = fn
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"background-{fn.__name__}")
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as exc:  # handed to whoever asks for the result
            self._error = exc

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def preload(*modules: str) -> None:
    """Imports modules in the background (imports are CPU work the GIL lets run while the main
    thread waits on a socket); whoever imports one later waits for it, as imports do. A module
    that fails to import fails again, with its error, where it is really imported."""

    def load() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:
                pass

    threading.Thread(target=load, daemon=True, name="preload").start()
