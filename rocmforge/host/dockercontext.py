"""The engine a docker context names, as the docker CLI picks it: DOCKER_HOST first; else the
context DOCKER_CONTEXT names, else the config's `currentContext` (`docker context use NAME`); the
context "default" (or none) is the local socket. A context is read from the docker CLI's own store:
`<config dir>/contexts/meta/<sha256 of its name>/meta.json` (Endpoints.docker.Host and
SkipTLSVerify) and its TLS files in `contexts/tls/<same>/docker/` (ca.pem, cert.pem, key.pem). The
config dir is $DOCKER_CONFIG, else ~/.docker. (docker-py's own reader ignores DOCKER_CONTEXT.)"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from rocmforge.shared.errors import UserError

DEFAULT = "default"


@dataclass(frozen=True)
class Endpoint:
    context: str  # the context's name
    chosen_by: str  # "$DOCKER_CONTEXT" or the config file's currentContext
    host: str  # tcp://…, unix://…, ssh://…
    tls_dir: Path | None  # ca.pem, cert.pem, key.pem, where the context has them
    skip_tls_verify: bool

    def describe(self) -> str:
        return f"docker context {self.context} ({self.host}, chosen by {self.chosen_by})"


def config_dir() -> Path:
    return Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker")


def chosen() -> tuple[str, str] | None:
    """(context name, what chose it), or None where DOCKER_HOST is set or no context but the
    default is chosen."""
    if os.environ.get("DOCKER_HOST"):
        return None
    name = os.environ.get("DOCKER_CONTEXT")
    if name:
        return None if name == DEFAULT else (name, "$DOCKER_CONTEXT")
    config = config_dir() / "config.json"
    try:
        current = json.loads(config.read_text()).get("currentContext")
    except (OSError, ValueError, AttributeError):
        return None  # no config, or one the docker CLI would refuse too: the local socket
    return (current, f"currentContext in {config}") if current and current != DEFAULT else None


def resolve() -> Endpoint | None:
    """The endpoint of the chosen context; None for the default one. A context that is not in the
    store, or has no docker endpoint, is a UserError naming what chose it."""
    picked = chosen()
    if picked is None:
        return None
    name, by = picked
    ident = hashlib.sha256(name.encode()).hexdigest()
    contexts = config_dir() / "contexts"
    meta = contexts / "meta" / ident / "meta.json"
    try:
        docker = json.loads(meta.read_text())["Endpoints"]["docker"]
        host = docker["Host"]
    except OSError:
        raise UserError(
            f"docker context {name!r} does not exist (no {meta}); `docker context ls` lists them", field=by
        ) from None
    except (ValueError, KeyError, TypeError):
        raise UserError(f"docker context {name!r} has no docker endpoint in {meta}", field=by) from None
    tls = contexts / "tls" / ident / "docker"
    return Endpoint(name, by, host, tls if tls.is_dir() else None, bool(docker.get("SkipTLSVerify")))


def client_options(endpoint: Endpoint) -> dict:
    """docker.DockerClient's keyword arguments for the endpoint (its TLS files where it has them)."""
    if endpoint.tls_dir is None or not endpoint.host.startswith("tcp://"):
        return {"base_url": endpoint.host}
    from docker.tls import TLSConfig  # docker-py, loaded with the engine

    files = {n: endpoint.tls_dir / f"{n}.pem" for n in ("ca", "cert", "key")}
    cert = (str(files["cert"]), str(files["key"])) if files["cert"].is_file() and files["key"].is_file() else None
    ca = str(files["ca"]) if files["ca"].is_file() else None
    return {
        "base_url": endpoint.host,
        "tls": TLSConfig(client_cert=cert, ca_cert=ca, verify=not endpoint.skip_tls_verify and ca is not None),
    }
