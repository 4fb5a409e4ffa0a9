"""matrix.lock as a typed model (rocmforge/resolve/lockmodel.py, read and written by rocmforge/resolve/lockfile.py):
every lock dumps to the bytes the dict-based lock wrote (keys as they were read or written, nulls kept,
`held` left out while empty), and every field the old hand-written checks refused is refused with the
same message, line and field. The expectations below were produced by those checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmforge.resolve import lockfile
from rocmforge.resolve.lockmodel import BaseEntry, GitEntry, HeldEntry, Lock, PythonFile
from rocmforge.shared.errors import UserError
from tests.conftest import ROOT

GOLDEN = Path(__file__).with_name("golden")
H = "a" * 64
C = "0" * 40


def test_the_committed_lock_round_trips_byte_for_byte():
    path = ROOT / "matrix.lock"
    assert lockfile.dump(lockfile.load(path)) == path.read_text(encoding="utf-8")


def test_a_hand_written_lock_dumps_as_the_dict_lock_did():
    """kinds-matrix.lock is written by hand (flow style, its own key order); .dumped is what the
    dict-based lockfile.dump wrote for it."""
    dumped = lockfile.dump(lockfile.load(GOLDEN / "kinds-matrix.lock"))
    assert dumped == (GOLDEN / "kinds-matrix.lock.dumped").read_text(encoding="utf-8")


def test_a_dump_reads_back_to_the_same_dump(tmp_path):
    for path in (ROOT / "matrix.lock", GOLDEN / "kinds-matrix.lock"):
        (tmp_path / "matrix.lock").write_text(lockfile.dump(lockfile.load(path)), encoding="utf-8")
        again = lockfile.load(tmp_path / "matrix.lock")
        assert lockfile.dump(again) == (tmp_path / "matrix.lock").read_text(encoding="utf-8")


EXAMPLE = f"""{lockfile.HEADER}apt:
  hip-python: {{}}
  hip-runtime:
    libamdhip64-5: 5.7.1-1
bases:
  boot:
    image_id: sha256:{H}
    kind: bootstrap
    packages:
      bash: '5.2'
      tar: '1.35'
    recipe: {H}
  reg:
    apt_lists_found:
    - amdgpu.list
    - rocm.list
    apt_sources:
      drop:
      - amdgpu.list
    digest: null
    image: rocm/pytorch:tag
    kind: registry
debs:
  boot:
    bash=5.2: {H}
git:
  src:
    commit: null
    ref: main
    url: https://x.invalid/src
python:
  env:
    numpy:
      file: numpy.whl
      sha256:
      - {H}
      version: 2.3.5
  unresolved-env: null
