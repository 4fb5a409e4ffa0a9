"""cosign, real and pinned: the `cosign` on PATH when there is one (its version checked), else the
tools image (release/toolsimage.py) run through the engine. ROCMFORGE_COSIGN chooses: `image`
(always the tools image) or the path of a binary.

With a key pair no transparency log or Fulcio is assumed reachable, so signing never uploads to
Rekor (--tlog-upload=false) and verifying does not ask for a log entry (--insecure-ignore-tlog); the
key is the trust. COSIGN_PASSWORD reaches cosign by name through the environment (`docker run -e
COSIGN_PASSWORD`), never on a command line or in an image. Keyless (Sigstore's public Fulcio and
Rekor) signs only with GitHub Actions' OIDC token, whose request URL and token travel the same way;
verifying keyless keeps cosign's log check: it is what vouches for the short-lived certificate.

Every cosign process can be stopped from another thread (`cancel`): push signs in a worker thread,
and Ctrl-C reaches only the main one."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import threading
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.shared.errors import BuildError, UserError

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine

ENV = "ROCMFORGE_COSIGN"
PASSWORD_ENV = "COSIGN_PASSWORD"
MIN_MAJOR = 2  # --tlog-upload and --insecure-ignore-tlog appeared in 2.0
TIMEOUT = 600
_VERSION_RE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")
_IN = "/rocmforge/in"
_WORK = "/rocmforge/work"
_DOCKER_CONFIG = "/rocmforge/docker-config"
# What cosign's github-actions provider reads to ask GitHub for an OIDC token (set only in a job with
# `permissions: id-token: write`).
GITHUB_OIDC_ENV = ("ACTIONS_ID_TOKEN_REQUEST_URL", "ACTIONS_ID_TOKEN_REQUEST_TOKEN")
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
CONTAINER_PREFIX = "rocmforge-cosign-"


class CosignFailed(BuildError):
    """cosign ran and said no (a bad signature, nothing signed, a registry error): the message is
    cosign's own last lines."""


class Cancelled(BuildError):
    """cosign was stopped by `cancel` (the command was interrupted or failed elsewhere)."""


@dataclass(frozen=True)
class Identity:
    """Whom `verify` demands as the signer: a public key, or (keyless) the certificate identity and
    the OIDC issuer Fulcio wrote into the signing certificate."""

    key: Path | None = None
    certificate_identity: str = ""
    oidc_issuer: str = ""

    def args(self) -> list:
        if self.key is not None:
            return ["--key", self.key, "--insecure-ignore-tlog"]
        return ["--certificate-identity", self.certificate_identity, "--certificate-oidc-issuer", self.oidc_issuer]

    def describe(self) -> str:
        if self.key is not None:
            return f"the key {self.key}"
        return f"the identity {self.certificate_identity} (issuer {self.oidc_issuer})"


def keyless_identity(identity: str, issuer: str) -> Identity:
    """Refuses (exit 2, naming the option) what cosign could never match: an empty identity, an issuer
    that is not a URL."""
    if not identity or any(c.isspace() for c in identity):
        raise UserError(
            f"{identity!r} is not a certificate identity (e.g. https://github.com/ORG/REPO/.github/"
            "workflows/FILE@refs/heads/main)",
            field="--certificate-identity",
        )
    parts = urllib.parse.urlsplit(issuer)
    if parts.scheme not in ("https", "http") or not parts.netloc or any(c.isspace() for c in issuer):
        raise UserError(
            f"{issuer!r} is not an OIDC issuer URL (GitHub Actions: {GITHUB_ISSUER})", field="--certificate-oidc-issuer"
        )
    return Identity(certificate_identity=identity, oidc_issuer=issuer)


def require_github_oidc() -> None:
    """Keyless signing here is GitHub Actions' only: elsewhere cosign would fall back to a browser
    login that a build never finishes."""
    missing = [name for name in GITHUB_OIDC_ENV if not os.environ.get(name)]
    if missing:
        raise UserError(
            f"keyless signing needs GitHub Actions' OIDC token, and ${', $'.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not set: run it in a GitHub Actions job with "
            "`permissions: id-token: write`, or sign with --sign-key",
            field="--keyless",
        )


