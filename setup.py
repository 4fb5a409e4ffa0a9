"""The metadata is in pyproject.toml; this adds one step to building the package: the git commit
it was built from is written into it (rocmforge/data/build-commit), since an installed package has
no checkout beside it for `rocmforge --version` to ask."""

import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithCommit(build_py):
    def run(self) -> None:
        super().run()
        try:
            proc = subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return  # no git here: the version says "commit unknown"
        commit = proc.stdout.strip()
        if proc.returncode == 0 and commit:
            target = Path(self.build_lib) / "rocmforge" / "data" / "build-commit"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(commit + "\n", encoding="utf-8")


setup(cmdclass={"build_py": BuildPyWithCommit})
