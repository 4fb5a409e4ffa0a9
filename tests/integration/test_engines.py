"""One image identity on every engine users run: a small target (the bootstrapped Debian 13 base,
the HIP runtime and rocminfo without rocBLAS, the probes) built and normalised through the command
users type, on the host's engine and on each engine of tests/engine_host.py (Docker 28 with
overlay2, Docker 28 with the containerd image store, podman 5), gives one image ID: the config
digest. Under the containerd store rocmforge also reports the manifest digest that store shows.
Its per-arch variant (gfx1100) is one image on every engine too. The suites run on each engine
and judge the main image the same way as on the host: it carries no GPU
code and no GEMM backend (that needs rocBLAS, gigabytes per engine), so those suites fail, on
every engine alike, and every other check passes or skips alike."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import yaml

from tests.conftest import copy_project, run_cli

pytestmark = pytest.mark.docker

STACK = "debian13-rocm5.7"
TARGET = "engine-probe"


def probe_project(root, variants: list | None = None):
    matrix = copy_project(root)
    data = yaml.safe_load(matrix.read_text())
    data["targets"][TARGET] = {
        "description": "hip-runtime without rocBLAS (a few hundred MB)",
        "stack": STACK,
        "apt": ["libamdhip64-5", "rocminfo"],
        "version": "1",
        "archs": ["gfx90a", "gfx1100"],
        "source_date_epoch": 1764547200,
    }
    if variants:
        data["targets"][TARGET]["variants"] = variants
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    lock = yaml.safe_load((root / "matrix.lock").read_text())
    # hip-runtime's locked closure is this one's plus rocBLAS, which nothing else here needs
    lock["apt"][TARGET] = {k: v for k, v in lock["apt"]["hip-runtime"].items() if k != "librocblas0"}
    (root / "matrix.lock").write_text(yaml.safe_dump(lock))
    return matrix


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return probe_project(tmp_path_factory.mktemp("engines"))


@pytest.fixture(scope="module")
def variant_project(tmp_path_factory):
    """The same target declaring a gfx1100 variant: its main image is the one above (declaring
    variants changes no file of it); a build makes the variant too. Only the identity test builds it."""
    return probe_project(tmp_path_factory.mktemp("engines-variant"), [["gfx1100"]])


def _content_tag(matrix, variant: bool = False) -> str:
    rows = json.loads(run_cli("--matrix", str(matrix), "list", "--json").stdout)
    row = next(r for r in rows if r["name"] == TARGET)
    return row["variants"][0]["content_tag"] if variant else row["content_tag"]


def _build(matrix, state, env=None):
    """The classic builder's build (by name: the reference BuildKit's rebuilds are held against)."""
    args = ("--matrix", str(matrix), "--state-dir", str(state), "build", "--target", TARGET, "--builder", "classic")
    proc = run_cli(*args, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def _suites(matrix, state, env=None) -> dict[str, str]:
    """Each suite check's outcome (passed, failed, skipped) as `build.py test --json` reports it."""
    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "test", "--target", TARGET, "--json", env=env)
    assert proc.returncode in (0, 1), proc.stderr[-4000:]
    report = json.loads(proc.stdout)
    return {f"{t['suite']}::{t['test']}::{t['phase']}": t["outcome"] for t in report["tests"]}


@pytest.fixture(scope="module")
def host_identity(docker_client, project, variant_project, tmp_path_factory):
    """The small target built on the host's engine: (image ID, diff IDs), suite outcomes, and its
    gfx1100 variant's (image ID, diff IDs)."""
    state = tmp_path_factory.mktemp("host-state")
    _build(variant_project, state)
    tag, variant_tag = _content_tag(project), _content_tag(variant_project, variant=True)

    def identity(ref):
        return docker_client.identity(ref), docker_client.api.inspect_image(ref)["RootFS"]["Layers"]

    yield identity(tag), _suites(project, state), identity(variant_tag)
    for ref in (
        tag,
        tag.rsplit(":", 1)[0] + ":debian13-rocm5.7",
        variant_tag,
        tag.rsplit(":", 1)[0] + ":debian13-rocm5.7-gfx1100",
    ):
        try:
            docker_client.api.remove_image(ref)
        except Exception:  # noqa: BLE001 - a readable tag another test made stays theirs
            pass


