"""What --help says beyond each option: where the matrix and the state are found, and an example
per command. argparse fills in %(prog)s: the program as it was started (`rocmforge`, `build.py`) and,
in a command's example, the command (`rocmforge list`)."""

from __future__ import annotations

MAIN = """\
examples:
  # the targets of the matrix, and whether they build here
  %(prog)s list
  # build hip-runtime (and what it needs), then test it
  %(prog)s --target hip-runtime
  # can this host build and run ROCm images?
  %(prog)s doctor

the matrix: --matrix FILE, else $ROCMFORGE_MATRIX, else the first matrix.yaml found in the
  current folder or a folder above it (as git finds .git). doctor, rocminfo, archs, verify,
  pull REF, completion and run --image need none.
state: logs, build caches, manifests and suite results are kept in .rocmforge/ beside the
  matrix (--state-dir DIR elsewhere); publish records in published/ beside the matrix.
environment: DOCKER_HOST (the engine), ROCMFORGE_CACHE_REGISTRY, ROCMFORGE_REGISTRY_MIRROR and
  ROCMFORGE_GIT_MIRRORS (where lock and build fetch from without direct access).
global options (--matrix, --state-dir, --quiet, --progress) go before or after the command.
--json: one JSON document on stdout: an object that starts with command, ok and exit_code,
  but for list and archs (an array, a row per target or file). One schema describes them all:
  rocmforge/data/result.schema.json.
"""

EXAMPLES = {
    "list": "%(prog)s --json | jq '.[].name'",
    "render": "%(prog)s --check",
    "report": "%(prog)s --out site/",
    "rocminfo": "%(prog)s saved-rocminfo.txt --json",
    "archs": "%(prog)s /opt/rocm/lib/librocblas.so",
    "build": "%(prog)s --target hip-runtime --json",
    "test": "%(prog)s --target hip-runtime --junit results.xml",
    "lock": "%(prog)s --target hip-runtime\n  %(prog)s --check --json",
    "verify-repro": "%(prog)s --target hip-runtime",
    "manifest": "%(prog)s --target hip-runtime",
    "context": "%(prog)s --target hip-runtime --out ctx/ && docker build ctx/",
    "normalise": "docker buildx bake --file images/docker-bake.json hip-runtime\n  %(prog)s --target hip-runtime\n"
    "  %(prog)s --target hip-runtime --image registry.example/rocmforge-bake/hip-runtime:TAG",
    "clean": "%(prog)s --target hip-runtime --dry-run",
    "push": "%(prog)s --target hip-runtime --registry ghcr.io/ORG --sign-key cosign.key",
    "pull": "%(prog)s --target hip-runtime\n  %(prog)s ghcr.io/ORG/hip-runtime:TAG --key cosign.pub",
    "verify": "%(prog)s ghcr.io/ORG/hip-runtime:TAG --key cosign.pub",
    "doctor": "%(prog)s --json",
    "run": "%(prog)s --target hip-runtime -- rocminfo\n  %(prog)s --image rocm/dev-ubuntu-22.04:6.1 --dry-run",
    "completion": "%(prog)s bash > ~/.local/share/bash-completion/completions/rocmforge\n"
    "  %(prog)s zsh > ~/.zfunc/_rocmforge   # a folder on $fpath",
}


def example(command: str) -> str:
    return "example:\n  " + EXAMPLES[command] + "\n"
