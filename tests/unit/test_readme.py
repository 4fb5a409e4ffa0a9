"""The README is a short user guide and docs/ holds the depth (issue 54); this keeps both honest:
the README stays short, every relative link (and its #anchor) reaches a file and heading that exist,
the table of ROCMFORGE_* variables names exactly the variables the code reads, the set-up block
holds the two commands CI and the tests rely on, and every subcommand of the parser is documented."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from rocmforge.cli.parser import build_parser
from tests import quickstart
from tests.conftest import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_LINES = 250

SETUP_BLOCK = """\
```sh
scripts/with-engine python3 build.py --target hip-runtime   # the main job: build, then verify
scripts/with-engine python3 -m pytest                       # the tests
```
"""

# Where the code that reads ROCMFORGE_* variables lives (the package, its scripts, CI and the tests).
CODE = ("rocmforge", "scripts", "build.py", ".ci", "tests", "bench")

VARIABLE = re.compile(r"\bROCMFORGE_[A-Z0-9_]+\b")
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.M)


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def prose(text: str) -> str:
    """The text outside fenced blocks and code spans, where a link is a link."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces to hyphens,
    a repeated one numbered."""
    seen: dict[str, int] = {}
    out = set()
    for _, title in HEADING.findall(FENCE.sub("", path.read_text())):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link in a heading keeps its text
        slug = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for target in LINK.findall(prose(path.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not ours to check
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}: {target}"
        if not dest.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{where} (no heading #{anchor} in {dest.relative_to(root)})")
    return broken


def variables_in_code() -> set[str]:
    found: set[str] = set()
    for top in CODE:
        base = ROOT / top
        files = [base] if base.is_file() else [p for p in base.rglob("*") if p.is_file()]
        for f in files:
            if f == Path(__file__) or "__pycache__" in f.parts:
                continue
            try:
                found.update(VARIABLE.findall(f.read_text()))
            except UnicodeDecodeError:  # fixtures that are binary
                continue
    return found


def variables_in_table(text: str) -> set[str]:
    """The first cell of each row of the README's table of variables."""
    return set(re.findall(r"^\|\s*`(ROCMFORGE_[A-Z0-9_]+)`", text, re.M))


def subcommands(parser: argparse.ArgumentParser, prefix: str = "") -> list[str]:
    names = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                names.append(prefix + name)
                names += subcommands(sub, prefix + name + " ")
    return names


def test_the_readme_is_short():
    lines = README.read_text().count("\n")
    assert lines <= MAX_LINES, f"README.md has {lines} lines (at most {MAX_LINES}): move depth to docs/"


def test_the_readme_links_to_docs_and_docs_back():
    text = prose(README.read_text())
    unlinked = [p.name for p in sorted(DOCS.glob("*.md")) if f"docs/{p.name}" not in text]
    assert not unlinked, f"docs/ pages the README never links to: {unlinked}"


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(page):
    assert not broken_links(page)


def test_the_variables_table_names_exactly_what_the_code_reads():
    table = variables_in_table(README.read_text())
    code = variables_in_code()
    missing = sorted(code - table)
    unknown = sorted(table - code)
    assert not missing, f"read by the code but not in the README's table of variables: {missing}"
    assert not unknown, f"in the README's table of variables but read nowhere: {unknown}"


def test_the_setup_block_holds_the_two_commands():
    assert SETUP_BLOCK in README.read_text(), "the README's set-up block (CI's and the tests' commands) changed"


def test_every_subcommand_is_documented():
    text = "\n".join(p.read_text() for p in pages())
    names = subcommands(build_parser())
    assert names, "no subcommands found in rocmforge.cli.parser"
    undocumented = [n for n in names if not re.search(rf"(?:build\.py|rocmforge)\s+{re.escape(n)}(?![\w-])", text)]
    assert not undocumented, f"subcommands named nowhere in README.md or docs/: {undocumented}"


@pytest.mark.parametrize("line", [q for q in quickstart.lines() if q.words[0] == "rocmforge"], ids=lambda q: q.text)
def test_each_quick_start_line_is_one_the_parser_takes(line):
    """Every option the quick start shows exists, where it stands (the lines themselves run in
    tests/integration/test_signing.py, with the installed command)."""
    args = build_parser("rocmforge").parse_args(list(line.words[1:]))
    assert callable(args.run)


