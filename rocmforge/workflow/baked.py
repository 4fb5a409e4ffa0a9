"""`normalise --target KEY`: an image built elsewhere from rocmforge's bake file (render.bake: the
target's context, the committed Dockerfile, the content-hash label given to bake) becomes the image
rocmforge's own build gives, tagged as a build tags it.

A bake build records the label it is given with no history entry, where rocmforge's build records a
LABEL step for it: the image's last entry (the Dockerfile's last LABEL, which every rendered
Dockerfile ends with) then stands for that step too, and the history is spelled as the steps it
stands for (config.normalise_config's `merged`). An image that records the label as a step of its
own (a `docker build --label`) needs nothing added."""

from __future__ import annotations

from dataclasses import dataclass

from rocmforge.assemble import engine, image
from rocmforge.host.enginebase import EngineError
from rocmforge.host.engines import Engine
from rocmforge.render import bake
from rocmforge.render.plan import TargetPlan
from rocmforge.shared.errors import BuildError, UserError
from rocmforge.shared.statedir import StateDir
from rocmforge.verify.outside import check as outside
from rocmforge.workflow.pipeline import Pipeline


@dataclass(frozen=True)
class Normalised:
    image_id: str
    source: str  # the image normalised
    pulled: bool  # fetched from a registry first


def label_steps(client: Engine, tp: TargetPlan, ref: str) -> int:
    """How many steps the image's last history entry stands for besides its own (0 or 1), after
    checking that the image is the bake target's build of tp's current context."""
    given = client.labels(ref).get(bake.HASH_LABEL)
    if given != tp.content_hash:
        raise UserError(
            f"{ref} is not a build of {tp.key}'s current context: its {bake.HASH_LABEL} label is "
            f"{given or 'missing'}, the matrix gives {tp.content_hash[:12]}…; write the context again "
            f"(`context --target {tp.key}`), bake it with images/docker-bake.json as rendered now, then normalise",
            field="--image",
        )
    newest = (client.history(ref) or [{}])[0]
    created_by = str(newest.get("CreatedBy") or "")
    if bake.HASH_LABEL in created_by:
        return 0  # the label was a step of its own
    if "LABEL" in created_by and not newest.get("Size"):
        return 1  # bake: the last LABEL entry stands for the content-hash label too
    raise UserError(
        f"{ref}'s last step is not the Dockerfile's last LABEL ({created_by[:80]!r}): it was not built "
        f"from {tp.key}'s rendered Dockerfile",
        field="--image",
    )


def _present(client: Engine, ref: str, given: bool) -> bool:
    """Whether ref had to be pulled: an image the engine lacks is pulled when --image names it."""
    if client.find(ref) is not None:
        return False
    if not given:
        raise UserError(
            f"no image {ref} on the engine: build it first, from the project's folder, with "
            f"`docker buildx bake --file images/{bake.FILE} KEY` (a builder elsewhere: push it and give --image)",
            field="--target",
        )
    repository, sep, reference = ref.partition("@")
    if not sep:
        head, colon, tail = ref.rpartition(":")
        repository, reference = (head, tail) if colon and "/" not in tail else (ref, "latest")
    try:
        for chunk in client.pull(repository, reference):
            if "error" in chunk:
                raise UserError(f"cannot pull {ref}: {chunk['error']}", field="--image")
    except EngineError as exc:
        raise UserError(f"cannot pull {ref}: {exc}", field="--image") from None
    return True


def normalise(pipe: Pipeline, client: Engine, tp: TargetPlan, ref: str | None) -> Normalised:
    """tp's image from ref (default: where the bake file tags it), normalised and tagged with tp's
    content and readable tags; its manifest and SBOM written as after a build. The bake file's own
    tag is removed once its image is normalised; an image given by --image is left as it is."""
    source = ref or bake.tag(tp)
    pulled = _present(client, source, given=ref is not None)
    merged = label_steps(client, tp, source)
    base = engine.final_base(client, tp)
    if base is None or client.find(base) is None:
        raise BuildError(f"{tp.key} starts FROM {tp.final_from}, which is not on this engine: build it first")
    state = StateDir(pipe.project.state)
    done = image.normalise_image(
        client,
        source,
        epoch=pipe.plan.matrix.targets[tp.name].source_date_epoch,
        tags=[tp.content_tag, tp.readable_tag],
        workdir=state.work,
        log=pipe.project.log(tp.key),
        base_ref=base,
        steps=engine.history_steps(tp),
        merged=merged,
    )
    outside.record_stage_outputs(client, tp, tp.content_tag, replace=True)
    pipe.write_manifest(client, tp, done.image_id)
    if ref is None:
        client.untag(source)
    return Normalised(done.image_id, source, pulled)
