"""The suites' processes side by side: grouping, one exit code for the run, merged JUnit files and
merged results from real pytest processes."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET

import pytest

from rocmforge.verify import suiteprocs


def test_groups_put_workload_gemm_and_contents_apart():
    # contents (the outside check and the contents probe) beside workload and gemm: the halves even
    assert suiteprocs.groups(["contents", "linkage", "gemm", "workload", "archs"]) == [
        ["linkage", "archs"],
        ["contents", "gemm", "workload"],
    ]
    assert suiteprocs.groups(["linkage"]) == [["linkage"]]
    assert suiteprocs.groups(["workload"]) == [["workload"]]
    assert suiteprocs.groups([]) == []


@pytest.mark.parametrize(
    "codes, want",
    [
        ([0, 0], 0),
        ([0, 1], 1),
        ([1, 0], 1),
        ([5, 0], 0),
        ([0, 5], 0),
        ([5, 5], 5),
        ([1, 2], 2),
        ([3, 0], 3),
        ([0, 4], 4),
        ([5, 1], 1),
        ([], 0),
    ],
)
def test_combined_exit(codes, want):
    assert suiteprocs.combined_exit(codes) == want


def test_merge_junit_keeps_every_suite_and_skips_a_missing_part(tmp_path):
    (tmp_path / "a.xml").write_text('<testsuites><testsuite name="a" tests="2"/></testsuites>')
    (tmp_path / "b.xml").write_text('<testsuite name="b" tests="1"/>')
    out = tmp_path / "junit.xml"
    suiteprocs.merge_junit([tmp_path / "a.xml", tmp_path / "missing.xml", tmp_path / "b.xml"], out)
    root = ET.parse(out).getroot()
    assert root.tag == "testsuites"
    assert [s.get("name") for s in root] == ["a", "b"]


def test_run_groups_runs_real_processes_and_merges_their_results(tmp_path):
    root = tmp_path / "suites"
    root.mkdir()
    # A stand-in for the suites' conftest: it writes one result row per test to --results-json.
    (root / "conftest.py").write_text(
        "import json\n"
        "ROWS = []\n"
        "def pytest_addoption(parser):\n"
        "    parser.addoption('--results-json')\n"
        "def pytest_runtest_logreport(report):\n"
        "    if report.when == 'call':\n"
        "        ROWS.append({'suite': report.nodeid.split('::')[0][5:-3], 'outcome': report.outcome})\n"
        "def pytest_sessionfinish(session):\n"
        "    open(session.config.getoption('--results-json'), 'w').write(json.dumps(ROWS))\n"
    )
    (root / "test_linkage.py").write_text("def test_a():\n    pass\n")
    (root / "test_workload.py").write_text("def test_b():\n    assert False, 'broken on purpose'\n")
    work = tmp_path / "work"
    work.mkdir()
    base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir", str(root)]
    run = suiteprocs.run_groups(base, root, ["linkage", "workload"], work, junit=tmp_path / "j.xml")
    assert run.exit_code == 1
    assert sorted((r["suite"], r["outcome"]) for r in run.results) == [("linkage", "passed"), ("workload", "failed")]
    assert "broken on purpose" in run.log
    names = {c.get("name") for c in ET.parse(tmp_path / "j.xml").getroot().iter("testcase")}
    assert names == {"test_a", "test_b"}
