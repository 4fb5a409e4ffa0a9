"""What a person reading a terminal would object to, as checks on the lines it shows: a line
wider than the terminal, and a column so narrow that its text comes one word a line."""

from __future__ import annotations

BOX = set("─━═│┃┌┐└┘├┤┬┴┼╇╈╀ ")


def too_wide(lines: list[str], width: int) -> list[str]:
    """Lines wider than the terminal, but for one that runs over only with a word too long for any
    line (a path or reference printed whole to copy: the terminal wraps it, nothing could)."""
    return [
        line
        for line in lines
        if len(line.rstrip()) > width
        and not (len(line.rstrip().rsplit(" ", 1)[-1]) > width // 2 and len(line.rstrip().rsplit(" ", 1)[0]) < width)
    ]


def word_per_line_runs(lines: list[str], run: int = 3) -> list[list[str]]:
    """Runs of `run` or more consecutive lines that each hold a single word starting in the same
    column: what a column a few characters wide makes of a phrase. (Nested `key:` lines, each a
    step further in, are no such run; a table's rules and blank lines break one.)"""
    found: list[list[str]] = []
    current: list[str] = []

    def column(line: str) -> int:
        return len(line) - len(line.lstrip())

    for line in lines + [""]:
        single = len(line.split()) == 1 and not set(line) <= BOX
        if single and (not current or column(line) == column(current[-1])):
            current.append(line)
            continue
        if len(current) >= run:
            found.append(current)
        current = [line] if single else []
    return found
