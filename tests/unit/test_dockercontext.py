"""The engine a docker context names, picked as the docker CLI picks it (host/dockercontext): the
context store's layout is written here as the docker CLI writes it (meta.json under the sha256 of
the name); tests/integration/test_bake.py makes one with the real CLI and builds through it."""

from __future__ import annotations

import hashlib
import json

import pytest

from rocmforge.host import dockercontext, engine_errors
from rocmforge.shared.errors import UserError


@pytest.fixture
def config(tmp_path, monkeypatch):
    for var in ("DOCKER_HOST", "DOCKER_CONTEXT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    return tmp_path


def add_context(config, name: str, host: str, tls: bool = False) -> None:
    ident = hashlib.sha256(name.encode()).hexdigest()
    meta = config / "contexts" / "meta" / ident
    meta.mkdir(parents=True)
    endpoint = {"Host": host, "SkipTLSVerify": False}
    (meta / "meta.json").write_text(json.dumps({"Name": name, "Metadata": {}, "Endpoints": {"docker": endpoint}}))
    if tls:
        (config / "contexts" / "tls" / ident / "docker").mkdir(parents=True)


def test_no_context_is_the_local_socket(config):
    assert dockercontext.resolve() is None
    (config / "config.json").write_text(json.dumps({"currentContext": "default"}))
    assert dockercontext.resolve() is None


def test_docker_context_names_it(config, monkeypatch):
    add_context(config, "remote", "tcp://127.0.0.1:2375")
    monkeypatch.setenv("DOCKER_CONTEXT", "remote")
    found = dockercontext.resolve()
    assert found and (found.context, found.host, found.chosen_by) == (
        "remote",
        "tcp://127.0.0.1:2375",
        "$DOCKER_CONTEXT",
    )
    assert engine_errors.where() == "docker context remote (chosen by $DOCKER_CONTEXT)"
    assert dockercontext.client_options(found) == {"base_url": "tcp://127.0.0.1:2375"}


def test_the_current_context_of_the_config(config, monkeypatch):
    add_context(config, "builders", "tcp://10.0.0.7:2376", tls=True)
    add_context(config, "other", "unix:///run/other.sock")
    (config / "config.json").write_text(json.dumps({"currentContext": "builders"}))
    found = dockercontext.resolve()
    assert found and found.host == "tcp://10.0.0.7:2376" and found.tls_dir is not None
    assert "currentContext in" in found.chosen_by
    monkeypatch.setenv("DOCKER_CONTEXT", "other")  # the variable wins over the config, as in the CLI
    assert dockercontext.resolve().host == "unix:///run/other.sock"  # type: ignore[union-attr]


def test_docker_host_wins(config, monkeypatch):
    add_context(config, "remote", "tcp://127.0.0.1:2375")
    monkeypatch.setenv("DOCKER_CONTEXT", "remote")
    monkeypatch.setenv("DOCKER_HOST", "unix:///run/mine.sock")
    assert dockercontext.resolve() is None
    assert engine_errors.where() == "DOCKER_HOST=unix:///run/mine.sock"


def test_the_advice_says_set_docker_host_only_where_it_is_not_set(config, monkeypatch):
    """Issue 54: with DOCKER_HOST pointing nowhere, "set DOCKER_HOST" read as if it were not set."""
    refused = ConnectionRefusedError(111, "Connection refused")
    unset = engine_errors.unreachable(refused)
    assert unset.startswith("cannot reach the Docker engine at unix:///var/run/docker.sock (DOCKER_HOST is not set)")
    assert unset.endswith("; start dockerd, or set DOCKER_HOST to a running engine's socket"), unset
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    given = engine_errors.unreachable(refused)
    assert given == (
        "cannot reach the Docker engine at DOCKER_HOST=tcp://127.0.0.1:1: connection refused (nothing listens "
        "there); start the engine there, or point DOCKER_HOST at a running engine's socket"
    )


def test_an_unknown_context_names_what_chose_it(config, monkeypatch):
    monkeypatch.setenv("DOCKER_CONTEXT", "nowhere")
    with pytest.raises(UserError) as caught:
        dockercontext.resolve()
    assert "$DOCKER_CONTEXT" in str(caught.value) and "'nowhere' does not exist" in str(caught.value)
    (config / "contexts" / "meta" / hashlib.sha256(b"nowhere").hexdigest()).mkdir(parents=True)
    (config / "contexts" / "meta" / hashlib.sha256(b"nowhere").hexdigest() / "meta.json").write_text("{}")
    with pytest.raises(UserError, match="has no docker endpoint"):
        dockercontext.resolve()