def test_a_small_target_is_one_image_on_every_engine(host_identity, other_engine, project, variant_project, tmp_path):
    proc = _build(variant_project, tmp_path / "state", env=other_engine.env())
    client = other_engine.client()
    tag, variant_tag = _content_tag(project), _content_tag(variant_project, variant=True)
    got = client.identity(tag), client.api.inspect_image(tag)["RootFS"]["Layers"]
    got_variant = client.identity(variant_tag), client.api.inspect_image(variant_tag)["RootFS"]["Layers"]
    want, host_suites, want_variant = host_identity
    print(
        f"{other_engine.describe()}: {got[0]} (host: {want[0]}); gfx1100 variant {got_variant[0]} "
        f"(host: {want_variant[0]})"
    )
    assert got == want
    assert got_variant == want_variant and got_variant[0] != got[0]
    shown = client.manifest_digest(tag)
    if other_engine.containerd_snapshotter:
        assert shown and shown != got[0]
        assert shown[7:19] in proc.stderr, "the manifest digest the store shows is not reported"
    else:
        assert shown is None
    assert got[0][7:19] in proc.stderr
    suites = _suites(project, tmp_path / "state", env=other_engine.env())
    assert suites == host_suites
    assert {o for o in suites.values()} >= {"passed", "failed", "skipped"}