class _Running:
    """The cosign processes of one Cosign now running, so that another thread can stop them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.procs: dict[subprocess.Popen, str | None] = {}
        self.cancelled = False


@dataclass(frozen=True)
class Cosign:
    mode: str  # "host" or "image"
    program: str  # the binary, or the tools image's reference
    version: str  # e.g. "2.5.0", "" when the binary does not say
    signing_config: bool  # 3.x: key signing needs --use-signing-config=false
    docker: str = ""  # the docker CLI (image mode)
    running: _Running = field(default_factory=_Running, compare=False, repr=False)

    def describe(self) -> str:
        where = self.program if self.mode == "host" else f"the tools image {self.program}"
        return f"cosign {self.version or '(version unknown)'} ({where})"

    def argv(self, args: list, cwd: Path | None = None, name: str | None = None) -> list[str]:
        """The command line; Path arguments are files cosign reads (mounted read-only in image mode).
        name: the container's, so that `cancel` can remove it (killing the docker CLI leaves it running)."""
        if self.mode == "host":
            return [self.program] + [str(a) for a in args]
        cmd = [self.docker, "run", "--rm", "--network", "host", "--user", f"{os.getuid()}:{os.getgid()}"]
        if name:
            cmd += ["--name", name]
        for var in (PASSWORD_ENV, *GITHUB_OIDC_ENV):
            if var in os.environ:
                cmd += ["-e", var]  # by name: the value never appears here
        # cosign keeps Sigstore's trust root under $HOME (keyless); the user has no home in the image
        cmd += ["-e", "HOME=/tmp"]
        config = Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker")
        if config.is_dir():  # registry logins (`docker login` writes them here)
            cmd += ["-v", f"{config.resolve()}:{_DOCKER_CONFIG}:ro", "-e", f"DOCKER_CONFIG={_DOCKER_CONFIG}"]
        ca = Path(os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt")
        if ca.is_file():  # the image has no trust store: the host's decides
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
        name = f"{CONTAINER_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}" if self.mode == "image" else None
        argv = self.argv(args, cwd, name)
        running = self.running
        with running.lock:
            if running.cancelled:
                raise Cancelled(f"cosign {args[0]} was not started: the command was interrupted")
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=cwd if self.mode == "host" else None,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    stdin=subprocess.DEVNULL,
                    text=True,
                )
            except OSError as exc:
                raise BuildError(f"cannot run {self.describe()}: {exc.strerror or exc}") from None
            running.procs[proc] = name
        try:
            out, err = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            raise BuildError(f"cosign {args[0]} did not finish within {TIMEOUT} s") from None
        finally:
            # Whatever ended the wait (Ctrl-C in this thread, the timeout), no cosign outlives it.
            self._stop(proc, name)
            with running.lock:
                running.procs.pop(proc, None)
        if running.cancelled:
            raise Cancelled(f"cosign {args[0]} was stopped: the command was interrupted")
        done = subprocess.CompletedProcess(argv, proc.returncode, out, err)
        if check and done.returncode != 0:
            raise CosignFailed(f"cosign {args[0]} failed: {last_words(err)}")
        return done

    def cancel(self) -> None:
        """Stops every cosign of this object now running and refuses to start another (any thread)."""
        with self.running.lock:
            self.running.cancelled = True
            procs = list(self.running.procs.items())
        for proc, name in procs:
            self._stop(proc, name)

    def _stop(self, proc: subprocess.Popen, name: str | None) -> None:
        if proc.poll() is not None:
            return
        if name:
            # The engine runs the container: the docker CLI's death would not end it.
            subprocess.run([self.docker, "rm", "--force", name], capture_output=True, stdin=subprocess.DEVNULL)
        proc.kill()
        proc.wait()

    # -- what rocmforge asks of it -------------------------------------------------------------
    def _signing(self, key: Path | None) -> list:
        """key None: keyless, with GitHub's token only (cosign would otherwise try each provider and
        then a browser), a Fulcio certificate and a Rekor entry (cosign's defaults)."""
        if key is None:
            return ["--oidc-provider=github-actions"]
        return ["--key", key, "--tlog-upload=false"] + (["--use-signing-config=false"] if self.signing_config else [])

    def public_key(self, key: Path) -> str:
        """The public half of a private key: proves the file is a key cosign reads with COSIGN_PASSWORD."""
        if PASSWORD_ENV not in os.environ:
            raise UserError(
                f"${PASSWORD_ENV} is not set: cosign reads the key's password from it "
                "(export it, empty for a key without one)",
                file=str(key),
                field="--sign-key",
            )
        proc = self.run(["public-key", "--key", key], check=False)
        if proc.returncode != 0 or "BEGIN PUBLIC KEY" not in proc.stdout:
            raise UserError(
                f"cosign cannot read this key with ${PASSWORD_ENV}: {last_words(proc.stderr)}",
                file=str(key),
                field="--sign-key",
            )
        return proc.stdout

    def sign(self, key: Path | None, ref: str, *, http: bool) -> None:
        self.run(["sign", "--yes", *self._signing(key), *_http(http), ref])

    def attest(self, key: Path | None, ref: str, predicate: Path, kind: str, *, http: bool) -> None:
        # --replace: a push run again replaces its statement of this type instead of adding a second one
        self.run(
            [
                "attest",
                "--yes",
                "--replace",
                "--type",
                kind,
                "--predicate",
                predicate,
                *self._signing(key),
                *_http(http),
                ref,
            ]
        )

    def verify(self, who: Identity, ref: str, *, http: bool) -> list[dict]:
        """The verified signature payloads (cosign prints them as one JSON array)."""
        proc = self.run(["verify", *who.args(), *_http(http), "--output", "json", ref])
        try:
            payloads = json.loads(proc.stdout)
        except ValueError:
            raise CosignFailed(f"cosign verify printed no JSON: {last_words(proc.stdout)}") from None
        return payloads if isinstance(payloads, list) else [payloads]

    def verify_attestations(self, who: Identity, ref: str, kind: str, *, http: bool) -> list[dict]:
        """The in-toto statements of every attestation of this type that the signer verifies (cosign
        prints one DSSE envelope per line)."""
        proc = self.run(["verify-attestation", "--type", kind, *who.args(), *_http(http), ref])
        return [decode_envelope(line) for line in proc.stdout.splitlines() if line.strip()]