schema: 2
"""


def test_written_entries_dump_with_the_keys_they_were_given():
    """As `build.py lock` writes them: a registry base without packages and with a null digest, a
    key set after the entry was made, an environment not resolved (null), no held section."""
    lock = lockfile.empty()
    reg = BaseEntry(kind="registry", image="rocm/pytorch:tag", digest=None, apt_sources={"drop": ["amdgpu.list"]})
    lock.bases["reg"] = reg
    reg.apt_lists_found = ["amdgpu.list", "rocm.list"]
    lock.bases["boot"] = BaseEntry(
        kind="bootstrap", recipe=H, image_id="sha256:" + H, packages={"tar": "1.35", "bash": "5.2"}
    )
    lock.apt["hip-runtime"] = {"libamdhip64-5": "5.7.1-1"}
    lock.apt["hip-python"] = {}
    lock.debs["boot"] = {"bash=5.2": H}
    lock.python["env"] = {"numpy": PythonFile(version="2.3.5", file="numpy.whl", sha256=[H])}
    lock.python["unresolved-env"] = None
    lock.git["src"] = GitEntry(url="https://x.invalid/src", ref="main", commit=None)
    assert lockfile.dump(lock) == EXAMPLE
    lock.held["env"] = HeldEntry(packages={"torch": "2.1"}, torch_version="2.1", torch_hip=None)
    held = "held:\n  env:\n    packages:\n      torch: '2.1'\n    torch_hip: null\n    torch_version: '2.1'\n"
    assert held in lockfile.dump(lock)


def test_the_example_reads_back_as_written(tmp_path):
    (tmp_path / "matrix.lock").write_text(EXAMPLE, encoding="utf-8")
    lock = lockfile.load(tmp_path / "matrix.lock")
    assert lockfile.dump(lock) == EXAMPLE
    reg, boot = lock.bases["reg"], lock.bases["boot"]
    assert (reg.kind, reg.digest, reg.packages, reg.apt_sources) == ("registry", None, None, {"drop": ["amdgpu.list"]})
    assert (boot.image_id, boot.apt_sources, boot.apt_lists_found) == ("sha256:" + H, None, [])
    assert lock.base("absent") == BaseEntry() and lock.base("absent").digest is None
    assert lock.python["env"]["numpy"].sha256 == [H] and lock.python["unresolved-env"] is None
    assert lock.git["src"].commit is None and lock.held == {}


def test_a_schema_1_lock_reads_without_deb_hashes_and_is_written_as_schema_2(tmp_path):
    old = EXAMPLE.replace(f"debs:\n  boot:\n    bash=5.2: {H}\n", "").replace("schema: 2\n", "schema: 1\n")
    (tmp_path / "matrix.lock").write_text(old, encoding="utf-8")
    lock = lockfile.load(tmp_path / "matrix.lock")
    assert lock.debs == {} and lock.apt["hip-runtime"] == {"libamdhip64-5": "5.7.1-1"}
    assert lockfile.dump(lock) == old.replace("git:\n", "debs: {}\ngit:\n").replace("schema: 1\n", "schema: 2\n")


def test_keys_the_model_does_not_name_are_kept(tmp_path):
    text = EXAMPLE.replace("    kind: registry\n", "    kind: registry\n    noted_by: hand\n")
    (tmp_path / "matrix.lock").write_text(text, encoding="utf-8")
    lock = lockfile.load(tmp_path / "matrix.lock")
    assert lock.bases["reg"].model_extra == {"noted_by": "hand"}
    assert lockfile.dump(lock) == text


def test_an_entry_without_keys_is_false_like_the_empty_mapping_it_is(tmp_path):
    text = EXAMPLE.replace("git:\n", "git:\n  empty: {}\n")
    (tmp_path / "matrix.lock").write_text(text, encoding="utf-8")
    lock = lockfile.load(tmp_path / "matrix.lock")
    assert not lock.git["empty"] and lock.git["src"] and not lock.base("absent")
    assert lockfile.dump(lock) == text


def test_no_lock_is_the_empty_lock(tmp_path):
    lock = lockfile.load(tmp_path / "matrix.lock")
    assert lock == Lock()
    assert lockfile.dump(lock) == lockfile.HEADER + "apt: {}\nbases: {}\ndebs: {}\ngit: {}\npython: {}\nschema: 2\n"


BASE = f"""apt:
  step:
    hipcc: 5.7.1-1
bases:
  boot:
    image_id: sha256:{H}
    kind: bootstrap
    packages:
      bash: '5.2'
    recipe: {H}
  reg:
    apt_sources:
      keep: true
    digest: null
    image: rocm/pytorch:tag
    kind: registry
git:
  g:
    commit: '{C}'
    ref: main
    url: https://x.invalid/g
held:
  env:
    packages:
      torch: '2.1'
    torch_hip: null
    torch_version: '2.1'
python:
  env:
    numpy:
      file: numpy.whl
      sha256:
      - {H}
      version: 2.3.5
