"""Every way a command is stopped runs the clean-up Ctrl-C runs: a real process running main() with
a command that waits in a try/finally, stopped by SIGINT, SIGTERM and SIGHUP, started with SIGINT
ignored as a background job of a non-interactive shell starts it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, interruptible

# The command `list` replaced by one that reports ready, waits, and marks its clean-up.
PROGRAM = """
import subprocess, sys, time
from pathlib import Path
from rocmforge import cli
import rocmforge.cli.project_commands

marker, mode = Path(sys.argv[1]), sys.argv[2]

def waiting(inv):
    try:
        if mode == "child":     # what a process rocmforge starts inherits
            sys.stdout.write(subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True).stdout)
        print("ready", flush=True)
        # Short sleeps, not one of 60 s: CPython runs a handler between bytecodes, so a signal
        # that lands after the last check and before the sleep's syscall starts (a loaded machine
        # preempts the command just there) would wait the whole sleep out.
        for _ in range(600):
            time.sleep(0.1)
    finally:
        if mode == "slow":      # a clean-up that takes a while, as removing images does
            time.sleep(1.5)
        marker.write_text("cleaned up")

cli.project_commands.list_targets = waiting
sys.exit(cli.main(["--matrix", sys.argv[3], "list"]))
"""


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def started(tmp_path: Path, mode: str = "plain", preexec=None) -> tuple[subprocess.Popen, Path, list[str]]:
    """The command, started with the signals at their defaults (whatever the launcher of the tests
    ignores, e.g. SIGHUP under nohup), then with what the test itself sets up."""

    def setup() -> None:
        interruptible()
        if preexec is not None:
            preexec()

    marker = tmp_path / "marker"
    proc = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, str(marker), mode, str(ROOT / "matrix.yaml")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=setup,
    )
    lines = []
    while True:
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"the command ended before it was ready: {proc.communicate()}")
        if line == "ready\n":
            return proc, marker, lines
        lines.append(line)


def finished(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, err


@pytest.mark.parametrize(
    "sig, code, message",
    [
        (signal.SIGINT, 130, "interrupted"),
        (signal.SIGTERM, 143, "interrupted by SIGTERM"),
        (signal.SIGHUP, 129, "interrupted by SIGHUP"),
    ],
)
def test_each_signal_runs_the_clean_up_and_exits_with_its_code(tmp_path, sig, code, message):
    proc, marker, _ = started(tmp_path)
    proc.send_signal(sig)
    rc, err = finished(proc)
    assert (rc, err) == (code, message + "\n")
    assert marker.read_text() == "cleaned up"


def test_ctrl_c_reaches_a_process_started_with_sigint_ignored(tmp_path):
    """A background job of a non-interactive shell starts with SIGINT ignored; Python keeps that."""
    proc, marker, _ = started(tmp_path, preexec=ignore_sigint)
    proc.send_signal(signal.SIGINT)
    rc, err = finished(proc)
    assert (rc, err) == (130, "interrupted\n")
    assert marker.read_text() == "cleaned up"


def test_a_second_term_does_not_cut_the_clean_up_short(tmp_path):
    """GitHub's runner sends INT, then TERM 7.5 s later; systemd and `docker stop` may repeat TERM."""
    proc, marker, _ = started(tmp_path, "slow")
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)  # in the clean-up's sleep now
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGHUP)
    rc, err = finished(proc)
    assert (rc, err) == (130, "interrupted\n")
    assert marker.read_text() == "cleaned up"


def test_a_nohup_stays_a_nohup(tmp_path):
    proc, marker, _ = started(tmp_path, preexec=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert proc.poll() is None and not marker.exists()
    proc.send_signal(signal.SIGTERM)
    assert finished(proc)[0] == 143 and marker.exists()


def test_processes_it_starts_get_default_signal_actions(tmp_path):
    """Even when it was started with SIGINT ignored: its children can be stopped as it can."""
    proc, _, lines = started(tmp_path, "child", preexec=ignore_sigint)
    proc.send_signal(signal.SIGTERM)
    assert finished(proc)[0] == 143
    ignored = int(next(line for line in lines if line.startswith("SigIgn:")).split()[1], 16)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        assert not ignored & (1 << (sig - 1)), sig.name


def test_run_passes_term_on_to_the_docker_cli(tmp_path):
    """`build.py run`'s docker CLI gets the TERM (it hands it to the container) instead of a kill."""
    from rocmforge.cli import signals

    got = tmp_path / "got"
    # The TERM comes once the command's own handler is in place (from the command itself: a timer
    # would race its start-up on a loaded machine); it waits in short sleeps, as PROGRAM does.
    child = (
        "import os, signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *a: (open({str(got)!r}, 'w').write('TERM'), sys.exit(7)))\n"
        f"os.kill(os.getppid(), {int(signal.SIGTERM)})\n"
        "for _ in range(600):\n    time.sleep(0.1)\n"
    )
    before = signal.getsignal(signal.SIGTERM)
    with signals.handled():
        assert signals.run_passing_on([sys.executable, "-c", child]) == 7
    assert got.read_text() == "TERM"
    assert signal.getsignal(signal.SIGTERM) == before  # put back after the command


def test_sources_unpack_without_a_shell_between(tmp_path):
    """`git archive | tar` as two processes of ours (a killed shell would leave both running)."""
    from rocmforge.host import fetch

    repo = tmp_path / "repo"
    run = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
    repo.mkdir()
    run("init", "-q")
    (repo / "a.txt").write_text("one\n")
    run("add", "a.txt")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    commit = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    out = tmp_path / "out"
    out.mkdir()
    fetch._unpack(repo, commit, out)
    assert (out / "a.txt").read_text() == "one\n"
    with pytest.raises(subprocess.CalledProcessError):
        fetch._unpack(repo, "0" * 40, tmp_path)


def _ended(pid: int, grace: float = 5.0) -> bool:
    """The process is gone, or a zombie its new parent has yet to reap."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.1)
    return False


def test_a_stopped_bootstrap_ends_what_debootstrap_started(tmp_path):
    """debootstrap's own children (wget, dpkg-deb, tar) are killed with it, not only debootstrap."""
    from rocmforge.cli import signals
    from rocmforge.resolve import bootstrap

    pidfile = tmp_path / "pid"

    def stop(signum, frame):
        raise signals.Stopped(signal.SIGTERM)

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        with pytest.raises(signals.Stopped):
            bootstrap._run_as_one(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert _ended(int(pidfile.read_text()))
