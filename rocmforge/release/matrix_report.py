"""The matrix report: every target against every suite, with what rocmforge recorded about it
(image, size, pins, drift, reproducibility, publication and its signature), as JSON here; the
self-contained HTML page and the Markdown summary for CI are drawn by report_page.

Nothing is measured here: every fact comes from the engine's image list and what earlier
commands recorded (suite results by image ID, `lock --check` and `verify-repro` records, publish
records, manifests)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.assemble import engine
from rocmforge.release import publication
from rocmforge.render import archprune
from rocmforge.shared import program
from rocmforge.shared.files import atomic_write, iso_utc
from rocmforge.shared.records import load_internal
from rocmforge.shared.statedir import StateDir
from rocmforge.verify import manifest
from rocmforge.verify.manifest import checked_artifacts
from rocmforge.verify.suites import SuiteStatus, recorded, suites_present

if TYPE_CHECKING:
    from rocmforge.define.matrix import Matrix
    from rocmforge.host.engines import Engine
    from rocmforge.render.plan import BuildPlan
    from rocmforge.resolve.lockmodel import Lock


@dataclass
class SuiteCell:
    status: SuiteStatus
    detail: str = ""


@dataclass
class TargetRow:
    name: str
    description: str
    stack: str
    rocm: str
    archs: list[str]
    state: str  # built, not built, unresolved
    why_unresolved: list[str]
    content_tag: str
    image_id: str | None
    size_bytes: int | None
    suites: dict[str, SuiteCell]
    pins: dict[str, int]  # apt, pip, git: how many inputs the lock pins for the target
    drift: list[str] | None  # None: lock --check never recorded for it
    drift_checked: str | None
    repro: dict | None  # the last verify-repro record
    published: dict | None  # digest, registry, repository of the publish record
    signed: dict  # publication.signed: signed and attested, unsigned, not published
    manifest: str | None  # paths (relative to the report) of manifest and SBOM
    sbom: str | None
    prune: str = ""  # archprune.describe: pruned or not, what it saved
    links: dict[str, str] = field(default_factory=dict)


@dataclass
class Report:
    generated: str
    matrix: str
    host_gpu: bool
    suites: list[str]
    targets: list[TargetRow]

    def to_json(self) -> dict:
        return {**asdict(self), "summary": self.summary()}

    def summary(self) -> dict[str, int]:
        """How many images the report holds, how many are built, and how many have each verdict."""
        verdicts = [verdict(row) for row in self.targets]
        counts = {"images": len(self.targets), "built": sum(row.state == "built" for row in self.targets)}
        return counts | {str(v): verdicts.count(v) for v in VERDICTS}


# An image's verdict, in the order the report's summary counts them: the worst of its suites once
# built (a failure over a suite not run over a check no GPU verified), else why it has no results.
VERDICTS = (
    SuiteStatus.PASSED,
    SuiteStatus.FAILED,
    SuiteStatus.NOT_GPU_VERIFIED,
    SuiteStatus.NOT_RUN,
    SuiteStatus.NOT_BUILT,
    SuiteStatus.UNRESOLVED,
)


def verdict(row: TargetRow) -> SuiteStatus:
    """One image's verdict: unresolved or not built as its state says; built, the worst of its
    suites (not applicable counts as passed: nothing there could fail)."""
    if row.state == "unresolved":
        return SuiteStatus.UNRESOLVED
    if row.state != "built":
        return SuiteStatus.NOT_BUILT
    found = {cell.status for cell in row.suites.values()}
    for worst in (SuiteStatus.FAILED, SuiteStatus.NOT_RUN, SuiteStatus.NOT_GPU_VERIFIED):
        if worst in found:
            return worst
    return SuiteStatus.PASSED


def save_check(state: Path, name: str, data: dict) -> None:
    """Keeps what a check found (lock --check, verify-repro), atomically, for the report."""
    record = {**data, "checked": iso_utc(time.time())}
    atomic_write(StateDir(state).check(name), json.dumps(record, indent=2).encode())


def _lock_check_problem(data: object) -> str | None:
    if not isinstance(data, dict) or not all(
        isinstance(data.get(k), list) and all(isinstance(x, str) for x in data[k]) for k in ("targets", "problems")
    ):
        return "not a `lock --check` record (expected 'targets' and 'problems' lists)"
    return None if isinstance(data.get("checked"), str) else "not a `lock --check` record: no 'checked' time"


def _repro_problem(data: object, name: str) -> str | None:
    if not isinstance(data, dict) or data.get("target") != name:
        return f"not a `verify-repro` record of {name}"
    if (
        not isinstance(data.get("identical"), bool)
        or not isinstance(data.get("image_ids"), list)
        or not all(isinstance(i, str) for i in data["image_ids"])
        or not isinstance(data.get("checked"), str)
    ):
        return "not a `verify-repro` record (expected 'identical', 'image_ids' and 'checked')"
    return None


def _lock_check(state: Path) -> dict | None:
    return load_internal(
        StateDir(state).check("lock"), _lock_check_problem, f"run `{program.command('lock --check')}` again"
    )


def _repro(state: Path, name: str) -> dict | None:
    return load_internal(
        StateDir(state).check(f"repro-{name}"),
        lambda d: _repro_problem(d, name),
        f"run `{program.command('verify-repro --target ' + name)}` again",
    )


def _variant_repro(check: dict | None, key: str) -> dict | None:
    """A variant's verify-repro result, which its target's check holds."""
    return next(
        (v for v in (check or {}).get("variants") or [] if isinstance(v, dict) and v.get("target") == key), None
    )


def _pins(lock: Lock, matrix: Matrix, name: str) -> dict[str, int]:
    t = matrix.targets[name]
    apt = sum(len(v) for k, v in lock.apt.items() if k == name or k.startswith(f"{name}/"))
    pip = sum(len(lock.python.get(c) or {}) for c in t.components)
    git = sum(1 for c in t.components if lock.git.get(c))
    return {"apt": apt, "pip": pip, "git": git}


def _drift(check: dict | None, matrix: Matrix, name: str) -> list[str] | None:
    if not check or name not in check.get("targets", []):
        return None
    t = matrix.targets[name]
    words = {name, t.stack, *t.components}
    return [p for p in check.get("problems", []) if any(w in p for w in words)]


def gather(
    plan: BuildPlan,
    client: Engine | None,
    state: Path,
    lock: Lock,
    record_dir: Path,
    out_dir: Path,
    matrix_label: str,
) -> Report:
    """Everything the report shows, for every target in build order (images as not built without
    an engine)."""
    suites = suites_present()
    lock_check = _lock_check(state)
    rows = []
    records: dict[str, tuple[dict | None, str | None]] = {}  # read once per target, variants share it
    for tp in (each for name in plan.order() for each in plan.images_of(name)):
        # A variant is a row of its own, named as images/ names it (hip-runtime-gfx1100).
        name, key, t = tp.name, tp.key, plan.matrix.targets[tp.name]
        stack = plan.matrix.stacks[t.stack]
        image = engine.image_id(client, tp.content_tag) if client is not None and not tp.unresolved else None
        size = client.inspect(tp.content_tag).get("Size") if image and client is not None else None
        state_name = "unresolved" if tp.unresolved else ("built" if image else "not built")
        rec = recorded(state, image) if image else None
        cells = {}
        for s in suites:
            if tp.unresolved:
                cells[s] = SuiteCell(SuiteStatus.UNRESOLVED, "; ".join(tp.unresolved))
            elif not image:
                cells[s] = SuiteCell(SuiteStatus.NOT_BUILT, program.command(f"build --target {name}"))
            elif rec is None or s not in rec.suites:
                cells[s] = SuiteCell(SuiteStatus.NOT_RUN, program.command(f"test --target {name}"))
            else:
                cells[s] = SuiteCell(rec.suites[s].status, rec.suites[s].detail)
        if name not in records:
            records[name] = publication.record(record_dir, name)
        published, unusable = records[name]
        if tp.variant:  # published inside the target's index, with its own digest and signature
            published = publication.variant_of(published, tp.variant)
        manifest_path, sbom_path = checked_artifacts(state, key)

        def rel(path: Path | None) -> str | None:
            return os.path.relpath(path, out_dir) if path else None

        rows.append(
            TargetRow(
                name=key,
                description=t.description,
                stack=t.stack,
                rocm=stack.rocm,
                archs=list(tp.archs),
                state=state_name,
                why_unresolved=list(tp.unresolved),
                content_tag=tp.content_tag,
                image_id=image,
                size_bytes=size,
                suites=cells,
                pins=_pins(lock, plan.matrix, name),
                drift=_drift(lock_check, plan.matrix, name),
                drift_checked=(lock_check or {}).get("checked"),
                repro=_repro(state, name) if not tp.variant else _variant_repro(_repro(state, name), key),
                published={k: published.get(k) for k in ("digest", "registry", "repository", "image_id")}
                if published
                else None,
                signed=publication.signed(published, unusable),
                manifest=rel(manifest_path),
                sbom=rel(sbom_path),
                prune=archprune.describe(plan.matrix.prunes(name), manifest.prune_summary(state, key)),
            )
        )
    return Report(
        generated=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        matrix=matrix_label,
        host_gpu=Path("/dev/kfd").exists(),
        suites=suites,
        targets=rows,
    )
