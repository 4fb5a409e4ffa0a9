"""What the user reads when the engine cannot be reached or refuses a request: where rocmforge
looked (DOCKER_HOST's value) and the engine's or the operating system's own words, without the
layers docker-py wraps them in ("Error while fetching server API version: ('Connection
aborted.', ...)", an HTML page a web server sent back)."""

from __future__ import annotations

import os

from rocmforge.host import dockercontext

DEFAULT_SOCKET = "unix:///var/run/docker.sock"


def where(base_url: str | None = None) -> str:
    """The engine address asked, as the user set it."""
    if base_url:
        return base_url
    host = os.environ.get("DOCKER_HOST")
    if host:
        return f"DOCKER_HOST={host}"
    picked = dockercontext.chosen()
    if picked:
        return f"docker context {picked[0]} (chosen by {picked[1]})"
    return f"{DEFAULT_SOCKET} (DOCKER_HOST is not set)"


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def reason(exc: BaseException) -> str:
    """Why the engine did not answer, in one short phrase."""
    chain = _chain(exc)
    for e in chain:
        if isinstance(e, FileNotFoundError):
            return "no socket there"
        if isinstance(e, ConnectionRefusedError):
            return "connection refused (nothing listens there)"
        if isinstance(e, PermissionError):
            return "permission denied on the socket (join the docker group, or use a rootless engine's socket)"
    for e in chain:
        status = getattr(getattr(e, "response", None), "status_code", None)
        if status is not None:
            return f"it answered HTTP {status}: whatever listens there is not a Docker engine API"
    for e in chain:
        if isinstance(e, TimeoutError) or "timed out" in str(e).lower():
            return "no answer in time"
    innermost = chain[-1]
    text = " ".join(str(innermost).split()) or type(innermost).__name__
    return text.removeprefix("Error while fetching server API version: ")[:200]


def advice(base_url: str | None = None) -> str:
    """What to do about an engine that did not answer: "set DOCKER_HOST" only where it is not set."""
    if not base_url and os.environ.get("DOCKER_HOST"):
        return "start the engine there, or point DOCKER_HOST at a running engine's socket"
    return "start dockerd, or set DOCKER_HOST to a running engine's socket"


def unreachable(exc: BaseException, base_url: str | None = None) -> str:
    return f"cannot reach the Docker engine at {where(base_url)}: {reason(exc)}; {advice(base_url)}"


def refused(exc: BaseException) -> str:
    """A request the engine answered with an error: its own message (docker-py's explanation)."""
    explanation = getattr(exc, "explanation", None)
    if explanation:
        text = explanation.decode(errors="replace") if isinstance(explanation, bytes) else str(explanation)
        status = getattr(getattr(exc, "response", None), "status_code", None)
        return " ".join(text.split()) + (f" (HTTP {status})" if status else "")
    return " ".join(str(exc).split())
