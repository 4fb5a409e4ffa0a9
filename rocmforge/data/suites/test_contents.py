"""Every byte the image ships, against its source (probes/contents.py, run once per image): each
file of each package of the lock's closure against its dpkg md5sums line (conffiles against dpkg's
status), each file of each Python distribution with a RECORD against its sha256 and size, each
distribution the lock records at exactly its locked version, and each component's outputs against
the list its builder stage wrote. A changed or missing file fails, naming it and its package,
distribution or component.

Excused differences are only those of the probe's EXCEPTIONS table; the paths of its host-side
entries are read here from the code that makes each change (bootstrap.py's normalisation, the
stack's apt_sources), and every excused file is counted in the suite's figures."""

import json
import re

import pytest

from rocmforge.data.suites import judged
from rocmforge.data.suites.conftest import (
    EXPECTED_IN_CONTAINER,
    PROBES_IN_CONTAINER,
    plan_for,
    probe_container,
    registry_base_image,
    target_chain,
)
from rocmforge.define.matrix import variant_suffix
from rocmforge.host import aptsources
from rocmforge.resolve import bootstrap
from rocmforge.shared.errors import BuildError, UserError
from rocmforge.verify.outside import check as outside_check

# The contents probe, given what the image must hold in EXPECTED_IN_CONTAINER/contents.json.
CONTENTS_CHECK = [
    "python3",
    f"{PROBES_IN_CONTAINER}/contents.py",
    "check",
    "--expected",
    f"{EXPECTED_IN_CONTAINER}/contents.json",
]
SHOWN = 25  # problems per test in a failure message; the count says how many more
FINDINGS_KEPT = 500  # outside findings kept in the report's figures
OUTPUT_KINDS = ("hip-program", "cmake-wheel")


def _bootstrap_changes() -> list[str]:
    """Files the bootstrapped base's normalisation blanks, rewrites or deletes (bootstrap.py)."""
    names = [*bootstrap.BLANK, *bootstrap.SCRUB, bootstrap.SOURCES, *bootstrap.SHADOW, bootstrap.FSTAB]
    return sorted("/" + n for n in names)


def _apt_sources_changes(policy) -> list[str]:
    """The lists a registry stack's apt_sources drops or replaces (aptsources.policy_script)."""
    if policy is None or policy.keep:
        return []
    return sorted(f"{aptsources.LISTS_DIR}/{n}" for n in [*policy.drop, *policy.replace])


def _registry_base_as_shipped(request, client, gpu, plan, target_name: str) -> dict:
    """path -> sha256 (None: absent) of each file the registry base at the root of the target's chain
    ships different from its own package or RECORD, read by the same probe in a container of that
    base; {} for a bootstrapped base (rocmforge made it: every difference is a failure)."""
    name = target_name
    while plan.matrix.targets[name].from_target:
        name = plan.matrix.targets[name].from_target
    pinned = plan.targets[name].registry_base
    if pinned is None:
        return {}
    lock = plan.lock.base(plan.targets[name].stack)
    found = registry_base_image(client, pinned.image, pinned.digest, lock.image_id)
    if found is None:
        pytest.fail(
            f"the registry base {pinned.image}@{pinned.digest} (pinned in matrix.lock) is not on this engine: "
            "what it ships cannot be told from what the image changed; pull it, or build the target here",
            pytrace=False,
        )
    base = probe_container(request, client, found, gpu)
    base.put_files(
        EXPECTED_IN_CONTAINER,
        {"contents.json": json.dumps({"packages": "*", "build_changes": {"record-differing": True}}).encode()},
        mode=0o644,
    )
    r = base.exec(CONTENTS_CHECK, timeout=600)
    if r.rc != 0:
        pytest.fail(
            f"contents probe failed in the registry base {found[:19]} (exit {r.rc}): {r.output[-2000:]}", pytrace=False
        )
    return json.loads(r.stdout)["differing"]


@pytest.fixture(scope="module")
def expected(
    request, client, gpu, loaded_plan, matrix, target_name, target, stack, locked_packages, declared_components
):
    """What the image must hold, from matrix.lock and the matrix (host side)."""
    if target is None:
        pytest.fail(
            "the image is not from a matrix target (no --target, no io.rocmforge.target label): "
            "there is no lock to check its contents against",
            pytrace=False,
        )
    why = "cannot render the matrix and its lock, which the image's contents are checked against"
    plan = plan_for(loaded_plan, why)
    lock = plan.lock
    python = {}
    for t in reversed(target_chain(matrix, target_name)):  # a child's lock entries win
        for cname in t.components:
            if matrix.components[cname].kind != "python-env":
                continue
            for name, wheel in (lock.python.get(cname) or {}).items():
                python[name] = (wheel.version, f"matrix.lock python.{cname}")
            held = lock.held.get(cname)
            for name, version in held.packages.items() if held else ():
                python[name] = (version, f"matrix.lock held.{cname}")
    changes = {
        "bootstrap": _bootstrap_changes() if stack.base.bootstrap else [],
        "apt-sources": _apt_sources_changes(stack.apt_sources),
        "base-as-shipped": _registry_base_as_shipped(request, client, gpu, plan, target_name),
    }
    return {
        "packages": sorted(locked_packages.packages) if locked_packages else [],
        "python": python,
        "outputs": [c for c in declared_components if matrix.components[c].kind in OUTPUT_KINDS],
        "build_changes": changes,
    }


