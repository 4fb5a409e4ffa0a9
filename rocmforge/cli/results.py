"""What `--json` prints for every command that reports a result: one JSON document on stdout,
described by rocmforge/data/result.schema.json. Every command but list and archs prints one object,
whatever the outcome, with the same three keys first:

    command    the subcommand (COMMANDS below)
    ok         true when the command did all it was asked (exit code 0)
    exit_code  the program's exit code: 0, or 1 when the command ran but something failed

then the command's own keys:

    build   targets: [{target, status ("built", "up-to-date", "from cache"), image_id, engine_id,
            size_bytes (or null), elapsed_s, content_tag, tag}] in build order; elapsed_s (all)
    lock    check: false; resolved: [str]; unresolved: [str]; wrote: the lock's path, or null
            when it was left unchanged
    lock --check
            check: true; targets: [str]; problems: [str] (stale or unavailable pins)
    pull    pulled: the publish record (as `pull` prints without --json), or for a REF the
            verified statements with local_tags
    push    pushed: the publish record written (as `push` prints without --json)
    clean   dry_run: bool; items: [{kind, ref, size_bytes}]; logs_removed: bool
    doctor  checks: [{name, status ("ok", "warn", "fail", "skipped"), detail}]; recommendations:
            [{env, reason}]; exit_code 1 when a check failed
    render  check: bool; out: the images folder; changes: [str] (written, or with --check differing)
    verify  ref, repository, digest, config_digest, target, content_hash, signatures, sbom,
            provenance, test_result, release (one image); or ref, index, images (each of those
            keys with archs and variant), release (a rocmforge index)
    verify-repro
            target, identical, image_ids, against, timings, difference, explanation, and
            variants (each the same keys) where the target has any; exit_code 1 when not identical
    test    the main image's suite report (image, image_id, target, pytest_exit, suites, tests,
            host, what it was judged against) with image_ok (its own verdict), and variants (each
            variant's report, with its own ok) where the target has any; ok and exit_code judge
            them all, as the exit code does
    report  the matrix report as report.json holds it (generated, matrix, host_gpu, suites,
            targets, summary)
    rocminfo
            driver_loaded, runtime_version, agents, gpus, problems, stripped
    manifest
            written: [{target, image_id, manifest, sbom}] (the paths written)
    context target, out, tag, files: [str] (relative to out)
    normalise
            target, source, pulled, image_id, content_tag, tag

A command that stops on an error of exit 1 (the engine, a failed build, a refused pull) prints,
besides its `error:` line on stderr, {command, ok: false, exit_code: 1, error: that line's text}
and none of its own keys. A user's error (exit 2) prints no JSON: its one line on stderr is the
answer, before anything ran.

list and archs keep the arrays they always printed (CI's plan job and many tests read `.[]`), and
the schema describes each of them as it is: list a row per target (list --gpu-jobs a row per target
and arch), archs a row per path. They describe rather than judge: list always exits 0, and archs
exits 2 (after the rows) only for a damaged file, which its row's error names."""

from __future__ import annotations

import json

# The commands whose --json prints this object (the enum of "command" in the schema's $defs.result).
COMMANDS = (
    "build",
    "lock",
    "pull",
    "push",
    "clean",
    "doctor",
    "render",
    "verify",
    "verify-repro",
    "test",
    "report",
    "rocminfo",
    "manifest",
    "context",
    "normalise",
)


def emit(command: str, exit_code: int, **fields) -> int:
    """Print the result object; returns exit_code for the command to return."""
    shown = {"command": command, "ok": exit_code == 0, "exit_code": exit_code, **fields}
    print(json.dumps(shown, indent=2, default=str))
    return exit_code


def failed(args, message: str) -> None:
    """A command of COMMANDS under --json that stopped on an error of exit 1: its object all the same,
    so a script reads ok and error instead of an empty stdout."""
    if getattr(args, "json", False) and getattr(args, "command", None) in COMMANDS:
        emit(args.command, 1, error=message)
