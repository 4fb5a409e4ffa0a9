"""The command line's grammar: each subcommand names the function that runs it (set_defaults(run=...))."""

from __future__ import annotations

import argparse

from rocmforge.cli import help_text
from rocmforge.cli.grammar import (
    CA_BUNDLE_HELP,
    FILE,
    MAIN_JOB,
    Command,
    Parser,
    Version,
    build,
    build_options,
    builder_option,
    command,
    global_options,
    json_option,
    project,
    reader,
    target_option,
    verbose_option,
)
from rocmforge.cli.host_grammar import host_commands
from rocmforge.shared.suitenames import SUITE_NAMES


def build_parser(prog: str = "build.py") -> argparse.ArgumentParser:
    """The whole grammar: options, subcommands and the function each runs. prog: the name the
    program was started by, which usage lines and examples show."""
    p = Parser(
        prog=prog,
        description="Build, verify and publish version-locked ROCm images from matrix.yaml.",
        epilog=help_text.MAIN,
    )
    p.add_argument("--version", action=Version, help="print the version and the git commit it was built from")
    global_options(p, top=True)
    p.add_argument("--target", metavar="TARGET", help="shorthand: build TARGET (with prerequisites), then test it")
    p.add_argument("--ca-bundle", default=None, metavar="FILE", help=CA_BUNDLE_HELP)
    build_options(p)
    verbose_option(p, "verbose")
    p.set_defaults(run=MAIN_JOB, prog=prog)
    sub = p.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND", title="commands")
    _describing_commands(sub)
    _building_commands(sub)
    host_commands(sub)
    cp = command(sub, "completion", help="print a shell completion script for bash or zsh")
    cp.add_argument("shell", choices=("bash", "zsh"), help="the shell the script is for")
    cp.set_defaults(run=Command("completion", "completion"))
    return p


def _describing_commands(sub: argparse._SubParsersAction) -> None:
    ls = command(sub, "list", help="targets with stack, archs, dependencies and buildability here")
    json_option(ls, "the targets")
    ls.add_argument(
        "--gpu-jobs",
        action="store_true",
        help="with --json: one entry per (target, arch) with the self-hosted runner labels for its GPU suites",
    )
    ls.set_defaults(run=project("list_targets"))

    r = command(sub, "render", help="write images/<target>/ from matrix.yaml and templates/")
    r.add_argument("--out", default=None, metavar="DIR", help="output folder (default images/ beside the matrix)")
    r.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 naming every stale, missing or extra file"
    )
    json_option(r, "the files written (with --check: found to differ)")
    r.set_defaults(run=project("render"))

    rp = command(sub, "report", help="the matrix report: every target against every suite, as a static HTML page")
    rp.add_argument(
        "--out",
        dest="report_out",
        default=None,
        metavar="DIR",
        help="folder for index.html and report.json (default .rocmforge/report/)",
    )
    json_option(rp, "the report")
    rp.add_argument(
        "--markdown",
        default=None,
        metavar="FILE",
        help="append a Markdown summary to this file (CI: $GITHUB_STEP_SUMMARY)",
    )
    rp.set_defaults(run=project("report"))

    ri = command(sub, "rocminfo", help="parse a saved rocminfo output")
    ri.add_argument("file", metavar="FILE", help="what `rocminfo` printed, saved to a file").complete = FILE  # type: ignore[attr-defined]
    json_option(ri, "the agents found")
    ri.set_defaults(run=reader("rocminfo"))

    ar = command(sub, "archs", help="list the GPU architectures compiled into files or folders")
    ar.add_argument(
        "paths", nargs="+", metavar="PATH", help="binaries, libraries, code objects or folders to scan"
    ).complete = FILE  # type: ignore[attr-defined]
    json_option(ar, "each file's architectures")
    ar.set_defaults(run=reader("archs"))


def _building_commands(sub: argparse._SubParsersAction) -> None:
    b = command(sub, "build", help="build a target (and its prerequisites) on the Docker engine")
    target_option(b)
    b.add_argument("--ca-bundle", default=None, dest="build_ca_bundle", metavar="FILE", help=CA_BUNDLE_HELP)
    build_options(b, "build_")
    json_option(b, "each target's status, image ID, size and elapsed time")
    b.set_defaults(run=build("build"))

    t = command(sub, "test", help="run the verification suites inside a built image")
    target_option(
        t,
        required=False,
        help="a built matrix target (with --image: the target whose archs and pins the image is checked against)",
    )
    t.add_argument(
        "--image",
        metavar="REF",
        help="any image reference (without --target its io.rocmforge.* labels give target and archs)",
    )
    t.add_argument("--junit", metavar="FILE", help="write a JUnit XML report here")
    json_option(t, "the results")
    verbose_option(t, "test_verbose")
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

    lk = command(sub, "lock", help="resolve digests, apt closures, wheel hashes and git commits into matrix.lock")
    lk.add_argument(
        "--target",
        action="append",
        dest="lock_targets",
        metavar="TARGET",
        help="only this target and its prerequisites (repeatable)",
    )
    lk.add_argument("--check", action="store_true", help="write nothing; exit 1 listing every stale or unavailable pin")
    lk.add_argument("--ca-bundle", default=argparse.SUPPRESS, metavar="FILE", help=CA_BUNDLE_HELP)
    json_option(lk, "what was resolved or found stale")
    lk.set_defaults(run=build("lock"))

    vr = command(sub, "verify-repro", help="build a target twice without cache and compare the image IDs")
    target_option(vr)
    builder_option(vr, "build_")
    vr.add_argument(
        "--against-built",
        action="store_true",
        help="build once without cache and compare with the image already built for the target "
        "(and each variant): a rebuilder's check of an image you have, at half the cost",
    )
    json_option(vr, "both builds' image IDs")
    vr.set_defaults(run=build("verify_repro"))

    mf = command(sub, "manifest", help="write the manifest and CycloneDX SBOM of a built target")
    target_option(mf)
    json_option(mf, "the files written, per image")
    mf.set_defaults(run=build("manifest"))

    cx = command(
        sub,
        "context",
        help="write a target's complete build context to a folder, for `docker build` or `docker buildx bake`",
    )
    target_option(cx, help="a target, or a variant's key (hip-runtime-gfx1100)")
    cx.add_argument("--out", required=True, metavar="DIR", help="the folder (created; must be empty or absent)")
    json_option(cx, "the files written")
    cx.set_defaults(run=build("context"))

    nm = command(
        sub,
        "normalise",
        help="take a target's image built from images/docker-bake.json (on any builder) and give it "
        "rocmforge's image ID, tags, manifest and SBOM",
    )
    target_option(nm, help="a target, or a variant's key (hip-runtime-gfx1100)")
    nm.add_argument(
        "--image",
        default=None,
        metavar="REF",
        help="the image to take, pulled when the engine lacks it (default: the bake file's tag, "
        "rocmforge-bake/NAME:content-HASH, removed once normalised)",
    )
    json_option(nm, "the image ID and tags given")
    nm.set_defaults(run=build("normalise"))

    cl = command(
        sub,
        "clean",
        help="remove the images rocmforge built (all targets or one), what interrupted "
        "builds left behind, and the logs",
    )
    target_option(cl, required=False, help="only this target's images (default: every target's)")
    cl.add_argument("--dry-run", dest="clean_dry_run", action="store_true", help="list what would be removed")
    json_option(cl, "what was (or would be) removed")
    cl.set_defaults(run=build("clean"))
