"""The matrix report page as a reader meets it: the counts at the top agree with the rows, each
state has a colour of its own (built is not passed), and a cell keeps to a few short lines. The
browser's own measurements are in tests/integration/test_report_browser.py."""

from __future__ import annotations

import re

import pytest

from rocmforge.release import publication, report_page
from rocmforge.release.matrix_report import Report, SuiteCell, verdict
from rocmforge.verify.suites import SuiteStatus
from tests.unit.test_report_signed import row

P, F, NGV, NA, NOT_RUN = (
    SuiteStatus.PASSED,
    SuiteStatus.FAILED,
    SuiteStatus.NOT_GPU_VERIFIED,
    SuiteStatus.NOT_APPLICABLE,
    SuiteStatus.NOT_RUN,
)


def image(name: str, *statuses: SuiteStatus, state: str = "built"):
    cells = {s: SuiteCell(st, "why") for s, st in zip(("linkage", "gemm"), statuses)}
    return row(name, None, publication.signed(None), suites=cells, state=state)


def report() -> Report:
    return Report(
        generated="2026-12-05 12:00 UTC",
        matrix="matrix.yaml",
        host_gpu=False,
        suites=["linkage", "gemm"],
        targets=[
            image("ok", P, NA),
            image("broken", F, NGV),
            image("no-gpu", P, NGV),
            image("untested", NOT_RUN, NOT_RUN),
            image("later", SuiteStatus.NOT_BUILT, SuiteStatus.NOT_BUILT, state="not built"),
            image("amd", SuiteStatus.UNRESOLVED, SuiteStatus.UNRESOLVED, state="unresolved"),
        ],
    )


@pytest.mark.parametrize(
    "statuses, state, expected",
    [
        ((P, P), "built", P),
        ((P, NA), "built", P),
        ((P, NGV), "built", NGV),
        ((NOT_RUN, NGV), "built", NOT_RUN),
        ((F, NOT_RUN), "built", F),
        ((SuiteStatus.NOT_BUILT,) * 2, "not built", SuiteStatus.NOT_BUILT),
        ((SuiteStatus.UNRESOLVED,) * 2, "unresolved", SuiteStatus.UNRESOLVED),
    ],
)
def test_an_images_verdict_is_its_worst_suite(statuses, state, expected):
    assert verdict(image("t", *statuses, state=state)) == expected


def test_summary_counts_each_verdict_once():
    assert report().summary() == {
        "images": 6,
        "built": 4,
        "passed": 1,
        "failed": 1,
        "not GPU-verified": 1,
        "not run": 1,
        "not built": 1,
        "unresolved": 1,
    }
    assert report().to_json()["summary"] == report().summary()


def test_the_summary_is_above_the_table_and_agrees_with_the_rows():
    text = report_page.to_html(report())
    summary = re.search(r'<p class="summary" id="summary">(.*?)</p>', text).group(1)
    assert text.index('id="summary"') < text.index("<table")
    counts = {key: int(n) for key, n in re.findall(r'data-count="([^"]+)"><b>(\d+)</b>', summary)}
    assert counts == report().summary()
    verdicts = re.findall(r'<tr data-target="[^"]+" data-verdict="([^"]+)">', text)
    assert len(verdicts) == counts["images"]
    for key in ("passed", "failed", "not GPU-verified", "not run", "not built", "unresolved"):
        assert verdicts.count(key) == counts[key], key
    assert 'class="none zero"' not in summary, "a count above zero is not dimmed"


def backgrounds(text: str) -> dict[str, str]:
    """class -> background colour, from the page's style sheet."""
    css = re.search(r"<style>(.*?)</style>", text, re.S).group(1)
    rules = re.findall(r"([^{}]+)\{[^}]*background:(#[0-9a-f]+)", css)
    return {cls: colour for rule, colour in rules for cls in re.findall(r"\.([a-z]+)(?=[,{ ]|$)", rule)}


def test_each_state_has_a_colour_of_its_own():
    text = report_page.to_html(report())
    colour = backgrounds(text)
    image_cell = re.search(r'<td class="([a-z]+)" data-label="image" data-state="built"', text).group(1)
    cells = {
        status: re.search(rf'<td class="([a-z]+)" data-suite="[^"]+" data-status="{status}"', text).group(1)
        for status in ("passed", "failed", "not GPU-verified", "not applicable", "not run", "unresolved")
    }
    shown = {"built": colour[image_cell]} | {status: colour[cls] for status, cls in cells.items()}
    assert len(set(shown.values())) == len(shown), f"two states share a colour: {shown}"


def test_a_cell_keeps_to_short_lines():
    text = report_page.to_html(report())
    for label in ("stack", "pins, drift, verify-repro"):
        cell = re.search(rf'<tr data-target="ok"[^>]*>.*?(<td[^>]*data-label="{re.escape(label)}".*?</td>)', text)
        assert cell and cell.group(1).count('class="line') >= 2, label
    assert "<br>" not in re.search(r'<tr data-target="ok".*?</tr>', text).group(0)
    assert ".line{display:block;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}" in text
