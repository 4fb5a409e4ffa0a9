"""The matrix report drawn for people: one self-contained HTML page (no external assets, no script:
air-gapped sites open it as a file) and a Markdown summary for CI.

The page must fit a 1280-px-wide window without scrolling sideways, and its first screen must show
the summary counts and about fifteen rows (tests/integration/test_report_browser.py measures both
in chromium): the table is laid out at the window's width with fixed column shares, a cell holds at
most three short lines (a longer one ends in "…" with the whole text in its title), long
references and digests are shortened with the whole value in a title or a <details>, and reasons
(why unresolved, why not GPU-verified, drift) sit folded in <details>. Each state has a colour of
its own: built is not passed, and neither is failed, not GPU-verified, not applicable or not run.
Below 900 px each row becomes a card."""

from __future__ import annotations

import html

from rocmforge.release import publication
from rocmforge.release.matrix_report import VERDICTS, Report, SuiteCell, TargetRow, verdict
from rocmforge.verify.suites import SuiteStatus

STATUS_CLASS = {
    SuiteStatus.PASSED: "ok",
    SuiteStatus.FAILED: "bad",
    SuiteStatus.NOT_GPU_VERIFIED: "ngv",
    SuiteStatus.NOT_APPLICABLE: "na",
    SuiteStatus.NOT_RUN: "notrun",
    SuiteStatus.NOT_BUILT: "none",
    SuiteStatus.UNRESOLVED: "unres",
}
BUILT = "built"  # an image's state, coloured apart from every suite's result: built is not passed
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
# a suite column (about 65 px) holds its name, "passed" or "FAILED" on one line and "not GPU-verified"
# on two, the image column a content tag, the checks column its pin counts, and the signed column
# the key's short hash.
WIDTHS = {"target": 9.5, "stack": 10.3, "image": 11.5, "checks": 10.3, "published": 7.5, "signed": 7.9}

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;padding:.5rem;color:#1b1f24;background:#fff}
h1{font-size:1.2rem;margin:.1rem 0;display:inline-block;margin-right:.8rem}.meta{color:#555;display:inline}
.top{display:flex;flex-wrap:wrap;align-items:center;gap:.3rem .8rem;margin:.3rem 0 .4rem}
.summary{display:flex;flex-wrap:wrap;gap:.3rem;margin:0}.legend{margin:0;font-size:11px;color:#57606a}
.summary span{border:1px solid #d0d7de;border-radius:4px;padding:.1rem .45rem;font-size:13px}.summary b{font-size:16px}
.summary .zero{opacity:.55}
table{border-collapse:collapse;width:100%;table-layout:fixed;font-size:12px;line-height:1.3}
th,td{border:1px solid #d0d7de;padding:.15rem .3rem;vertical-align:top;text-align:left;overflow-wrap:anywhere}
th{background:#f6f8fa;position:sticky;top:0;font-size:11px}code{font:11px ui-monospace,Menlo,Consolas,monospace}
.cell{font-weight:600}.ok{background:#dafbe1;color:#0f5323}.bad{background:#ffcecb;color:#82071e}.ngv{background:#fff3b0;color:#633c01}
.built{background:#ddf4ff;color:#0a3069}.notrun{background:#fbefff;color:#6e40c9}
.na,.none{background:#f6f8fa;color:#57606a}.unres{background:#ffe2cc;color:#762c00}
.line{display:block;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}.small{font-size:11px;color:#57606a}
.clamp{display:-webkit-box;-webkit-line-clamp:3;-webkit-box-orient:vertical;overflow:hidden}
details summary{cursor:pointer;list-style:none;text-decoration:underline dotted}summary::-webkit-details-marker{display:none}.why{font-weight:400;font-size:11px;color:#333}
.desc{font-size:11px;color:#444}td.ok,td.bad,td.ngv,td.na,td.none,td.notrun,td.unres{font-size:11px}
.legend span{display:inline-block;padding:0 .35rem;margin:0 .2rem 0 0;border-radius:3px}
@media (max-width:900px){thead,colgroup{display:none}table,tbody,tr,td{display:block;width:auto}
tr{border:1px solid #d0d7de;margin:0 0 1rem;border-radius:6px}td{border:0;border-top:1px solid #eaeef2}
td::before{content:attr(data-label);display:block;font-size:.75rem;color:#57606a;text-transform:uppercase}
.line{white-space:normal}}
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


def _line(html_text: str, title: str, cls: str = "line") -> str:
    """One line of a cell (html_text, escaped already): cut with "…" where it is too long, the
    whole text in its title."""
    return f'<div class="{cls}" title="{_esc(title)}">{html_text}</div>'


def _target_td(row: TargetRow) -> str:
    # The name is never cut (a user copies it); the description keeps one line.
    return (
        f'<td data-label="target"><b>{_esc(row.name)}</b>'
        f"{_line(_esc(row.description), row.description, 'line desc')}</td>"
    )


def _stack_td(row: TargetRow) -> str:
    archs = ",".join(row.archs)
    return (
        f'<td data-label="stack">{_line(_esc(row.stack), row.stack)}{_line(f"ROCm {_esc(row.rocm)}", row.rocm)}'
        f"{_line(f'{_esc(archs)} <span class=small>{_esc(row.prune)}</span>', f'{archs}; {row.prune}')}</td>"
    )


def _image_td(row: TargetRow) -> str:
    cls = {"built": BUILT, "not built": "none", "unresolved": "unres"}[row.state]
    size = f" · {_size(row.size_bytes)}" if row.image_id else ""
    state = (
        _folded(f"{_esc(row.state)} ({len(row.why_unresolved)})", row.why_unresolved, "cell")
        if row.why_unresolved
        else f'<span class="cell">{_esc(row.state)}</span>{size}'
    )
    # The repository (rocmforge/<target>) and the image ID in the title: three lines a cell, the
    # third for the links.
    tag = row.content_tag.rpartition(":")[2]
    whole = row.content_tag + (f"; image ID {row.image_id}" if row.image_id else "")
    parts = [state, _line(f"<code>{_esc(tag)}</code>", whole)]
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
        return _line("repro: not checked", "verify-repro has not been run for this image")
    ids = r.get("image_ids") or []
    stale = "" if row.image_id and ids and ids[0] == row.image_id else " (for another image ID)"
    when = str(r.get("checked", ""))
    day = f' <span title="{_esc(when)}">{_esc(when[:10])}</span>'
    if r.get("identical"):
        return _line(f"repro: identical{_esc(stale)}{day}", f"verify-repro: identical{stale} ({when})")
    return _folded(f"repro: DIFFERENT{_esc(stale)}{day}", [str(r.get("explanation"))])


def _checks_td(row: TargetRow) -> str:
    counts = f"apt {row.pins['apt']} · pip {row.pins['pip']} · git {row.pins['git']}"
    pins = _line(counts, f"inputs the lock pins: {counts}")
    checked = f' title="lock --check of {_esc(row.drift_checked)}"' if row.drift_checked else ""
    if row.drift is None:
        drift = _line("drift: not checked", "lock --check has not been run")
    elif not row.drift:
        drift = f"<div class=line><span{checked}>drift: none</span></div>"
    else:
        drift = _folded(f"<span{checked}>drift: {len(row.drift)}</span>", row.drift)
    return f'<td class="small" data-label="pins, drift, verify-repro">{pins}{_lines([drift, _repro(row)])}</td>'


def _published_td(row: TargetRow) -> str:
    p = row.published
    if not p:
        return '<td data-label="published">-</td>'
    where = p.get("repository") or p.get("registry")
    ref = f"{where}@{p.get('digest')}"
    # The registry and the digest's first 12 hex digits in the cell; the whole reference folded, to copy.
    host = str(where).split("/")[0]
    short = (
        f"<span class=line>{_esc(host)}</span><code>{_esc(str(p.get('digest')).removeprefix('sha256:')[:12])}…</code>"
    )
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
        f'title="{_esc(title)}"><div class="clamp">{_esc(s["text"])}</div></td>'
    )


def _summary(rep: Report) -> str:
    """The counts at the top: images, built, and images by verdict, each in its verdict's colour."""
    counts = rep.summary()
    classes = {"images": "", "built": BUILT} | {str(v): STATUS_CLASS[v] for v in VERDICTS}
    spans = "".join(
        f'<span class="{classes[key]}{" zero" if not n else ""}" data-count="{_esc(key)}"><b>{n}</b> {_esc(key)}</span>'
        for key, n in counts.items()
    )
    return f'<p class="summary" id="summary">{spans}</p>'


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
        f'<tr data-target="{_esc(row.name)}" data-verdict="{_esc(verdict(row))}">'
        f"{_target_td(row)}{_stack_td(row)}{_image_td(row)}"
        + "".join(_suite_td(s, row.suites[s]) for s in rep.suites)
        + f"{_checks_td(row)}{_published_td(row)}{_signed_td(row)}</tr>"
        for row in rep.targets
    )
    legend = "".join(
        f'<span class="{cls}">{_esc(label)}</span>'
        for label, cls in [(BUILT, BUILT)] + [(SHORT.get(s, s.value), c) for s, c in STATUS_CLASS.items()]
    )
    gpu = "this host has /dev/kfd" if rep.host_gpu else "no AMD GPU on this host: GPU checks are not GPU-verified"
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f"<title>rocmforge matrix report</title><style>{CSS}</style></head><body>"
        f"<h1>rocmforge matrix report</h1><p class=meta>{_esc(rep.matrix)} · generated {_esc(rep.generated)} · "
        f'{_esc(gpu)}</p><div class="top">{_summary(rep)}<p class="legend">colours: {legend}</p></div>'
        f"<table><colgroup>{cols}</colgroup><thead><tr><th>target</th><th>stack</th><th>image</th>{head}"
        '<th title="pinned apt/pip/git inputs, drift from the last lock --check, the last verify-repro">'
        "pins, drift, repro</th><th>published</th><th>signed</th></tr></thead>"
        f"<tbody>{body}</tbody></table></body></html>\n"
    )


def to_markdown(rep: Report) -> str:
    """The Markdown summary for CI: one table row per target with its image, each suite's status and its
    signature, then the page's counts."""
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
    lines += ["", " · ".join(f"{n} {key}" for key, n in rep.summary().items())]
    return "\n".join(lines) + "\n"
