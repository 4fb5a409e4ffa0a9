"""The Dockerfile's trailing LABELs and the content-hash label run as one builder step: the image
is the one the Dockerfile gives when each LABEL is its own step, as a `docker build` by hand runs it."""

from __future__ import annotations

import uuid

import pytest
import yaml

from rocmforge.assemble import buildstream, engine
from rocmforge.assemble.image.normalise import normalise_image
from rocmforge.render.plan import load_plan
from rocmforge.workflow.pipeline import Pipeline
from rocmforge.workflow.project import Project
from tests.conftest import copy_project, run_cli

pytestmark = pytest.mark.docker

MARK = "COPY probes/ /opt/rocmforge/probes/"


def test_one_label_step_gives_the_image_of_one_step_per_label(docker_client, tmp_path):
    name = f"labels-{uuid.uuid4().hex[:8]}"
    matrix = copy_project(tmp_path)
    data = yaml.safe_load(matrix.read_text())
    data["targets"][name] = {
        "description": "a scratch target",
        "stack": "debian13-rocm5.7",
        "version": "1",
        "archs": ["gfx90a"],
        "source_date_epoch": 1764547200,
    }
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    tpl = tmp_path / "templates" / "Dockerfile.j2"
    tpl.write_text(
        tpl.read_text().replace(MARK, MARK + f"\n{{% if name == '{name}' %}}RUN echo {name} > /opt/x\n{{% endif %}}")
    )
    state = tmp_path / "state"
    tp = load_plan(matrix).targets[name]
    assert engine.merged_steps(tp) == 1
    by_hand = f"rocmforge-test-labels/{name}:by-hand"
    made: list[str] = []
    try:
        proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        log = (state / "logs" / f"{name}.log").read_text()
        label_steps = [line for line in log.splitlines() if line.startswith("Step ") and " : LABEL " in line]
        assert len(label_steps) == 1 and f'io.rocmforge.content-hash="{tp.content_hash}"' in label_steps[0], log
        ours = docker_client.images.get(tp.content_tag)
        assert ours.labels["io.rocmforge.content-hash"] == tp.content_hash
        assert ours.labels["io.rocmforge.target"] == name

        # the same context as the Dockerfile states it, each LABEL its own step, the content-hash
        # label given as rocmforge gave it before: normalised, the same image
        context = Pipeline(Project(matrix, state)).context(name)
        for chunk in docker_client.api.build(
            fileobj=buildstream.context_tar(context, None),
            custom_context=True,
            tag=by_hand,
            labels=engine.build_labels(tp),
            rm=True,
            decode=True,
        ):
            assert "error" not in chunk, chunk
            for line in chunk.get("stream", "").splitlines():
                if buildstream.STEP_IMAGE_RE.match(line):
                    made.append(line.split()[-1])
        raw = docker_client.api.history(by_hand)
        assert sum(" LABEL " in (h.get("CreatedBy") or "") for h in raw[:2]) == 2  # two steps on this side
        again = normalise_image(
            docker_client,
            by_hand,
            epoch=1764547200,
            tags=[],
            workdir=tmp_path / "work",
            base_ref=engine.final_base(docker_client, tp),
            steps=engine.history_steps(tp),
            log=lambda line: None,
        )
        assert again.image_id == ours.id
    finally:
        try:
            docker_client.images.remove(by_hand, force=True)
        except Exception:  # noqa: BLE001 - never tagged
            pass
        engine.discard(docker_client, made)
        run_cli("--matrix", str(matrix), "--state-dir", str(state), "clean", "--target", name)
