"""The command line's grammar: each subcommand names the function that runs it (set_defaults(run=...))."""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass

from rocmforge.shared.suitenames import SUITE_NAMES


@dataclass(frozen=True)
class Command:
    """A subcommand's function, named here and imported when it runs: the command modules import
    every stage (pydantic, jinja2, the image codec: 0.6 s), which `--help` and a usage error skip."""

    module: str
    function: str

    def __call__(self, args: argparse.Namespace) -> int:
        invocation = importlib.import_module("rocmforge.cli.invocation")
        run = getattr(importlib.import_module(f"rocmforge.cli.{self.module}"), self.function)
        return run(invocation.Invocation(args))


def build(function: str) -> Command:
    """A subcommand of build_commands."""
    return Command("build_commands", function)


def project(function: str) -> Command:
    """A subcommand of project_commands."""
    return Command("project_commands", function)


def reader(function: str) -> Command:
    """A subcommand of reader_commands."""
    return Command("reader_commands", function)


def host(function: str) -> Command:
    """A subcommand of host_commands."""
    return Command("host_commands", function)


def release(function: str) -> Command:
    """A subcommand of release_commands."""
    return Command("release_commands", function)


MAIN_JOB = build("build_and_test")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, like every other user error
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _build_options(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """Options of a build, accepted before the subcommand (for the bare --target) and after `build`."""
    p.add_argument(
        "--cache-registry",
        dest=f"{prefix}cache_registry",
        default=None,
        help="HOST[:PORT][/NS]: pull targets by content tag from this registry instead of building "
        "them, push what was built (default $ROCMFORGE_CACHE_REGISTRY; namespace rocmforge-cache)",
    )
    p.add_argument(
        "--cache-readonly",
        dest=f"{prefix}cache_readonly",
        action="store_true",
        help="only pull from the cache registry (pull requests)",
    )
    p.add_argument(
        "--check-disk",
        dest=f"{prefix}check_disk",
        action="store_true",
        help="before each build, fail unless the engine has the disk the matrix says it needs (runner.disk_gb)",
    )


def _verbose(p: argparse.ArgumentParser, dest: str) -> None:
    """`test -v` and the bare `--target X -v` (a dest of each: a subcommand's default would undo the other)."""
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        dest=dest,
        help="below the suites table: each check's reason and figures",
    )


def _target(p: argparse.ArgumentParser, required: bool = True, help: str | None = None) -> None:
    p.add_argument("--target", required=required, dest="cmd_target", help=help)


def build_parser() -> argparse.ArgumentParser:
    """The whole grammar: options, subcommands and the function each runs."""
    p = _Parser(prog="build.py", description="Build, verify and publish version-locked ROCm images from matrix.yaml.")
    p.add_argument("--matrix", default="matrix.yaml", help="the matrix file (default ./matrix.yaml)")
    p.add_argument("--state-dir", default=None, help="logs and caches (default .rocmforge/ beside the matrix)")
    p.add_argument("--target", help="shorthand: build TARGET (with prerequisites), then test it")
    p.add_argument(
        "--ca-bundle",
        default=None,
        help="CA bundle for HTTPS behind a TLS-intercepting proxy "
        "(default: $PIP_CERT, $REQUESTS_CA_BUNDLE or $SSL_CERT_FILE); used only in builder stages",
    )
    _build_options(p)
    _verbose(p, "verbose")
    p.set_defaults(run=MAIN_JOB)
    sub = p.add_subparsers(dest="command", parser_class=_Parser)
    _describing_commands(sub)
    _building_commands(sub)
    _host_commands(sub)
    return p


def _describing_commands(sub: argparse._SubParsersAction) -> None:
    ls = sub.add_parser("list", help="targets with stack, archs, dependencies and buildability here")
    ls.add_argument("--json", action="store_true")
    ls.add_argument(
        "--gpu-jobs",
        action="store_true",
        help="with --json: one entry per (target, arch) with the self-hosted runner labels for its GPU suites",
    )
    ls.set_defaults(run=project("list_targets"))

    r = sub.add_parser("render", help="write images/<target>/ from matrix.yaml and templates/")
    r.add_argument("--out", default=None, help="output folder (default images/ beside the matrix)")
    r.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 naming every stale, missing or extra file"
    )
    r.set_defaults(run=project("render"))

    rp = sub.add_parser("report", help="the matrix report: every target against every suite, as a static HTML page")
    rp.add_argument(
        "--out",
        dest="report_out",
        default=None,
        help="folder for index.html and report.json (default .rocmforge/report/)",
    )
    rp.add_argument("--json", action="store_true", help="print the report as JSON")
    rp.add_argument(
        "--markdown", default=None, help="append a Markdown summary to this file (CI: $GITHUB_STEP_SUMMARY)"
    )
    rp.set_defaults(run=project("report"))

    ri = sub.add_parser("rocminfo", help="parse a saved rocminfo output")
    ri.add_argument("file")
    ri.add_argument("--json", action="store_true")
    ri.set_defaults(run=reader("rocminfo"))

    ar = sub.add_parser("archs", help="list the GPU architectures compiled into files or folders")
    ar.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    ar.add_argument("--json", action="store_true")
    ar.set_defaults(run=reader("archs"))


