"""Faulting memory in ahead of use with the GIL released: ``populate_range`` now, in the caller's
thread; ``ArenaPrefault`` in a background thread, front to back, stoppable.

``madvise(MADV_POPULATE_WRITE)`` (Linux >= 5.14) is called through ctypes
(:func:`~hicache_mooncake.ssd.io.advise_populate`), which releases the GIL for the call.
``mmap.madvise`` holds the GIL, so faulting GiBs in from a background thread with it would stall
every Python thread for seconds. The work is cut into ``CHUNK`` (2 MiB) pieces: the advice holds
the process's mmap lock while it faults a piece in, and every thread that maps memory meanwhile
(Python's allocator does) waits behind it; with 32 MiB pieces a 1M-entry SSD index load beside it
ran 2.5x slower here, with 2 MiB ones ~20%. ``stop`` returns within one piece.

Failure semantics: the advice never changes a byte, so the background fault-in may run while
sets write into the arena. On a kernel without the advice the background fault-in does nothing
(touching pages there would mean writing them, which could race a set): pages are then faulted
in by the sets that use them, as with ``prefault`` off. ``populate_range`` on such a kernel
touches each page (its callers pass memory no slot uses yet). A range the kernel cannot back
(ENOMEM, EFAULT) ends the fault-in with a warning; sets fault in what they use.
"""

from __future__ import annotations

import logging
import mmap
import threading

import numpy as np

from hicache_mooncake.ssd.io import PopulateUnsupported, advise_populate

log = logging.getLogger(__name__)
PAGE = mmap.PAGESIZE
CHUNK = 2 << 20
_STOP_WAIT_S = 10.0


def _advise_populate(view: np.ndarray) -> None:
    """Fault the pages under ``view`` in for writing (GIL released). Raises PopulateUnsupported or
    OSError."""
    advise_populate(view.ctypes.data, view.nbytes)


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
    """Faults ``view`` in from a daemon thread (``hicache-dram-prefault``), front to back."""

    def __init__(self, view: np.ndarray) -> None:
        self._view: np.ndarray | None = view
        self._stop = threading.Event()
        self._done = threading.Event()
        self.completed = False
        self._thread = threading.Thread(target=self._run, name="hicache-dram-prefault", daemon=True)
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
            log.info("DRAM arena: the kernel has no MADV_POPULATE_WRITE; pages fault in as sets use them")
        except OSError as exc:
            log.warning("DRAM arena: prefault stopped at an unbacked range (%s); sets fault in the rest", exc)
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
            log.warning("DRAM arena: prefault did not stop within %.0f s", _STOP_WAIT_S)
