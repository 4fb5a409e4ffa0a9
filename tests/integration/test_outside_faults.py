"""An attacker's copy of a real image, judged from outside: every tampering class that once passed
every suite (issue 51), each a row of TAMPERING, fails the contents suite with a finding that names
the path and what it does.

The rows are data: a RUN line that tampers with a copy of the genuine image of its target
(hip-runtime, or hip-python for a venv's wheels; found by its content tag in this checkout, built
here when the engine lacks it) and the findings it must produce. A target's rows edit different
files, so one copy of its image holds all of them and one `build.py test` run judges it (a finding
names one path: another row's edits cannot stand in for it); each row is its own test id, reading
that run's report. The outside check's every finding is in its figures. Each tampered copy gets a
unique tag and is removed."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

import pytest

from rocmforge.render.plan import load_plan
from tests.conftest import ROOT, build_image, copy_project, run_cli

pytestmark = pytest.mark.docker
LIB = "/usr/lib/x86_64-linux-gnu"
SITE = "/usr/local/lib/python3.13/dist-packages"  # debian13-rocm5.7: Python 3.13
VENV_SITE = "/opt/rocmforge/venv/lib/python3.13/site-packages"  # hip-python's numpy-env
PIP = re.escape("25.1.1")  # the pip of debian13-rocm5.7's python3-pip-whl (matrix.lock): the venv's own
# A file's RECORD hash (urlsafe base64 of its sha256, unpadded), as a shell word: $(record_hash FILE)
RECORD_HASH = (
    "python3 -c \"import base64,hashlib,sys; d=open(sys.argv[1],'rb').read();"
    " print(base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode())\""
)


@dataclass(frozen=True)
class Tampering:
    name: str
    run: str  # shell, run as root in a copy of the genuine image
    findings: tuple[str, ...]  # regexes, each of which some outside finding must match
    target: str = "hip-runtime"  # whose genuine image is copied


def _linked(a: str, b: str) -> str:
    """The finding of a hard link between a and b, whichever name the layer's tar wrote first."""
    a, b = re.escape(a), re.escape(b)
    return rf"^/({a}: a hard link of /{b}|{b}: a hard link of /{a}) \(one file, two names\), which no package links$"


