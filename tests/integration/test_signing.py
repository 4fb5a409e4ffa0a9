"""Signed pushes and verified pulls against a real registry (Debian's docker-registry on 127.0.0.1)
with real cosign (the pinned tools image, or ROCMFORGE_COSIGN): push --sign-key, then cosign itself
verifies what rocmforge wrote; `verify` and `pull REF --key` accept exactly the images whose
signature and three statements hold, and refuse each way one can fail, tagging nothing."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from rocmforge.assemble import engine, steplock
from rocmforge.release import attestations as att
from rocmforge.release import cosign as cosigns
from rocmforge.release import imageindex, releaserecord, releasestore
from rocmforge.verify import suites as suite_runs
from tests import quickstart
from tests.conftest import copy_project, run_cli
from tests.integration.test_build_leftovers import base  # noqa: F401  (a fixture: the trixie base)
from tests.integration.test_installed_package import installed, rocmforge  # noqa: F401  (a fixture)

pytestmark = pytest.mark.docker

RUN = uuid.uuid4().hex[:8]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TARGET = "hip-runtime"


# -- keys and cosign ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cosign(docker_client):
    return cosigns.find(docker_client)


@pytest.fixture(scope="module")
def keys(cosign, tmp_path_factory):
    """Two key pairs made by cosign itself: ours (password 'right') and someone else's."""
    made = {}
    for who, password in (("ours", "right"), ("other", "other")):
        folder = tmp_path_factory.mktemp(f"keys-{who}")
        with_password(password, lambda folder=folder: cosign.run(["generate-key-pair"], cwd=folder))
        made[who] = (folder / "cosign.key", folder / "cosign.pub", password)
    return made


# sid's cosign 3, pinned in the tools image's format: the attacks of issue 52 run under it as well
COSIGN3_PIN = Path(__file__).resolve().parents[1] / "fixtures" / "tools" / "cosign-sid.json"


@pytest.fixture(scope="module")
def cosign3(tmp_path_factory):
    """sid's cosign 3 as a binary on this host (as its package puts it on PATH), from the pinned .deb
    fetched as the tools image fetches its own: nothing is used unless its size and sha256 match."""
    from rocmforge.release import toolsimage

    started = time.monotonic()
    pin = toolsimage.load_pin(COSIGN3_PIN)
    folder = tmp_path_factory.mktemp("cosign3")
    deb = toolsimage.fetch_deb(pin.debs[0], folder / "cosign.deb")
    with tarfile.open(fileobj=io.BytesIO(toolsimage.deb_data(deb))) as tar:
        member = tar.extractfile(f"./{pin.binary}")
        assert member is not None
        (folder / "cosign").write_bytes(member.read())
    deb.unlink()
    (folder / "cosign").chmod(0o755)
    found = cosigns.host(str(folder / "cosign"))  # Debian's build reports its version as "devel"
    assert found.signing_config, f"{found.describe()} is not cosign 3"
    print(f"cosign {pin.version} fetched and unpacked: {time.monotonic() - started:.1f} s")
    return dataclasses.replace(found, version=pin.upstream_version)


@pytest.fixture(params=["cosign2", "cosign3"])
def either(request, docker_client, local_registry, monkeypatch):
    """Small images signed, and checked by `verify` / `pull`, with the pinned cosign 2.5.0 (the tools
    image: .sig/.att tags) or with sid's cosign 3.1.1 (bundles under the referrers tag)."""
    if request.param == "cosign3":
        chosen = request.getfixturevalue("cosign3")
        monkeypatch.setenv(cosigns.ENV, chosen.program)
    else:
        monkeypatch.setenv(cosigns.ENV, "image")
        chosen = cosigns.find(docker_client)
        assert chosen.version.startswith("2."), chosen.describe()
    s = Small(docker_client, chosen, f"{local_registry}/small{RUN}-{request.param}")
    yield s
    s.cleanup()


def with_password(password: str, call):
    old = os.environ.get(cosigns.PASSWORD_ENV)
    os.environ[cosigns.PASSWORD_ENV] = password
    try:
        return call()
    finally:
        if old is None:
            del os.environ[cosigns.PASSWORD_ENV]
        else:
            os.environ[cosigns.PASSWORD_ENV] = old


def cli(*args: str, password: str | None = None, cwd: Path | None = None):
    env = {cosigns.PASSWORD_ENV: password} if password is not None else {}
    return run_cli(*args, env=env, cwd=cwd)


def assert_one_error(proc, rc: int, *needles: str) -> str:
    assert proc.returncode == rc, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1, proc.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


ACCEPT = (
    "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, "
    "application/vnd.docker.distribution.manifest.v2+json"
)


def fetch_manifest(url: str) -> tuple[bytes, str]:
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": ACCEPT}), timeout=10) as resp:
        return resp.read(), resp.headers["Content-Type"]


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


