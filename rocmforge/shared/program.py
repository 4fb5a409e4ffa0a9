"""The name rocmforge was started by: `rocmforge` (the installed console script) or `python build.py`
(a checkout). Help shows it and every hint that tells the user what to type
next names it, so a hint can be copied as it is whichever way the program was started."""

from __future__ import annotations

from pathlib import PurePath

# What a message names when nothing set it (a library caller, a test calling main() in-process).
_command = "python build.py"


def started_as(argv0: str) -> str:
    """Remember how the program was started, from sys.argv[0]; returns the name for its usage lines."""
    global _command
    name = PurePath(argv0).name
    if name == "build.py":
        _command, prog = "python build.py", "build.py"
    else:  # the console script, whatever folder or wrapper it sits in
        _command = prog = "rocmforge"
    return prog


def command(args: str) -> str:
    """The command line a hint shows: `rocmforge lock`, or `python build.py lock` in a checkout."""
    return f"{_command} {args}"
