"""The matrix report in a real browser: Debian's chromium, headless, opens the page that `report`
wrote for a scratch project, and the rendered DOM must show each target's state and each suite's
status as recorded, and the page must fit a 1280-px-wide window: a script run in a copy of the
page measures, in the browser's own layout, that nothing scrolls sideways (neither the document nor
any box in it) and that every column's right edge is on screen, and its first screen must show the
summary counts above about a dozen compact rows. Screenshots (1280 px and phone widths) are kept
as test artifacts in $ROCMFORGE_TEST_ARTIFACTS (default .rocmforge/test-artifacts/)."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import uuid
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from rocmforge.release import attestations as att
from rocmforge.render.plan import load_plan
from rocmforge.verify import suites as suite_runs
from tests.conftest import ROOT, copy_project, run_cli
from tests.integration.conftest import _need

pytestmark = pytest.mark.docker
STATEMENTS = (att.SBOM, att.PROVENANCE, att.TEST_RESULT)
WIDTH = 1280  # the window the page must fit, the narrowest common laptop screen
ARTIFACTS = Path(os.environ.get("ROCMFORGE_TEST_ARTIFACTS") or ROOT / ".rocmforge" / "test-artifacts")


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        _need("chromium is not installed (apt-get install chromium)")
    return exe


def headless(exe: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


class Cells(HTMLParser):
    """target -> {"state": ..., suite: status} and target -> signed state, from the rendered DOM's
    data attributes."""

    def __init__(self):
        super().__init__()
        self.rows: dict[str, dict[str, str]] = {}
        self.signed: dict[str, str] = {}
        self.current: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "data-target" in a:
            self.current = a["data-target"]
            self.rows[self.current] = {}
        elif tag == "td" and self.current:
            if "data-suite" in a:
                self.rows[self.current][a["data-suite"]] = a["data-status"]
            if "data-state" in a:
                self.rows[self.current]["state"] = a["data-state"]
            if "data-signed" in a:
                self.signed[self.current] = a["data-signed"]


@pytest.fixture(scope="module")
def page(docker_client, tmp_path_factory):
    exe = chromium()
    tmp = tmp_path_factory.mktemp("report")
    matrix = copy_project(tmp)
    data = yaml.safe_load(matrix.read_text())
    name = f"report-{uuid.uuid4().hex[:8]}"
    data["targets"][name] = {
        "description": "a scratch target for the report",
        "stack": "debian13-rocm5.7",
        "version": "1",
        "archs": ["gfx90a"],
        "source_date_epoch": 1764547200,
    }
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    state = tmp / "state"
    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name)
    assert proc.returncode == 0, proc.stderr[-3000:]
    image_id = docker_client.images.get(load_plan(matrix).targets[name].content_tag).id
    # What `test`, `verify-repro` and `push` would have recorded for it.
    suites = {s: {"status": "passed", "detail": "1 check(s)", "figures": {}} for s in suite_runs.suites_present()}
    suites["rocminfo"] = {"status": "not GPU-verified", "detail": "no /dev/kfd on this host", "figures": {}}
    suites["gemm"] = {"status": "failed", "detail": "injected: GEMM gave NaN", "figures": {}}
    suite_runs.record(
        state,
        suite_runs.SuitesReport.from_json(
            {"image_id": image_id, "target": name, "ok": False, "suites": suites, "tests": []}
        ),
    )
    (state / "checks").mkdir(parents=True, exist_ok=True)
    (state / "checks" / f"repro-{name}.json").write_text(
        json.dumps(
            {"target": name, "identical": True, "image_ids": [image_id, image_id], "checked": "2026-12-01T00:00:00Z"}
        )
    )
    (tmp / "published").mkdir()
    (tmp / "published" / f"{name}.json").write_text(
        json.dumps(
            {
                "target": name,
                "registry": "registry.example.org",
                "repository": f"registry.example.org/rocmforge/{name}",
                "digest": "sha256:" + "ab" * 32,
                "image_id": image_id,
                "signed": {
                    "cosign": "2.5.0",
                    "public_key_sha256": "cd" * 32,
                    "attestations": sorted(STATEMENTS),
                    "predicate_bytes": {k: 1000 + i for i, k in enumerate(sorted(STATEMENTS))},
                },
            }
        )
    )
    out = tmp / "out"
    summary = tmp / "summary.md"
    proc = run_cli(
        "--matrix", str(matrix), "--state-dir", str(state), "report", "--out", str(out), "--markdown", str(summary)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    yield exe, out / "index.html", name, image_id, summary
    run_cli("--matrix", str(matrix), "--state-dir", str(state), "clean", "--target", name)


def test_rendered_dom_shows_every_target_and_suite(page):
    exe, index, name, image_id, _ = page
    proc = headless(exe, "--dump-dom", index.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    cells = Cells()
    cells.feed(proc.stdout)
    plan = load_plan(index.parents[1] / "matrix.yaml")
    assert {tp.key for n in plan.targets for tp in plan.images_of(n)} == set(cells.rows)
    row = cells.rows[name]
    assert row["state"] == "built"
    assert row["gemm"] == "failed" and row["rocminfo"] == "not GPU-verified" and row["linkage"] == "passed"
    for amd in ("llama7b-train", "llama7b-infer", "llama31-qlora-w7900"):
        assert cells.rows[amd]["state"] == "unresolved"
        assert {v for k, v in cells.rows[amd].items() if k != "state"} == {"unresolved"}
    assert "injected: GEMM gave NaN" in proc.stdout and image_id[:19] in proc.stdout
    assert "sha256:" + "ab" * 32 in proc.stdout and "identical" in proc.stdout
    assert cells.signed[name] == "signed" and "signed + 3 attestations (key sha256 cdcdcdcdcdcd…)" in proc.stdout
    assert {v for t, v in cells.signed.items() if t != name} == {"not published"}
    assert "http://" not in index.read_text() and "https://" not in index.read_text()  # no external assets


# Run in a copy of the page (the report itself carries no script) once the page has loaded; the
# result is left on <html> for --dump-dom. A box that scrolls sideways (the table's overflow-x
# wrapper before) hides a too-wide table from the document's own scrollWidth, so every box is
# asked, and every cell whether its content spills out of it. Measured twice: as the page opens,
# and with every <details> open (the folded reasons must wrap in their column too).
MEASURE = """<script>addEventListener("load", () => {
  const root = document.documentElement, px = v => Math.ceil(v);
  const where = e => `${e.tagName.toLowerCase()}.${e.className}${e.dataset.label ? "[" + e.dataset.label + "]" : ""}`;
  const snapshot = () => ({viewport: innerWidth, scrollWidth: root.scrollWidth, bodyScrollWidth: document.body.scrollWidth,
    scrolling: [...document.querySelectorAll("*")].filter(e =>
        ["auto", "scroll"].includes(getComputedStyle(e).overflowX) && e.scrollWidth > e.clientWidth)
      .map(e => `${where(e)}: ${e.scrollWidth} > ${e.clientWidth}`),
    spilling: [...document.querySelectorAll("th, td")].filter(c => c.scrollWidth > c.clientWidth + 1)
      .map(c => `${c.closest("tr").dataset.target || "head"} ${where(c)}: ${c.scrollWidth} > ${c.clientWidth}`),
    columns: [...document.querySelectorAll("thead th")].map(th => [th.textContent, px(th.getBoundingClientRect().right)]),
    rows: [...document.querySelectorAll("tr[data-target]")].map(tr => [tr.dataset.target, px(tr.getBoundingClientRect().height)]),
    height: innerHeight,
    verdicts: [...document.querySelectorAll("tr[data-target]")].map(tr => [tr.dataset.target, tr.dataset.verdict]),
    onFirstScreen: [...document.querySelectorAll("tr[data-target]")].filter(tr => tr.getBoundingClientRect().bottom <= innerHeight).length,
    summary: (s => s && {bottom: px(s.getBoundingClientRect().bottom), shown: s.checkVisibility(),
      counts: Object.fromEntries([...s.querySelectorAll("[data-count]")].map(c => [c.dataset.count, Number(c.querySelector("b").textContent)]))})(
      document.getElementById("summary")),
    right: px(Math.max(...[...document.querySelectorAll("body *")].map(e => e.getBoundingClientRect().right)))});
  const closed = snapshot();
  document.querySelectorAll("details").forEach(d => { d.open = true; });
  root.setAttribute("data-measured", JSON.stringify({closed, opened: snapshot()}));
});</script>"""  # noqa: E501
TALLEST_ROW = 64  # px with the details closed: three short lines (some rows were 490 px once, 100 px before issue 54)
FIRST_SCREEN_ROWS = 12  # rows a 1280x1000 window shows whole under the summary (8 before issue 54)


def measure(exe: str, index: Path, width: int) -> dict:
    probe = index.with_name(f"measure-{width}.html")
    probe.write_text(index.read_text().replace("</body>", MEASURE + "</body>"))
    proc = headless(exe, f"--window-size={width},1000", "--dump-dom", probe.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = re.search(r'<html[^>]* data-measured="([^"]*)"', proc.stdout)
    assert found, f"the measuring script left no result: {proc.stdout[:500]}"
    return json.loads(html.unescape(found.group(1)))


@pytest.mark.parametrize("details", ["closed", "opened"])
def test_page_fits_1280_px_without_scrolling_sideways(page, details):
    exe, index, *_ = page
    got = measure(exe, index, WIDTH)[details]
    print(f"at {WIDTH} px, details {details}:", json.dumps(got))
    assert got["viewport"] == WIDTH, "chromium did not open the window at the asked width"
    assert got["scrolling"] == [], "a box scrolls sideways"
    assert got["scrollWidth"] <= WIDTH and got["bodyScrollWidth"] <= WIDTH
    off = [(name, right) for name, right in got["columns"] if right > WIDTH]
    assert not off, f"columns off-screen: {off}"
    assert [name for name, _ in got["columns"]][-1] == "signed"
    assert got["right"] <= WIDTH, "something is drawn right of the window"
    assert got["spilling"] == [], "content spills out of its cell"
    if details == "closed":
        assert max(h for _, h in got["rows"]) <= TALLEST_ROW, got["rows"]


def test_summary_counts_are_on_the_first_screen(page):
    """The counts above the table, as the browser lays it out at 1280x1000: seen without scrolling,
    and each the number of rows with that verdict (the scratch target, whose gemm failed, among
    the failed). The screenshot of this first screen is report-desktop.png in the artifacts."""
    exe, index, name, *_ = page
    got = measure(exe, index, WIDTH)["closed"]
    summary = got["summary"]
    print(f"at {WIDTH} px:", json.dumps(summary), f"{got['onFirstScreen']} rows on the first screen")
    assert summary and summary["shown"], "no summary on the page"
    assert summary["bottom"] <= got["height"], "the counts are below the first screen"
    verdicts = dict(got["verdicts"])
    counts = summary["counts"]
    assert counts["images"] == len(verdicts)
    for key in ("passed", "failed", "not GPU-verified", "not run", "not built", "unresolved"):
        assert counts[key] == list(verdicts.values()).count(key), key
    assert verdicts[name] == "failed" and counts["built"] >= 1
    assert got["onFirstScreen"] >= min(FIRST_SCREEN_ROWS, len(verdicts)), got["rows"]


@pytest.mark.parametrize("label, size", [("desktop", f"{WIDTH},1000"), ("phone", "390,844")])
def test_screenshots_are_kept(page, label, size):
    exe, index, *_ = page
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"report-{label}.png"
    shot.unlink(missing_ok=True)
    proc = headless(exe, f"--window-size={size}", f"--screenshot={shot}", index.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_markdown_summary_has_the_matrix(page):
    _, _, name, _, summary = page
    text = summary.read_text()
    assert text.startswith("### rocmforge matrix") and f"| {name} |" in text
    line = next(line for line in text.splitlines() if line.startswith(f"| {name} |"))
    assert "FAILED" in line and "not GPU-verified" in line
    assert re.search(r"^\d+ images · \d+ built · \d+ passed · [1-9]\d* failed", text, re.M), "the counts"
