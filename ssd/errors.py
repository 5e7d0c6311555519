"""Exceptions raised by the SSD engine (only at open; data-path calls return False instead)."""

from __future__ import annotations


class SsdError(Exception):
    """Base class of engine errors."""


class SsdCorruptionError(SsdError):
    """Recovery in ``strict`` mode found a corrupt or torn entry (message names file and offset)."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path}: offset {offset}: {reason} (strict mode refuses to open; run fsck)")
        self.path = path
        self.offset = offset
        self.reason = reason


class SsdInUseError(SsdError):
    """Another process (or engine) holds the directory lock."""


class SsdDirectIoError(SsdError):
    """``direct_io="on"`` but a directory's filesystem refuses O_DIRECT."""
