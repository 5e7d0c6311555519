"""One result of a pre-start check: its level and a message that names the key to change.

``error``: the command refuses (``config validate`` exits 1, ``launch`` starts nothing, the
backend's attach raises); ``warning``: printed, the start goes on; ``note``: what could not be
checked, or where a value came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Level = Literal["error", "warning", "note"]


@dataclass(frozen=True)
class Finding:
    level: Level
    message: str

    def __str__(self) -> str:
        return f"{self.level}: {self.message}"


def errors(findings: list[Finding]) -> list[Finding]:
    """The findings that refuse."""
    return [f for f in findings if f.level == "error"]
