"""Run the in-image suites (rocmforge/data/suites) against one image and summarise them honestly:
passed, failed (with the reason) or not GPU-verified (with the reason), per suite."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge import __version__
from rocmforge.define.matrix import variant_suffix
from rocmforge.host.container import host_gpu_access, remove_session_leftovers
from rocmforge.host.enginebase import EngineError
from rocmforge.shared import packagedata, program
from rocmforge.shared.errors import UserError
from rocmforge.shared.files import atomic_write
from rocmforge.shared.records import load_internal
from rocmforge.shared.statedir import StateDir
from rocmforge.shared.suitenames import SUITE_NAMES
from rocmforge.verify import suiteprocs

if TYPE_CHECKING:
    from rocmforge.host.engines import Engine


# What the suites import in rocmforge's own interpreter (they run as `python -m pytest` beside it):
# module -> the requirement that provides it (as pyproject.toml's dependencies pin it). Missing only
# from an install made with --no-deps, or trimmed later; said before a build starts or the engine is
# asked, instead of every suite failing with "pytest produced no results".
RUNNER_MODULES = {"pytest": "pytest>=8", "testinfra": "pytest-testinfra>=10"}


def missing_runner(find=importlib.util.find_spec) -> list[str]:
    """The requirements of the suites that this interpreter cannot import."""
    return [req for module, req in RUNNER_MODULES.items() if find(module) is None]


def require_runner(find=importlib.util.find_spec) -> None:
    missing = missing_runner(find)
    if missing:
        raise UserError(
            f"the suites run with pytest in rocmforge's Python ({sys.executable}), which lacks "
            f"{' and '.join(m.split('>')[0] for m in missing)}: "
            f"{sys.executable} -m pip install {' '.join(repr(m) for m in missing)}",
            field="test",
        )


class SuiteStatus(str, Enum):
    """A suite's result, and what the report shows for a suite that has none."""

    PASSED = "passed"
    FAILED = "failed"
    NOT_GPU_VERIFIED = "not GPU-verified"
    NOT_APPLICABLE = "not applicable"
    # the report's cells of targets without a result
    NOT_RUN = "not run"
    NOT_BUILT = "not built"
    UNRESOLVED = "unresolved"

    def __str__(self) -> str:
        return self.value


# A GPU check's skip reason starts with it: "not GPU-verified: no /dev/kfd".
NOT_GPU_VERIFIED = SuiteStatus.NOT_GPU_VERIFIED.value


def suites_present() -> list[str]:
    """The suites of SUITE_NAMES whose module the package ships (rocmforge/data/suites/test_<suite>.py)."""
    return [s for s in SUITE_NAMES if (packagedata.SUITES / f"test_{s}.py").is_file()]


@dataclass
class SuiteOutcome:
    status: SuiteStatus  # passed, failed, not GPU-verified or not applicable
    detail: str
    passed: int = 0
    failed: int = 0
    not_gpu_verified: int = 0
    figures: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict) -> SuiteOutcome:
        return cls(
            SuiteStatus(data["status"]),
            data.get("detail", ""),
            data.get("passed", 0),
            data.get("failed", 0),
            data.get("not_gpu_verified", 0),
            data.get("figures") or {},
        )


@dataclass
class SuitesReport:
    """One run of the suites against one image: what `test` prints, records and publishing trusts."""

    image: str
    image_id: str
    target: str | None
    pytest_exit: int
    suites: dict[str, SuiteOutcome]
    ok: bool
    tests: list[dict] = field(default_factory=list)
    log: str = ""  # pytest's output; shown on failure, never recorded
    # What the verdict was reached against (Judged); None in a record written before it was kept.
    judged: Judged | None = None
    host: str = ""  # what kind of host ran them (GPU or not): the signed test result says it

    def statuses(self) -> dict[str, SuiteStatus]:
        return {name: s.status for name, s in self.suites.items()}

    def to_json(self) -> dict:
        return {
            "image": self.image,
            "image_id": self.image_id,
            "target": self.target,
            "pytest_exit": self.pytest_exit,
            "ok": self.ok,
            "suites": {n: asdict(s) for n, s in self.suites.items()},
            "tests": self.tests,
            "host": self.host,
            **(asdict(self.judged) if self.judged else {}),
        }

    @classmethod
    def from_json(cls, data: dict) -> SuitesReport:
        judged = Judged.from_json(data)
        host = data.get("host")
        return cls(
            image=data.get("image", data["image_id"]),
            image_id=data["image_id"],
            target=data.get("target"),
            pytest_exit=data.get("pytest_exit", 0),
            tests=data.get("tests", []),
            ok=data["ok"],
            suites={n: SuiteOutcome.from_json(s) for n, s in data["suites"].items()},
            judged=judged,
            host=host if isinstance(host, str) else "",
        )


