"""settings: files written from matrix.yaml (JSON or YAML) and copied into the image under
/opt/rocmforge/config (data/templates/kinds/settings.j2)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import Field

from rocmforge.define.kinds.base import ComponentLock, ComponentPlan, TargetUse, WithoutBuilderApt
from rocmforge.shared.errors import UserError

if TYPE_CHECKING:
    from rocmforge.shared.yamlsrc import SourceMap

SETTINGS_EXTS = (".json", ".yaml", ".yml")  # the formats settings_bytes can write


def settings_bytes(name: str, data: Any, where: str) -> bytes:
    """The file's bytes as its name's extension says: indented JSON, or YAML in the matrix's key order.
    Raises UserError at where for any other extension."""
    if name.endswith(".json"):
        return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()
    if name.endswith((".yaml", ".yml")):
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).encode()
    raise UserError(f"settings file {name!r} must end in {', '.join(SETTINGS_EXTS)}", field=where)


class Settings(WithoutBuilderApt):
    kind: Literal["settings"]
    files: dict[str, Any] = Field(min_length=1)  # file name → its content

    def check(self, name: str, src: SourceMap) -> None:
        for fname in self.files:
            if not fname.endswith(SETTINGS_EXTS):
                raise src.error(
                    ("components", name, "files", fname),
                    f"settings file {fname!r} must end in {', '.join(SETTINGS_EXTS)}",
                )

    def plan(self, name: str, locked: ComponentLock, use: TargetUse) -> ComponentPlan:
        folder = f"settings/{name}"
        return ComponentPlan(
            template_vars={"settings_dir": folder},
            files={
                f"{folder}/{fname}": settings_bytes(fname, data, f"components.{name}.files.{fname}")
                for fname, data in self.files.items()
            },
        )
