"""cosign, real and pinned: the `cosign` on PATH when there is one (its version checked), else the
tools image (release/toolsimage.py) run through the engine. ROCMFORGE_COSIGN chooses: `image`
(always the tools image) or the path of a binary.

Only key pairs are used from here: no transparency log or Fulcio is assumed reachable, so signing
never uploads to Rekor (--tlog-upload=false) and verifying does not ask for a log entry
(--insecure-ignore-tlog); the key is the trust. COSIGN_PASSWORD reaches cosign by name through the
environment (`docker run -e COSIGN_PASSWORD`), never on a command line or in an image."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.shared.errors import BuildError, UserError

if TYPE_CHECKING:
    from docker import DockerClient

ENV = "ROCMFORGE_COSIGN"
PASSWORD_ENV = "COSIGN_PASSWORD"
MIN_MAJOR = 2          # --tlog-upload and --insecure-ignore-tlog appeared in 2.0
TIMEOUT = 600
_VERSION_RE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")
_IN = "/rocmforge/in"
_WORK = "/rocmforge/work"
_DOCKER_CONFIG = "/rocmforge/docker-config"


class CosignFailed(BuildError):
    """cosign ran and said no (a bad signature, nothing signed, a registry error): the message is
    cosign's own last lines."""


@dataclass(frozen=True)
class Cosign:
    mode: str                  # "host" or "image"
    program: str               # the binary, or the tools image's reference
    version: str               # e.g. "2.5.0", "" when the binary does not say
    signing_config: bool       # 3.x: key signing needs --use-signing-config=false
    docker: str = ""           # the docker CLI (image mode)

    def describe(self) -> str:
        where = self.program if self.mode == "host" else f"the tools image {self.program}"
        return f"cosign {self.version or '(version unknown)'} ({where})"

    def argv(self, args: list, cwd: Path | None = None) -> list[str]:
        """The command line; Path arguments are files cosign reads (mounted read-only in image mode)."""
        if self.mode == "host":
            return [self.program] + [str(a) for a in args]
        cmd = [self.docker, "run", "--rm", "--network", "host", "--user", f"{os.getuid()}:{os.getgid()}"]
        if PASSWORD_ENV in os.environ:
            cmd += ["-e", PASSWORD_ENV]          # by name: the value never appears here
        config = Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker")
        if config.is_dir():                      # registry logins (`docker login` writes them here)
            cmd += ["-v", f"{config.resolve()}:{_DOCKER_CONFIG}:ro", "-e", f"DOCKER_CONFIG={_DOCKER_CONFIG}"]
        ca = Path(os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt")
        if ca.is_file():                         # the image has no trust store: the host's decides
            cmd += ["-v", f"{ca.resolve()}:/etc/ssl/certs/ca-certificates.crt:ro"]
        if cwd is not None:
            cmd += ["-v", f"{Path(cwd).resolve()}:{_WORK}", "-w", _WORK]
        out = []
        for i, a in enumerate(args):
            if isinstance(a, Path):
                inside = f"{_IN}/{i}/{a.name}"
                cmd += ["-v", f"{a.resolve()}:{inside}:ro"]
                out.append(inside)
            else:
                out.append(str(a))
        return cmd + [self.program] + out

    def run(self, args: list, *, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
        try:
            proc = subprocess.run(self.argv(args, cwd), cwd=cwd if self.mode == "host" else None,
                                  capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise BuildError(f"cosign {args[0]} did not finish within {TIMEOUT} s") from None
        except OSError as exc:
            raise BuildError(f"cannot run {self.describe()}: {exc.strerror or exc}") from None
        if check and proc.returncode != 0:
            raise CosignFailed(f"cosign {args[0]} failed: {last_words(proc.stderr)}")
        return proc

    # -- what rocmforge asks of it -------------------------------------------------------------
    def _signing(self) -> list[str]:
        return ["--tlog-upload=false"] + (["--use-signing-config=false"] if self.signing_config else [])

    def public_key(self, key: Path) -> str:
        """The public half of a private key: proves the file is a key cosign reads with COSIGN_PASSWORD."""
        if PASSWORD_ENV not in os.environ:
            raise UserError(f"${PASSWORD_ENV} is not set: cosign reads the key's password from it "
                            "(export it, empty for a key without one)", file=str(key), field="--sign-key")
        proc = self.run(["public-key", "--key", key], check=False)
        if proc.returncode != 0 or "BEGIN PUBLIC KEY" not in proc.stdout:
            raise UserError(f"cosign cannot read this key with ${PASSWORD_ENV}: {last_words(proc.stderr)}",
                            file=str(key), field="--sign-key")
        return proc.stdout

    def sign(self, key: Path, ref: str, *, http: bool) -> None:
        self.run(["sign", "--yes", "--key", key, *self._signing(), *_http(http), ref])

    def attest(self, key: Path, ref: str, predicate: Path, kind: str, *, http: bool) -> None:
        # --replace: a push run again replaces its statement of this type instead of adding a second one
        self.run(["attest", "--yes", "--replace", "--key", key, "--type", kind, "--predicate", predicate,
                  *self._signing(), *_http(http), ref])

    def verify(self, pub: Path, ref: str, *, http: bool) -> list[dict]:
        """The verified signature payloads (cosign prints them as one JSON array)."""
        proc = self.run(["verify", "--key", pub, "--insecure-ignore-tlog", *_http(http), "--output", "json", ref])
        try:
            payloads = json.loads(proc.stdout)
        except ValueError:
            raise CosignFailed(f"cosign verify printed no JSON: {last_words(proc.stdout)}") from None
        return payloads if isinstance(payloads, list) else [payloads]

    def verify_attestations(self, pub: Path, ref: str, kind: str, *, http: bool) -> list[dict]:
        """The in-toto statements of every attestation of this type that the key verifies (cosign prints
        one DSSE envelope per line)."""
        proc = self.run(["verify-attestation", "--key", pub, "--type", kind, "--insecure-ignore-tlog",
                         *_http(http), ref])
        return [decode_envelope(line) for line in proc.stdout.splitlines() if line.strip()]


def _http(allowed: bool) -> list[str]:
    return ["--allow-http-registry"] if allowed else []


def decode_envelope(line: str) -> dict:
    try:
        envelope = json.loads(line)
        return json.loads(base64.b64decode(envelope["payload"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise CosignFailed(f"cosign verify-attestation printed something that is not a DSSE envelope ({exc})") from None


def last_words(text: str, lines: int = 3) -> str:
    """cosign's explanation without its usage text or Go log prefixes."""
    kept = [ln.strip() for ln in text.splitlines()
            if ln.strip() and not ln.startswith(("Usage:", "  ", "WARNING: Skipping tlog verification"))]
    return " ".join(kept[-lines:]) or "(no output)"


def docker_cli() -> str:
    found = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else shutil.which("docker")
    if not found:
        raise BuildError("the docker command is not installed: it runs the cosign tools image")
    return found


def find(client: DockerClient | None = None, log=lambda msg: None) -> Cosign:
    """cosign as ROCMFORGE_COSIGN says, else from PATH, else the tools image (made when missing)."""
    choice = os.environ.get(ENV, "").strip()
    if choice and choice != "image":
        if not Path(choice).is_file() or not os.access(choice, os.X_OK):
            raise UserError(f"{choice!r} is not an executable cosign (or 'image' for the tools image)",
                            field=f"${ENV}")
        return host(choice)
    if not choice and shutil.which("cosign"):
        return host(shutil.which("cosign"))
    from rocmforge.release import toolsimage   # lzma and tarfile: only when the engine runs cosign
    if client is None:
        from rocmforge.build import engine     # docker-py (0.17 s): only when the engine runs cosign
        client = engine.connect()
    pin = toolsimage.load_pin()
    ref = toolsimage.ensure(client, pin, log)
    return Cosign("image", ref, pin.upstream_version, signing_config=int(pin.upstream_version.split(".")[0]) >= 3,
                  docker=docker_cli())


def host(path: str) -> Cosign:
    """A cosign binary on this host, refused below MIN_MAJOR. Debian's build says 'devel' for its own
    version; then dpkg, which installed it, says which."""
    probe = Cosign("host", path, "", signing_config=False)
    proc = probe.run(["version", "--json"], check=False)
    version = ""
    try:
        m = _VERSION_RE.search(json.loads(proc.stdout).get("gitVersion", ""))
        version = m.group(0).lstrip("v") if m else ""
    except (ValueError, AttributeError):
        pass
    if not version:
        version = _dpkg_version(path)
    if version and int(version.split(".")[0]) < MIN_MAJOR:
        raise UserError(f"{path} is cosign {version}; rocmforge needs cosign {MIN_MAJOR}.x or newer "
                        f"(or unset ${ENV} / set it to 'image' to use the pinned tools image)", field=f"${ENV}")
    help_text = probe.run(["sign", "--help"], check=False).stdout
    return Cosign("host", path, version, signing_config="--use-signing-config" in help_text)


def _dpkg_version(path: str) -> str:
    try:
        owner = subprocess.run(["dpkg-query", "-S", str(Path(path).resolve())], capture_output=True, text=True)
        if owner.returncode != 0:
            return ""
        package = owner.stdout.split(":", 1)[0]
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True)
    except OSError:
        return ""
    m = _VERSION_RE.search(out.stdout.split(":")[-1])
    return m.group(0) if m else ""
