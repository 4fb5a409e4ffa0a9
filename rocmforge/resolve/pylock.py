"""Resolving a Python environment that builds on an image's own Python stack (a torch image).

The closure is resolved where the build will install it: in a container of the image the
environment's builder stage starts from (the base, plus the apt closure of the targets it is built
on), with the environment's venv seeing the system site-packages, the torch family held at the
versions found there, and wheels only. pip's own report gives every file and its sha256; the host
fetch then downloads exactly those files, as for any locked environment."""

from __future__ import annotations

import json
import posixpath
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.host import aptmirror
from rocmforge.host.container import TrackedContainer

if TYPE_CHECKING:
    from collections.abc import Callable

    from rocmforge.host.engines import Engine

# The distributions that make up "the image's torch": never replaced by an environment.
TORCH_FAMILY = ("torch", "torchvision", "torchaudio", "triton", "pytorch-triton-rocm")
WORK = "/tmp/rocmforge-lock"

_INSPECT = r"""
import json, sys
from importlib import metadata
out = {"python": sys.version.split()[0], "family": {}}
for name in %r:
    try:
        out["family"][name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        pass
try:
    import torch
    out["torch_version"] = torch.__version__
    out["torch_hip"] = getattr(torch.version, "hip", None)
except Exception as exc:
    out["torch_error"] = "%%s: %%s" %% (type(exc).__name__, exc)
print(json.dumps(out))
""" % (TORCH_FAMILY,)  # noqa: UP031  (the script's own braces stay as they are)


class PythonLockError(Exception):
    pass


@dataclass
class Resolved:
    wheels: dict[str, dict]  # canonical name -> {version, file, sha256: [..]}
    held: dict  # {packages: {name: version}, torch_version, torch_hip}


def canonical(name: str) -> str:
    """The PEP 503 form of a distribution name: `Foo_Bar.baz` -> `foo-bar-baz`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def report_to_wheels(report: dict) -> dict[str, dict]:
    """pip's `--report` install list as lock entries; refuses anything that is not a wheel with a sha256."""
    out: dict[str, dict] = {}
    for item in report.get("install", []):
        meta = item.get("metadata", {})
        name, version = canonical(meta.get("name", "?")), meta.get("version", "?")
        info = item.get("download_info") or {}
        url = info.get("url", "")
        archive = info.get("archive_info") or {}
        digest = (archive.get("hashes") or {}).get("sha256")
        if not digest and str(archive.get("hash", "")).startswith("sha256="):
            digest = archive["hash"].split("=", 1)[1]
        filename = urllib.parse.unquote(posixpath.basename(urllib.parse.urlparse(url).path))
        if not filename.endswith(".whl"):
            raise PythonLockError(
                f"{name}=={version} has no wheel for this Python ({filename or url or 'no file'}); "
                "rocmforge installs wheels only"
            )
        if not digest:
            raise PythonLockError(f"{name}=={version}: the index gave no sha256 for {filename}")
        out[name] = {"version": version, "file": filename, "sha256": [digest]}
    return dict(sorted(out.items()))


# Where registry images keep their Pythons, listed when python_bin names none of them.
PYTHON_PLACES = ("/opt/conda/envs/*/bin/python", "/opt/conda/bin/python", "/usr/bin/python3", "/usr/local/bin/python3")
# PEP 440 (public version plus an optional local part such as AMD's +git53da8f8 or +rocm5.7).
PEP440_RE = re.compile(
    r"^([0-9]+!)?[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?"
    r"(\+[a-z0-9]+(\.[a-z0-9]+)*)?$",
    re.I,
)


def torch_version_problem(version: object, dist_version: object) -> str | None:
    """Why the torch an image reports cannot be held by a pip constraint (None when it can)."""
    for what, v in (("torch.__version__", version), ("the torch distribution's version", dist_version)):
        if v is not None and not PEP440_RE.match(str(v)):
            return f"{what} is {v!r}, not a version pip can hold (PEP 440)"
    return None