def _building_commands(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser("build", help="build a target (and its prerequisites) on the Docker engine")
    _target(b)
    b.add_argument("--ca-bundle", default=None, dest="build_ca_bundle", help="as the global --ca-bundle")
    _build_options(b, "build_")
    b.set_defaults(run=build("build"))

    t = sub.add_parser("test", help="run the verification suites inside a built image")
    _target(
        t,
        required=False,
        help="a built matrix target (with --image: the target whose archs and pins the image is checked against)",
    )
    t.add_argument(
        "--image", help="any image reference (without --target its io.rocmforge.* labels give target and archs)"
    )
    t.add_argument("--junit", help="write a JUnit XML report here")
    t.add_argument("--json", action="store_true", help="print the results as JSON")
    _verbose(t, "test_verbose")
    t.add_argument(
        "--suite",
        action="append",
        dest="suites",
        choices=SUITE_NAMES,
        metavar="SUITE",
        help=f"run only this suite (repeatable; one of {', '.join(SUITE_NAMES)}); such a partial run is not "
        "recorded, since push needs every suite",
    )
    t.add_argument(
        "--require-gpu",
        action="store_true",
        dest="require_gpu",
        help="a GPU check that cannot see a GPU fails instead of being 'not GPU-verified' "
        "(implied on a host with /dev/kfd; the CI GPU job passes it)",
    )
    t.set_defaults(run=build("test"))

    lk = sub.add_parser("lock", help="resolve digests, apt closures, wheel hashes and git commits into matrix.lock")
    lk.add_argument(
        "--target", action="append", dest="lock_targets", help="only this target and its prerequisites (repeatable)"
    )
    lk.add_argument("--check", action="store_true", help="write nothing; exit 1 listing every stale or unavailable pin")
    lk.set_defaults(run=build("lock"))

    vr = sub.add_parser("verify-repro", help="build a target twice without cache and compare the image IDs")
    _target(vr)
    vr.add_argument("--json", action="store_true")
    vr.set_defaults(run=build("verify_repro"))

    mf = sub.add_parser("manifest", help="write the manifest and CycloneDX SBOM of a built target")
    _target(mf)
    mf.set_defaults(run=build("manifest"))

    cx = sub.add_parser(
        "context", help="write a target's complete build context to a folder, for `docker build` by hand"
    )
    _target(cx)
    cx.add_argument("--out", required=True, help="the folder (created; must be empty or absent)")
    cx.set_defaults(run=build("context"))

    cl = sub.add_parser(
        "clean",
        help="remove the images rocmforge built (all targets or one), what interrupted "
        "builds left behind, and the logs",
    )
    _target(cl, required=False)
    cl.add_argument("--dry-run", dest="clean_dry_run", action="store_true", help="list what would be removed")
    cl.set_defaults(run=build("clean"))


def _signer_options(p: argparse.ArgumentParser) -> None:
    """Whom the signature must come from: a key, or keyless, an identity and its issuer (one or the
    other; release_commands.signer_of checks the combination)."""
    p.add_argument("--key", default=None, metavar="PUB", help="cosign public key the image must be signed with")
    p.add_argument(
        "--certificate-identity",
        default=None,
        metavar="ID",
        help="keyless: the identity in the signing certificate, e.g. "
        "https://github.com/ORG/REPO/.github/workflows/FILE@refs/heads/main (with --certificate-oidc-issuer)",
    )
    p.add_argument(
        "--certificate-oidc-issuer",
        default=None,
        metavar="URL",
        help="keyless: the OIDC issuer of that identity, e.g. https://token.actions.githubusercontent.com",
    )


def _host_gpu_options(p: argparse.ArgumentParser, host_root_help: str) -> None:
    """How `run` and `pull` learn the GPUs an image must cover: this host's, or saved ones."""
    p.add_argument("--rocminfo", help="judge the images against a saved rocminfo output instead of this host's GPUs")
    p.add_argument(
        "--kfd-topology", metavar="DIR", help="judge the images against a saved copy of /sys/class/kfd/kfd/topology"
    )
    p.add_argument(
        "--arch",
        default=None,
        metavar="GFX",
        help="take the smallest of the target's images (main or variant) that carries GFX, whatever the host's GPUs",
    )
    p.add_argument("--host-root", metavar="DIR", help=host_root_help)


def _host_commands(sub: argparse._SubParsersAction) -> None:
    """Publishing, pulling and running on a GPU host."""
    pu = sub.add_parser("push", help="push a target's image (only if that exact image passed its suites)")
    _target(pu)
    pu.add_argument("--registry", required=True, help="HOST[:PORT][/NAMESPACE]")
    pu.add_argument(
        "--sign-key",
        default=None,
        metavar="FILE",
        help="cosign private key (password in $COSIGN_PASSWORD): sign the pushed digest and attach "
        "the SBOM, SLSA provenance and the suite results to it",
    )
    pu.add_argument(
        "--keyless",
        action="store_true",
        help="sign and attest as --sign-key does, keyless: a Sigstore (Fulcio) certificate for the "
        "GitHub Actions job's OIDC identity, logged in Rekor (GitHub Actions with "
        "`permissions: id-token: write` only)",
    )
    pu.add_argument(
        "--valid-for",
        default=None,
        metavar="DURATION",
        help="how long the signed release record stays valid (30d, 12h, 90m; default 30d)",
    )
    pu.add_argument(
        "--refresh",
        action="store_true",
        help="push no image: sign the release record again (new serial and expiry) for what the publish record names",
    )
    pu.set_defaults(run=release("push"))

    pl = sub.add_parser(
        "pull", help="pull a published target (--target) or a signed image (REF --key) by digest; verify before tagging"
    )
    _target(pl, required=False, help="a target of the checkout, pulled by its publish record")
    pl.add_argument(
        "ref",
        nargs="?",
        metavar="REGISTRY/REPO:TAG|@DIGEST",
        help="pull this signed image (no checkout needed; needs --key or the keyless identity)",
    )
    _signer_options(pl)
    pl.add_argument(
        "--allow-superseded",
        action="store_true",
        help="accept an image the repository's release record no longer names (an older release)",
    )
    _host_gpu_options(
        pl,
        "pick the image for the GPUs of a host copied under DIR (its rocminfo, KFD topology, "
        "environment) instead of this one's",
    )
    pl.set_defaults(run=release("pull"))

    vf = sub.add_parser("verify", help="check a pushed image's signature and attestations (no layers are pulled)")
    vf.add_argument("ref", metavar="REGISTRY/REPO:TAG|@DIGEST")
    _signer_options(vf)
    vf.add_argument(
        "--allow-superseded",
        action="store_true",
        help="accept an image the repository's release record no longer names (an older release)",
    )
    vf.add_argument("--json", action="store_true")
    vf.set_defaults(run=release("verify"))

    dr = sub.add_parser("doctor", help="check this host for running ROCm containers")
    dr.add_argument("--json", action="store_true")
    dr.add_argument("--rocminfo", help="diagnose a saved rocminfo output instead of this host's GPUs")
    dr.add_argument(
        "--kfd-topology",
        metavar="DIR",
        help="diagnose a saved copy of /sys/class/kfd/kfd/topology instead of this host's GPUs",
    )
    dr.add_argument(
        "--host-root",
        metavar="DIR",
        help="diagnose a host copied under DIR (DIR/dev-stat.txt, DIR/proc, DIR/sys, DIR/etc/cdi, ...) "
        "instead of this one: every absolute path is read relative to DIR",
    )
    dr.set_defaults(run=host("doctor"))

    rn = sub.add_parser("run", help="docker run a target with the flags ROCm needs")
    _target(rn)
    rn.add_argument("--dry-run", action="store_true", help="print the command for Docker and for podman, run nothing")
    _host_gpu_options(rn, "with --dry-run: the command for a host copied under DIR (its nodes, groups, CDI spec)")
    rn.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND ARGS... (default: the image's command)")
    rn.set_defaults(run=host("run"))
