"""The matrix report drawn for people: one self-contained HTML page (no external assets, no script:
air-gapped sites open it as a file) and a Markdown summary for CI.

The page must fit a 1280-px-wide window without scrolling sideways (tests/integration/
test_report_browser.py measures it in chromium): the table is laid out at the window's width with
fixed column shares, long references and digests are shortened in the cell with the whole value in
a title or a <details>, and reasons (why unresolved, why not GPU-verified, drift) sit folded in
<details> so rows stay a few lines tall. Below 900 px each row becomes a card."""

from __future__ import annotations

import html

from rocmforge.release import publication
from rocmforge.release.matrix_report import Report, SuiteCell, TargetRow
from rocmforge.verify.suites import SuiteStatus

STATUS_CLASS = {
    SuiteStatus.PASSED: "ok",
    SuiteStatus.FAILED: "bad",
    SuiteStatus.NOT_GPU_VERIFIED: "ngv",
    SuiteStatus.NOT_APPLICABLE: "na",
    SuiteStatus.NOT_RUN: "none",
    SuiteStatus.NOT_BUILT: "none",
    SuiteStatus.UNRESOLVED: "unres",
}
SHORT = {SuiteStatus.FAILED: "FAILED", SuiteStatus.NOT_APPLICABLE: "n/a"}  # the rest as they are
# Where a suite column (about 65 px at 1280 px) may break a long status: soft hyphens, shown only
# when the word is broken.
BREAKS = {SuiteStatus.UNRESOLVED: "unre\u00adsolved", SuiteStatus.NOT_GPU_VERIFIED: "not GPU-veri\u00adfied"}
SIGNED_CLASS = {
    publication.SIGNED: "ok",
    publication.UNSIGNED: "ngv",
    publication.NOT_PUBLISHED: "none",
    publication.UNREADABLE: "bad",
}
# Shares of the table's width (percent); the suites split what is left. Chosen so that at 1280 px
# a suite column (about 70 px) holds its name and "passed" or "FAILED" on one line, the image
# column a content tag, and the signed column the key's short hash.
WIDTHS = {"target": 9.5, "stack": 8.0, "image": 11.5, "checks": 9.0, "published": 8.0, "signed": 9.5}

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;padding:.5rem;color:#1b1f24;background:#fff}
h1{font-size:1.3rem;margin:.2rem 0}.meta{color:#555;margin:.2rem 0 .6rem}
table{border-collapse:collapse;width:100%;table-layout:fixed;font-size:12px;line-height:1.35}
th,td{border:1px solid #d0d7de;padding:.25rem .3rem;vertical-align:top;text-align:left;overflow-wrap:anywhere}
th{background:#f6f8fa;position:sticky;top:0;font-size:11px}code{font:11px ui-monospace,Menlo,Consolas,monospace}
.cell{font-weight:600}.ok{background:#dafbe1}.bad{background:#ffebe9}.ngv{background:#fff8c5}
.na,.none{background:#f6f8fa;color:#57606a}.unres{background:#ffefd6}
details summary{cursor:pointer}.why{font-weight:400;font-size:11px;color:#333}.small{font-size:11px;color:#57606a}
.desc{font-size:11px;color:#333;display:-webkit-box;-webkit-line-clamp:2;-webkit-box-orient:vertical;overflow:hidden}
.legend span{display:inline-block;padding:.1rem .4rem;margin:0 .3rem .2rem 0;border-radius:3px;font-size:12px}
@media (max-width:900px){thead,colgroup{display:none}table,tbody,tr,td{display:block;width:auto}
tr{border:1px solid #d0d7de;margin:0 0 1rem;border-radius:6px}td{border:0;border-top:1px solid #eaeef2}
td::before{content:attr(data-label);display:block;font-size:.75rem;color:#57606a;text-transform:uppercase}
.desc{display:block}}
"""  # noqa: E501  (the page's bytes: one rule a line, as the report has always written them)


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _size(n: int | None) -> str:
    return f"{n / 1e9:.2f} GB" if n else "-"


def _folded(summary: str, lines: list[str], cls: str = "") -> str:
    """A summary (HTML) that opens on the whole text (escaped here): the row keeps one line for it
    until asked."""
    body = "<br>".join(_esc(x) for x in lines)
    return f'<details><summary class="{cls}">{summary}</summary><div class="why">{body}</div></details>'


def _lines(parts: list[str]) -> str:
    """One block each: a <details> is a block already, so <br> between them would leave blank lines."""
    return "".join(f"<div>{part}</div>" for part in parts)


def _suite_td(suite: str, cell: SuiteCell) -> str:
    cls = STATUS_CLASS.get(cell.status, "none")
    label = _esc(BREAKS.get(cell.status) or SHORT.get(cell.status, cell.status))
    inner = f'<span class="cell">{label}</span>'
    if cell.detail and cell.status != SuiteStatus.PASSED:
        inner = _folded(label, [cell.detail], "cell")
    return (
        f'<td class="{cls}" data-suite="{_esc(suite)}" data-status="{_esc(cell.status)}" '
        f'data-label="{_esc(suite)}" title="{_esc(suite)}: {_esc(cell.status)}">{inner}</td>'
    )


def _target_td(row: TargetRow) -> str:
    return (
        f'<td data-label="target"><b>{_esc(row.name)}</b>'
        f'<div class="desc" title="{_esc(row.description)}">{_esc(row.description)}</div></td>'
    )


def _stack_td(row: TargetRow) -> str:
    return (
        f'<td data-label="stack">{_esc(row.stack)}<br>ROCm {_esc(row.rocm)}<br>{_esc(" ".join(row.archs))}'
        f'<div class="small">{_esc(row.prune)}</div></td>'
    )


def _image_td(row: TargetRow) -> str:
    cls = {"built": "ok", "not built": "none", "unresolved": "unres"}[row.state]
    state = (
        _folded(f"{_esc(row.state)} ({len(row.why_unresolved)})", row.why_unresolved, "cell")
        if row.why_unresolved
        else f'<span class="cell">{_esc(row.state)}</span>'
    )
    tag = row.content_tag.rpartition(":")[2]  # the repository is rocmforge/<target>: in the title
    parts = [state, f'<code title="{_esc(row.content_tag)}">{_esc(tag)}</code>']
    if row.image_id:
        parts.append(
            f'<code title="image ID {_esc(row.image_id)}">{_esc(row.image_id[:19])}</code> {_size(row.size_bytes)}'
        )
    links = " · ".join(
        f'<a href="{_esc(path)}">{label}</a>'
        for label, path in (("manifest", row.manifest), ("SBOM", row.sbom))
        if path
    )
    if links:
        parts.append(links)
    return f'<td class="{cls}" data-label="image" data-state="{_esc(row.state)}">{_lines(parts)}</td>'


def _repro(row: TargetRow) -> str:
    r = row.repro
    if not r:
        return "repro: not checked"
    ids = r.get("image_ids") or []
    stale = "" if row.image_id and ids and ids[0] == row.image_id else " (for another image ID)"
    when = str(r.get("checked", ""))
    day = f' <span title="{_esc(when)}">{_esc(when[:10])}</span>'
    if r.get("identical"):
        return f"repro: identical{_esc(stale)}{day}"
    return _folded(f"repro: DIFFERENT{_esc(stale)}{day}", [str(r.get("explanation"))])


def _checks_td(row: TargetRow) -> str:
    counts = f"apt {row.pins['apt']} · pip {row.pins['pip']} · git {row.pins['git']}"
    pins = f'<span title="inputs the lock pins">{counts}</span>'
    checked = f' title="lock --check of {_esc(row.drift_checked)}"' if row.drift_checked else ""
    if row.drift is None:
        drift = "drift: not checked"
    elif not row.drift:
        drift = f"<span{checked}>drift: none</span>"
    else:
        drift = _folded(f"<span{checked}>drift: {len(row.drift)}</span>", row.drift)
    return f'<td data-label="pins, drift, verify-repro">{_lines([pins, drift, _repro(row)])}</td>'


def _published_td(row: TargetRow) -> str:
    p = row.published
    if not p:
        return '<td data-label="published">-</td>'
    where = p.get("repository") or p.get("registry")
    ref = f"{where}@{p.get('digest')}"
    # The registry and the digest's first 12 hex digits in the cell; the whole reference folded, to copy.
    host = str(where).split("/")[0]
    short = f"{_esc(host)}<br><code>{_esc(str(p.get('digest')).removeprefix('sha256:')[:12])}…</code>"
    return f'<td data-label="published" title="{_esc(ref)}">{_folded(short, [ref])}</td>'


def _signed_td(row: TargetRow) -> str:
    s = row.signed
    title = f"{s['text']}: {s['problem']}" if s.get("problem") else s["text"]
    if s["state"] == publication.SIGNED:
        made = ", ".join(f"{a['name']} ({a['bytes']} bytes)" for a in s["attestations"])
        title = (
            f"signed with cosign {s['cosign'] or '(version unknown)'}; public key sha256 {s['key_sha256']}; "
            f"attestations: {made}. As push recorded it: `python build.py verify` checks the registry"
        )
    return (
        f'<td class="{SIGNED_CLASS[s["state"]]}" data-label="signed" data-signed="{_esc(s["state"])}" '
        f'title="{_esc(title)}">{_esc(s["text"])}</td>'
    )


def to_html(rep: Report) -> str:
    """The report as one self-contained HTML page."""
    suite_share = (100 - sum(WIDTHS.values())) / max(len(rep.suites), 1)
    cols = "".join(
        f'<col style="width:{w:.2f}%">'
        for w in (
            [WIDTHS["target"], WIDTHS["stack"], WIDTHS["image"]]
            + [suite_share] * len(rep.suites)
            + [WIDTHS["checks"], WIDTHS["published"], WIDTHS["signed"]]
        )
    )
    head = "".join(f"<th>{_esc(s)}</th>" for s in rep.suites)
    body = "".join(
        f'<tr data-target="{_esc(row.name)}">{_target_td(row)}{_stack_td(row)}{_image_td(row)}'
        + "".join(_suite_td(s, row.suites[s]) for s in rep.suites)
        + f"{_checks_td(row)}{_published_td(row)}{_signed_td(row)}</tr>"
        for row in rep.targets
    )
    legend = "".join(f'<span class="{cls}">{_esc(SHORT.get(s, s.value))}</span>' for s, cls in STATUS_CLASS.items())
    gpu = "this host has /dev/kfd" if rep.host_gpu else "no AMD GPU on this host: GPU checks are not GPU-verified"
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f"<title>rocmforge matrix report</title><style>{CSS}</style></head><body>"
        f"<h1>rocmforge matrix report</h1><p class=meta>{_esc(rep.matrix)} · generated {_esc(rep.generated)} · "
        f"{_esc(gpu)}</p><p class=legend>{legend}</p>"
        f"<table><colgroup>{cols}</colgroup><thead><tr><th>target</th><th>stack</th><th>image</th>{head}"
        '<th title="pinned apt/pip/git inputs, drift from the last lock --check, the last verify-repro">'
        "pins, drift, repro</th><th>published</th><th>signed</th></tr></thead>"
        f"<tbody>{body}</tbody></table></body></html>\n"
    )


def to_markdown(rep: Report) -> str:
    """The Markdown summary for CI: one table row per target with its image, each suite's status and its
    signature."""
    lines = [
        "### rocmforge matrix",
        "",
        "| target | image | " + " | ".join(rep.suites) + " | signed |",
        "|---|---|" + "---|" * len(rep.suites) + "---|",
    ]
    for row in rep.targets:
        image = f"`{row.content_tag}` {_size(row.size_bytes)}" if row.image_id else row.state
        lines.append(
            f"| {row.name} | {image} | "
            + " | ".join(SHORT.get(row.suites[s].status, row.suites[s].status) for s in rep.suites)
            + f" | {row.signed['text']} |"
        )
    return "\n".join(lines) + "\n"
