"""The matrix report in a real browser: Debian's chromium, headless, opens the page that `report`
wrote for a scratch project, and the rendered DOM must show each target's state and each suite's
status as recorded. Screenshots (desktop and phone widths) are kept as test artifacts in
$ROCMFORGE_TEST_ARTIFACTS (default .rocmforge/test-artifacts/)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from rocmforge.verify import suites as suite_runs
from rocmforge.render.plan import load_plan
from tests.conftest import ROOT, copy_project, run_cli
from tests.integration.conftest import _need

pytestmark = pytest.mark.docker
ARTIFACTS = Path(os.environ.get("ROCMFORGE_TEST_ARTIFACTS") or ROOT / ".rocmforge" / "test-artifacts")


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        _need("chromium is not installed (apt-get install chromium)")
    return exe


def headless(exe: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
                          capture_output=True, text=True, timeout=120)


class Cells(HTMLParser):
    """target -> {"state": ..., suite: status} from the rendered DOM's data attributes."""

    def __init__(self):
        super().__init__()
        self.rows: dict[str, dict[str, str]] = {}
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


@pytest.fixture(scope="module")
def page(docker_client, tmp_path_factory):
    exe = chromium()
    tmp = tmp_path_factory.mktemp("report")
    matrix = copy_project(tmp)
    data = yaml.safe_load(matrix.read_text())
    name = f"report-{uuid.uuid4().hex[:8]}"
    data["targets"][name] = {"description": "a scratch target for the report", "stack": "debian13-rocm5.7",
                             "version": "1", "archs": ["gfx90a"], "source_date_epoch": 1764547200}
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    state = tmp / "state"
    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "build", "--target", name)
    assert proc.returncode == 0, proc.stderr[-3000:]
    image_id = docker_client.images.get(load_plan(matrix).targets[name].content_tag).id
    # What `test`, `verify-repro` and `push` would have recorded for it.
    suites = {s: {"status": "passed", "detail": "1 check(s)", "figures": {}} for s in suite_runs.suites_present()}
    suites["rocminfo"] = {"status": "not GPU-verified", "detail": "no /dev/kfd on this host", "figures": {}}
    suites["gemm"] = {"status": "failed", "detail": "injected: GEMM gave NaN", "figures": {}}
    suite_runs.record(state, suite_runs.SuitesReport.from_json(
        {"image_id": image_id, "target": name, "ok": False, "suites": suites, "tests": []}))
    (state / "checks").mkdir(parents=True, exist_ok=True)
    (state / "checks" / f"repro-{name}.json").write_text(json.dumps(
        {"target": name, "identical": True, "image_ids": [image_id, image_id], "checked": "2026-12-01T00:00:00Z"}))
    (tmp / "published").mkdir()
    (tmp / "published" / f"{name}.json").write_text(json.dumps(
        {"target": name, "registry": "registry.example.org", "repository": f"registry.example.org/rocmforge/{name}",
         "digest": "sha256:" + "ab" * 32, "image_id": image_id}))
    out = tmp / "out"
    summary = tmp / "summary.md"
    proc = run_cli("--matrix", str(matrix), "--state-dir", str(state), "report", "--out", str(out),
                   "--markdown", str(summary))
    assert proc.returncode == 0, proc.stderr[-3000:]
    yield exe, out / "index.html", name, image_id, summary
    run_cli("--matrix", str(matrix), "--state-dir", str(state), "clean", "--target", name)


def test_rendered_dom_shows_every_target_and_suite(page):
    exe, index, name, image_id, _ = page
    proc = headless(exe, "--dump-dom", index.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    cells = Cells()
    cells.feed(proc.stdout)
    assert set(load_plan(index.parents[1] / "matrix.yaml").targets) == set(cells.rows)
    row = cells.rows[name]
    assert row["state"] == "built"
    assert row["gemm"] == "failed" and row["rocminfo"] == "not GPU-verified" and row["linkage"] == "passed"
    for amd in ("llama7b-train", "llama7b-infer", "llama31-qlora-w7900"):
        assert cells.rows[amd]["state"] == "unresolved"
        assert {v for k, v in cells.rows[amd].items() if k != "state"} == {"unresolved"}
    assert "injected: GEMM gave NaN" in proc.stdout and image_id[:19] in proc.stdout
    assert "sha256:" + "ab" * 32 in proc.stdout and "identical" in proc.stdout
    assert "http://" not in index.read_text() and "https://" not in index.read_text()   # no external assets


@pytest.mark.parametrize("label, size", [("desktop", "1400,1000"), ("phone", "390,844")])
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
