"""The statements push --sign-key attaches (release/attestations.py), what verify demands of them
(release/trust.py), the cosign command lines (release/cosign.py) and the tools image's layer
(release/toolsimage.py), without an engine or a registry."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import lzma
import os
import tarfile
from pathlib import Path

import pytest

from rocmforge.release import attestations as att
from rocmforge.release import cosign as cosigns
from rocmforge.release import toolsimage, trust
from rocmforge.render.plan import load_plan
from rocmforge.resolve import lockfile
from rocmforge.shared.errors import UserError
from rocmforge.verify.suites import SuitesReport
from tests.conftest import ROOT

CONFIG = "sha256:" + "c" * 64
DIGEST = "sha256:" + "d" * 64


def report(**statuses) -> SuitesReport:
    suites = {s: {"status": st, "detail": f"{s} detail"} for s, st in statuses.items()}
    return SuitesReport.from_json(
        {"image": "x", "image_id": CONFIG, "target": "t", "ok": "failed" not in statuses.values(), "suites": suites}
    )


# -- the test result --------------------------------------------------------------------------
def test_result_passed_warned_failed_and_each_suite_with_its_reason():
    ok = att.test_result(
        report(linkage="passed", versions="passed"), archs=["gfx90a"], host="h", version="v", config_digest=CONFIG
    )
    assert ok["result"] == "PASSED" and ok["passedTests"] == ["linkage: linkage detail", "versions: versions detail"]
    warned = att.test_result(
        report(linkage="passed", gemm="not GPU-verified", workload="not applicable"),
        archs=[],
        host="h",
        version="v",
        config_digest=CONFIG,
    )
    assert warned["result"] == "WARNED"
    assert warned["warnedTests"] == ["gemm: not GPU-verified: gemm detail"]
    assert "workload: not applicable: workload detail" in warned["passedTests"]
    failed = att.test_result(
        report(linkage="failed", gemm="not GPU-verified"), archs=[], host="h", version="v", config_digest=CONFIG
    )
    assert failed["result"] == "FAILED" and failed["failedTests"] == ["linkage: linkage detail"]
    config = {c["name"]: c for c in failed["configuration"]}
    assert config["image-config"]["digest"] == {"sha256": "c" * 64}
    assert config["suites"]["annotations"]["host"] == "h" and config["suites"]["annotations"]["rocmforge"] == "v"


def test_host_kind_recorded_or_inferred():
    assert att.host_kind(report(linkage="passed"), "GPU host (3 device node(s))") == "GPU host (3 device node(s))"
    assert att.host_kind(report(gemm="not GPU-verified"), "").startswith("no GPU")


# -- the provenance ---------------------------------------------------------------------------
def test_provenance_names_the_inputs_and_every_locked_dependency_of_the_chain():
    plan = load_plan(ROOT / "matrix.yaml")
    lock = lockfile.load(ROOT / "matrix.lock")
    prov = att.provenance(
        plan,
        lock,
        "hip-python",
        matrix_bytes=b"m",
        lock_bytes=b"l",
        version="0.1.0",
        commit="abc",
        repro={"identical": True, "image_ids": [CONFIG], "timings": {}},
    )
    ext = prov["buildDefinition"]["externalParameters"]
    assert ext["target"] == "hip-python"
    assert ext["matrix"]["digest"]["sha256"] == hashlib.sha256(b"m").hexdigest()
    assert (
        ext["dockerfile"]["digest"]["sha256"]
        == hashlib.sha256(plan.targets["hip-python"].files["Dockerfile"]).hexdigest()
    )
    deps = prov["buildDefinition"]["resolvedDependencies"]
    uris = [d["uri"] for d in deps]
    # its own apt step, the one of hip-runtime it starts from, and hip-devel's (the builder of hip-runtime)
    assert f"pkg:deb/debian/python3-pip@{lock.apt['hip-python/numpy-env-build']['python3-pip']}?arch=amd64" in uris
    assert any(d.get("annotations", {}).get("step") == "hip-runtime" for d in deps)
    numpy = lock.python["numpy-env"]["numpy"]
    assert {
        "name": numpy.file,
        "uri": f"pkg:pypi/numpy@{numpy.version}",
        "digest": {"sha256": numpy.sha256[0]},
        "annotations": {"environment": "numpy-env"},
    } in deps
    assert deps[0]["name"] == "base" and deps[0]["digest"]["sha256"] == lock.base("debian13-rocm5.7").image_id[7:]
    assert prov["runDetails"]["builder"]["version"] == {"rocmforge": "0.1.0", "commit": "abc"}
    assert prov["runDetails"]["byproducts"][0]["annotations"]["identical"] is True


def test_provenance_of_a_git_source_names_its_commit():
    plan = load_plan(ROOT / "matrix.yaml")
    lock = lockfile.load(ROOT / "matrix.lock")
    deps = att.resolved_dependencies(plan, lock, "llama31-qlora-debian")
    commit = lock.git["bitsandbytes-hip"].commit
    assert {
        "name": "bitsandbytes-hip",
        "uri": f"git+https://github.com/ROCm/bitsandbytes@{commit}",
        "digest": {"gitCommit": commit},
    } in deps


# -- what verify demands ------------------------------------------------------------------------
def verified(**changes) -> trust.Verified:
    statements = {
        att.SBOM: {"metadata": {"component": {"name": "t", "version": CONFIG}}, "components": []},
        att.PROVENANCE: {
            "buildDefinition": {
                "externalParameters": {"target": "t"},
                "internalParameters": {"content_hash": "ab" * 32},
            }
        },
        att.TEST_RESULT: att.test_result(
            report(contents="passed", linkage="passed", config="passed", versions="passed", archs="passed"),
            archs=[],
            host="h",
            version="v",
            config_digest=CONFIG,
        ),
    }
    v = trust.Verified("r", "127.0.0.1:5000/team/t", DIGEST, CONFIG, {}, "t", "ab" * 32, 1, statements)
    for key, value in changes.items():
        setattr(v, key, value)
    return v


def test_agreement_of_matching_statements_finds_nothing():
    assert trust.agreement(verified(), trust.parse_ref("127.0.0.1:5000/team/t:content-abababababab")) == []


@pytest.mark.parametrize(
    "change, needle",
    [
        (
            lambda s: s[att.PROVENANCE]["buildDefinition"]["externalParameters"].update(target="other"),
            "provenance names target",
        ),
        (lambda s: s[att.PROVENANCE]["buildDefinition"]["internalParameters"].update(content_hash="0"), "content hash"),
        (
            lambda s: s[att.TEST_RESULT]["configuration"][0]["digest"].update(sha256="e" * 64),
            "test result is for image",
        ),
        (lambda s: s[att.SBOM]["metadata"]["component"].update(version="sha256:" + "e" * 64), "the SBOM describes"),
        (lambda s: s[att.TEST_RESULT].update(result="FAILED"), "did not pass"),
        (
            lambda s: s[att.TEST_RESULT].update(
                passedTests=["contents: ok", "linkage: ok", "config: ok", "versions: ok"]
            ),
            "archs did not pass",
        ),
        (
            lambda s: s[att.TEST_RESULT].update(
                passedTests=["contents: ok", "linkage: ok", "config: ok", "versions: ok", "archs: not applicable: x"]
            ),
            "archs did not pass",
        ),
        (
            lambda s: s[att.TEST_RESULT].update(passedTests=["linkage: ok", "config: ok", "versions: ok", "archs: ok"]),
            "contents did not pass",
        ),
        (
            lambda s: s[att.TEST_RESULT]["configuration"][1]["annotations"].update(judged={"content_hash": "0" * 64}),
            "suites judged content hash",
        ),
    ],
)
def test_agreement_names_each_disagreement(change, needle):
    v = verified()
    v.statements = copy.deepcopy(v.statements)
    change(v.statements)
    problems = trust.agreement(v, trust.parse_ref("127.0.0.1:5000/team/t@" + DIGEST))
    assert any(needle in p for p in problems), problems


def test_a_moved_content_tag_and_a_foreign_repository_are_named():
    problems = trust.agreement(verified(), trust.parse_ref("127.0.0.1:5000/team/t:content-000000000000"))
    assert any("tag was moved" in p for p in problems)
    problems = trust.agreement(verified(), trust.parse_ref("127.0.0.1:5000/team/u:latest"))
    assert any("is not target 't'" in p for p in problems)


@pytest.mark.parametrize(
    "text", ["hip-runtime:latest", "127.0.0.1:5000/team/t", "127.0.0.1:5000/t@sha256:12", "docker.io.x", "hub/t:1"]
)
def test_a_bad_reference_is_a_user_error(text):
    with pytest.raises(UserError):
        trust.parse_ref(text)


def test_references_by_tag_and_by_digest():
    r = trust.parse_ref("127.0.0.1:5000/team/hip-runtime@" + DIGEST)
    assert (r.repository, r.tag, r.digest, r.host) == (
        "127.0.0.1:5000/team/hip-runtime",
        None,
        DIGEST,
        "127.0.0.1:5000",
    )
    assert trust.parse_ref("localhost:5000/a/b:c").tag == "c"


# -- cosign's command line ----------------------------------------------------------------------
def test_the_password_travels_by_name_only(monkeypatch, tmp_path):
    monkeypatch.setenv("COSIGN_PASSWORD", "s3cret-value")
    key = tmp_path / "cosign.key"
    key.write_text("k")
    c = cosigns.Cosign("image", "rocmforge/tools-cosign:recipe-x", "2.5.0", signing_config=False, docker="docker")
    argv = c.argv(["sign", "--key", key, "ref"])
    assert "s3cret-value" not in " ".join(argv)
    assert argv[argv.index("-e") + 1] == "COSIGN_PASSWORD"
    assert f"{key}:/rocmforge/in/2/cosign.key:ro" in argv and argv[-2] == "/rocmforge/in/2/cosign.key"
    assert ["--network", "host"] == argv[argv.index("--network") : argv.index("--network") + 2]


def test_cosign_3_signs_with_a_key_only_without_a_signing_config():
    key = Path("cosign.key")
    assert "--use-signing-config=false" in cosigns.Cosign("host", "c", "3.1.1", signing_config=True)._signing(key)
    assert "--use-signing-config=false" not in cosigns.Cosign("host", "c", "2.5.0", signing_config=False)._signing(key)


def test_a_missing_password_is_refused_before_cosign_runs(monkeypatch, tmp_path):
    monkeypatch.delenv("COSIGN_PASSWORD", raising=False)
    with pytest.raises(UserError, match="COSIGN_PASSWORD is not set"):
        cosigns.Cosign("host", "/nonexistent/cosign", "2.5.0", signing_config=False).public_key(tmp_path / "k")


def test_a_rocmforge_cosign_that_is_not_a_program_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv(cosigns.ENV, str(tmp_path / "nothing"))
    with pytest.raises(UserError, match="ROCMFORGE_COSIGN"):
        cosigns.find()


# -- the tools image ------------------------------------------------------------------------------
def fake_deb(path: Path, files: dict[str, bytes]) -> Path:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        for name, body in files.items():
            info = tarfile.TarInfo("./" + name)
            info.size, info.mode, info.mtime = len(body), 0o755, 1_700_000_000
            tar.addfile(info, io.BytesIO(body))
    members = [("debian-binary", b"2.0\n"), ("data.tar.xz", lzma.compress(data.getvalue()))]
    out = b"!<arch>\n"
    for name, body in members:
        out += (
            f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode()
            + body
            + (b"\n" if len(body) % 2 else b"")
        )
    path.write_bytes(out)
    return path


def test_the_tools_layer_is_a_function_of_the_packages(tmp_path):
    pin = toolsimage.load_pin()
    assert (
        pin.tool == "cosign"
        and pin.upstream_version == "2.5.0"
        and pin.ref.startswith("rocmforge/tools-cosign:recipe-")
    )
    deb = fake_deb(tmp_path / "a.deb", {"usr/bin/cosign": b"binary"})
    first = toolsimage.layer_bytes(pin, [deb])
    os.utime(deb, (0, 0))
    assert toolsimage.layer_bytes(pin, [deb]) == first
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        names = {m.name: m for m in tar.getmembers()}
    assert {"usr/bin/cosign", "lib64", "tmp"} <= set(names)
    assert names["lib64"].linkname == "usr/lib64" and names["tmp"].mode == 0o1777
    assert all(m.mtime == 0 and m.uid == 0 for m in names.values())
    config = json.loads(toolsimage.image_config(pin, "sha256:" + "0" * 64))
    assert config["created"] == "1970-01-01T00:00:00Z" and config["config"]["Entrypoint"] == ["/usr/bin/cosign"]


def test_a_package_without_the_binary_is_refused(tmp_path):
    from rocmforge.shared.errors import BuildError

    with pytest.raises(BuildError, match="no file usr/bin/cosign"):
        toolsimage.layer_bytes(toolsimage.load_pin(), [fake_deb(tmp_path / "a.deb", {"usr/bin/other": b"x"})])


@pytest.mark.parametrize(
    "text, unreadable",
    [
        ("cosign verify failed: Error: unexpected EOF error during command execution: unexpected EOF", True),
        (
            "no matching signatures: error verifying sha256 checksum after reading 258 bytes; "
            'got "sha256:ef", want "sha256:f5"',
            True,
        ),
        ("no matching signatures: GET http://r/v2/t/blobs/sha256:f5: BLOB_UNKNOWN: blob unknown to registry", True),
        ('Get "http://r/v2/": net/http: HTTP/1.x transport connection broken: malformed HTTP status code "2"', True),
        ('Get "http://r/v2/": dial tcp 127.0.0.1:5000: connect: connection refused', True),
        # a signature by another key, or none: the image's fault, not the registry's answer
        ("Error: no matching signatures: invalid signature when validating ASN.1 encoded signature", False),
        ("Error: no signatures found", False),
        ("none of the attestations matched the predicate type: https://in-toto.io/attestation/test-result/v0.1", False),
    ],
)
def test_a_registry_answer_that_broke_is_told_from_a_bad_signature(text, unreadable):
    assert trust._unreadable(text) is unreadable
