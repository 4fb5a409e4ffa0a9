"""`lock` and `lock --check` as a workflow, like `build`: the resolve stage resolves or checks the
pins, this module writes matrix.lock (resolve) or the check record release reads (check)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocmforge.assemble import engine
from rocmforge.release import matrix_report
from rocmforge.resolve import lock as pins
from rocmforge.resolve import lockfile
from rocmforge.shared.files import atomic_write
from rocmforge.shared.statedir import StateDir
from rocmforge.workflow.project import Project, ca_bundle, writable_file

if TYPE_CHECKING:
    from rocmforge.resolve.lock import Outcome
    from rocmforge.workflow.pipeline import Progress


def _prepare(project: Project, targets: list[str] | None) -> None:
    for t in targets or []:
        project.target(t)
    project.writable_state()


def check(project: Project, targets: list[str] | None, progress: Progress) -> Outcome:
    """Every stale or unavailable pin of the targets (all when None), recorded for `report`."""
    _prepare(project, targets)
    m, client = project.plan.matrix, engine.connect()
    with progress.status("checking matrix.lock against the matrix and the mirrors"):
        out = pins.check(
            client, m, project.plan.lock, targets=targets, work=StateDir(project.state).work, log=project.log("lock")
        )
    matrix_report.save_check(project.state, "lock", {"targets": m.order(targets), "problems": list(out.problems)})
    return out


def resolve(project: Project, targets: list[str] | None, ca: str | None, progress: Progress) -> Outcome:
    """Resolve the targets' pins (all when None) and write matrix.lock, also when some stay unresolved;
    a lock that would not change is left as it is (out.written says which)."""
    _prepare(project, targets)
    writable_file(project.lock_path, None)
    client = engine.connect()
    with progress.status("resolving pins"):
        out = pins.resolve(
            client,
            project.plan.matrix,
            project.plan.lock,
            targets=targets,
            work=StateDir(project.state).work,
            ca_bundle=ca_bundle(ca),
            log=project.log("lock"),
        )
    text = lockfile.dump(out.lock).encode()
    try:
        before = project.lock_path.read_bytes()
    except FileNotFoundError:
        before = None
    if text != before:
        atomic_write(project.lock_path, text)
        out.written = True
    return out