def resolve(
    client: Engine,
    image: str,
    *,
    python_bin: str,
    requirements: dict[str, str],
    apt_pins: list[str],
    ca_bundle: Path | None,
    log: Callable[[str], None],
    stack_name: str | None = None,
) -> Resolved:
    """The wheels pip adds to image's Python for requirements, with the torch family held at the image's
    versions (returned as held). Raises PythonLockError when python_bin or its torch does not work there,
    or pip cannot resolve without replacing them."""
    with TrackedContainer(client, image) as tc:
        if apt_pins:
            log(f"python lock in {image}: installing the {len(apt_pins)} packages the environment builds on")
            setup_env, _ = aptmirror.container_env()
            r = tc.exec(
                f"export DEBIAN_FRONTEND=noninteractive; {aptmirror.SETUP} && {aptmirror.UPDATE} -qq "
                "&& apt-get install -y -qq --no-install-recommends " + " ".join(apt_pins),
                timeout=1800,
                env=setup_env,
            )
            if r.rc != 0:
                raise PythonLockError(f"installing the locked apt closure failed: {r.output.strip()[-400:]}")
        setting = f"stacks.{stack_name}.python_bin" if stack_name else "the stack's python_bin"
        if tc.exec(["test", "-x", python_bin]).rc != 0:
            have = tc.exec(["sh", "-c", "ls -1d " + " ".join(PYTHON_PLACES) + " 2>/dev/null"]).stdout.split()
            raise PythonLockError(
                f"{python_bin} does not exist in {image}; set {setting} in matrix.yaml to the "
                f"interpreter that has torch (the image has: {', '.join(have) or 'none of ' + ' '.join(PYTHON_PLACES)})"
            )
        r = tc.exec([python_bin, "-c", _INSPECT], timeout=300)
        if r.rc != 0:
            raise PythonLockError(f"{python_bin} ({setting}) does not run in {image}: {r.output.strip()[-300:]}")
        found = json.loads(r.stdout.strip().splitlines()[-1])
        if "torch_error" in found:
            raise PythonLockError(
                f"the image's torch does not import with {python_bin} ({setting}): {found['torch_error']}"
            )
        problem = torch_version_problem(found.get("torch_version"), found.get("family", {}).get("torch"))
        if problem:
            raise PythonLockError(
                f"{problem} ({python_bin}, {setting}); pin a base whose torch reports a PEP 440 "
                "version (stacks.*.base.registry.tag / digest)"
            )
        held = {
            "packages": dict(sorted(found["family"].items())),
            "torch_version": found["torch_version"],
            "torch_hip": found["torch_hip"],
        }
        files = {
            "requirements.txt": "".join(f"{k}=={v}\n" for k, v in sorted(requirements.items())).encode(),
            "constraints.txt": "".join(f"{k}=={v}\n" for k, v in held["packages"].items()).encode(),
        }
        if ca_bundle:
            files["ca.pem"] = ca_bundle.read_bytes()  # this throw-away container only, never an image
        tc.put_files(WORK, files, mode=0o644)
        cert = f" --cert {WORK}/ca.pem" if ca_bundle else ""
        r = tc.exec(
            f"{python_bin} -m venv --system-site-packages {WORK}/venv && {WORK}/venv/bin/python -m pip "
            f"install --dry-run --quiet --disable-pip-version-check --only-binary=:all:{cert} "
            f"--report {WORK}/report.json -r {WORK}/requirements.txt -c {WORK}/constraints.txt",
            timeout=1800,
        )
        if r.rc != 0:
            lines = r.output.splitlines()
            errors = [ln for ln in lines if "ERROR" in ln or "error" in ln.lower()]
            # pip names the requirements that clash after this line: they are the useful part.
            cause = next((i for i, ln in enumerate(lines) if "conflict is caused by" in ln), None)
            clash = [ln.strip() for ln in lines[cause + 1 : cause + 8] if ln.strip()] if cause is not None else []
            raise PythonLockError(
                "pip could not resolve the environment against the image's packages: "
                + ("; ".join(errors[-3:] + clash) or r.output.strip()[-400:])
            )
        report = json.loads(tc.exec(["cat", f"{WORK}/report.json"]).stdout)
    wheels = report_to_wheels(report)
    moved = sorted(set(wheels) & set(held["packages"]))
    if moved:  # the constraints make this impossible; a report saying otherwise is not trusted
        raise PythonLockError(f"the resolution would replace the image's {', '.join(moved)}")
    return Resolved(wheels, held)
