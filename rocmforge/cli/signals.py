"""Every way a command is stopped ends the same way: SIGTERM (a CI job cancelled, `timeout`,
`docker stop`, systemd) and SIGHUP (the terminal gone) raise what Ctrl-C raises, a
KeyboardInterrupt, so that each clean-up written for Ctrl-C (`except KeyboardInterrupt`,
`except BaseException`, `finally`) runs for them too: no raw tag, step image, container,
half-written record or held engine lock is left. The exit code says which signal: 128 + its number."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
from types import FrameType

STOPPING = (signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """A KeyboardInterrupt that knows the signal behind it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def message(self) -> str:
        return "interrupted" if self.signum == signal.SIGINT else f"interrupted by {signal.Signals(self.signum).name}"


def stopped(exc: KeyboardInterrupt) -> Stopped:
    """The signal behind an interrupt: a plain KeyboardInterrupt is Ctrl-C."""
    return exc if isinstance(exc, Stopped) else Stopped(signal.SIGINT)


class _Handlers:
    def __init__(self) -> None:
        self.first: int | None = None

    def interrupt(self, signum: int, frame: FrameType | None) -> None:
        # A second Ctrl-C still stops the clean-up at once: the person at the terminal asks for it.
        self.first = self.first or signum
        raise Stopped(signum)

    def stop(self, signum: int, frame: FrameType | None) -> None:
        if self.first is not None:
            # A supervisor's repeated TERM, or GitHub's runner's TERM 7.5 s after its INT, would
            # otherwise cut short the clean-up the first signal started; SIGKILL still ends us.
            return
        self.first = signum
        raise Stopped(signum)


@contextlib.contextmanager
def handled():
    """For the length of a command: TERM and HUP stop it as Ctrl-C does; the previous handlers
    come back after (main() is called in-process by tests too)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers, and only it gets signals
        return
    handlers = _Handlers()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, *STOPPING)}
    # SIGINT is restored even when inherited as ignored: a shell without job control (a script's
    # background job, as some CI launchers start commands) ignores it in its children, and Python
    # keeps that, so Ctrl-C and a launcher's cancel by SIGINT would never reach the clean-up.
    signal.signal(signal.SIGINT, handlers.interrupt)
    for sig in STOPPING:
        # An ignored HUP or TERM was asked for (`nohup` exists for exactly that): it stays ignored.
        if previous[sig] is not signal.SIG_IGN:
            signal.signal(sig, handlers.stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def run_passing_on(argv: list[str]) -> int:
    """Runs a command that stands for this one (`build.py run`'s `docker run`) and passes a TERM or
    HUP on to it: killing the docker CLI would leave its container running, while the CLI passes the
    signal on to the container. Ctrl-C reaches it from the terminal already and ends it as before."""
    with subprocess.Popen(argv) as proc:
        while True:
            try:
                return _wait(proc)
            except Stopped as stop:
                if stop.signum == signal.SIGINT:
                    proc.kill()
                    raise
                proc.send_signal(stop.signum)


def _wait(proc: subprocess.Popen) -> int:
    """proc.wait() in polls (at most 50 ms apart, Popen's own) instead of one blocking waitpid():
    CPython runs a signal's handler between bytecodes, so a TERM that lands just before waitpid()
    starts would be acted on, and passed on, only once the command had ended by itself."""
    while True:
        try:
            return proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            continue