TAMPERING = [
    # -- files no package owns ----------------------------------------------------------------
    Tampering(
        "ld-so-preload",
        f"echo {LIB}/libz.so.1 > /etc/ld.so.preload",
        (r"^/etc/ld\.so\.preload: preloaded into every process$",),
    ),
    Tampering(
        "loader-folder-with-an-edited-libnuma",
        f"mkdir /opt/shadow && cp {LIB}/libnuma.so.1.0.0 /opt/shadow/libnuma.so.1"
        " && printf x >> /opt/shadow/libnuma.so.1 && echo /opt/shadow > /etc/ld.so.conf.d/000-shadow.conf && ldconfig",
        (
            r"^/etc/ld\.so\.conf\.d/000-shadow\.conf: adds folders to the dynamic loader's search path$",
            rf"^/opt/shadow/libnuma\.so\.1: a library named like the packaged {re.escape(LIB)}/libnuma\.so\.1$",
        ),
    ),
    Tampering(
        "pth-file",
        f"echo 'import os' > {SITE}/zz-startup.pth",
        (rf"^{re.escape(SITE)}/zz-startup\.pth: a \.pth file: its import lines run at every Python start$",),
    ),
    Tampering(
        "usercustomize",
        f"echo 'import os' > {SITE}/usercustomize.py",
        (rf"^{re.escape(SITE)}/usercustomize\.py: imported at every Python start$",),
    ),
    Tampering(
        "sitecustomize-re-pointed",
        "echo 'import os' > /etc/python3.13/startup.py && ln -sfn /etc/python3.13/startup.py "
        "/usr/lib/python3.13/sitecustomize.py",
        (
            r"^/usr/lib/python3\.13/sitecustomize\.py: symlink points to '/etc/python3\.13/startup\.py', "
            r"package libpython3\.13-minimal \S+ points it to '/etc/python3\.13/sitecustomize\.py'$",
        ),
    ),
    Tampering(
        "extra-distribution-with-a-valid-record",
        f"mkdir {SITE}/extra-1.0.dist-info && echo 'import os' > {SITE}/extra.py"
        f" && printf 'Metadata-Version: 2.1\\nName: extra\\nVersion: 1.0\\n' > {SITE}/extra-1.0.dist-info/METADATA"
        f" && (cd {SITE} && for f in extra.py extra-1.0.dist-info/METADATA; do"
        f" h=$({RECORD_HASH} $f);"
        " echo \"$f,sha256=$h,$(stat -c %s $f)\"; done; echo 'extra-1.0.dist-info/RECORD,,')"
        f" > {SITE}/extra-1.0.dist-info/RECORD && rm -rf {SITE}/__pycache__",
        (rf"^{re.escape(SITE)}/extra-1\.0\.dist-info: an extra Python distribution$",),
    ),
    Tampering(
        "wrappers-ahead-on-path",
        "for p in python3 rocminfo; do printf '#!/bin/sh\\nexec /usr/bin/'$p' \"$@\"\\n' > /usr/local/bin/$p"
        " && chmod 755 /usr/local/bin/$p; done",
        (
            r"^/usr/local/bin/python3: shadows the packaged /usr/bin/python3 on PATH$",
            r"^/usr/local/bin/rocminfo: shadows the packaged /usr/bin/rocminfo on PATH$",
        ),
    ),
    # -- metadata -----------------------------------------------------------------------------
    Tampering(
        "setuid-python",
        "chmod u+s /usr/bin/python3.13",
        (r"^/usr/bin/python3\.13: mode 4755 \(setuid\), package python3\.13-minimal \S+ has 0755$",),
    ),
    Tampering(
        "soname-link-re-pointed",
        f"cp {LIB}/libdrm.so.2.124.0 {LIB}/libdrm.so.2.124.0.orig && printf x >> {LIB}/libdrm.so.2.124.0.orig"
        f" && ln -sfn libdrm.so.2.124.0.orig {LIB}/libdrm.so.2",
        (
            rf"^{re.escape(LIB)}/libdrm\.so\.2: symlink points to 'libdrm\.so\.2\.124\.0\.orig', "
            r"package libdrm2 \S+ points it to 'libdrm\.so\.2\.124\.0'$",
            rf"^{re.escape(LIB)}/libdrm\.so\.2\.124\.0\.orig: ",
        ),
    ),
    # -- the image's own records, rewritten to match --------------------------------------------
    Tampering(
        "library-edited-md5sums-rewritten",
        f"printf x >> {LIB}/libamdhip64.so.5.7.31921 && sum=$(md5sum {LIB}/libamdhip64.so.5.7.31921 | cut -d' ' -f1)"
        ' && sed -i "s|^[0-9a-f]*  \\(usr/lib/x86_64-linux-gnu/libamdhip64.so.5.7.31921\\)$|$sum  \\1|"'
        " /var/lib/dpkg/info/libamdhip64-5:amd64.md5sums",
        (
            rf"^{re.escape(LIB)}/libamdhip64\.so\.5\.7\.31921: content differs from package libamdhip64-5 ",
            r"^/var/lib/dpkg/info/libamdhip64-5:amd64\.md5sums: differs from libamdhip64-5's \.deb control md5sums$",
        ),
    ),
    Tampering(
        "conffile-edited-status-rewritten",
        "echo 'evil 9999/tcp' >> /etc/services && old=$(awk '$1==\"/etc/services\"{print $2}' /var/lib/dpkg/status)"
        " && new=$(md5sum /etc/services | cut -d' ' -f1) && sed -i \"s|/etc/services $old|/etc/services $new|\""
        " /var/lib/dpkg/status",
        (
            r"^/etc/services: content differs from package netbase ",
            r"^/var/lib/dpkg/status: netbase's conffile /etc/services: md5 [0-9a-f]{32} is not the \.deb's$",
        ),
    ),
    Tampering(
        "deleted-and-excused-by-path-exclude",
        "rm /usr/share/doc/rocminfo/copyright"
        " && echo 'path-exclude=/usr/share/doc/rocminfo/copyright' > /etc/dpkg/dpkg.cfg.d/excused",
        (
            r"^/usr/share/doc/rocminfo/copyright: missing; package rocminfo \S+ ships it$",
            r"^/etc/dpkg/dpkg\.cfg\.d/excused: changes what dpkg unpacks or excuses$",
        ),
    ),
    # -- hard links ---------------------------------------------------------------------------
    Tampering(
        "hard-link-to-a-setuid-program",
        "ln /usr/bin/su /tmp/.su",
        (_linked("tmp/.su", "usr/bin/su"),),
    ),
    Tampering(
        "hard-link-naming-python-on-path",
        "ln /usr/bin/python3.13 /usr/local/bin/python",
        (_linked("usr/local/bin/python", "usr/bin/python3.13"), r"^/usr/local/bin/python: a program on PATH$"),
    ),
    # -- a wheel's file, its RECORD rewritten to match ------------------------------------------
    Tampering(
        "wheel-file-edited-record-rewritten",
        f"cd {VENV_SITE} && echo 'import os' >> numpy/version.py"
        f' && row="numpy/version.py,sha256=$({RECORD_HASH} numpy/version.py),$(stat -c %s numpy/version.py)"'
        ' && sed -i "s|^numpy/version\\.py,.*|$row|" numpy-2.3.5.dist-info/RECORD',
        (
            rf"^{re.escape(VENV_SITE)}/numpy/version\.py: content differs from wheel numpy 2\.3\.5 ",
            rf"^{re.escape(VENV_SITE)}/numpy-2\.3\.5\.dist-info/RECORD: records numpy/version\.py as sha256=\S+, "
            r"wheel numpy 2\.3\.5 has sha256=",
        ),
        target="hip-python",
    ),
    # -- the venv's own pip, read from the wheel its Debian package ships ------------------------
    Tampering(
        "venv-pip-file-edited-record-rewritten",
        f"cd {VENV_SITE} && echo 'import os' >> pip/__init__.py"
        f' && row="pip/__init__.py,sha256=$({RECORD_HASH} pip/__init__.py),$(stat -c %s pip/__init__.py)"'
        ' && sed -i "s|^pip/__init__\\.py,.*|$row|" pip-*.dist-info/RECORD',
        (
            rf"^{re.escape(VENV_SITE)}/pip/__init__\.py: content differs from wheel pip {PIP} \(in package "
            rf"python3-pip-whl {PIP}\S*, installed by ensurepip\) ",
            # (one finding per RECORD: the next row's edit to it comes first, "; " between them)
            rf"^{re.escape(VENV_SITE)}/pip-{PIP}\.dist-info/RECORD: (.*; )?records pip/__init__\.py as sha256=\S+, "
            rf"wheel pip {PIP} \(in package python3-pip-whl \S+, installed by ensurepip\) has sha256=",
        ),
        target="hip-python",
    ),
    Tampering(
        "venv-pip-script-edited-record-rewritten",
        "cd /opt/rocmforge/venv/bin && echo 'import os' >> pip3"
        f' && row="../../../bin/pip3,sha256=$({RECORD_HASH} pip3),$(stat -c %s pip3)"'
        f' && sed -i "s|^\\.\\./\\.\\./\\.\\./bin/pip3,.*|$row|" {VENV_SITE}/pip-*.dist-info/RECORD',
        (
            rf"^/opt/rocmforge/venv/bin/pip3: differs from pip \(installing wheel pip {PIP} \(in package "
            r"python3-pip-whl \S+, installed by ensurepip\)\) "
            r"\(its entry point pip3 = pip\._internal\.cli\.main:main\)$",
            rf"^{re.escape(VENV_SITE)}/pip-{PIP}\.dist-info/RECORD: records \.\./\.\./\.\./bin/pip3 as sha256=\S+, "
            rf"wheel pip {PIP} \(in package python3-pip-whl \S+, installed by ensurepip\) has sha256=",
        ),
        target="hip-python",
    ),
    # -- the judge --------------------------------------------------------------------------------
    Tampering(
        "probe-edited",
        "echo '# edited' >> /opt/rocmforge/probes/load.py",
        (r"^/opt/rocmforge/probes/load\.py: content differs from build context probes/load\.py ",),
    ),
]


