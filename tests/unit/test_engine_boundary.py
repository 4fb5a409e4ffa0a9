"""One engine boundary: outside rocmforge/host/, no module imports docker-py, reaches the docker-py
client behind an Engine, or branches on which image store the engine uses. Read from the source,
including the suites' host side (rocmforge/data/suites), which talks to the engine too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "rocmforge"
HOST = PACKAGE / "host"
OUTSIDE = sorted(p for p in PACKAGE.rglob("*.py") if HOST not in p.parents)
STORE_NAMES = {"GRAPHDRIVER", "CONTAINERD", "PODMAN"}  # host.engineinfo's names of the stores


def crossings(source: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if a.name.split(".")[0] == "docker"]
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").split(".")[0] == "docker":
                found.append((node.lineno, f"from {node.module} import ..."))
            if (node.module or "").endswith("engineinfo"):
                found += [(node.lineno, f"imports {a.name}") for a in node.names if a.name in STORE_NAMES]
        elif isinstance(node, ast.Attribute):
            if node.attr == "api":  # docker-py's low-level client
                found.append((node.lineno, ".api"))
            elif isinstance(node.value, ast.Attribute) and node.value.attr == "docker":  # Engine.docker.<x>
                found.append((node.lineno, f".docker.{node.attr}"))
            elif node.attr in STORE_NAMES and isinstance(node.value, ast.Name) and node.value.id == "engineinfo":
                found.append((node.lineno, f"engineinfo.{node.attr}"))
        elif isinstance(node, ast.Compare):  # EngineInfo.store == ...
            sides = [node.left, *node.comparators]
            if any(isinstance(n, ast.Attribute) and n.attr == "store" for n in sides):
                found.append((node.lineno, "compares .store"))
    return found


@pytest.mark.parametrize("path", OUTSIDE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_host_reaches_the_engine_api_or_names_a_store(path):
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}: {what}" for line, what in crossings(path.read_text())]
    assert found == [], "go through rocmforge.host.engines.Engine (add a method there when one is missing)"


@pytest.mark.parametrize(
    "source, caught",
    [
        ("import docker.errors", True),
        ("from docker.utils import parse_repository_tag", True),
        ("client.api.tag(a, b, c)", True),
        ("engine.docker.containers.run(x)", True),
        ("if info.store == engineinfo.CONTAINERD: pass", True),
        ("from rocmforge.host.engineinfo import PODMAN", True),
        ("if engine.described.store != 'podman': pass", True),
        ("client.tag(a, b)", False),
        ("cmd = [self.docker, 'run']", False),
        ("if mode.engine == rootless.PODMAN: pass", False),
        ("import dockerfile_parse", False),
    ],
)
def test_the_reader_catches_each_kind_of_crossing(source, caught):
    assert bool(crossings(source)) is caught


# Inside host/, docker-py is reached by the engine boundary's own modules only: the builders, the
# suites' containers (host/container.py) and every store reader go through an Engine's methods.
DOCKER_PY_MODULES = {"dockercontext.py", "enginebase.py", "engineinfo.py", "engines.py"}


@pytest.mark.parametrize(
    "path", sorted(p for p in HOST.glob("*.py") if p.name not in DOCKER_PY_MODULES), ids=lambda p: p.name
)
def test_the_rest_of_host_goes_through_the_engine_too(path):
    found = [f"{path.relative_to(PACKAGE.parent)}:{line}: {what}" for line, what in crossings(path.read_text())]
    assert found == [], "go through rocmforge.host.enginebase.Engine (add a method there when one is missing)"
