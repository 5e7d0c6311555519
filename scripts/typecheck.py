"""Run mypy over the installed package layout.

The repository keeps ``tiers/``, ``ssd/`` and ``transport/`` at the top level and installs them as
``hicache_mooncake.tiers`` etc. (see pyproject). mypy does not follow that mapping, so this builds
a throw-away tree of symlinks shaped like the installed package and checks that.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAPPED = {"tiers": "tiers", "ssd": "ssd", "transport": "transport", "native": "native", "tools": "tools"}


def main() -> int:
    # TYPECHECK_DIR lets concurrent runs (several checkouts' worth of edits on one tree) keep apart.
    shadow = Path(os.environ.get("TYPECHECK_DIR", ROOT / "build" / "typecheck")).resolve()
    shutil.rmtree(shadow, ignore_errors=True)
    pkg = shadow / "hicache_mooncake"
    pkg.mkdir(parents=True)
    for entry in (ROOT / "hicache_mooncake").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry)
    for name, src in MAPPED.items():
        (pkg / name).symlink_to(ROOT / src)
    cmd = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(ROOT / "pyproject.toml"),
        "-p",
        "hicache_mooncake",
    ]
    return subprocess.call(cmd, cwd=shadow)


if __name__ == "__main__":
    sys.exit(main())
