"""``Progress``: how far a long store operation (a resize, a detach, a tenant clear) got, readable
from another thread while it runs (the admin endpoint polls it)."""

from __future__ import annotations

import threading
import time
from typing import Any


class Progress:
    """Thread-safe progress of one operation: a phase, ``done`` of ``total`` units, and notes.

    The operation updates it; readers take ``snapshot()``. It never blocks the operation for
    longer than a dict copy."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._phase = "starting"
        self._done = 0
        self._total = 0
        self._unit = ""
        self._notes: dict[str, Any] = {}
        self._since = time.monotonic()

    def phase(self, name: str, total: int = 0, unit: str = "") -> None:
        """A new phase of ``total`` ``unit``s (0: unknown)."""
        with self._lock:
            self._phase, self._done, self._total, self._unit = name, 0, total, unit

    def advance(self, done: int, total: int | None = None) -> None:
        with self._lock:
            self._done = done
            if total is not None:
                self._total = total

    def note(self, **values: Any) -> None:
        """Figures the result reports (pages moved, bytes given back...)."""
        with self._lock:
            self._notes.update(values)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, value in counts.items():
                self._notes[name] = int(self._notes.get(name, 0)) + value

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "phase": self._phase,
                "done": self._done,
                "total": self._total,
                "unit": self._unit,
                "seconds": round(time.monotonic() - self._since, 3),
                **self._notes,
            }
