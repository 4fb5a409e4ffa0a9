"""Where a command reports while it works (stderr): a status line rewritten in place on a terminal,
and lines that stay. Where stderr is no terminal the status line is not shown at all, unless
plain (--progress plain) asks for each status printed once, as a line, for a log to show."""

from __future__ import annotations

import contextlib

from rich.console import Console


class _PlainStatus:
    """A status that is not redrawn: its updates (every build step) would flood a log."""

    def update(self, *args, **kwargs) -> None:
        pass


class Progress:
    def __init__(self, console: Console | None = None, plain: bool = False) -> None:
        if console is None:
            console = Console(stderr=True, quiet=True)
        self.console = console
        self.plain = plain

    def status(self, text: str):
        if not self.plain:
            return self.console.status(text)
        self.line(text + " ...", markup=False)
        return contextlib.nullcontext(_PlainStatus())

    def line(self, text: str, markup: bool = True) -> None:
        self.console.print(text, soft_wrap=True, highlight=False, markup=markup)

    def warn(self, message: str) -> None:
        self.line(f"[yellow]warning:[/yellow] {message}")
