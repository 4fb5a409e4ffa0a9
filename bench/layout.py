"""Figures of the package's layout, read from its source: project imports, unannotated parameters,
long functions, public functions without a docstring, long lines and the longest module.

Run it on two checkouts to compare a layout change:  python3 bench/layout.py [PACKAGE_DIR]
rocmforge/data/ is left out: its probes and scripts run inside images, not as the package.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

LONG_FUNCTION = 50  # lines
LONG_LINE = 100  # characters


def modules(package: Path) -> list[Path]:
    return [p for p in sorted(package.rglob("*.py")) if p.relative_to(package).parts[0] != "data"]


def figures(package: Path) -> dict[str, int]:
    imports = unannotated = long_functions = undocumented = long_lines = 0
    longest = 0
    for path in modules(package):
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        longest = max(longest, len(lines))
        long_lines += sum(len(line) > LONG_LINE for line in lines)
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rocmforge"):
                imports += len(node.names)
            elif isinstance(node, ast.Import):
                imports += sum(a.name.startswith("rocmforge") for a in node.names)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                every = args.posonlyargs + args.args + args.kwonlyargs
                every += [a for a in (args.vararg, args.kwarg) if a]
                unannotated += sum(a.annotation is None and a.arg not in ("self", "cls") for a in every)
                if (node.end_lineno or node.lineno) - node.lineno + 1 > LONG_FUNCTION:
                    long_functions += 1
        for node in tree.body:  # public module-level functions
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                undocumented += ast.get_docstring(node) is None
    return {
        "modules": len(modules(package)),
        "project imports": imports,
        "unannotated parameters": unannotated,
        f"functions over {LONG_FUNCTION} lines": long_functions,
        "public module functions without a docstring": undocumented,
        f"lines over {LONG_LINE} characters": long_lines,
        "longest module (lines)": longest,
    }


def main() -> None:
    package = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "rocmforge"
    for name, value in figures(package).items():
        print(f"{name:45} {value}")


if __name__ == "__main__":
    main()
