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
    """Another process (or engine) holds the directory lock. ``held_by_this_process``: the
    holder is an engine of this very process (one still closing, e.g. after a detach on a stalled
    disk), so waiting for it frees the directory; taking another directory would lose its data."""

    def __init__(self, message: str, held_by_this_process: bool = False) -> None:
        super().__init__(message)
        self.held_by_this_process = held_by_this_process


class SsdDirectIoError(SsdError):
    """``direct_io="on"`` but a directory's filesystem refuses O_DIRECT."""
