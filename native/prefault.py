"""Faulting memory in ahead of use with the GIL released: ``populate_range`` now, in the caller's
thread; ``ArenaPrefault`` in a background thread, front to back, stoppable. The DRAM tier's arena
uses both; a host-cache client faults its mapping of the host cache's arena in with
``ArenaPrefault`` (``transport.local``), so its first copies into each slot take no page faults.

``populate`` is the native ``madvise(MADV_POPULATE_WRITE)`` (Linux >= 5.14), which releases the
GIL for the call. ``mmap.madvise`` holds the GIL, so faulting GiBs in from a background thread
with it would stall every Python thread for seconds. The work is cut into ``CHUNK`` (2 MiB)
pieces: the advice holds the process's mmap lock while it faults a piece in, and every thread that
maps memory meanwhile (Python's allocator does) waits behind it; with 32 MiB pieces a 1M-entry SSD
index load beside it ran 2.5x slower here, with 2 MiB ones ~20%. ``stop`` returns within one piece.

Failure semantics: the advice never changes a byte, so the background fault-in may run while
sets (or other processes sharing the memory) write into it. On a kernel without the advice the
background fault-in does nothing (touching pages there would mean writing them, which could race
a set): pages are then faulted in by the copies that use them, as with ``prefault`` off.
``populate_range`` on such a kernel touches each page (its callers pass memory no slot uses yet).
A range the kernel cannot back (ENOMEM, EFAULT) ends the fault-in with a warning; copies fault in
what they use.
"""

from __future__ import annotations

import logging
import mmap
import threading

import numpy as np

from .memory import PopulateUnsupported, populate

log = logging.getLogger(__name__)
PAGE = mmap.PAGESIZE
CHUNK = 2 << 20
_STOP_WAIT_S = 10.0


def _advise_populate(view: np.ndarray) -> None:
    """Fault the pages under ``view`` in for writing (GIL released). Raises PopulateUnsupported or
    OSError."""
    populate(view)


def populate_range(view: np.ndarray) -> None:
    """Fault ``view``'s pages in now, ``CHUNK`` at a time; on a kernel without the advice, by
    touching each page (only for memory nothing else writes to yet). Raises OSError."""
    for start in range(0, view.nbytes, CHUNK):
        part = view[start : start + CHUNK]
        try:
            _advise_populate(part)
        except PopulateUnsupported:
            part[::PAGE] |= 0  # a ufunc writes every element (an assignment to itself is skipped)


class ArenaPrefault:
    """Faults ``view`` in from a daemon thread (``hicache-prefault``), front to back; ``what``
    names the memory in its log lines."""

    def __init__(self, view: np.ndarray, what: str = "DRAM arena") -> None:
        self._view: np.ndarray | None = view
        self.what = what
        self._stop = threading.Event()
        self._done = threading.Event()
        self.completed = False
        self._thread = threading.Thread(target=self._run, name="hicache-prefault", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        view = self._view
        assert view is not None
        try:
            for start in range(0, view.nbytes, CHUNK):
                if self._stop.is_set():
                    return
                _advise_populate(view[start : start + CHUNK])
            self.completed = True
        except PopulateUnsupported:
            log.info(
                "%s: the kernel has no MADV_POPULATE_WRITE; pages fault in as copies use them", self.what
            )
        except OSError as exc:
            log.warning(
                "%s: prefault stopped at an unbacked range (%s); copies fault in the rest", self.what, exc
            )
        finally:
            del view
            self._view = None  # the mapping can be closed once no view of it remains
            self._done.set()

    def wait(self, timeout: float) -> bool:
        """True once the fault-in has ended (finished, stopped or failed) within ``timeout``."""
        return self._done.wait(timeout)

    def stop(self) -> None:
        """End the fault-in; returns once the thread no longer touches the memory (within one
        chunk)."""
        self._stop.set()
        self._thread.join(_STOP_WAIT_S)
        if self._thread.is_alive():
            log.warning("%s: prefault did not stop within %.0f s", self.what, _STOP_WAIT_S)
