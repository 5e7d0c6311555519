"""Free-space floor on a directory's whole filesystem (``statvfs``), cached briefly.

Other programs share the disk, so the floor is measured, not computed from our own usage.
``FloorGuard.ok(extra)`` answers "would the filesystem keep at least ``min_free_bytes`` free after
``extra`` more bytes are allocated"; errors reading ``statvfs`` answer False (fail closed).
"""

from __future__ import annotations

import os
import threading
import time


def free_bytes(directory: str) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


class FloorGuard:
    def __init__(self, directory: str, min_free_bytes: int, ttl_s: float = 0.2) -> None:
        self.directory = directory
        self.min_free = min_free_bytes
        self._ttl = ttl_s
        self._lock = threading.Lock()
        self._at = 0.0
        self._free = 0

    def free(self, fresh: bool = False) -> int:
        now = time.monotonic()
        with self._lock:
            if fresh or now - self._at > self._ttl:
                try:
                    self._free = free_bytes(self.directory)
                except OSError:
                    self._free = 0
                self._at = now
            return self._free

    def ok(self, extra: int = 0, fresh: bool = False) -> bool:
        if self.min_free <= 0 and extra == 0:
            return True
        return self.free(fresh) - extra >= self.min_free

    def invalidate(self) -> None:
        with self._lock:
            self._at = 0.0
