"""The grammar of the commands about a GPU host and the registry: push, pull, verify, doctor, run."""

from __future__ import annotations

import argparse

from rocmforge.cli.grammar import FILE, command, host, json_option, release, target_option


def _signer_options(p: argparse.ArgumentParser) -> None:
    """Whom the signature must come from: a key, or keyless, an identity and its issuer (one or the
    other; release_commands.signer_of checks the combination)."""
    p.add_argument(
        "--key", default=None, metavar="PUB", help="cosign public key the image must be signed with"
    ).complete = FILE  # type: ignore[attr-defined]
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
    p.add_argument(
        "--rocminfo",
        metavar="FILE",
        help="judge the images against a saved rocminfo output instead of this host's GPUs",
    )
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


def host_commands(sub: argparse._SubParsersAction) -> None:
    """Publishing, pulling and running on a GPU host."""
    pu = command(sub, "push", help="push a target's image (only if that exact image passed its suites)")
    target_option(pu)
    pu.add_argument(
        "--registry",
        required=True,
        metavar="HOST[:PORT][/NS]",
        help="the registry and namespace to push to (no https://)",
    )
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
    json_option(pu, "the publish record written")
    pu.set_defaults(run=release("push"))

    pl = command(
        sub,
        "pull",
        help="pull a published target (--target) or a signed image (REF --key) by digest; verify before tagging",
    )
    target_option(pl, required=False, help="a target of the checkout, pulled by its publish record")
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
    json_option(pl, "the publish record of what was pulled")
    pl.set_defaults(run=release("pull"))

    vf = command(sub, "verify", help="check a pushed image's signature and attestations (no layers are pulled)")
    vf.add_argument("ref", metavar="REGISTRY/REPO:TAG|@DIGEST", help="the pushed image (or rocmforge index)")
    _signer_options(vf)
    vf.add_argument(
        "--allow-superseded",
        action="store_true",
        help="accept an image the repository's release record no longer names (an older release)",
    )
    json_option(vf, "what was verified")
    vf.set_defaults(run=release("verify"))

    dr = command(sub, "doctor", help="check this host for running ROCm containers")
    json_option(dr, "every check with its status and detail")
    dr.add_argument("--rocminfo", metavar="FILE", help="diagnose a saved rocminfo output instead of this host's GPUs")
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

    rn = command(sub, "run", help="docker run a target's image (or any --image) with the flags ROCm needs")
    target_option(rn, required=False, help="a target of the matrix: its image that covers this host's GPUs")
    rn.add_argument("--image", metavar="REF", help="run this image instead of a target's (no matrix needed)")
    rn.add_argument("--dry-run", action="store_true", help="print the command for Docker and for podman, run nothing")
    _host_gpu_options(rn, "with --dry-run: the command for a host copied under DIR (its nodes, groups, CDI spec)")
    rn.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="-- COMMAND",
        help="the command and its arguments (default: the image's)",
    )
    rn.set_defaults(run=host("run"))
