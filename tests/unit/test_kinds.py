"""Component kinds (rocmforge/define/kinds/, templates/kinds/): golden texts of every kind's partial, and
each kind's fetch items, lock entries and matrix checks.

Golden texts: golden/kinds-matrix.yaml has one target per case of each kind (golden/kinds-matrix.lock
is its lock). Each target is planned and rendered by the real make_plan and Renderer, with
golden/Dockerfile.j2 standing in for templates/Dockerfile.j2 so that only what the partials write
remains; that text, followed by the build-context files the components add, must equal
golden/<target>.txt byte for byte. Content and recipe tags are written with HASH in place of their
hash, so a change elsewhere (a probe, a base recipe) does not move them.

After an intended change to a partial or a kind, regenerate the golden texts and review their diff:

    ROCMFORGE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q -p no:cacheprovider tests/unit/test_kinds.py
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from rocmforge.define.kinds import KIND_NAMES, GitSourceFetch, WheelsFetch
from rocmforge.define.matrix import load_matrix
from rocmforge.host import fetch
from rocmforge.render.plan import make_plan
from rocmforge.resolve import entries, inputs, lockfile
from rocmforge.resolve.lock import LockRun, Outcome
from rocmforge.resolve.lockmodel import GitEntry, Lock, PythonFile
from rocmforge.shared.errors import UserError
from rocmforge.shared.packagedata import TEMPLATES
from tests.conftest import ROOT

GOLDEN = Path(__file__).resolve().parent / "golden"
MATRIX = load_matrix(GOLDEN / "kinds-matrix.yaml")
CASES = [name for name in MATRIX.targets if MATRIX.targets[name].components]
UPDATE = os.environ.get("ROCMFORGE_UPDATE_GOLDEN") == "1"
TAG_HASH_RE = re.compile(r":(content|recipe)-[0-9a-f]{12}\b")


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    """The golden matrix planned with the real templates/kinds and partials, and the stand-in Dockerfile.j2."""
    root = tmp_path_factory.mktemp("kinds")
    shutil.copytree(TEMPLATES, root / "templates")
    shutil.copyfile(GOLDEN / "Dockerfile.j2", root / "templates" / "Dockerfile.j2")
    return make_plan(MATRIX, root, lockfile.load(GOLDEN / "kinds-matrix.lock"))


def golden_text(files: dict[str, bytes]) -> str:
    text = files["Dockerfile"].decode()
    for path in sorted(files):
        if path != "Dockerfile" and not path.startswith(("probes/", "build-ca/")):
            text += f"---- {path}\n{files[path].decode()}"
    return TAG_HASH_RE.sub(r":\1-HASH", text)


@pytest.mark.parametrize("target", CASES)
def test_partial_golden_text(plan, target: str):
    path = GOLDEN / f"{target}.txt"
    got = golden_text(plan.targets[target].files)
    if UPDATE:
        path.write_text(got, encoding="utf-8")
    assert path.is_file(), f"{path.name} is missing: regenerate with ROCMFORGE_UPDATE_GOLDEN=1"
    assert got == path.read_text(encoding="utf-8"), f"{target}: partial output differs from {path.name}"


def test_every_kind_has_a_partial_and_a_golden_case():
    used = {MATRIX.components[c].kind for t in CASES for c in MATRIX.targets[t].components}
    assert used == set(KIND_NAMES)
    for kind in KIND_NAMES:
        assert (TEMPLATES / "kinds" / f"{kind}.j2").is_file(), kind
    assert {p.stem for p in GOLDEN.glob("*.txt")} == set(CASES), "a golden text without its case, or the reverse"


def test_component_partials_are_overrides_of_real_components():
    """templates/partials/<name>.j2 replaces a component's kind partial; a file there that names no
    component (other than shared macro files, _*.j2) would silently never be used."""
    components = load_matrix(ROOT / "matrix.yaml").components
    for path in (TEMPLATES / "partials").glob("*.j2"):
        assert path.name.startswith("_") or path.stem in components, f"{path.name} names no component"


def test_a_components_own_partial_overrides_its_kind(tmp_path):
    shutil.copytree(TEMPLATES, tmp_path / "templates")
    shutil.copyfile(GOLDEN / "Dockerfile.j2", tmp_path / "templates" / "Dockerfile.j2")
    (tmp_path / "templates" / "partials" / "smoke.j2").write_text(
        "{% macro runtime(c, ctx) %}\nCOPY own/{{ c.name }} /opt/own\n{% endmacro %}\n"
    )
    text = make_plan(MATRIX, tmp_path).targets["hip-program"].files["Dockerfile"].decode()
    assert "(hip-program, partials/smoke.j2)" in text and "COPY own/smoke /opt/own" in text
    assert "hipcc" not in text


def test_plan_fetch_items_and_unresolved(plan):
    targets = plan.targets
    assert targets["python-env-locked"].fetches == (WheelsFetch("locked-env", "3.14"),)
    assert targets["python-env-unlocked"].fetches == ()
    assert targets["cmake-wheel"].fetches == (
        GitSourceFetch("fork-wheel", "https://example.invalid/fork", "4aad810bc1d93c38a5316ec54c822cd12b1f1cd2"),
    )
    assert targets["python-env-held"].fetches == (targets["cmake-wheel"].fetches[0], WheelsFetch("held-env", "3.14"))
    assert targets["cmake-wheel-defaults"].fetches == ()
    assert targets["cmake-wheel-defaults"].unresolved == (
        "component plain-wheel: git ref 'v0.1.0' of https://example.invalid/plain is not resolved to a commit",
    )
    assert targets["python-env-unlocked"].unresolved == (
        "python unlocked-env: requirements are not locked with hashes",
    )
    assert targets["cmake-wheel"].labels["io.rocmforge.components"] == "fork-wheel=1.2.3"
    assert "io.rocmforge.components" not in targets["settings"].labels


def test_fetch_items_fetch_into_their_context_folders(monkeypatch, tmp_path):
    lock = Lock(python={"env": {"numpy": PythonFile(version="2.3.5", sha256=["a" * 64])}})
    calls = []

    def wheels_for(locked, python, work, ca):
        calls.append((locked, python, work, ca))
        return {"numpy-2.3.5.whl": b"wheel"}

    monkeypatch.setattr(fetch, "wheels_for", wheels_for)
    monkeypatch.setattr(fetch, "source_tree", lambda url, commit, work: {"setup.py": f"{url}@{commit}".encode()})
    ca = tmp_path / "ca.pem"
    assert inputs.fetch(WheelsFetch("env", "3.14"), lock, tmp_path, ca) == {"wheels/env/numpy-2.3.5.whl": b"wheel"}
    assert calls == [(lock.python["env"], "3.14", tmp_path, ca)]
    assert inputs.fetch(GitSourceFetch("src", "https://x.invalid/r", "c" * 40), lock, tmp_path, None) == {
        "sources/src/setup.py": f"https://x.invalid/r@{'c' * 40}".encode()
    }


def lock_run(lock: Lock) -> LockRun:
    return LockRun(
        client=None,
        matrix=MATRIX,
        names=MATRIX.order(),
        lock=lock,
        out=Outcome(lock),
        work=Path("/nonexistent"),
        ca_bundle=None,
        log=print,
    )


def test_lock_entries_check_the_lock_without_a_network(monkeypatch):
    monkeypatch.setattr(fetch, "ls_remote", lambda url, ref: (_ for _ in ()).throw(fetch.FetchError("offline")))
    lock = lockfile.load(GOLDEN / "kinds-matrix.lock")
    lock.python["locked-env"]["numpy"] = lock.python["locked-env"]["numpy"].model_copy(update={"version": "2.3.4"})
    run = lock_run(lock)
    for cname in ("locked-env", "unlocked-env", "fork-wheel", "plain-wheel", "config", "smoke"):
        for entry in MATRIX.components[cname].lock_entries(cname):
            entries.check(entry, run)
    assert run.out.problems == [
        "python locked-env: numpy matrix 2.3.5 vs lock 2.3.4",
        "python unlocked-env: numpy is not locked",
        "git fork-wheel: cannot check here: offline",
        "git plain-wheel: v0.1.0 is not resolved to a commit",
    ]


def test_git_lock_entry_keeps_the_old_entry_when_unreachable(monkeypatch):
    monkeypatch.setattr(fetch, "ls_remote", lambda url, ref: (_ for _ in ()).throw(fetch.FetchError("offline")))
    lock = lockfile.empty()
    run = lock_run(lock)
    (entry,) = MATRIX.components["plain-wheel"].lock_entries("plain-wheel")
    entries.resolve(entry, run)
    assert lock.git["plain-wheel"] == GitEntry(url="https://example.invalid/plain", ref="v0.1.0", commit=None)
    assert run.out.failed == ["git plain-wheel: offline; entry left as it was"]
    monkeypatch.setattr(fetch, "ls_remote", lambda url, ref: "d" * 40)
    entries.resolve(entry, run)
    assert lock.git["plain-wheel"].commit == "d" * 40


def matrix_error(tmp_path: Path, old: str, new: str) -> UserError:
    text = (GOLDEN / "kinds-matrix.yaml").read_text(encoding="utf-8")
    assert old in text
    (tmp_path / "m.yaml").write_text(text.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(UserError) as info:
        load_matrix(tmp_path / "m.yaml")
    return info.value


@pytest.mark.parametrize(
    "old,new,field,message",
    [
        ("    kind: settings\n", "    kind: settings\n    colour: red\n", "components.config.colour", "unknown field"),
        (
            "    kind: settings\n",
            "    kind: settings\n    program: x.cpp\n",
            "components.config.program",
            "unknown field for a settings component (program belongs to hip-program components)",
        ),
        (
            "    kind: hip-program\n",
            "    kind: hip-program\n    source: {url: u, ref: r}\n",
            "components.smoke.source",
            "unknown field for a hip-program component (source belongs to cmake-wheel components)",
        ),
        ("    kind: hip-program\n", "", "components.smoke.kind", "required field is missing"),
        (
            "    kind: hip-program\n    program: smoke.cpp\n",
            "    kind: hip-program\n",
            "components.smoke.program",
            "required field is missing",
        ),
        (
            "    builder: devel\n    components: [smoke]\n",
            "    components: [smoke]\n",
            "targets.hip-program.components.0",
            "component 'smoke' compiles HIP code: the target needs a 'builder' devel target",
        ),
        (
            "    builder_apt: [python3-venv, python3-pip]\n",
            "    builder_apt: [python3-venv, cmake]\n",
            "components.unlocked-env.builder_apt.1",
            "apt package 'cmake' has no pinned version in stack 'debian-sid'",
        ),
    ],
)
def test_kind_fields_are_checked(tmp_path, old, new, field, message):
    err = matrix_error(tmp_path, old, new)
    assert err.field == field and message in err.message, (err.field, err.message)