@pytest.fixture(scope="module")
def contents(container, has_python, expected):
    if not has_python:
        pytest.fail("python3 is not in the image: the contents probe cannot run", pytrace=False)
    container.put_files(EXPECTED_IN_CONTAINER, {"contents.json": json.dumps(expected).encode()}, mode=0o644)
    r = container.exec(CONTENTS_CHECK, timeout=600)
    if r.rc != 0:
        pytest.fail(f"contents probe failed (exit {r.rc}): {r.output[-2000:]}", pytrace=False)
    return json.loads(r.stdout)


def _problems(contents, *kinds) -> list[str]:
    """The probe's problems of these kinds of source: "<path> (<kind> <name>): ..." or "<kind> <name>: ..."."""
    return [
        p
        for p in contents["problems"]
        if any(p.startswith(f"{k} ") or re.search(rf" \({k} [^()]*\): ", p) for k in kinds)
    ]


def _assert_none(problems: list[str], what: str) -> None:
    shown = problems[:SHOWN] + ([f"... and {len(problems) - SHOWN} more"] if len(problems) > SHOWN else [])
    assert not problems, f"{len(problems)} {what}:\n  " + "\n  ".join(shown)


@pytest.fixture(scope="module")
def outside(request, client, loaded_plan, image_ref, target_name, target, variant, declared_archs, judge):
    """The image's every file, read from its layers on the host and accounted for from sources the
    image cannot edit (rocmforge/verify/outside): no process in the image takes part."""
    if target is None:
        pytest.fail(
            "the image is not from a matrix target: there are no sources to account for its files", pytrace=False
        )
    plan = plan_for(loaded_plan, "cannot render the matrix and its lock, which the image's files are accounted from")
    key = target_name + variant_suffix(variant)
    probes = judged.probes_sha256(judged.probe_files(request.config.getoption("--matrix")))
    try:
        acc, seconds = outside_check.check(client, plan, key, image_ref, tuple(declared_archs))
        return acc, seconds, {"probes_ran_on": judge.what, "probes_sha256": probes}
    except (UserError, BuildError) as exc:
        pytest.fail(f"the image's files cannot be accounted for: {exc}", pytrace=False)


def test_every_file_accounted_for_from_outside(outside, record_property):
    """Judged on the host from the layers: every path is the pinned base's, a locked package's (as the
    signed archive publishes it), the build context's, a builder stage's recorded output, or a
    generated file its rule accepts; a packaged file may be absent only where the prune step's own
    logic, run here, removes it."""
    acc, seconds, judged_by = outside
    record_property(
        "figures",
        {
            **judged_by,
            "accounted": dict(sorted(acc.checked.items())),
            "bytes_compared": acc.bytes_hashed,
            "seconds": {k: round(v, 2) for k, v in seconds.items()},
            # every finding, not only the SHOWN the message holds: what a reader of the report acts on
            "findings": acc.findings[:FINDINGS_KEPT],
        },
    )
    _assert_none(acc.findings, "path(s) no source accounts for")


def test_dpkg_files(contents, record_property):
    record_property(
        "figures",
        {
            "contents_seconds": contents["seconds"],
            "contents_bytes": contents["checked"]["bytes"],
            **{f"checked_{k}": v for k, v in sorted(contents["checked"].items()) if k != "bytes"},
            "excused": {k: f"{len(v['files'])} file(s), {v['why']}" for k, v in sorted(contents["excused"].items())},
        },
    )
    _assert_none(_problems(contents, "dpkg"), "file(s) of the lock's packages differ from dpkg's md5sums or status")


def test_python_files(contents):
    files = [p for p in _problems(contents, "python") if not p.startswith("python ")]
    _assert_none(files, "file(s) of Python distributions differ from their RECORD")


def test_locked_python_versions(contents):
    _assert_none(
        [p for p in contents["problems"] if p.startswith("python ")],
        "distribution(s) the lock records are not installed at the locked version",
    )


def test_component_outputs(contents, expected):
    if not expected["outputs"]:
        pytest.skip("the target has no compiled component (hip-program, cmake-wheel)")
    _assert_none(_problems(contents, "component"), "component output(s) differ from their builder stage's list")


def test_nothing_unclassified(contents):
    """A problem no test above claims is still a failure."""
    claimed = set(_problems(contents, "dpkg", "python", "component"))
    _assert_none([p for p in contents["problems"] if p not in claimed], "other problem(s)")
