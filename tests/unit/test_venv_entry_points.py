"""A torch image's venv gets a twin of every console script its interpreter can see (a base
package's `torchrun`), run by the venv's interpreter; scripts the venv has are left alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "rocmforge" / "data" / "scripts" / "venv_entry_points.py"


def test_base_console_scripts_get_venv_twins(tmp_path):
    base = tmp_path / "base-site"  # stands for the base env's site-packages
    (base / "fakerun-1.0.dist-info").mkdir(parents=True)
    (base / "fakerun-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: fakerun\nVersion: 1.0\n")
    (base / "fakerun-1.0.dist-info" / "entry_points.txt").write_text(
        "[console_scripts]\nfakerun = fakerun.cli:main\npip = fakerun.cli:main\n[other]\nx = fakerun:y\n"
    )
    (base / "fakerun").mkdir()
    (base / "fakerun" / "__init__.py").write_text("")
    (base / "fakerun" / "cli.py").write_text("import sys\ndef main():\n    print(sys.prefix)\n    return 3\n")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (venv / "bin" / "pip").write_text("#!/bin/sh\necho the venv's own pip\n")
    env = {"PYTHONPATH": str(base), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [str(venv / "bin" / "python"), str(SCRIPT)], env=env, capture_output=True, text=True, check=True
    )
    assert "fakerun" in out.stdout
    twin = venv / "bin" / "fakerun"
    assert twin.read_text().splitlines()[0] == f"#!{venv / 'bin' / 'python'}"
    run = subprocess.run([str(twin)], env=env, capture_output=True, text=True)
    assert (run.returncode, run.stdout.strip()) == (3, str(venv))
    assert (venv / "bin" / "pip").read_text() == "#!/bin/sh\necho the venv's own pip\n"  # not replaced
    assert not (venv / "bin" / "x").exists()  # not a console script
