"""Python distributions wheel by wheel (verify/outside/wheels.py, piprules.py): what a locked wheel
installs is read from the wheel's zip, never from a RECORD, and what pip writes beside it is
regenerated; an edited file with its RECORD row rewritten to match fails on both."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile

import pytest

from rocmforge.verify.outside import account, debs, wheels
from rocmforge.verify.outside.expected import Expected, Want
from rocmforge.verify.outside.imagefs import Have

SITE = f"{wheels.VENV}/lib/python3.13/site-packages"
SHA = "c" * 64
# distlib's launcher template, as pip 25.1's vendored distlib has it
CLASSIC = (
    "# -*- coding: utf-8 -*-\nimport re\nimport sys\nfrom %(module)s import %(import_name)s\n"
    "if __name__ == '__main__':\n    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])\n"
    "    sys.exit(%(func)s())\n"
)


def _zip(files: dict[str, tuple[bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, (data, mode) in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o100000 | mode) << 16
            z.writestr(info, data)
    return buf.getvalue()


RAW = _zip(
    {
        "demo/__init__.py": (b"VERSION = '1.0'\n", 0o644),
        "demo/_native.so": (b"\x7fELF", 0o755),
        "demo-1.0.dist-info/METADATA": (b"Name: demo\nVersion: 1.0\n", 0o644),
        "demo-1.0.dist-info/entry_points.txt": (b"[console_scripts]\ndemo-run = demo.cli:main.run\n", 0o644),
        "demo-1.0.dist-info/RECORD": (b"whatever the wheel says\n", 0o644),
        "demo-1.0.data/scripts/demo-tool": (b"#!python\nprint('x')\n", 0o644),
    }
)


# demo-run as a pip rocmforge cannot read wrote it, and its builder stage recorded it
STAGE_SCRIPT = b"#!/opt/rocmforge/venv/bin/python\nfrom demo.cli import main\nmain.run()\n"


def _image(template: str | None = CLASSIC) -> tuple[dict[str, Have], dict[str, Have], Expected, dict[str, bytes]]:
    """A venv holding the demo wheel exactly as pip installs it, the pip that installs it of launcher
    template (None: one rocmforge cannot read): (files, base, exp, small files' bytes)."""
    wheel = wheels._read(RAW, "demo", "1.0", "demo-1.0-py3-none-any.whl", SHA)
    made = wheels.installed([wheel], "3.13", template)
    exp = Expected({k: Want(t, m, 0, 0, d, s) for k, (t, m, d, s) in made.paths.items()}, {}, {}, {}, (), False)
    exp.records = made.records
    rows = dict(made.records[f"{SITE}/demo-1.0.dist-info/RECORD"][2])
    if template is None:
        sha = hashlib.sha256(STAGE_SCRIPT).hexdigest()
        exp.paths[f"{wheels.VENV}/bin/demo-run"] = Want("f", 0o755, 0, 0, sha, "builder stage output of demo")
        rows["../../../bin/demo-run"] = f"{wheels.record_hash(sha)},{len(STAGE_SCRIPT)}"
    files = {
        rel: Have(w.type, w.mode, 0, 0, w.data) for rel, w in exp.paths.items() if rel.rpartition("/")[2] != "RECORD"
    }
    if template is None:
        files[f"{wheels.VENV}/bin/demo-run"] = Have("f", 0o755, 0, 0, sha, len(STAGE_SCRIPT))
    record = "".join(f"{p},{v}\n" for p, v in rows.items())
    record += "demo/__pycache__/__init__.cpython-313.pyc,,\ndemo-1.0.dist-info/RECORD,,\n"
    small = {f"{SITE}/demo-1.0.dist-info/RECORD": record.encode()}
    files[f"{SITE}/demo-1.0.dist-info/RECORD"] = Have("f", 0o644, 0, 0, hashlib.sha256(record.encode()).hexdigest())
    base = {}
    parts = SITE.split("/")
    for rel in [*("/".join(parts[:n]) for n in range(1, len(parts) + 1)), f"{wheels.VENV}/bin"]:
        base[rel] = files[rel] = Have("d", 0o755, 0, 0, "")
    return files, base, exp, small


def _findings(files, base, exp, small) -> list[str]:
    for rel, data in small.items():
        files[rel] = Have("f", 0o644, 0, 0, hashlib.sha256(data).hexdigest(), len(data))
    return account.account(files, base, exp, f"/{wheels.VENV}/bin:/usr/bin", contents=small.get).findings


def test_a_wheel_installed_as_pip_installs_it_is_accounted_for():
    files, base, exp, small = _image()
    assert exp.paths[f"{SITE}/demo/_native.so"].mode == 0o755 and exp.paths[f"{SITE}/demo/__init__.py"].mode == 0o644
    tool = exp.paths[f"{wheels.VENV}/bin/demo-tool"]  # a .data script: pip's shebang fix, executable
    assert tool.mode == 0o755 and tool.data == hashlib.sha256(f"#!{wheels.PYTHON}\nprint('x')\n".encode()).hexdigest()
    assert b"from demo.cli import main\n" in wheels.launcher("demo.cli:main.run", CLASSIC)
    assert b"sys.exit(main.run())" in wheels.launcher("demo.cli:main.run", CLASSIC)
    assert f"{wheels.VENV}/bin/demo-run" in exp.paths and f"{SITE}/demo-1.0.dist-info/RECORD" in exp.records
    assert _findings(files, base, exp, small) == []


def test_an_edited_file_with_its_record_row_rewritten_fails_on_both():
    files, base, exp, small = _image()
    edited = b"VERSION = '1.0'\nimport os\n"
    rel = f"{SITE}/demo/__init__.py"
    files[rel] = Have("f", 0o644, 0, 0, hashlib.sha256(edited).hexdigest(), len(edited))
    record = small[f"{SITE}/demo-1.0.dist-info/RECORD"].decode().splitlines()
    row = f"demo/__init__.py,{wheels.record_hash(files[rel].data)},{len(edited)}"
    small[f"{SITE}/demo-1.0.dist-info/RECORD"] = "\n".join(
        row if ln.startswith("demo/__init__.py,") else ln for ln in record
    ).encode()
    found = _findings(files, base, exp, small)
    assert any(f.startswith(f"/{rel}: content differs from wheel demo 1.0 ") for f in found), found
    assert any(
        f.startswith(f"/{SITE}/demo-1.0.dist-info/RECORD: records demo/__init__.py as sha256=") for f in found
    ), found


def test_every_rewritten_record_row_is_named():
    files, base, exp, small = _image()
    rows = {}
    for name, edited in (("demo/__init__.py", b"import os\n"), ("demo/_native.so", b"\x7fELF!")):
        rel = f"{SITE}/{name}"
        files[rel] = Have("f", exp.paths[rel].mode, 0, 0, hashlib.sha256(edited).hexdigest(), len(edited))
        rows[name] = f"{name},{wheels.record_hash(files[rel].data)},{len(edited)}"
    record = small[f"{SITE}/demo-1.0.dist-info/RECORD"].decode().splitlines()
    small[f"{SITE}/demo-1.0.dist-info/RECORD"] = "\n".join(rows.get(ln.split(",")[0], ln) for ln in record).encode()
    found = [f for f in _findings(files, base, exp, small) if f.startswith(f"/{SITE}/demo-1.0.dist-info/RECORD: ")]
    assert len(found) == 1 and found[0].count("; records ") == 1, found
    assert "records demo/__init__.py as sha256=" in found[0] and "records demo/_native.so as sha256=" in found[0]


@pytest.mark.parametrize(
    "rel, have, said",
    [
        (f"{SITE}/demo/extra.py", Have("f", 0o644, 0, 0, "e" * 64), "no package, wheel or build step accounts for it"),
        (f"{SITE}/demo-1.0.dist-info/INSTALLER", Have("f", 0o644, 0, 0, "e" * 64), "is not pip's INSTALLER ('pip')"),
        (
            f"{SITE}/demo-1.0.dist-info/REQUESTED",
            Have("f", 0o644, 0, 0, "e" * 64, 3),
            "is not the empty file pip writes",
        ),
        (
            f"{wheels.VENV}/bin/demo-run",
            Have("f", 0o755, 0, 0, "e" * 64),
            "differs from pip (installing wheel demo 1.0)",
        ),
        (
            f"{wheels.VENV}/bin/python9",
            Have("f", 0o755, 0, 0, "e" * 64),
            "a program on PATH (the venv's bin) no locked",
        ),
    ],
)
def test_what_neither_the_wheel_nor_pip_makes_is_named(rel, have, said):
    files, base, exp, small = _image()
    files[rel] = have
    found = _findings(files, base, exp, small)
    assert any(f.startswith(f"/{rel}: {said}") for f in found), found


@pytest.mark.parametrize(
    "url, said",
    [
        ("file:///tmp/wheels/demo-1.0-py3-none-any.whl", None),
        ("file:///tmp/wheels/demo-1.0-evil.whl", "names file:///tmp/wheels/demo-1.0-evil.whl, not demo-1.0-py3"),
    ],
)
def test_direct_url_json_names_the_locked_wheel(url, said):
    files, base, exp, small = _image()
    rel = f"{SITE}/demo-1.0.dist-info/direct_url.json"
    small[rel] = json.dumps({"url": url, "archive_info": {"hashes": {"sha256": SHA}}}).encode()
    record = small[f"{SITE}/demo-1.0.dist-info/RECORD"].decode()
    written = wheels.record_hash(hashlib.sha256(small[rel]).hexdigest())
    row = f"demo-1.0.dist-info/direct_url.json,{written},{len(small[rel])}"
    small[f"{SITE}/demo-1.0.dist-info/RECORD"] = f"{record}{row}\n".encode()
    found = [f for f in _findings(files, base, exp, small) if "direct_url" in f]
    assert found == ([] if said is None else [f"/{rel}: {said}-none-any.whl at its locked sha256"]), found


def _deb(files: dict[str, bytes]) -> bytes:
    """A .deb (ar) whose data.tar holds files."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    header = f"{'data.tar/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n".encode()
    return b"!<arch>\n" + header + data + (b"\n" if len(data) % 2 else b"")


# pip 26's own launcher template, as pip/_internal/operations/install/wheel.py sets it
NEW = (
    "import sys\nfrom %(module)s import %(import_name)s\nif __name__ == '__main__':\n"
    "    sys.argv[0] = sys.argv[0].removesuffix('.exe')\n    sys.exit(%(func)s())\n"
)
PIP_MAKER = b'''
class PipScriptMaker(ScriptMaker):
    script_template = textwrap.dedent("""\\
        import sys
        from %(module)s import %(import_name)s
        if __name__ == '__main__':
            sys.argv[0] = sys.argv[0].removesuffix('.exe')
            sys.exit(%(func)s())
""")
'''


def test_the_launcher_template_is_read_from_the_installing_pip_s_own_source():
    distlib = b"SCRIPT_TEMPLATE = r'''" + CLASSIC.encode() + b"'''\n"
    with zipfile.ZipFile(io.BytesIO(_zip({"pip/_vendor/distlib/scripts.py": (distlib, 0o644)}))) as z:
        assert wheels.script_template(z) == CLASSIC  # pip 25: its vendored distlib's
    both = {
        "pip/_vendor/distlib/scripts.py": (distlib, 0o644),
        "pip/_internal/operations/install/wheel.py": (PIP_MAKER, 0o644),
    }
    with zipfile.ZipFile(io.BytesIO(_zip(both))) as z:
        assert wheels.script_template(z) == NEW  # pip 26: PipScriptMaker's own
    with zipfile.ZipFile(io.BytesIO(RAW)) as z:
        assert wheels.script_template(z) is None


def test_without_the_installing_pip_s_template_scripts_are_left_to_the_builder_stage_record():
    wheel = wheels._read(RAW, "demo", "1.0", "demo-1.0-py3-none-any.whl", SHA)
    made = wheels.installed([wheel], "3.13")
    assert f"{wheels.VENV}/bin/demo-run" not in made.paths
    assert made.records[f"{SITE}/demo-1.0.dist-info/RECORD"][2]["../../../bin/demo-run"] == ""
    files, base, exp, small = _image(None)
    assert _findings(files, base, exp, small) == []
    # RECORD's row for the script must still name the image's own file
    record = small[f"{SITE}/demo-1.0.dist-info/RECORD"].decode()
    wrong = f"../../../bin/demo-run,{wheels.record_hash('e' * 64)},9"
    small[f"{SITE}/demo-1.0.dist-info/RECORD"] = "\n".join(
        wrong if ln.startswith("../../../bin/demo-run,") else ln for ln in record.splitlines()
    ).encode()
    found = _findings(files, base, exp, small)
    said = f"/{SITE}/demo-1.0.dist-info/RECORD: records ../../../bin/demo-run as {wrong.split(',', 1)[1]}, which is not"
    assert any(f.startswith(said) for f in found), found


def test_the_installing_pip_s_template_writes_every_wheel_s_scripts():
    wheel = wheels._read(RAW, "demo", "1.0", "demo-1.0-py3-none-any.whl", SHA)
    for template in (CLASSIC, NEW):
        made = wheels.installed([wheel], "3.13", template)
        sha = hashlib.sha256(wheels.launcher("demo.cli:main.run", template)).hexdigest()
        assert made.paths[f"{wheels.VENV}/bin/demo-run"][2] == sha
    files, base, exp, small = _image(NEW)  # scripts written by pip 26, judged as pip 25 would write them
    classic = wheels.launcher("demo.cli:main.run", CLASSIC)
    files[f"{wheels.VENV}/bin/demo-run"] = Have("f", 0o755, 0, 0, hashlib.sha256(classic).hexdigest(), len(classic))
    found = _findings(files, base, exp, small)
    said = f"/{wheels.VENV}/bin/demo-run: differs from pip (installing wheel demo 1.0)"
    assert any(f.startswith(said) for f in found), found


def test_the_venv_s_own_pip_is_the_wheel_its_debian_package_ships(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    pip = _zip(
        {
            "pip/__init__.py": (b"", 0o644),
            "pip/_internal/operations/install/wheel.py": (PIP_MAKER, 0o644),
            "pip-25.1.dist-info/entry_points.txt": (
                b"[console_scripts]\npip = pip._internal.cli.main:main\n"
                b"pip3 = pip._internal.cli.main:main\n"
                b"pip3.11 = pip._internal.cli.main:main\n",
                0o644,
            ),
        }
    )
    name = "usr/share/python-wheels/pip-25.1-py3-none-any.whl"
    listed = {name: debs.DebFile("f", 0o644, 0, 0, len(pip), hashlib.sha256(pip).hexdigest(), "")}
    deb = debs.DebContents("python3-pip-whl", "25.1+dfsg-1", "d" * 64, listed, {})
    found = wheels.venv_pip(deb, lambda: _deb({name: pip}))
    assert found is not None and (found.name, found.version, found.sha256) == ("pip", "25.1", listed[name].sha256)
    assert found.template == NEW
    made = wheels.installed([found], "3.13", found.template)
    # as pip names its own scripts, for this python (the wheel's pip3.11 dropped)
    assert sorted(p.rpartition("/")[2] for p in made.paths if p.startswith(f"{wheels.VENV}/bin/")) == [
        "pip",
        "pip3",
        "pip3.13",
    ]
    script = made.paths[f"{wheels.VENV}/bin/pip3.13"]
    launched = wheels.launcher("pip._internal.cli.main:main", NEW, f"{wheels.PYTHON}3")
    assert launched.startswith(
        b"#!/opt/rocmforge/venv/bin/python3\nimport sys\nfrom pip._internal.cli.main import main\n"
    )
    assert script[2] == hashlib.sha256(launched).hexdigest()
    assert "in package python3-pip-whl 25.1+dfsg-1, installed by ensurepip" in script[3]
    assert wheels.venv_pip(deb, lambda: b"") == found  # the second time from the cache
    assert wheels.venv_pip(debs.DebContents("x", "1", "e" * 64, {}, {}), lambda: b"") is None
