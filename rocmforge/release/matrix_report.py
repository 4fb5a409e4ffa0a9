"""The matrix report: every target against every suite, with what rocmforge recorded about it
(image, size, pins, drift, reproducibility, publication and its signature), as JSON, a self-contained HTML page
(no external assets: air-gapped sites open it as a file) and a Markdown summary for CI.

Nothing is measured here: every fact comes from the engine's image list and what earlier
commands recorded (suite results by image ID, `lock --check` and `verify-repro` records, publish
records, manifests)."""

from __future__ import annotations

import html
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rocmforge.build import engine
from rocmforge.release import publication
from rocmforge.render import archprune
from rocmforge.render.plan import pruned
from rocmforge.shared.files import atomic_write, iso_utc
from rocmforge.shared.records import load_internal
from rocmforge.verify import manifest
from rocmforge.verify.manifest import checked_artifacts
from rocmforge.verify.suites import SuiteStatus, recorded, suites_present

if TYPE_CHECKING:
    from rocmforge.define.lockschema import Lock
    from rocmforge.define.matrix import Matrix
    from rocmforge.render.plan import BuildPlan
    from docker import DockerClient

CHECKS = "checks"          # <state>/checks/: what lock --check and verify-repro last found


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
    state: str             # built, not built, unresolved
    why_unresolved: list[str]
    content_tag: str
    image_id: str | None
    size_bytes: int | None
    suites: dict[str, SuiteCell]
    pins: dict[str, int]   # apt, pip, git: how many inputs the lock pins for the target
    drift: list[str] | None                 # None: lock --check never recorded for it
    drift_checked: str | None
    repro: dict | None                      # the last verify-repro record
    published: dict | None                  # digest, registry, repository of the publish record
    signed: dict                            # publication.signed: signed and attested, unsigned, not published
    manifest: str | None                    # paths (relative to the report) of manifest and SBOM
    sbom: str | None
    prune: str = ""                         # archprune.describe: pruned or not, what it saved
    links: dict[str, str] = field(default_factory=dict)


@dataclass
class Report:
    generated: str
    matrix: str
    host_gpu: bool
    suites: list[str]
    targets: list[TargetRow]

    def to_json(self) -> dict:
        return asdict(self)


def save_check(state: Path, name: str, data: dict) -> None:
    """Keeps what a check found (lock --check, verify-repro), atomically, for the report."""
    record = {**data, "checked": iso_utc(time.time())}
    atomic_write(state / CHECKS / f"{name}.json", json.dumps(record, indent=2).encode())


def _lock_check_problem(data) -> str | None:
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) and all(isinstance(x, str) for x in data[k])
                                             for k in ("targets", "problems")):
        return "not a `lock --check` record (expected 'targets' and 'problems' lists)"
    return None if isinstance(data.get("checked"), str) else "not a `lock --check` record: no 'checked' time"


def _repro_problem(data, name: str) -> str | None:
    if not isinstance(data, dict) or data.get("target") != name:
        return f"not a `verify-repro` record of {name}"
    if not isinstance(data.get("identical"), bool) or not isinstance(data.get("image_ids"), list) \
            or not all(isinstance(i, str) for i in data["image_ids"]) or not isinstance(data.get("checked"), str):
        return "not a `verify-repro` record (expected 'identical', 'image_ids' and 'checked')"
    return None


def _lock_check(state: Path) -> dict | None:
    return load_internal(state / CHECKS / "lock.json", _lock_check_problem,
                         "run `python build.py lock --check` again")


def _repro(state: Path, name: str) -> dict | None:
    return load_internal(state / CHECKS / f"repro-{name}.json", lambda d: _repro_problem(d, name),
                         f"run `python build.py verify-repro --target {name}` again")


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


