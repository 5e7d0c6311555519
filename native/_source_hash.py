"""The hash of the native core's sources (``native/src``), which the build compiles into ``_core``
(``_core.SOURCE_HASH``): at import, a source tree beside the package that no longer matches the
built extension (C edited, not rebuilt) is refused by name instead of failing later as a missing
method or a wrong argument count. setup.py loads this file by path (before anything is built), so
it imports nothing of ours."""

from __future__ import annotations

import hashlib
from pathlib import Path

SUFFIXES = (".c", ".h")


def source_hash(src: Path) -> str:
    """sha256 of every ``.c`` / ``.h`` file under ``src`` (names and bytes, in name order), 16
    hex digits; ``""`` when ``src`` holds none (an installed package ships no sources)."""
    files = sorted(p for p in src.glob("*") if p.suffix in SUFFIXES and p.is_file()) if src.is_dir() else []
    if not files:
        return ""
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
