"""YAML loading that remembers where every key came from and refuses duplicate keys.

pydantic reports errors by path (``targets.hip-runtime.archs.0``); users need a line number,
so the loader keeps a map from key path to the line that defines it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rocmforge.shared.errors import UserError

Loc = tuple[Any, ...]


class _Checked(yaml.constructor.SafeConstructor):
    """What both loaders add to PyYAML's safe constructor (each loader's MRO holds that constructor
    already, so the base adds nothing to it)."""

    src_name: str  # the file that errors name, set by load() before the first node is constructed

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # A bad explicit tag (`!!int soon`) fails in Python, not in YAML: give it the node's line.
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, OverflowError) as exc:
            detail = "" if repr(node.value) in str(exc) else f" ({exc})"
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {node.value!r} as {node.tag.rsplit(':', 1)[-1]}{detail}", node.start_mark
            ) from None


def _construct_mapping(loader: _Loader | _LibyamlLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    result: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in result:
            raise UserError(
                f"duplicate key {key!r} (first defined above)",
                file=loader.src_name,
                line=key_node.start_mark.line + 1,
                field=str(key),
            )
        result[key] = loader.construct_object(value_node, deep=True)
    return result


class _Loader(_Checked, yaml.SafeLoader):
    """PyYAML's own parser: its errors are the ones load() words for the user."""


# libyaml's parser, where PyYAML was built with it: the same nodes, several times faster (the
# matrix and lock are read by every command). A document it refuses is read again by _Loader.
# It is not given a text with a tab, a "!" or a character PyYAML refuses: there the two parsers
# differ (libyaml takes a tab PyYAML refuses, and reads a bare `!` tag as '' where PyYAML reads None).
_FastLoader: type[_LibyamlLoader] | None = None
if getattr(yaml, "__with_libyaml__", False):

    class _LibyamlLoader(_Checked, yaml.CSafeLoader):
        """libyaml's parser, with _Loader's checks."""

    _FastLoader = _LibyamlLoader

_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
if _FastLoader is not None:
    _FastLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _walk(node: yaml.Node, path: Loc, lines: dict[Loc, int], name: str, active: tuple = ()) -> None:
    if id(node) in active:
        raise yaml.constructor.ConstructorError(
            None, None, "an alias refers to its own anchor (recursive value)", node.start_mark
        )
    active += (id(node),)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a plain value, not a list or mapping", key_node.start_mark
                )
            sub = path + (key_node.value,)
            line = key_node.start_mark.line + 1
            if sub in lines and key_node.value != "<<":
                raise UserError(
                    f"duplicate key {key_node.value!r} (first defined on line {lines[sub]})",
                    file=name,
                    line=line,
                    field=".".join(str(p) for p in sub),
                )
            lines[sub] = line
            _walk(value_node, sub, lines, name, active)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            sub = path + (i,)
            lines[sub] = item.start_mark.line + 1
            _walk(item, sub, lines, name, active)


class SourceMap:
    """Key path → line, with lookup falling back to the nearest enclosing key."""

    def __init__(self, name: str, lines: dict[Loc, int]) -> None:
        self.name = name
        self.lines = lines

    def line(self, loc: Loc) -> int | None:
        loc = tuple(loc)
        while loc:
            for key in (loc, tuple(str(p) for p in loc)):  # YAML keys are recorded as written: 1234 -> '1234'
                if key in self.lines:
                    return self.lines[key]
            loc = loc[:-1]
        return 1

    def error(self, loc: Loc, message: str) -> UserError:
        field = ".".join(str(p) for p in loc) or None
        return UserError(message, file=self.name, line=self.line(loc), field=field)


def load(path: Path, display_name: str | None = None) -> tuple[Any, SourceMap]:
    """The YAML document at path and where each of its keys is; UserError, naming the file (as
    display_name when given) and line, when it cannot be read or parsed or repeats a key."""
    name = display_name or str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError("file not found", file=name) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read: {exc}", file=name) from None
    if (
        _FastLoader is not None
        and "\t" not in text
        and "!" not in text
        and not yaml.reader.Reader.NON_PRINTABLE.search(text)
    ):
        loader = _FastLoader(text)
        loader.src_name = name
        try:
            node = loader.get_single_node()
            if node is not None:
                lines: dict[Loc, int] = {}
                _walk(node, (), lines, name)
                return loader.construct_document(node), SourceMap(name, lines)
        except (yaml.YAMLError, UserError):
            pass
        finally:
            loader.dispose()
    return _load_checked(text, name)


def _load_checked(text: str, name: str) -> tuple[Any, SourceMap]:
    try:
        loader = _Loader(text)
    except yaml.reader.ReaderError as exc:  # a character YAML refuses (a NUL, a control byte)
        line = text.count("\n", 0, exc.position) + 1
        raise UserError(
            f"not a YAML text: character {exc.character:#04x} at column "
            f"{exc.position - text.rfind(chr(10), 0, exc.position)}",
            file=name,
            line=line,
        ) from None
    loader.src_name = name
    try:
        node = loader.get_single_node()
        if node is None:
            raise UserError("empty document", file=name, line=1)
        lines: dict[Loc, int] = {}
        _walk(node, (), lines, name)
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or str(exc)
        ctx = exc.context_mark
        if exc.context and ctx and mark and ctx.line != mark.line:
            opened = exc.context.removeprefix("while scanning ").removeprefix("while parsing ")
            if opened in ("a quoted scalar", "a flow sequence", "a flow mapping"):
                # an unclosed quote or bracket: the opening line is the one to fix
                problem = f"{opened} is not closed: {problem} on line {mark.line + 1}"
                mark = ctx
            else:
                problem += f" ({exc.context} that starts on line {ctx.line + 1})"
        where = mark.line + 1 if mark else None
        kind = "YAML error" if isinstance(exc, yaml.constructor.ConstructorError) else "YAML syntax error"
        raise UserError(f"{kind}: {problem}", file=name, line=where) from None
    except yaml.YAMLError as exc:
        raise UserError(f"YAML error: {exc}", file=name) from None
    finally:
        loader.dispose()
    return data, SourceMap(name, lines)