def test_the_checks_catch_a_real_mismatch(tmp_path):
    """The helpers find what they are for: a broken link, a missing anchor, a table row too many."""
    (tmp_path / "a.md").write_text("# A title: `x`\n\n[ok](b.md#b-part) [gone](c.md) [bad](b.md#nope) `[x](y.md)`\n")
    (tmp_path / "b.md").write_text("# B\n\n## B part\n\n```\n# not a heading\n```\n")
    assert broken_links(tmp_path / "a.md", tmp_path) == [
        "a.md: c.md (no such file)",
        "a.md: b.md#nope (no heading #nope in b.md)",
    ]
    assert anchors(tmp_path / "a.md") == {"a-title-x"}
    assert variables_in_table("| `ROCMFORGE_X` | a | b |\n| `OTHER` | | |\n") == {"ROCMFORGE_X"}


# docs/ write the installed command; `python3 build.py` only where the text is about a checkout
# (docs/commands.md says so once). A command in a code span or a fenced line is checked with the
# real parser, as the README's quick-start lines are; a synopsis ([--json], A|B, NAME...) is not a
# line one types, so it is left to test_every_subcommand_is_documented.
CHECKOUT_RUN = re.compile(r"(?:python3?|\.venv/bin/python) build\.py\b")
PROGRAM_WORDS = ("rocmforge", "build.py")
SYNOPSIS = re.compile(r"\[|\||\.\.\.|…|\bCOMMAND\b")
# What may stand before the program on a line that runs it: a wrapper, an interpreter, a variable.
RUNNER = re.compile(r"^(sudo|env|-E|scripts/with-engine|python3?|\.venv/bin/python|[A-Za-z_]+=.*)$")
# The page about running from a checkout (its set-up block is the README's).
CHECKOUT_PAGES = ("setup.md",)
SHELL_OPERATORS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "(", ")"}


def shell_words(line: str) -> list[str]:
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    return list(lex)


def doc_commands(page: Path) -> list[tuple[str, list[str]]]:
    """(the text as written, the words after the program name) of each rocmforge command the page
    shows: fenced lines (continuations joined) and code spans."""
    text = page.read_text()
    candidates = []
    for block in FENCE.finditer(text):
        body = block.group(0).split("\n", 1)[1].rsplit("\n", 1)[0].replace("\\\n", " ")
        candidates += [line.strip().removeprefix("$ ") for line in body.splitlines()]
    candidates += [
        m.group(0).strip("`").strip()
        for m in CODE_SPAN.finditer(FENCE.sub("", text))
        if not SYNOPSIS.search(m.group(0).strip("`"))
    ]
    found = []
    for line in candidates:
        try:
            words = shell_words(line)
        except ValueError:  # not shell (an unbalanced quote in prose): not a command either
            continue
        start = next((i for i, w in enumerate(words) if w in PROGRAM_WORDS or w.endswith("/rocmforge")), None)
        if start is None or not all(RUNNER.match(w) for w in words[:start]):
            continue  # the name in a sentence or a file listing, not a command line
        if words[start] == "build.py" and (start == 0 or "python" not in words[start - 1]):
            continue  # build.py named as a file, not run
        argv = []
        for w in words[start + 1 :]:
            if w in SHELL_OPERATORS or w.startswith("#"):
                break
            argv.append(w)
        found.append((line, argv))
    return found


DOC_COMMANDS = [(p, line, argv) for p in pages() for line, argv in doc_commands(p)]  # the README too


def test_the_docs_show_commands():
    """The extraction finds what it should (a regex that found nothing would pass every check below)."""
    pages = {p.name for p, _, _ in DOC_COMMANDS}
    assert {"commands.md", "gpu-host.md", "signing.md", "engines.md"} <= pages, pages
    assert len(DOC_COMMANDS) >= 30


@pytest.mark.parametrize("page,line,argv", DOC_COMMANDS, ids=[f"{p.name}: {line}" for p, line, _ in DOC_COMMANDS])
def test_each_docs_command_is_one_the_parser_takes(page, line, argv):
    parser = build_parser("rocmforge")
    if len(argv) == 1 and argv[0] in subcommands(parser):
        return  # `rocmforge context` in a sentence names the command; its options are in the table
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:
        assert stop.code == 0, f"{page.name}: `{line}` does not parse"
        return
    assert callable(args.run)


def test_docs_write_the_installed_command():
    """`python build.py` only in a paragraph about a checkout or CI's workflows (which run one)."""
    stray = []
    for page in sorted(p for p in DOCS.glob("*.md") if p.name not in CHECKOUT_PAGES):
        for paragraph in re.split(r"\n\s*\n", page.read_text()):
            if CHECKOUT_RUN.search(paragraph) and not re.search(r"checkout|workflow", paragraph):
                stray.append(f"{page.name}: {CHECKOUT_RUN.search(paragraph).group(0)} in: {paragraph[:80]!r}")
    assert not stray, stray
