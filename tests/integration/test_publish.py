"""push/pull against a real registry (Debian's docker-registry on a private 127.0.0.1 port) with
small synthetic images: only images whose exact ID passed are published, and a pull checks it gets
back exactly what was published."""

from __future__ import annotations

import io
import json
import tarfile
import urllib.request
import uuid
from dataclasses import asdict
from pathlib import Path

import pytest

from rocmforge.assemble import engine
from rocmforge.host import registry as reg
from rocmforge.release import imageindex, publish, pulling
from rocmforge.render.plan import BuildPlan, TargetPlan, content_hash
from rocmforge.shared.errors import BuildError, UserError
from rocmforge.verify import suites as suite_runs
from tests.local_registry import free_port

pytestmark = pytest.mark.docker

STACK = "teststack"
BASE_REPO = "rocmforge/base-debian13-rocm5.7"
RUN = uuid.uuid4().hex[:8]  # every name these tests create contains it, for the clean-up


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


# -- synthetic images -----------------------------------------------------------------------------
class Forge:
    """Builds tiny labelled images and fake plans; removes every image it or a push/pull made."""

    def __init__(self, client) -> None:
        self.client = client
        self.ids: set[str] = set()
        bases = [t for img in client.images.list(name=BASE_REPO) for t in img.tags]
        # The real base shares its layers with the real targets, as a published image would; a
        # clean engine without it still gets a meaningful (if smaller) image from scratch.
        self.base = sorted(bases)[0] if bases else "scratch"

    def target(self, kind: str, archs: tuple[str, ...] = ("gfx1100",), variant: tuple[str, ...] = ()) -> TargetPlan:
        name = f"rfpub-{RUN}-{kind}"
        files = {"Dockerfile": f"# {name} {variant}\n".encode()}
        return TargetPlan(
            name=name,
            stack=STACK,
            archs=variant or archs,
            deps=(),
            files=files,
            content_hash=content_hash(files),
            labels={},
            unresolved=(),
            bootstrap_stack=None,
            variant=variant,
        )

    def build(self, tp: TargetPlan, nonce: str = "", tag: bool = True) -> str:
        """An image carrying tp's labels; tag=True tags it as tp's content and readable tags (a build)."""
        dockerfile = f"FROM {self.base}\nCOPY marker /rocmforge-test-marker\n".encode()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, data in (("Dockerfile", dockerfile), ("marker", f"{tp.name} {nonce} {uuid.uuid4()}".encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        buf.seek(0)
        labels = {
            "io.rocmforge.target": tp.name,
            "io.rocmforge.content-hash": tp.content_hash,
            "io.rocmforge.stack": tp.stack,
            "org.opencontainers.image.title": tp.name,
            "io.rocmforge.archs": ",".join(tp.archs),
        }
        image_id = None
        for chunk in self.client.api.build(
            fileobj=buf, custom_context=True, labels=labels, rm=True, forcerm=True, pull=False, decode=True
        ):
            assert "error" not in chunk, chunk
            image_id = (chunk.get("aux") or {}).get("ID") or image_id
        assert image_id
        self.ids.add(image_id)
        if tag:
            for ref in (tp.content_tag, tp.readable_tag):
                repo, t = ref.rsplit(":", 1)
                self.client.api.tag(image_id, repo, t)
        return image_id

    def cleanup(self) -> None:
        doomed = set(self.ids)
        for img in self.client.images.list():
            refs = (img.attrs.get("RepoTags") or []) + (img.attrs.get("RepoDigests") or [])
            if any(f"rfpub-{RUN}-" in r for r in refs):
                doomed.add(img.id)
        for image_id in doomed:
            try:
                self.client.images.remove(image_id, force=True)
            except Exception:  # already gone (removed by the test itself)
                pass


def record_result(state: Path, image_id: str, tp: TargetPlan, ok: bool = True, judged: bool = True, **other) -> None:
    """The record `build.py test` writes, judged against the matrix and lock beside the state folder
    (written here when missing) and tp; other: fields of that judgement replaced."""
    suites = {s: {"status": "passed", "detail": "1 check(s)"} for s in suite_runs.SUITE_NAMES}
    if not ok:
        suites["gemm"] = {"status": "failed", "detail": "fp16: 3% of peak"}
    matrix = state.parent / "matrix.yaml"
    if not matrix.exists():
        matrix.write_text(f"# the matrix {tp.name} was judged against\n")
        matrix.with_suffix(".lock").write_text(f"# the lock {tp.name} was judged against\n")
    data = {"image": tp.content_tag, "image_id": image_id, "target": tp.name, "ok": ok, "suites": suites}
    if judged:
        data.update({**asdict(suite_runs.judged_against(matrix, tp.name, tp.content_hash)), **other})
    suite_runs.record(state, suite_runs.SuitesReport.from_json(data))


@pytest.fixture(scope="module")
def forge(docker_client):
    f = Forge(docker_client)
    yield f
    f.cleanup()


@pytest.fixture
def dirs(tmp_path):
    return tmp_path / "state", tmp_path / "published"


def where(dirs) -> dict:
    """push's folders, and the matrix (matrix.lock beside it) push holds the recorded results to."""
    state, published = dirs
    return {"state_dir": state, "record_dir": published, "matrix_path": state.parent / "matrix.yaml"}


def plan_of(tp: TargetPlan) -> BuildPlan:
    return BuildPlan(matrix=None, targets={tp.name: tp})


def forget_locally(client, image_id: str) -> None:
    """As on another machine: the image and all its names gone, so a pull really downloads it."""
    client.images.remove(image_id, force=True)
    assert engine.image_id(client, image_id) is None


def assert_untagged(client, tp: TargetPlan) -> None:
    for ref in (tp.content_tag, tp.readable_tag):
        assert engine.image_id(client, ref) is None, f"{ref} was tagged"


# -- tests --------------------------------------------------------------------------------------
def test_push_then_pull_by_digest(docker_client, forge, local_registry, dirs):
    state, published = dirs
    tp = forge.target("ok")
    image_id = forge.build(tp)
    record_result(state, image_id, tp)

    rec = publish.push(docker_client, plan_of(tp), tp.name, local_registry, **where(dirs))

    repository = f"{local_registry}/rocmforge/{tp.name}"
    tags = [f"content-{tp.content_hash[:12]}", STACK]
    text = (published / f"{tp.name}.json").read_text()
    on_disk = json.loads(text)
    assert list(on_disk) == sorted(on_disk)
    assert on_disk == rec
    assert rec == {
        "archs": ["gfx1100"],
        "content_hash": tp.content_hash,
        "digest": rec["digest"],
        "image_id": image_id,
        "registry": local_registry,
        "repository": repository,
        "suites": {s: "passed" for s in suite_runs.SUITE_NAMES},
        "tags": tags,
        "target": tp.name,
    }
    assert rec["digest"].startswith("sha256:") and len(rec["digest"]) == 71
    # The registry holds both tags at that digest; the push left no registry-named local tags.
    assert f"rocmforge/{tp.name}" in _get_json(f"http://{local_registry}/v2/_catalog")["repositories"]
    assert sorted(_get_json(f"http://{local_registry}/v2/rocmforge/{tp.name}/tags/list")["tags"]) == sorted(tags)
    for tag in tags:
        assert reg.manifest_digest(docker_client, repository, tag) == rec["digest"]
        assert engine.image_id(docker_client, f"{repository}:{tag}") is None

    # On the machine that pushed, the image is already here: the pull only confirms and tags it.
    assert pulling.pull(docker_client, tp.name, record_dir=published)["image_id"] == image_id

    forget_locally(docker_client, image_id)
    got = pulling.pull(docker_client, tp.name, record_dir=published)

    assert got["local_tags"] == [tp.content_tag, tp.readable_tag]
    pulled = docker_client.images.get(f"{repository}@{rec['digest']}")
    assert pulled.id == image_id
    assert engine.image_id(docker_client, tp.content_tag) == image_id
    assert engine.image_id(docker_client, tp.readable_tag) == image_id


def test_variants_are_pushed_as_one_index_and_pull_takes_the_picked_entry(docker_client, forge, local_registry, dirs):
    state, published = dirs
    main = forge.target("idx", archs=("gfx90a", "gfx1100"))
    variants = (forge.target("idx", variant=("gfx90a",)), forge.target("idx", variant=("gfx1100",)))
    ids = {}
    for tp in (main, *variants):
        ids[tp.key] = forge.build(tp)
        record_result(state, ids[tp.key], tp)
    plan = BuildPlan(matrix=None, targets={main.name: main}, variants={main.name: variants})

    rec = publish.push(docker_client, plan, main.name, local_registry, **where(dirs))

    repository = f"{local_registry}/rocmforge/{main.name}"
    assert [v["archs"] for v in rec["variants"]] == [["gfx90a"], ["gfx1100"]]
    assert rec["index"]["tag"] == STACK and rec["tags"] == [f"content-{main.content_hash[:12]}", STACK]
    assert [v["tags"][1] for v in rec["variants"]] == [f"{STACK}-gfx90a", f"{STACK}-gfx1100"]
    # The readable tag is the index, as the registry serves it: the main image first, every entry annotated.
    assert reg.manifest_digest(docker_client, repository, STACK) == rec["index"]["digest"]
    _, raw = reg.get_document(docker_client, repository, STACK)
    index = json.loads(raw)
    print(json.dumps(index, indent=2))
    assert index["mediaType"] == imageindex.OCI_INDEX
    assert [m["digest"] for m in index["manifests"]] == [rec["digest"]] + [v["digest"] for v in rec["variants"]]
    assert [m["annotations"][imageindex.ARCHS] for m in index["manifests"]] == ["gfx90a,gfx1100", "gfx90a", "gfx1100"]
    assert all(m["platform"] == {"architecture": "amd64", "os": "linux"} for m in index["manifests"])
    for v in rec["variants"]:
        assert reg.manifest_digest(docker_client, repository, v["tags"][0]) == v["digest"]

    # A plain `docker pull` of the readable tag gets the main image (the first entry for its platform).
    for image_id in ids.values():
        forget_locally(docker_client, image_id)
    docker_client.api.pull(repository, tag=STACK)
    assert engine.image_id(docker_client, f"{repository}:{STACK}") == ids[main.key]
    forget_locally(docker_client, ids[main.key])

    seen = []

    def take_gfx1100(entries):
        seen.extend((e.archs, e.size) for e in entries)
        return 2, "a W7900"

    got = pulling.pull(docker_client, main.name, record_dir=published, pick=take_gfx1100)
    assert [a for a, _ in seen] == [("gfx90a", "gfx1100"), ("gfx90a",), ("gfx1100",)]
    assert all(size and size > 0 for _, size in seen)
    assert got["picked"]["image_id"] == ids[variants[1].key] and got["picked"]["variant"]
    assert got["local_tags"] == [variants[1].content_tag, variants[1].readable_tag]
    assert engine.image_id(docker_client, variants[1].readable_tag) == ids[variants[1].key]
    assert engine.image_id(docker_client, main.readable_tag) is None  # nothing else was tagged
    # Without a picker (no GPU facts) the main image, under the main image's tags.
    assert pulling.pull(docker_client, main.name, record_dir=published)["local_tags"] == [
        main.content_tag,
        main.readable_tag,
    ]
    assert engine.image_id(docker_client, main.readable_tag) == ids[main.key]

    # An index moved behind the record's back is refused before anything is pulled.
    moved = imageindex.push(
        docker_client,
        repository,
        STACK,
        [(rec["digest"], ("gfx90a", "gfx1100")), (rec["variants"][0]["digest"], ("gfx1100",))],
    )
    with pytest.raises(UserError, match=f"now points to {moved}"):
        pulling.pull(docker_client, main.name, record_dir=published, pick=take_gfx1100)


def test_pull_refused_when_tag_overwritten_behind_our_back(docker_client, forge, local_registry, dirs):
    state, published = dirs
    tp = forge.target("overwritten")
    image_id = forge.build(tp)
    record_result(state, image_id, tp)
    # A namespace replaces "rocmforge" in the registry's names.
    rec = publish.push(docker_client, plan_of(tp), tp.name, f"{local_registry}/team", **where(dirs))
    repository = f"{local_registry}/team/{tp.name}"
    assert rec["repository"] == repository

    # Someone else pushes another image to the readable tag, straight through the engine.
    other = forge.build(tp, nonce="intruder", tag=False)
    docker_client.api.tag(other, repository, STACK)
    try:
        for chunk in docker_client.api.push(repository, tag=STACK, stream=True, decode=True):
            assert "error" not in chunk, chunk
    finally:
        docker_client.api.remove_image(f"{repository}:{STACK}")
    intruder_digest = reg.manifest_digest(docker_client, repository, STACK)
    assert intruder_digest != rec["digest"]

    forget_locally(docker_client, image_id)
    with pytest.raises(UserError) as err:
        pulling.pull(docker_client, tp.name, record_dir=published)
    message = str(err.value)
    assert f"{repository}:{STACK}" in message and rec["digest"] in message and intruder_digest in message
    assert "overwritten" in message
    assert_untagged(docker_client, tp)
    assert engine.image_id(docker_client, image_id) is None, "refused pull left the image behind"


def test_pull_refused_and_undone_when_labels_differ_from_record(docker_client, forge, local_registry, dirs):
    state, published = dirs
    tp = forge.target("tampered")
    image_id = forge.build(tp)
    record_result(state, image_id, tp)
    publish.push(docker_client, plan_of(tp), tp.name, local_registry, **where(dirs))
    path = published / f"{tp.name}.json"
    rec = json.loads(path.read_text())
    rec["content_hash"] = "0" * 64
    path.write_text(json.dumps(rec))

    forget_locally(docker_client, image_id)
    with pytest.raises(UserError) as err:
        pulling.pull(docker_client, tp.name, record_dir=published)
    assert "io.rocmforge.content-hash" in str(err.value) and tp.content_hash in str(err.value)
    assert_untagged(docker_client, tp)
    # The pull downloaded it; the refusal removed it again.
    assert engine.image_id(docker_client, image_id) is None


def test_push_refused_for_untested_image(docker_client, forge, local_registry, dirs):
    state, published = dirs
    tp = forge.target("untested")
    image_id = forge.build(tp)
    with pytest.raises(UserError) as err:
        publish.push(docker_client, plan_of(tp), tp.name, local_registry, **where(dirs))
    message = str(err.value)
    assert err.value.field == "--target"
    assert image_id in message and f"python build.py test --target {tp.name}" in message
    _assert_not_published(docker_client, local_registry, tp, published)


def test_push_refused_when_a_variant_did_not_pass(docker_client, forge, local_registry, dirs):
    """The index is published whole or not at all: a variant never tested (or failed) stops the
    push before any layer of the target leaves."""
    state, published = dirs
    main = forge.target("halfidx", archs=("gfx90a", "gfx1100"))
    variant = forge.target("halfidx", variant=("gfx1100",))
    record_result(state, forge.build(main), main)
    untested = forge.build(variant)
    plan = BuildPlan(matrix=None, targets={main.name: main}, variants={main.name: (variant,)})
    with pytest.raises(UserError) as err:
        publish.push(docker_client, plan, main.name, local_registry, **where(dirs))
    assert untested in str(err.value) and "gfx1100 variant" in str(err.value)
    _assert_not_published(docker_client, local_registry, main, published)


def test_push_refused_for_failed_image(docker_client, forge, local_registry, dirs):
    state, published = dirs
    tp = forge.target("failed")
    image_id = forge.build(tp)
    record_result(state, image_id, tp, ok=False)
    with pytest.raises(UserError) as err:
        publish.push(docker_client, plan_of(tp), tp.name, local_registry, **where(dirs))
    message = str(err.value)
    assert image_id in message and "failed" in message and "gemm" in message
    assert f"python build.py test --target {tp.name}" in message
    _assert_not_published(docker_client, local_registry, tp, published)


def test_push_refused_after_rebuild(docker_client, forge, local_registry, dirs):
    state, published = dirs
    tp = forge.target("rebuilt")
    tested = forge.build(tp)
    record_result(state, tested, tp)
    rebuilt = forge.build(tp, nonce="rebuild")  # same content hash, new image ID
    assert rebuilt != tested and engine.image_id(docker_client, tp.content_tag) == rebuilt
    with pytest.raises(UserError) as err:
        publish.push(docker_client, plan_of(tp), tp.name, local_registry, **where(dirs))
    message = str(err.value)
    assert rebuilt in message and tested in message and "rebuilt" in message
    assert f"python build.py test --target {tp.name}" in message
    _assert_not_published(docker_client, local_registry, tp, published)


# One row per input the verdict was reached against: how the test makes it differ, what push says.
JUDGED_ELSEWHERE = {
    "target": ({"target": "hip-runtime"}, "another target: 'hip-runtime', not {name!r}"),
    "content-hash": ({"content_hash": "c" * 64}, "another content hash: " + "c" * 64 + ", not {hash}"),
    "matrix": ("matrix.yaml", "another matrix: sha256 {was}, not {matrix}'s sha256 {now}"),
    "lock": ("matrix.lock", "another lock: sha256 {was}, not {lock}'s sha256 {now}"),
}


@pytest.mark.parametrize("what", list(JUDGED_ELSEWHERE))
def test_push_refused_for_results_judged_against_other_inputs(docker_client, forge, local_registry, dirs, what):
    state, published = dirs
    tp = forge.target(f"judged-{what}")
    image_id = forge.build(tp)
    change, said = JUDGED_ELSEWHERE[what]
    matrix = where(dirs)["matrix_path"]
    if isinstance(change, dict):
        record_result(state, image_id, tp, **change)
        was = now = ""
    else:  # the file was edited after the image was tested
        record_result(state, image_id, tp)
        edited = matrix.parent / change
        was = suite_runs.file_sha256(edited)
        edited.write_text(edited.read_text() + "# edited after the test\n")
        now = suite_runs.file_sha256(edited)
    with pytest.raises(UserError) as err:
        publish.push(docker_client, plan_of(tp), tp.name, local_registry, **where(dirs))
    message = str(err.value)
    assert err.value.field == "--target"
    assert (
        said.format(
            name=tp.name, hash=tp.content_hash, was=was, now=now, matrix=matrix, lock=matrix.with_suffix(".lock")
        )
        in message
    ), message
    assert image_id in message and f"python build.py test --target {tp.name}" in message
    _assert_not_published(docker_client, local_registry, tp, published)


def test_push_refused_for_results_that_do_not_say_what_they_judged(docker_client, forge, local_registry, dirs):
    """A record written before the judgement was kept counts as not judged."""
    state, published = dirs
    tp = forge.target("unjudged")
    image_id = forge.build(tp)
    record_result(state, image_id, tp, judged=False)
    with pytest.raises(UserError) as err:
        publish.push(docker_client, plan_of(tp), tp.name, local_registry, **where(dirs))
    message = str(err.value)
    assert "not judged" in message and image_id in message
    assert f"run `python build.py test --target {tp.name}` again" in message
    _assert_not_published(docker_client, local_registry, tp, published)


def test_push_to_unreachable_registry_is_a_build_error(docker_client, forge, dirs):
    state, published = dirs
    tp = forge.target("unreachable")
    image_id = forge.build(tp)
    record_result(state, image_id, tp)
    registry = f"127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(BuildError) as err:
        publish.push(docker_client, plan_of(tp), tp.name, registry, **where(dirs))
    assert registry in str(err.value)
    assert not (published / f"{tp.name}.json").exists()
    assert engine.image_id(docker_client, f"{registry}/rocmforge/{tp.name}:{STACK}") is None


def test_pull_without_record_names_the_file(docker_client, tmp_path):
    with pytest.raises(UserError) as err:
        pulling.pull(docker_client, "hip-runtime", record_dir=tmp_path)
    assert err.value.file == str(tmp_path / "hip-runtime.json")


@pytest.mark.parametrize(
    "text, host, namespace",
    [
        ("127.0.0.1:5000", "127.0.0.1:5000", "rocmforge"),
        ("registry.example.org/team/ml", "registry.example.org", "team/ml"),
        ("localhost/x", "localhost", "x"),
    ],
)
def test_registry_argument(text, host, namespace):
    r = reg.parse(text)
    assert (r.host, r.namespace) == (host, namespace)


@pytest.mark.parametrize("text", ["myregistry/team", "127.0.0.1:5000/Team", "http://127.0.0.1:5000", ""])
def test_registry_argument_refused(text):
    with pytest.raises(UserError):
        reg.parse(text)


def _assert_not_published(client, registry: str, tp: TargetPlan, published: Path) -> None:
    assert not (published / f"{tp.name}.json").exists()
    assert f"rocmforge/{tp.name}" not in (_get_json(f"http://{registry}/v2/_catalog").get("repositories") or [])
    for tag in (tp.content_tag, tp.readable_tag):
        assert engine.image_id(client, f"{registry}/rocmforge/{tp.name}:{tag.rsplit(':', 1)[1]}") is None
