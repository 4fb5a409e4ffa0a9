"""`rocmforge completion zsh` in a real zsh (Debian's; scripts/with-engine installs it): the script
loads both ways its help gives, from a folder on $fpath through compinit and through eval, without
an error, and a TAB in an interactive zsh (a pseudo-terminal, zsh/zpty) completes a subcommand and
an option. The text of the script alone proved none of this."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rocmforge import cli

ZSH = shutil.which("zsh")


@pytest.fixture
def zsh() -> str:
    if ZSH is None:
        if os.environ.get("CI"):
            pytest.fail("zsh is not installed (scripts/with-engine installs it; CI requires it)")
        pytest.skip("zsh is not installed (apt-get install zsh)")
    return ZSH


@pytest.fixture
def script_dir(tmp_path: Path, capsys) -> Path:
    """A folder on $fpath holding _rocmforge, written as the installed command writes it."""
    assert cli.main(["completion", "zsh"], argv0="/usr/local/bin/rocmforge") == 0
    folder = tmp_path / "zfunc"
    folder.mkdir()
    (folder / "_rocmforge").write_text(capsys.readouterr().out)
    return folder


def run_zsh(zsh: str, code: str, home: Path) -> subprocess.CompletedProcess:
    # -f: no user or system start-up files, so only what the test sets up is loaded.
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERM": "xterm"}
    return subprocess.run([zsh, "-f", "-c", code], capture_output=True, text=True, env=env, timeout=60)


def test_it_loads_from_fpath_through_compinit(zsh, script_dir, tmp_path):
    proc = run_zsh(
        zsh,
        f"fpath=({script_dir} $fpath); autoload -U compinit; compinit -u -D\n"
        'print -r -- "comp=${_comps[rocmforge]}"\n'
        "autoload +X _rocmforge && whence -w _rocmforge",
        tmp_path,
    )
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    assert "comp=_rocmforge" in proc.stdout and "_rocmforge: function" in proc.stdout, proc.stdout


def test_it_loads_through_eval(zsh, script_dir, tmp_path):
    proc = run_zsh(
        zsh,
        "autoload -U compinit; compinit -u -D\n"
        f'eval "$(<{script_dir / "_rocmforge"})"\n'
        'print -r -- "comp=${_comps[rocmforge]}"',
        tmp_path,
    )
    assert proc.returncode == 0 and not proc.stderr, proc.stderr
    assert "comp=_shtab_rocmforge" in proc.stdout, proc.stdout


@pytest.mark.parametrize(
    "typed,completed", [("rocmforge verify-re", "verify-repro"), ("rocmforge list --gpu-j", "--gpu-jobs")]
)
def test_tab_completes_in_an_interactive_zsh(zsh, script_dir, tmp_path, typed, completed):
    # The line zsh redraws after the TAB; the echo of what was typed never holds it.
    line = typed.rsplit(" ", 1)[0] + " " + completed
    driver = f"""
zmodload zsh/zpty
zpty z {zsh} -f -i
zpty -w z "PS1='>'; fpath=({script_dir} \\$fpath); autoload -U compinit; compinit -u -D; print RE""ADY"
zpty -r -m z out '*READY*'
zpty -w -n z $'{typed}\\t'
seen=
for i in {{1..50}}; do
  while zpty -r -t z chunk; do seen+=$chunk; done
  [[ $seen == *'{line}'* ]] && break
  sleep 0.2
done
zpty -d z
print -r -- "$seen"
"""
    proc = run_zsh(zsh, driver, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert line in proc.stdout, proc.stdout
