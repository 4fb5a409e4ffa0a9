"""Command line: `rocmforge [--matrix M] COMMAND ...` (or `python build.py ...` in a checkout);
`rocmforge --target X` builds then tests.

The CLI parses, calls and prints: builds go through rocmforge.workflow.pipeline, each command is a
function in build_commands, project_commands, reader_commands, host_commands or release_commands,
and parser.py names the function of each subcommand."""

from __future__ import annotations

import sys

from rocmforge.cli import results, signals
from rocmforge.cli.parser import MAIN_JOB, build_parser
from rocmforge.host import engine_errors
from rocmforge.shared import program
from rocmforge.shared.errors import MACHINE_ERRNOS, BuildError, UserError


def os_error_exit(exc: OSError) -> tuple[int, str]:
    """The last resort for an OSError no check foresaw: one line naming the path and the reason
    (printed), and the exit code with that line."""
    where = exc.filename if exc.filename is not None else ""
    if exc.filename2 is not None:
        where = f"{where} -> {exc.filename2}"
    reason = exc.strerror or str(exc) or type(exc).__name__
    line = f"{where}: {reason}" if where else reason
    line = " ".join(line.split())
    print("error: " + line, file=sys.stderr)
    return (1 if exc.errno in MACHINE_ERRNOS or exc.filename is None else 2), line


def main(argv: list[str] | None = None, argv0: str = "build.py") -> int:
    """The command line (build.py, `rocmforge`): the exit code; a user's error is one line and exit 2.
    argv0: how the program was started, for its name in help and hints; without argv, sys.argv's."""
    if argv is None:
        argv, argv0 = sys.argv[1:], sys.argv[0]
    prog = program.started_as(argv0)
    with signals.handled():
        try:
            return _main(argv, prog)
        except KeyboardInterrupt as exc:  # Ctrl-C, and SIGTERM and SIGHUP as signals.py raises them
            stop = signals.stopped(exc)
            print(stop.message, file=sys.stderr)
            return stop.exit_code


def _main(argv: list[str], prog: str) -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.run == MAIN_JOB and not args.target:
        if argv:  # options without a command: a usage error like any other incomplete line
            parser.error("give a COMMAND or --target TARGET")
        parser.print_help()  # a bare `rocmforge`: what it can do is the answer, not an error
        return 0
    try:
        return args.run(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        results.failed(args, str(exc))
        return 1
    except BrokenPipeError:  # `build.py list --json | head`: the reader left; not an error of ours
        sys.stderr.close()
        return 0
    except OSError as exc:  # requests' and most of docker's errors are OSErrors too
        code, line = os_error_exit(exc)
        if code == 1:  # the machine's failure, not the input's: --json still gets its result object
            results.failed(args, line)
        return code
    except Exception as exc:
        if not type(exc).__module__.startswith("docker."):
            raise  # a bug of ours: the traceback is what a report needs
        message = f"Docker engine at {engine_errors.where()}: {engine_errors.refused(exc)}"
        print(f"error: {message}", file=sys.stderr)
        results.failed(args, message)
        return 1
