"""The three statements `push --sign-key` attaches to an image digest, and what `verify` reads back
from them. Each is a standard predicate, so cosign and policy engines read them without rocmforge:

- the CycloneDX SBOM the build wrote (cosign --type cyclonedx);
- SLSA provenance v1 (--type slsaprovenance1): which rocmforge and commit built which target from
  which matrix, lock and rendered Dockerfile, and every locked input (base, apt packages at their
  versions, wheels with their hashes, git commits);
- in-toto's Test Result (https://in-toto.io/attestation/test-result/v0.1): the suites that ran
  inside this exact image, a "not GPU-verified" suite as warned, never as passed.

Pure functions: the caller gathers the inputs (records, files, digests)."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from rocmforge.define.kinds import GitSourceFetch, WheelsFetch
from rocmforge.verify.suites import NOT_GPU_VERIFIED, SuiteStatus

if TYPE_CHECKING:
    from rocmforge.render.plan import BuildPlan
    from rocmforge.resolve.lockmodel import Lock
    from rocmforge.verify.suites import SuitesReport

SBOM = "https://cyclonedx.org/bom"
PROVENANCE = "https://slsa.dev/provenance/v1"
TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"
# predicate type -> what `cosign attest/verify-attestation --type` calls it
COSIGN_TYPES = {SBOM: "cyclonedx", PROVENANCE: "slsaprovenance1", TEST_RESULT: TEST_RESULT}
BUILD_TYPE = "urn:rocmforge:build:image:v1"
BUILDER_ID = "urn:rocmforge:builder:build.py"
SUITES_URI = "urn:rocmforge:suites"
CONFIG_MEDIA_TYPE = "application/vnd.docker.container.image.v1+json"
# The suites whose pass `verify` and `pull` require: without them the image's libraries, pins or
# GPU code are unproven whatever host ran them.
REQUIRED_SUITES = ("contents", "linkage", "config", "versions", "archs")


def sha256(data: bytes) -> dict:
    """An in-toto digest set of data: {"sha256": hex}."""
    return {"sha256": hashlib.sha256(data).hexdigest()}


def chain(plan: BuildPlan, name: str) -> list[str]:
    """The target and every prerequisite it is built from or with (builder stages too: their inputs
    are inputs of the build), nearest first."""
    out, todo = [], [name]
    while todo:
        n = todo.pop(0)
        if n not in out:
            out.append(n)
            todo += plan.matrix.deps(n)
    return out


def resolved_dependencies(plan: BuildPlan, lock: Lock, name: str) -> list[dict]:
    """The lock's entries the target's build read, as SLSA ResourceDescriptors."""
    tp = plan.targets[name]
    base = lock.base(tp.stack)
    deps: list[dict] = []
    if base.kind == "registry" and base.digest:
        deps.append(
            {
                "name": "base",
                "uri": f"pkg:docker/{base.image}@{base.digest}",
                "digest": {"sha256": base.digest.split(":", 1)[1]},
            }
        )
    elif base.image_id:
        deps.append(
            {
                "name": "base",
                "uri": tp.labels.get("org.opencontainers.image.base.name", f"base:{tp.stack}"),
                "digest": {"sha256": base.image_id.split(":", 1)[1]},
                "annotations": {"kind": "bootstrap", "recipe": base.recipe or ""},
            }
        )
    steps = chain(plan, name)
    for key in sorted(k for k in lock.apt if any(k == s or k.startswith(f"{s}/") for s in steps)):
        for pkg, version in sorted(lock.apt[key].items()):
            deps.append(
                {"name": pkg, "uri": f"pkg:deb/debian/{pkg}@{version}?arch=amd64", "annotations": {"step": key}}
            )
    envs, git = set(), {}
    for s in steps:
        for item in plan.targets[s].fetches:
            if isinstance(item, WheelsFetch):
                envs.add(item.component)
            elif isinstance(item, GitSourceFetch):
                git[item.component] = item
    for env in sorted(envs):
        for pkg, wheel in sorted((lock.python.get(env) or {}).items()):
            for h in wheel.sha256:
                deps.append(
                    {
                        "name": wheel.file or pkg,
                        "uri": f"pkg:pypi/{pkg}@{wheel.version}",
                        "digest": {"sha256": h},
                        "annotations": {"environment": env},
                    }
                )
    for component, item in sorted(git.items()):
        deps.append({"name": component, "uri": f"git+{item.url}@{item.commit}", "digest": {"gitCommit": item.commit}})
    return deps


def provenance(
    plan: BuildPlan,
    lock: Lock,
    key: str,
    *,
    matrix_bytes: bytes,
    lock_bytes: bytes,
    version: str,
    commit: str,
    repro: dict | None = None,
) -> dict:
    """SLSA provenance v1 of one image (whose digest is the statement's subject): a target's main
    image by its name, or a variant by its key (hip-runtime-gfx1100)."""
    tp = plan.by_key(key)
    name = tp.name
    run: dict = {
        "builder": {"id": BUILDER_ID, "version": {"rocmforge": version, "commit": commit or "unknown"}},
        "metadata": {},
    }
    if repro:
        run["byproducts"] = [
            {
                "name": "verify-repro",
                "mediaType": "application/json",
                "annotations": {k: repro[k] for k in ("identical", "image_ids", "checked") if k in repro},
            }
        ]
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {
                "target": name,
                "matrix": {"name": "matrix.yaml", "digest": sha256(matrix_bytes)},
                "lock": {"name": "matrix.lock", "digest": sha256(lock_bytes)},
                "dockerfile": {"name": f"images/{key}/Dockerfile", "digest": sha256(tp.files["Dockerfile"])},
            },
            "internalParameters": {
                "content_hash": tp.content_hash,
                "stack": tp.stack,
                "archs": list(tp.archs),
                "variant": bool(tp.variant),
                "source_commit": commit or "unknown",
            },
            "resolvedDependencies": resolved_dependencies(plan, lock, name),
        },
        "runDetails": run,
    }


def suite_line(suite: str, status: SuiteStatus, detail: str) -> str:
    """One suite's line in the Test Result: `suite: detail`, with the status named when the suite is not
    GPU-verified or not applicable."""
    if status == SuiteStatus.NOT_GPU_VERIFIED:
        return f"{suite}: {NOT_GPU_VERIFIED}: {detail}"
    if status == SuiteStatus.NOT_APPLICABLE:
        return f"{suite}: not applicable: {detail.removeprefix('not applicable: ')}"
    return f"{suite}: {detail}"


def test_result(report: SuitesReport, *, archs: list[str], host: str, version: str, config_digest: str) -> dict:
    """in-toto Test Result of the suites recorded for this image: FAILED when any suite failed,
    WARNED when one could not be GPU-verified, else PASSED. A not-applicable suite (no torch for the
    workload suite) checked nothing that could fail: it is listed with the passed, saying so."""
    passed: list[str] = []
    warned: list[str] = []
    failed: list[str] = []
    for suite, outcome in report.suites.items():
        line = suite_line(suite, outcome.status, outcome.detail)
        {SuiteStatus.FAILED: failed, SuiteStatus.NOT_GPU_VERIFIED: warned}.get(outcome.status, passed).append(line)
    result = "FAILED" if failed or not report.ok else "WARNED" if warned else "PASSED"
    counts = {
        s: {"status": o.status.value, "passed": o.passed, "failed": o.failed, "not_gpu_verified": o.not_gpu_verified}
        for s, o in report.suites.items()
    }
    return {
        "result": result,
        "configuration": [
            {
                "name": "image-config",
                "digest": {"sha256": config_digest.split(":", 1)[1]},
                "mediaType": CONFIG_MEDIA_TYPE,
            },
            {
                "name": "suites",
                "uri": SUITES_URI,
                "annotations": {
                    "target": report.target or "",
                    "archs": list(archs),
                    "host": host,
                    "rocmforge": version,
                    "image_id": config_digest,
                    "suites": counts,
                    **judged_annotations(report),
                },
            },
        ],
        "passedTests": passed,
        "warnedTests": warned,
        "failedTests": failed,
    }


def judged_annotations(report: SuitesReport) -> dict:
    """What the suites judged the image against (target, content hash, sha256 of matrix.yaml and
    matrix.lock, the rocmforge that ran them) under "judged"; nothing for a record that predates it."""
    if report.judged is None:
        return {}
    j = report.judged
    return {
        "judged": {
            "target": j.target,
            "content_hash": j.content_hash,
            "matrix_sha256": j.matrix_sha256,
            "lock_sha256": j.lock_sha256,
            "rocmforge_version": j.rocmforge_version,
        }
    }


def host_kind(report: SuitesReport, recorded: str | None) -> str:
    """What kind of host ran the suites: recorded at test time; for an older record, what its GPU
    checks say (a "not GPU-verified" result means they found no GPU)."""
    if recorded:
        return recorded
    if any(o.status == SuiteStatus.NOT_GPU_VERIFIED for o in report.suites.values()):
        return "no GPU (GPU checks not GPU-verified)"
    return "unknown (not recorded)"