def _http(allowed: bool) -> list[str]:
    return ["--allow-http-registry"] if allowed else []


def decode_envelope(line: str) -> dict:
    """The in-toto statement in one DSSE envelope line that `cosign verify-attestation` printed; raises
    CosignFailed when the line is no such envelope."""
    try:
        statement = json.loads(base64.b64decode(json.loads(line)["payload"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise CosignFailed(f"cosign verify-attestation printed something that is not a DSSE envelope ({exc})") from None
    if not isinstance(statement, dict):
        raise CosignFailed("cosign verify-attestation printed an envelope whose payload is no in-toto statement")
    return statement


def last_words(text: str, lines: int = 3) -> str:
    """cosign's explanation without its usage text or Go log prefixes."""
    kept = [
        ln.strip()
        for ln in text.splitlines()
        if ln.strip() and not ln.startswith(("Usage:", "  ", "WARNING: Skipping tlog verification"))
    ]
    return " ".join(kept[-lines:]) or "(no output)"


def docker_cli() -> str:
    """The docker command that runs the tools image (/usr/bin/docker first, else from PATH); raises BuildError
    when there is none."""
    found = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else shutil.which("docker")
    if not found:
        raise BuildError("the docker command is not installed: it runs the cosign tools image")
    return found


def find(client: Engine | None = None, log: Callable[[str], None] = lambda msg: None) -> Cosign:
    """cosign as ROCMFORGE_COSIGN says, else from PATH, else the tools image (made when missing)."""
    choice = os.environ.get(ENV, "").strip()
    if choice and choice != "image":
        if not Path(choice).is_file() or not os.access(choice, os.X_OK):
            raise UserError(f"{choice!r} is not an executable cosign (or 'image' for the tools image)", field=f"${ENV}")
        return host(choice)
    on_path = shutil.which("cosign")
    if not choice and on_path:
        return host(on_path)
    from rocmforge.release import toolsimage  # lzma and tarfile: only when the engine runs cosign

    if client is None:
        from rocmforge.assemble import engine  # docker-py (0.17 s): only when the engine runs cosign

        client = engine.connect()
    pin = toolsimage.load_pin()
    ref = toolsimage.ensure(client, pin, log)
    return Cosign(
        "image",
        ref,
        pin.upstream_version,
        signing_config=int(pin.upstream_version.split(".")[0]) >= 3,
        docker=docker_cli(),
    )


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
        raise UserError(
            f"{path} is cosign {version}; rocmforge needs cosign {MIN_MAJOR}.x or newer "
            f"(or unset ${ENV} / set it to 'image' to use the pinned tools image)",
            field=f"${ENV}",
        )
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
