"""What one run of build.py works with: its arguments, the project, where it prints, its pipeline."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from rocmforge.host import aptmirror
from rocmforge.shared.errors import UserError
from rocmforge.workflow.pipeline import BuildOptions, Pipeline, Progress
from rocmforge.workflow.project import Project

if TYPE_CHECKING:
    import argparse


class Invocation:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.project = Project(Path(args.matrix), Path(args.state_dir) if args.state_dir else None)
        self.out = Console()
        self.progress = Progress(Console(stderr=True))
        aptmirror.from_env()  # a bad mirror setting is refused before anything runs

    @property
    def plan(self):
        return self.project.plan

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
        )
        return Pipeline(self.project, self.progress, options)
