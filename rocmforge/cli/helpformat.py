"""How --help lays out the descriptions and examples that help_text writes by hand: as written
where the terminal is wide enough, wrapped where it is not. argparse's own formatter would reflow
the examples into one paragraph; its raw one left lines of 95 and 131 characters that an
80-column terminal breaks wherever it likes (issue 54: read at 80 and 120 columns)."""

from __future__ import annotations

import argparse
import textwrap


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" "))]


def _is_command(line: str, program: str) -> bool:
    """An example's command line: what a user copies into a shell."""
    return line.lstrip().startswith((program + " ", "docker "))


def paragraphs(text: str, program: str) -> list[tuple[str, str, str]]:
    """(first indent, continuation indent, text) for each unit the layout keeps together: a command
    line alone, a comment alone, a prose line with the more indented lines that continue it."""
    units: list[tuple[str, str, str]] = []
    for line in text.splitlines():
        ind, body = _indent(line), line.strip()
        prev = units[-1] if units else None
        continues = (
            prev is not None
            and body
            and not _is_command(line, program)
            and not body.startswith("#")
            and len(ind) > len(prev[0])
            and not (prev[2].endswith(":") and " " not in prev[2])  # a heading ("examples:") has items
            and not _is_command(prev[0] + prev[2], program)
            and not prev[2].startswith("#")
        )
        if continues and prev is not None:
            units[-1] = (prev[0], ind, f"{prev[2]} {body}")
        else:
            units.append((ind, ind, body))
    return units


def fit(text: str, width: int, program: str) -> list[str]:
    """The lines of text at most width wide where words allow: prose and comments wrap between
    words, a command wraps with a shell continuation (" \\") so that it still runs when pasted."""
    out: list[str] = []
    for first, rest, body in paragraphs(text, program):
        if len(first) + len(body) <= width or not body:
            out.append(first + body)
        elif _is_command(first + body, program):
            out += _wrap_command(first, body, width)
        else:
            subsequent = first + "# " if body.startswith("#") else rest
            out += textwrap.wrap(
                body,
                width,
                initial_indent=first,
                subsequent_indent=subsequent,
                break_long_words=False,
                break_on_hyphens=False,
            )
    return out


def _wrap_command(indent: str, body: str, width: int) -> list[str]:
    lines, current = [], indent
    for word in body.split(" "):
        if current.strip() and len(current) + 1 + len(word) + 2 > width:
            lines.append(current + " \\")
            current = indent + "    " + word
        else:
            current = f"{current} {word}" if current.strip() else current + word
    return [*lines, current]


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as help_text writes them, fitted to the terminal (fit)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        program = self._prog.split(" ")[0]
        return "".join(indent + line + "\n" for line in fit(text, width - len(indent), program))