# -- 1. push --sign-key of the real hip-runtime, checked with cosign by hand --------------------
@pytest.fixture(scope="module")
def pushed(hip_runtime_built, docker_client, local_registry, keys, tmp_path_factory):
    """hip-runtime tested into a state folder of its own and pushed signed from a copy of the project."""
    tmp = tmp_path_factory.mktemp("signed-push")
    matrix, state = copy_project(tmp), tmp / "state"
    proc = cli("--matrix", str(matrix), "--state-dir", str(state), "test", "--target", TARGET)
    assert proc.returncode == 0, proc.stdout[-3000:]
    key, pub, password = keys["ours"]
    registry = f"{local_registry}/signed{RUN}"
    # A wrong password first: one message, exit 2, and not one layer in the registry.
    refused = cli(
        "--matrix",
        str(matrix),
        "--state-dir",
        str(state),
        "push",
        "--target",
        TARGET,
        "--registry",
        registry,
        "--sign-key",
        str(key),
        password="wrong",
    )
    assert_one_error(refused, 2, "--sign-key", "COSIGN_PASSWORD")
    assert get_json(f"http://{local_registry}/v2/_catalog")["repositories"] == []
    not_a_key = cli(
        "--matrix",
        str(matrix),
        "--state-dir",
        str(state),
        "push",
        "--target",
        TARGET,
        "--registry",
        registry,
        "--sign-key",
        str(pub),
        password=password,
    )
    assert_one_error(not_a_key, 2, "--sign-key")
    started = time.monotonic()
    proc = cli(
        "--matrix",
        str(matrix),
        "--state-dir",
        str(state),
        "push",
        "--target",
        TARGET,
        "--registry",
        registry,
        "--sign-key",
        str(key),
        password=password,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(f"signed push of {TARGET}: {time.monotonic() - started:.1f} s")
    record = json.loads((matrix.parent / "published" / f"{TARGET}.json").read_text())
    yield record, state, matrix
    for tag in record["tags"]:
        ref = f"{record['repository']}:{tag}"
        if engine.image_id(docker_client, ref):
            docker_client.api.remove_image(ref)


def test_push_signs_and_cosign_verifies_signature_and_all_three_attestations(pushed, cosign, keys):
    record, state, _ = pushed
    _key, pub, _ = keys["ours"]
    pinned = f"{record['repository']}@{record['digest']}"
    assert sorted(record["signed"]["attestations"]) == sorted(att.COSIGN_TYPES)
    print("predicate bytes:", record["signed"]["predicate_bytes"])
    http = ["--allow-http-registry"]
    out = cosign.run(["verify", "--key", pub, "--insecure-ignore-tlog", *http, pinned]).stdout
    assert json.loads(out)[0]["critical"]["image"]["docker-manifest-digest"] == record["digest"]
    statements = {}
    for kind in ("cyclonedx", "slsaprovenance1", att.TEST_RESULT):
        out = cosign.run(
            ["verify-attestation", "--key", pub, "--type", kind, "--insecure-ignore-tlog", *http, pinned]
        ).stdout
        st = cosigns.decode_envelope(out.splitlines()[0])
        assert st["subject"][0]["digest"]["sha256"] == record["digest"].split(":")[1]
        statements[st["predicateType"]] = st["predicate"]
    assert set(statements) == {att.SBOM, att.PROVENANCE, att.TEST_RESULT}
    result = statements[att.TEST_RESULT]
    assert result["result"] in ("PASSED", "WARNED")
    config = {c["name"]: c for c in result["configuration"]}
    assert "sha256:" + config["image-config"]["digest"]["sha256"] == record["image_id"]
    assert config["suites"]["annotations"]["target"] == TARGET
    # every "not GPU-verified" suite is warned, never passed
    recorded = suite_runs.recorded(state, record["image_id"])
    ngv = [s for s, o in recorded.suites.items() if o.status == suite_runs.SuiteStatus.NOT_GPU_VERIFIED]
    assert sorted(line.split(":")[0] for line in result["warnedTests"]) == sorted(ngv)
    prov = statements[att.PROVENANCE]["buildDefinition"]
    assert prov["externalParameters"]["target"] == TARGET
    assert prov["internalParameters"]["content_hash"] == record["content_hash"]
    assert any(d["uri"].startswith("pkg:deb/debian/libamdhip64-5@") for d in prov["resolvedDependencies"])
    assert statements[att.SBOM]["metadata"]["component"]["version"] == record["image_id"]


def test_verify_prints_what_is_attested_and_refuses_another_key(pushed, keys):
    record, _, _ = pushed
    ref = f"{record['repository']}:{record['tags'][0]}"
    proc = cli("verify", ref, "--key", str(keys["ours"][1]), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = json.loads(proc.stdout)
    assert shown["digest"] == record["digest"] and shown["config_digest"] == record["image_id"]
    assert shown["provenance"]["lock_sha256"] and shown["sbom"]["components"] > 0
    text = cli("verify", ref, "--key", str(keys["ours"][1]))
    assert text.returncode == 0 and "suites:" in text.stdout and "source commit" in text.stdout
    other = cli("verify", ref, "--key", str(keys["other"][1]))
    assert_one_error(other, 1, "not signed by the key")


def test_pull_by_reference_from_an_empty_folder_with_the_installed_command(
    pushed,
    installed,
    keys,  # noqa: F811
    docker_client,
    tmp_path,
):
    record, _, _ = pushed
    empty = tmp_path / "empty"
    empty.mkdir()
    ref = f"{record['repository']}:{record['tags'][0]}"
    proc = rocmforge(
        installed, "--state-dir", str(tmp_path / "fresh-state"), "pull", ref, "--key", str(keys["ours"][1]), cwd=empty
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert engine.image_id(docker_client, ref) == record["image_id"]
    assert not any(empty.iterdir())


# Quick-start lines that do not run here, each with why. Every other line runs as written.
NOT_RUN_HERE = {
    "pipx install .": "the installed fixture is that install (pip, no network for pipx's own venv)",
    "rocmforge verify-repro --target hip-runtime": "optional in the README; test_verify_repro.py runs it",
}


def about_this_hosts_gpu(words: tuple[str, ...]) -> bool:
    return words[1] == "run" or (words[1] == "doctor" and "--rocminfo" not in words)


def test_the_readme_quick_start_as_written_from_an_empty_folder(
    pushed,
    installed,
    keys,  # noqa: F811
    tmp_path,
):
    """The README's three quick-start paths, each line run by bash as a newcomer pastes it, with the
    installed `rocmforge` first on PATH, in a folder that holds only what the lines name (the
    publisher's cosign.pub, a rocminfo output saved.txt); REF is the signed push's tag, and the
    matrix (path 1) comes from $ROCMFORGE_MATRIX, as the README says. On a host without /dev/kfd,
    doctor exits 1 naming it and the GEMM smoke reports no GPU: the lines still ran as written."""
    record, _, matrix = pushed
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.copy(keys["ours"][1], empty / "cosign.pub")
    shutil.copy(FIXTURES / "rocminfo" / "handwritten" / "mi210.txt", empty / "saved.txt")
    gpu = Path("/dev/kfd").exists()
    env = {
        **os.environ,
        "PATH": f"{installed / 'bin'}:{os.environ['PATH']}",
        "PYTHONPATH": str(installed),
        "ROCMFORGE_MATRIX": str(matrix),
        "COLUMNS": "100",
    }
    ran = []
    for line in quickstart.lines():
        if line.text.split("  #")[0].strip() in NOT_RUN_HERE:
            continue
        if line.words[0].startswith("REF="):  # the example's registry is this test's
            env["REF"] = f"{record['repository']}:{record['tags'][0]}"
            continue
        proc = subprocess.run(["bash", "-c", line.text], cwd=empty, env=env, capture_output=True, text=True)
        shown = f"{line.text}\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        ran.append(line.text)
        assert "Traceback" not in proc.stderr, shown
        assert "build.py" not in proc.stdout + proc.stderr, shown  # it names itself as invoked
        if gpu or not about_this_hosts_gpu(line.words):
            assert proc.returncode == 0, shown
        elif line.words[1] == "doctor":
            assert proc.returncode == 1 and "/dev/kfd" in proc.stdout + proc.stderr, shown
        else:
            assert '"status": "no-gpu"' in proc.stdout and "WITHOUT a GPU" in proc.stderr, shown
        if "--json" in line.words:
            json.loads(proc.stdout)
    print("\n".join(f"ran: {t}" for t in ran))
    assert len(ran) == len(quickstart.lines()) - len(NOT_RUN_HERE) - 1  # every line but those (and REF=)
    assert sorted(p.name for p in empty.iterdir()) == ["cosign.pub", "saved.txt"]


# -- 1b. the variants: one index, every entry signed, the host picks ----------------------------


def test_the_variants_are_published_as_one_index_of_signed_images(pushed, keys, cosign):
    record, _, _ = pushed
    assert [v["archs"] for v in record["variants"]] == [["gfx90a"], ["gfx1100"]]
    index_ref = f"{record['repository']}:{record['index']['tag']}"
    raw, media_type = fetch_manifest(
        f"http://{record['repository'].replace('/', '/v2/', 1)}/manifests/{record['index']['tag']}"
    )
    print(f"{index_ref} as the registry serves it ({media_type}):\n{raw.decode()}")
    index = json.loads(raw)
    assert media_type == "application/vnd.oci.image.index.v1+json"
    images = [record] + record["variants"]
    assert [m["digest"] for m in index["manifests"]] == [i["digest"] for i in images]
    assert [m["annotations"]["io.rocmforge.archs"] for m in index["manifests"]] == [
        "gfx90a,gfx1100",
        "gfx90a",
        "gfx1100",
    ]
    for image in images:  # each entry is signed and carries its own three statements
        assert sorted(image["signed"]["attestations"]) == sorted(att.COSIGN_TYPES)
        pinned = f"{record['repository']}@{image['digest']}"
        out = cosign.run(
            ["verify", "--key", keys["ours"][1], "--insecure-ignore-tlog", "--allow-http-registry", pinned]
        ).stdout
        assert json.loads(out)[0]["critical"]["image"]["docker-manifest-digest"] == image["digest"]
    proc = cli("verify", index_ref, "--key", str(keys["ours"][1]), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = json.loads(proc.stdout)
    assert shown["index"] == record["index"]["digest"]
    assert [(i["config_digest"], i["archs"], i["variant"]) for i in shown["images"]] == [
        (i["image_id"], i["archs"], n > 0) for n, i in enumerate(images)
    ]
    assert [i["provenance"]["target"] for i in shown["images"]] == [TARGET] * 3


@pytest.mark.parametrize(
    "host, archs",
    [
        (("--host-root", "hosts/dkms-6.4-w7900"), ["gfx1100"]),  # a W7900
        (("--rocminfo", "rocminfo/handwritten/mi210.txt"), ["gfx90a"]),  # an MI210
        (("--rocminfo", "rocminfo/handwritten/w7900-with-igpu-first.txt"), ["gfx1100"]),  # dGPU beside an iGPU
        (("--rocminfo", "rocminfo/handwritten/mi210.txt", "--arch", "gfx1100"), ["gfx1100"]),  # --arch wins
        (("--rocminfo", "rocminfo/handwritten/mi300x-multi.txt"), None),  # no image has gfx942
    ],
    ids=["w7900", "mi210", "w7900-and-igpu", "arch-override", "mi300x-refused"],
)
def test_pull_by_reference_picks_the_image_for_the_hosts_gpus(
    pushed, keys, docker_client, tmp_path, monkeypatch, host, archs
):
    record, _, _ = pushed
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    images = [record] + record["variants"]
    index_ref = f"{record['repository']}:{record['index']['tag']}"
    for image in images:  # as on a host that never had them
        for tag in [record["index"]["tag"]] + image["tags"]:
            ref = f"{record['repository']}:{tag}"
            if engine.image_id(docker_client, ref):
                docker_client.api.remove_image(ref)
    saved = [str(FIXTURES / a) if "/" in a else a for a in host]
    proc = run_cli(
        "--state-dir", str(tmp_path / "state"), "pull", index_ref, "--key", str(keys["ours"][1]), *saved, cwd=tmp_path
    )
    if archs is None:
        error = assert_one_error(proc, 1, "no image has code for gfx942")
        for image in images:
            assert image["digest"][:19] in error  # the list of what exists
        assert engine.image_id(docker_client, index_ref) is None
        return
    assert proc.returncode == 0, proc.stderr[-3000:]
    picked = next(i for i in images if i["archs"] == archs)
    shown = json.loads(proc.stdout)
    assert shown["picked"]["archs"] == archs and shown["picked"]["digest"] == picked["digest"]
    assert shown["config_digest"] == picked["image_id"]
    assert engine.image_id(docker_client, index_ref) == picked["image_id"]
    assert f"rocmforge/{TARGET}:{record['index']['tag']}-{archs[0]}" in shown["local_tags"]
    assert f"image: {record['repository']}@{picked['digest'][:19]} (variant: {archs[0]}" in proc.stderr


def test_an_index_that_misnames_an_entrys_archs_is_refused(pushed, keys, docker_client, tmp_path, monkeypatch):
    """The annotation is not signed: someone with the registry's write access lists the gfx90a
    variant as gfx1100. A W7900 picks it, and the signed image's own label refuses it."""
    record, _, _ = pushed
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    client = docker_client
    forged_tag = f"forged-{RUN}"
    imageindex.push(
        client,
        record["repository"],
        forged_tag,
        [(record["digest"], ("gfx90a", "gfx1100")), (record["variants"][0]["digest"], ("gfx1100",))],
    )
    ref = f"{record['repository']}:{forged_tag}"
    proc = run_cli(
        "--state-dir",
        str(tmp_path / "state"),
        "pull",
        ref,
        "--key",
        str(keys["ours"][1]),
        "--rocminfo",
        str(FIXTURES / "rocminfo/handwritten/w7900-with-igpu-first.txt"),
        cwd=tmp_path,
    )
    assert_one_error(
        proc, 1, "the index names it for gfx1100, but the signed image is labelled io.rocmforge.archs=gfx90a"
    )
    assert engine.image_id(client, ref) is None


def test_pull_by_target_takes_the_variant_of_the_saved_gpus(pushed, keys, docker_client, monkeypatch):
    record, state, matrix = pushed
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    proc = cli(
        "--matrix",
        str(matrix),
        "--state-dir",
        str(state),
        "pull",
        "--target",
        TARGET,
        "--key",
        str(keys["ours"][1]),
        "--rocminfo",
        str(FIXTURES / "rocminfo/handwritten/mi210.txt"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    gfx90a = record["variants"][0]
    assert got["picked"]["image_id"] == gfx90a["image_id"] and got["picked"]["archs"] == ["gfx90a"]
    assert got["local_tags"] == [f"rocmforge/{TARGET}:{t}" for t in gfx90a["tags"]]
    assert engine.image_id(docker_client, got["local_tags"][1]) == gfx90a["image_id"]


@pytest.fixture(scope="module")
def host_cosign(docker_client, cosign, tmp_path_factory):
    """The tools image's cosign copied onto this host, as a distribution's package would put it on PATH."""
    if cosign.mode != "image":
        return cosign.program
    folder = tmp_path_factory.mktemp("host-cosign")
    container = docker_client.containers.create(cosign.program)
    try:
        stream, _ = container.get_archive("/usr/bin/cosign")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            tar.extractall(folder)
    finally:
        container.remove()
    return folder / "cosign"


def test_verify_with_cosign_on_the_host_path(pushed, keys, host_cosign):
    record, _, _ = pushed
    proc = run_cli(
        "verify",
        f"{record['repository']}@{record['digest']}",
        "--key",
        str(keys["ours"][1]),
        "--json",
        env={cosigns.ENV: str(host_cosign)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["config_digest"] == record["image_id"]
    assert cosigns.host(str(host_cosign)).mode == "host"


def test_a_second_signed_push_replaces_its_statements(pushed, keys, cosign):
    record, state, matrix = pushed
    key, pub, password = keys["ours"]
    # A verify-repro recorded since: the provenance now differs (it carries that as a byproduct).
    (state / "checks").mkdir(exist_ok=True)
    (state / "checks" / f"repro-{TARGET}.json").write_text(
        json.dumps(
            {
                "target": TARGET,
                "identical": True,
                "image_ids": [record["image_id"]] * 2,
                "checked": "2026-01-01T00:00:00Z",
            }
        )
    )
    proc = cli(
        "--matrix",
        str(matrix),
        "--state-dir",
        str(state),
        "push",
        "--target",
        TARGET,
        "--registry",
        record["registry"],
        "--sign-key",
        str(key),
        password=password,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["digest"] == record["digest"]
    pinned = f"{record['repository']}@{record['digest']}"
    ours = cosigns.Identity(key=pub)
    provs = [st["predicate"] for st in cosign.verify_attestations(ours, pinned, "slsaprovenance1", http=True)]
    assert any(p["runDetails"].get("byproducts") for p in provs)
    if not cosign.signing_config:  # cosign 2 replaces; cosign 3 adds a bundle (each is checked)
        for kind in att.COSIGN_TYPES.values():
            assert len(cosign.verify_attestations(ours, pinned, kind, http=True)) == 1, kind
    assert cli("verify", pinned, "--key", str(pub)).returncode == 0


def test_pull_by_target_checks_the_signature_too(pushed, keys):
    record, state, matrix = pushed
    args = ("--matrix", str(matrix), "--state-dir", str(state), "pull", "--target", TARGET, "--key")
    proc = cli(*args, str(keys["ours"][1]))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["digest"] == record["digest"]
    assert_one_error(cli(*args, str(keys["other"][1])), 1, "not signed by the key")


# -- 2. small signed images: each refusal -------------------------------------------------------
class Small:
    """Tiny labelled images pushed straight through the engine and signed or attested with cosign by
    hand, as another tool (or an attacker with the registry's write access) would."""

    def __init__(self, client, cosign, registry: str) -> None:
        self.client, self.cosign, self.registry = client, cosign, registry
        self.images: set[str] = set()

    def image(self, name: str) -> tuple[str, str, str, str]:
        """Builds and pushes an image of target `name`: (repository, tag, digest, image ID)."""
        content = uuid.uuid4().hex * 2
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for fname, data in (("Dockerfile", b"FROM scratch\nCOPY marker /marker\n"), ("marker", content.encode())):
                info = tarfile.TarInfo(fname)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        buf.seek(0)
        labels = {"io.rocmforge.target": name, "io.rocmforge.content-hash": content, "io.rocmforge.stack": "s"}
        repository, tag = f"{self.registry}/{name}", f"content-{content[:12]}"
        image_id = None
        # Nameless, an image with rocmforge's label is a leftover to `clean` (the other test lane runs
        # it): built as a build on this engine, and named as it is made.
        with steplock.building():
            chunks = self.client.api.build(
                fileobj=buf, custom_context=True, labels=labels, rm=True, decode=True, tag=f"{repository}:{tag}"
            )
            for chunk in chunks:
                assert "error" not in chunk, chunk
                image_id = (chunk.get("aux") or {}).get("ID") or image_id
        self.images.add(image_id)
        return (repository, tag, self.push(image_id, repository, tag), image_id)

    def push(self, image_id: str, repository: str, tag: str) -> str:
        self.client.api.tag(image_id, repository, tag)
        digest = None
        for chunk in self.client.api.push(repository, tag=tag, stream=True, decode=True):
            assert "error" not in chunk, chunk
            digest = (chunk.get("aux") or {}).get("Digest") or digest
        return digest  # the local tag stays: it is the image's only name until the test forgets it

    def statements(self, name: str, image_id: str, content: str, result: str = "passed") -> dict:
        suites = {
            s: {"status": result if s == "versions" else "passed", "detail": "1 check(s)"}
            for s in ("contents", "linkage", "config", "versions", "archs")
        }
        report = suite_runs.SuitesReport.from_json(
            {"image": name, "image_id": image_id, "target": name, "ok": result == "passed", "suites": suites}
        )
        return {
            att.SBOM: {
                "bomFormat": "CycloneDX",
                "specVersion": "1.5",
                "version": 1,
                "components": [],
                "metadata": {"component": {"type": "container", "name": name, "version": image_id}},
            },
            att.PROVENANCE: {
                "buildDefinition": {
                    "buildType": att.BUILD_TYPE,
                    "externalParameters": {"target": name},
                    "internalParameters": {"content_hash": content},
                    "resolvedDependencies": [],
                },
                "runDetails": {"builder": {"id": att.BUILDER_ID}},
            },
            att.TEST_RESULT: att.test_result(
                report, archs=["gfx90a"], host="test", version="t", config_digest=image_id
            ),
        }

    def sign(self, key, password: str, pinned: str, statements: dict, folder: Path, sign: bool = True) -> None:
        def run():
            offline = ["--tlog-upload=false"] + (["--use-signing-config=false"] if self.cosign.signing_config else [])
            if sign:
                self.cosign.run(["sign", "--yes", "--key", key, *offline, "--allow-http-registry", pinned])
            for uri, predicate in statements.items():
                path = folder / f"{uuid.uuid4().hex}.json"
                path.write_text(json.dumps(predicate))
                self.cosign.run(
                    [
                        "attest",
                        "--yes",
                        "--key",
                        key,
                        *offline,
                        "--allow-http-registry",
                        "--type",
                        att.COSIGN_TYPES[uri],
                        "--predicate",
                        path,
                        pinned,
                    ]
                )

        with_password(password, run)

    def signed(self, name: str, key, password: str, folder: Path, **kw) -> tuple[str, str, str, str]:
        repository, tag, digest, image_id = self.image(name)
        content = self.client.images.get(image_id).labels["io.rocmforge.content-hash"]
        self.sign(key, password, f"{repository}@{digest}", self.statements(name, image_id, content, **kw), folder)
        self.release(key, password, repository, {tag: digest})
        return repository, tag, digest, image_id

    def release(self, key, password: str, repository: str, tags: dict, valid_for: int = 3600):
        """The repository's next release record, naming each tag's digest as the main image, signed
        by rocmforge's own code as push signs it."""
        named = {t: releaserecord.Tagged(d, "main", ()) for t, d in tags.items()}
        return with_password(
            password,
            lambda: releasestore.publish(
                self.client, self.cosign, key, repository, named, valid_for=valid_for, http=True
            ),
        )

    def cleanup(self) -> None:
        for image_id in self.images:
            try:
                self.client.images.remove(image_id, force=True)
            except Exception:  # already removed by the test
                pass


@pytest.fixture(scope="module")
def small(docker_client, cosign, local_registry):
    s = Small(docker_client, cosign, f"{local_registry}/small{RUN}")
    yield s
    s.cleanup()


def name() -> str:
    return f"rfsig-{uuid.uuid4().hex[:8]}"


def forget(client, image_id: str) -> None:
    client.images.remove(image_id, force=True)


def assert_refused(client, ref: str, pub: Path, image_id: str, *needles: str) -> None:
    """pull REF refused: exit 1, one message, nothing tagged and no image left behind."""
    forget(client, image_id)
    proc = cli("pull", ref, "--key", str(pub))
    print(assert_one_error(proc, 1, *needles))
    assert engine.image_id(client, image_id) is None, "the refused pull left the image"
    assert not [t for img in client.api.images() for t in img.get("RepoTags") or [] if ref.split("/")[-1] in t]


def test_a_good_signed_image_is_pulled_and_tagged(small, keys, docker_client, tmp_path):
    key, pub, password = keys["ours"]
    n = name()
    repository, tag, digest, image_id = small.signed(n, key, password, tmp_path)
    forget(docker_client, image_id)
    proc = cli("pull", f"{repository}:{tag}", "--key", str(pub), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert engine.image_id(docker_client, f"{repository}:{tag}") == image_id
    assert engine.image_id(docker_client, f"rocmforge/{n}:{tag}") == image_id
    by_digest = cli("verify", f"{repository}@{digest}", "--key", str(pub))
    assert by_digest.returncode == 0, by_digest.stderr


def test_verify_accepts_a_plain_cosign_signature_and_refuses_another_key(small, keys, tmp_path):
    """The signature and statements above were made by plain `cosign sign` / `cosign attest`."""
    key, pub, password = keys["ours"]
    repository, tag, _digest, _ = small.signed(name(), key, password, tmp_path)
    assert cli("verify", f"{repository}:{tag}", "--key", str(pub)).returncode == 0
    assert_one_error(cli("verify", f"{repository}:{tag}", "--key", str(keys["other"][1])), 1, "not signed by the key")


def test_refuses_an_unsigned_image(small, keys, docker_client):
    repository, tag, digest, image_id = small.image(name())
    small.release(keys["ours"][0], keys["ours"][2], repository, {tag: digest})
    assert_refused(docker_client, f"{repository}:{tag}", keys["ours"][1], image_id, "is not signed")


def test_refuses_an_image_signed_by_another_key(small, keys, docker_client, tmp_path):
    key, _pub, password = keys["other"]
    repository, tag, _digest, image_id = small.signed(name(), key, password, tmp_path)
    assert_refused(docker_client, f"{repository}:{tag}", keys["ours"][1], image_id, "not signed by the key")


def test_refuses_a_tag_moved_to_another_signed_image(small, keys, docker_client, tmp_path):
    key, pub, password = keys["ours"]
    n = name()
    repository, tag, _digest, image_id = small.signed(n, key, password, tmp_path)
    _r, _t, _d, other_id = small.signed(n, key, password, tmp_path)  # same target, other content
    small.push(other_id, repository, tag)  # ... now under the first tag
    forget(docker_client, image_id)
    assert_refused(docker_client, f"{repository}:{tag}", pub, other_id, "tag was moved")


def test_refuses_an_attestation_for_another_digest(either, keys, docker_client, tmp_path):
    key, pub, password = keys["ours"]
    n = name()
    repository, tag, digest, image_id = either.image(n)
    _r, _t, other_digest, other_id = either.signed(n, key, password, tmp_path)
    either.sign(key, password, f"{repository}@{digest}", {}, tmp_path)  # a good signature, no statements
    either.release(key, password, repository, {tag: digest})
    # The other image's attestations, copied onto this digest's attestation tag in the registry.
    base = f"http://{repository.split('/', 1)[0]}/v2/{repository.split('/', 1)[1]}/manifests"
    if either.cosign.signing_config:
        # cosign 3: Sigstore bundles listed in an index under the OCI referrers tag sha256-<hex> (this
        # registry has no referrers API); this digest's own signature stays, the other's statements join it
        index = json.loads(fetch_manifest(f"{base}/sha256-{digest[7:]}")[0])
        for entry in json.loads(fetch_manifest(f"{base}/sha256-{other_digest[7:]}")[0])["manifests"]:
            kind = json.loads(fetch_manifest(f"{base}/{entry['digest']}")[0])["annotations"]
            if kind["dev.sigstore.bundle.predicateType"] != "https://sigstore.dev/cosign/sign/v1":
                index["manifests"].append(entry)
        manifest, media, tag_name = json.dumps(index).encode(), index["mediaType"], f"sha256-{digest[7:]}"
    else:
        # cosign 2: all of an image's attestations are layers of one manifest tagged sha256-<hex>.att
        manifest, media = fetch_manifest(f"{base}/sha256-{other_digest[7:]}.att")
        tag_name = f"sha256-{digest[7:]}.att"
    put = urllib.request.Request(f"{base}/{tag_name}", data=manifest, method="PUT", headers={"Content-Type": media})
    urllib.request.urlopen(put).close()
    forget(docker_client, other_id)
    # cosign 3 passes over bundles whose subject is another digest; rocmforge finds them and names it
    assert_refused(docker_client, f"{repository}:{tag}", pub, image_id, f"signed for another digest ({other_digest})")


def test_refuses_a_missing_attestation(small, keys, docker_client, tmp_path):
    key, pub, password = keys["ours"]
    n = name()
    repository, tag, digest, image_id = small.image(n)
    content = docker_client.images.get(image_id).labels["io.rocmforge.content-hash"]
    statements = small.statements(n, image_id, content)
    del statements[att.TEST_RESULT]
    small.sign(key, password, f"{repository}@{digest}", statements, tmp_path)
    small.release(key, password, repository, {tag: digest})
    assert_refused(docker_client, f"{repository}:{tag}", pub, image_id, "missing attestation", att.TEST_RESULT)


def test_refuses_suites_that_did_not_pass(small, keys, docker_client, tmp_path):
    key, pub, password = keys["ours"]
    repository, tag, _digest, image_id = small.signed(name(), key, password, tmp_path, result="failed")
    assert_refused(docker_client, f"{repository}:{tag}", pub, image_id, "suites did not pass", "versions")


# -- 2b. what the signatures alone never said: which image a tag names today ---------------------
def manifests_url(repository: str) -> str:
    return f"http://{repository.split('/', 1)[0]}/v2/{repository.split('/', 1)[1]}/manifests"


def put_raw(repository: str, tag: str, body: bytes, media_type: str) -> None:
    req = urllib.request.Request(
        f"{manifests_url(repository)}/{tag}", data=body, method="PUT", headers={"Content-Type": media_type}
    )
    urllib.request.urlopen(req).close()


def both_refuse(client, ref: str, pub: Path, *needles: str) -> None:
    """verify and pull REF --key: exit 1, one message naming it, and no local tag of REF."""
    print(assert_one_error(cli("verify", ref, "--key", str(pub)), 1, *needles))
    if engine.image_id(client, ref):
        client.api.remove_image(ref)  # an earlier test's pull: only this name goes
    print(assert_one_error(cli("pull", ref, "--key", str(pub)), 1, *needles))
    assert engine.image_id(client, ref) is None, "the refused pull tagged something"


def test_a_tag_rolled_back_to_an_older_signed_image_is_refused_and_so_is_an_older_record(
    either, keys, docker_client, tmp_path
):
    key, pub, password = keys["ours"]
    n = name()
    repository, old_tag, old_digest, old_id = either.signed(n, key, password, tmp_path)
    either.push(old_id, repository, "stable")
    either.release(key, password, repository, {"stable": old_digest, old_tag: old_digest})  # serial 2
    old_record = fetch_manifest(f"{manifests_url(repository)}/{releasestore.TAG}")
    _r, new_tag, new_digest, new_id = either.image(n)
    content = docker_client.images.get(new_id).labels["io.rocmforge.content-hash"]
    either.sign(key, password, f"{repository}@{new_digest}", either.statements(n, new_id, content), tmp_path)
    either.push(new_id, repository, "stable")
    either.release(key, password, repository, {"stable": new_digest, new_tag: new_digest})  # serial 3
    ok = cli("verify", f"{repository}:stable", "--key", str(pub), "--json")
    assert ok.returncode == 0, ok.stderr[-3000:]
    release = json.loads(ok.stdout)["release"]
    assert (release["serial"], release["status"]) == (3, "current")
    forget(docker_client, new_id)
    forget(docker_client, old_id)
    # The older image, genuinely signed, put back under the tag
    put_raw(repository, "stable", *fetch_manifest(f"{manifests_url(repository)}/{old_digest}"))
    both_refuse(docker_client, f"{repository}:stable", pub, f"serves {old_digest}", f"names {new_digest}")
    # By digest it is superseded: refused unless asked for
    both_refuse(docker_client, f"{repository}@{old_digest}", pub, "is superseded", "--allow-superseded")
    allowed = cli("verify", f"{repository}@{old_digest}", "--key", str(pub), "--allow-superseded", "--json")
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    assert json.loads(allowed.stdout)["release"]["status"] == "superseded"
    # The registry serves the older record again (its signature is still genuine): rolled back
    put_raw(repository, releasestore.TAG, *old_record)
    both_refuse(docker_client, f"{repository}:{new_tag}", pub, "rolled back", "serial 2 (", "older than serial 3 (")


def test_an_expired_record_is_refused(either, keys, docker_client, tmp_path):
    key, pub, password = keys["ours"]
    repository, tag, digest, image_id = either.signed(name(), key, password, tmp_path)
    record = either.release(key, password, repository, {tag: digest}, valid_for=1)
    forget(docker_client, image_id)
    time.sleep(2)  # past its expiry
    both_refuse(docker_client, f"{repository}:{tag}", pub, f"expired on {record.expires}")


def test_a_record_without_a_valid_signature_or_cut_off_is_refused(either, keys, docker_client, tmp_path):
    key, pub, password = keys["ours"]
    other_key, _, other_password = keys["other"]
    repository, tag, digest, image_id = either.signed(name(), key, password, tmp_path)
    forget(docker_client, image_id)
    either.release(other_key, other_password, repository, {tag: digest})  # signed, by someone else
    both_refuse(docker_client, f"{repository}:{tag}", pub, "release record", "is not signed by the key")
    # A record cut off in the middle of its JSON, signed with the right key
    good = releaserecord.make(
        repository, 9, {tag: releaserecord.Tagged(digest, "main", ())}, now=time.time(), valid_for=3600
    )
    doc = json.loads(releasestore.manifest(good))
    doc["annotations"][releasestore.ANNOTATION] = good.dumps()[:-20]
    body = json.dumps(doc).encode()
    put_raw(repository, releasestore.TAG, body, imageindex.OCI_INDEX)
    either.sign(key, password, f"{repository}@sha256:{hashlib.sha256(body).hexdigest()}", {}, tmp_path)
    both_refuse(docker_client, f"{repository}:{tag}", pub, "release record", "cut off or not JSON")


def test_attestations_without_a_signature_are_not_a_signature(either, keys, docker_client, tmp_path):
    key, pub, password = keys["ours"]
    repository, tag, digest, image_id = either.signed(name(), key, password, tmp_path)
    forget(docker_client, image_id)
    base = manifests_url(repository)
    if either.cosign.signing_config:  # cosign 3: drop the signature bundle, keep the attestation bundles
        index = json.loads(fetch_manifest(f"{base}/sha256-{digest[7:]}")[0])
        kinds = {
            e["digest"]: json.loads(fetch_manifest(f"{base}/{e['digest']}")[0])["annotations"][
                "dev.sigstore.bundle.predicateType"
            ]
            for e in index["manifests"]
        }
        index["manifests"] = [
            e for e in index["manifests"] if kinds[e["digest"]] != "https://sigstore.dev/cosign/sign/v1"
        ]
        assert len(index["manifests"]) == 3
        put_raw(repository, f"sha256-{digest[7:]}", json.dumps(index).encode(), index["mediaType"])
    else:  # cosign 2: delete the .sig manifest, keep .att
        sig = urllib.request.urlopen(
            urllib.request.Request(f"{base}/sha256-{digest[7:]}.sig", method="HEAD", headers={"Accept": ACCEPT})
        ).headers["Docker-Content-Digest"]
        urllib.request.urlopen(urllib.request.Request(f"{base}/{sig}", method="DELETE")).close()
    both_refuse(docker_client, f"{repository}:{tag}", pub, "is not signed")


@pytest.fixture(scope="module")
def pushed3(pushed, cosign3, keys, docker_client, local_registry, tmp_path_factory):
    """The same tested hip-runtime and its variants pushed signed by sid's cosign 3 (bundles under the
    referrers tag) into a repository of its own; its layers are in the registry already, so mostly
    manifests, bundles and the release record travel. A copy of the project keeps its publish record."""
    _, state, _ = pushed
    matrix = copy_project(tmp_path_factory.mktemp("signed-push3"))
    key, _pub, password = keys["ours"]
    args = ("--matrix", str(matrix), "--state-dir", str(state), "push", "--target", TARGET, "--registry")
    env = {cosigns.PASSWORD_ENV: password, cosigns.ENV: cosign3.program}
    started = time.monotonic()
    proc = run_cli(*args, f"{local_registry}/signed3{RUN}", "--sign-key", str(key), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(
        f"signed push of {TARGET} by {cosign3.describe()}, layers in the registry: {time.monotonic() - started:.1f} s"
    )
    record = json.loads((matrix.parent / "published" / f"{TARGET}.json").read_text())
    yield record, state, matrix
    for tag in record["tags"]:
        if engine.image_id(docker_client, f"{record['repository']}:{tag}"):
            docker_client.api.remove_image(f"{record['repository']}:{tag}")


def test_a_push_signed_by_cosign3_verifies_with_cosign3_by_hand_and_with_verify(pushed3, cosign3, keys, monkeypatch):
    record, _, _ = pushed3
    pub = keys["ours"][1]
    http = ["--insecure-ignore-tlog", "--allow-http-registry"]
    for image in [record] + record["variants"]:
        pinned = f"{record['repository']}@{image['digest']}"
        out = cosign3.run(["verify", "--key", pub, *http, pinned]).stdout
        assert json.loads(out)[0]["critical"]["image"]["docker-manifest-digest"] == image["digest"]
        for kind in att.COSIGN_TYPES.values():
            line = cosign3.run(["verify-attestation", "--key", pub, "--type", kind, *http, pinned]).stdout
            assert (
                cosigns.decode_envelope(line.splitlines()[0])["subject"][0]["digest"]["sha256"] == image["digest"][7:]
            )
    monkeypatch.setenv(cosigns.ENV, cosign3.program)
    proc = cli("verify", f"{record['repository']}:{record['index']['tag']}", "--key", str(pub), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = json.loads(proc.stdout)
    assert [i["digest"] for i in shown["images"]] == [i["digest"] for i in [record] + record["variants"]]
    assert shown["release"]["status"] == "current"


@pytest.fixture(params=["default", "cosign3"])
def restored_index(request, monkeypatch):
    """The pushed index (signed and checked by the module's cosign, the pinned 2.5.0 unless
    ROCMFORGE_COSIGN says otherwise, or by sid's cosign 3), put back as it was after a test rewrote it."""
    if request.param == "cosign3":
        pushed = request.getfixturevalue("pushed3")
        monkeypatch.setenv(cosigns.ENV, request.getfixturevalue("cosign3").program)
    else:
        pushed = request.getfixturevalue("pushed")
    record = pushed[0]
    url = f"{manifests_url(record['repository'])}/{record['index']['tag']}"
    raw, media = fetch_manifest(url)
    yield record, json.loads(raw)
    put_raw(record["repository"], record["index"]["tag"], raw, media)


def test_a_variant_under_the_main_tag_is_refused(restored_index, keys, docker_client):
    record, _ = restored_index
    gfx90a = record["variants"][0]
    raw, media = fetch_manifest(f"{manifests_url(record['repository'])}/{gfx90a['digest']}")
    put_raw(record["repository"], record["index"]["tag"], raw, media)
    ref = f"{record['repository']}:{record['index']['tag']}"
    both_refuse(
        docker_client,
        ref,
        keys["ours"][1],
        f"the image reached through the main tag {record['index']['tag']} is the gfx90a variant",
    )


@pytest.mark.parametrize("change", ["swapped", "duplicated", "dropped"])
def test_pull_checks_the_whole_index_against_the_record(restored_index, keys, docker_client, change):
    record, index = restored_index
    entries = index["manifests"]
    if change == "swapped":
        entries[1]["annotations"], entries[2]["annotations"] = entries[2]["annotations"], entries[1]["annotations"]
        needle = "the index names it for gfx1100, but the signed image is labelled io.rocmforge.archs=gfx90a"
    elif change == "duplicated":
        entries.insert(1, dict(entries[0]))
        needle = "entry 1 of the index is attested as the main image"
    else:
        del entries[1:]
        needle = "missing: " + record["variants"][0]["digest"][:19]
    put_raw(record["repository"], record["index"]["tag"], json.dumps(index).encode(), index["mediaType"])
    ref = f"{record['repository']}:{record['index']['tag']}"
    # No GPU facts: the host takes the main image, and the index is still checked whole
    both_refuse(docker_client, ref, keys["ours"][1], needle)


def test_push_refresh_signs_the_record_again_and_cosign_verifies_it(pushed, keys, cosign):
    record, state, matrix = pushed
    key, pub, password = keys["ours"]
    before = json.loads((matrix.parent / "published" / f"{TARGET}.json").read_text())["release"]
    args = ("--matrix", str(matrix), "--state-dir", str(state), "push", "--target", TARGET, "--registry")
    proc = cli(*args, record["registry"], "--sign-key", str(key), "--refresh", "--valid-for", "2d", password=password)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = json.loads(proc.stdout)["release"]
    assert after["serial"] > before["serial"] and after["issued"] >= before["issued"]
    assert releaserecord.epoch_of(after["expires"]) - releaserecord.epoch_of(after["issued"]) == 2 * 86400
    digest = urllib.request.urlopen(
        urllib.request.Request(
            f"{manifests_url(record['repository'])}/{releasestore.TAG}", method="HEAD", headers={"Accept": ACCEPT}
        )
    ).headers["Docker-Content-Digest"]
    out = cosign.run(
        ["verify", "--key", pub, "--insecure-ignore-tlog", "--allow-http-registry", f"{record['repository']}@{digest}"]
    ).stdout
    assert json.loads(out)[0]["critical"]["image"]["docker-manifest-digest"] == digest
    shown = cli("verify", f"{record['repository']}:{record['index']['tag']}", "--key", str(pub), "--json")
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert json.loads(shown.stdout)["release"]["serial"] == after["serial"]
    bad = cli(*args, record["registry"], "--sign-key", str(key), "--valid-for", "soon", password=password)
    assert_one_error(bad, 2, "--valid-for")


# -- 3. the tools image: pinned, and the same image from the same pin ---------------------------
def test_the_tools_image_is_reproducible_and_its_pin_still_resolves(docker_client, base, tmp_path):  # noqa: F811
    from rocmforge.release import toolsimage
    from tests.conftest import sh

    pin = toolsimage.load_pin()
    debs = [toolsimage.fetch_deb(d, tmp_path / f"{d.package}.deb") for d in pin.debs]
    ids = {toolsimage.write_image(pin, debs, tmp_path / f"image{i}.tar") for i in range(2)}
    assert len(ids) == 1
    toolsimage.ensure(docker_client, pin)
    assert docker_client.images.get(pin.ref).id == ids.pop()
    # the archive's own index, signed by Debian, still names these exact files
    script = "apt-get update -qq >/dev/null && " + " && ".join(
        f"apt-cache show {d.package}={d.version} | grep -E '^(SHA256|Filename|Size):'" for d in pin.debs
    )
    rc, out = sh(docker_client, base, script)
    assert rc == 0, out
    for d in pin.debs:
        assert f"SHA256: {d.sha256}" in out and f"Filename: {d.filename}" in out and f"Size: {d.size}" in out