schema: 1
"""

# (case, text replaced in BASE, its replacement, line, field, message): what the hand-written checks said.
REFUSALS = [
    (
        "base-not-a-mapping",
        "  reg:\n    apt_sources:\n      keep: true\n"
        "    digest: null\n    image: rocm/pytorch:tag\n    kind: registry\n",
        "  reg: [1]\n",
        11,
        "bases.reg",
        "must be a mapping",
    ),
    (
        "base-kind",
        "    kind: registry\n",
        "    kind: pulled\n",
        16,
        "bases.reg.kind",
        "must be 'bootstrap' or 'registry'",
    ),
    (
        "base-kind-null",
        "    kind: registry\n",
        "    kind: null\n",
        16,
        "bases.reg.kind",
        "must be 'bootstrap' or 'registry'",
    ),
    (
        "base-digest",
        "    digest: null\n",
        "    digest: sha256:abc\n",
        14,
        "bases.reg.digest",
        "must be sha256:<64 hex> or null",
    ),
    (
        "base-digest-number",
        "    digest: null\n",
        "    digest: 5\n",
        14,
        "bases.reg.digest",
        "must be sha256:<64 hex> or null",
    ),
    (
        "base-image-id",
        "    image_id: sha256:" + H + "\n",
        "    image_id: " + H + "\n",
        6,
        "bases.boot.image_id",
        "must be sha256:<64 hex> or null",
    ),
    (
        "base-recipe",
        "    recipe: " + H + "\n",
        "    recipe: sha256:" + H + "\n",
        10,
        "bases.boot.recipe",
        "must be 64 hex digits or null",
    ),
    (
        "base-packages-number",
        "      bash: '5.2'\n",
        "      bash: 5.2\n",
        8,
        "bases.boot.packages",
        "must map package names to version strings",
    ),
    (
        "base-packages-empty-version",
        "      bash: '5.2'\n",
        "      bash: ''\n",
        8,
        "bases.boot.packages",
        "must map package names to version strings",
    ),
    (
        "base-packages-null",
        "    packages:\n      bash: '5.2'\n",
        "    packages: null\n",
        8,
        "bases.boot.packages",
        "must map package names to version strings",
    ),
    (
        "base-apt-sources-list",
        "    apt_sources:\n      keep: true\n",
        "    apt_sources: [keep]\n",
        12,
        "bases.reg.apt_sources",
        "must be a mapping (keep, drop, replace) as the stack states it",
    ),
    (
        "base-apt-sources-null",
        "    apt_sources:\n      keep: true\n",
        "    apt_sources: null\n",
        12,
        "bases.reg.apt_sources",
        "must be a mapping (keep, drop, replace) as the stack states it",
    ),
    (
        "base-apt-lists-found",
        "    digest: null\n",
        "    digest: null\n    apt_lists_found: a.list\n",
        15,
        "bases.reg.apt_lists_found",
        "must be a list of file names",
    ),
    (
        "base-apt-lists-found-item",
        "    digest: null\n",
        "    digest: null\n    apt_lists_found: [a.list, 3]\n",
        15,
        "bases.reg.apt_lists_found",
        "must be a list of file names",
    ),
    (
        "base-first-problem-wins",
        "    kind: bootstrap\n",
        "    kind: other\n    digest: bad\n",
        7,
        "bases.boot.kind",
        "must be 'bootstrap' or 'registry'",
    ),
    (
        "apt-step-a-list",
        "  step:\n    hipcc: 5.7.1-1\n",
        "  step: [hipcc]\n",
        2,
        "apt.step",
        "must map package names to version strings",
    ),
    (
        "apt-version-number",
        "    hipcc: 5.7.1-1\n",
        "    hipcc: 5.7\n",
        3,
        "apt.step.hipcc",
        "5.7 is not a version string (quote versions that look like numbers)",
    ),
    (
        "apt-version-empty",
        "    hipcc: 5.7.1-1\n",
        "    hipcc: ''\n",
        3,
        "apt.step.hipcc",
        "'' is not a version string (quote versions that look like numbers)",
    ),
    (
        "apt-version-null",
        "    hipcc: 5.7.1-1\n",
        "    hipcc:\n",
        3,
        "apt.step.hipcc",
        "None is not a version string (quote versions that look like numbers)",
    ),
    (
        "apt-name-a-number",
        "    hipcc: 5.7.1-1\n",
        "    hipcc: 5.7.1-1\n    1234: '1.0'\n",
        4,
        "apt.step.1234",
        "'1.0' is not a version string (quote versions that look like numbers)",
    ),
    (
        "python-env-a-list",
        "  env:\n    numpy:\n",
        "  env: [numpy]\n  env-old:\n    numpy:\n",
        29,
        "python.env",
        "must map package names to their version, file and sha256 hashes",
    ),
    (
        "python-entry-a-string",
        "    numpy:\n      file: numpy.whl\n      sha256:\n      - " + H + "\n      version: 2.3.5\n",
        "    numpy: 2.3.5\n",
        30,
        "python.env.numpy",
        "needs 'version' and 'sha256' (a list of 64-hex hashes)",
    ),
    (
        "python-version-missing",
        "      version: 2.3.5\n",
        "",
        30,
        "python.env.numpy",
        "needs 'version' and 'sha256' (a list of 64-hex hashes)",
    ),
    (
        "python-version-number",
        "      version: 2.3.5\n",
        "      version: 2.3\n",
        30,
        "python.env.numpy",
        "needs 'version' and 'sha256' (a list of 64-hex hashes)",
    ),
    (
        "python-sha256-a-string",
        "      sha256:\n      - " + H + "\n",
        "      sha256: " + H + "\n",
        32,
        "python.env.numpy.sha256",
        "must be a list of 64-hex hashes",
    ),
    (
        "python-sha256-missing",
        "      sha256:\n      - " + H + "\n",
        "",
        30,
        "python.env.numpy.sha256",
        "must be a list of 64-hex hashes",
    ),
    (
        "python-sha256-cut",
        "      - " + H + "\n",
        "      - " + H + "\n      - aaaaaaaaaaaaaaaaaaaa\n",
        34,
        "python.env.numpy.sha256.1",
        "'aaaaaaaaaaaaaaaaaaaa' is not a 64-hex sha256 (cut short?)",
    ),
    (
        "python-sha256-number",
        "      - " + H + "\n",
        "      - 12345\n",
        33,
        "python.env.numpy.sha256.0",
        "12345 is not a 64-hex sha256 (cut short?)",
    ),
    (
        "python-file-number",
        "      file: numpy.whl\n",
        "      file: 7\n",
        31,
        "python.env.numpy.file",
        "must be a wheel file name",
    ),
    (
        "held-not-a-mapping",
        "  env:\n    packages:\n      torch: '2.1'\n    torch_hip: null\n    torch_version: '2.1'\n",
        "  env: 2.1\n",
        23,
        "held.env",
        "needs 'packages' (name: version) and 'torch_version'",
    ),
    (
        "held-packages-missing",
        "    packages:\n      torch: '2.1'\n",
        "",
        23,
        "held.env",
        "needs 'packages' (name: version) and 'torch_version'",
    ),
    (
        "held-packages-number",
        "      torch: '2.1'\n",
        "      torch: 2.1\n",
        23,
        "held.env",
        "needs 'packages' (name: version) and 'torch_version'",
    ),
    (
        "held-torch-version-number",
        "    torch_version: '2.1'\n",
        "    torch_version: 2.1\n",
        23,
        "held.env",
        "needs 'packages' (name: version) and 'torch_version'",
    ),
    (
        "held-torch-hip-number",
        "    torch_hip: null\n",
        "    torch_hip: 6.4\n",
        26,
        "held.env.torch_hip",
        "must be a version string or null",
    ),
    (
        "git-entry-a-string",
        f"  g:\n    commit: '{C}'\n    ref: main\n    url: https://x.invalid/g\n",
        "  g: main\n",
        18,
        "git.g",
        "must be a mapping with 'url', 'ref' and 'commit'",
    ),
    (
        "git-commit-short",
        f"    commit: '{C}'\n",
        "    commit: abc123\n",
        19,
        "git.g.commit",
        "must be a 40-character commit or null",
    ),
    (
        "git-commit-number",
        f"    commit: '{C}'\n",
        "    commit: 1234\n",
        19,
        "git.g.commit",
        "must be a 40-character commit or null",
    ),
    ("git-url-number", "    url: https://x.invalid/g\n", "    url: 5\n", 21, "git.g.url", "must be a string"),
    ("git-ref-null", "    ref: main\n", "    ref: null\n", 20, "git.g.ref", "must be a string"),
    (
        "section-a-list",
        f"git:\n  g:\n    commit: '{C}'\n    ref: main\n    url: https://x.invalid/g\n",
        "git: [g]\n",
        17,
        "git",
        "must be a mapping of names",
    ),
    ("section-number-key", "git:\n", "git:\n  5: null\n", 17, "git", "must be a mapping of names"),
    (
        "deb-hash-short",
        "git:\n",
        "debs:\n  boot:\n    bash=5.2: abc\ngit:\n",
        19,
        "debs.boot.bash=5.2",
        "is not a 64-hex sha256 (cut short?)",
    ),
]


def test_the_base_lock_is_valid(tmp_path):
    (tmp_path / "matrix.lock").write_text(BASE, encoding="utf-8")
    dumped = BASE.replace("git:\n", "debs: {}\ngit:\n").replace("schema: 1\n", "schema: 2\n")
    assert lockfile.dump(lockfile.load(tmp_path / "matrix.lock")) == lockfile.HEADER + dumped


@pytest.mark.parametrize("case,old,new,line,field,message", REFUSALS, ids=[c[0] for c in REFUSALS])
def test_each_refusal_of_the_old_checks_is_kept(tmp_path, case, old, new, line, field, message):
    assert BASE.count(old) == 1
    path = tmp_path / "matrix.lock"
    path.write_text(BASE.replace(old, new), encoding="utf-8")
    with pytest.raises(UserError) as info:
        lockfile.load(path)
    got = info.value
    assert (got.file, got.line, got.field, got.message) == (str(path), line, field, message)


@pytest.mark.parametrize(
    "old,new,line,field,message",
    [
        (
            "    image: rocm/pytorch:tag\n",
            "    image: 5\n",
            15,
            "bases.reg.image",
            "must be an image reference (a string)",
        ),
        (
            "    digest: null\n",
            "    digest: null\n    index_digest: sha256:abc\n",
            15,
            "bases.reg.index_digest",
            "must be sha256:<64 hex> or null",
        ),
    ],
    ids=["image", "index-digest"],
)
def test_the_keys_only_lock_wrote_unchecked_are_typed_too(tmp_path, old, new, line, field, message):
    """image and index_digest, which the hand-written checks let through whatever their type."""
    path = tmp_path / "matrix.lock"
    path.write_text(BASE.replace(old, new), encoding="utf-8")
    with pytest.raises(UserError) as info:
        lockfile.load(path)
    assert (info.value.line, info.value.field, info.value.message) == (line, field, message)
