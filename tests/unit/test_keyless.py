"""Keyless signing and verifying (release/cosign.py, release/signing.py), and stopping a cosign that
runs in another thread. No Sigstore service (Fulcio, Rekor, the TUF root) is reachable here, so
keyless is never run end to end: these tests pin the command lines rocmforge gives cosign, running
a stand-in `cosign` that records them."""

from __future__ import annotations

import base64
import json
import os
import shlex
import stat
import threading
from pathlib import Path

import pytest

from rocmforge.release import attestations as att
from rocmforge.release import cosign as cosigns
from rocmforge.release.signing import Signer
from rocmforge.shared.errors import UserError

DIGEST = "sha256:" + "d" * 64
REF = "registry.example:5000/team/hip-runtime@" + DIGEST
IDENTITY = "https://github.com/org/repo/.github/workflows/build-level.yml@refs/heads/main"
KEYLESS = cosigns.Identity(certificate_identity=IDENTITY, oidc_issuer=cosigns.GITHUB_ISSUER)


def statement(uri: str) -> str:
    body = {
        "_type": "https://in-toto.io/Statement/v1",
        "predicateType": uri,
        "subject": [{"name": "x", "digest": {"sha256": DIGEST[7:]}}],
        "predicate": {},
    }
    return json.dumps(
        {
            "payloadType": "application/vnd.in-toto+json",
            "payload": base64.b64encode(json.dumps(body).encode()).decode(),
            "signatures": [],
        }
    )


