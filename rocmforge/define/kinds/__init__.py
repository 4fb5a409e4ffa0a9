"""Component kinds, the unit of design (as hpccm's building blocks): one module per kind, one
partial per kind under data/templates/kinds/. See base.py for what a kind provides."""

from __future__ import annotations

from typing import Annotated, get_args

from pydantic import Field

from rocmforge.define.kinds.base import (
    ComponentKind,
    ComponentLock,
    ComponentPlan,
    FetchItem,
    LockEntry,
    Strict,
    TargetUse,
)
from rocmforge.define.kinds.cmake_wheel import CmakeToolLock, CmakeWheel
from rocmforge.define.kinds.git_source import COMMIT_RE, GitSource, GitSourceFetch, GitSourceLock
from rocmforge.define.kinds.hip_program import HipProgram
from rocmforge.define.kinds.python_env import PythonEnv, PythonEnvLock, WheelsFetch
from rocmforge.define.kinds.settings import Settings

# The one registry of kinds. What matrix.yaml's `components` hold: the model is chosen by the `kind` field.
Component = Annotated[HipProgram | CmakeWheel | PythonEnv | Settings, Field(discriminator="kind")]

KINDS: tuple[type[ComponentKind], ...] = get_args(get_args(Component)[0])
KIND_NAMES = tuple(get_args(k.model_fields["kind"].annotation)[0] for k in KINDS)


def kinds_with_field(name: str) -> list[str]:
    """The kinds whose components take a field of this name (to say where a misplaced field belongs)."""
    return [kind_name for kind_name, k in zip(KIND_NAMES, KINDS) if name in k.model_fields and name != "kind"]


__all__ = [
    "COMMIT_RE",
    "KINDS",
    "KIND_NAMES",
    "CmakeToolLock",
    "CmakeWheel",
    "Component",
    "ComponentKind",
    "ComponentLock",
    "ComponentPlan",
    "FetchItem",
    "GitSource",
    "GitSourceFetch",
    "GitSourceLock",
    "HipProgram",
    "LockEntry",
    "PythonEnv",
    "PythonEnvLock",
    "Settings",
    "Strict",
    "TargetUse",
    "WheelsFetch",
    "kinds_with_field",
]
