"""What one run of the program works with: its arguments, the project, where it prints, its pipeline."""

from __future__ import annotations

import os
import sys
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from rocmforge.host import aptmirror, debproxy
from rocmforge.shared.errors import UserError
from rocmforge.workflow.pipeline import BuildOptions, Pipeline, Progress
from rocmforge.workflow.project import Project

if TYPE_CHECKING:
    import argparse

MATRIX_ENV = "ROCMFORGE_MATRIX"
MATRIX_NAME = "matrix.yaml"


def find_matrix(given: str | None, cwd: Path | None = None) -> Path | None:
    """The matrix a command reads: --matrix, else $ROCMFORGE_MATRIX, else matrix.yaml in the current
    folder or the nearest folder above it (as git finds .git). None when there is none."""
    if given:
        return Path(given)
    if os.environ.get(MATRIX_ENV):
        return Path(os.environ[MATRIX_ENV])
    here = Path.cwd() if cwd is None else cwd
    if (here / MATRIX_NAME).is_file():
        return Path(MATRIX_NAME)  # shown as the user would write it
    for folder in here.resolve().parents:
        if (folder / MATRIX_NAME).is_file():
            return folder / MATRIX_NAME
    return None


def progress_console(mode: str, quiet: bool) -> Console:
    """Where progress goes (stderr): tty rewrites a status line in place, plain prints lines only."""
    if mode == "tty":
        return Console(stderr=True, quiet=quiet, force_terminal=True, force_interactive=True)
    if mode == "plain":
        return Console(stderr=True, quiet=quiet, force_terminal=False, force_interactive=False)
    return Console(stderr=True, quiet=quiet)


class Invocation:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Console()
        quiet = bool(getattr(args, "quiet", False))
        mode = getattr(args, "progress", "auto")
        self.progress = Progress(progress_console(mode, quiet), plain=mode == "plain")
        self.quiet = quiet
        aptmirror.from_env()  # a bad mirror setting is refused before anything runs
        debproxy.enabled()  # and so is a bad .deb cache setting

    @cached_property
    def matrix_path(self) -> Path | None:
        return find_matrix(getattr(self.args, "matrix", None))

    @cached_property
    def project(self) -> Project:
        """The checkout the matrix is in; a command that needs it, with none found, is refused here."""
        if self.matrix_path is None:
            raise UserError(
                f"no {MATRIX_NAME} in {Path.cwd()} or any folder above it: give --matrix FILE or set ${MATRIX_ENV}",
                field=f"{self.args.command or '--target'}",
            )
        state_dir = getattr(self.args, "state_dir", None)
        return Project(self.matrix_path, Path(state_dir) if state_dir else None)

    @property
    def plan(self):
        return self.project.plan

    @property
    def plan_if_any(self):
        """The plan when a matrix was given or found; None for a command that can do without one."""
        return self.plan if self.matrix_path is not None else None

    def note(self, text: str) -> None:
        """A line for the user on stderr that is neither a result nor an error (--quiet drops it)."""
        if not self.quiet:
            print(text, file=sys.stderr)

    def option(self, name: str):
        """A build option given after `build` or before the subcommand (for the bare --target)."""
        return getattr(self.args, f"build_{name}", None) or getattr(self.args, name, None)

    def target_name(self) -> str | None:
        """The --target given, if any."""
        return getattr(self.args, "cmd_target", None) or self.args.target

    def required_target(self) -> str:
        """The --target of a command whose grammar requires one."""
        name = self.target_name()
        if name is None:  # the parser refuses it first; said here too for a caller that skips it
            raise UserError("give --target TARGET", field="--target")
        return name

    @cached_property
    def pipeline(self) -> Pipeline:
        options = BuildOptions(
            ca_bundle=self.option("ca_bundle"),
            cache_registry=self.option("cache_registry"),
            cache_readonly=bool(self.option("cache_readonly")),
            check_disk=bool(self.option("check_disk")),
            builder=self.option("builder"),
        )
        return Pipeline(self.project, self.progress, options)
