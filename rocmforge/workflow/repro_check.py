"""`verify-repro`: build a target twice without cache, a second apart, and compare the image IDs; or,
with `against_built`, rebuild it once without cache and compare with the image already built for
it (a rebuilder's check of an image one has: half the builds)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rocmforge.assemble import engine, image
from rocmforge.host.enginebase import EngineError
from rocmforge.host.engines import Engine
from rocmforge.release import matrix_report as reports
from rocmforge.render.plan import TargetPlan
from rocmforge.shared import program
from rocmforge.shared.errors import UserError
from rocmforge.workflow.pipeline import Pipeline

RUNS = ("a", "b")


@dataclass
class ReproReport:
    target: str
    image_ids: list[str] = field(default_factory=list)
    timings: list[dict] = field(default_factory=list)
    difference: dict | None = None
    explanation: str | None = None
    variants: list[ReproReport] = field(default_factory=list)
    against: str = "rebuilt"  # what the first ID is: a second no-cache build, or the image already built

    @property
    def identical(self) -> bool:
        return self.difference is None and all(v.identical for v in self.variants)

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "identical": self.identical,
            "image_ids": self.image_ids,
            "against": self.against,
            "timings": self.timings,
            "difference": self.difference,
            "explanation": self.explanation,
            **({"variants": [v.to_json() for v in self.variants]} if self.variants else {}),
        }


def verify_repro(pipe: Pipeline, name: str, *, against_built: bool = False) -> ReproReport:
    """The target's main image, then each of its variants: the report is the main image's, with
    its variants' reports in `variants`, and identical only when every one is. With against_built,
    each is built once and compared with the image its content tag names (a UserError, before any
    build, when one is not built)."""
    project = pipe.project
    project.target(name)
    project.writable_state()
    tp = project.buildable_target(name)  # before its prerequisites are built
    pipe.check_ca()  # so is a bad CA bundle
    pipe.chosen  # noqa: B018 (and a bad --builder, before the engine is reached)
    for dep in pipe.plan.order([name])[:-1]:  # prerequisites are inputs: built (or up to date) once, as usual
        pipe.build(dep)
    client = engine.connect()
    pipe.chosen.on(client)  # a builder this engine cannot run is refused before any build
    variants = list(pipe.plan.variants.get(name, ()))
    if against_built:
        _require_built(client, [tp, *variants])
    pipe.ensure_base(client, tp)  # an engine that never built on this base has none yet
    result = _twice(pipe, client, tp, against_built)
    result.variants = [_twice(pipe, client, v, against_built) for v in variants]
    reports.save_check(project.state, f"repro-{name}", result.to_json())
    return result


def _require_built(client: Engine, plans: list[TargetPlan]) -> None:
    missing = [tp.content_tag for tp in plans if engine.image_id(client, tp.content_tag) is None]
    if missing:
        build = program.command("build --target " + plans[0].key)
        raise UserError(
            f"nothing built to compare with ({', '.join(missing)} not found); run `{build}` first, "
            "or leave out --against-built to build twice",
            field="--against-built",
        )


def _twice(pipe: Pipeline, client: Engine, tp: TargetPlan, against_built: bool = False) -> ReproReport:
    name = tp.key
    result = ReproReport(name, against="built" if against_built else "rebuilt")
    if against_built:
        built_id = engine.image_id(client, tp.content_tag)
        assert built_id is not None  # _require_built
        result.image_ids.append(built_id)
    runs = RUNS[1:] if against_built else RUNS
    try:
        for run in runs:
            tag = engine.repro_tag(name, run)
            with pipe.progress.status(f"verify-repro {name}: build {run} (no cache)") as status:
                built = pipe.build_image(
                    client,
                    tp,
                    tags=[tag],
                    status=status,
                    raw_tag=tag + "-raw",
                    log_name=f"{name}.repro-{run}",
                    nocache=True,
                )
                pipe.discard_raw(client, tag + "-raw", built.made)
            result.image_ids.append(built.image_id)
            result.timings.append({"build_s": built.build_s, "normalise_s": built.normalise_s})
            pipe.progress.line(
                f"{name} build {run}: {built.image_id[7:19]} (build {built.build_s} s, normalise {built.normalise_s} s)"
            )
            if run == RUNS[0]:
                time.sleep(1.5)  # the second build starts at a different second
        a, b = result.image_ids
        if a != b:
            # by tag: the containerd store does not know an image by its config digest
            first = tp.content_tag if against_built else engine.repro_tag(name, RUNS[0])
            result.difference = image.diff_images(client, first, engine.repro_tag(name, RUNS[1]))
            result.explanation = image.describe_difference(result.difference)
    finally:
        for run in RUNS:
            for suffix in ("", "-raw"):
                try:
                    client.remove_image(engine.repro_tag(name, run) + suffix, force=True)
                except EngineError:  # not created or already removed
                    pass
    return result