def _judge(docker_client, target: str) -> tuple[int, dict, dict]:
    """The report of `build.py test --json` on one copy of target's genuine image holding every one
    of its rows' tampering, and the outside check's result in it."""
    proc = run_cli("build", "--target", target)
    assert proc.returncode == 0, f"build of {target} failed:\n{proc.stderr[-3000:]}"
    genuine = load_plan(ROOT / "matrix.yaml").targets[target].content_tag
    tag = f"rocmforge-test/tampered-{target}:{uuid.uuid4().hex[:12]}"
    runs = "".join(f"RUN {t.run}\n" for t in TAMPERING if t.target == target)
    build_image(docker_client, f'FROM {genuine}\nSHELL ["/bin/bash", "-o", "pipefail", "-c"]\n{runs}', tag=tag)
    try:
        proc = run_cli("test", "--image", tag, "--target", target, "--json", "--suite", "contents")
    finally:
        docker_client.images.remove(tag, force=True)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    outside = next(t for t in report["tests"] if t["test"] == "test_every_file_accounted_for_from_outside")
    # What the note's fault table is read from: every finding of the tampered copy.
    print(f"\nOUTSIDE FINDINGS ({target})\n  " + "\n  ".join((outside.get("figures") or {}).get("findings") or []))
    return proc.returncode, report, outside