@dataclass(frozen=True)
class Judged:
    """What a suite verdict holds for: the image was judged as this target, with this content hash,
    against these exact matrix and lock files (sha256 of their bytes; None for a file that was
    absent), by this rocmforge. A verdict reached against other inputs says nothing about these."""

    target: str | None
    content_hash: str | None
    matrix_sha256: str | None
    lock_sha256: str | None
    rocmforge_version: str

    @classmethod
    def from_json(cls, data: dict) -> Judged | None:
        """None for a record that does not say what it was judged against (written before it was kept)."""
        if not all(k in data for k in JUDGED_KEYS):
            return None
        return cls(**{k: data[k] for k in JUDGED_KEYS})


JUDGED_KEYS = ("target", "content_hash", "matrix_sha256", "lock_sha256", "rocmforge_version")


def file_sha256(path: Path) -> str | None:
    """The sha256 of a file's bytes, None when it does not exist."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def judged_against(matrix: Path, target: str | None, content_hash: str | None) -> Judged:
    """What a run of the suites judges against now: the lock is matrix.lock beside the matrix."""
    return Judged(
        target, content_hash, file_sha256(matrix), file_sha256(Path(matrix).with_suffix(".lock")), __version__
    )


def summarise(results: list[dict], only: tuple[str, ...] = ()) -> dict[str, SuiteOutcome]:
    """Each suite's outcome from the per-test results; a suite the package ships that gave none failed
    (only: the suites a partial run was asked for, the others not expected)."""
    out: dict[str, SuiteOutcome] = {}
    wanted = [s for s in suites_present() if not only or s in only]
    for suite in wanted + sorted({r["suite"] for r in results} - set(SUITE_NAMES)):
        rows = [r for r in results if r["suite"] == suite]
        failed = [r for r in rows if r["outcome"] == "failed"]
        ngv = [r for r in rows if r["outcome"] == "skipped" and r["detail"].startswith(NOT_GPU_VERIFIED)]
        passed = [r for r in rows if r["outcome"] == "passed"]
        figures = {k: v for r in rows if r.get("figures") for k, v in r["figures"].items()}
        if failed:
            status, detail = SuiteStatus.FAILED, "; ".join(f"{r['test']}: {r['detail']}" for r in failed)
        elif ngv:
            status, detail = SuiteStatus.NOT_GPU_VERIFIED, ngv[0]["detail"].removeprefix(NOT_GPU_VERIFIED + ": ")
        elif passed:
            status, detail = SuiteStatus.PASSED, f"{len(passed)} check(s)"
        elif rows:
            status, detail = SuiteStatus.NOT_APPLICABLE, rows[0]["detail"]
        else:
            status, detail = SuiteStatus.FAILED, "the suite did not run"
        out[suite] = SuiteOutcome(status, detail, len(passed), len(failed), len(ngv), figures)
    return out


def run_suites(
    client: Engine,
    image_ref: str,
    image_id: str,
    target: str | None,
    matrix: Path,
    junit: Path | None = None,
    require_gpu: bool = False,
    content_hashes: dict[str, str] | None = None,
    only: tuple[str, ...] = (),
) -> SuitesReport:
    """The suites run against a container of image_ref, whose ID (image_id) the caller found.
    require_gpu: a GPU check that cannot see a GPU fails (as it does anyway on a host with /dev/kfd).
    content_hashes: TargetPlan.key (a target, or a target's variant) -> content hash of the plan the
    image is judged against, for the record. only: these suites alone (a partial run, never recorded)."""
    # The suites take the target from the image's label when none is given; the record says so too.
    labels = _labels(client, image_ref)
    judged_target = target or labels.get("io.rocmforge.target")
    # A variant is judged against its own plan: the archs its label names pick it.
    archs = [a for a in labels.get("io.rocmforge.archs", "").split(",") if a]
    hashes = content_hashes or {}
    key = next((k for k in (f"{judged_target}{variant_suffix(archs)}", judged_target or "") if k in hashes), "")
    # Digests taken before the suites read the files: the record never claims inputs they did not see.
    judged = judged_against(matrix, judged_target, hashes.get(key))
    session = uuid.uuid4().hex[:12]
    with tempfile.TemporaryDirectory(prefix="rocmforge-test-") as tmp:
        # The suites' own ini and rootdir: none of the checkout's (or of a folder above the install) applies.
        root = packagedata.SUITES
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rA",
            "--image",
            image_ref,
            "--matrix",
            str(matrix),
            "--session-id",
            session,
            "--rootdir",
            str(root),
            "-c",
            str(root / "pytest.ini"),
        ]
        if target:
            cmd += ["--target", target]
        if require_gpu:
            cmd += ["--require-gpu"]
        # Every suite module the package ships runs, listed in SUITE_NAMES or not.
        names = [p.stem.removeprefix("test_") for p in sorted(root.glob("test_*.py"))]
        names = [n for n in names if not only or n in only]
        try:
            proc = suiteprocs.run_groups(cmd, root, names, Path(tmp), junit)
        except BaseException:
            # A suite process stopped while its container was being created: the engine finishes a
            # create whose client went away, so the first sweep can miss it; a second one catches it.
            remove_session_leftovers(client, session)
            time.sleep(2)
            raise
        finally:
            remove_session_leftovers(client, session)
        results = proc.results
    summary = judge(summarise(results, only), results, proc.exit_code, proc.log)
    gpu = host_gpu_access()
    host = f"GPU host ({len(gpu.devices)} device node(s))" if gpu.present else f"no GPU: {gpu.reason_absent()}"
    return SuitesReport(
        image=image_ref,
        image_id=image_id,
        target=judged_target,
        pytest_exit=proc.exit_code,
        suites=summary,
        tests=results,
        log=proc.log,
        judged=judged,
        host=host,
        ok=proc.exit_code == 0 and not any(s.status == SuiteStatus.FAILED for s in summary.values()),
    )


def _labels(client: Engine, image_ref: str) -> dict[str, str]:
    try:
        return client.labels(image_ref)
    except EngineError:  # gone since the caller found it: the suites say so themselves
        return {}


def judge(summary: dict[str, SuiteOutcome], results: list[dict], pytest_exit: int, log: str) -> dict[str, SuiteOutcome]:
    """The suites' outcomes with pytest's own verdict added: a run that exits non-zero while no
    suite failed (a collection error, an internal error, a crash of the run) is a failure too,
    named "pytest", never a pass."""
    if not results:
        summary["suites"] = SuiteOutcome(SuiteStatus.FAILED, "pytest produced no results:\n" + log[-3000:], failed=1)
    elif pytest_exit != 0 and not any(s.status == SuiteStatus.FAILED for s in summary.values()):
        summary["pytest"] = SuiteOutcome(
            SuiteStatus.FAILED, f"pytest exited {pytest_exit} although no suite failed:\n" + log[-3000:], failed=1
        )
    return summary


def record(state: Path, report: SuitesReport) -> Path:
    """Keep the outcome by image ID: publishing later checks that this exact image passed. Written
    atomically: a killed run leaves the previous record or none, never half of one."""
    path = results_path(state, report.image_id)
    atomic_write(path, json.dumps(report.to_json(), indent=2).encode())
    return path


def recorded(state: Path, image_id: str) -> SuitesReport | None:
    """The suite outcome recorded for exactly this image ID, or None when it was never tested. A
    record that is not a results record of this image is never trusted: it reads as "never
    tested" (nothing is published on its word), with a warning naming it."""
    data = load_internal(
        results_path(state, image_id),
        lambda data: _results_problem(data, image_id),
        f"delete it and run `{program.command('test')}` on the image again",
    )
    return None if data is None else SuitesReport.from_json(data)


def results_path(state: Path, image_id: str) -> Path:
    """Where the suite outcome of image_id is recorded in the state dir."""
    return StateDir(state).result(image_id)


def _results_problem(data: object, image_id: str) -> str | None:
    if not isinstance(data, dict):
        return "not a suite results record (not a JSON object)"
    if str(data.get("image_id", "")).split(":")[-1] != image_id.split(":")[-1]:
        return f"records image {data.get('image_id')!r}, not {image_id}"
    if not isinstance(data.get("ok"), bool):
        return "not a suite results record: 'ok' is not true or false"
    suites = data.get("suites")
    known = {s.value for s in SuiteStatus}
    if not isinstance(suites, dict) or not all(
        isinstance(s, dict) and s.get("status") in known for s in suites.values()
    ):
        return "not a suite results record: 'suites' must map each suite to its status"
    return None
