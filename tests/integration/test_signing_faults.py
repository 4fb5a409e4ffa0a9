"""Signed pushes and verified pulls of a small ROCm target with a per-arch variant (the engine tests'
hip-runtime without rocBLAS: what fails here is the registry, whatever the layers hold; the real
hip-runtime's signed push is checked with cosign in test_signing.py) when the registry fails at the worst
moment: it goes down between the image push and the signature push, the user presses Ctrl-C (or
CI cancels the job with SIGTERM) while cosign attaches the statements, or its answers come back
cut off or garbled. The registry is Debian's docker-registry behind a small proxy of the test's
own (tests/registry_proxy.py), and each run is the command users type, so the real push, verify
and pull code paths meet each fault."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests import registry_proxy as rp
from tests.conftest import BUILD_PY, interruptible, run_cli
from tests.integration.test_engines import TARGET, probe_project, record_passed
from tests.integration.test_signing import assert_one_error, cli, cosign, keys  # noqa: F401  (fixtures)

pytestmark = pytest.mark.docker

RUN = uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def tested(docker_client, tmp_path_factory):
    """A project copy declaring the target with a gfx1100 variant, built, with the passed suite
    records push demands for each image in its own state folder (record_passed: the probe has no
    GEMM program by design)."""
    from rocmforge.render.plan import load_plan

    tmp = tmp_path_factory.mktemp("faults")
    matrix, state = probe_project(tmp, [["gfx1100"]]), tmp / "state"
    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "build", "--target", TARGET)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for tp in load_plan(matrix).images_of(TARGET):
        record_passed(matrix, state, docker_client.images.get(tp.content_tag).id, tp)
    return matrix, state


@pytest.fixture(scope="module")
def proxy(local_registry):
    p = rp.Proxy(local_registry)
    yield p
    p.close()


@pytest.fixture
def faults(proxy):
    """The test sets proxy.rule / on_answer; afterwards the registry is up and honest again."""
    yield proxy
    proxy.rule, proxy.on_answer, proxy.corrupt = (lambda r: None), (lambda r, s: None), rp.flip_middle
    proxy.held.clear()
    proxy.up()


def registry(proxy) -> str:
    return f"{proxy.address}/faults{RUN}"


def record_path(matrix: Path) -> Path:
    return matrix.parent / "published" / f"{TARGET}.json"


def bytes_of(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


def push_args(matrix: Path, state: Path, proxy, key: Path) -> list[str]:
    return [
        "--matrix",
        str(matrix),
        "--state-dir",
        str(state),
        "push",
        "--target",
        TARGET,
        "--registry",
        registry(proxy),
        "--sign-key",
        str(key),
    ]


def local_names(client, *prefixes: str) -> set[str]:
    """Every tag and digest reference in the engine under these names (other sessions' images on a
    shared engine are left out)."""
    names = set()
    for img in client.api.images(all=True):
        for ref in (img.get("RepoTags") or []) + (img.get("RepoDigests") or []):
            if ref.startswith(prefixes):
                names.add(f"{ref} {img['Id']}")
    return names


# -- 1. the registry goes down between the image push and the signature push ----------------------
def test_registry_down_after_the_image_push_is_not_published_and_a_rerun_completes(tested, faults, keys):
    matrix, state = tested
    key, pub, password = keys["ours"]
    before = bytes_of(record_path(matrix))
    manifests: list[str] = []
    pushed = threading.Event()

    def answered(request, status):
        # the engine's manifest PUTs, one per tag: the main image goes first, under its content tag
        # alone (its readable tag becomes the index once every variant is in), and is signed then
        if (
            request.method == "PUT"
            and "/manifests/" in request.path
            and not request.from_cosign
            and status.split(b" ")[1:2] == [b"201"]
        ):
            manifests.append(request.path)
            pushed.set()

    def rule(request):
        if request.from_cosign:
            pushed.wait()  # the main image is in the registry: it goes down before its signature
            return rp.DOWN
        return None

    faults.on_answer, faults.rule = answered, rule
    proc = cli(*push_args(matrix, state, faults, key), password=password)
    assert not faults.is_up and len(manifests) == 1, (manifests, proc.stderr[-2000:])
    error = assert_one_error(
        proc, 1, "was pushed, but signing and attesting it failed", "is not published", "Run the push again"
    )
    print(error)
    assert bytes_of(record_path(matrix)) == before
    faults.rule, faults.on_answer = (lambda r: None), (lambda r, s: None)
    faults.up()
    # what stands in the registry now is an unsigned image, and no release record (it is written
    # last, after every signature): refused, never trusted; the record is checked first
    tag = f"{registry(faults)}/{TARGET}:{manifests[0].rsplit('/', 1)[1]}"
    assert_one_error(cli("verify", tag, "--key", str(pub)), 1, "has no release record")
    rerun = cli(*push_args(matrix, state, faults, key), password=password)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    record = json.loads(record_path(matrix).read_text())
    assert record["signed"]["attestations"]
    ok = cli("verify", f"{record['repository']}:{record['tags'][1]}", "--key", str(pub), "--json")
    assert ok.returncode == 0, ok.stderr[-3000:]
    shown = json.loads(ok.stdout)  # the readable tag is the index: every entry verified
    assert shown["index"] == record["index"]["digest"]
    assert [i["digest"] for i in shown["images"]] == [record["digest"]] + [v["digest"] for v in record["variants"]]


# -- 2. Ctrl-C while cosign attaches the statements --------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_ctrl_c_during_the_attach_step_leaves_nothing_behind_and_a_rerun_completes(
    tested, faults, keys, docker_client, tmp_path, sig
):
    matrix, state = tested
    key, pub, password = keys["ours"]
    before = bytes_of(record_path(matrix))
    cosign_puts = []

    def rule(request):
        # cosign's second manifest PUT: the signature is in (cosign skips one it already holds) and
        # a statement is on its way; it is never answered, as if the registry hung.
        if request.from_cosign and request.method == "PUT" and "/manifests/" in request.path:
            cosign_puts.append(request.path)
            if len(cosign_puts) == 2:
                return rp.HOLD
        return None

    faults.rule = rule
    temp = tmp_path / "tmp"  # the process's temporary folder: what signing leaves shows here
    temp.mkdir()
    env = {**os.environ, "COLUMNS": "200", "COSIGN_PASSWORD": password, "TMPDIR": str(temp)}
    proc = subprocess.Popen(
        [sys.executable, str(BUILD_PY), *push_args(matrix, state, faults, key)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    while not faults.held.wait(1):
        assert proc.poll() is None, proc.communicate()  # it ended before reaching the attach step
    proc.send_signal(sig)
    out, err = proc.communicate()
    print(cosign_puts, err[-2000:])
    assert proc.returncode == 128 + sig, out[-2000:] + err[-3000:]
    message = "interrupted" if sig == signal.SIGINT else "interrupted by SIGTERM"
    assert "Traceback" not in err and err.strip().splitlines()[-1] == message, err
    assert bytes_of(record_path(matrix)) == before
    left = docker_client.containers.list(all=True, filters={"name": f"rocmforge-cosign-{proc.pid}-"})
    assert not left, [c.name for c in left]
    assert not list(temp.iterdir())
    assert not local_names(docker_client, registry(faults))  # the push's temporary tags are gone
    faults.rule = lambda r: None
    rerun = cli(*push_args(matrix, state, faults, key), password=password)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    record = json.loads(record_path(matrix).read_text())
    ok = cli("verify", f"{record['repository']}@{record['digest']}", "--key", str(pub))
    assert ok.returncode == 0, ok.stderr[-3000:]


# -- 3. answers cut off or garbled: refused, nothing tagged -----------------------------------------
@pytest.fixture(scope="module")
def signed(tested, proxy, keys, local_registry, cosign):  # noqa: F811
    """The signed push of the target (made here unless the tests above left one), and the registry
    paths of each document verify reads: {what: [path, ...]}."""
    matrix, state = tested
    key, _pub, password = keys["ours"]
    path = record_path(matrix)
    if not (path.exists() and json.loads(path.read_text()).get("signed")):
        proc = cli(*push_args(matrix, state, proxy, key), password=password)
        assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(path.read_text())
    return record, documents(local_registry, record, cosign)


def get(url: str) -> dict:
    accept = (
        "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, "
        "application/vnd.docker.distribution.manifest.v2+json"
    )
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": accept})) as resp:
        return json.loads(resp.read())


def documents(upstream: str, record: dict, cosign) -> dict[str, list[str]]:  # noqa: F811
    """Read straight from the registry (not through the proxy)."""
    name = record["repository"].split("/", 1)[1]
    v2 = f"/v2/{name}"
    digest = record["digest"]
    manifest = get(f"http://{upstream}{v2}/manifests/{digest}")
    out = {
        "tag": [f"{v2}/manifests/{record['tags'][1]}"],
        "image manifest": [f"{v2}/manifests/{digest}"],
        "image config": [f"{v2}/blobs/{manifest['config']['digest']}"],
    }
    sig_tag = f"sha256-{digest[7:]}"
    if cosign.signing_config:
        # cosign 3: Sigstore bundles listed in one index under the referrers tag
        sigs, atts = [], []
        for entry in get(f"http://{upstream}{v2}/manifests/{sig_tag}")["manifests"]:
            kind = (entry.get("annotations") or {}).get("dev.sigstore.bundle.predicateType", "")
            (sigs if kind == "https://sigstore.dev/cosign/sign/v1" else atts).append(entry["digest"])
        sig_manifests = [f"{v2}/manifests/{d}" for d in sigs]
        att_manifests = [f"{v2}/manifests/{d}" for d in atts]
    else:
        sig_manifests, att_manifests = [f"{v2}/manifests/{sig_tag}.sig"], [f"{v2}/manifests/{sig_tag}.att"]

    def layers(paths: list[str]) -> list[str]:
        return [f"{v2}/blobs/{layer['digest']}" for p in paths for layer in get(f"http://{upstream}{p}")["layers"]]

    out.update(
        {
            "signature manifest": sig_manifests,
            "signature": layers(sig_manifests),
            "attestation manifest": att_manifests,
            "attestations": layers(att_manifests),
        }
    )
    return out


def corrupt_document(request: rp.Request, body: bytes) -> bytes:
    """A manifest loses its first layer: one hex digit of that digest changes (the same length, still
    JSON). A blob gets one byte changed."""
    if "/manifests/" in request.path:
        start = max(body.find(b'"layers"'), body.find(b'"manifests"'))
        at = body.find(b"sha256:", start) if start >= 0 else -1
        if at >= 0:
            i = at + len("sha256:") + 63
            return body[:i] + (b"0" if body[i : i + 1] != b"0" else b"1") + body[i + 1 :]
    return rp.flip_middle(request, body)


CASES = [
    (what, mode)
    for what in (
        "image manifest",
        "image config",
        "signature manifest",
        "signature",
        "attestation manifest",
        "attestations",
    )
    for mode in (rp.TRUNCATE, rp.CORRUPT)
]
CASES += [("tag", rp.GARBLE_HEAD), ("image manifest", rp.GARBLE_HEAD), ("signature manifest", rp.GARBLE_HEAD)]


# What the one message says: the registry's answer is not trusted; never "not signed by the key"
# for an answer that was merely broken. A manifest that loses an attestation's layer loses that
# statement: cosign passes over what it cannot find, and the statement is missing.
BROKEN = "could not be read intact from the registry"
SAID = {
    "tag": ["not trusted"],
    "image manifest": ["not trusted"],
    "image config": ["not trusted"],
    "signature manifest": [BROKEN],
    "signature": [BROKEN],
    "attestation manifest": [BROKEN, "missing attestation"],
    "attestations": [BROKEN],
}


def test_through_the_honest_proxy_the_signed_image_verifies(signed, faults, keys):
    record, _ = signed
    proc = cli("verify", f"{record['repository']}:{record['tags'][1]}", "--key", str(keys["ours"][1]))
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("what, mode", CASES, ids=[f"{w.replace(' ', '-')}-{m}" for w, m in CASES])
def test_a_cut_off_or_garbled_answer_is_refused_by_verify_and_pull(signed, faults, keys, docker_client, what, mode):
    record, paths = signed
    targets = set(paths[what])
    assert targets, f"no {what} in the registry"
    hit = []

    def rule(request):
        if request.path in targets:
            hit.append(f"{request.method} {request.path}")
            return mode
        return None

    faults.rule, faults.corrupt = rule, corrupt_document
    ref = f"{record['repository']}:{record['tags'][1]}"
    names = (faults.address, f"rocmforge/{TARGET}:")
    before = local_names(docker_client, *names)
    for command in ("verify", "pull"):
        hit.clear()
        proc = cli(command, ref, "--key", str(keys["ours"][1]))
        error = assert_one_error(proc, 1)
        print(command, hit, error)
        assert any(needle in error for needle in SAID[what]), error
        assert hit, f"{command} never asked for the {what}"
        assert local_names(docker_client, *names) == before, f"{command} tagged or pulled something"
