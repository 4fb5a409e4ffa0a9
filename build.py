#!/usr/bin/env python3
"""rocmforge entry point: `python build.py --target hip-runtime`, `python build.py list`, ..."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rocmforge.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
