"""The package's import graph, read from its source: no cycle, every import towards an earlier
stage (the order docs/layout.md gives), and a reason beside every import that is
deferred into a function."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "rocmforge"
# The pipeline top to bottom; a module imports from its own stage or an earlier one.
STAGES = ("shared", "host", "define", "resolve", "render", "assemble", "verify", "release", "doctor", "workflow", "cli")
TOP, TYPE_ONLY, DEFERRED = "module level", "TYPE_CHECKING", "in a function"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported project module
    where: str  # TOP, TYPE_ONLY or DEFERRED
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# rocmforge/data/ is run elsewhere (probes in images, suites under pytest), never imported by a stage.
MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "data" not in p.relative_to(PACKAGE).parts[:1]}


def _target(module: str, name: str) -> str:
    """`from a.b import c` names module a.b.c when there is one, else an attribute of a.b."""
    return f"{module}.{name}" if f"{module}.{name}" in MODULES else module


def _imports_of(source: str, tree: ast.AST) -> list[tuple[ast.stmt, str]]:
    found: list[tuple[ast.stmt, str]] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            here = where
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                here = TYPE_ONLY
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                here = DEFERRED
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, here))
            visit(child, here)

    visit(tree, TOP)
    return found


def project_imports() -> list[Import]:
    edges = []
    for source, path in MODULES.items():
        for node, where in _imports_of(source, ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path}:{node.lineno}: a relative import; the package imports absolutely"
                if (node.module or "").split(".")[0] == "rocmforge":
                    edges += [Import(source, _target(node.module, a.name), where, node.lineno) for a in node.names]
            else:
                edges += [
                    Import(source, a.name, where, node.lineno)
                    for a in node.names
                    if a.name.split(".")[0] == "rocmforge"
                ]
    return edges


def stage_of(module: str) -> int:
    parts = module.split(".")
    return STAGES.index(parts[1]) if len(parts) > 1 and parts[1] in STAGES else -1


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_every_folder_of_the_package_is_a_stage():
    folders = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    assert folders == sorted(STAGES + ("data",)), "a new folder takes its place in STAGES (and in docs/layout.md)"


def test_no_import_cycle_even_for_type_checkers():
    graph: dict[str, set[str]] = {}
    for imp in project_imports():
        if imp.where != DEFERRED and imp.target != imp.source:
            graph.setdefault(imp.source, set()).add(imp.target)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_imports_go_to_the_same_or_an_earlier_stage():
    later = [
        f"{MODULES[i.source].relative_to(PACKAGE.parent)}:{i.line}: {i.source} imports {i.target} ({i.where})"
        for i in project_imports()
        if stage_of(i.target) > stage_of(i.source)
    ]
    assert later == []


def test_a_deferred_import_says_why():
    silent = []
    for source, path in MODULES.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        for node, where in _imports_of(source, ast.parse("\n".join(lines))):
            said = "#" in lines[node.end_lineno - 1] or lines[node.lineno - 2].strip().startswith("#")
            if where == DEFERRED and not said:
                silent.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {ast.unparse(node)}")
    assert silent == [], "import at module level, or say beside it why it waits (start-up time, optional)"


@pytest.mark.parametrize(
    "graph, cycle",
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"b"}, "b": {"b"}}, ["b", "b"]),
    ],
)
def test_the_cycle_finder_finds_cycles(graph, cycle):
    assert find_cycle(graph) == cycle


def test_the_walk_sees_each_kind_of_import():
    tree = ast.parse(
        "from rocmforge.shared import errors\nif TYPE_CHECKING:\n    import rocmforge.host\n"
        "def f():\n    from rocmforge.assemble import engine\n"
    )
    assert [where for _node, where in _imports_of("x", tree)] == [TOP, TYPE_ONLY, DEFERRED]


def test_no_stage_imports_the_shipped_data():
    assert [i for i in project_imports() if i.target.startswith("rocmforge.data")] == []


MAX_MODULE_LINES = 400


def test_no_module_is_over_400_lines():
    """A module over 400 lines holds more than one concern: split it where the concerns part. The
    stages and the in-image suites are held to it; the probes and scripts keep their bytes (every
    image holds them)."""
    suites = sorted((PACKAGE / "data" / "suites").glob("*.py"))
    long = [
        f"{path.relative_to(PACKAGE.parent)}: {n} lines"
        for path in [*MODULES.values(), *suites]
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert long == []