def gather(plan: BuildPlan, client: DockerClient, state: Path, lock: Lock, record_dir: Path, out_dir: Path,
           matrix_label: str) -> Report:
    """Everything the report shows, for every target in build order."""
    suites = suites_present()
    lock_check = _lock_check(state)
    rows = []
    for name in plan.order():
        tp, t = plan.targets[name], plan.matrix.targets[name]
        stack = plan.matrix.stacks[t.stack]
        image = engine.image_id(client, tp.content_tag) if client is not None and not tp.unresolved else None
        size = client.api.inspect_image(tp.content_tag).get("Size") if image else None
        state_name = "unresolved" if tp.unresolved else ("built" if image else "not built")
        rec = recorded(state, image) if image else None
        cells = {}
        for s in suites:
            if tp.unresolved:
                cells[s] = SuiteCell(SuiteStatus.UNRESOLVED, "; ".join(tp.unresolved))
            elif not image:
                cells[s] = SuiteCell(SuiteStatus.NOT_BUILT, f"python build.py build --target {name}")
            elif rec is None or s not in rec.suites:
                cells[s] = SuiteCell(SuiteStatus.NOT_RUN, f"python build.py test --target {name}")
            else:
                cells[s] = SuiteCell(rec.suites[s].status, rec.suites[s].detail)
        published, unusable = publication.record(record_dir, name)
        manifest_path, sbom_path = checked_artifacts(state, name)

        def rel(path: Path | None) -> str | None:
            return os.path.relpath(path, out_dir) if path else None

        rows.append(TargetRow(
            name=name, description=t.description, stack=t.stack, rocm=stack.rocm, archs=list(t.archs),
            state=state_name, why_unresolved=list(tp.unresolved), content_tag=tp.content_tag, image_id=image,
            size_bytes=size, suites=cells, pins=_pins(lock, plan.matrix, name),
            drift=_drift(lock_check, plan.matrix, name), drift_checked=(lock_check or {}).get("checked"),
            repro=_repro(state, name),
            published={k: published.get(k) for k in ("digest", "registry", "repository", "image_id")} if published else None,
            signed=publication.signed(published, unusable),
            manifest=rel(manifest_path), sbom=rel(sbom_path),
            prune=archprune.describe(pruned(plan.matrix, name), manifest.prune_summary(state, name))))
    return Report(generated=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), matrix=matrix_label,
                  host_gpu=Path("/dev/kfd").exists(), suites=suites, targets=rows)


# -- presentation -------------------------------------------------------------------------------
STATUS_CLASS = {SuiteStatus.PASSED: "ok", SuiteStatus.FAILED: "bad", SuiteStatus.NOT_GPU_VERIFIED: "ngv",
                SuiteStatus.NOT_APPLICABLE: "na", SuiteStatus.NOT_RUN: "none", SuiteStatus.NOT_BUILT: "none",
                SuiteStatus.UNRESOLVED: "unres"}
SHORT = {SuiteStatus.FAILED: "FAILED", SuiteStatus.NOT_APPLICABLE: "n/a"}   # the rest as they are

CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;padding:1rem;color:#1b1f24;background:#fff}
h1{font-size:1.35rem;margin:.2rem 0}.meta{color:#555;margin:.2rem 0 1rem}
table{border-collapse:collapse;width:100%}th,td{border:1px solid #d0d7de;padding:.35rem .5rem;vertical-align:top;text-align:left}
th{background:#f6f8fa;position:sticky;top:0}code{font:13px ui-monospace,Menlo,Consolas,monospace;word-break:break-all}
.cell{font-weight:600;white-space:nowrap}.ok{background:#dafbe1}.bad{background:#ffebe9}.ngv{background:#fff8c5}
.na,.none{background:#f6f8fa;color:#57606a}.unres{background:#ffefd6}
details summary{cursor:pointer}.why{font-weight:400;font-size:.85rem;white-space:normal;color:#333;max-width:28rem}
.scroll{overflow-x:auto}.legend span{display:inline-block;padding:.1rem .4rem;margin-right:.3rem;border-radius:3px}
@media (max-width:760px){thead{display:none}table,tbody,tr,td{display:block;width:auto}
tr{border:1px solid #d0d7de;margin:0 0 1rem;border-radius:6px}td{border:0;border-top:1px solid #eaeef2}
td::before{content:attr(data-label);display:block;font-size:.75rem;color:#57606a;text-transform:uppercase}}
"""


def _esc(text) -> str:
    return html.escape(str(text), quote=True)


def _size(n: int | None) -> str:
    return f"{n / 1e9:.2f} GB" if n else "-"


def _suite_td(suite: str, cell: SuiteCell) -> str:
    cls = STATUS_CLASS.get(cell.status, "none")
    label = SHORT.get(cell.status, cell.status)
    inner = f'<span class="cell">{_esc(label)}</span>'
    if cell.detail and cell.status != SuiteStatus.PASSED:
        inner = f'<details><summary class="cell">{_esc(label)}</summary><div class="why">{_esc(cell.detail)}</div></details>'
    return f'<td class="{cls}" data-suite="{_esc(suite)}" data-status="{_esc(cell.status)}" data-label="{_esc(suite)}">{inner}</td>'


def _repro_text(row: TargetRow) -> str:
    r = row.repro
    if not r:
        return "not checked"
    ids = r.get("image_ids") or []
    verdict = "identical" if r.get("identical") else f"DIFFERENT: {r.get('explanation')}"
    stale = "" if row.image_id and ids and ids[0] == row.image_id else " (for another image ID)"
    return f"{verdict}{stale}, {r.get('checked', '')}"


def to_html(rep: Report) -> str:
    head = "".join(f"<th>{_esc(s)}</th>" for s in rep.suites)
    body = []
    for row in rep.targets:
        drift = ("not checked" if row.drift is None else
                 ("none" if not row.drift else "<br>".join(_esc(p) for p in row.drift)))
        pub = (f"<code>{_esc(row.published.get('repository') or row.published.get('registry'))}@"
               f"{_esc(row.published.get('digest'))}</code>" if row.published else "-")
        links = " ".join(f'<a href="{_esc(path)}">{label}</a>' for label, path in
                         (("manifest", row.manifest), ("SBOM", row.sbom)) if path) or "-"
        status_cls = {"built": "ok", "not built": "none", "unresolved": "unres"}[row.state]
        why = f'<div class="why">{"<br>".join(_esc(w) for w in row.why_unresolved)}</div>' if row.why_unresolved else ""
        body.append(
            f'<tr data-target="{_esc(row.name)}">'
            f'<td data-label="target"><b>{_esc(row.name)}</b><div class="why">{_esc(row.description)}</div></td>'
            f'<td data-label="stack">{_esc(row.stack)}<br>ROCm {_esc(row.rocm)}<br>{_esc(", ".join(row.archs))}<br>{_esc(row.prune)}</td>'
            f'<td class="{status_cls}" data-label="image" data-state="{_esc(row.state)}"><span class="cell">{_esc(row.state)}</span>'
            f'{why}<br><code>{_esc(row.content_tag)}</code>'
            + (f'<br><code title="{_esc(row.image_id)}">{_esc(row.image_id[:19])}</code> {_size(row.size_bytes)}'
               if row.image_id else "") + "</td>"
            + "".join(_suite_td(s, row.suites[s]) for s in rep.suites)
            + f'<td data-label="pins">apt {row.pins["apt"]}, pip {row.pins["pip"]}, git {row.pins["git"]}</td>'
            f'<td data-label="drift (lock --check)">{drift}</td>'
            f'<td data-label="verify-repro">{_esc(_repro_text(row))}</td>'
            f'<td data-label="published">{pub}</td><td data-label="records">{links}</td></tr>')
    legend = "".join(f'<span class="{cls}">{_esc(SHORT.get(s, s.value))}</span>' for s, cls in STATUS_CLASS.items())
    gpu = "this host has /dev/kfd" if rep.host_gpu else "no AMD GPU on this host: GPU checks are not GPU-verified"
    return ("<!doctype html><html lang=en><head><meta charset=utf-8>"
            '<meta name=viewport content="width=device-width,initial-scale=1">'
            f"<title>rocmforge matrix report</title><style>{CSS}</style></head><body>"
            f"<h1>rocmforge matrix report</h1><p class=meta>{_esc(rep.matrix)} · generated {_esc(rep.generated)} · "
            f"{_esc(gpu)}</p><p class=legend>{legend}</p>"
            f"<div class=scroll><table><thead><tr><th>target</th><th>stack</th><th>image</th>{head}<th>pins</th>"
            f"<th>drift (lock --check)</th><th>verify-repro</th><th>published</th><th>records</th></tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div></body></html>\n")


def to_markdown(rep: Report) -> str:
    lines = ["### rocmforge matrix", "", "| target | image | " + " | ".join(rep.suites) + " |",
             "|---|---|" + "---|" * len(rep.suites)]
    for row in rep.targets:
        image = f"`{row.content_tag}` {_size(row.size_bytes)}" if row.image_id else row.state
        lines.append(f"| {row.name} | {image} | " + " | ".join(SHORT.get(row.suites[s].status, row.suites[s].status)
                                                           for s in rep.suites) + " |")
    return "\n".join(lines) + "\n"
