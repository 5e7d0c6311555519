"""Result files (benchmarks, replays) that can be committed and compared across machines:
absolute paths of this machine are written relative to the current directory."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def portable(value: Any, base: str | None = None) -> Any:
    """``value`` with every string that holds an absolute path under ``base`` (default: the
    current directory's parent) rewritten relative to the current directory."""
    cwd = os.getcwd()
    root = base or os.path.dirname(cwd)
    if isinstance(value, dict):
        return {k: portable(v, root) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [portable(v, root) for v in value]
    if isinstance(value, str) and root and root != "/" and root in value:
        start = value.index(root)
        end = len(value)
        for stop in (" ", ":", ",", ")"):
            pos = value.find(stop, start)
            if pos != -1:
                end = min(end, pos)
        return value[:start] + os.path.relpath(value[start:end], cwd) + value[end:]
    return value


def write_json(path: str | os.PathLike[str], data: Any) -> None:
    Path(path).write_text(json.dumps(portable(data), indent=2) + "\n", encoding="utf-8")