@pytest.fixture
def fake(tmp_path):
    """A `cosign` that appends its argv (one JSON list a line) to calls.jsonl and answers as cosign
    would: a signature payload for verify, one DSSE envelope for verify-attestation."""
    calls = tmp_path / "calls.jsonl"
    payload = json.dumps([{"critical": {"image": {"docker-manifest-digest": DIGEST}}}])
    envelope = statement(att.TEST_RESULT)
    script = tmp_path / "cosign"
    script.write_text(f"""#!/usr/bin/env python3
import json, sys
with open({str(calls)!r}, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1] == "verify":
    print({payload!r})
elif sys.argv[1] == "verify-attestation":
    print({envelope!r})
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)

    def read() -> list[list[str]]:
        return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []

    return cosigns.Cosign("host", str(script), "2.5.0", signing_config=False), read


def test_keyless_sign_and_attest_ask_for_githubs_token_a_certificate_and_a_log_entry(fake, tmp_path):
    cosign, calls = fake
    predicate = tmp_path / "p.json"
    predicate.write_text("{}")
    cosign.sign(None, REF, http=False)
    cosign.attest(None, REF, predicate, "cyclonedx", http=True)
    sign, attest = calls()
    assert sign == ["sign", "--yes", "--oidc-provider=github-actions", REF]
    assert attest == [
        "attest",
        "--yes",
        "--replace",
        "--type",
        "cyclonedx",
        "--predicate",
        str(predicate),
        "--oidc-provider=github-actions",
        "--allow-http-registry",
        REF,
    ]
    # nothing of the key pair's offline mode: Rekor's entry is what vouches for the short-lived certificate
    for argv in (sign, attest):
        assert not {"--key", "--tlog-upload=false", "--use-signing-config=false"} & set(argv)


def test_keyless_on_cosign_3_keeps_its_signing_config(fake):
    _, calls = fake
    cosign3 = cosigns.Cosign("host", fake[0].program, "3.1.1", signing_config=True)
    cosign3.sign(None, REF, http=False)
    assert "--use-signing-config=false" not in calls()[0]
    cosign3.sign(Path("/k/cosign.key"), REF, http=False)
    assert calls()[1] == [
        "sign",
        "--yes",
        "--key",
        "/k/cosign.key",
        "--tlog-upload=false",
        "--use-signing-config=false",
        REF,
    ]


def test_keyless_verify_and_verify_attestation_name_identity_and_issuer_and_keep_the_log_check(fake):
    cosign, calls = fake
    assert cosign.verify(KEYLESS, REF, http=True)[0]["critical"]["image"]["docker-manifest-digest"] == DIGEST
    assert cosign.verify_attestations(KEYLESS, REF, att.TEST_RESULT, http=False)[0]["predicateType"] == att.TEST_RESULT
    verify, verify_att = calls()
    assert verify == [
        "verify",
        "--certificate-identity",
        IDENTITY,
        "--certificate-oidc-issuer",
        cosigns.GITHUB_ISSUER,
        "--allow-http-registry",
        "--output",
        "json",
        REF,
    ]
    assert verify_att == [
        "verify-attestation",
        "--type",
        att.TEST_RESULT,
        "--certificate-identity",
        IDENTITY,
        "--certificate-oidc-issuer",
        cosigns.GITHUB_ISSUER,
        REF,
    ]
    assert "--insecure-ignore-tlog" not in verify + verify_att


def test_verifying_with_a_key_is_unchanged(fake):
    cosign, calls = fake
    pub = Path("/k/cosign.pub")
    cosign.verify(cosigns.Identity(key=pub), REF, http=False)
    cosign.verify_attestations(cosigns.Identity(key=pub), REF, "slsaprovenance1", http=True)
    assert calls() == [
        ["verify", "--key", str(pub), "--insecure-ignore-tlog", "--output", "json", REF],
        [
            "verify-attestation",
            "--type",
            "slsaprovenance1",
            "--key",
            str(pub),
            "--insecure-ignore-tlog",
            "--allow-http-registry",
            REF,
        ],
    ]


def test_the_identity_is_described_in_refusals():
    assert cosigns.Identity(key=Path("/k/p.pub")).describe() == "the key /k/p.pub"
    assert KEYLESS.describe() == f"the identity {IDENTITY} (issuer {cosigns.GITHUB_ISSUER})"


@pytest.mark.parametrize(
    "identity, issuer, field",
    [
        ("", cosigns.GITHUB_ISSUER, "--certificate-identity"),
        (" x", cosigns.GITHUB_ISSUER, "--certificate-identity"),
        ("a b", cosigns.GITHUB_ISSUER, "--certificate-identity"),
        (IDENTITY, "token.actions.githubusercontent.com", "--certificate-oidc-issuer"),
        (IDENTITY, "https://", "--certificate-oidc-issuer"),
        (IDENTITY, "https://a b", "--certificate-oidc-issuer"),
    ],
)
def test_a_keyless_identity_cosign_could_never_match_is_refused(identity, issuer, field):
    with pytest.raises(UserError) as exc:
        cosigns.keyless_identity(identity, issuer)
    assert exc.value.field == field


def test_the_tools_image_gets_githubs_token_variables_by_name_and_a_home(monkeypatch):
    monkeypatch.setenv("ACTIONS_ID_TOKEN_REQUEST_URL", "https://token.example/secret-url")
    monkeypatch.setenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "secret-token")
    c = cosigns.Cosign("image", "rocmforge/tools-cosign:recipe-x", "2.5.0", signing_config=False, docker="docker")
    argv = c.argv(["sign", "--yes", "--oidc-provider=github-actions", REF], name="rocmforge-cosign-1-ab")
    text = shlex.join(argv)
    assert "secret" not in text
    for var in cosigns.GITHUB_OIDC_ENV:
        assert argv[argv.index(var) - 1] == "-e"
    assert "HOME=/tmp" in argv and argv[argv.index("--name") + 1] == "rocmforge-cosign-1-ab"


def test_push_keyless_is_refused_outside_a_github_job_with_id_token_write(monkeypatch):
    for var in cosigns.GITHUB_OIDC_ENV:
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(UserError, match="id-token: write") as exc:
        cosigns.require_github_oidc()
    assert exc.value.field == "--keyless"
    monkeypatch.setenv("ACTIONS_ID_TOKEN_REQUEST_URL", "https://token.example/")
    with pytest.raises(UserError, match="ACTIONS_ID_TOKEN_REQUEST_TOKEN is not set"):
        cosigns.require_github_oidc()
    monkeypatch.setenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN", "t")
    cosigns.require_github_oidc()


def test_a_keyless_signer_signs_and_attests_without_a_key_and_records_it(fake, monkeypatch, tmp_path):
    cosign, calls = fake
    for var in cosigns.GITHUB_OIDC_ENV:
        monkeypatch.setenv(var, "x")
    signer = Signer(cosign, None, inputs=None)
    signer.check_key()  # no key to open: only the token's presence
    assert calls() == []
    signer.files = {}
    for uri in att.COSIGN_TYPES:
        signer.files[uri] = tmp_path / f"{att.COSIGN_TYPES[uri].replace('/', '_')}.json"
        signer.files[uri].write_text("{}")
    summary = signer.attach("registry.example:5000/team/hip-runtime", DIGEST, http=False)
    assert summary["keyless"] == {"oidc_issuer": cosigns.GITHUB_ISSUER} and "public_key_sha256" not in summary
    assert [argv[0] for argv in calls()] == ["sign", "attest", "attest", "attest"]
    assert all("--key" not in argv and "--oidc-provider=github-actions" in argv for argv in calls())


# -- stopping cosign from another thread ---------------------------------------------------------
def test_cancel_stops_a_running_cosign_and_refuses_the_next(tmp_path):
    """push runs cosign in a worker thread; Ctrl-C reaches the main one, which cancels. The stand-in
    says it started through a FIFO, then waits for ever: only cancel can end it."""
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    script = tmp_path / "cosign"
    script.write_text(f"#!/bin/sh\necho $$ > {fifo}\nexec sleep 100000\n")
    script.chmod(0o755)
    cosign = cosigns.Cosign("host", str(script), "2.5.0", signing_config=False)
    failure: list[BaseException] = []

    def sign():
        try:
            cosign.sign(None, REF, http=False)
        except BaseException as exc:  # noqa: BLE001  (handed to the test's thread)
            failure.append(exc)

    worker = threading.Thread(target=sign)
    worker.start()
    pid = int(fifo.read_text())  # blocks until the stand-in runs
    cosign.cancel()
    worker.join()
    assert len(failure) == 1 and isinstance(failure[0], cosigns.Cancelled), failure
    assert not cosign.running.procs
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the process (exec'd into sleep) is gone
    with pytest.raises(cosigns.Cancelled, match="not started"):
        cosign.sign(None, REF, http=False)