@pytest.fixture(scope="module")
def judged(docker_client):
    """Each target's judged copy, made when a row of it first asks."""
    made: dict[str, tuple[int, dict, dict]] = {}

    def of(target: str) -> tuple[int, dict, dict]:
        if target not in made:
            made[target] = _judge(docker_client, target)
        return made[target]

    return of


@pytest.mark.parametrize("row", TAMPERING, ids=[t.name for t in TAMPERING])
def test_tampering_fails_the_outside_check_naming_the_path(judged, row):
    rc, report, outside = judged(row.target)
    assert rc == 1 and not report["ok"], json.dumps(report["suites"], indent=1)[:3000]
    assert report["suites"]["contents"]["status"] == "failed"
    assert outside["outcome"] == "failed", outside
    findings = (outside.get("figures") or {}).get("findings") or []
    for wanted in row.findings:
        assert any(re.search(wanted, f) for f in findings), f"no finding matches {wanted!r}:\n" + "\n".join(findings)


def test_a_deb_whose_signed_index_hash_is_not_the_locks_fails_the_check(docker_client, tmp_path):
    """The lock's .deb hashes are a source too: a lock (or an archive) that disagrees with the signed
    index about a package the image installs stops the outside check, naming the package."""
    matrix = copy_project(tmp_path)
    lock = tmp_path / "matrix.lock"
    line = next(ln for ln in lock.read_text().splitlines() if ln.strip().startswith("libamdhip64-5="))
    lock.write_text(lock.read_text().replace(line, line.rsplit(" ", 1)[0] + " " + "f" * 64))
    genuine = load_plan(ROOT / "matrix.yaml").targets["hip-runtime"].content_tag
    proc = run_cli(
        "--matrix", str(matrix), "test", "--image", genuine, "--target", "hip-runtime", "--json", "--suite", "contents"
    )
    assert proc.stdout.strip(), proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    outside = next(t for t in report["tests"] if t["test"] == "test_every_file_accounted_for_from_outside")
    assert proc.returncode == 1 and outside["outcome"] == "failed", outside
    assert "another .deb than matrix.lock records for libamdhip64-5=" in (outside.get("detail") or ""), outside


def test_table_is_well_formed():
    names = [t.name for t in TAMPERING]
    assert len(names) == len(set(names)), "duplicate row ids"
    assert all(t.run and t.findings for t in TAMPERING)
