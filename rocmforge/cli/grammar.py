"""The pieces the command line's grammar is made of: the function a subcommand runs (imported only
when it runs), the parser that reports a usage error in one line, and the options every command
takes (before or after its name)."""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass

from rocmforge.cli import help_text, helpformat

# What a shell completes a value with (shtab's FILE and DIRECTORY), written out so that building the
# grammar does not import shtab: only `completion` needs it.
FILE = {"bash": "_shtab_compgen_files", "zsh": "_files"}
DIR = {"bash": "_shtab_compgen_dirs", "zsh": "_files -/"}
PROGRESS = ("auto", "plain", "tty")


@dataclass(frozen=True)
class Command:
    """A subcommand's function, named here and imported when it runs: the command modules import
    every stage (pydantic, jinja2, the image codec: 0.6 s), which `--help` and a usage error skip."""

    module: str
    function: str

    def __call__(self, args: argparse.Namespace) -> int:
        invocation = importlib.import_module("rocmforge.cli.invocation")
        run = getattr(importlib.import_module(f"rocmforge.cli.{self.module}"), self.function)
        return run(invocation.Invocation(args))


def build(function: str) -> Command:
    """A subcommand of build_commands."""
    return Command("build_commands", function)


def project(function: str) -> Command:
    """A subcommand of project_commands."""
    return Command("project_commands", function)


def reader(function: str) -> Command:
    """A subcommand of reader_commands."""
    return Command("reader_commands", function)


def host(function: str) -> Command:
    """A subcommand of host_commands."""
    return Command("host_commands", function)


def release(function: str) -> Command:
    """A subcommand of release_commands."""
    return Command("release_commands", function)


MAIN_JOB = build("build_and_test")


class Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", helpformat.Formatter)  # the examples' lines, fitted to the terminal
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # one line, exit 2, like every other user error
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


class Version(argparse.Action):
    """--version: the commit is asked of git only when the version is asked for."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from rocmforge.cli import version  # git runs only for --version

        print(version.describe(parser.prog))  # on stdout, as argparse's own version action prints
        parser.exit(0)


def global_options(p: argparse.ArgumentParser, top: bool) -> None:
    """The options of every command, given before the command or after it: after it, a value left
    out must not reset one given before (SUPPRESS: the subcommand sets only what it was given)."""

    def default(value):
        return value if top else argparse.SUPPRESS

    if not top:
        p = p.add_argument_group("global options (before or after the command)")  # type: ignore[assignment]

    p.add_argument(
        "--matrix",
        default=default(None),
        metavar="FILE",
        help="the matrix file (default $ROCMFORGE_MATRIX, else matrix.yaml in this folder or the nearest above it)",
    ).complete = FILE  # type: ignore[attr-defined]
    p.add_argument(
        "--state-dir",
        default=default(None),
        metavar="DIR",
        help="logs, caches, manifests and suite results (default .rocmforge/ beside the matrix)",
    ).complete = DIR  # type: ignore[attr-defined]
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default(False),
        help="print only results and errors: no progress lines, notes or warnings",
    )
    p.add_argument(
        "--progress",
        choices=PROGRESS,
        default=default("auto"),
        help="how progress is shown on stderr: tty (a status line rewritten in place), plain (lines only, "
        "for logs and CI), auto (tty when stderr is a terminal; the default)",
    )


def command(sub: argparse._SubParsersAction, name: str, help: str) -> argparse.ArgumentParser:
    """A subcommand with its example and the global options."""
    p = sub.add_parser(name, help=help, description=help, epilog=help_text.example(name))
    global_options(p, top=False)
    return p


def json_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON on stdout")


def verbose_option(p: argparse.ArgumentParser, dest: str) -> None:
    """`test -v` and the bare `--target X -v` (a dest of each: a subcommand's default would undo the other)."""
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        dest=dest,
        help="below the suites table: each check's reason and figures",
    )


def builder_option(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """--builder: of a build, and of the builds verify-repro makes."""
    p.add_argument(
        "--builder",
        dest=f"{prefix}builder",
        default=None,
        metavar="auto|classic|buildkit",
        help="the engine's classic builder, or BuildKit through docker buildx (auto: BuildKit when buildx is "
        "found and the engine is Docker); either gives the same image ID (default $ROCMFORGE_BUILDER, else auto)",
    )


def build_options(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """Options of a build, accepted before the subcommand (for the bare --target) and after `build`."""
    p.add_argument(
        "--cache-registry",
        dest=f"{prefix}cache_registry",
        default=None,
        metavar="HOST[:PORT][/NS]",
        help="pull targets by content tag from this registry instead of building "
        "them, push what was built (default $ROCMFORGE_CACHE_REGISTRY; namespace rocmforge-cache)",
    )
    p.add_argument(
        "--cache-readonly",
        dest=f"{prefix}cache_readonly",
        action="store_true",
        help="only pull from the cache registry (pull requests)",
    )
    builder_option(p, prefix)
    p.add_argument(
        "--check-disk",
        dest=f"{prefix}check_disk",
        action="store_true",
        help="before each build, fail unless the engine has the disk the matrix says it needs (runner.disk_gb)",
    )


def target_option(p: argparse.ArgumentParser, required: bool = True, help: str = "a target of the matrix") -> None:
    p.add_argument("--target", required=required, dest="cmd_target", metavar="TARGET", help=help)


CA_BUNDLE_HELP = (
    "CA bundle for HTTPS behind a TLS-intercepting proxy "
    "(default: $PIP_CERT, $REQUESTS_CA_BUNDLE or $SSL_CERT_FILE); used only in builder stages"
)
