"""`completion bash|zsh`: a completion script for the shell, written by shtab from the grammar
itself, so every command and option the parser knows completes (and nothing it does not)."""

from __future__ import annotations

import shtab

from rocmforge.cli.invocation import Invocation
from rocmforge.cli.parser import build_parser


def completion(inv: Invocation) -> int:
    print(shtab.complete(build_parser(inv.args.prog), shell=inv.args.shell))
    return 0