@pytest.mark.parametrize("other_engine", ["docker28-overlay2", "docker28-containerd"], indirect=True)
def test_buildkit_builds_the_same_images_on_docker_28(host_identity, other_engine, variant_project, tmp_path):
    """Docker 28's own BuildKit (v0.2x, not the host's 0.8), through the pinned buildx and the engine's
    DOCKER_HOST, on either store: the main image and its gfx1100 variant, each rebuilt without cache
    by BuildKit, are the images the classic builder made there, which are the host's (the identity
    test above). `--against-built` compares with what the engine holds, so BuildKit's build, not the
    classic one, is the second of each pair."""
    from tests import buildx

    state = tmp_path / "state"
    _build(variant_project, state, env=other_engine.env())  # up to date where the test above built it
    env = {**other_engine.env(), "DOCKER_CONFIG": str(buildx.install())}
    args = ("--matrix", str(variant_project), "--state-dir", str(state), "verify-repro", "--target", TARGET)
    proc = run_cli(*args, "--against-built", "--builder", "buildkit", "--json", env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    report = json.loads(proc.stdout)
    logs = sorted((state / "logs").glob(f"{TARGET}*.repro-*.log"))
    assert len(logs) == 2 and all("(buildkit builder)" in log.read_text().splitlines()[0] for log in logs), logs
    want, _, want_variant = host_identity
    print(f"{other_engine.describe()}: BuildKit {report['image_ids']} {report['variants'][0]['image_ids']}")
    assert report["against"] == "built" and report["identical"], report
    assert report["image_ids"] == [want[0]] * 2
    assert [v["image_ids"] for v in report["variants"]] == [[want_variant[0]] * 2]


@pytest.mark.parametrize("other_engine", ["podman5"], indirect=True)
def test_podman_builds_classic_under_auto_and_refuses_buildkit_by_name(host_identity, other_engine, project, tmp_path):
    """podman serves no BuildKit session, so buildx cannot build there even where it is installed:
    `--builder buildkit` is refused (exit 2, one line) before anything is built, and
    `ROCMFORGE_BUILDER=auto` builds through the classic builder's API, the host's image."""
    from tests import buildx

    client, tag = other_engine.client(), _content_tag(project)
    env = {**other_engine.env(), "DOCKER_CONFIG": str(buildx.install())}
    args = ("--matrix", str(project), "--state-dir", str(tmp_path / "state"), "build", "--target", TARGET)
    proc = run_cli(*args, "--builder", "buildkit", env=env)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stderr.count("\n") == 1 and "has no BuildKit" in proc.stderr and "--builder classic" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "state" / "logs" / f"{TARGET}.log").exists()
    for ref in (tag, tag.rsplit(":", 1)[0] + ":" + STACK):  # so that auto's build runs (on the step cache)
        if client.identity(ref):
            client.api.remove_image(ref)
    proc = run_cli(*args, env={**env, "ROCMFORGE_BUILDER": "auto"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    log = (tmp_path / "state" / "logs" / f"{TARGET}.log").read_text()
    assert "(classic builder)" in log.splitlines()[0]
    assert client.identity(tag) == host_identity[0][0]


@pytest.mark.parametrize("other_engine", ["docker28-containerd"], indirect=True)
def test_pushed_twice_one_digest_and_pulled_back_the_same_image(host_identity, other_engine, project, tmp_path):
    """The containerd store pushes the manifest rocmforge wrote: one digest however often it is
    pushed, and pulled back by that digest it is the same image (config digest)."""
    from rocmforge.release import publish, pulling
    from tests import local_registry

    _build(project, tmp_path / "state", env=other_engine.env())
    client = other_engine.client()
    tag = _content_tag(project)
    want = client.identity(tag)
    with local_registry.serve(host=other_engine.gateway, port=other_engine.registry_port) as registry:
        repository = f"{registry}/rocmforge-enginetest/engine-probe"
        digests = []
        for run in ("one", "two"):
            with publish.temporary_tag(client, tag, repository, run):
                digests.append(publish.push_one(client, repository, run))
        assert digests[0] == digests[1] == client.manifest_digest(tag)
        for ref in client.api.inspect_image(tag)["RepoTags"]:  # the image itself goes with its last tag
            client.api.remove_image(ref)
        pulling.pull_one(client, repository, digests[0])
        assert client.identity(f"{repository}@{digests[0]}") == want == host_identity[0][0]


@pytest.mark.parametrize("other_engine", ["docker28-containerd"], indirect=True)
def test_verify_repro_report_and_clean_on_the_containerd_store(host_identity, other_engine, project, tmp_path):
    """Under the containerd store: the built image and a rebuild without cache by the same (classic)
    builder are the host's image ID, the report shows that ID, and `clean` leaves no rocmforge image
    or leftover behind. (The two builds are independent: the first ran on an engine that had never
    built this target, the second uses no cache.)"""
    env, state = other_engine.env(), tmp_path / "state"
    args = ("--matrix", str(project), "--state-dir", str(state))
    _build(project, state, env=env)  # up to date where an earlier test built it
    proc = run_cli(
        *args, "verify-repro", "--target", TARGET, "--against-built", "--builder", "classic", "--json", env=env
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads(proc.stdout)["image_ids"] == [host_identity[0][0]] * 2
    proc = run_cli(*args, "report", "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {r["name"]: r for r in json.loads(proc.stdout)["targets"]}
    assert rows[TARGET]["image_id"] == host_identity[0][0]
    proc = run_cli(*args, "clean", "--target", TARGET, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = other_engine.client()
    left = [
        t
        for img in client.api.images(all=True)
        for t in img.get("RepoTags") or []
        if "rocmforge/engine-probe" in t or "rocmforge-raw/" in t or "rocmforge-repro/" in t
    ]
    assert left == []


def _normalise_lines(state, name: str = TARGET) -> list[str]:
    return [
        ln
        for ln in (state / "logs" / f"{name}.log").read_text().splitlines()
        if (ln.startswith("normalise ") and " MB from the " in ln)
        or "reading the whole image" in ln
        or ln.startswith("  load: ")
        or " layer(s) of the base " in ln
    ]


def _sent_and_base(lines: list[str]) -> tuple[int, str]:
    """(bytes the load sent to the engine, the base's reference) as the build log states them."""
    sent = [int(m.group(1).replace(",", "")) for ln in lines for m in [re.search(r", ([\d,]+) bytes sent", ln)] if m]
    base = [m.group(1) for ln in lines for m in [re.search(r"layer\(s\) of the base (\S+) passed", ln)] if m]
    assert len(sent) == 1 and len(base) == 1, lines
    return sent[0], base[0]


@pytest.mark.parametrize(
    "other_engine, store",
    [("docker28-containerd", "containerd content store"), ("podman5", "podman storage")],
    indirect=["other_engine"],
)
def test_the_store_is_read_directly_and_docker_save_is_only_the_announced_fallback(
    host_identity, other_engine, store, project, tmp_path
):
    """Where this host sees the engine's data root, the layers the build added are read from the
    engine's store (the containerd content store: gzip blobs the builder committed; podman's
    overlay storage: each layer's files and tar-split records), each checked against its diff ID,
    and only they are loaded back; where it does not (a remote engine), `docker save` is taken and
    the log says why. Either way the load is a layout that names the base's layers and sends only
    the added ones: on podman the bytes sent are fewer than the image's size less its base's (its
    store counts both uncompressed), where a load of every layer would send the base's too. One
    image ID either way, the host's."""
    client = other_engine.client()
    tag = _content_tag(project)
    seen = {}
    for visible in (True, False):
        state = tmp_path / f"state-{visible}"
        for ref in (tag, tag.rsplit(":", 1)[0] + ":" + STACK):  # so this build normalises again
            if client.identity(ref):
                client.api.remove_image(ref)
        args = ("--matrix", str(project), "--state-dir", str(state), "build", "--target", TARGET)
        proc = run_cli(*args, env=other_engine.env(store_visible=visible))
        assert proc.returncode == 0, proc.stderr[-4000:]
        lines = _normalise_lines(state)
        print(f"store visible={visible}:", *lines, sep="\n  ")
        seen[visible] = client.identity(tag)
        if visible:
            assert any(f"MB from the {store}" in ln for ln in lines), lines
            assert not any("reading the whole image" in ln for ln in lines), lines
        else:
            assert any(
                "reading the whole image with docker save" in ln and "ROCMFORGE_ENGINE_ROOT" in ln for ln in lines
            ), lines
            assert any("MB from the docker save" in ln for ln in lines), lines
        assert any(ln.startswith("  load: an OCI layout naming the base's") for ln in lines), lines
        sent, base = _sent_and_base(lines)
        if other_engine.name == "podman5":
            added = client.api.inspect_image(tag)["Size"] - client.api.inspect_image(base)["Size"]
            print(f"  sent {sent:,} bytes; the added layers hold {added:,}")
            assert 0 < sent < added + (1 << 20), (sent, added)
    assert seen[True] == seen[False] == host_identity[0][0]


def record_passed(matrix, state, image_id: str, tp=None) -> None:
    """The record `build.py test` writes where the suites pass, for the target's main image or the
    variant tp. The probe carries no GEMM backend and no GPU code, so its own run fails those two
    suites by design (the module doc); push's refusal of an image that did not pass is
    test_publish's. Where this is used, the subject is the store or the registry."""
    from rocmforge.render.plan import load_plan
    from rocmforge.verify import suites as suite_runs

    tp = tp or load_plan(matrix).targets[TARGET]
    data = {
        "image": tp.content_tag,
        "image_id": image_id,
        "target": TARGET,
        "ok": True,
        "suites": {s: {"status": "passed", "detail": "1 check(s)"} for s in suite_runs.SUITE_NAMES},
        **dataclasses.asdict(suite_runs.judged_against(matrix, TARGET, tp.content_hash)),
    }
    suite_runs.record(state, suite_runs.SuitesReport.from_json(data))


def _rocmforge_tags(client) -> list[str]:
    """This target's own tags (not its variant's: another test's build cache of that may stay)."""
    from rocmforge.assemble.engine import short_name

    ours = {f"rocmforge/{TARGET}", f"rocmforge-cache/{TARGET}"}
    return sorted(
        t for img in client.api.images() for t in img.get("RepoTags") or [] if short_name(t.rsplit(":", 1)[0]) in ours
    )


@pytest.mark.parametrize("other_engine", ["docker28-containerd", "podman5"], indirect=True)
def test_push_pull_and_the_registry_cache_through_the_cli(host_identity, other_engine, tmp_path):
    """What users type, on the containerd store and on podman: `push` publishes the built image to a
    registry, `pull` on an engine that lost it brings back the same image under its tags, and a
    build with `--cache-registry` stores it there; after `clean`, a build in a fresh state folder
    takes it from the cache, running no build step. One image ID throughout: the host's."""
    from tests import local_registry

    matrix = probe_project(tmp_path)
    env, client, want = other_engine.env(), other_engine.client(), host_identity[0][0]
    with local_registry.serve(host=other_engine.gateway, port=other_engine.registry_port) as registry:
        args = ("--matrix", str(matrix), "--state-dir", str(tmp_path / "state"))
        _build(matrix, tmp_path / "state", env=env)
        record_passed(matrix, tmp_path / "state", want)
        proc = run_cli(*args, "push", "--target", TARGET, "--registry", f"{registry}/rfe", env=env)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        record = json.loads((tmp_path / "published" / f"{TARGET}.json").read_text())
        assert record["image_id"] == want

        proc = run_cli(*args, "clean", "--target", TARGET, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert _rocmforge_tags(client) == []
        proc = run_cli(*args, "pull", "--target", TARGET, env=env)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        pulled = [f"rocmforge/{TARGET}:{t}" for t in record["tags"]]
        assert [client.identity(ref) for ref in pulled] == [want] * len(pulled)

        cache = ("--cache-registry", f"{registry}/rfe-cache")
        proc = run_cli(*args, "clean", "--target", TARGET, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        proc = run_cli(*args, "build", "--target", TARGET, *cache, env=env)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        assert f"stored {TARGET} in the cache {registry}/rfe-cache/" in proc.stdout + proc.stderr
        proc = run_cli(*args, "clean", "--target", TARGET, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        fresh = ("--matrix", str(matrix), "--state-dir", str(tmp_path / "fresh-state"))
        proc = run_cli(*fresh, "build", "--target", TARGET, *cache, env=env)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
        out = proc.stdout + proc.stderr
        assert "from cache" in out and "no build step run" in out and "Step 1/" not in out, out[-3000:]
        assert client.identity(_content_tag(matrix)) == want
        run_cli(*fresh, "clean", "--target", TARGET, env=env)
