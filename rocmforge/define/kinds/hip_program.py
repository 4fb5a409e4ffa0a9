"""hip-program: one HIP source file under data/probes/, compiled with hipcc for the target's archs in a
builder stage; the image receives only the binary (data/templates/kinds/hip-program.j2)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from rocmforge.define.kinds.base import TargetUse, WithoutBuilderApt

if TYPE_CHECKING:
    from rocmforge.shared.yamlsrc import SourceMap


class HipProgram(WithoutBuilderApt):
    kind: Literal["hip-program"]
    program: str = Field(min_length=1)  # a file under data/probes/ (or the project's probes/)
    link: list[str] = Field(default_factory=list)

    def check_in_target(self, name: str, use: TargetUse, src: SourceMap) -> None:
        # A registry base (AMD's images) carries hipcc; a bootstrapped one compiles in a devel builder.
        if not (use.target.builder or use.stack.base.registry):
            raise src.error(
                ("targets", use.name, "components", use.index),
                f"component {name!r} compiles HIP code: the target needs a 'builder' devel target",
            )
